"""The docstring examples and the README quickstart run as written."""

import doctest
import re
from pathlib import Path

import delta_mem


def test_docstring_examples():
    result = doctest.testmod(delta_mem, raise_on_error=False, verbose=False)
    assert result.failed == 0 and result.attempted > 0


def test_readme_quickstart_runs():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    namespace: dict = {}
    exec(compile(block, "README quickstart", "exec"), namespace)
    assert namespace["same"] and namespace["adapter_kb"] < 500
