"""``compress(model, calib_batches, ratio, config)``: calibrate, profile, allocate by knapsack, factorize.

The budget: the target linear layers keep at most ``(1 − ratio)·Σ d_in·d_out`` parameters (A's entries plus
B's non-zeros; biases and the index storage of sparse B are reported separately). Everything else in the
model (embeddings, norms) is untouched.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from papershelf.errors import InputError, check_choice, check_number
from rocket_compress.calibration import Calibration, collect_input_grams, target_linears
from rocket_compress.factorize import (
    DEFAULT_KS,
    DEFAULT_RATIOS,
    LayerProblem,
    Option,
    profile_layer,
    rank_and_sparsity,
    whiten,
)
from rocket_compress.knapsack import solve_mckp
from rocket_compress.modules import FactorizedLinear


@dataclass
class CompressConfig:
    """Settings of ROCKET (defaults follow the paper where it states them; see the README's Fidelity).

    ratios, ks_grid: the profiled compression levels and rank/non-zero ratios of every layer (the dense
        option, ratio 0, is always added);
    allocation: ``"knapsack"`` (multi-choice knapsack over the profile) or ``"uniform"`` (every layer at
        the target ratio, its best ks);
    lam: the activation/weight score exponent λ; recover: fraction of k re-admitted per column globally;
    jitter: relative Cholesky jitter of a Gram that is not positive definite;
    top_up: spend the budget the discrete knapsack leaves unused on the worst layers;
    include / exclude: regexes selecting the target linear layers (default: all but the output head);
    backend: FactorizedLinear backend (``torch``, ``triton`` or ``auto``).
    """

    ratios: tuple[float, ...] = DEFAULT_RATIOS
    ks_grid: tuple[float, ...] = DEFAULT_KS
    allocation: str = "knapsack"
    lam: float = 0.5
    recover: float = 0.005
    jitter: float = 7e-6
    top_up: bool = True
    include: str | None = None
    exclude: str | None = None
    backend: str = "torch"

    def validate(self) -> None:
        check_choice("allocation", self.allocation, ("knapsack", "uniform"))
        check_number("lam", self.lam, low=0, high=1)
        check_number("recover", self.recover, low=0, high=0.5)
        check_number("jitter", self.jitter, low=0, low_open=True)
        if not self.ratios or not self.ks_grid:
            raise InputError("ratios and ks_grid must be non-empty")
        for r in self.ratios:
            check_number("ratios", r, low=0, high=1, low_open=True, high_open=True)
        for k in self.ks_grid:
            check_number("ks_grid", k, low=1)
        check_choice("backend", self.backend, ("torch", "triton", "auto"))


@dataclass
class LayerProfile:
    name: str
    d_in: int
    d_out: int
    options: list[Option]


@dataclass
class Report:
    """What ``compress`` did: per-layer choices and errors, the budget and the parameters achieved."""

    ratio: float
    allocation: str
    layers: list[dict]
    params_dense: int  # Σ d_in·d_out of the target layers
    budget: int  # ⌊(1 − ratio)·params_dense⌋
    params: int  # target-layer parameters after compression (A + non-zeros of B)
    index_entries: int  # row indices stored for sparse B (not counted in params)
    model_params_before: int
    model_params_after: int
    calib_tokens: int
    seconds: dict = field(default_factory=dict)

    @property
    def achieved_ratio(self) -> float:
        return 1.0 - self.params / self.params_dense

    def to_dict(self) -> dict:
        d = asdict(self)
        d["achieved_ratio"] = self.achieved_ratio
        return d

    def summary(self) -> str:
        return (
            f"{self.allocation} at ratio {self.ratio:g}: target layers {self.params_dense:,} -> "
            f"{self.params:,} "
            f"parameters (budget {self.budget:,}; reduction {self.achieved_ratio:.4f}); "
            f"index entries {self.index_entries:,}; model {self.model_params_before:,} -> "
            f"{self.model_params_after:,}; mean whitened rel. error "
            f"{sum(r['rel_error'] for r in self.layers) / len(self.layers):.4f}"
        )


def count_params(model: nn.Module) -> int:
    """Distinct stored parameters (tied weights once; FactorizedLinear counts B's true non-zeros)."""
    seen, total = set(), 0
    for mod in model.modules():
        if isinstance(mod, FactorizedLinear):
            total += mod.n_params
            seen.update(id(p) for p in mod.parameters(recurse=False))
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def _weight(mod: nn.Linear) -> torch.Tensor:
    return mod.weight.detach().to("cpu", torch.float64).T  # d_in × d_out


class _Whitener:
    """S and S⁻¹ per Gram owner, computed once."""

    def __init__(self, calib: Calibration, jitter: float) -> None:
        self.calib, self.jitter, self.cache = calib, jitter, {}

    def __call__(self, name: str):
        owner = self.calib.shared.get(name, name)
        if owner not in self.cache:
            self.cache[owner] = whiten(self.calib.grams[name], self.jitter)
        return self.cache[owner]


def check_calibration(model: nn.Module, names: list[str], calib: Calibration) -> None:
    """Too few calibration tokens for a full-rank Gram is an error."""
    modules = dict(model.named_modules())
    widest = max(modules[n].in_features for n in names)
    if calib.tokens < widest:
        raise InputError(
            f"calib_batches hold {calib.tokens} tokens, fewer than the widest layer input ({widest}): "
            "the Gram cannot be full rank",
            hint=f"give at least {widest} calibration tokens (a few times more is better)",
        )


def calibrate(model: nn.Module, calib_batches: Iterable, config: CompressConfig | None = None) -> Calibration:
    """Collect the Grams of the target layers and check there are enough tokens."""
    config = config or CompressConfig()
    names = target_linears(model, config.include, config.exclude)
    calib = collect_input_grams(model, calib_batches, names)
    check_calibration(model, names, calib)
    return calib


def profile(
    model: nn.Module, calib: Calibration, config: CompressConfig | None = None, extra_ratios=()
) -> list[LayerProfile]:
    """Relative whitened error of every layer at every (ratio, ks) of the grid (plus ``extra_ratios``)."""
    config = config or CompressConfig()
    config.validate()
    ratios = tuple(sorted(set(config.ratios) | set(extra_ratios)))
    modules = dict(model.named_modules())
    white = _Whitener(calib, config.jitter)
    out = []
    for name in calib.grams:
        mod = modules[name]
        S, S_inv = white(name)
        prob = LayerProblem(_weight(mod), S, S_inv)
        opts = profile_layer(prob, ratios, config.ks_grid, lam=config.lam, recover=config.recover)
        out.append(LayerProfile(name, mod.in_features, mod.out_features, opts))
    return out


def allocate(profiles: list[LayerProfile], ratio: float, method: str = "knapsack") -> dict[str, Option]:
    """One option per layer: knapsack under ``⌊(1−ratio)·Σ d_in d_out⌋`` parameters, or uniform ratio."""
    check_number("ratio", ratio, low=0, high=1, low_open=True, high_open=True)
    check_choice("allocation", method, ("knapsack", "uniform"))
    if method == "uniform":
        chosen = {}
        for lp in profiles:
            at = [o for o in lp.options if math.isclose(o.ratio, ratio)]
            if not at:
                raise InputError(
                    f"layer {lp.name} ({lp.d_in}×{lp.d_out}) has no feasible option at ratio {ratio:g}"
                )
            chosen[lp.name] = min(at, key=lambda o: o.rel_error)
        return chosen
    total = sum(lp.d_in * lp.d_out for lp in profiles)
    budget = math.floor((1.0 - ratio) * total + 1e-6)
    costs = [[o.params for o in lp.options] for lp in profiles]
    errors = [[o.rel_error for o in lp.options] for lp in profiles]
    choice = solve_mckp(costs, errors, budget)
    return {lp.name: lp.options[j] for lp, j in zip(profiles, choice, strict=True)}


def apply(
    model: nn.Module,
    calib: Calibration,
    allocation: dict[str, Option],
    ratio: float,
    config: CompressConfig | None = None,
    *,
    label: str | None = None,
) -> Report:
    """Factorize every allocated layer and swap it for a ``FactorizedLinear`` (in place)."""
    config = config or CompressConfig()
    t0 = time.perf_counter()
    modules = dict(model.named_modules())
    before = count_params(model)
    white = _Whitener(calib, config.jitter)
    dense_total = sum(modules[n].in_features * modules[n].out_features for n in allocation)
    budget = math.floor((1.0 - ratio) * dense_total + 1e-6)
    probs, facts = {}, {}
    for name, opt in allocation.items():
        S, S_inv = white(name)
        probs[name] = LayerProblem(_weight(modules[name]), S, S_inv)
        facts[name] = probs[name].factorize_ratio(
            opt.ratio, opt.ks or 1.0, lam=config.lam, recover=config.recover
        )
    if config.top_up:
        _top_up(probs, facts, budget, config)
    rows = []
    for name, f in facts.items():
        mod = modules[name]
        rows.append(
            {
                "name": name,
                "d_in": mod.in_features,
                "d_out": mod.out_features,
                "ratio": f.ratio,
                "ks": f.ks,
                "k": f.k,
                "nnz": f.nnz,
                "params": f.params,
                "rel_error": f.rel_error,
                "index_entries": f.index_entries,
            }
        )
        if f.dense:
            continue
        bias = None if mod.bias is None else mod.bias.detach()
        new = FactorizedLinear.from_factors(
            f.A, f.B, f.mask, bias, dtype=mod.weight.dtype, backend=config.backend
        )
        new.to(mod.weight.device)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, new)
    return Report(
        ratio=ratio,
        allocation=label or config.allocation,
        layers=rows,
        params_dense=dense_total,
        budget=budget,
        params=sum(r["params"] for r in rows),
        index_entries=sum(r["index_entries"] for r in rows),
        model_params_before=before,
        model_params_after=count_params(model),
        calib_tokens=calib.tokens,
        seconds={"factorize": time.perf_counter() - t0},
    )


def _top_up(probs, facts, budget, config) -> None:
    """Hand the parameters the discrete allocation left unused to the layers with the largest errors."""
    left = budget - sum(f.params for f in facts.values())
    for name in sorted(facts, key=lambda n: -facts[n].rel_error):
        f, p = facts[name], probs[name]
        if f.dense or left < p.d1 + p.d2:
            continue
        dense = p.d1 * p.d2
        new_ratio = 1.0 - (f.params + left) / dense
        if new_ratio <= 0:
            continue
        try:
            k, nnz = rank_and_sparsity(new_ratio, p.d1, p.d2, f.ks)
        except InputError:
            continue
        if (k, nnz) == (f.k, f.nnz):
            continue
        g = p.factorize(k, nnz, lam=config.lam, recover=config.recover, ratio=new_ratio, ks=f.ks)
        if g.rel_error <= f.rel_error and g.params <= f.params + left:
            left -= g.params - f.params
            facts[name] = g


def compress(
    model: nn.Module,
    calib_batches: Iterable,
    ratio: float,
    config: CompressConfig | None = None,
) -> tuple[nn.Module, Report]:
    """ROCKET: compress ``model`` in place to ``(1 − ratio)`` of its target-layer parameters.

    ``calib_batches``: an iterable of token-id tensors (batch, seq) without padding (a few thousand tokens
    or more; at least the widest layer input). Returns the model (its target ``nn.Linear`` layers replaced
    by :class:`FactorizedLinear` or kept dense) and a :class:`Report`.
    """
    check_number("ratio", ratio, low=0, high=1, low_open=True, high_open=True)
    config = config or CompressConfig()
    config.validate()
    t0 = time.perf_counter()
    calib = calibrate(model, calib_batches, config)
    t1 = time.perf_counter()
    profiles = profile(model, calib, config, extra_ratios=(ratio,) if config.allocation == "uniform" else ())
    t2 = time.perf_counter()
    chosen = allocate(profiles, ratio, config.allocation)
    t3 = time.perf_counter()
    report = apply(model, calib, chosen, ratio, config)
    report.seconds.update(
        calibrate=t1 - t0, profile=t2 - t1, allocate=t3 - t2, total=time.perf_counter() - t0
    )
    return model, report
