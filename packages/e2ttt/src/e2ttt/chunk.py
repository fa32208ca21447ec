"""The E²-TTT closed-form chunk transition and the stabilisers.

Within a chunk of L tokens (indexed 0..L−1) starting from weights W_s and momentum m_s, with gradients
frozen at W_s (g_i = ∇ℓ_i(W_s)), the per-token recurrence

    m_t = β_t m_{t−1} − lr_t g_t,        W_t = γ_t W_{t−1} + m_t

has the exact chunk-end solution (Sβ_i = ∏_{j>i} β_j, Sγ_i = ∏_{j>i} γ_j, r_q = Sγ_q / Sβ_q,
R_i = Σ_{q≥i} r_q, α_i = Sβ_i R_i)

    W_end = (∏γ) W_s + (∏β) R_0 m_s − Σ_i α_i lr_i g_i
    m_end = (∏β) m_s − Σ_i Sβ_i lr_i g_i

All products and sums are taken in log space (flip + cumsum and ``logcumsumexp``), so both gradient sums
are one weighted backward pass each over the same per-token factors (:mod:`e2ttt.fastweights`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from e2ttt.fastweights import FastWeight
from papershelf.errors import InputError, check_number

#: log-gates are clamped from below here: a gate of exactly 0 (log = −inf) becomes e^−60 ≈ 1e−26.
LOG_GATE_MIN = -60.0


class TokenWeights(NamedTuple):
    """Per-token gradient weights (B, H, L) and chunk carries (B, H) of the closed form."""

    w_W: torch.Tensor  # α_i = Sβ_i R_i  (multiplies lr_i g_i in W_end)
    w_m: torch.Tensor  # Sβ_i            (multiplies lr_i g_i in m_end)
    carry_u: torch.Tensor  # ∏γ
    carry_m: torch.Tensor  # ∏β · R_0
    prod_beta: torch.Tensor  # ∏β


def flush_subnormal(x: torch.Tensor) -> torch.Tensor:
    """``x`` with entries below the dtype's smallest normal number set to 0.

    The per-token weights are products of up to L gates and underflow for early tokens of a long chunk;
    subnormal floats make every multiply that touches them (the weighted contractions) many times slower
    on CPUs. Their contribution is below the dtype's resolution of any nonzero sum they enter, so this is
    a no-op numerically and an efficiency measure only (the paper's code drops tokens with momentum weight
    below 1e-9 for the same purpose; this drops far less).
    """
    return torch.where(x.abs() < torch.finfo(x.dtype).tiny, torch.zeros((), dtype=x.dtype), x)


def drop_negligible(c: torch.Tensor) -> torch.Tensor:
    """Per-token gradient weights ``c`` (B, H, L) with the entries below ``eps · max_t |c_t|`` (per batch row
    and head; eps the dtype's machine epsilon) set to 0.

    A token whose weight is that small changes the weighted sum by less than the rounding of its largest
    term, but its products with the gradient factors fall into the subnormal range, which makes the
    contractions several times slower on CPUs. The paper's code drops tokens with momentum weight below
    1e-9 for the same reason; this is the same kind of truncation, at the dtype's resolution.
    """
    cut = torch.finfo(c.dtype).eps * c.abs().amax(-1, keepdim=True)
    return torch.where(c.abs() < cut, torch.zeros((), dtype=c.dtype), c)


def _suffix_exclusive(x: torch.Tensor) -> torch.Tensor:
    """S_i = Σ_{j>i} x_j along the last dim."""
    total = x.sum(-1, keepdim=True)
    return total - torch.cumsum(x, -1)


def token_weights(log_gamma: torch.Tensor, log_beta: torch.Tensor) -> TokenWeights:
    """The closed form's per-token weights from log γ and log β, each (B, H, L), computed in log space."""
    lg = log_gamma.clamp(min=LOG_GATE_MIN)
    lb = log_beta.clamp(min=LOG_GATE_MIN)
    log_sg = _suffix_exclusive(lg)  # log Sγ_i
    log_sb = _suffix_exclusive(lb)  # log Sβ_i
    log_r = log_sg - log_sb
    log_R = torch.logcumsumexp(log_r.flip(-1), -1).flip(-1)  # log Σ_{q≥i} r_q
    w_W = flush_subnormal(torch.exp(log_sb + log_R))
    w_m = flush_subnormal(torch.exp(log_sb))
    sum_b = lb.sum(-1)
    return TokenWeights(w_W, w_m, torch.exp(lg.sum(-1)), torch.exp(sum_b + log_R[..., 0]), torch.exp(sum_b))


def clip_by_norm(u: torch.Tensor, max_norm: float | None) -> torch.Tensor:
    """Scale each head's matrix ``u`` (B, H, r, c) to Frobenius norm ≤ ``max_norm`` (None: unchanged)."""
    if max_norm is None:
        return u
    check_number("clip", max_norm, low=0, low_open=True)  # a negative bound would flip the update's sign
    norm = u.flatten(-2).norm(dim=-1)[..., None, None]
    return u * torch.clamp(max_norm / (norm + 1e-12), max=1.0)


def renorm_rows(W: torch.Tensor, row_norms: torch.Tensor) -> torch.Tensor:
    """Rescale every row of W (B, H, r, c) to the given row norms (B, H, r) (LaCT weight normalisation)."""
    return W * (row_norms / (W.norm(dim=-1) + 1e-12))[..., None]


def row_norms(W: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return tuple(w.norm(dim=-1) for w in W)


def check_gates(lr: torch.Tensor, log_gamma: torch.Tensor, log_beta: torch.Tensor, shape) -> None:
    """Gates are (B, H, L): lr ≥ 0 finite; log γ, log β ≤ 0 (γ, β ∈ [0, 1]); −inf allowed for log β/γ."""
    for name, g in (("lr", lr), ("log_gamma", log_gamma), ("log_beta", log_beta)):
        if tuple(g.shape) != tuple(shape):
            raise InputError(
                f"{name} must have shape {tuple(shape)} (batch, heads, tokens), got {tuple(g.shape)}"
            )
        if torch.isnan(g).any():
            raise InputError(f"{name} contains NaN")
    if not torch.isfinite(lr).all() or (lr < 0).any():
        raise InputError("lr must be finite and >= 0")
    if (log_gamma > 0).any():
        raise InputError("log_gamma must be <= 0 (decay gamma in [0, 1])")
    if (log_beta > 0).any():
        raise InputError("log_beta must be <= 0 (momentum beta in [0, 1])")


def check_chunk_inputs(fw, W, m, k, v, lr, log_gamma, log_beta, ln_w, ln_b) -> None:
    """Validate types, shapes, dtypes and finiteness at the public boundary; raise ``InputError`` naming the
    argument."""
    if not isinstance(fw, FastWeight):
        raise InputError(f"fw must be an e2ttt.FastWeight, got {type(fw).__name__}")
    named = [("k", k), ("v", v), ("lr", lr), ("log_gamma", log_gamma), ("log_beta", log_beta)]
    named += [("ln_w", ln_w), ("ln_b", ln_b)]
    for name, state in (("W", W), ("m", m)):
        if not isinstance(state, (tuple, list)):
            raise InputError(f"{name} must be a tuple of tensors, got {type(state).__name__}")
        named += [(name, t) for t in state]
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise InputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise InputError(f"{name} must be a floating-point tensor, got {t.dtype}")
    for name, t in named:
        if t.dtype != k.dtype or t.device != k.device:
            raise InputError(f"{name} is {t.dtype} on {t.device}, but k is {k.dtype} on {k.device}; use one")
    if k.dim() != 4 or v.shape != k.shape:
        raise InputError(f"k and v must both be (B, H, L, d); got k {tuple(k.shape)}, v {tuple(v.shape)}")
    if k.shape[2] == 0:
        raise InputError("k and v have no tokens (L = 0); a chunk needs at least one")
    if k.shape[-1] != fw.d:
        raise InputError(f"k and v have head dim {k.shape[-1]}, but the fast weight has d={fw.d}")
    B, H = k.shape[:2]
    for name, state in (("W", W), ("m", m)):
        if len(state) != len(fw.shapes):
            raise InputError(f"{name} must be a tuple of {len(fw.shapes)} tensors for variant {fw.variant!r}")
        for t, shape in zip(state, fw.shapes):
            if tuple(t.shape) != (B, H, *shape):
                raise InputError(f"{name} tensor has shape {tuple(t.shape)}, expected {(B, H, *shape)}")
            if not torch.isfinite(t).all():
                raise InputError(f"{name} contains non-finite values")
    for name, t in (("k", k), ("v", v)):
        if not torch.isfinite(t).all():
            raise InputError(f"{name} contains non-finite values")
    check_gates(lr, log_gamma, log_beta, k.shape[:3])
    for name, t in (("ln_w", ln_w), ("ln_b", ln_b)):
        if tuple(t.shape) != (H, fw.d) or not torch.isfinite(t).all():
            raise InputError(f"{name} must be a finite (heads, d) = {(H, fw.d)} tensor, got {tuple(t.shape)}")


def e2ttt_chunk_update(
    fw,
    W,
    m,
    k,
    v,
    lr,
    log_gamma,
    log_beta,
    ln_w,
    ln_b,
    *,
    clip: float | None = None,
    norms: tuple[torch.Tensor, ...] | None = None,
    validate: bool = True,
):
    """Chunk-end (W, m) of E²-TTT, exact for the per-token recurrence with gradients frozen at W.

    ``W``, ``m``: tuples of (B, H, *shape) tensors; ``k``, ``v``: (B, H, L, d); ``lr``, ``log_gamma``,
    ``log_beta``: (B, H, L). ``clip`` (the paper: 1.0) clips each head's ΔW and Δm (Frobenius);
    ``norms`` (row norms per tensor, (B, H, rows)) renormalises W's rows after the update. With both off
    the result is the exact recurrence (:func:`e2ttt.reference.chunk_loop`). ``validate=False`` skips the
    input checks (for callers whose gates are in range by construction, like :class:`e2ttt.E2TTTLayer`).
    """
    if validate:
        check_chunk_inputs(fw, W, m, k, v, lr, log_gamma, log_beta, ln_w, ln_b)
    tw = token_weights(log_gamma, log_beta)
    dW, dm = fw.chunk_grads(W, k, v, ln_w, ln_b, (drop_negligible(tw.w_W * lr), drop_negligible(tw.w_m * lr)))
    cu, cm, pb = (x[..., None, None] for x in (tw.carry_u, tw.carry_m, tw.prod_beta))
    W_new = tuple(cu * w + cm * mm - clip_by_norm(g, clip) for w, mm, g in zip(W, m, dW))
    m_new = tuple(pb * mm - clip_by_norm(g, clip) for mm, g in zip(m, dm))
    if norms is not None:
        W_new = tuple(renorm_rows(w, n) for w, n in zip(W_new, norms))
    return W_new, m_new


def _outer_factors(factors):
    """Per weight tensor, the (left, right) per-token factors with ∇_{W_j} ℓ_t = left_t right_tᵀ."""
    kind = factors[0]
    if kind == "mlp":
        _, dy, a, dz, k = factors
        return ((dz, k), (dy, a))
    if kind == "swiglu":
        _, dy, p, dh1, dh3, k = factors
        return ((dh1, k), (dy, p), (dh3, k))
    _, dy, k = factors
    return ((dy, k),)


@torch.no_grad()
def per_token_chunk_update(fw, W, m, k, v, lr, log_gamma, log_beta, ln_w, ln_b, *, norms=None):
    """The same chunk-end (W, m) by the sequential per-token recurrence (the loop the closed form
    replaces), optimised: per-token gradients at W_s from the same hand-written factors (computed once,
    head-blocked, as in the closed form), then L in-place state steps per weight tensor,
    ``m ← β_t m − (lr_t left_t) right_tᵀ`` (one ``mul_`` and one rank-1 ``baddbmm_``) and
    ``W ← γ_t W + m`` (``mul_``, ``add_``), with no allocation per step. No clipping (it is defined on a
    chunk's total update). Not differentiable; the inputs are not modified.
    """
    B, H, L = lr.shape
    pairs = [
        ((lr[..., None] * a).reshape(B * H, L, -1), b.reshape(B * H, L, -1))
        for a, b in _outer_factors(fw.token_grads_blocked(W, k, v, ln_w, ln_b))
    ]
    beta = torch.exp(log_beta.clamp(min=LOG_GATE_MIN)).reshape(B * H, L, 1, 1)
    gamma = torch.exp(log_gamma.clamp(min=LOG_GATE_MIN)).reshape(B * H, L, 1, 1)
    m = tuple(x.reshape(B * H, *x.shape[2:]).clone() for x in m)
    W = tuple(x.reshape(B * H, *x.shape[2:]).clone() for x in W)
    for t in range(L):
        bt, gt = beta[:, t], gamma[:, t]
        for mj, Wj, (left, right) in zip(m, W, pairs):
            mj.mul_(bt).baddbmm_(left[:, t, :, None], right[:, t, None, :], alpha=-1)
            Wj.mul_(gt).add_(mj)
    m = tuple(x.view(B, H, *x.shape[1:]) for x in m)
    W = tuple(x.view(B, H, *x.shape[1:]) for x in W)
    if norms is not None:
        W = tuple(renorm_rows(w, n) for w, n in zip(W, norms))
    return W, m


def chunked_memory(
    fw,
    W,
    m,
    q,
    k,
    v,
    lr,
    log_gamma,
    log_beta,
    ln_w,
    ln_b,
    *,
    chunk: int,
    update=None,
    buf=None,
    clip=None,
    norms=None,
    final_update: bool = True,
):
    """Run the memory over a sequence: each query reads the weights at the start of its chunk, and a chunk's
    update is applied once all of its tokens are in.

    ``q``, ``k``, ``v``: (B, H, T, d); gates (B, H, T). ``buf`` holds (k, v, lr, lg, lb) of tokens already
    seen in the current, unfinished chunk (buffered decoding); the returned buffer holds this call's
    unfinished tail. ``final_update=False`` skips the update of a chunk completed by the very last token
    (its update cannot change this call's outputs; training skips it). Returns (out, W, m, buf).
    """
    update = e2ttt_chunk_update if update is None else update
    T = q.shape[2]
    outs, s = [], 0
    while s < T:
        n_buf = 0 if buf is None else buf["k"].shape[2]
        e = min(T, s + chunk - n_buf)
        outs.append(fw.apply(W, q[:, :, s:e], ln_w, ln_b))
        new = {
            "k": k[:, :, s:e],
            "v": v[:, :, s:e],
            "lr": lr[..., s:e],
            "lg": log_gamma[..., s:e],
            "lb": log_beta[..., s:e],
        }
        buf = new if buf is None else {key: torch.cat([buf[key], new[key]], 2) for key in new}
        if buf["k"].shape[2] == chunk:
            if final_update or e < T:
                W, m = update(
                    fw,
                    W,
                    m,
                    buf["k"],
                    buf["v"],
                    buf["lr"],
                    buf["lg"],
                    buf["lb"],
                    ln_w,
                    ln_b,
                    clip=clip,
                    norms=norms,
                    validate=False,  # the layer builds the gates in range and checks x itself
                )
            buf = None
        s = e
    out = torch.cat(outs, 2) if outs else q.new_zeros(q.shape)
    return out, W, m, buf
