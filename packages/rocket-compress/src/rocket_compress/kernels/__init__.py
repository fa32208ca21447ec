"""Triton kernel for the column-sparse product of :class:`~rocket_compress.modules.FactorizedLinear`."""

from rocket_compress.kernels.ell_matmul import ell_matmul_torch, ell_matmul_triton

__all__ = ["ell_matmul_torch", "ell_matmul_triton"]
