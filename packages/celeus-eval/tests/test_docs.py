"""The docstring examples and the README quickstart run as written."""

import doctest
import re
from pathlib import Path

import celeus_eval
import celeus_eval.celeus


def test_docstring_examples():
    for module in (celeus_eval, celeus_eval.celeus):
        result = doctest.testmod(module, raise_on_error=False, verbose=False)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def test_readme_quickstart_runs():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    first_block = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    namespace: dict = {}
    exec(compile(first_block, "README quickstart", "exec"), namespace)
    res = namespace["res"]
    assert res.reached and res.lower <= namespace["losses"].mean() <= res.upper
