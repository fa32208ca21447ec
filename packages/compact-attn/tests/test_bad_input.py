"""Hostile input at every public entry point: one InputError naming what was wrong, never a silent NaN,
a silently wrong output or a raw TypeError / IndexError / RuntimeError from deep inside torch."""

import math

import pytest
import torch
from compact_attn import (
    AntidiagonalSelector,
    CompactAttention,
    FixedMask,
    MeanPoolSelector,
    PagedKVCache,
    PerHeadBlockSparse,
    TailQuerySelector,
    block_union_tables,
    chunked_prefill,
    dense_chunk_attention,
    make_selector,
    paged_attention,
    quoka_select,
    tables_from_lists,
)
from compact_attn.tables import BlockTables

from papershelf.errors import InputError


def _qkv(N=96, T=32, D=8):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(4, T, D, generator=g)
    k, v = torch.randn(2, N, D, generator=g), torch.randn(2, N, D, generator=g)
    return q, k, v


def _nan(x, idx=(0, 5, 0)):
    x = x.clone()
    x[idx] = float("nan")
    return x


Q, K, V = _qkv()
ONES = torch.ones(2, 1, 4, dtype=torch.bool)
CACHE = PagedKVCache.for_length(96, 16, 2, 8)
CACHE.append(0, K, V)
TABLES = tables_from_lists([[0, 4, 5], [1, 4, 5]])


def _paged(q=Q, tables=TABLES, **kw):
    return paged_attention(q, CACHE.k[0], CACHE.v[0], tables, **{"offset": 64, **kw})


def _bt(rows, lengths):
    t = torch.tensor(rows)
    return BlockTables(t, t.clone(), torch.tensor(lengths))


CASES = [
    # selectors: NaN used to give an arbitrary mask, a float offset a TypeError, a junk mask a RuntimeError
    (lambda: AntidiagonalSelector(stride=4)(_nan(Q), K, offset=64, block=16), "NaN"),
    (lambda: AntidiagonalSelector(stride=4)(Q, _nan(K), offset=64, block=16), "NaN"),
    (lambda: MeanPoolSelector()(_nan(Q), K, offset=64, block=16), "NaN"),
    (lambda: TailQuerySelector()(Q, _nan(K), offset=64, block=16), "NaN"),
    (lambda: TailQuerySelector(queries=32)(Q, K, offset=64, block=16), "block size"),
    (lambda: MeanPoolSelector()(Q, K, offset=64.0, block=16), "offset"),
    (lambda: MeanPoolSelector(threshold="x"), "threshold"),
    (lambda: make_selector("meanpool", stride=4), "meanpool"),
    (lambda: FixedMask(lambda *a: None)(Q, K, offset=64, block=16), "bool mask"),
    (lambda: PerHeadBlockSparse(lambda *a, **kw: None).attend(Q, CACHE, 0), "bool mask"),
    # tables: fractional ids were truncated, a negative page id passed as padding, a short table IndexError'd
    (lambda: block_union_tables(torch.ones(2, 1, 4, dtype=torch.bool), 1, own=[1.5]), "own"),
    (lambda: block_union_tables(ONES, 1, page_table=torch.tensor([-1, 0, 1, 2])), "page_table"),
    (lambda: block_union_tables(ONES, 1, page_table=torch.tensor([0.5, 1, 2, 3])), "page_table"),
    (lambda: tables_from_lists([[0, 5]], page_table=[0, 1]), "page_table"),
    (lambda: tables_from_lists([[-2, 1]]), "negative"),
    (lambda: tables_from_lists([[0.5]]), "integer"),
    # paged attention: unsorted / repeated rows gave a silently wrong output (the torch twin masks only the
    # sorted tail; a repeated block counts twice), NaN q a NaN output, a bad dtype a RuntimeError
    (lambda: _paged(tables=_bt([[5, 0, 4], [0, 4, 5]], [3, 3])), "ascending"),
    (lambda: _paged(tables=_bt([[0, 0, 4, 5], [0, 4, 5, -1]], [4, 3])), "ascending"),
    (lambda: _paged(tables=_bt([[0], [0]], [3, 3])), "lengths"),
    (lambda: _paged(q=_nan(Q)), "NaN"),
    (lambda: _paged(q=Q.double()), "dtype"),
    (lambda: _paged(offset=64.5), "offset"),
    (lambda: _paged(tables=[[0, 4, 5], [1, 4, 5]]), "BlockTables"),
    # the paged cache: NaN keys were stored (then NaN outputs or masks), a float layer a TypeError
    (lambda: PagedKVCache(8, 16, 2, 8).append(0, _nan(K), V), "NaN"),
    (lambda: PagedKVCache(8, 16, 2, 8).append(0, K, _nan(V)), "NaN"),
    (lambda: PagedKVCache(8, 16, 2, 8).append(0.0, K, V), "layer"),
    (lambda: chunked_prefill(Q, _nan(K)[:, :32], V[:, :32], CompactAttention(), chunk=16), "NaN"),
    # baselines: a bad budget was clamped to 0, H=3 over 2 KV heads left a head of torch.empty garbage
    (lambda: quoka_select(Q, K, offset=64, budget=-1), "budget"),
    (lambda: quoka_select(_nan(Q), K, offset=64, budget=0.25), "NaN"),
    (lambda: quoka_select(Q[0], K, offset=64, budget=0.25), "q must be"),
    (lambda: dense_chunk_attention(Q[:3], K, V, offset=64), "multiple of KV heads"),
    (lambda: dense_chunk_attention(Q, K, V, offset=10), "offset"),
    (lambda: dense_chunk_attention(_nan(Q), K, V, offset=64), "NaN"),
]


@pytest.mark.parametrize("call, word", CASES)
def test_hostile_input_is_one_clear_error(call, word):
    with pytest.raises(InputError, match=word):
        call()


def test_nan_keys_leave_the_cache_untouched():
    cache = PagedKVCache(8, 16, 2, 8)
    cache.append(0, K[:, :20], V[:, :20])
    with pytest.raises(InputError, match="NaN"):
        cache.append(0, _nan(K, (0, 25, 0))[:, 20:40], V[:, 20:40])
    assert cache.lengths == [20] and len(cache.page_table) == 2


def test_triton_backend_on_cpu_without_the_interpreter_is_an_input_error(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # as in a user's CPU session
    t = block_union_tables(torch.ones(4, 2, 6, dtype=torch.bool), 2, own=range(4, 6))
    with pytest.raises(InputError, match="CUDA"):
        paged_attention(Q, CACHE.k[0], CACHE.v[0], t, offset=64, backend="triton")


def test_a_valid_call_still_matches_the_unchecked_math():
    """The checks refuse only bad input: a sorted table over the cache equals SDPA over its blocks."""
    out = _paged()
    for g, row in enumerate([[0, 4, 5], [1, 4, 5]]):
        pos = torch.cat([torch.arange(j * 16, (j + 1) * 16) for j in row])
        mask = pos[None, :] <= (64 + torch.arange(32))[:, None]
        want = torch.nn.functional.scaled_dot_product_attention(
            Q[2 * g : 2 * g + 2], K[g, pos][None].expand(2, -1, -1), V[g, pos][None].expand(2, -1, -1),
            attn_mask=mask, scale=1 / math.sqrt(8),
        )  # fmt: skip
        assert (out[2 * g : 2 * g + 2] - want).abs().max().item() < 1e-5
