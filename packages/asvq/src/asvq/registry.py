"""``make_quantizer(name, dim, codebook_size, **options)``: every quantizer by name."""

from __future__ import annotations

from typing import Any

from torch import nn

from asvq.baselines import VQPSimVQ, VQPVectorQuantize
from asvq.quantizers import FSQ, AdaptiveScaleVQ, EMAVectorQuantizer, SimVQ, VectorQuantizer
from papershelf.errors import InputError

QUANTIZERS: dict[str, type[nn.Module]] = {
    "asvq": AdaptiveScaleVQ,
    "vq": VectorQuantizer,
    "vq-ema": EMAVectorQuantizer,
    "simvq": SimVQ,
    "fsq": FSQ,
    "simvq-vqp": VQPSimVQ,  # vector-quantize-pytorch's SimVQ ([bench] extra)
    "vq-vqp": VQPVectorQuantize,  # vector-quantize-pytorch's VectorQuantize ([bench] extra)
}


def make_quantizer(name: str, dim: int, codebook_size: int, **options: Any) -> nn.Module:
    """Build the quantizer called ``name`` (one of :data:`QUANTIZERS`).

    >>> make_quantizer("asvq", 16, 256, seed=0).num_quantizer_params()
    16
    >>> make_quantizer("simvq", 16, 256, seed=0).num_quantizer_params()
    272
    """
    if not isinstance(name, str) or name not in QUANTIZERS:
        raise InputError(f"unknown quantizer {name!r}; known quantizers: {', '.join(QUANTIZERS)}")
    try:
        return QUANTIZERS[name](dim, codebook_size, **options)
    except TypeError as exc:
        raise InputError(f"bad options for quantizer {name!r}: {exc}") from None
