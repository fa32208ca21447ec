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
    ``calibration`` (with ``calibrate_anchors``: the last prompt's :class:`~prism_attn.calibrate.Calibration`,
    whose anchors the decoder uses), and ``disable()``; also a context manager that disables on exit."""

    def __init__(self, model, decoder: PrismDecoder, name: str, previous: str) -> None:
        self.model, self.decoder, self.name, self.previous = model, decoder, name, previous
        self.calls = {"prefill": 0, "decode": 0, "dense_fallback": 0}
        self.calibration = None

    def disable(self) -> None:
        disable(self.model)

    def __enter__(self) -> PrismHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.disable()


def attention_function(decoder: PrismDecoder, calls: dict | None = None, calibrate=None):
    """A transformers attention function (``fn(module, query, key, value, attention_mask, **kw)``) that
    routes single-token decode queries through ``decoder`` and everything else through SDPA.

    ``calibrate``: ``(anchors, layers, on_result)`` — each prefill of one sequence longer than 32 tokens
    also measures the proposal coverage of every layer (:class:`~prism_attn.calibrate.CoverageMeter`),
    and after its last layer the decoder takes the anchors it picks; ``on_result(calibration)``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from prism_attn.calibrate import QUERIES, CoverageMeter  # here: calibrate imports this module

    calls = {} if calls is None else calls
    meter = None

    def observe(layer, query, key, scaling):
        nonlocal meter
        from dataclasses import replace

        anchors, layers, on_result = calibrate
        if layer == 0 or meter is None:  # a new prompt (or a new prefill chunk)
            meter = CoverageMeter(replace(decoder.config, anchor_layers=None), layers)
        meter.observe(layer, query, key, scaling if scaling is not None else query.shape[-1] ** -0.5)
        if layer == layers - 1:
            result = meter.result(anchors)
            decoder.config = replace(decoder.config, anchor_layers=result.anchor_layers).validate()
            on_result(result)
            meter = None

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
            out = sdpa_attention_forward(
                module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
            )
            if calibrate is not None and T > QUERIES and _B == 1:  # one unpadded prompt
                observe(module.layer_idx, query, key, scaling)
            return out
        calls["decode"] = calls.get("decode", 0) + 1
        out, _ = decoder.step(module.layer_idx, query[:, :, 0], key, value, scaling)
        return out[:, None], None

    return prism_attention


def enable(
    model,
    config: PrismConfig | None = None,
    *,
    backend: str = "auto",
    any_model_type: bool = False,
    calibrate_anchors: int | None = None,
) -> PrismHandle:
    """Make ``model`` (a transformers model with ``AttentionInterface`` support) decode with Prism.

    ``config`` picks the method (Prism or a baseline) and its budget. Returns a :class:`PrismHandle`;
    ``disable(model)`` (or leaving ``with enable(...)``) restores the previous attention. Models whose
    ``model_type`` is not in :data:`MODEL_TYPES` (the tested Llama family) are refused unless
    ``any_model_type=True`` (then at the caller's risk: untested families may cache or mask differently).

    ``calibrate_anchors=N`` (Prism or static reuse, without ``anchor_layers``): every prompt picks its own
    N anchor layers during its dense prefill — :func:`prism_attn.calibrate.calibrate_anchors` on the
    prompt, measured in the same forward pass (no extra one); ``handle.calibration`` has the last choice.
    A prompt of ≤ 32 tokens, or a batch of several, keeps the previous anchors (at first the config's)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    from papershelf.errors import InputError, check_int

    model_config = check_model(model)
    model_type = getattr(model_config, "model_type", None)
    if model_type not in MODEL_TYPES and not any_model_type:
        raise InputError(
            f"model is a {model_type!r} model; enable() decodes the tested Llama family (model_type "
            f"{', '.join(MODEL_TYPES)}); pass any_model_type=True to try it anyway"
        )
    # checked before an earlier handle is disabled: a rejected call leaves the model as it was
    decoder = PrismDecoder(config or PrismConfig(), backend=backend)
    layers = int(getattr(model_config, "num_hidden_layers", 0) or 0)
    anchors = None
    if calibrate_anchors is not None:
        anchors = check_int("calibrate_anchors", calibrate_anchors, low=1, high=layers)
        if decoder.config.method not in ("prism", "static"):
            raise InputError(f"calibrate_anchors picks anchor layers: it needs method 'prism' or 'static', "
                             f"not {decoder.config.method!r}")  # fmt: skip
        if decoder.config.anchor_layers is not None:
            raise InputError("calibrate_anchors chooses the anchor layers: leave config.anchor_layers None")
    if getattr(model, _ATTR, None) is not None:
        disable(model)
    name = f"prism_attn_{next(_names)}"
    handle = PrismHandle(model, decoder, name, model.config._attn_implementation)
    calibrate = None
    if anchors is not None:  # each prefill's choice is kept on the handle
        calibrate = (anchors, layers, lambda result: setattr(handle, "calibration", result))
    AttentionInterface.register(name, attention_function(decoder, handle.calls, calibrate))
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
