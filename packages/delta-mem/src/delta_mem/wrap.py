"""Attach δ-Mem to a transformers Llama-family model (frozen backbone), reset/inspect its state."""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from delta_mem.memory import DECODE_BACKENDS, DeltaMemConfig, DeltaMemLayer, _Context
from papershelf.errors import InputError, check_choice

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
    if config is not None and not isinstance(config, DeltaMemConfig):
        raise InputError(f"config must be a DeltaMemConfig or None, got {type(config).__name__}")
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
    for name, attn in attns:  # before allocating: heads=10**5 would otherwise die in the allocator
        if cfg.heads * cfg.rank > _hidden_size(attn):
            raise InputError(
                f"heads × rank = {cfg.heads} × {cfg.rank} = {cfg.heads * cfg.rank} exceeds the hidden size "
                f"{_hidden_size(attn)} of {name or '<root>'}; the state is meant to be compact "
                f"(default 8 × 8): use heads × rank <= {_hidden_size(attn)}"
            )
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
        for t in _patched_targets(cfg):
            proj = getattr(attn, PROJ[t])
            proj.forward = _PatchedForward(proj, layer, t, t in cfg.delta_targets)
        names.append(name)
    # on the decoder stack itself (LlamaModel inside LlamaForCausalLM): a direct call of model.model(...)
    # must see its own ids too, and the ids are dropped after each call so no later call can reuse them
    inner = getattr(model, "model", None)
    target = inner if isinstance(inner, nn.Module) and hasattr(inner, "embed_tokens") else model
    target.forward = _StackForward(target, ctx)
    model._delta_mem_handles = [_StackForwardHandle(target)]
    model._delta_mem_config = cfg
    return names


def _patched_targets(cfg: DeltaMemConfig) -> tuple[str, ...]:
    """The projections whose forward is patched: the corrected ones, ``o`` (it ends each attention call)
    and ``q`` when no input projection is corrected (one of them must run the memory). The others keep
    their own forward: a patched call costs a few microseconds per layer and token."""
    inputs = [t for t in ("q", "k", "v") if t in cfg.delta_targets] or ["q"]
    return (*inputs, "o")


def detach_delta_mem(model: nn.Module) -> None:
    """Remove every δ-Mem layer and hook; the model is the bare backbone again."""
    for mod in list(model.modules()):
        layer = getattr(mod, ATTR, None)
        if isinstance(layer, DeltaMemLayer):
            for attr in PROJ.values():
                getattr(mod, attr).__dict__.pop("forward", None)
            delattr(mod, ATTR)
    for h in getattr(model, "_delta_mem_handles", []):
        h.remove()
    for attr in ("_delta_mem_handles", "_delta_mem_config"):
        if hasattr(model, attr):
            delattr(model, attr)


def _refuse_gradient_checkpointing(module: nn.Module) -> None:
    """Gradient checkpointing re-runs each layer's forward during backward: the memory would write the
    same tokens into its state a second time and the recomputed reads would come from the wrong state,
    so the gradients would be silently wrong. Checked only when training (never on a decode step)."""
    if module.training and torch.is_grad_enabled():
        if any(getattr(m, "gradient_checkpointing", False) is True for m in module.modules()):
            raise InputError(
                "gradient (activation) checkpointing is enabled on a model wrapped with δ-Mem; its "
                "memory state is written during the forward pass and a replayed forward would write it "
                "twice: disable it (model.activation_checkpointing_disable())"
            )


class _StackForward:
    """The decoder stack's own forward, patched on the instance: it refuses gradient checkpointing and
    shows the call's input ids to the memory layers (segment boundaries), dropping them after the call so
    no later call can reuse them. An instance forward rather than module hooks: hooks would put every
    call of the stack on torch's slower hook-dispatch path, decode steps included."""

    def __init__(self, module: nn.Module, ctx: _Context) -> None:
        self.module, self.ctx = module, ctx

    def __call__(self, *args, **kwargs):
        module = self.module
        _refuse_gradient_checkpointing(module)
        ids = kwargs.get("input_ids", args[0] if args and isinstance(args[0], torch.Tensor) else None)
        self.ctx.input_ids = ids
        try:
            return type(module).forward(module, *args, **kwargs)
        finally:
            self.ctx.input_ids = None


class _StackForwardHandle:
    """Removes the patched stack forward (as a hook handle would)."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def remove(self) -> None:
        self.module.__dict__.pop("forward", None)


class _PatchedForward:
    """A projection's own forward, patched on the instance (its parameters and state-dict names stay).

    The first patched one of q/k/v in an attention call runs the memory on the attention's input (read
    before write); a targeted projection adds its correction; ``o_proj``, the last, ends the call.
    Patching the forward instead of registering module hooks keeps the per-token cost of a decode step
    low. A plain object (not a closure), so ``copy.deepcopy`` and pickling of a wrapped model keep it
    pointing at the copy."""

    def __init__(self, proj: nn.Linear, layer: DeltaMemLayer, target: str, corrected: bool) -> None:
        self.proj, self.layer, self.target, self.corrected = proj, layer, target, corrected

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        layer, proj, target = self.layer, self.proj, self.target
        # Per layer and token on a small backbone every Python-level call shows in the decode time, so
        # the per-step attributes are read and written in the layer's __dict__ and the projection's
        # weights in its _parameters (nn.Module.__getattr__/__setattr__ are Python functions).
        step, params = layer.__dict__, proj._parameters
        # (a parametrized weight or bias, torch.nn.utils.parametrize, is a property outside _parameters)
        weight = params["weight"] if "weight" in params else proj.weight
        bias = params["bias"] if "bias" in params else proj.bias
        if target != "o":
            if step["reads"] is not None and step["reads_owner"] == target:
                # this projection ran the memory in an attention call that never reached o_proj (it
                # raised, or was interrupted): those reads are stale, never to be applied to this call
                step["reads"] = step["kernel_deltas"] = None
            if step["reads"] is None:
                step["reads_owner"] = target
                reads = layer.decode_with_kernel(x)  # the fused C decode step where it applies
                if reads is None:
                    # the torch path, projection first: autograd sums x's gradient in this graph's
                    # order, and the releases whose trained results the README reports used it
                    y = nn.functional.linear(x, weight, bias)
                    step["kernel_deltas"] = None
                    step["reads"] = layer(x)
                    return _add_correction(y, layer, target) if self.corrected else y
                step["reads"] = reads
        ready = step["kernel_deltas"]
        if not self.corrected or step["reads"] is None:
            y = nn.functional.linear(x, weight, bias)
        elif ready is not None and ready[target].dim() == 1 and bias is None:
            # one sequence after the C step: the correction rides in as the projection's bias
            delta = ready[target]
            y = nn.functional.linear(x, weight, delta if delta.dtype == x.dtype else delta.to(x.dtype))
        else:
            y = _corrected_linear(x, proj, layer, target)
        if target == "o":  # the attention call ends
            step["reads"] = step["kernel_deltas"] = None
        return y


def _corrected_linear(x: torch.Tensor, proj: nn.Linear, layer: DeltaMemLayer, target: str) -> torch.Tensor:
    """The projection of ``x`` plus its correction ``W_Δ reads``."""
    y = nn.functional.linear(x, proj.weight, proj.bias)
    if layer.kernel_deltas is not None:
        return y.add_(layer.kernel_deltas[target])
    return _add_correction(y, layer, target)


def _add_correction(y: torch.Tensor, layer: DeltaMemLayer, target: str) -> torch.Tensor:
    """y + W_Δ reads; one fused in-place ``addmm_`` on the projection's fresh output when dtypes agree."""
    reads, w_delta = layer.reads, layer.deltas[target].weight
    if reads.dtype != y.dtype or w_delta.dtype != y.dtype or not y.is_contiguous():
        return _add(y, layer.correction(target))
    y.view(-1, y.shape[-1]).addmm_(reads.reshape(-1, reads.shape[-1]), w_delta.t())
    return y


def _add(y: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    return y + (delta if delta.dtype == y.dtype else delta.to(y.dtype))


@contextmanager
def backbone_only(model: nn.Module):
    """Within the block the wrapped model computes the bare backbone: the projections' own forwards are
    restored (the memory neither reads nor writes, its state stays as it was) and put back on exit."""
    patched = []
    try:
        for mod in model.modules():
            if isinstance(getattr(mod, ATTR, None), DeltaMemLayer):
                for attr in PROJ.values():
                    proj = getattr(mod, attr)
                    if "forward" in proj.__dict__:
                        patched.append((proj, proj.__dict__.pop("forward")))
        yield model
    finally:
        for proj, forward in patched:
            proj.forward = forward


def set_decode_backend(model: nn.Module, backend: str) -> None:
    """How the wrapped model's single-token decode steps run: ``"c"`` (the fused C step; an error where
    it cannot run), ``"torch"`` (the torch twin) or ``"auto"`` (C where it can run, else torch)."""
    check_choice("decode_backend", backend, DECODE_BACKENDS)
    layers = memory_layers(model)
    if not layers:
        raise InputError("the model has no δ-Mem attached; call attach_delta_mem(model) first")
    for layer in layers:
        layer.cfg.decode_backend = backend
    model._delta_mem_config.decode_backend = backend


def decode_step_path(model: nn.Module) -> str:
    """Which path the wrapped model's last decode steps took: ``"c"`` when every memory layer ran the
    C step, else ``"torch"`` (with the reason when the C step is unavailable on this machine)."""
    from delta_mem.decode_c import kernel_status

    layers = memory_layers(model)
    if layers and all(layer._plan is not None for layer in layers):
        return "c"
    status = kernel_status()
    return "torch" if status == "c" else status


def reset_state(model: nn.Module) -> None:
    """Empty every layer's memory (a new conversation)."""
    for layer in memory_layers(model):
        layer.reset()


def detach_state(model: nn.Module) -> None:
    """Cut the autograd graph at the current state (truncated backpropagation through time)."""
    for layer in memory_layers(model):
        layer.detach_state()


def get_state(model: nn.Module) -> list[torch.Tensor | None]:
    """The current state matrix of every wrapped layer, (B, heads, rank, rank) or None. During decoding
    with the C step it is the memory's live state, updated in place by later steps: ``clone()`` it to
    keep a snapshot."""
    return [layer.state for layer in memory_layers(model)]


def memory_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """The δ-Mem parameters by their name in ``model.state_dict()``."""
    return {n: p for n, p in model.named_parameters() if f".{ATTR}." in f".{n}"}


def count_memory_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in memory_parameters(model).values())
