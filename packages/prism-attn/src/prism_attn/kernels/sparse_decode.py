"""Sparse decode attention over an index list, flash-decoding style.

The selected tokens of each KV group are cut into ``splits`` contiguous chunks; one program per (batch,
query head, chunk) streams its chunk's K/V rows by index with an online softmax and writes a partial
(max m, normaliser l, unnormalised output a); :func:`combine_splits` merges the chunks:
o = Σ_c e^{m_c − M} a_c / Σ_c e^{m_c − M} l_c with M = max_c m_c. :func:`sparse_decode_split_torch` is the
torch twin of the kernel (the same chunking and the same partials), so each half can be tested alone.
"""

from __future__ import annotations

import math

import torch

from prism_attn.config import check_decode_inputs

_FLOOR = -1.0e30  # finite "minus infinity": keeps exp() of fully masked tiles at 0 without NaN


def combine_splits(m: torch.Tensor, l: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Merge per-chunk partials m, l (B, H, S) and a (B, H, S, D) into o (B, H, D)."""
    M = m.amax(-1, keepdim=True)
    w = torch.exp(m - M)
    return (w[..., None] * a).sum(-2) / (w * l).sum(-1, keepdim=True)


def sparse_decode_split_torch(q, K, V, idx, scaling: float | None = None, *, splits: int = 4):
    """The kernel's torch twin: partials per chunk of the index list, then :func:`combine_splits`."""
    from papershelf.errors import check_int
    from prism_attn.config import check_idx

    scaling = check_decode_inputs(q, K, V, scaling)
    idx = check_idx(idx, K, every_row=True)
    splits = check_int("splits", splits, low=1)
    B, H, D = q.shape
    Hkv, k = K.shape[1], idx.shape[-1]
    g = H // Hkv
    chunk = math.ceil(k / splits)
    splits = math.ceil(k / chunk)  # drop empty chunks (the kernel writes a neutral partial for them)
    acc_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    ms, ls, accs = [], [], []
    for c in range(splits):
        sel = idx[..., c * chunk : (c + 1) * chunk]
        valid = (sel >= 0).repeat_interleave(g, 1)
        rows = sel.clamp(min=0)
        Ks = torch.stack([K[b, j, rows[b, j]] for b in range(B) for j in range(Hkv)]).view(B, Hkv, -1, D)
        Vs = torch.stack([V[b, j, rows[b, j]] for b in range(B) for j in range(Hkv)]).view(B, Hkv, -1, D)
        s = torch.einsum("bhd,bhnd->bhn", q.to(acc_dtype), Ks.repeat_interleave(g, 1).to(acc_dtype)) * scaling
        s = torch.where(valid, s, _FLOOR)
        m = s.amax(-1).clamp(min=_FLOOR)
        p = torch.where(valid, torch.exp(s - m[..., None]), 0.0)
        ms.append(m)
        ls.append(p.sum(-1))
        accs.append(torch.einsum("bhn,bhnd->bhd", p, Vs.repeat_interleave(g, 1).to(acc_dtype)))
    out = combine_splits(torch.stack(ms, -1), torch.stack(ls, -1), torch.stack(accs, -2))
    return out.to(q.dtype)


def sparse_decode_triton(
    q, K, V, idx, scaling: float | None = None, *, splits: int | None = None, block_n=32
):
    """Sparse decode attention through the Triton kernel: o (B, H, D) in q's dtype (fp32 accumulation)."""
    from papershelf.errors import check_int
    from prism_attn.config import check_idx

    scaling = check_decode_inputs(q, K, V, scaling)
    idx = check_idx(idx, K, every_row=True).contiguous()
    if splits is not None:
        splits = check_int("splits", splits, low=1)
    block_n = check_int("block_n", block_n, low=1)
    try:
        import triton
    except ImportError:
        from papershelf.errors import MissingDependencyError

        raise MissingDependencyError("triton", package="prism-attn", extra="triton") from None
    kernel = _kernel()
    B, H, D = q.shape
    Hkv, n, k = K.shape[1], K.shape[2], idx.shape[-1]
    if splits is None:
        splits = max(1, min(32, math.ceil(k / 256)))
    chunk = math.ceil(k / splits)
    q, K, V = q.contiguous(), K.contiguous(), V.contiguous()
    m = torch.empty(B, H, splits, dtype=torch.float32, device=q.device)
    l = torch.empty_like(m)
    a = torch.empty(B, H, splits, D, dtype=torch.float32, device=q.device)
    kernel[(B * H, splits)](
        q, K, V, idx, m, l, a,
        scaling, H, H // Hkv, Hkv, n, k, chunk, D,
        BLOCK_N=block_n, BLOCK_D=triton.next_power_of_2(D),
    )  # fmt: skip
    return combine_splits(m, l, a).to(q.dtype)


_KERNEL = None


def _kernel():
    global _KERNEL
    if _KERNEL is not None:
        return _KERNEL
    import triton
    import triton.language as tl

    @triton.jit
    def _sparse_decode_partial(
        q_ptr, k_ptr, v_ptr, idx_ptr, m_ptr, l_ptr, a_ptr,
        scaling, H, G, HKV, N, KSEL, CHUNK, D,
        BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    ):  # fmt: skip
        bh = tl.program_id(0)
        split = tl.program_id(1)
        n_splits = tl.num_programs(1)
        b = bh // H
        h = bh % H
        j = h // G
        offs_d = tl.arange(0, BLOCK_D)
        dmask = offs_d < D
        q = tl.load(q_ptr + bh * D + offs_d, mask=dmask, other=0.0).to(tl.float32)
        kv_base = (b * HKV + j) * N * D
        idx_base = (b * HKV + j) * KSEL
        m_i = tl.full((), -1.0e30, tl.float32)
        l_i = tl.zeros((), tl.float32)
        acc = tl.zeros((BLOCK_D,), tl.float32)
        start = split * CHUNK
        for off in range(0, CHUNK, BLOCK_N):
            pos = start + off + tl.arange(0, BLOCK_N)
            inside = (pos < KSEL) & (pos < start + CHUNK)
            tok = tl.load(idx_ptr + idx_base + pos, mask=inside, other=-1)
            valid = inside & (tok >= 0)
            rows = tl.where(valid, tok, 0)
            ptrs = kv_base + rows[:, None] * D + offs_d[None, :]
            kmask = valid[:, None] & dmask[None, :]
            kt = tl.load(k_ptr + ptrs, mask=kmask, other=0.0).to(tl.float32)
            s = tl.sum(kt * q[None, :], axis=1) * scaling
            s = tl.where(valid, s, -1.0e30)
            m_new = tl.maximum(m_i, tl.max(s, axis=0))
            alpha = tl.exp(m_i - m_new)
            p = tl.where(valid, tl.exp(s - m_new), 0.0)
            vt = tl.load(v_ptr + ptrs, mask=kmask, other=0.0).to(tl.float32)
            acc = acc * alpha + tl.sum(p[:, None] * vt, axis=0)
            l_i = l_i * alpha + tl.sum(p, axis=0)
            m_i = m_new
        out = bh * n_splits + split
        tl.store(m_ptr + out, m_i)
        tl.store(l_ptr + out, l_i)
        tl.store(a_ptr + out * D + offs_d, acc, mask=dmask)

    _KERNEL = _sparse_decode_partial
    return _KERNEL
