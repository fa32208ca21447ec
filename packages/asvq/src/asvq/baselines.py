"""Anchors from ``vector-quantize-pytorch`` (the ``[bench]`` extra) behind this package's interface.

:class:`VQPSimVQ` wraps ``vector_quantize_pytorch.SimVQ`` and :class:`VQPVectorQuantize` wraps
``vector_quantize_pytorch.VectorQuantize`` so they run side by side with the package's own quantizers:
same ``(..., dim)`` input, same ``(quantized, indices, loss)`` output.
"""

from __future__ import annotations

import torch
from torch import nn

from asvq.quantizers import QuantizeOutput, check_latents
from papershelf.errors import MissingDependencyError, check_int
from papershelf.repro import package_version


def vqp_available() -> bool:
    """Whether ``vector-quantize-pytorch`` can be imported."""
    try:
        import vector_quantize_pytorch  # noqa: F401
    except ImportError:
        return False
    return True


def vqp_version() -> str | None:
    return package_version("vector-quantize-pytorch")


def _import_vqp():
    try:
        import vector_quantize_pytorch
    except ImportError:
        raise MissingDependencyError("vector_quantize_pytorch", package="asvq", extra="bench") from None
    return vector_quantize_pytorch


def _check_args(dim: object, codebook_size: object, seed: object) -> tuple[int, int]:
    """The same checks as the package's own quantizers, before vector-quantize-pytorch sees the values
    (it accepts ``codebook_size=1``, a zero width, and seeds such as -1 or 1.5)."""
    dim = check_int("dim", dim, low=1)
    codebook_size = check_int("codebook_size", codebook_size, low=2)
    if seed is not None:
        torch.manual_seed(check_int("seed", seed, low=0, high=2**63 - 1))
    return dim, codebook_size


class _VQPWrapper(nn.Module):
    def __init__(self, module: nn.Module, dim: int, codebook_size: int) -> None:
        super().__init__()
        self.inner = module
        self.dim = dim
        self.codebook_size = codebook_size

    def num_quantizer_params(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def forward(self, z: torch.Tensor) -> QuantizeOutput:
        check_latents(z, self.dim)
        shape = z.shape
        x = z.reshape(1, -1, self.dim) if z.ndim != 3 else z
        quantized, indices, loss = self.inner(x)
        return QuantizeOutput(quantized.reshape(shape), indices.reshape(shape[:-1]), loss.sum())


class VQPSimVQ(_VQPWrapper):
    """``vector_quantize_pytorch.SimVQ`` (its defaults: rotation trick on, ``Linear(d, d)`` without bias)."""

    def __init__(self, dim: int, codebook_size: int, *, seed: int | None = None, **kwargs) -> None:
        dim, codebook_size = _check_args(dim, codebook_size, seed)
        vqp = _import_vqp()
        super().__init__(vqp.SimVQ(dim=dim, codebook_size=codebook_size, **kwargs), dim, codebook_size)


class VQPVectorQuantize(_VQPWrapper):
    """``vector_quantize_pytorch.VectorQuantize`` (EMA codebook, its defaults)."""

    def __init__(self, dim: int, codebook_size: int, *, seed: int | None = None, **kwargs) -> None:
        dim, codebook_size = _check_args(dim, codebook_size, seed)
        vqp = _import_vqp()
        super().__init__(
            vqp.VectorQuantize(dim=dim, codebook_size=codebook_size, **kwargs), dim, codebook_size
        )
