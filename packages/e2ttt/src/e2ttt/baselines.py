"""Baseline chunk update rules with the same signature as :func:`e2ttt.chunk.e2ttt_chunk_update`.

- :func:`chunk_average_update`: the paper's ablation, "chunk-wise averaged momentum and decay": lr stays
  per token, β and γ are replaced by their means over the chunk, so the chunk acts as one momentum step
  (the temporal order of the gates inside the chunk is discarded):
  ``m_end = mean(β) m_s − Σ_i lr_i g_i``, ``W_end = mean(γ) W_s + m_end``.
- :func:`no_momentum_update`: large-chunk TTT without momentum or decay (LaCT-style):
  ``W_end = W_s − Σ_i lr_i g_i``; the momentum state is left at zero.

TTT-Linear is :func:`no_momentum_update` on the ``"linear"`` fast weight (see :mod:`e2ttt.layer`), and
"SWA only" is the layer with no memory at all.
"""

from __future__ import annotations

import torch

from e2ttt.chunk import LOG_GATE_MIN, check_chunk_inputs, clip_by_norm, renorm_rows


def chunk_average_update(
    fw, W, m, k, v, lr, log_gamma, log_beta, ln_w, ln_b, *, clip=None, norms=None, validate=True
):
    """Chunk-end (W, m) with chunk-averaged momentum and decay (the paper's non-closed-form ablation)."""
    if validate:
        check_chunk_inputs(fw, W, m, k, v, lr, log_gamma, log_beta, ln_w, ln_b)
    beta = torch.exp(log_beta.clamp(min=LOG_GATE_MIN)).mean(-1)[..., None, None]
    gamma = torch.exp(log_gamma.clamp(min=LOG_GATE_MIN)).mean(-1)[..., None, None]
    (dW,) = fw.chunk_grads(W, k, v, ln_w, ln_b, (lr,))
    m_new = tuple(beta * mm - clip_by_norm(g, clip) for mm, g in zip(m, dW))
    W_new = tuple(gamma * w + mm for w, mm in zip(W, m_new))
    if norms is not None:
        W_new = tuple(renorm_rows(w, n) for w, n in zip(W_new, norms))
    return W_new, m_new


def no_momentum_update(
    fw, W, m, k, v, lr, log_gamma, log_beta, ln_w, ln_b, *, clip=None, norms=None, validate=True
):
    """Chunk-end (W, m): plain large-chunk gradient descent, W_end = W_s − Σ lr_i g_i (gates β, γ unused)."""
    if validate:
        check_chunk_inputs(fw, W, m, k, v, lr, log_gamma, log_beta, ln_w, ln_b)
    (dW,) = fw.chunk_grads(W, k, v, ln_w, ln_b, (lr,))
    W_new = tuple(w - clip_by_norm(g, clip) for w, g in zip(W, dW))
    if norms is not None:
        W_new = tuple(renorm_rows(w, n) for w, n in zip(W_new, norms))
    return W_new, m
