"""Calibration: the input Gram matrix ``C = (1/N) Σ x xᵀ`` of every target linear layer, by forward hooks.

Streaming: each batch's inputs are folded into a float64 running sum and dropped. Layers that read the
very same input tensor (q/k/v of an attention block, gate/up of an MLP) share one Gram, accumulated once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from papershelf.errors import InputError


def target_linears(model: nn.Module, include: str | None = None, exclude: str | None = None) -> list[str]:
    """Names of the ``nn.Linear`` modules to compress: every one except the output head.

    ``include``/``exclude`` are regular expressions matched (``re.search``) against the module names.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    names = []
    for name, mod in model.named_modules():
        if not isinstance(mod, nn.Linear) or mod is head:
            continue
        if include and not re.search(include, name):
            continue
        if exclude and re.search(exclude, name):
            continue
        names.append(name)
    if not names:
        raise InputError(
            "model has no linear layers to compress"
            + (f" matching include={include!r} / exclude={exclude!r}" if include or exclude else "")
        )
    return names


@dataclass
class Calibration:
    """Grams per layer (float64, d_in × d_in, normalised by the token count) and the tokens seen."""

    grams: dict[str, torch.Tensor]
    tokens: int
    shared: dict[str, str]  # layer -> the layer whose Gram it reuses (itself when it owns one)


def _as_ids(batch) -> torch.Tensor:
    if isinstance(batch, dict):
        batch = batch["input_ids"]
    ids = torch.as_tensor(batch)
    if ids.ndim == 1:
        ids = ids[None]
    if ids.ndim != 2 or ids.dtype not in (torch.int64, torch.int32):
        raise InputError(
            f"calib_batches must yield integer token ids of shape (batch, seq), got {tuple(ids.shape)}"
        )
    return ids.long()


@torch.no_grad()
def collect_input_grams(
    model: nn.Module, batches: Iterable, names: list[str] | None = None, *, device: str | None = None
) -> Calibration:
    """Run ``model`` over ``batches`` (token-id tensors (B, T), no padding) and return each layer's Gram."""
    names = target_linears(model) if names is None else list(names)
    modules = dict(model.named_modules())
    missing = [n for n in names if n not in modules]
    if missing:
        raise InputError(f"no module named {missing[0]!r} in the model")
    sums: dict[str, torch.Tensor] = {}
    owner: dict[str, str] = {}
    seen: dict[tuple, tuple[str, torch.Tensor]] = {}
    counts = {"tokens": 0}

    def hook_for(name):
        def hook(_mod, inputs):
            x = inputs[0]
            key = (x.data_ptr(), tuple(x.shape), tuple(x.stride()))
            if key in seen:  # the same tensor, still alive (held in `seen`), read by an earlier layer
                first = seen[key][0]
                if owner.setdefault(name, first) != first:
                    raise RuntimeError(f"inconsistent input sharing for {name}")
                return
            seen[key] = (name, x)
            owner.setdefault(name, name)
            if owner[name] != name:
                raise RuntimeError(f"inconsistent input sharing for {name}")
            flat = x.reshape(-1, x.shape[-1]).to(torch.float64)
            if name in sums:
                sums[name].addmm_(flat.T, flat)
            else:
                sums[name] = flat.T @ flat

        return hook

    handles = [modules[n].register_forward_pre_hook(hook_for(n)) for n in names]
    was_training = model.training
    model.eval()
    try:
        for batch in batches:
            ids = _as_ids(batch)
            if device is not None:
                ids = ids.to(device)
            seen.clear()
            model(input_ids=ids, use_cache=False) if _takes_use_cache(model) else model(ids)
            counts["tokens"] += ids.numel()
            seen.clear()
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    if counts["tokens"] == 0:
        raise InputError("calib_batches is empty")
    never = [n for n in names if n not in owner]
    if never:
        raise InputError(f"layer {never[0]!r} never ran during calibration")
    n = counts["tokens"]
    grams = {name: (sums[owner[name]] / n).cpu() for name in names}
    return Calibration(grams, n, dict(owner))


def _takes_use_cache(model) -> bool:
    return hasattr(model, "config") and hasattr(model.config, "use_cache")
