"""The docstring examples and the README quickstart run as written."""

import doctest
import re
from pathlib import Path

import compact_attn
from compact_attn import tables


def test_docstring_examples():
    for mod in (compact_attn, tables):
        result = doctest.testmod(mod, raise_on_error=False, verbose=False)
        assert result.failed == 0 and result.attempted > 0


def test_readme_quickstart_runs():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    first_block = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    namespace: dict = {}
    exec(compile(first_block, "README quickstart", "exec"), namespace)
    assert namespace["kept"] >= 0.9 and namespace["compact"].last_fraction < 0.2
