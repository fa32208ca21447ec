"""Hostile inputs: one clear InputError naming the argument; short caches fall back to dense silently."""

import pytest
import torch
from prism_attn import (
    PrismConfig,
    PrismDecoder,
    attention_loss,
    decode_step,
    propose,
    refine,
    select_topk,
    sparse_decode,
)
from prism_attn.data import random_cache

from papershelf.errors import InputError


@pytest.fixture
def qkv():
    return random_cache(64, heads=4, kv_heads=2, head_dim=8, seed=0)


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"kappa": 0}, "kappa"),
        ({"kappa": -3}, "kappa"),
        ({"kappa": 1.5}, "kappa"),
        ({"kappa": "many"}, "kappa"),
        ({"radius": -1}, "radius"),
        ({"block": 0}, "block"),
        ({"method": "magic"}, "method"),
        ({"max_candidates": 0.5}, "max_candidates"),
        ({"anchor_layers": (3, 5), "dense_layers": ()}, "anchor_layers"),
        ({"anchor_layers": 3}, "anchor_layers"),
        ({"dense_layers": (-1,)}, "dense_layers"),
        ({"global_pages": -0.5}, "global_pages"),
        ({"global_pages": float("nan")}, "global_pages"),
        ({"global_min_pages": -1}, "global_min_pages"),
        ({"global_min_pages": 2.5}, "global_min_pages"),
        ({"global_span": 0}, "global_span"),
        ({"global_dtype": "int8"}, "global_dtype"),
        ({"min_blocks": -1}, "min_blocks"),
    ],
)
def test_bad_config(kwargs, word):
    with pytest.raises(InputError, match=word):
        PrismConfig(**kwargs)


def test_bad_tensors(qkv):
    q, K, V = qkv
    with pytest.raises(InputError, match="head dims"):
        sparse_decode(q[..., :4], K, V, torch.zeros(1, 2, 3, dtype=torch.long))
    with pytest.raises(InputError, match="empty cache"):
        decode_step([q], [K[:, :, :0]], [V[:, :, :0]])
    with pytest.raises(InputError, match="dtype"):
        select_topk(q.int(), K.int(), 4)
    with pytest.raises(InputError, match="share a dtype"):
        decode_step([q.double()], [K], [V])
    with pytest.raises(InputError, match="multiple of KV heads"):
        select_topk(q[:, :3], K, 4)
    with pytest.raises(InputError, match="K and V"):
        decode_step([q], [K], [V[:, :, :10]])
    with pytest.raises(InputError, match="q must have shape"):
        select_topk(q[0], K, 4)
    with pytest.raises(InputError, match="kappa"):
        select_topk(q, K, 0)
    with pytest.raises(InputError, match="idx"):
        sparse_decode(q, K, V, torch.full((1, 2, 3), 64))
    with pytest.raises(InputError, match="radius"):
        propose(torch.zeros(1, 2, 3, dtype=torch.long), 64, radius=-1)
    with pytest.raises(InputError, match="prev"):
        propose(torch.zeros(1, 2, 3), 64)
    with pytest.raises(InputError, match="kappa"):
        refine(q, K, torch.zeros(1, 2, 3, dtype=torch.long), -1)
    with pytest.raises(InputError, match="backend"):
        PrismDecoder(backend="cuda-magic")
    with pytest.raises(InputError, match="q contains NaN"):
        decode_step([q.masked_fill(q > 1, float("nan"))], [K], [V])
    with pytest.raises(InputError, match="non-empty"):
        select_topk(q[:0], K[:0], 4)
    idx = select_topk(q, K, 4)
    with pytest.raises(InputError, match="repeats a token"):
        attention_loss(q, K, torch.cat([idx, idx], -1))
    with pytest.raises(InputError, match="selects no token"):
        sparse_decode(q, K, V, idx[..., :0])
    with pytest.raises(InputError, match="same layers"):
        decode_step([q, q], [K], [V])
    with pytest.raises(InputError, match="PrismConfig"):
        PrismDecoder({"kappa": 4})
    with pytest.raises(InputError, match="layer must be"):
        PrismDecoder().step(-1, q, K, V)


def test_nothing_changes_after_a_rejected_call(qkv):
    q, K, V = qkv
    dec = PrismDecoder(PrismConfig(kappa=8))
    dec.step(0, q, K, V)
    before = dec.bytes_read
    with pytest.raises(InputError):
        dec.step(1, q, K[..., :4], V)
    assert dec.bytes_read == before


def test_float16_and_bfloat16_are_accepted(qkv):
    q, K, V = qkv
    for dt in (torch.bfloat16, torch.float16):
        outs, _ = decode_step([q.to(dt)] * 2, [K.to(dt)] * 2, [V.to(dt)] * 2, PrismConfig(kappa=16))
        assert outs[1].dtype == dt and torch.isfinite(outs[1].float()).all()


def test_bad_global_blocks_for_propose():
    prev = torch.zeros(1, 2, 3, dtype=torch.long)
    with pytest.raises(InputError, match="extra"):
        propose(prev, 64, block=8, extra=torch.full((1, 2, 1), 8))  # block 8 of 8 does not exist
    with pytest.raises(InputError, match="extra"):
        propose(prev, 64, block=8, extra=torch.zeros(1, 3, 1, dtype=torch.long))


def test_global_blocks_names_its_bad_arguments():
    """ops.global_blocks (public: its blocks go into propose's extra) had no input checks: a wrong page
    count or head layout gave a raw torch error or silently wrong blocks."""
    from prism_attn import ops
    from prism_attn.baselines import quest_metadata

    q, K, _ = random_cache(64, heads=4, kv_heads=2, head_dim=8, seed=0)
    meta = quest_metadata(K, 8)  # 8 pages of 8 tokens
    kw = dict(block=8, sink=4, local=8, scaling=0.35)
    assert ops.global_blocks(q, meta, 2, 64, **kw).shape == (1, 2, 2)
    cases = [
        (dict(count=-1), "count"),
        (dict(n=0), "n"),
        (dict(block=0), "block"),
        (dict(span=0), "span"),
        (dict(sink=-1), "sink"),
        (dict(scaling=float("nan")), "scaling"),
        (dict(n=200), "meta holds 8 pages"),
        (dict(meta=(meta[0], meta[1][..., :4])), "lo and hi differ"),
        (dict(meta=meta[0]), "2D channels"),  # an unpacked half passed as packed bounds
        (dict(meta="bounds"), "meta must be"),
        (dict(q=q[:, :3]), "does not fit q"),
        (dict(q=q[0]), "q must be"),
    ]
    for change, msg in cases:
        args = {"q": q, "meta": meta, "count": 2, "n": 64, **kw, **change}
        with pytest.raises(InputError, match=msg):
            ops.global_blocks(args.pop("q"), args.pop("meta"), args.pop("count"), args.pop("n"), **args)


def test_attention_over_a_row_that_selects_nothing_is_an_error(qkv):
    """A row of -1s used to give a silent NaN (the fast path) or zeros (the reference)."""
    from prism_attn import reference
    from prism_attn.kernels import sparse_decode_split_torch, sparse_decode_triton

    q, K, V = qkv
    idx = torch.tensor([[[1, 5, 9], [-1, -1, -1]]])
    fns = (sparse_decode, reference.sparse_attention, sparse_decode_split_torch, sparse_decode_triton)
    for fn in fns:
        with pytest.raises(InputError, match=r"row \(batch 0, KV head 1\) selects no token"):
            fn(q, K, V, idx)
    # a selection with padding but a token in every row is fine, and the loss of an empty row is 1
    ok = torch.tensor([[[1, 5, -1], [2, -1, -1]]])
    assert torch.isfinite(sparse_decode(q, K, V, ok)).all()
    assert attention_loss(q, K, idx)[0, 2:].tolist() == [1.0, 1.0]


def test_refine_rejects_repeated_candidates(qkv):
    """Repeated candidates were counted twice in the pooled softmax and could come back as a selection
    holding one token twice."""
    from prism_attn import reference

    q, K, _ = qkv
    cand = torch.tensor([[[3, 3, 3, 4], [1, 2, 7, 9]]])
    for fn in (refine, reference.refine):
        with pytest.raises(InputError, match="cand repeats a token"):
            fn(q, K, cand, 2)


def test_kappa_as_a_numpy_or_torch_scalar(qkv):
    np = pytest.importorskip("numpy")
    q, K, _ = qkv
    assert PrismConfig(kappa=np.int64(5)).kappa == 5 and type(PrismConfig(kappa=np.int64(5)).kappa) is int
    assert torch.equal(select_topk(q, K, torch.tensor(6)), select_topk(q, K, 6))
    assert torch.equal(select_topk(q, K, np.int32(6)), select_topk(q, K, 6))
    for bad in (torch.tensor([3, 4]), np.array([3, 4])):  # a RuntimeError / ValueError before
        with pytest.raises(InputError, match="kappa must be a positive integer"):
            select_topk(q, K, bad)


def test_blocks_and_pages_longer_than_the_cache_allocate_nothing_of_their_size(largest_tensor):
    """block / page / global_span far beyond the cache used to allocate arange(block) per block
    (block = 10**9 was killed for memory): they now mean "the whole cache"."""
    from prism_attn import reference

    huge = 1 << 20
    q, K, V = random_cache(64, heads=4, kv_heads=2, head_dim=8, seed=0, dtype=torch.float64)
    configs = [
        dict(block=huge, min_blocks=0),
        dict(global_span=huge, sink=0, local=0),
        dict(global_span=huge),
        dict(method="quest", page=huge),
    ]
    for kw in configs:
        cfg = PrismConfig(kappa=8, dense_layers=(), **kw)
        with largest_tensor() as mode:
            outs, sels = decode_step([q] * 3, [K] * 3, [V] * 3, cfg, backend="torch")
        assert mode.largest < 64 * 64, (kw, mode.largest)
        ref_outs, ref_sels = reference.decode_step([q] * 3, [K] * 3, [V] * 3, cfg)
        for o, r, s, rs in zip(outs, ref_outs, sels, ref_sels, strict=True):
            torch.testing.assert_close(o, r, rtol=1e-10, atol=1e-12)
            assert torch.equal(s, rs), kw
    # the same selection as a block / page exactly the cache's length
    for name, same in (("block", 64), ("page", 64)):
        kw = {name: same, "min_blocks": 0} if name == "block" else {"method": "quest", "page": same}
        big = {name: huge, "min_blocks": 0} if name == "block" else {"method": "quest", "page": huge}
        a = decode_step([q] * 3, [K] * 3, [V] * 3, PrismConfig(kappa=8, dense_layers=(), **kw))[1]
        b = decode_step([q] * 3, [K] * 3, [V] * 3, PrismConfig(kappa=8, dense_layers=(), **big))[1]
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_reference_checks_its_inputs_like_the_fast_path(qkv):
    from prism_attn import reference

    q, K, V = qkv
    with pytest.raises(InputError, match="PrismConfig"):
        reference.decode_step([q], [K], [V], {"kappa": 4})
    with pytest.raises(InputError, match="same layers"):
        reference.decode_step([q, q], [K], [V], PrismConfig(kappa=4))
    with pytest.raises(InputError, match="radius"):
        reference.propose(torch.zeros(1, 2, 3, dtype=torch.long), 64, radius=-1)
    with pytest.raises(InputError, match="idx entries"):
        reference.attention_loss(q, K, torch.full((1, 2, 3), 99))
    with pytest.raises(InputError, match="page"):
        reference.quest_select(q, K, 8, page=0)
    from prism_attn.kernels import sparse_decode_split_torch

    with pytest.raises(InputError, match="splits"):
        sparse_decode_split_torch(q, K, V, torch.zeros(1, 2, 3, dtype=torch.long), splits=0)
