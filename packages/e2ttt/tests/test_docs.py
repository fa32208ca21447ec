"""The README's Python blocks run as written."""

import re
from pathlib import Path


def test_readme_python_blocks_run():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert len(blocks) >= 2
    for i, block in enumerate(blocks):
        namespace: dict = {}
        exec(compile(block, f"README block {i}", "exec"), namespace)
    assert namespace["step"].shape[-1] == 263
