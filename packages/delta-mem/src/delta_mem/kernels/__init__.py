"""Triton kernels (CUDA, or the Triton interpreter with ``TRITON_INTERPRET=1`` on CPU)."""

from delta_mem.kernels.scan_triton import scan_triton

__all__ = ["scan_triton"]
