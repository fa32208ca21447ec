"""The docstring examples and the README quickstart run as written."""

import doctest
import re
from pathlib import Path

import rank_reliability
import rank_reliability.classical
import rank_reliability.components
import rank_reliability.concordance
import rank_reliability.selection


def test_docstring_examples():
    for module in (
        rank_reliability,
        rank_reliability.classical,
        rank_reliability.components,
        rank_reliability.concordance,
        rank_reliability.selection,
    ):
        result = doctest.testmod(module, raise_on_error=False, verbose=False)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def test_readme_quickstart_runs():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    first_block = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    namespace: dict = {}
    exec(compile(first_block, "README quickstart", "exec"), namespace)
    assert 0 < namespace["vc"].g_coefficient() < 1
    assert len(namespace["subset"]) == 100
