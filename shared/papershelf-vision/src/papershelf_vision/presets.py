"""Backbone configurations and the named presets (no torch import, so the CLI starts fast)."""

from __future__ import annotations

from dataclasses import dataclass

from papershelf.errors import InputError


@dataclass(frozen=True)
class BackboneConfig:
    arch: str  # "vit" | "resnet"
    image_size: int = 32
    patch_size: int = 4  # vit
    dim: int = 192  # vit
    depth: int = 6  # vit
    heads: int = 3  # vit
    mlp_ratio: float = 4.0  # vit
    widths: tuple[int, ...] = (32, 64, 128, 256)  # resnet
    blocks: tuple[int, ...] = (1, 1, 1, 1)  # resnet


PRESETS: dict[str, BackboneConfig] = {
    "vit-tiny": BackboneConfig("vit", image_size=32, patch_size=4, dim=192, depth=4, heads=3),
    "resnet-s": BackboneConfig("resnet", image_size=32, widths=(32, 64, 128, 256), blocks=(1, 1, 1, 1)),
    # tiny models for tests
    "micro-vit": BackboneConfig("vit", image_size=16, patch_size=4, dim=32, depth=2, heads=2),
    "micro-resnet": BackboneConfig("resnet", image_size=16, widths=(8, 16, 16, 32), blocks=(1, 1, 1, 1)),
}


def get_preset(name: str) -> BackboneConfig:
    if name not in PRESETS:
        raise InputError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}")
    return PRESETS[name]
