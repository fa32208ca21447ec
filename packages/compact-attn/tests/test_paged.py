"""Paged attention over tables equals dense attention with the broadcast mask; the chunked driver and
the baselines equal their references; bad input is refused clearly."""

import math

import pytest
import torch
import torch.nn.functional as F
from compact_attn import (
    AntidiagonalSelector,
    BoundSelector,
    CompactAttention,
    DenseAttention,
    FixedMask,
    MeanPoolSelector,
    PagedKVCache,
    PerHeadBlockSparse,
    QuokaAttention,
    block_union_tables,
    chunk_spans,
    chunked_prefill,
    own_blocks,
    paged_attention,
    tables_from_lists,
)
from compact_attn.reference import (
    causal_mask,
    masked_attention_reference,
    row_block_token_mask,
    table_token_mask,
)

from papershelf.errors import InputError


def _data(H=4, Hkv=2, N=150, D=8, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(H, N, D, generator=g, dtype=dtype),
        torch.randn(Hkv, N, D, generator=g, dtype=dtype),
        torch.randn(Hkv, N, D, generator=g, dtype=dtype),
    )


@pytest.mark.parametrize("impl", ["sdpa", "matmul"])
@pytest.mark.parametrize("allocation", ["sequential", "shuffled"])
@pytest.mark.parametrize("offset, T, B", [(96, 32, 16), (70, 41, 16), (0, 50, 8), (120, 1, 8)])
def test_paged_attention_equals_dense_with_broadcast_mask(impl, allocation, offset, T, B):
    q, k, v = _data(N=offset + T)
    N = offset + T
    cache = PagedKVCache.for_length(N + 20, B, 2, 8, dtype=torch.float64, allocation=allocation, seed=3)
    cache.append(0, k, v)
    Kb = math.ceil(N / B)
    g = torch.Generator().manual_seed(offset + T)
    masks = torch.rand(4, math.ceil(T / B), Kb, generator=g) < 0.3
    t = block_union_tables(masks, 2, own=own_blocks(offset, T, B), page_table=cache.page_table)
    got = paged_attention(q[:, offset:], cache.k[0], cache.v[0], t, offset=offset, impl=impl)
    want = masked_attention_reference(q[:, offset:], k, v, table_token_mask(t.as_lists(), 4, T, N, offset, B))
    assert (got - want).abs().max().item() < 1e-5


def test_all_ones_masks_give_dense_attention():
    q, k, v = _data(N=128, dtype=torch.float32)
    full = F.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 0), v.repeat_interleave(2, 0), is_causal=True
    )

    def all_ones(q, k, off, B):
        return torch.ones(4, math.ceil(q.shape[1] / B), math.ceil(k.shape[1] / B), dtype=torch.bool)

    ones = CompactAttention(FixedMask(all_ones))
    for method in (
        ones,
        CompactAttention(MeanPoolSelector(budget=1.0)),
        DenseAttention("sdpa"),
        DenseAttention("matmul"),
    ):
        out, fractions = chunked_prefill(q, k, v, method, chunk=32, page_size=16, allocation="shuffled")
        assert (out - full).abs().max().item() < 1e-5, type(method).__name__
    assert fractions == [1.0] * 4


@pytest.mark.parametrize(
    "selector",
    [AntidiagonalSelector(stride=4, budget=0.3), MeanPoolSelector(budget=2), BoundSelector(budget=2)],
)
@pytest.mark.parametrize("chunk", [32, 40])  # 40: not a multiple of the page size (chunks start mid-page)
def test_chunked_compact_equals_reference_per_chunk(selector, chunk):
    q, k, v = _data(N=150)
    method = CompactAttention(selector)
    out, fractions = chunked_prefill(q, k, v, method, chunk=chunk, page_size=16, allocation="shuffled")
    cache = PagedKVCache.for_length(150, 16, 2, 8, dtype=torch.float64)
    for (s, e), f in zip(chunk_spans(150, chunk), fractions):
        cache.append(0, k[:, s:e], v[:, s:e])
        t = method.tables(q[:, s:e], cache, 0)
        want = masked_attention_reference(q[:, s:e], k[:, :e], v[:, :e],
                                          table_token_mask(t.as_lists(), 4, e - s, e, s, 16))  # fmt: skip
        assert (out[:, s:e] - want).abs().max().item() < 1e-5
        assert f == pytest.approx(t.lengths.double().mean().item() / math.ceil(e / 16))


def test_budget_sets_the_table_size():
    q, k, v = _data(N=320)
    cache = PagedKVCache.for_length(320, 16, 2, 8, dtype=torch.float64)
    cache.append(0, k, v)
    for sel in (AntidiagonalSelector(stride=4, budget=0.25), MeanPoolSelector(budget=0.25)):
        t = CompactAttention(sel).tables(q[:, 256:], cache, 0)
        assert t.lengths.tolist() == [4 + 4, 4 + 4]  # 4 own blocks + ⌈0.25 · 16 past blocks⌉


def test_per_head_block_sparse_equals_its_row_mask_reference():
    q, k, v = _data(N=96)
    sel = AntidiagonalSelector(stride=4, budget=0.3)
    cache = PagedKVCache.for_length(96, 16, 2, 8, dtype=torch.float64, allocation="shuffled")
    cache.append(0, k, v)
    out = PerHeadBlockSparse(sel).attend(q[:, 64:], cache, 0)
    masks = sel(q[:, 64:], k, offset=64, block=16)
    want = masked_attention_reference(q[:, 64:], k, v, row_block_token_mask(masks, 32, 96, 64, 16))
    assert (out - want).abs().max().item() < 1e-5
    # the union reads a superset of every row, so CompactAttention recalls at least as much
    t = block_union_tables(masks, 2, own=own_blocks(64, 32, 16))
    rows = row_block_token_mask(masks, 32, 96, 64, 16)
    assert bool((rows <= table_token_mask(t.as_lists(), 4, 32, 96, 64, 16)).all())


def test_quoka_equals_dense_over_its_gathered_keys():
    q, k, v = _data(N=200)
    cache = PagedKVCache.for_length(200, 16, 2, 8, dtype=torch.float64)
    cache.append(0, k, v)
    m = QuokaAttention(0.25, n_queries=8)
    out = m.attend(q[:, 160:], cache, 0)
    idx = m.last_index
    assert idx.shape == (2, 40 + 40) and bool((idx[:, -40:] == torch.arange(160, 200)).all())
    mask = torch.zeros(4, 40, 200, dtype=torch.bool)
    for h in range(4):
        mask[h, :, idx[h // 2]] = True
    mask &= causal_mask(40, 200, 160)
    assert (out - masked_attention_reference(q[:, 160:], k, v, mask)).abs().max().item() < 1e-5


def test_first_chunk_with_an_empty_cache_works_for_every_method():
    q, k, v = _data(N=32)
    want = masked_attention_reference(q, k, v, causal_mask(32, 32, 0).expand(4, 32, 32))
    for m in (
        CompactAttention(),
        CompactAttention(MeanPoolSelector()),
        QuokaAttention(),
        PerHeadBlockSparse(),
    ):
        out, _ = chunked_prefill(q, k, v, m, chunk=32, page_size=16)
        assert (out - want).abs().max().item() < 1e-5


def test_bad_input():
    q, k, v = _data(H=3, N=32)
    with pytest.raises(InputError, match="multiple of KV heads"):
        chunked_prefill(q, k, v, CompactAttention(), chunk=16, page_size=16)
    q, k, v = _data(N=32)
    cache = PagedKVCache(2, 16, 2, 8, dtype=torch.float64)
    with pytest.raises(InputError, match="append the chunk"):
        CompactAttention().attend(q[:, :16], cache, 0)
    cache.append(0, k, v)
    with pytest.raises(InputError, match="full"):
        cache.append(0, k[:, :1], v[:, :1])
    bad = tables_from_lists([[0, 5], [1]])
    with pytest.raises(InputError, match="outside the cache"):
        paged_attention(q[:, 16:], cache.k[0], cache.v[0], bad, offset=16)
    with pytest.raises(InputError, match="head_dim"):
        cache.append(0, k[..., :4], v[..., :4])
    with pytest.raises(InputError, match="stride"):
        AntidiagonalSelector(stride=5)(q, k, offset=0, block=16)
    with pytest.raises(InputError, match="budget"):
        MeanPoolSelector(budget=1.5)(q[:, 16:], k, offset=16, block=16)
    with pytest.raises(InputError, match="bool mask"):
        FixedMask(torch.ones(4, 1, 1))(q, k, offset=0, block=16)
    with pytest.raises(InputError, match="chunk"):
        chunk_spans(10, 0)
    with pytest.raises(InputError, match="no visible key"):
        paged_attention(q[:, 16:], cache.k[0], cache.v[0], tables_from_lists([[], []]), offset=16)
    with pytest.raises(InputError, match="q contains NaN"):
        CompactAttention().attend(q[:, 16:].masked_fill(q[:, 16:] > 1, float("nan")), cache, 0)
    with pytest.raises(InputError, match="dtype"):
        CompactAttention().attend(q[:, 16:].float(), cache, 0)
    with pytest.raises(InputError, match="layer must be an index"):
        CompactAttention().attend(q[:, 16:], cache, 1)
    for bad_scaling in (0, -1.0, float("nan")):
        with pytest.raises(InputError, match="scaling"):
            CompactAttention().attend(q[:, 16:], cache, 0, scaling=bad_scaling)
    for kw in ({"budget": 0}, {"budget": -1}, {"budget": 1.5}, {"n_queries": 0}):
        with pytest.raises(InputError, match=r"budget|n_queries"):
            QuokaAttention(**kw)
    with pytest.raises(InputError, match="page_size"):
        PagedKVCache.for_length(32, 0, 2, 8)


def test_truncate_restores_the_state_of_a_shorter_cache():
    """Rolling back equals never having written: same keys, key sums, block means and page table."""
    g = torch.Generator().manual_seed(0)
    k, v = torch.randn(2, 30, 4, generator=g), torch.randn(2, 30, 4, generator=g)
    for allocation in ("sequential", "shuffled"):
        short = PagedKVCache(6, 8, 2, 4, layers=2, allocation=allocation)
        long = PagedKVCache(6, 8, 2, 4, layers=2, allocation=allocation)
        for layer in range(2):
            short.append(layer, k[:, :13], v[:, :13])
            long.append(layer, k[:, :13], v[:, :13])
        long.append(0, k[:, 13:30], v[:, 13:30])  # layer 0 ran ahead, layer 1 failed
        long.truncate(13)
        assert long.lengths == [13, 13] and torch.equal(long.page_table, short.page_table)
        for layer in range(2):
            assert torch.equal(long.logical_keys(layer), short.logical_keys(layer))
            torch.testing.assert_close(long.block_means(layer), short.block_means(layer))
            assert all(map(torch.equal, long.block_bounds(layer), short.block_bounds(layer)))
        long.append(0, k[:, 13:30], v[:, 13:30])  # the freed pages are handed out again, in order
        short.append(0, k[:, 13:30], v[:, 13:30])
        assert torch.equal(long.page_table, short.page_table)
        torch.testing.assert_close(long.block_means(0), short.block_means(0))
        assert all(map(torch.equal, long.block_bounds(0), short.block_bounds(0)))
        assert torch.equal(long.k[0], short.k[0]) and torch.equal(long.v[0], short.v[0])
