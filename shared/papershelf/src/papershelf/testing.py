"""Helpers for package test suites: dtype-aware closeness, markers, statistical assertions.

This module imports pytest; import it from tests only.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from papershelf.device import cuda_available

# Default tolerances by floating dtype name: float64 paths are held to near machine precision.
_TOLERANCES = {
    "float64": (1e-10, 1e-12),
    "float32": (1e-5, 1e-6),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
}

gpu = pytest.mark.gpu
slow = pytest.mark.slow
requires_gpu = pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device")


def _dtype_name(x: Any) -> str:
    dtype = getattr(x, "dtype", None)
    return str(dtype).replace("torch.", "") if dtype is not None else "float64"


def assert_close(actual: Any, expected: Any, *, rtol: float | None = None, atol: float | None = None) -> None:
    """Assert two arrays/tensors/numbers agree, with tolerances chosen by the lower-precision dtype."""
    import numpy as np

    names = [_dtype_name(actual), _dtype_name(expected)]
    loosest = max((_TOLERANCES.get(n, _TOLERANCES["float64"]) for n in names), key=lambda t: t[0])
    rtol = loosest[0] if rtol is None else rtol
    atol = loosest[1] if atol is None else atol
    a = _to_numpy(actual)
    e = _to_numpy(expected)
    np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)


def _to_numpy(x: Any) -> Any:
    import numpy as np

    if hasattr(x, "detach"):  # torch tensor
        x = x.detach().to("cpu")
        if str(x.dtype) == "torch.bfloat16":
            x = x.float()
        x = x.numpy()
    return np.asarray(x)


def rate_upper_bound(p: float, n: int, *, z: float = 3.0) -> float:
    """p + z standard errors of a binomial proportion: the tolerance for a rate that should be ≤ p."""
    return p + z * math.sqrt(p * (1 - p) / n)


def assert_rate_at_most(failures: int, n: int, p: float, *, z: float = 3.0, what: str = "rate") -> None:
    """Assert an observed failure rate does not exceed ``p`` by more than ``z`` Monte-Carlo SEs."""
    bound = rate_upper_bound(p, n, z=z)
    rate = failures / n
    assert rate <= bound, f"{what} {rate:.4f} ({failures}/{n}) exceeds {p} + {z} SE = {bound:.4f}"


def assert_rate_above(failures: int, n: int, p: float, *, z: float = 3.0, what: str = "rate") -> None:
    """Assert an observed rate exceeds ``p`` by more than ``z`` Monte-Carlo SEs (a detectable failure)."""
    bound = rate_upper_bound(p, n, z=z)
    rate = failures / n
    assert rate > bound, f"{what} {rate:.4f} ({failures}/{n}) does not exceed {p} + {z} SE = {bound:.4f}"


def run_readme_python_blocks(readme: str | Path, *, at_least: int = 1) -> dict[str, Any]:
    """Run every ```python block of ``readme`` as written, each in a fresh namespace, and return the
    last block's namespace (so a test can check what it computed). Fails if fewer than ``at_least``
    blocks are found: a renamed fence must not turn the check into one that cannot fail."""
    text = Path(readme).read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= at_least, f"{readme}: {len(blocks)} python block(s), expected >= {at_least}"
    namespace: dict[str, Any] = {}
    for i, block in enumerate(blocks):
        namespace = {}
        exec(compile(block, f"{Path(readme).name} python block {i}", "exec"), namespace)
    return namespace
