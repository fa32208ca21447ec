"""Fast forms of the δ-Mem state scan: a vectorised recurrent loop, a chunked (parallel) form, and the
gate algebra of the paper's update modes.

The update of every state row ``i`` is an affine map ``s ← s A_t + u_t`` with
``A_t = keep_t[i] I − erase_t[i] k_t k_tᵀ`` and ``u_t = write_t[i] v_t[i] k_tᵀ``. The chunked form splits
the sequence into chunks of ``C`` steps and

1. composes, for every chunk at once, the chunk's affine map ``(P, U)`` (``C`` steps of work);
2. carries the state across chunks sequentially (``T / C`` cheap steps);
3. replays every chunk from its start state in parallel to produce the reads (``C`` steps).

So the sequential depth is ``2C + T/C`` instead of ``T``; it equals the loop up to rounding.
"""

from __future__ import annotations

import torch

from papershelf.errors import InputError, check_choice, check_int

UPDATE_MODES = ("standard", "lambda_outside", "no_lambda")


def gate_coefficients(beta, lam, mode: str = "standard"):
    """``(keep, erase, write)`` from the write gate ``beta`` and the decay gate ``lam`` (same shape).

    - ``standard``: keep = λ, erase = β, write = β
    - ``lambda_outside``: keep = λ, erase = λ·β, write = β
    - ``no_lambda``: keep = 1, erase = β, write = β (the classic delta rule)
    """
    check_choice("state_update_mode", mode, UPDATE_MODES)
    if mode == "standard":
        return lam, beta, beta
    if mode == "lambda_outside":
        return lam, lam * beta, beta
    return torch.ones_like(beta), beta, beta


def _check(q, k, v, keep, erase, write, S0):
    named = (("q", q), ("k", k), ("v", v), ("keep", keep), ("erase", erase), ("write", write), ("S0", S0))
    for name, x in named[:-1]:  # only the start state may be None
        if x is None:
            raise InputError(f"{name} must be a tensor, got None")
    for name, x in named:
        if x is not None and not (isinstance(x, torch.Tensor) and x.is_floating_point()):
            got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
            raise InputError(f"{name} must be a floating-point tensor, got {got}")
    mixed = {name: x.dtype for name, x in named if x is not None and x.dtype != q.dtype}
    if mixed:  # the loop would silently promote and the reference would fail deep inside a matmul
        raise InputError(f"every scan input must have q's dtype {q.dtype}; got {mixed}")
    if q.dim() != 4 or k.shape != q.shape:
        raise InputError(f"q and k must both be (B, H, T, d_k); got {tuple(q.shape)} and {tuple(k.shape)}")
    B, H, T, _ = q.shape
    for name, x in (("v", v), ("keep", keep), ("erase", erase), ("write", write)):
        if x.dim() != 4 or x.shape[:3] != (B, H, T):
            raise InputError(
                f"{name} must be (B, H, T, d_v) with B, H, T = {B}, {H}, {T}; got {tuple(x.shape)}"
            )
    dv = v.shape[-1]
    for name, x in (("keep", keep), ("erase", erase), ("write", write)):
        if x.shape[-1] != dv:
            raise InputError(f"{name} must have d_v = {dv} columns; got {x.shape[-1]}")
    if S0 is not None and S0.shape != (B, H, dv, q.shape[-1]):
        raise InputError(f"S0 must be (B, H, d_v, d_k) = {(B, H, dv, q.shape[-1])}; got {tuple(S0.shape)}")
    bad = [name for name, x in named if x is not None and not bool(torch.isfinite(x).all())]
    if bad:  # a NaN written into the state would poison every later read, far from its cause
        raise InputError(f"scan inputs must be finite; NaN or inf in {', '.join(bad)}")


def _step(S, k, v, keep, erase, write):
    """One write: S (..., dv, dk); k (..., dk); v, keep, erase, write (..., dv)."""
    Sk = (S * k[..., None, :]).sum(-1)  # (..., dv)
    return keep[..., None] * S + ((write * v - erase * Sk)[..., None]) * k[..., None, :]


def scan_recurrent(q, k, v, keep, erase, write, S0=None):
    """The loop over time, vectorised over batch, heads and rows. Same contract as the reference."""
    _check(q, k, v, keep, erase, write, S0)
    B, H, T, dk = q.shape
    dv = v.shape[-1]
    S = q.new_zeros(B, H, dv, dk) if S0 is None else S0
    reads = []
    for t in range(T):
        reads.append((S * q[:, :, t, None, :]).sum(-1))
        S = _step(S, k[:, :, t], v[:, :, t], keep[:, :, t], erase[:, :, t], write[:, :, t])
    if T == 0:
        return q.new_zeros(B, H, 0, dv), S
    return torch.stack(reads, dim=2), S


def scan_chunked(q, k, v, keep, erase, write, S0=None, *, chunk: int = 32):
    """The chunked (parallel) form; differentiable. Same contract as :func:`scan_recurrent`."""
    _check(q, k, v, keep, erase, write, S0)
    chunk = check_int("chunk", chunk, low=1)
    B, H, T, dk = q.shape
    dv = v.shape[-1]
    if T == 0:
        return q.new_zeros(B, H, 0, dv), (q.new_zeros(B, H, dv, dk) if S0 is None else S0)
    C = min(chunk, T)
    n = -(-T // C)
    pad = n * C - T
    if pad:  # padded steps are identities: keep 1, erase 0, write 0

        def padt(x, value):
            return torch.cat([x, x.new_full((*x.shape[:2], pad, x.shape[-1]), value)], dim=2)

        q, k, v = padt(q, 0.0), padt(k, 0.0), padt(v, 0.0)
        keep, erase, write = padt(keep, 1.0), padt(erase, 0.0), padt(write, 0.0)

    def chunks(x):  # (B, H, n*C, d) -> (B, H, n, C, d)
        return x.reshape(B, H, n, C, x.shape[-1])

    qc, kc, vc, ac, ec, wc = map(chunks, (q, k, v, keep, erase, write))
    # 1. each chunk's affine map per row: s_end = s_start P + U, P (dv, dk, dk), U (dv, dk)
    eye = torch.eye(dk, dtype=q.dtype, device=q.device)
    P = eye.expand(B, H, n, dv, dk, dk)
    U = q.new_zeros(B, H, n, dv, dk)
    for j in range(C):
        kj, aj, ej = kc[:, :, :, j], ac[:, :, :, j], ec[:, :, :, j]  # (B,H,n,dk), (B,H,n,dv)
        Pk = (P * kj[:, :, :, None, None, :]).sum(-1)  # (B,H,n,dv,dk): P k
        P = aj[..., None, None] * P - ej[..., None, None] * Pk[..., None] * kj[:, :, :, None, None, :]
        U = _step(U, kj, vc[:, :, :, j], aj, ej, wc[:, :, :, j])
    # 2. carry across chunks
    S = q.new_zeros(B, H, dv, dk) if S0 is None else S0
    starts = []
    for c in range(n):
        starts.append(S)
        S = (S[..., None, :] @ P[:, :, c]).squeeze(-2) + U[:, :, c]
    S_start = torch.stack(starts, dim=2)  # (B,H,n,dv,dk)
    # 3. replay every chunk from its start state, all chunks at once
    reads = []
    St = S_start
    for j in range(C):
        reads.append((St * qc[:, :, :, j, None, :]).sum(-1))
        St = _step(St, kc[:, :, :, j], vc[:, :, :, j], ac[:, :, :, j], ec[:, :, :, j], wc[:, :, :, j])
    R = torch.stack(reads, dim=3).reshape(B, H, n * C, dv)[:, :, :T]
    return R, S


BACKENDS = ("auto", "loop", "chunked", "triton")


def scan(q, k, v, keep, erase, write, S0=None, *, backend: str = "auto", chunk: int = 32):
    """Dispatch: ``loop``, ``chunked`` (torch), ``triton`` (no autograd), ``auto`` (chunked unless one step;
    Triton on CUDA when no gradient is needed)."""
    check_choice("backend", backend, BACKENDS)
    if backend == "auto":
        needs_grad = torch.is_grad_enabled() and any(
            x.requires_grad for x in (q, k, v, keep, erase, write) if x is not None
        )
        if q.shape[2] <= 1:
            backend = "loop"
        elif q.is_cuda and not needs_grad:
            backend = "triton"
        else:
            backend = "chunked"
    if backend == "loop":
        return scan_recurrent(q, k, v, keep, erase, write, S0)
    if backend == "chunked":
        return scan_chunked(q, k, v, keep, erase, write, S0, chunk=chunk)
    from delta_mem.kernels import scan_triton

    return scan_triton(q, k, v, keep, erase, write, S0, chunk=chunk)
