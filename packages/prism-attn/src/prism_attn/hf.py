"""transformers integration: decode any Llama-family model with Prism (or a baseline) through
``transformers.AttentionInterface``. Prefill (more than one query token) stays dense (SDPA)."""

from __future__ import annotations

import itertools

from prism_attn.config import PrismConfig
from prism_attn.decoder import PrismDecoder

# The Hugging Face ``model_type``s this integration decodes: Llama-architecture causal LMs whose attention
# goes through ``AttentionInterface`` with a ``layer_idx`` per layer (tests/test_hf.py checks that each
# decodes through Prism and, at a full budget, exactly as dense). Sliding-window layers are not
# special-cased.
MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")

_names = itertools.count()
_ATTR = "_prism_attn_handle"


class PrismHandle:
    """What :func:`enable` returns: the decoder in use, ``calls`` (dense prefill / sparse decode counts),
    and ``disable()``; also a context manager that disables on exit."""

    def __init__(self, model, decoder: PrismDecoder, name: str, previous: str) -> None:
        self.model, self.decoder, self.name, self.previous = model, decoder, name, previous
        self.calls = {"prefill": 0, "decode": 0, "dense_fallback": 0}

    def disable(self) -> None:
        disable(self.model)

    def __enter__(self) -> PrismHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.disable()


def attention_function(decoder: PrismDecoder, calls: dict | None = None):
    """A transformers attention function (``fn(module, query, key, value, attention_mask, **kw)``) that
    routes single-token decode queries through ``decoder`` and everything else through SDPA."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    calls = {} if calls is None else calls

    def prism_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        _B, _H, T, _D = query.shape
        masked = False
        if attention_mask is not None:
            if attention_mask.dtype.is_floating_point:
                masked = bool((attention_mask < 0).any())
            else:
                masked = not bool(attention_mask.all())
        if T != 1 or masked:
            kind = "prefill" if T != 1 else "dense_fallback"
            if T != 1:  # a new prompt: drop selections and block metadata kept from an earlier cache
                decoder.reset()
            calls[kind] = calls.get(kind, 0) + 1
            return sdpa_attention_forward(
                module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
            )
        calls["decode"] = calls.get("decode", 0) + 1
        out, _ = decoder.step(module.layer_idx, query[:, :, 0], key, value, scaling)
        return out[:, None], None

    return prism_attention


def enable(
    model, config: PrismConfig | None = None, *, backend: str = "auto", any_model_type: bool = False
) -> PrismHandle:
    """Make ``model`` (a transformers model with ``AttentionInterface`` support) decode with Prism.

    ``config`` picks the method (Prism or a baseline) and its budget. Returns a :class:`PrismHandle`;
    ``disable(model)`` (or leaving ``with enable(...)``) restores the previous attention. Models whose
    ``model_type`` is not in :data:`MODEL_TYPES` (the tested Llama family) are refused unless
    ``any_model_type=True`` (then at the caller's risk: untested families may cache or mask differently)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    from papershelf.errors import InputError

    model_type = getattr(check_model(model), "model_type", None)
    if model_type not in MODEL_TYPES and not any_model_type:
        raise InputError(
            f"model is a {model_type!r} model; enable() decodes the tested Llama family (model_type "
            f"{', '.join(MODEL_TYPES)}); pass any_model_type=True to try it anyway"
        )
    # checked before an earlier handle is disabled: a rejected call leaves the model as it was
    decoder = PrismDecoder(config or PrismConfig(), backend=backend)
    if getattr(model, _ATTR, None) is not None:
        disable(model)
    name = f"prism_attn_{next(_names)}"
    handle = PrismHandle(model, decoder, name, model.config._attn_implementation)
    AttentionInterface.register(name, attention_function(decoder, handle.calls))
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    model.set_attn_implementation(name)
    setattr(model, _ATTR, handle)
    return handle


def check_model(model):
    """``model``'s config, or an InputError if ``model`` is not a transformers model whose attention
    implementation can be switched (``set_attn_implementation``)."""
    from papershelf.errors import InputError

    config = getattr(model, "config", None)
    if not hasattr(model, "set_attn_implementation") or not hasattr(config, "_attn_implementation"):
        raise InputError(
            "model must be a transformers PreTrainedModel (with AttentionInterface support), "
            f"got {type(model).__name__}"
        )
    return config


def disable(model) -> None:
    """Restore the attention implementation ``model`` had before :func:`enable` (no-op if not enabled)."""
    handle = getattr(model, _ATTR, None)
    if handle is None:
        return
    model.set_attn_implementation(handle.previous)
    setattr(model, _ATTR, None)
