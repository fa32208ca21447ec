"""The docstring examples and the README quickstart run as written."""

import doctest
import re
from pathlib import Path

import slg_search
import slg_search.envs
import slg_search.search
import slg_search.tail


def test_docstring_examples():
    for module in (slg_search, slg_search.tail, slg_search.search, slg_search.envs):
        result = doctest.testmod(module, raise_on_error=False, verbose=False)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def test_readme_python_blocks_run():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert len(blocks) >= 2
    for i, block in enumerate(blocks):
        namespace: dict = {}
        exec(compile(block, f"README block {i}", "exec"), namespace)
    assert namespace["res"].n_rollouts == 300
