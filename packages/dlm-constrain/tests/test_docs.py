"""The docstring examples and the README quickstart run as written."""

import doctest
import re
from pathlib import Path

import dlm_constrain
import dlm_constrain.adapters
import dlm_constrain.automaton
import dlm_constrain.json_schema
import dlm_constrain.model
import dlm_constrain.regex
import dlm_constrain.sampler
import dlm_constrain.tasks


def test_docstring_examples():
    for module in (
        dlm_constrain,
        dlm_constrain.adapters,
        dlm_constrain.automaton,
        dlm_constrain.regex,
        dlm_constrain.json_schema,
        dlm_constrain.sampler,
        dlm_constrain.tasks,
        dlm_constrain.model,
    ):
        result = doctest.testmod(module, raise_on_error=False, verbose=False)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def test_readme_python_blocks_run():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert len(blocks) >= 2
    namespace: dict = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"README block {i}", "exec"), namespace)
    assert namespace["dfa"].accepts(namespace["x"][0].tolist())
