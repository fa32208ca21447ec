"""The docstring examples and the README quickstart run as written."""

import doctest
import re
from pathlib import Path

import bif_hgp
import numpy as np
import pytest
from bif_hgp import _gp, data, metrics, model


@pytest.mark.parametrize("module", [bif_hgp, metrics, model, data, _gp])
def test_docstring_examples(module):
    result = doctest.testmod(module, raise_on_error=False, verbose=False)
    assert result.failed == 0 and result.attempted > 0


def test_readme_quickstart_runs():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    namespace: dict = {}
    exec(compile(block, "README quickstart", "exec"), namespace)
    res, res2 = namespace["res"], namespace["res2"]
    assert len(res.y) == 10 and np.all(np.isfinite(res.y))
    assert len(res2.y) == 8 and res2.children["temperature"].n_data > res.children["temperature"].n_data
