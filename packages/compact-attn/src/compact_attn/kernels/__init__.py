"""Triton kernels (CUDA, or CPU through ``TRITON_INTERPRET=1``); each has a torch twin in the package."""
