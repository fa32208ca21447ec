"""Attach δ-Mem to a transformers Llama-family model (frozen backbone), reset/inspect its state."""

from __future__ import annotations

import torch
from torch import nn

from delta_mem.memory import DeltaMemConfig, DeltaMemLayer, _Context
from papershelf.errors import InputError

ATTR = "delta_mem"  # the memory module's attribute name on each wrapped attention module
PROJ = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj"}


def _attention_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    found = []
    for name, mod in model.named_modules():
        if all(isinstance(getattr(mod, p, None), nn.Linear) for p in PROJ.values()):
            found.append((name, mod))
    return found


def _describe_attention_like(model: nn.Module) -> str:
    seen = []
    for name, mod in model.named_modules():
        cls = type(mod).__name__
        if "attn" in name.split(".")[-1].lower() or "attention" in cls.lower():
            children = ",".join(n for n, _ in mod.named_children()) or "no submodules"
            seen.append(f"{cls}({children}) at {name or '<root>'}")
    return "; ".join(dict.fromkeys(seen[:4])) or "no attention-like module at all"


def _hidden_size(attn: nn.Module) -> int:
    return attn.q_proj.in_features


def is_wrapped(model: nn.Module) -> bool:
    return any(isinstance(m, DeltaMemLayer) for m in model.modules())


def memory_layers(model: nn.Module) -> list[DeltaMemLayer]:
    return [m for m in model.modules() if isinstance(m, DeltaMemLayer)]


def attach_delta_mem(
    model: nn.Module, config: DeltaMemConfig | None = None, *, freeze: bool = True
) -> list[str]:
    """Wrap every Llama-style attention module (``q_proj``/``k_proj``/``v_proj``/``o_proj`` linears) of
    ``model`` with a δ-Mem layer, in place; freeze the backbone. Returns the wrapped module names.

    The wrapped model computes exactly the backbone's function until the zero-initialised corrections
    are trained. The memory state persists across forward calls (streaming); :func:`reset_state` clears it.
    """
    if not isinstance(model, nn.Module):
        raise InputError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    cfg = (config or DeltaMemConfig()).validate()
    if is_wrapped(model):
        raise InputError("model already has δ-Mem attached; call detach_delta_mem(model) first")
    attns = _attention_modules(model)
    if not attns:
        raise InputError(
            "no Llama-style attention module with q_proj/k_proj/v_proj/o_proj linears found; found: "
            + _describe_attention_like(model)
        )
    if cfg.layers is not None:
        bad = [i for i in cfg.layers if i >= len(attns)]
        if bad:
            raise InputError(f"layers {bad} out of range: the model has {len(attns)} attention layers")
        attns = [attns[i] for i in sorted(set(cfg.layers))]
    if freeze:
        for p in model.parameters():
            p.requires_grad_(False)
    ctx = _Context()
    device = next(model.parameters()).device
    names = []
    for index, (name, attn) in enumerate(attns):
        dims = {t: getattr(attn, PROJ[t]).out_features for t in cfg.delta_targets}
        layer = DeltaMemLayer(_hidden_size(attn), dims, cfg, index).to(device)
        layer.context = ctx
        setattr(attn, ATTR, layer)
        handles = [attn.register_forward_pre_hook(_read_hook, with_kwargs=True)]
        for t in cfg.delta_targets:
            handles.append(getattr(attn, PROJ[t]).register_forward_hook(_make_correction_hook(layer, t)))
        handles.append(attn.register_forward_hook(_clear_hook))
        layer._handles = handles
        names.append(name)
    handle = model.register_forward_pre_hook(_make_ids_hook(ctx), with_kwargs=True)
    model._delta_mem_handles = [handle]
    model._delta_mem_config = cfg
    return names


def detach_delta_mem(model: nn.Module) -> None:
    """Remove every δ-Mem layer and hook; the model is the bare backbone again."""
    for mod in list(model.modules()):
        layer = getattr(mod, ATTR, None)
        if isinstance(layer, DeltaMemLayer):
            for h in layer._handles:
                h.remove()
            delattr(mod, ATTR)
    for h in getattr(model, "_delta_mem_handles", []):
        h.remove()
    for attr in ("_delta_mem_handles", "_delta_mem_config"):
        if hasattr(model, attr):
            delattr(model, attr)


def _make_ids_hook(ctx: _Context):
    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args and isinstance(args[0], torch.Tensor) else None)
        ctx.input_ids = ids
        return None

    return hook


def _read_hook(attn, args, kwargs):
    x = kwargs.get("hidden_states", args[0] if args else None)
    if x is None:
        raise InputError("δ-Mem could not find the attention module's hidden_states input")
    layer: DeltaMemLayer = getattr(attn, ATTR)
    layer.reads = layer(x)
    return None


def _make_correction_hook(layer: DeltaMemLayer, target: str):
    def hook(module, args, output):
        if layer.reads is None:
            return output
        delta = layer.correction(target)
        return output + (delta if delta.dtype == output.dtype else delta.to(output.dtype))

    return hook


def _clear_hook(attn, args, output):
    getattr(attn, ATTR).reads = None
    return output


def reset_state(model: nn.Module) -> None:
    """Empty every layer's memory (a new conversation)."""
    for layer in memory_layers(model):
        layer.reset()


def detach_state(model: nn.Module) -> None:
    """Cut the autograd graph at the current state (truncated backpropagation through time)."""
    for layer in memory_layers(model):
        layer.detach_state()


def get_state(model: nn.Module) -> list[torch.Tensor | None]:
    """The current state matrix of every wrapped layer, (B, heads, rank, rank) or None."""
    return [layer.state for layer in memory_layers(model)]


def memory_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """The δ-Mem parameters by their name in ``model.state_dict()``."""
    return {n: p for n, p in model.named_parameters() if f".{ATTR}." in f".{n}"}


def count_memory_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in memory_parameters(model).values())
