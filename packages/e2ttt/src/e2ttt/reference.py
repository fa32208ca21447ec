"""The slow, obviously-correct oracle: the per-token recurrence, gradients frozen at the chunk start.

For every token t of a chunk, ``g_t = ∇_W ℓ_t(W_s)`` is taken by autograd (not by the hand-written
gradients of :mod:`e2ttt.fastweights`), then

    m_t = β_t m_{t−1} − lr_t g_t,        W_t = γ_t W_{t−1} + m_t.

:func:`sequence_loop` runs whole sequences chunk by chunk with outputs read from each chunk's start
weights. Everything works in float64.
"""

from __future__ import annotations

import torch


def token_gradients(fw, W, k, v, ln_w, ln_b) -> list[tuple[torch.Tensor, ...]]:
    """[∇_W ℓ_t(W) for t in chunk], each a tuple like W, by autograd (one backward per token)."""
    Wd = tuple(w.detach().requires_grad_(True) for w in W)
    losses = fw.loss(Wd, k.detach(), v.detach(), ln_w.detach(), ln_b.detach())  # (B, H, L)
    grads = []
    for t in range(k.shape[2]):
        grads.append(torch.autograd.grad(losses[..., t].sum(), Wd, retain_graph=True))
    return grads


def chunk_loop(fw, W, m, k, v, lr, log_gamma, log_beta, ln_w, ln_b):
    """Chunk-end (W, m) by the per-token loop (no clipping, no renormalisation)."""
    grads = token_gradients(fw, W, k, v, ln_w, ln_b)
    beta, gamma = torch.exp(log_beta), torch.exp(log_gamma)
    W = tuple(w.detach().clone() for w in W)
    m = tuple(x.detach().clone() for x in m)
    for t, g in enumerate(grads):
        bt = beta[..., t, None, None]
        gt = gamma[..., t, None, None]
        lt = lr[..., t, None, None]
        m = tuple(bt * mm - lt * gg for mm, gg in zip(m, g))
        W = tuple(gt * w + mm for w, mm in zip(W, m))
    return W, m


def gd_momentum_tokenwise(fw, W, m, k, v, lr, log_gamma, log_beta, ln_w, ln_b):
    """Plain online GD with momentum and decay, the gradient re-evaluated at the current W every token."""
    W = tuple(w.detach().clone() for w in W)
    m = tuple(x.detach().clone() for x in m)
    for t in range(k.shape[2]):
        Wd = tuple(w.requires_grad_(True) for w in W)
        loss = fw.loss(Wd, k[:, :, t : t + 1].detach(), v[:, :, t : t + 1].detach(), ln_w, ln_b)
        g = torch.autograd.grad(loss.sum(), Wd)
        bt = torch.exp(log_beta[..., t, None, None])
        gt = torch.exp(log_gamma[..., t, None, None])
        lt = lr[..., t, None, None]
        m = tuple(bt * mm - lt * gg for mm, gg in zip(m, g))
        W = tuple((gt * w + mm).detach() for w, mm in zip(W, m))
    return W, m


def sequence_loop(fw, W, m, q, k, v, lr, log_gamma, log_beta, ln_w, ln_b, *, chunk: int):
    """Outputs f_{W_c}(q) for a whole sequence (chunk c reads its start weights) and the final (W, m).

    The sequence is cut at multiples of ``chunk``; a trailing partial chunk is read but not applied
    (it would be buffered), exactly as in buffered decoding.
    """
    T = q.shape[2]
    outs = []
    for s in range(0, T, chunk):
        e = min(s + chunk, T)
        outs.append(fw.apply(W, q[:, :, s:e], ln_w, ln_b))
        if e - s == chunk:
            sl = slice(s, e)
            W, m = chunk_loop(
                fw,
                W,
                m,
                k[:, :, sl],
                v[:, :, sl],
                lr[..., sl],
                log_gamma[..., sl],
                log_beta[..., sl],
                ln_w,
                ln_b,
            )
    return torch.cat(outs, 2), W, m
