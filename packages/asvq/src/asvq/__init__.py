"""asvq — Adaptive-Scale Vector Quantization: a frozen random codebook basis ``u`` and a learned scale.

Drop-in quantizers share one interface, ``quantized, indices, loss = quantizer(z)`` with ``z`` of shape
``(..., dim)`` (float32/float64), ``quantized`` of the same shape, ``indices`` int64 of shape ``z.shape[:-1]``
and a scalar ``loss``:

>>> import torch
>>> from asvq import AdaptiveScaleVQ, codebook_stats
>>> q = AdaptiveScaleVQ(dim=16, codebook_size=512, seed=0)
>>> quantized, indices, loss = q(torch.randn(8, 32, 16))
>>> torch.allclose(quantized, q.codebook[indices], atol=1e-6)
True
>>> codebook_stats(indices, 512)["used"] > 0
True
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

# Public names and the submodule that defines each; imported on first use, so ``asvq --version`` and
# ``import asvq`` stay cheap (torch is loaded only when a quantizer is touched).
_EXPORTS = {
    "CodebookTracker": "diagnostics",
    "codebook_stats": "diagnostics",
    "loss_variance": "diagnostics",
    "seed_spread": "diagnostics",
    "VQAutoencoder": "models",
    "mlp_autoencoder": "models",
    "FSQ": "quantizers",
    "AdaptiveScaleVQ": "quantizers",
    "EMAVectorQuantizer": "quantizers",
    "QuantizeOutput": "quantizers",
    "SimVQ": "quantizers",
    "VectorQuantizer": "quantizers",
    "rotate_to": "quantizers",
    "QUANTIZERS": "registry",
    "make_quantizer": "registry",
    "nearest_code": "search",
    "train_autoencoder": "training",
}

if TYPE_CHECKING:  # pragma: no cover
    from asvq.diagnostics import CodebookTracker, codebook_stats, loss_variance, seed_spread
    from asvq.models import VQAutoencoder, mlp_autoencoder
    from asvq.quantizers import (
        FSQ,
        AdaptiveScaleVQ,
        EMAVectorQuantizer,
        QuantizeOutput,
        SimVQ,
        VectorQuantizer,
        rotate_to,
    )
    from asvq.registry import QUANTIZERS, make_quantizer
    from asvq.search import nearest_code
    from asvq.training import train_autoencoder


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(import_module(f"asvq.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'asvq' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


__version__ = "0.1.0"

__all__ = [
    "FSQ",
    "QUANTIZERS",
    "AdaptiveScaleVQ",
    "CodebookTracker",
    "EMAVectorQuantizer",
    "QuantizeOutput",
    "SimVQ",
    "VQAutoencoder",
    "VectorQuantizer",
    "__version__",
    "codebook_stats",
    "loss_variance",
    "make_quantizer",
    "mlp_autoencoder",
    "nearest_code",
    "rotate_to",
    "seed_spread",
    "train_autoencoder",
]
