"""The docstring examples and the README quickstart run as written."""

import doctest
import re
from pathlib import Path

import circle_cil
from circle_cil import circle, data, reservoir, slda


def test_docstring_examples():
    for mod in (circle_cil, circle, data, reservoir, slda):
        result = doctest.testmod(mod, raise_on_error=False, verbose=False)
        assert result.failed == 0, mod.__name__


def test_readme_quickstart_runs():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    first_block = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    namespace: dict = {}
    exec(compile(first_block, "README quickstart", "exec"), namespace)
    assert namespace["acc"] > 0.9
