"""The docstring examples and the README quickstart run as written."""

import doctest
import re
from pathlib import Path

import rocket_compress
import rocket_compress.factorize


def test_docstring_examples():
    for mod in (rocket_compress, rocket_compress.factorize):
        result = doctest.testmod(mod, raise_on_error=False, verbose=False)
        assert result.failed == 0 and result.attempted > 0


def test_readme_quickstart_runs():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    first_block = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    namespace: dict = {}
    exec(compile(first_block, "README quickstart", "exec"), namespace)
    report = namespace["report"]
    assert report.params <= report.budget and report.achieved_ratio > 0.29
