"""prism-attn: proposal-refined cross-layer sparse attention for long-context decoding.

At each decode step an anchor layer selects the exact top-κ KV tokens of its GQA-pooled attention; every
other layer takes the previous layer's selection as a *proposal*, dilates it by ``radius`` blocks (plus
attention sinks and a local window), scores only those candidates exactly, keeps its own top-κ and
attends over it. Shapes: ``q`` (B, H, D), ``K``/``V`` (B, H_kv, n, D) after RoPE, selections
(B, H_kv, κ) int64 ascending, -1 padded. Dtypes: float16, bfloat16, float32, float64.

>>> import torch
>>> from prism_attn import PrismConfig, decode_step, reference
>>> from prism_attn.data import random_cache
>>> q, K, V = random_cache(256, heads=4, kv_heads=2, head_dim=16, dtype=torch.float64)
>>> cfg = PrismConfig(kappa=32, block=4, local=8)
>>> outs, sels = decode_step([q, q], [K, K], [V, V], cfg)
>>> tuple(outs[1].shape), tuple(sels[1].shape)
((1, 4, 16), (1, 2, 32))
>>> ref_outs, _ = reference.decode_step([q, q], [K, K], [V, V], cfg)
>>> bool(torch.allclose(outs[1], ref_outs[1]))
True
"""

import importlib
from typing import Any

# The public names, resolved lazily so that `prism-attn --version` and argument errors need no torch import.
_EXPORTS = {
    "METHODS": "prism_attn.config",
    "PrismConfig": "prism_attn.config",
    "PrismDecoder": "prism_attn.decoder",
    "decode_step": "prism_attn.decoder",
    "attention_loss": "prism_attn.ops",
    "dense_decode": "prism_attn.ops",
    "propose": "prism_attn.ops",
    "refine": "prism_attn.ops",
    "select_topk": "prism_attn.ops",
    "sparse_decode": "prism_attn.ops",
    "quest_select": "prism_attn.baselines",
    "sdpa_decode": "prism_attn.baselines",
    "calibrate_anchors": "prism_attn.calibrate",
    "enable": "prism_attn.hf",
    "disable": "prism_attn.hf",
}

__version__ = "0.1.0"

__all__ = [
    "METHODS",
    "PrismConfig",
    "PrismDecoder",
    "__version__",
    "attention_loss",
    "decode_step",
    "dense_decode",
    "disable",
    "enable",
    "propose",
    "quest_select",
    "reference",
    "refine",
    "sdpa_decode",
    "select_topk",
    "sparse_decode",
]


def __getattr__(name: str) -> Any:
    if name == "reference":
        return importlib.import_module("prism_attn.reference")
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'prism_attn' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
