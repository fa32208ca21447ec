"""The docstring examples and the README quickstart run as written."""

import doctest
from pathlib import Path

import slg_search
import slg_search.envs
import slg_search.search
import slg_search.tail

from papershelf.testing import run_readme_python_blocks


def test_docstring_examples():
    for module in (slg_search, slg_search.tail, slg_search.search, slg_search.envs):
        result = doctest.testmod(module, raise_on_error=False, verbose=False)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def test_readme_python_blocks_run():
    readme = Path(__file__).resolve().parent.parent / "README.md"
    namespace = run_readme_python_blocks(readme, at_least=2)
    assert namespace["res"].n_rollouts == 300
