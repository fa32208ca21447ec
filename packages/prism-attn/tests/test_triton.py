"""The Triton sparse-decode kernel equals the torch path under TRITON_INTERPRET=1 (small shapes)."""

import os

import pytest
import torch
from prism_attn import ops
from prism_attn.data import random_cache
from prism_attn.kernels import sparse_decode_split_torch

pytest.importorskip("triton")


def test_torch_twin_of_the_split_kernel_equals_the_fast_path():
    q, K, V = random_cache(80, heads=4, kv_heads=2, head_dim=16, dtype=torch.float64, seed=1)
    idx = torch.randperm(80)[:30].sort().values.expand(1, 2, 30).clone()
    idx[0, 0, -4:] = -1
    for splits in (1, 3, 7):
        torch.testing.assert_close(
            sparse_decode_split_torch(q, K, V, idx, splits=splits), ops.sparse_decode(q, K, V, idx)
        )


@pytest.fixture
def interpreted(monkeypatch):
    """conftest.py sets TRITON_INTERPRET=1 before triton is imported; the kernel is decorated lazily."""
    from prism_attn.kernels import sparse_decode as mod

    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("TRITON_INTERPRET was set to something else before the session")
    monkeypatch.setattr(mod, "_KERNEL", None)
    yield mod
    mod._KERNEL = None


def test_triton_kernel_under_the_interpreter_equals_torch(interpreted):
    cases = [(50, 20, 16, 3), (97, 33, 24, 2), (40, 40, 8, 1), (30, 30, 8, 7)]
    for seed, (n, k, D, splits) in enumerate(cases):
        q, K, V = random_cache(n, heads=4, kv_heads=2, head_dim=D, seed=seed)
        idx = torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:k].sort().values
        idx = idx.expand(1, 2, k).clone()
        idx[0, 1, -5:] = -1
        got = interpreted.sparse_decode_triton(q, K, V, idx, splits=splits, block_n=8)
        want = ops.sparse_decode(q, K, V, idx)
        assert (got - want).abs().max().item() < 1e-5, (seed, splits)


def test_prism_layers_attend_through_the_kernel_with_backend_triton(interpreted, monkeypatch):
    """backend="triton": Prism's refined layers select in torch, then attend through the kernel."""
    import prism_attn.kernels as kernels
    from prism_attn import PrismConfig, PrismDecoder

    calls = []
    kernel = interpreted.sparse_decode_triton
    monkeypatch.setattr(kernels, "sparse_decode_triton", lambda *a, **k: calls.append(1) or kernel(*a, **k))
    cfg = PrismConfig(kappa=12, block=4, local=8, dense_layers=(), anchor_layers=(0,))
    outs = {}
    for backend in ("torch", "triton"):
        dec = PrismDecoder(cfg, backend=backend)
        outs[backend] = []
        for layer in range(3):
            q, K, V = random_cache(60, heads=4, kv_heads=2, head_dim=8, seed=10 + layer)
            outs[backend].append(dec.step(layer, q, K, V))
    assert len(calls) == 2  # the two refined layers; the anchor attends in torch
    for (a, ia), (b, ib) in zip(outs["torch"], outs["triton"]):
        assert (a - b).abs().max().item() < 1e-5
        assert ia is None or torch.equal(ia, ib)
