"""The docstring examples and the README quickstart run as written."""

import doctest
import importlib
import re
from pathlib import Path

import pytest

MODULES = [
    "entropy_unmask",
    "entropy_unmask.predictors",
    "entropy_unmask.schedules",
    "entropy_unmask.baselines",
    "entropy_unmask.exact",
    "entropy_unmask.sampling",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), raise_on_error=False, verbose=False)
    assert result.failed == 0


def test_readme_quickstart_runs():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    ns: dict = {}
    exec(compile(block, "README quickstart", "exec"), ns)
    assert ns["res"].kl < 0.05 and ns["res"].expected_iterations < 10
