"""Device resolution and optional-backend detection (torch, Triton, flash-attn).

Nothing here imports torch unless a function that needs it is called.
"""

from __future__ import annotations

import importlib.util
import os

from papershelf.errors import InputError

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def has_module(name: str) -> bool:
    """True when ``name`` can be imported (checked without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def cuda_available() -> bool:
    """True when torch is installed and sees a CUDA device."""
    if not has_module("torch"):
        return False
    import torch

    return bool(torch.cuda.is_available())


def resolve_device(device: str = "auto") -> str:
    """Map ``auto``/``cpu``/``cuda`` to a concrete device name; ``cuda`` without a GPU is an error."""
    if device not in DEVICE_CHOICES:
        raise InputError(f"device must be one of {', '.join(DEVICE_CHOICES)}; got {device!r}")
    if device == "auto":
        return "cuda" if cuda_available() else "cpu"
    if device == "cuda" and not cuda_available():
        raise InputError(
            "device 'cuda' was asked for, but no CUDA device is available", hint="use --device cpu"
        )
    return device


def triton_mode() -> str:
    """How Triton kernels can run here: ``cuda`` (a GPU), ``interpret`` (TRITON_INTERPRET=1), or ``none``."""
    if not has_module("triton"):
        return "none"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "interpret"
    return "cuda" if cuda_available() else "none"


def flash_attn_available() -> bool:
    """True when flash-attn is installed and a CUDA device is present (its only supported setting)."""
    return has_module("flash_attn") and cuda_available()


def resolve_backend(backend: str = "auto") -> str:
    """Pick ``triton`` or ``torch`` for ``auto``; reject ``triton`` when Triton cannot run."""
    if backend not in ("auto", "torch", "triton"):
        raise InputError(f"backend must be one of auto, torch, triton; got {backend!r}")
    mode = triton_mode()
    if backend == "auto":
        return "triton" if mode == "cuda" else "torch"
    if backend == "triton" and mode == "none":
        raise InputError(
            "backend 'triton' needs Triton with a CUDA device or TRITON_INTERPRET=1",
            hint="use backend='torch'",
        )
    return backend
