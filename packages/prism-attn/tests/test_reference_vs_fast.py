"""The torch fast path equals the plain reference; the reference has the issue's exact properties."""

import itertools

import pytest
import torch
from prism_attn import PrismConfig, attention_loss, decode_step, ops, propose, reference, refine, select_topk
from prism_attn.baselines import QuestCache, quest_metadata, quest_select, sdpa_decode
from prism_attn.data import planted_stack, random_cache


def _stack(n, layers=4, seed=0, **kw):
    qs, Ks, Vs = [], [], []
    for i in range(layers):
        q, K, V = random_cache(n, heads=4, kv_heads=2, head_dim=16, dtype=torch.float64, seed=seed + i, **kw)
        # correlate layers so proposals matter: K drifts slowly from layer to layer
        if Ks:
            K = 0.8 * Ks[-1] + 0.2 * K
        qs.append(q), Ks.append(K), Vs.append(V)
    return qs, Ks, Vs


@pytest.mark.parametrize(
    "method, global_pages, cap, span",
    [
        *[("prism", 1.0, 4.0, 1), ("prism", 0.0, 4.0, 1), ("prism", 0.5, 1.5, 1), ("prism", 1.0, 2.0, 3)],
        *[("oracle", 1.0, 4.0, 1), ("static", 1.0, 4.0, 1), ("quest", 1.0, 4.0, 1), ("dense", 1.0, 4.0, 1)],
    ],
)
def test_decode_step_fast_equals_reference(method, global_pages, cap, span):
    qs, Ks, Vs = _stack(203, batch=2)
    cfg = PrismConfig(
        method=method, kappa=40, block=4, radius=2, local=8, page=8, anchor_every=3,
        global_pages=global_pages, max_candidates=cap, global_span=span,
    )  # fmt: skip
    outs, sels = decode_step(qs, Ks, Vs, cfg, backend="torch")
    ref_outs, ref_sels = reference.decode_step(qs, Ks, Vs, cfg)
    for o, r in zip(outs, ref_outs):
        torch.testing.assert_close(o, r, rtol=1e-10, atol=1e-12)
    for s, r in zip(sels, ref_sels):
        assert (s is None) == (r is None)
        if s is not None:
            assert torch.equal(s, r)


def test_sliced_candidate_scoring_equals_the_reference(monkeypatch):
    """Gathering and scoring candidates in slices (the long-list path) changes nothing."""
    monkeypatch.setattr(ops, "SCORE_SLICE", 7)  # 203 tokens: many slices and a short last one
    qs, Ks, Vs = _stack(203, batch=2)
    cfg = PrismConfig(kappa=40, block=4, radius=2, local=8, anchor_every=3, max_candidates=4.0)
    outs, sels = decode_step(qs, Ks, Vs, cfg, backend="torch")
    ref_outs, ref_sels = reference.decode_step(qs, Ks, Vs, cfg)
    for o, r in zip(outs, ref_outs):
        torch.testing.assert_close(o, r, rtol=1e-10, atol=1e-12)
    for s, r in zip(sels, ref_sels):
        assert (s is None) == (r is None) and (s is None or torch.equal(s, r))
    q, K, _ = random_cache(50, heads=4, kv_heads=2, head_dim=16, dtype=torch.float64, seed=5)
    cand = torch.tensor([[[3, -1, 7, 49, 0, 12, 11, 30, -1]] * 2])
    direct = torch.matmul(ops._grouped(q, 2), ops.gather_rows(K, cand).transpose(-1, -2)) * 0.25
    torch.testing.assert_close(ops.candidate_scores(q, K, cand, 0.25), direct, rtol=1e-12, atol=1e-12)


def test_full_budget_equals_dense_to_1e6():
    q, K, V = random_cache(300, heads=8, kv_heads=2, head_dim=32, dtype=torch.float32, seed=3)
    dense = sdpa_decode(q.double(), K.double(), V.double())
    for method in ("prism", "oracle", "static", "quest"):
        cfg = PrismConfig(method=method, kappa=300, dense_layers=())
        outs, _ = decode_step([q] * 3, [K] * 3, [V] * 3, cfg)
        for o in outs:
            assert (o.double() - dense).abs().max() < 1e-6
    # sparse attention over every index equals dense, float64 to 1e-12
    every = torch.arange(300).expand(1, 2, 300)
    o = ops.sparse_decode(q.double(), K.double(), V.double(), every)
    assert (o - dense).abs().max() < 1e-12


def test_dense_baselines_agree():
    q, K, V = random_cache(257, heads=8, kv_heads=2, head_dim=32, dtype=torch.float64, seed=1)
    ref = reference.dense_attention(q, K, V)
    torch.testing.assert_close(ops.dense_decode(q, K, V), ref)
    torch.testing.assert_close(sdpa_decode(q, K, V), ref)


def test_radius_at_least_n_makes_refinement_the_oracle():
    for seed in range(3):
        q, K, _V = random_cache(150, heads=4, kv_heads=2, head_dim=16, dtype=torch.float64, seed=seed)
        oracle = select_topk(q, K, 20)
        prev = select_topk(q + 0.3 * torch.randn_like(q), K, 20)
        cand = propose(prev, 150, radius=150, block=1, sink=0, local=0)
        assert torch.equal(refine(q, K, cand, 20), oracle)
        assert torch.equal(
            reference.refine(q, K, reference.propose(prev, 150, radius=150, block=1), 20), oracle
        )


def test_planted_spans_drifting_less_than_radius_are_recovered_exactly():
    for seed in range(3):
        qs, Ks, Vs, truth = planted_stack(512, layers=5, spans=3, span_len=8, drift=2, seed=seed)
        cfg = PrismConfig(
            kappa=24, block=1, radius=3, sink=0, local=0, max_candidates=None, dense_layers=(), global_pages=0
        )
        _, sels = decode_step(qs, Ks, Vs, cfg)
        for layer in range(5):
            assert torch.equal(sels[layer], truth[layer]), layer
        # static reuse does not follow the drift (the test can fail)
        _, static = decode_step(qs, Ks, Vs, PrismConfig(method="static", kappa=24, dense_layers=()))
        assert not all(torch.equal(static[i], truth[i]) for i in range(1, 5))


def test_attention_loss_is_non_increasing_in_kappa():
    q, K, _ = random_cache(400, heads=4, kv_heads=2, head_dim=16, dtype=torch.float64, seed=5)
    losses = [attention_loss(q, K, select_topk(q, K, k)).mean().item() for k in (1, 5, 20, 80, 200, 400)]
    assert all(a >= b - 1e-12 for a, b in itertools.pairwise(losses))
    assert losses[-1] == pytest.approx(0.0, abs=1e-12) and losses[0] > 0.5
    ref = reference.attention_loss(q, K, select_topk(q, K, 20))
    torch.testing.assert_close(attention_loss(q, K, select_topk(q, K, 20)), ref)


def test_gqa_grouping_equals_per_head_selection_with_union():
    # a group whose heads look at disjoint spans: the pooled selection is the union of the per-head sets
    qs, Ks, _, truth = planted_stack(256, layers=1, spans=2, span_len=6, heads=2, kv_heads=2, seed=4)
    q2 = qs[0]  # heads 0 and 1, one per KV head
    K = Ks[0]
    per_head = [select_topk(q2[:, h : h + 1], K[:, h : h + 1], 12) for h in range(2)]
    Kg = K[:, :1]  # one KV head shared by both queries: plant head 1's span onto it
    Kg = Kg.clone()
    Kg[0, 0, truth[0][0, 1]] = K[0, 1, truth[0][0, 1]]
    pooled = select_topk(q2, Kg, 24)
    union = torch.cat([truth[0][0, 0], truth[0][0, 1]]).unique()
    assert torch.equal(pooled[0, 0], union)
    assert torch.equal(per_head[0][0, 0], truth[0][0, 0]) and torch.equal(per_head[1][0, 0], truth[0][0, 1])
    # sparse attention with group indices == per-head attention on the repeated cache
    q, Kr, V = random_cache(64, heads=4, kv_heads=2, head_dim=8, dtype=torch.float64, seed=9)
    idx = select_topk(q, Kr, 10)
    grouped = ops.sparse_decode(q, Kr, V, idx)
    per = ops.sparse_decode(
        q, Kr.repeat_interleave(2, 1), V.repeat_interleave(2, 1), idx.repeat_interleave(2, 1)
    )
    torch.testing.assert_close(grouped, per)


def test_propose_fast_equals_reference_with_cap():
    g = torch.Generator().manual_seed(0)
    for n, block, radius, cap in [(100, 1, 2, None), (100, 8, 1, 40), (333, 16, 2, 64), (50, 4, 0, 12)]:
        prev = torch.randint(0, n, (2, 3, 10), generator=g).sort(-1).values
        prev[0, 0, -2:] = -1
        fast = propose(prev, n, radius=radius, block=block, sink=4, local=9, cap=cap)
        ref = reference.propose(prev, n, radius=radius, block=block, sink=4, local=9, cap=cap)
        assert torch.equal(fast, ref)


def test_quest_fast_equals_reference_and_incremental_metadata():
    q, K, _ = random_cache(203, heads=4, kv_heads=2, head_dim=16, dtype=torch.float64, seed=2)
    assert torch.equal(quest_select(q, K, 48, page=8), reference.quest_select(q, K, 48, page=8))
    lo, hi = quest_metadata(K[:, :, :150], 8)
    lo2, hi2 = quest_metadata(K, 8, start_page=150 // 8, out=(lo, hi))
    full = quest_metadata(K, 8)
    assert torch.equal(lo2, full[0]) and torch.equal(hi2, full[1])
    cache = QuestCache(8)
    for n in range(1, 204, 7):  # a growing cache: buffers doubled, only the last page recomputed
        got = cache.update(K[:, :, :n])
        want = quest_metadata(K[:, :, :n], 8)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    # the bound really bounds q·k on every page
    s = torch.einsum("bhd,bhnd->bhn", q, K.repeat_interleave(2, 1))
    qg = q.reshape(1, 2, 2, 16)
    bound = qg.clamp(min=0) @ full[1].transpose(-1, -2) + qg.clamp(max=0) @ full[0].transpose(-1, -2)
    bound = bound.reshape(1, 4, -1).repeat_interleave(8, -1)[..., :203]
    assert (s <= bound + 1e-12).all()


def test_early_decode_cache_shorter_than_kappa_is_dense(recwarn):
    q, K, V = random_cache(10, heads=4, kv_heads=2, head_dim=8, dtype=torch.float64, seed=0)
    outs, sels = decode_step([q] * 2, [K] * 2, [V] * 2, PrismConfig(kappa=64))
    for o in outs:
        torch.testing.assert_close(o, reference.dense_attention(q, K, V))
    assert sels == [None, None] and len(recwarn) == 0


def test_global_term_fast_equals_reference():
    q, K, _ = random_cache(203, heads=4, kv_heads=2, head_dim=16, dtype=torch.float64, seed=7, batch=2)
    g = torch.Generator().manual_seed(1)
    cases = [(8, 5, 4, 9, 1), (4, 60, 0, 0, 1), (16, 2, 20, 30, 1), (8, 100, 4, 9, 1), (4, 6, 4, 9, 3)]
    for block, count, sink, local, span in [*cases, (8, 3, 0, 0, 4), (2, 200, 4, 9, 5)]:
        meta = quest_metadata(K, block * span)
        kw = dict(block=block, sink=sink, local=local, scaling=0.25, span=span)
        fast = ops.global_blocks(q, meta, count, 203, **kw)
        ref = reference.global_blocks(q, K, count, **kw)
        assert torch.equal(fast, ref)
        forced = reference._forced_blocks(203, block, sink, local)
        assert not set(fast.flatten().tolist()) & forced  # never a sink or local block
        nb = -(-203 // block)
        eligible = sum(not forced & set(range(p * span, p * span + span)) for p in range(-(-nb // span)))
        assert fast.shape[-1] == span * min(count, eligible)
        prev = torch.randint(0, 203, (2, 2, 12), generator=g).sort(-1).values
        for cap in (None, 16, 40):
            kw = dict(radius=1, block=block, sink=sink, local=local, cap=cap)
            ref_cand = reference.propose(prev, 203, extra=ref, **kw)
            assert torch.equal(propose(prev, 203, extra=fast, **kw), ref_cand)


def test_global_term_reaches_a_needle_the_local_proposal_cannot():
    # a needle far from the previous layer's spans, carrying most of the last layer's attention
    qs, Ks, Vs, truth = planted_stack(1024, layers=3, spans=2, span_len=8, drift=1, seed=3)
    direction = qs[2].reshape(1, 2, 2, 16).mean(2)
    spans = torch.cat([t.flatten() for t in truth])
    needle = max(range(100, 900), key=lambda t: int((spans - t).abs().min()))
    assert int((spans - needle).abs().min()) > 40  # far outside every span's dilated blocks
    K = Ks[2].clone()
    K[:, :, needle] = 3 * direction / direction.norm(dim=-1, keepdim=True) * 12.0
    Ks = [Ks[0], Ks[1], K]
    kw = dict(kappa=32, block=8, radius=1, dense_layers=())
    for global_pages, found in ((0.0, False), (1.0, True)):
        _, sels = decode_step(qs, Ks, Vs, PrismConfig(global_pages=global_pages, **kw))
        hit = [(sels[2][0, j] == needle).any().item() for j in range(2)]
        assert all(h == found for h in hit), (global_pages, hit)
    loss_local = attention_loss(qs[2], K, decode_step(qs, Ks, Vs, PrismConfig(global_pages=0, **kw))[1][2])
    loss_global = attention_loss(qs[2], K, decode_step(qs, Ks, Vs, PrismConfig(**kw))[1][2])
    assert loss_local.mean() > 0.5 > loss_global.mean() + 0.3


def test_filtered_topk_is_exact_and_falls_back():
    g = torch.Generator().manual_seed(3)
    x = torch.softmax(3 * torch.randn(2, 3, 4, 20000, generator=g), dim=-1).sum(2)
    want = torch.topk(x, 700, dim=-1, sorted=False).indices.sort(dim=-1).values
    got = ops._topk_filtered(x, 700)
    assert got is not None and torch.equal(got, want)
    # rows of ties keep too many entries above the threshold: no answer (the caller uses torch.topk)
    assert ops._topk_filtered(torch.zeros(1, 2, 20000), 700) is None
    # through _topk_sorted on a row long enough to take the filtered path
    y = torch.rand(1, 2, ops._FILTER_MIN, generator=g)
    want = torch.topk(y, 256, dim=-1, sorted=False).indices.sort(dim=-1).values
    assert torch.equal(ops._topk_sorted(y, 256), want)


def test_page_bounds_incremental_equals_fresh_and_contain_the_keys():
    from prism_attn.baselines import quest_metadata

    _, K, _ = random_cache(70, heads=4, kv_heads=2, head_dim=8, dtype=torch.float32, seed=5, batch=2)
    for dtype in (torch.bfloat16, torch.float32):
        grown = ops.PageBounds(8, dtype)
        for n in range(1, 71):  # one token per step, across page ends and buffer doublings
            meta = grown.update(K[:, :, :n])
            fresh = ops.PageBounds(8, dtype).update(K[:, :, :n])
            assert meta.dtype == dtype and torch.equal(meta, fresh)
        lo, hi = quest_metadata(K, 8)
        assert torch.equal(meta[..., :8].float() >= hi, torch.ones_like(hi, dtype=torch.bool))
        assert bool((meta[..., 8:].float() <= lo).all())
        if dtype == torch.float32:
            assert torch.equal(meta, torch.cat([hi, lo], -1))
        else:  # rounded outward by at most one bfloat16 step
            assert bool(((meta[..., :8].float() - hi) <= hi.abs() / 64 + 1e-30).all())


def test_packed_page_bounds_select_as_the_quest_metadata():
    q, K, _ = random_cache(203, heads=4, kv_heads=2, head_dim=16, dtype=torch.float64, seed=7, batch=2)
    for block, count, span in ((8, 5, 1), (4, 6, 3)):
        packed = ops.PageBounds(block * span).update(K)
        kw = dict(block=block, sink=4, local=9, scaling=0.25, span=span)
        fast = ops.global_blocks(q, packed, count, 203, **kw)
        assert torch.equal(fast, ops.global_blocks(q, quest_metadata(K, block * span), count, 203, **kw))
        assert torch.equal(fast, reference.global_blocks(q, K, count, **kw))


def test_bfloat16_global_term_finds_the_needle_in_a_float32_cache():
    qs, Ks, Vs, truth = planted_stack(1024, layers=3, spans=2, span_len=8, drift=1, seed=3)
    qs, Ks, Vs = ([t.float() for t in ts] for ts in (qs, Ks, Vs))
    direction = qs[2].reshape(1, 2, 2, 16).mean(2)
    spans = torch.cat([t.flatten() for t in truth])
    needle = max(range(100, 900), key=lambda t: int((spans - t).abs().min()))
    Ks[2] = Ks[2].clone()
    Ks[2][:, :, needle] = 3 * direction / direction.norm(dim=-1, keepdim=True) * 12.0
    cfg = PrismConfig(kappa=32, block=8, radius=1, dense_layers=())
    assert cfg.global_meta_dtype(torch.float32) == torch.bfloat16
    assert cfg.global_meta_dtype(torch.float64) == torch.float64  # float64 stays exact
    _, sels = decode_step(qs, Ks, Vs, cfg)
    assert all((sels[2][0, j] == needle).any() for j in range(2))


def test_large_kappa_ordering_and_odd_blocks_match_the_reference():
    g = torch.Generator().manual_seed(4)
    x = torch.rand(2, 3, 1500, generator=g, dtype=torch.float64)
    for kappa in (100, 513, 1400):  # sort below 513, the row-mask ordering above
        expect = torch.topk(x, kappa, dim=-1).indices.sort(dim=-1).values
        assert torch.equal(ops._topk_sorted(x, kappa), expect)
    prev = torch.randint(0, 203, (2, 2, 12), generator=g).sort(-1).values
    for block in (3, 5, 8):  # a floor division for odd blocks, a shift for powers of two
        kw = dict(radius=1, block=block, sink=4, local=9, cap=30)
        assert torch.equal(propose(prev, 203, **kw), reference.propose(prev, 203, **kw))


def test_small_budgets_shrink_the_block_and_a_growing_cache_follows():
    assert [PrismConfig().block_for(k) for k in (4096, 1024, 1000, 256, 128, 64)] == [16, 16, 8, 4, 2, 1]
    cfg = PrismConfig(block=16, min_blocks=8)
    assert [cfg.block_for(k) for k in (2048, 128, 100, 64, 32, 3)] == [16, 16, 8, 8, 4, 1]
    assert PrismConfig(block=16, min_blocks=0).block_for(32) == 16
    assert PrismConfig(min_blocks=8, global_min_pages=0).global_count(32) == 8  # κ tokens of 4-token blocks
    assert cfg.global_count(32) == 16 and cfg.global_count(2048) == 128  # the floor binds at small κ only
    assert PrismConfig(global_pages=0).global_count(32) == 0  # no global term: the floor does not apply
    # one decoder over a growing cache whose κ = n/8 crosses the thresholds: equal to the reference
    from prism_attn import PrismDecoder

    qs, Ks, Vs = _stack(400, layers=3)
    cfg = PrismConfig(kappa=0.125, kappa_min=8, block=8, radius=1, local=8, dense_layers=())
    dec = PrismDecoder(cfg, backend="torch")
    for n in (60, 61, 130, 260, 400):  # κ = 8, 8, 17, 33, 50: blocks 1, 1, 2, 4, 4
        outs, sels = [], []
        for layer in range(3):
            o, idx = dec.step(layer, qs[layer], Ks[layer][:, :, :n], Vs[layer][:, :, :n])
            outs.append(o), sels.append(idx)
        ref_outs, ref_sels = reference.decode_step(
            qs, [K[:, :, :n] for K in Ks], [V[:, :, :n] for V in Vs], cfg
        )
        for o, r in zip(outs, ref_outs):
            torch.testing.assert_close(o, r, rtol=1e-10, atol=1e-12)
        for s, r in zip(sels, ref_sels):
            assert (s is None) == (r is None) and (s is None or torch.equal(s, r))


def test_full_budget_through_the_sparse_paths_equals_dense_to_1e6():
    """κ = n in a decoder is served by the dense fallback, so the test above does not reach the sparse
    code; here every sparse path (anchor top-κ + attend, refinement over all candidates + attend, sparse
    attention, the split kernel's torch twin, Quest with all pages) runs with every token, in float32."""
    from prism_attn.kernels import sparse_decode_split_torch

    q, K, V = random_cache(300, heads=8, kv_heads=2, head_dim=32, dtype=torch.float32, seed=3)
    dense = sdpa_decode(q.double(), K.double(), V.double())
    scaling = 32**-0.5
    every = torch.arange(300).expand(1, 2, 300).clone()
    o_anchor, idx = ops.anchor(q, K, V, 300, scaling)
    assert torch.equal(idx, every)
    o_refine, idx = ops.refine_attend(q, K, V, every, 300, scaling)
    assert torch.equal(idx, every)
    cand = propose(every[..., :10], 300, radius=300, block=1)  # radius ≥ n proposes every token
    assert torch.equal(refine(q, K, cand, 300), every)
    outs = [o_anchor, o_refine, ops.sparse_decode(q, K, V, every), sparse_decode_split_torch(q, K, V, every)]
    outs.append(ops.sparse_decode(q, K, V, quest_select(q, K, 300, page=20)))  # 15 pages
    for o in outs:
        assert o.dtype == torch.float32 and (o.double() - dense).abs().max() < 1e-6
