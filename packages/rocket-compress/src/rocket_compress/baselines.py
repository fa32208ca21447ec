"""Baselines on the same parameter budget as ROCKET (re-implemented here; none is on PyPI):

- ``svd_llm``: SVD-LLM's whitening + truncation (``A = S⁻¹U_kΣ_k``, ``B = V_kᵀ``) at a uniform ratio —
  ROCKET with no sparsity, no dictionary update and no allocation;
- ``truncated_svd``: plain truncated SVD of each weight at the same rank (no calibration);
- ``magnitude_prune``: unstructured magnitude pruning keeping ``⌊(1−ratio)·d_in·d_out⌋`` weights per layer
  (stored densely with zeros; its parameter count is the non-zeros, index storage not counted, as for
  ROCKET's sparse B).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from papershelf.errors import check_number
from rocket_compress.calibration import Calibration, target_linears
from rocket_compress.factorize import rank_and_sparsity
from rocket_compress.modules import FactorizedLinear
from rocket_compress.pipeline import Report, _weight, _Whitener, count_params


def _swap(model, name, new):
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, new)


def _low_rank(model: nn.Module, names, ratio, factor, label, calib_tokens=0) -> Report:
    check_number("ratio", ratio, low=0, high=1, low_open=True, high_open=True)
    modules = dict(model.named_modules())
    before = count_params(model)
    rows = []
    for name in names:
        mod = modules[name]
        d1, d2 = mod.in_features, mod.out_features
        k, _ = rank_and_sparsity(ratio, d1, d2, 1.0)
        A, B, err = factor(name, _weight(mod), k)
        bias = None if mod.bias is None else mod.bias.detach()
        new = FactorizedLinear.from_factors(A, B, None, bias, dtype=mod.weight.dtype).to(mod.weight.device)
        _swap(model, name, new)
        rows.append(
            {
                "name": name,
                "d_in": d1,
                "d_out": d2,
                "ratio": ratio,
                "ks": 1.0,
                "k": k,
                "nnz": k,
                "params": k * (d1 + d2),
                "rel_error": err,
                "index_entries": 0,
            }
        )
    dense = sum(r["d_in"] * r["d_out"] for r in rows)
    return Report(
        ratio,
        label,
        rows,
        dense,
        math.floor((1 - ratio) * dense + 1e-6),
        sum(r["params"] for r in rows),
        0,
        before,
        count_params(model),
        calib_tokens,
    )


def svd_llm(model: nn.Module, calib: Calibration, ratio: float, *, jitter: float = 7e-6) -> Report:
    """SVD-LLM (whitening + truncation, uniform rank) in place on the layers of ``calib``."""
    white = _Whitener(calib, jitter)

    def factor(name, W, k):
        S, S_inv = white(name)
        Xt = S @ W
        U, sig, Vh = torch.linalg.svd(Xt, full_matrices=False)
        err = float(torch.sqrt((sig[k:] ** 2).sum() / (sig**2).sum()))
        return S_inv @ U[:, :k], sig[:k, None] * Vh[:k], err

    return _low_rank(model, list(calib.grams), ratio, factor, "svd-llm", calib.tokens)


def truncated_svd(model: nn.Module, ratio: float, names: list[str] | None = None) -> Report:
    """Plain truncated SVD of every target weight at the rank of the budget (no calibration)."""
    names = target_linears(model) if names is None else names

    def factor(name, W, k):
        U, sig, Vh = torch.linalg.svd(W, full_matrices=False)
        err = float(torch.sqrt((sig[k:] ** 2).sum() / (sig**2).sum()))  # weight-space error
        return U[:, :k] * sig[:k], Vh[:k], err

    return _low_rank(model, names, ratio, factor, "truncated-svd")


@torch.no_grad()
def magnitude_prune(model: nn.Module, ratio: float, names: list[str] | None = None) -> Report:
    """Keep the ``⌊(1−ratio)·d_in·d_out⌋`` largest-magnitude weights of every target layer (in place)."""
    check_number("ratio", ratio, low=0, high=1, low_open=True, high_open=True)
    names = target_linears(model) if names is None else names
    modules = dict(model.named_modules())
    before = count_params(model)
    rows = []
    for name in names:
        mod = modules[name]
        w = mod.weight
        keep = math.floor((1 - ratio) * w.numel() + 1e-6)
        top = w.abs().flatten().topk(keep).indices
        mask = torch.zeros(w.numel(), dtype=torch.bool, device=w.device)
        mask[top] = True
        err = float((w.flatten()[~mask]).norm() / w.norm())
        w.mul_(mask.view_as(w))
        rows.append(
            {
                "name": name,
                "d_in": mod.in_features,
                "d_out": mod.out_features,
                "ratio": ratio,
                "ks": None,
                "k": None,
                "nnz": keep,
                "params": keep,
                "rel_error": err,
                "index_entries": keep,
            }
        )
    dense = sum(r["d_in"] * r["d_out"] for r in rows)
    after = before - dense + sum(r["params"] for r in rows)
    return Report(
        ratio,
        "magnitude",
        rows,
        dense,
        math.floor((1 - ratio) * dense + 1e-6),
        sum(r["params"] for r in rows),
        sum(r["index_entries"] for r in rows),
        before,
        after,
        0,
    )
