"""Diagonal Fisher and per-coordinate gradient correlation from per-sample gradients (torch.func).

Both are computed for a classifier ``model(x) -> logits`` with respect to a chosen set of its parameters
(by default the trainable ones, i.e. the LoRA factors of a PEFT model):

* empirical Fisher  ``F_j = mean_s (∂_j log p(y_s | x_s))²`` (uses the client's labels);
* expected Fisher   ``F_j = mean_s Σ_k p_k(x_s) (∂_j log p(k | x_s))²`` (the model's own predictive);
* gradient correlation ``ρ_j = Σ_s g^F_sj g^L_sj / √(Σ_s (g^F_sj)² Σ_s (g^L_sj)²)`` between the
  federated and the local model's per-sample gradients on the same samples (uncentred, like the Fisher).

The class axis of the logits is dim 1. A classifier gives ``(n, C)`` and labels ``(n,)``; a sequence model
(a causal LM read with teacher forcing) gives ``(n, C, T)`` and labels ``(n, T)``, and a sample is a whole
window: ``log p(y_s | x_s) = Σ_t log p(y_st | x_s, t)``. For a window the expected Fisher is a sum over
C^T label sequences; it is estimated by Monte Carlo instead (labels drawn from the model's predictive at
every position, ``samples`` draws per window), which is unbiased; for a classifier it is exact.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from papershelf.errors import InputError


def trainable_names(model: nn.Module) -> list[str]:
    """Names of the parameters that require grad (the LoRA factors of a PEFT model)."""
    return [n for n, p in model.named_parameters() if p.requires_grad]


def log_likelihood(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``log p(y_s | x_s)`` per sample, shape ``(n,)``: class axis 1, summed over any further axes."""
    lp = torch.log_softmax(logits, dim=1).gather(1, y.unsqueeze(1)).squeeze(1)
    return lp.reshape(lp.shape[0], -1).sum(1)


def sample_labels(logits: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Labels drawn from the model's own predictive, one per position (``logits``' shape minus axis 1)."""
    probs = torch.softmax(logits.detach().double(), dim=1).movedim(1, -1)
    flat = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=generator)
    return flat.reshape(probs.shape[:-1])


def _check_xy(X: torch.Tensor, y: torch.Tensor | None, who: str) -> None:
    if X.ndim < 2 or X.shape[0] == 0:
        raise InputError(f"{who}: no samples to estimate the Fisher from (X has shape {tuple(X.shape)})")
    if not torch.isfinite(X).all():
        raise InputError(f"{who}: inputs contain NaN or inf")
    if y is not None and y.shape[0] != X.shape[0]:
        raise InputError(f"{who}: {X.shape[0]} inputs but {y.shape[0]} labels")


def per_sample_grads(
    model: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    names: Sequence[str] | None = None,
    *,
    method: str = "loop",
) -> dict[str, torch.Tensor]:
    """``∇ log p(y_s | x_s)`` for every sample s: a dict name -> (n, *param.shape).

    ``method="loop"`` runs one backward per sample (cheap for the ~30 Fisher samples, and it avoids
    importing torch.func); ``method="vmap"`` vectorises with ``torch.func`` (same numbers).
    """
    _check_xy(X, y, "per_sample_grads")
    if method == "loop":
        return per_sample_grads_loop(model, X, y, names)
    if method != "vmap":
        raise InputError(f"per_sample_grads: method must be 'loop' or 'vmap', got {method!r}")
    from torch.func import functional_call, grad, vmap

    names = list(names) if names is not None else trainable_names(model)
    params = dict(model.named_parameters())
    sel = {n: params[n].detach() for n in names}

    def logp(p, x, t):
        return log_likelihood(functional_call(model, p, (x[None],)), t[None])[0]

    return vmap(grad(logp), in_dims=(None, 0, 0))(sel, X, y)


def per_sample_grads_loop(
    model: nn.Module, X: torch.Tensor, y: torch.Tensor, names: Sequence[str] | None = None
) -> dict[str, torch.Tensor]:
    """The same as :func:`per_sample_grads` with one autograd backward per sample (the slow reference)."""
    names = list(names) if names is not None else trainable_names(model)
    params = dict(model.named_parameters())
    rows = []
    for s in range(X.shape[0]):
        lp = log_likelihood(model(X[s : s + 1]), y[s : s + 1])[0]
        gs = torch.autograd.grad(lp, [params[n] for n in names], allow_unused=True)
        rows.append([torch.zeros_like(params[n]) if g is None else g for n, g in zip(names, gs, strict=True)])
    return {n: torch.stack([r[i] for r in rows]) for i, n in enumerate(names)}


def diag_fisher(
    model: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor | None = None,
    names: Sequence[str] | None = None,
    *,
    kind: str = "expected",
    samples: int = 1,
    generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """Diagonal Fisher of ``model`` on ``X``: ``kind`` "expected" (the Fisher proper, under the model's own
    predictive; y unused) or "empirical" (with the true labels y, a biased approximation).

    For a sequence model (logits ``(n, C, T)``) the expected Fisher is the Monte Carlo estimate from
    ``samples`` label windows per sample drawn with ``generator``; for a classifier it is exact."""
    names = list(names) if names is not None else trainable_names(model)
    if not names:
        raise InputError("diag_fisher: the model has no parameters to estimate a Fisher for")
    if kind == "empirical":
        if y is None:
            raise InputError("diag_fisher: kind='empirical' needs the labels y")
        g = per_sample_grads(model, X, y, names)
        return {n: (g[n] ** 2).mean(0) for n in names}
    if kind != "expected":
        raise InputError(f"diag_fisher: kind must be 'empirical' or 'expected', got {kind!r}")
    _check_xy(X, None, "diag_fisher")
    params = dict(model.named_parameters())
    plist = [params[n] for n in names]
    with torch.no_grad():
        probe = model(X[:1])
    if probe.ndim > 2:
        return sampled_fisher(model, X, names, samples=samples, generator=generator)
    out = {n: torch.zeros_like(params[n]) for n in names}
    for s in range(X.shape[0]):  # F = mean_s Σ_k p_k (∇ log p_k)², exactly, one backward per class
        logp = torch.log_softmax(model(X[s : s + 1]), dim=-1)[0]
        probs = logp.detach().exp()
        for k in range(logp.shape[0]):
            gs = torch.autograd.grad(logp[k], plist, retain_graph=True, allow_unused=True)
            for n, g in zip(names, gs, strict=True):
                if g is not None:
                    out[n] += probs[k] * g**2
    return {n: v / X.shape[0] for n, v in out.items()}


def grad_correlation(
    model_fed: nn.Module,
    model_loc: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    names: Sequence[str] | None = None,
    *,
    eps: float = 1e-30,
) -> dict[str, torch.Tensor]:
    """Per-coordinate correlation of the two models' per-sample gradients on the same samples (in [-1, 1])."""
    names = list(names) if names is not None else trainable_names(model_fed)
    gf = per_sample_grads(model_fed, X, y, names)
    gl = per_sample_grads(model_loc, X, y, names)
    return {n: correlation(gf[n], gl[n], eps) for n in names}


def correlation(gf: torch.Tensor, gl: torch.Tensor, eps: float = 1e-30) -> torch.Tensor:
    """Uncentred per-coordinate correlation of two (n, ...) stacks of per-sample gradients."""
    num = (gf * gl).sum(0)
    den = torch.sqrt((gf**2).sum(0) * (gl**2).sum(0))
    rho = torch.where(den > eps, num / den.clamp_min(eps), torch.zeros_like(num))
    return rho.clamp(-1.0, 1.0)  # Cauchy-Schwarz bounds it; clamping removes float rounding past ±1


def fisher_and_correlation(
    model_fed: nn.Module,
    model_loc: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    names: Sequence[str] | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Empirical Fisher of both models and their gradient correlation from one set of per-sample grads."""
    names = list(names) if names is not None else trainable_names(model_fed)
    gf = per_sample_grads(model_fed, X, y, names)
    gl = per_sample_grads(model_loc, X, y, names)
    ff = {n: (gf[n] ** 2).mean(0) for n in names}
    fl = {n: (gl[n] ** 2).mean(0) for n in names}
    return ff, fl, {n: correlation(gf[n], gl[n], 1e-30) for n in names}


def sampled_fisher(
    model: nn.Module,
    X: torch.Tensor,
    names: Sequence[str],
    *,
    samples: int = 1,
    generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """Monte Carlo expected Fisher: ``mean over samples and draws of (∇ log p(ŷ | x))²`` with ŷ drawn from
    the model's predictive (an unbiased estimate of the Fisher; the slow reference, one backward each)."""
    if not isinstance(samples, int) or samples < 1:
        raise InputError(f"diag_fisher: samples must be a positive integer, got {samples!r}")
    with torch.no_grad():
        logits = model(X)
    out = {n: torch.zeros_like(model.get_parameter(n)) for n in names}
    for _ in range(samples):
        g = per_sample_grads(model, X, sample_labels(logits, generator), names)
        for n in names:
            out[n] += (g[n] ** 2).mean(0) / samples
    return out
