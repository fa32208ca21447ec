"""Both selectors find planted query-specific blocks; the mask policies behave as documented."""

import pytest
import torch
from compact_attn import (
    AntidiagonalSelector,
    BoundSelector,
    CompactAttention,
    MeanPoolSelector,
    PagedKVCache,
    QuokaAttention,
    TailQuerySelector,
)
from compact_attn.data import planted_chunk
from compact_attn.selectors import block_bounds, block_causal, mass_before, score_bounds, tail_rows

from papershelf.errors import InputError


@pytest.mark.parametrize(
    "selector",
    [
        AntidiagonalSelector(stride=4, budget=0.125),
        MeanPoolSelector(budget=0.125),
        BoundSelector(budget=0.125),
        TailQuerySelector(budget=0.125),
    ],
)
def test_planted_needle_blocks_are_selected(selector):
    q, k, v, truth = planted_chunk(2048, 128, block=16, needles=3, strength=4.0, seed=1)
    cache = PagedKVCache.for_length(2048, 16, 2, 32)
    cache.append(0, k, v)
    t = CompactAttention(selector).tables(q, cache, 0).as_lists()
    found = [len(set(truth[h]) & set(t[h // 4])) / len(truth[h]) for h in range(8)]
    assert sum(found) / 8 >= 0.9, found


def test_threshold_masks_grow_with_tau():
    q, k, _, _ = planted_chunk(512, 64, block=16, seed=2)
    sizes = [
        int(AntidiagonalSelector(stride=4, threshold=t)(q, k, offset=448, block=16).sum())
        for t in (0.3, 0.6, 0.9)
    ]
    assert sizes[0] <= sizes[1] <= sizes[2]
    m = MeanPoolSelector(threshold=0.5)(q, k, offset=448, block=16)
    assert bool(m.any(-1).all())  # every row keeps at least one block


def test_scores_are_row_distributions_over_visible_blocks():
    q, k, _, _ = planted_chunk(300, 40, block=16, seed=3)
    for sel in (
        AntidiagonalSelector(stride=4),
        MeanPoolSelector(),
        BoundSelector(),
        BoundSelector(pool="mean"),
        TailQuerySelector(queries=4),
    ):
        P = sel.scores(q, k, offset=260, block=16)
        assert P.shape == (8, 3, 19)
        assert (P.sum(-1) - 1).abs().max().item() < 1e-5
        assert float(P[:, ~block_causal(40, 260, 16, 19)].abs().sum()) == 0.0


def test_compact_recalls_more_than_quoka_on_query_specific_blocks():
    q, k, v, truth = planted_chunk(4096, 256, block=16, needles=4, strength=4.0, seed=4)
    cache = PagedKVCache.for_length(4096, 16, 2, 32)
    cache.append(0, k, v)
    t = CompactAttention(MeanPoolSelector(budget=0.1)).tables(q, cache, 0).as_lists()
    m = QuokaAttention(0.1, n_queries=16)
    m.attend(q, cache, 0)
    idx = m.last_index
    ours = sum(len(set(truth[h]) & set(t[h // 4])) for h in range(8))
    theirs = sum(len(set(truth[h]) & set((idx[h // 4] // 16).tolist())) for h in range(8))
    assert ours >= theirs


def _past_union(mask, kv_heads, own_start):
    Kb = mask.shape[-1]
    return mask.reshape(kv_heads, -1, Kb).any(1)[:, :own_start]


@pytest.mark.parametrize("rule", ["max", "mass"])
@pytest.mark.parametrize("sink", [0, 1])
def test_budget_union_is_exactly_the_budget_set(rule, sink):
    q, k, _, _ = planted_chunk(1024, 128, block=16, seed=5)
    sel = AntidiagonalSelector(stride=4, budget=6, rule=rule, sink=sink)
    m = sel(q, k, offset=896, block=16)
    past = _past_union(m, 2, 56)
    assert past.sum(1).tolist() == [6, 6]  # the rows' union holds exactly the budget's past blocks
    if sink:
        assert bool(past[:, 0].all())
    t = CompactAttention(sel).tables(q, _cache(q, k), 0)
    assert t.lengths.tolist() == [6 + 8, 6 + 8]  # + the chunk's 8 own blocks, nothing else


def _cache(q, k):
    cache = PagedKVCache.for_length(k.shape[1], 16, 2, 32)
    cache.append(0, k, torch.zeros_like(k))
    return cache


def test_mass_rule_is_the_threshold_rule_with_own_blocks_first():
    """mass_before against an explicit loop (float64), and ranking by its group minimum is what a
    cumulative-mass threshold τ keeps: the union of the rows' {j : before_j < τ}."""
    g = torch.Generator().manual_seed(0)
    P = torch.rand(4, 3, 12, generator=g, dtype=torch.float64) ** 4
    own = range(9, 12)
    got = mass_before(P, own)
    for h in range(4):
        for b in range(3):
            row = P[h, b]
            for j in range(9):
                above = sum(float(row[i]) for i in range(9) if row[i] > row[j])
                want = (float(row[own.start :].sum()) + above) / float(row.sum())
                assert abs(float(got[h, b, j]) - want) < 1e-12
    sel = MeanPoolSelector(budget=3, rule="mass")
    mask = sel.mask_from_scores(P, 1, offset=144, T=48, block=16)
    kept = set(torch.nonzero(mask.any((0, 1))[:9]).flatten().tolist())
    best = got[..., :9].amin((0, 1))
    tau = float(best.sort().values[3])  # the 4th smallest: a τ that admits exactly 3 past blocks
    by_threshold = set(torch.nonzero((got[..., :9] < tau).any(1).any(0)).flatten().tolist())
    assert kept == by_threshold and len(kept) == 3


def test_max_pooled_antidiagonal_scores_are_row_distributions():
    q, k, _, _ = planted_chunk(300, 40, block=16, seed=3)
    P = AntidiagonalSelector(stride=4, pool="max").scores(q, k, offset=260, block=16)
    assert (P.sum(-1) - 1).abs().max().item() < 1e-5
    assert float(P[:, ~block_causal(40, 260, 16, 19)].abs().sum()) == 0.0


@pytest.mark.parametrize(
    "kw, word", [({"rule": "top"}, "rule"), ({"sink": -1}, "sink"), ({"pool": "median"}, "pool")]
)
@pytest.mark.parametrize("cls", [AntidiagonalSelector, BoundSelector])
def test_bad_selection_options(cls, kw, word):
    with pytest.raises(InputError, match=word):
        cls(**kw)


def test_block_bounds_bound_every_score_and_are_exact_for_one_key_blocks():
    """U[h, t, j] = q⁺·kmax + q⁻·kmin ≥ q_t·k_i for every key i of block j; with blocks of one token U is
    q·k exactly, so the mean-pooled bound scores are the dense causal softmax."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn(4, 9, 6, generator=g, dtype=torch.float64)
    k = torch.randn(2, 41, 6, generator=g, dtype=torch.float64)
    lo, hi = block_bounds(k, 8)
    assert lo.shape == hi.shape == (2, 6, 6)
    scores = torch.einsum("htd,hnd->htn", q, k.repeat_interleave(2, 0))  # (4, 9, 41)
    U = score_bounds(q, lo, hi)  # the bound selector's U (before 1/√D)
    for j in range(6):
        assert bool((U[..., j] >= scores[..., 8 * j : 8 * j + 8].amax(-1) - 1e-12).all())
    P = BoundSelector(pool="mean").scores(q, k, offset=32, block=1)  # block 1: exact attention
    causal = torch.arange(41)[None, :] <= (32 + torch.arange(9))[:, None]
    want = torch.softmax((scores / 6**0.5).masked_fill(~causal, float("-inf")), -1)
    torch.testing.assert_close(P, want, rtol=0, atol=1e-12)


def _spike_chunk(query: int):
    """A chunk of 64 queries (2 heads, one KV head, d 16) at 512 tokens whose query ``query`` of head 0
    copies the single key 100 (block 6 of 16 tokens); everything else is small noise."""
    g = torch.Generator().manual_seed(6)
    D, N, T = 16, 512, 64
    q = 0.3 * torch.randn(2, T, D, generator=g)
    k = 0.3 * torch.randn(1, N, D, generator=g)
    u = torch.randn(D, generator=g)
    u /= u.norm()
    k[0, 100] = 6.0 * u
    q[0, query] = 6.0 * u
    return q, k


def _kept_past_blocks(selector, q, k) -> set[int]:
    mask = selector(q, k, offset=512 - 64, block=16)
    return set(torch.nonzero(mask.any((0, 1))[: (512 - 64) // 16]).flatten().tolist())


def test_bound_selector_keeps_one_querys_spike_that_averaging_loses():
    """One query of the chunk attends to a single far key: with a one-block budget the bound selector
    (max over the Q-block) keeps that block; the mean-pooled estimate does not."""
    q, k = _spike_chunk(50)
    assert _kept_past_blocks(BoundSelector(budget=1), q, k) == {6}
    assert _kept_past_blocks(MeanPoolSelector(budget=1), q, k) != {6}


def test_the_caches_block_bounds_equal_the_keys_bounds():
    g = torch.Generator().manual_seed(7)
    k, v = torch.randn(2, 70, 4, generator=g), torch.randn(2, 70, 4, generator=g)
    cache = PagedKVCache(5, 16, 2, 4, allocation="shuffled")
    for s, e in ((0, 5), (5, 40), (40, 70)):  # appends that start and end mid-page
        cache.append(0, k[:, s:e], v[:, s:e])
    for got, want in zip(cache.block_bounds(0), block_bounds(k, 16)):
        assert torch.equal(got, want)
    with pytest.raises(InputError, match="key_bounds"):
        BoundSelector().scores(torch.randn(4, 6, 4), k, offset=64, block=16, key_bounds=block_bounds(k, 8))


def test_pooled_allocation_keeps_the_total_budget_and_takes_the_best_blocks_of_all_groups():
    """alloc="pooled": the kv_heads·budget past blocks with the largest group priority over both KV heads
    (checked against an explicit sort), the chunk's own blocks in every table, same total KV read."""
    g = torch.Generator().manual_seed(7)
    H, Qb, Kb, own_start = 8, 2, 12, 10  # 2 KV groups of 4 heads; blocks 10, 11 are the chunk's own
    P = torch.rand(H, Qb, Kb, generator=g, dtype=torch.float64)
    P[:4] **= 8  # group 0 concentrated, group 1 spread: pooled moves blocks to group 1
    kw = dict(offset=own_start * 16, T=2 * 16, block=16)
    head = MeanPoolSelector(budget=3).mask_from_scores(P, 2, **kw)
    pooled = MeanPoolSelector(budget=3, alloc="pooled").mask_from_scores(P, 2, **kw)
    past_h, past_p = _past_union(head, 2, own_start), _past_union(pooled, 2, own_start)
    assert past_h.sum(1).tolist() == [3, 3]
    assert int(past_p.sum()) == 6  # same total, split by priority
    best = P.reshape(2, 4 * Qb, Kb).amax(1)[:, :own_start]
    want = set(best.flatten().topk(6).indices.tolist())
    assert set(torch.nonzero(past_p.flatten()).flatten().tolist()) == want
    assert bool(pooled.reshape(2, -1, Kb).any(1)[:, own_start:].all())  # own blocks in both tables
    assert past_p.sum(1).tolist() != [3, 3]  # this P does move blocks between the groups


def test_alloc_is_validated():
    with pytest.raises(InputError, match="alloc"):
        MeanPoolSelector(alloc="global")
    with pytest.raises(InputError, match="alloc"):
        AntidiagonalSelector(alloc="")


def _tail_reference(q, k, offset, block, queries):
    """P straight from the definition, one query at a time in float64: softmax over the visible keys,
    summed per KV block, max over the last ``queries`` queries of each Q-block, renormalised."""
    H, T, D = q.shape
    Hkv, N, _ = k.shape
    Kb = -(-N // block)
    out = torch.zeros(H, -(-T // block), Kb, dtype=torch.float64)
    for h in range(H):
        kh = k[h // (H // Hkv)].double()
        for b in range(out.shape[1]):
            start, end = b * block, min((b + 1) * block, T)
            for t in range(max(start, end - queries), end):
                p = torch.softmax(q[h, t].double() @ kh[: offset + t + 1].T / D**0.5, -1)
                per_block = torch.zeros(Kb, dtype=torch.float64).index_add_(
                    0, torch.arange(offset + t + 1) // block, p
                )
                out[h, b] = torch.maximum(out[h, b], per_block)
    return out / out.sum(-1, keepdim=True)


@pytest.mark.parametrize("T, offset, block, queries", [(100, 60, 16, 4), (37, 91, 8, 8), (5, 64, 16, 8)])
def test_tail_selector_equals_its_definition(T, offset, block, queries):
    """Including a last Q-block shorter than ``queries`` (37 = 4·8 + 5; a 5-query chunk)."""
    g = torch.Generator().manual_seed(8)
    q = torch.randn(4, T, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, offset + T, 8, generator=g, dtype=torch.float64)
    got = TailQuerySelector(queries=queries).scores(q, k, offset=offset, block=block)
    torch.testing.assert_close(got, _tail_reference(q, k, offset, block, queries), rtol=0, atol=1e-12)
    # every query scored: exact per-query block probabilities, max over the Q-block (stride-1 antidiagonal)
    full = TailQuerySelector(queries=block).scores(q, k, offset=offset, block=block)
    exact = AntidiagonalSelector(stride=1, pool="max").scores(q, k, offset=offset, block=block)
    torch.testing.assert_close(full, exact, rtol=0, atol=1e-12)


def test_tail_selector_reads_only_the_last_queries_of_each_q_block():
    """A query outside the tails does not change the scores; one inside does. tail_rows are the last
    ``queries`` positions of each Q-block."""
    assert tail_rows(40, 16, 3).tolist() == [15, 14, 13, 31, 30, 29, 39, 38, 37]
    assert tail_rows(2, 16, 3).tolist() == [1, 0, 0]
    g = torch.Generator().manual_seed(9)
    q, k = torch.randn(4, 48, 8, generator=g), torch.randn(2, 112, 8, generator=g)
    sel = TailQuerySelector(queries=4)
    base = sel.scores(q, k, offset=64, block=16)
    q2 = q.clone()
    q2[:, 3] += 5.0  # position 3 of Q-block 0: not among its last 4
    assert torch.equal(sel.scores(q2, k, offset=64, block=16), base)
    q2[:, 15] += 5.0  # the last query of Q-block 0
    assert not torch.equal(sel.scores(q2, k, offset=64, block=16), base)


def test_tail_selector_keeps_the_block_its_last_query_copies():
    """The spike of test_bound_selector_keeps_one_querys_spike_that_averaging_loses, now on the last
    query of a Q-block: with a one-block budget the tail selector keeps exactly that block."""
    q, k = _spike_chunk(47)  # the last query of Q-block 2
    assert _kept_past_blocks(TailQuerySelector(budget=1, queries=2), q, k) == {6}


@pytest.mark.parametrize("kw, word", [({"queries": 0}, "queries"), ({"queries": 2.0}, "queries")])
def test_bad_tail_options(kw, word):
    with pytest.raises(InputError, match=word):
        TailQuerySelector(**kw)
    with pytest.raises(InputError, match="at most the block size"):
        TailQuerySelector(queries=32).scores(torch.randn(4, 8, 4), torch.randn(2, 24, 4), offset=16, block=16)
