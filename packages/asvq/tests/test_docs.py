"""The docstring examples and the README quickstart run as written."""

import doctest
import re
from pathlib import Path

import asvq
import asvq.diagnostics
import asvq.quantizers
import asvq.registry
import asvq.search


def test_docstring_examples():
    attempted = 0
    for mod in (asvq, asvq.quantizers, asvq.registry, asvq.search, asvq.diagnostics):
        result = doctest.testmod(mod, raise_on_error=False, verbose=False)
        assert result.failed == 0, mod.__name__
        attempted += result.attempted
    assert attempted > 5


def test_readme_quickstart_runs():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    first_block = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    namespace: dict = {}
    exec(compile(first_block, "README quickstart", "exec"), namespace)
    assert namespace["stats"]["utilization"] > 0
    assert namespace["quantized"].shape == namespace["z"].shape
