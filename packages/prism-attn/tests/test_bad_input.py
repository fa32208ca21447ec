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
