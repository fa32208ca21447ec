"""Triton kernels (CUDA, or the CPU interpreter with ``TRITON_INTERPRET=1``), each with a torch twin."""

from prism_attn.kernels.sparse_decode import combine_splits, sparse_decode_split_torch, sparse_decode_triton

__all__ = ["combine_splits", "sparse_decode_split_torch", "sparse_decode_triton"]
