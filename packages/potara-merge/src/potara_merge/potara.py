"""Potara per client: estimate a, b, c from ~30 held-out samples, take λ* in closed form, merge.

>>> # personalised, info = personalise(model, fed_state, local_state, X_fisher, y_fisher)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from papershelf.errors import InputError, check_choice
from potara_merge.federated import State, set_state
from potara_merge.fisher import _check_xy, correlation, diag_fisher, per_sample_grads, sample_labels
from potara_merge.lora import lora_modules, merge_lora
from potara_merge.weights import Traces, global_traces, module_traces

FISHER_KINDS = ("expected", "empirical")


@dataclass
class PotaraInfo:
    """What the closed form decided for one client."""

    weights: dict[str, float]  # module -> λ (all equal when per_module=False)
    traces: dict[str, Traces]  # module -> traces
    total: Traces  # traces summed over all modules

    def to_dict(self) -> dict:
        return {
            "weights": self.weights,
            "traces": {k: t.to_dict() for k, t in self.traces.items()},
            "total": self.total.to_dict(),
        }


def estimate_traces(
    model: nn.Module,
    fed: State,
    loc: State,
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    cross: bool = True,
    fisher: str = "expected",
    damping: float = 1e-3,
    n_fed: float = 1.0,
    n_loc: float = 1.0,
    client: str | int = "client",
    skip_identical: bool = True,
    fisher_samples: int = 1,
    seed: int = 0,
) -> dict[str, Traces]:
    """Per-module traces of one client from the diagonal Fisher of both adapters on (X, y).

    ``skip_identical`` leaves coordinates whose values are identical in both adapters out of a, b, c
    (any λ gives them the same value; see :func:`module_traces`). For a sequence model the expected
    Fisher is a Monte Carlo estimate from ``fisher_samples`` label windows per sample, drawn with a
    generator seeded by ``seed`` (the same draws for both adapters' estimates of one client).
    """
    if X.shape[0] == 0:
        raise InputError(f"client {client}: no samples to estimate the Fisher from")
    _check_xy(X, y, f"client {client}")
    check_choice("fisher", fisher, FISHER_KINDS)
    missing = sorted(set(fed) ^ set(loc))
    if missing:
        raise InputError(f"client {client}: fed and loc hold different entries, e.g. {missing[0]!r}")
    names = list(fed)
    groups = {m: [a, b] for m, (a, b) in lora_modules(fed).items()}
    from potara_merge.federated import lora_layers, lora_per_sample_grads

    if not isinstance(fisher_samples, int) or fisher_samples < 1:
        raise InputError(
            f"client {client}: fisher_samples must be a positive integer, got {fisher_samples!r}"
        )
    fast = bool(lora_layers(model)) and set(names) == {
        n for n, p in model.named_parameters() if p.requires_grad
    }

    def grads():
        return lora_per_sample_grads(model, X, y) if fast else per_sample_grads(model, X, y, names)

    def fisher_of(g):
        if fisher == "empirical":
            return {n: (g[n] ** 2).mean(0) for n in names}
        gen = torch.Generator().manual_seed(seed)
        if not fast:
            return diag_fisher(model, X, y, names, kind=fisher, samples=fisher_samples, generator=gen)
        with torch.no_grad():
            logits = model(X)
        out = {n: torch.zeros_like(model.get_parameter(n), requires_grad=False) for n in names}
        if logits.ndim > 2:  # a sequence model: Monte Carlo over label windows from its predictive
            for _ in range(fisher_samples):
                gs = lora_per_sample_grads(model, X, sample_labels(logits, gen))
                for n in names:
                    out[n] += (gs[n] ** 2).mean(0) / fisher_samples
            return out
        # a classifier, exactly and batched: F = mean_s Σ_k p_k(x_s) (∇ log p_k(x_s))², one backward per class
        probs = torch.softmax(logits, dim=-1)
        for k in range(probs.shape[1]):
            gk = lora_per_sample_grads(model, X, torch.full_like(y, k))
            w = probs[:, k]
            for n in names:
                out[n] += (w.reshape(-1, *([1] * (gk[n].ndim - 1))) * gk[n] ** 2).mean(0)
        return out

    set_state(model, fed)
    gf = grads()
    ff = fisher_of(gf)
    set_state(model, loc)
    gl = grads()
    fl = fisher_of(gl)
    corr = {n: correlation(gf[n], gl[n]) for n in names} if cross else None
    for label, f in (("federated", ff), ("local", fl)):
        for n, t in f.items():
            if not torch.isfinite(t).all():
                raise InputError(f"client {client}: NaN/inf in the {label} model's Fisher for {n!r}")
    same = {n: fed[n] == loc[n] for n in names} if skip_identical else None
    return module_traces(
        ff, fl, groups, corr=corr if cross else None, n_fed=n_fed, n_loc=n_loc, damping=damping, same=same
    )


def personalise(
    model: nn.Module,
    fed: State,
    loc: State,
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    per_module: bool = False,
    mode: str = "factors",
    config: Mapping | None = None,
    **kw,
) -> tuple[State, PotaraInfo]:
    """The personalised adapter ``λ* fed + (1 − λ*) loc`` (factors or product) and the decision made."""
    traces = estimate_traces(model, fed, loc, X, y, **kw)
    total = global_traces(traces)
    weights = {m: t.weight for m, t in traces.items()} if per_module else dict.fromkeys(traces, total.weight)
    merged, _ = merge_lora(fed, loc, weights, mode=mode, fed_config=config, loc_config=config)
    return merged, PotaraInfo(weights, traces, total)
