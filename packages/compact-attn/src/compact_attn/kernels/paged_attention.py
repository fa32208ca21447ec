"""Paged chunk attention over per-KV-head block tables, in place (no KV copy).

One program per (query head h, tile of BLOCK_M queries). It walks its KV head's table: for entry i it
loads page ``physical[g, i]`` of KV head g straight from the page pool, computes the tile's logits, masks
keys whose position (``logical[g, i]·B + slot``) exceeds the query's or the sequence end, and folds them
into an online softmax (running max m, normaliser l, accumulator a). The torch twin is
:func:`compact_attn.paged.paged_attention` with ``backend="torch"``.
"""

from __future__ import annotations

import torch

from papershelf.errors import InputError, MissingDependencyError

_KERNEL = None


def paged_attention_triton(q, k_pages, v_pages, tables, *, offset: int, seq_len: int, scaling: float,
                           block_m: int = 16):  # fmt: skip
    """Run the kernel: o (H, T, D) in q's dtype, fp32 accumulation. The page size must be a power of
    two ≥ 16 (Triton tile shapes)."""
    try:
        import triton
    except ImportError:
        raise MissingDependencyError("triton", package="compact-attn", extra="triton") from None
    from papershelf.device import triton_mode

    if q.device.type != "cuda" and triton_mode() != "interpret":
        raise InputError(
            f"backend='triton' needs CUDA tensors (q is on {q.device.type}), or TRITON_INTERPRET=1 set "
            "before triton is imported; use backend='torch' on a CPU"
        )
    H, T, D = q.shape
    Hkv, P, B, _ = k_pages.shape
    if B < 16 or B & (B - 1):
        raise InputError(f"the Triton backend needs a page size that is a power of two >= 16, got {B}")
    kernel = _kernel()
    q = q.contiguous()
    k_pages, v_pages = k_pages.contiguous(), v_pages.contiguous()
    logical = tables.logical.contiguous().to(q.device)
    physical = tables.physical.contiguous().to(q.device)
    lengths = tables.lengths.contiguous().to(q.device)
    out = torch.empty(H, T, D, dtype=torch.float32, device=q.device)
    grid = (H, triton.cdiv(T, block_m))
    kernel[grid](
        q, k_pages, v_pages, logical, physical, lengths, out,
        float(scaling), T, D, H // Hkv, P, logical.shape[1], offset, seq_len,
        PAGE=B, BLOCK_M=block_m, BLOCK_D=max(16, triton.next_power_of_2(D)),
    )  # fmt: skip
    return out.to(q.dtype)


def _kernel():
    global _KERNEL
    if _KERNEL is not None:
        return _KERNEL
    import triton
    import triton.language as tl

    @triton.jit
    def _paged_chunk_attention(
        q_ptr, k_ptr, v_ptr, logical_ptr, physical_ptr, len_ptr, o_ptr,
        scaling, T, D, G, P, L, OFFSET, SEQ_LEN,
        PAGE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
    ):  # fmt: skip
        h = tl.program_id(0)
        mt = tl.program_id(1)
        g = h // G
        offs_m = mt * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        offs_p = tl.arange(0, PAGE)
        mrow = offs_m < T
        dmask = offs_d < D
        qt = tl.load(
            q_ptr + (h * T + offs_m[:, None]) * D + offs_d[None, :],
            mask=mrow[:, None] & dmask[None, :], other=0.0,
        ).to(tl.float32)  # fmt: skip
        qpos = OFFSET + offs_m
        m_i = tl.full((BLOCK_M,), -1.0e30, tl.float32)
        l_i = tl.zeros((BLOCK_M,), tl.float32)
        acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
        n_entries = tl.load(len_ptr + g)
        for i in range(0, n_entries):
            page = tl.load(physical_ptr + g * L + i)
            block = tl.load(logical_ptr + g * L + i)
            kv_off = ((g * P + page) * PAGE + offs_p[:, None]) * D + offs_d[None, :]
            kt = tl.load(k_ptr + kv_off, mask=dmask[None, :], other=0.0).to(tl.float32)
            vt = tl.load(v_ptr + kv_off, mask=dmask[None, :], other=0.0).to(tl.float32)
            s = tl.dot(qt, tl.trans(kt)) * scaling
            kpos = block * PAGE + offs_p
            visible = (kpos[None, :] <= qpos[:, None]) & (kpos[None, :] < SEQ_LEN)
            s = tl.where(visible, s, -1.0e30)
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp(m_i - m_new)
            p = tl.where(visible, tl.exp(s - m_new[:, None]), 0.0)
            acc = acc * alpha[:, None] + tl.dot(p, vt)
            l_i = l_i * alpha + tl.sum(p, axis=1)
            m_i = m_new
        o = acc / tl.maximum(l_i, 1.0e-30)[:, None]
        tl.store(o_ptr + (h * T + offs_m[:, None]) * D + offs_d[None, :], o,
                 mask=mrow[:, None] & dmask[None, :])  # fmt: skip

    _KERNEL = _paged_chunk_attention
    return _KERNEL
