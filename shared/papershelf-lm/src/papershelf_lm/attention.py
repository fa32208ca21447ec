"""Attention access: swap a model's attention function for a while, capture q/k/v, decode greedily.

An attention function has transformers' signature
``fn(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs)
-> (output, weights)`` with ``query`` (B, H, T, D) and ``key``/``value`` (B, H_kv, S, D) after RoPE
(keys and values are *not* repeated over the query heads), ``output`` (B, T, H, D). It reaches the
model through ``transformers.AttentionInterface``; the mask the model builds for it is SDPA's.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

_names = itertools.count()


def sdpa(module, query, key, value, attention_mask, **kwargs):
    """transformers' own SDPA attention function (the default a swap is measured against)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


@contextmanager
def attention(model, fn: Callable, *, mask: str = "sdpa") -> Iterator:
    """Route every attention call of ``model`` through ``fn`` inside the block, then restore it."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    name = f"papershelf_attention_{next(_names)}"
    AttentionInterface.register(name, fn)
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, ALL_MASK_ATTENTION_FUNCTIONS[mask])
    previous = model.config._attn_implementation
    model.set_attn_implementation(name)
    try:
        yield model
    finally:
        model.set_attn_implementation(previous)


@dataclass
class LayerCapture:
    """One layer's post-RoPE ``query`` (B, H, T, D), ``key``/``value`` (B, H_kv, T, D) and its
    attention ``output`` (B, T, H, D), plus the ``scaling`` it used."""

    layer: int
    query: object
    key: object
    value: object
    output: object
    scaling: float


def capture(model, input_ids) -> tuple[object, list[LayerCapture]]:
    """Run one forward pass through SDPA and return (logits, per-layer captures)."""
    import torch

    captured: list[LayerCapture] = []

    def recording(module, query, key, value, attention_mask, **kwargs):
        out, weights = sdpa(module, query, key, value, attention_mask, **kwargs)
        captured.append(
            LayerCapture(
                module.layer_idx,
                query.detach(),
                key.detach(),
                value.detach(),
                out.detach(),
                kwargs.get("scaling"),
            )
        )
        return out, weights

    with attention(model, recording), torch.no_grad():
        logits = model(input_ids=input_ids).logits
    return logits, captured


def greedy_generate(model, input_ids, max_new_tokens: int, *, eos_token_id: int | None = None):
    """Greedy decoding with a KV cache: one prefill pass, then one token per step.

    Every pass goes through the model's current attention function, so inside
    ``with attention(model, fn):`` both the prefill and each decode step call ``fn``.
    """
    import torch

    generated = []
    with torch.no_grad():
        out = model(input_ids=input_ids, use_cache=True)
        for step in range(max_new_tokens):
            next_token = out.logits[:, -1].argmax(-1, keepdim=True)
            generated.append(next_token)
            finished = eos_token_id is not None and bool((next_token == eos_token_id).all())
            if finished or step == max_new_tokens - 1:
                break
            out = model(input_ids=next_token, use_cache=True, **_cache_kwargs(out))
    return torch.cat(generated, dim=1)


def _cache_kwargs(output) -> dict:
    """The KV cache of a forward output, under the keyword this transformers version expects."""
    if getattr(output, "cache", None) is not None:  # transformers >= 5.2x
        return {"cache": output.cache}
    return {"past_key_values": output.past_key_values}
