"""``y[m, j] = Σ_t values[j, t] · h[m, index[j, t]]``: the product of h (M × k) with a column-sparse B.

B (k × n) is stored per output column j as ``width`` (row index, value) pairs, padded with value 0 (ELL
format). The torch twin scatters B into a dense (n × k) matrix and calls a GEMM; the Triton kernel gathers
h's columns directly. The Triton kernel is built on first use, so importing this module never imports
triton; tests run it under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import torch

_KERNEL = None


def ell_to_dense(values: torch.Tensor, index: torch.Tensor, k: int) -> torch.Tensor:
    """Bᵀ as a dense (n × k) matrix (padding entries carry value 0 and add nothing)."""
    out = torch.zeros(values.shape[0], k, dtype=values.dtype, device=values.device)
    return out.scatter_add_(1, index.long(), values)


def ell_matmul_torch(h: torch.Tensor, values: torch.Tensor, index: torch.Tensor, bias=None) -> torch.Tensor:
    """Torch path: ``h @ B`` (+ bias) with B rebuilt densely from its ELL storage."""
    return torch.nn.functional.linear(h, ell_to_dense(values, index, h.shape[-1]).to(h.dtype), bias)


def _build():
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(
        h_ptr,
        v_ptr,
        i_ptr,
        b_ptr,
        y_ptr,
        M,
        N,
        K,
        WIDTH,
        HAS_BIAS: tl.constexpr,
        BM: tl.constexpr,
        BN: tl.constexpr,
    ):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        mm = rm < M
        mn = rn < N
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for t in range(0, WIDTH):
            idx = tl.load(i_ptr + rn * WIDTH + t, mask=mn, other=0)
            val = tl.load(v_ptr + rn * WIDTH + t, mask=mn, other=0.0).to(tl.float32)
            hv = tl.load(h_ptr + rm[:, None] * K + idx[None, :], mask=mm[:, None] & mn[None, :], other=0.0)
            acc += hv.to(tl.float32) * val[None, :]
        if HAS_BIAS:
            acc += tl.load(b_ptr + rn, mask=mn, other=0.0).to(tl.float32)[None, :]
        tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc, mask=mm[:, None] & mn[None, :])

    return kernel


def ell_matmul_triton(
    h: torch.Tensor,
    values: torch.Tensor,
    index: torch.Tensor,
    bias=None,
    *,
    block_m: int = 16,
    block_n: int = 32,
) -> torch.Tensor:
    """Triton path (fp32 accumulation; output in h's dtype)."""
    global _KERNEL
    if _KERNEL is None:
        _KERNEL = _build()
    import triton

    shape = h.shape
    h2 = h.reshape(-1, shape[-1]).contiguous()
    M, K = h2.shape
    N, width = values.shape
    y = torch.empty(M, N, dtype=torch.float32, device=h.device)
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    b = bias if bias is not None else values  # any pointer; unused without bias
    _KERNEL[grid](
        h2,
        values.contiguous(),
        index.to(torch.int32).contiguous(),
        b,
        y,
        M,
        N,
        K,
        width,
        HAS_BIAS=bias is not None,
        BM=block_m,
        BN=block_n,
    )
    return y.to(h.dtype).reshape(*shape[:-1], N)
