"""The chunked δ-Mem scan as Triton kernels (forward only: inference and long prefills).

Same three phases as :func:`delta_mem.scan.scan_chunked`: ``_chunk_maps`` composes each chunk's affine map
per state row (one program per (row, chunk)), the carry across chunks is a short torch loop, and
``_replay`` re-runs every chunk from its start state to write the reads (one program per (row, chunk)).
"""

from __future__ import annotations

import torch

from papershelf.device import triton_mode
from papershelf.errors import InputError, MissingDependencyError, check_int

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only without triton
    triton = None
    tl = None


if triton is not None:

    @triton.jit
    def _chunk_maps(K, V, A, E, W, P, U, T, DV, DK: tl.constexpr, C: tl.constexpr, BK: tl.constexpr, NC):
        pid_row = tl.program_id(0)  # over BH * DV
        c = tl.program_id(1)
        bh = pid_row // DV
        i = pid_row % DV
        offs = tl.arange(0, BK)
        km = offs < DK
        Pm = tl.where((offs[:, None] == offs[None, :]) & km[:, None] & km[None, :], 1.0, 0.0)
        u = tl.zeros([BK], dtype=tl.float32)
        for j in range(C):
            t0 = c * C + j
            valid = t0 < T
            t = tl.minimum(t0, T - 1)
            kt = tl.where(
                valid, tl.load(K + (bh * T + t) * DK + offs, mask=km, other=0.0).to(tl.float32), 0.0
            )
            a = tl.where(valid, tl.load(A + (bh * T + t) * DV + i).to(tl.float32), 1.0)
            e = tl.where(valid, tl.load(E + (bh * T + t) * DV + i).to(tl.float32), 0.0)
            w = tl.where(valid, tl.load(W + (bh * T + t) * DV + i).to(tl.float32), 0.0)
            vi = tl.where(valid, tl.load(V + (bh * T + t) * DV + i).to(tl.float32), 0.0)
            Pk = tl.sum(Pm * kt[None, :], axis=1)
            Pm = a * Pm - e * Pk[:, None] * kt[None, :]
            uk = tl.sum(u * kt, axis=0)
            u = a * u + (w * vi - e * uk) * kt
        base = (pid_row * NC + c) * DK
        tl.store(P + (base + offs[:, None]) * DK + offs[None, :], Pm, mask=km[:, None] & km[None, :])
        tl.store(U + base + offs, u, mask=km)

    @triton.jit
    def _replay(Q, K, V, A, E, W, S, R, T, DV, DK: tl.constexpr, C: tl.constexpr, BK: tl.constexpr, NC):
        pid_row = tl.program_id(0)
        c = tl.program_id(1)
        bh = pid_row // DV
        i = pid_row % DV
        offs = tl.arange(0, BK)
        km = offs < DK
        s = tl.load(S + (pid_row * NC + c) * DK + offs, mask=km, other=0.0).to(tl.float32)
        for j in range(C):
            t0 = c * C + j
            valid = t0 < T
            t = tl.minimum(t0, T - 1)
            qt = tl.where(
                valid, tl.load(Q + (bh * T + t) * DK + offs, mask=km, other=0.0).to(tl.float32), 0.0
            )
            kt = tl.where(
                valid, tl.load(K + (bh * T + t) * DK + offs, mask=km, other=0.0).to(tl.float32), 0.0
            )
            a = tl.where(valid, tl.load(A + (bh * T + t) * DV + i).to(tl.float32), 1.0)
            e = tl.where(valid, tl.load(E + (bh * T + t) * DV + i).to(tl.float32), 0.0)
            w = tl.where(valid, tl.load(W + (bh * T + t) * DV + i).to(tl.float32), 0.0)
            vi = tl.where(valid, tl.load(V + (bh * T + t) * DV + i).to(tl.float32), 0.0)
            if t0 < T:
                tl.store(R + (bh * T + t) * DV + i, tl.sum(s * qt, axis=0))
            sk = tl.sum(s * kt, axis=0)
            s = a * s + (w * vi - e * sk) * kt


def scan_triton(q, k, v, keep, erase, write, S0=None, *, chunk: int = 32):
    """Chunked scan with Triton kernels; float32 internally, returns ``q``'s dtype. No autograd."""
    if triton is None:
        raise MissingDependencyError("triton", package="delta-mem", extra="triton")
    from delta_mem.scan import _check

    _check(q, k, v, keep, erase, write, S0)
    C = check_int("chunk", chunk, low=1)
    if torch.is_grad_enabled() and any(
        x is not None and x.requires_grad for x in (q, k, v, keep, erase, write, S0)
    ):
        # it would return reads without a graph: the projections behind q, k, v and the gates would
        # silently get no gradient
        raise InputError(
            "the Triton scan is forward-only: inputs require grad; use backend='chunked' (or 'auto') "
            "to train, or run it under torch.no_grad()"
        )
    if not q.is_cuda and triton_mode() != "interpret":
        raise InputError(
            f"the Triton scan needs CUDA tensors (or TRITON_INTERPRET=1 set before importing triton); "
            f"got tensors on {q.device}",
            hint="use backend='chunked' on CPU",
        )
    B, H, T, dk = q.shape
    dv = v.shape[-1]
    if dk > 128:
        raise InputError(f"the Triton scan supports d_k <= 128, got {dk}")
    out_dtype = q.dtype
    S = q.new_zeros(B, H, dv, dk, dtype=torch.float32) if S0 is None else S0.float()
    if T == 0:
        return q.new_zeros(B, H, 0, dv), S.to(out_dtype)

    def flat(x):
        return x.detach().float().reshape(B * H, T, x.shape[-1]).contiguous()

    qf, kf, vf, af, ef, wf = map(flat, (q, k, v, keep, erase, write))
    n = -(-T // C)
    BK = max(2, triton.next_power_of_2(dk))
    P = torch.empty(B * H, dv, n, dk, dk, dtype=torch.float32, device=q.device)
    U = torch.empty(B * H, dv, n, dk, dtype=torch.float32, device=q.device)
    grid = (B * H * dv, n)
    _chunk_maps[grid](kf, vf, af, ef, wf, P, U, T, dv, DK=dk, C=C, BK=BK, NC=n)
    S = S.detach().reshape(B * H, dv, dk)
    starts = torch.empty(B * H, dv, n, dk, dtype=torch.float32, device=q.device)
    for c in range(n):
        starts[:, :, c] = S
        S = (S[..., None, :] @ P[:, :, c]).squeeze(-2) + U[:, :, c]
    R = torch.empty(B * H, T, dv, dtype=torch.float32, device=q.device)
    _replay[grid](qf, kf, vf, af, ef, wf, starts.contiguous(), R, T, dv, DK=dk, C=C, BK=BK, NC=n)
    return R.reshape(B, H, T, dv).to(out_dtype), S.reshape(B, H, dv, dk).to(out_dtype)
