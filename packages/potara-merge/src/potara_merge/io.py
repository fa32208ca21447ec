"""Merging PEFT adapter folders from the command line or Python, and Fisher files (safetensors)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch

from papershelf.errors import InputError, check_number
from potara_merge.lora import (
    MODES,
    canonical_key,
    check_compatible,
    load_adapter,
    lora_modules,
    merge_lora,
    module_of,
    save_adapter,
)
from potara_merge.weights import check_correlation, check_fisher, global_traces, module_traces


def save_fisher(path: str | os.PathLike[str], fisher: Mapping[str, torch.Tensor], prefix: str = "") -> None:
    """Write a diagonal Fisher (or gradient correlation) as safetensors under PEFT's saved key names."""
    from safetensors.torch import save

    from papershelf.repro import atomic_path

    tensors = {prefix + canonical_key(k): v.detach().float().contiguous() for k, v in fisher.items()}
    with atomic_path(path, mode="wb") as fh:
        fh.write(save(tensors))


def load_fisher(path: str | os.PathLike[str], who: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    if not Path(path).is_file():
        raise InputError(f"{who} {str(path)!r} is not a file")
    try:
        return {canonical_key(k): v for k, v in load_file(str(path)).items()}
    except Exception as exc:
        raise InputError(f"{who}: cannot read {path} ({exc})") from None


def merge_adapter_dirs(
    global_dir,
    local_dir,
    out_dir,
    *,
    weight: float | None = None,
    fisher_global=None,
    fisher_local=None,
    grad_corr=None,
    per_module: bool = False,
    damping: float = 1e-3,
    mode: str = "factors",
) -> dict:
    """Merge two PEFT LoRA adapter folders into ``out_dir`` with a fixed λ or the closed-form one.

    The closed form is :func:`potara_merge.personalise`'s rule: coordinates identical in both adapters
    (e.g. a LoRA factor neither side trained) carry no information about λ and are left out of the traces."""
    check_number("damping", damping, low=0)
    fed, cfg_f = load_adapter(global_dir, "--global")
    loc, cfg_l = load_adapter(local_dir, "--local")
    fed = {canonical_key(k): v for k, v in fed.items()}
    loc = {canonical_key(k): v for k, v in loc.items()}
    if mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    check_compatible(fed, loc, same_rank=mode == "factors")  # the adapters first, then the Fisher files
    info: dict = {}
    if weight is not None:
        weights: float | dict[str, float] = weight
        info["weights"] = dict.fromkeys(lora_modules(fed), float(weight) + 0.0)  # no "-0.0000"
    else:
        ff = load_fisher(fisher_global, "--fisher-global")
        fl = load_fisher(fisher_local, "--fisher-local")
        corr = load_fisher(grad_corr, "--grad-corr") if grad_corr else None
        groups = {m: [a, b] for m, (a, b) in lora_modules(fed).items()}
        checked = [("--fisher-global", ff), ("--fisher-local", fl)] + (
            [("--grad-corr", corr)] if corr else []
        )
        for name, src in checked:  # errors name the flag (module_traces would say fisher_fed/fisher_loc)
            extra = sorted(set(src) - set(fed))
            if extra:  # most likely the file of another adapter: its λ would be silently wrong
                raise InputError(f"{name}: entry {extra[0]!r} is not a parameter of the --global adapter")
            for k in fed:
                if k not in src:
                    raise InputError(f"{name}: no entry for {k!r} (module {module_of(k)!r})")
                if src[k].shape != fed[k].shape:
                    raise InputError(
                        f"{name}: entry {k!r} has shape {tuple(src[k].shape)}, "
                        f"the adapter's is {tuple(fed[k].shape)}"
                    )
                if name == "--grad-corr":
                    check_correlation("--grad-corr entry", k, src[k])
                else:
                    check_fisher(f"{name} entry", k, src[k])
        for name, src in (("--fisher-global", ff), ("--fisher-local", fl)):
            if all(not bool(src[k].any()) for k in fed):  # no information at all: λ would be a default
                raise InputError(
                    f"{name} is zero everywhere: it carries no information for λ (estimate it with the "
                    "adapter loaded and trainable, on the client's samples)"
                )
        same = {k: fed[k] == loc[k] for k in fed if k in loc and fed[k].shape == loc[k].shape}
        traces = module_traces(ff, fl, groups, corr=corr, damping=damping, same=same)
        total = global_traces(traces)
        weights = (
            {m: t.weight for m, t in traces.items()} if per_module else dict.fromkeys(traces, total.weight)
        )
        info.update(
            weights=weights, traces={m: t.to_dict() for m, t in traces.items()}, total=total.to_dict()
        )
    merged, cfg = merge_lora(fed, loc, weights, mode=mode, fed_config=cfg_f, loc_config=cfg_l)
    save_adapter(out_dir, merged, cfg)
    return info
