"""The README's Python blocks run as written."""

from pathlib import Path

from papershelf.testing import run_readme_python_blocks


def test_readme_python_blocks_run():
    readme = Path(__file__).resolve().parent.parent / "README.md"
    namespace = run_readme_python_blocks(readme, at_least=2)
    assert namespace["step"].shape[-1] == 263
