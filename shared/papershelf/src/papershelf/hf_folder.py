"""Checks on a user's Hugging Face model folder, run before ``from_pretrained`` builds anything.

``from_pretrained`` allocates the model its ``config.json`` describes before it compares the weights'
shapes, so a corrupt or mistyped config (``"num_hidden_layers": 2000`` for 20) can exhaust the memory
of the machine before any error appears. :func:`check_config_fits_weights` reads only ``config.json`` and
the safetensors headers (standard library, a few KB) and refuses such a folder with one
:class:`~papershelf.errors.InputError`. Shapes that merely disagree are still ``from_pretrained``'s to
report; this check exists so that it gets to report them.
"""

from __future__ import annotations

import json
import math
import re
import struct
from pathlib import Path
from typing import Any

from papershelf.errors import InputError

_HEADER_LIMIT = 100 * 2**20  # a safetensors header is JSON of a few KB to a few MB; more is corruption
_LAYER = re.compile(r"\.(?:layers|h|blocks|layer)\.(\d+)\.")
SLACK = 4.0  # the config may describe up to this many times the weights' elements (tied heads, buffers)


def model_folder(name: str, flag: str = "--model") -> Path:
    """A local model folder, or the folder of a testbed checkpoint named ``name`` (``tiny-s``,
    ``tiny-m``) when ``papershelf-lm`` is installed; otherwise an :class:`InputError` naming ``flag``.

    The testbed is looked up lazily and only by name: the core does not depend on it.
    """
    path = Path(name)
    if path.is_dir():
        return path
    try:
        from papershelf_lm.model import CHECKPOINTS, checkpoint_names
    except ImportError:
        known: list[str] = []
    else:
        known = checkpoint_names()
        if name in known:
            return CHECKPOINTS / name
    also = f", or a testbed checkpoint name ({', '.join(known)})" if known else ""
    raise InputError(f"{flag} {name!r} is not a folder (a local Hugging Face model is expected{also})")


def read_config(folder: str | Path) -> dict[str, Any]:
    """``config.json`` of ``folder`` as a dict, or an :class:`InputError` naming the file."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise InputError(f"{folder} has no config.json (not a Hugging Face model folder)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path} is not valid JSON ({type(exc).__name__})") from None
    if not isinstance(config, dict):
        raise InputError(f"{path} must hold a JSON object, got {type(config).__name__}")
    return config


def safetensors_shapes(folder: str | Path) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape in the folder's ``model.safetensors`` (or the shards listed by
    ``model.safetensors.index.json``), read from the file headers only."""
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            files = sorted(set(weight_map.values()))
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise InputError(f"{index} is not a safetensors index (no weight_map)") from None
    elif (folder / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise InputError(f"{folder} has no model.safetensors (or model.safetensors.index.json)")
    shapes: dict[str, tuple[int, ...]] = {}
    for name in files:
        shapes.update(_header_shapes(folder / name))
    return shapes


def _header_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise ValueError("shorter than a header")
            (size,) = struct.unpack("<Q", head)
            if size > _HEADER_LIMIT:
                raise ValueError(f"header of {size} bytes")
            header = json.loads(handle.read(size).decode("utf-8"))
        shapes = {
            key: tuple(int(d) for d in entry["shape"])
            for key, entry in header.items()
            if key != "__metadata__"
        }
    except FileNotFoundError:
        raise InputError(f"weights file {path} is missing") from None
    except (ValueError, KeyError, TypeError, AttributeError, struct.error) as exc:
        raise InputError(f"{path} is not a readable safetensors file ({exc})") from None
    return shapes


def estimated_parameters(config: dict[str, Any]) -> int | None:
    """A decoder-transformer parameter count from the usual config keys (embedding, attention and a
    gated MLP per layer, untied head), or ``None`` when the keys are absent. An upper estimate: it is
    compared with the weights only to catch configs off by orders of magnitude."""
    keys = ("hidden_size", "num_hidden_layers", "vocab_size")
    sub = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    if not all(isinstance(sub.get(k), int) and not isinstance(sub.get(k), bool) for k in keys):
        return None
    d, layers, vocab = (sub[k] for k in keys)
    inter = sub.get("intermediate_size")
    inter = inter if isinstance(inter, int) and not isinstance(inter, bool) else 4 * d
    return 2 * vocab * d + layers * (4 * d * d + 3 * d * inter)


def check_config_fits_weights(folder: str | Path) -> None:
    """Refuse a model folder whose ``config.json`` describes a model far larger than its weights, or
    more layers than the weights hold, before anything is allocated. Silent when it cannot tell (keys
    it does not know)."""
    config = read_config(folder)
    shapes = safetensors_shapes(folder)
    stored = sum(math.prod(s) for s in shapes.values())
    sub = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    for key in ("hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size"):
        value = sub.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InputError(f"{folder}/config.json: {key} must be a positive integer, got {value!r}")
    # one-sided: weights may hold extra layers (multi-token-prediction heads); a config that claims
    # more than the weights hold is the dangerous direction. Multimodal folders mix several stacks.
    layers = {int(m.group(1)) for k in shapes if (m := _LAYER.search(k))}
    declared = sub.get("num_hidden_layers")
    single_stack = sub is config and "vision_config" not in config
    if single_stack and layers and isinstance(declared, int) and declared > max(layers) + 1:
        raise InputError(
            f"{folder}/config.json declares num_hidden_layers = {declared}, "
            f"but the weights hold {max(layers) + 1} layers"
        )
    estimate = estimated_parameters(config)
    if estimate is not None and estimate > SLACK * stored + 2**20:
        raise InputError(
            f"{folder}/config.json describes a model of about {estimate:,} parameters, "
            f"but the weights hold {stored:,}: the config does not belong to these weights"
        )
