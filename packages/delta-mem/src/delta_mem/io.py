"""Save and load only the δ-Mem parameters (safetensors), checked against a backbone fingerprint."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
from torch import nn

from delta_mem.memory import DeltaMemConfig
from delta_mem.wrap import ATTR, attach_delta_mem, is_wrapped, memory_parameters
from papershelf.errors import InputError
from papershelf.repro import atomic_path

FORMAT = "delta-mem/1"


SAMPLES_PER_TENSOR = 8


def _backbone_tensors(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [(n, p) for n, p in sorted(model.state_dict().items()) if f".{ATTR}." not in f".{n}"]


def backbone_fingerprint(model: nn.Module) -> str:
    """JSON: a SHA-256 over the backbone's parameter names and shapes, and per floating tensor its dtype
    and a few values at fixed strided positions. Values, not a hash of them, so that the same checkpoint
    loaded in another precision (a float32-trained adapter on a bfloat16 backbone) is still recognised:
    :func:`same_backbone` compares them after rounding to the coarser dtype."""
    arch = hashlib.sha256()
    dtypes, samples = [], []
    for name, p in _backbone_tensors(model):
        arch.update(f"{name}|{tuple(p.shape)}".encode())
        if not p.is_floating_point() or p.numel() == 0:
            continue
        flat = p.detach().reshape(-1)
        at = torch.linspace(0, flat.numel() - 1, min(SAMPLES_PER_TENSOR, flat.numel())).long()
        dtypes.append(str(p.dtype).removeprefix("torch."))
        samples.append(flat[at].to("cpu", torch.float64).tolist())
    return json.dumps({"arch": arch.hexdigest(), "dtypes": dtypes, "samples": samples})


def _legacy_fingerprint(model: nn.Module) -> str:
    """The first fingerprint format (a hash that includes the dtypes), read for adapters saved with it."""
    h = hashlib.sha256()
    for name, p in _backbone_tensors(model):
        h.update(f"{name}|{tuple(p.shape)}|{p.dtype}".encode())
        flat = p.detach().reshape(-1)
        step = max(1, flat.numel() // 4096)
        h.update(flat[::step].float().cpu().numpy().tobytes())
    return h.hexdigest()


def _same_values(saved: list[float], saved_dtype: str, now: list[float], now_dtype: str) -> bool:
    """Equal once both are rounded to the coarser of the two dtypes (exact when one dtype holds the
    other's values, as float32 holds bfloat16's); bfloat16 against float16, where neither holds the
    other, within bfloat16's rounding (relative 2**-7)."""
    a = torch.tensor(saved, dtype=torch.float64)
    b = torch.tensor(now, dtype=torch.float64)
    if a.shape != b.shape:
        return False
    kinds = {saved_dtype, now_dtype}
    if kinds == {"bfloat16", "float16"}:
        return bool(((a - b).abs() <= 2.0**-7 * torch.maximum(a.abs(), b.abs())).all())
    try:
        coarse = max((getattr(torch, d) for d in kinds), key=lambda d: torch.finfo(d).eps)
    except (AttributeError, TypeError):
        return False
    return torch.equal(a.to(coarse), b.to(coarse))


def same_backbone(fingerprint: str, model: nn.Module) -> bool:
    """Whether ``model`` is the backbone a saved ``fingerprint`` describes: the same parameter names and
    shapes, and the same sampled values up to the precision it is loaded in."""
    if not isinstance(fingerprint, str):
        raise InputError(
            f"fingerprint must be the str backbone_fingerprint returns, got {type(fingerprint).__name__}"
        )
    if not fingerprint.startswith("{"):
        return fingerprint == _legacy_fingerprint(model)
    try:
        saved = json.loads(fingerprint)
        now = json.loads(backbone_fingerprint(model))
        if saved["arch"] != now["arch"] or len(saved["samples"]) != len(now["samples"]):
            return False
        pairs = zip(saved["samples"], saved["dtypes"], now["samples"], now["dtypes"], strict=True)
        return all(_same_values(*pair) for pair in pairs)
    except (ValueError, KeyError, TypeError):
        return False


def save_adapter(model: nn.Module, path: str | os.PathLike[str]) -> Path:
    """Write the δ-Mem parameters, config and backbone fingerprint to ``path`` (a .safetensors file)."""
    from safetensors.torch import save

    if not is_wrapped(model):
        raise InputError("model has no δ-Mem attached: nothing to save")
    path = Path(path)
    tensors = {n: p.detach().cpu().contiguous() for n, p in memory_parameters(model).items()}
    meta = {
        "format": FORMAT,
        "config": model._delta_mem_config.to_json(),
        "fingerprint": backbone_fingerprint(model),
    }
    with atomic_path(path, mode="wb") as handle:
        handle.write(save(tensors, metadata=meta))
    return path


def read_adapter(path: str | os.PathLike[str]) -> tuple[dict[str, torch.Tensor], DeltaMemConfig, str]:
    from safetensors import SafetensorError, safe_open

    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"adapter path must be a str or os.PathLike, got {type(path).__name__}")
    path = Path(path)
    if not path.is_file():
        raise InputError(f"adapter {str(path)!r} is not a file")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError) as e:
        raise InputError(f"adapter {str(path)!r} is not a readable safetensors file ({e})") from None
    if meta.get("format") != FORMAT:
        raise InputError(f"adapter {str(path)!r} is not a δ-Mem adapter (format {meta.get('format')!r})")
    if "config" not in meta or "fingerprint" not in meta:
        raise InputError(f"adapter {str(path)!r} lacks its config or backbone fingerprint (corrupt metadata)")
    try:
        cfg = DeltaMemConfig.from_json(meta["config"])
    except InputError as exc:
        raise InputError(f"adapter {str(path)!r}: {exc}") from None
    bad = [k for k, t in tensors.items() if not (t.is_floating_point() and torch.isfinite(t).all())]
    if bad:
        raise InputError(f"adapter {str(path)!r} holds non-finite or non-float tensors: {sorted(bad)[:3]}")
    return tensors, cfg, meta["fingerprint"]


def _check_sizes(path, tensors: dict[str, torch.Tensor], cfg: DeltaMemConfig) -> None:
    """The saved projections' sizes against the config's state size and heads: a config edited to
    ``rank = 10**9`` would otherwise allocate its projections before the shape check."""
    width = cfg.heads * cfg.rank
    rows = width * (4 if cfg.couple_lambda else 5)  # q, k, v, β[, λ]
    in_proj = {k: t.shape for k, t in tensors.items() if k.endswith("in_proj.weight")}
    deltas = {k: t.shape for k, t in tensors.items() if ".deltas." in k}
    wrong = [k for k, s in in_proj.items() if len(s) != 2 or s[0] != rows]
    wrong += [k for k, s in deltas.items() if len(s) != 2 or s[1] != width]
    if not in_proj or wrong:
        raise InputError(
            f"adapter {str(path)!r} does not match its own config (heads {cfg.heads}, rank {cfg.rank}): "
            f"{'no in_proj weights' if not in_proj else 'sizes of ' + ', '.join(sorted(wrong)[:2])}"
        )


def load_adapter(
    model: nn.Module, path: str | os.PathLike[str], *, check_backbone: bool = True
) -> DeltaMemConfig:
    """Attach δ-Mem (with the saved config) to a bare backbone and load the saved parameters.

    Raises :class:`~papershelf.errors.InputError` when the adapter was trained on another backbone
    (fingerprint mismatch) unless ``check_backbone=False``, or when the parameter names/shapes differ.
    """
    if not isinstance(model, nn.Module):
        raise InputError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    tensors, cfg, fingerprint = read_adapter(path)
    if is_wrapped(model):
        raise InputError("model already has δ-Mem attached; load the adapter into the bare backbone")
    if check_backbone and not same_backbone(fingerprint, model):
        raise InputError(
            f"adapter {str(path)!r} was trained on another backbone (fingerprint mismatch)",
            hint="load it into the model it was trained with, or pass check_backbone=False",
        )
    _check_sizes(path, tensors, cfg)  # before attaching allocates what the (possibly corrupt) config says
    trainable = [p.requires_grad for p in model.parameters()]  # attaching freezes them
    attach_delta_mem(model, cfg)
    params = memory_parameters(model)
    missing, extra = set(params) - set(tensors), set(tensors) - set(params)
    bad_shape = [n for n in set(params) & set(tensors) if params[n].shape != tensors[n].shape]
    if missing or extra or bad_shape:
        from delta_mem.wrap import detach_delta_mem

        detach_delta_mem(model)  # the model is left as it came: no memory, and not frozen
        for p, flag in zip(model.parameters(), trainable, strict=True):
            p.requires_grad_(flag)
        raise InputError(
            f"adapter {str(path)!r} does not fit this model: missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(extra)[:3]}, shape mismatch {sorted(bad_shape)[:3]}"
        )
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(tensors[n].to(p.device, p.dtype))
    return cfg
