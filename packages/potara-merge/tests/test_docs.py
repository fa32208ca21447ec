"""The README's Python blocks run as written."""

from pathlib import Path

from papershelf.testing import run_readme_python_blocks


def test_readme_python_blocks_run():
    readme = Path(__file__).resolve().parent.parent / "README.md"
    namespace = run_readme_python_blocks(readme, at_least=2)
    assert 0.0 <= namespace["info"].total.weight <= 1.0
    assert set(namespace["merged_state"]) == set(namespace["fed_state"])
