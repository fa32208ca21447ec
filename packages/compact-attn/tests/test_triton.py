"""The Triton paged-attention kernel equals the torch twin under TRITON_INTERPRET=1 (small shapes)."""

import os

import pytest
import torch
from compact_attn import CompactAttention, MeanPoolSelector, PagedKVCache, paged_attention

from papershelf.errors import InputError

pytest.importorskip("triton")


@pytest.fixture
def interpreted(monkeypatch):
    from compact_attn.kernels import paged_attention as mod

    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("TRITON_INTERPRET was set to something else before the session")
    monkeypatch.setattr(mod, "_KERNEL", None)
    yield mod
    mod._KERNEL = None


@pytest.mark.parametrize(
    "N, T, D, alloc", [(90, 40, 24, "shuffled"), (48, 32, 16, "sequential"), (70, 7, 32, "shuffled")]
)
def test_triton_kernel_equals_torch(interpreted, N, T, D, alloc):
    g = torch.Generator().manual_seed(N)
    q = torch.randn(4, T, D, generator=g)
    k, v = torch.randn(2, N, D, generator=g), torch.randn(2, N, D, generator=g)
    cache = PagedKVCache.for_length(N + 16, 16, 2, D, allocation=alloc, seed=1)
    cache.append(0, k, v)
    method = CompactAttention(MeanPoolSelector(budget=0.5))
    t = method.tables(q, cache, 0)
    got = paged_attention(q, cache.k[0], cache.v[0], t, offset=N - T, backend="triton")
    want = paged_attention(q, cache.k[0], cache.v[0], t, offset=N - T, backend="torch")
    assert (got - want).abs().max().item() < 1e-5
    method.backend = "triton"
    assert (method.attend(q, cache, 0) - want).abs().max().item() < 1e-5


def test_triton_needs_a_power_of_two_page(interpreted):
    cache = PagedKVCache(4, 12, 1, 16)
    cache.append(0, torch.randn(1, 20, 16), torch.randn(1, 20, 16))
    t = CompactAttention(MeanPoolSelector(budget=1.0)).tables(torch.randn(2, 20, 16), cache, 0)
    with pytest.raises(InputError, match="power of two"):
        paged_attention(torch.randn(2, 20, 16), cache.k[0], cache.v[0], t, offset=0, backend="triton")
