"""Backbone configurations and the named presets (no torch import, so the CLI starts fast)."""

from __future__ import annotations

from dataclasses import dataclass

from papershelf.errors import InputError, check_choice, check_int, check_number


@dataclass(frozen=True)
class BackboneConfig:
    arch: str  # "vit" | "resnet"
    image_size: int = 32
    patch_size: int = 4  # vit
    dim: int = 192  # vit
    depth: int = 6  # vit
    heads: int = 3  # vit
    mlp_ratio: float = 4.0  # vit
    stem: str = "patch"  # vit: "patch" (one strided conv) or "conv" (3x3 convs, Xiao et al. 2021)
    pool: str = "cls"  # vit: model(x) is the CLS token ("cls") or the mean of the patch tokens ("mean")
    widths: tuple[int, ...] = (32, 64, 128, 256)  # resnet
    blocks: tuple[int, ...] = (1, 1, 1, 1)  # resnet

    def __post_init__(self) -> None:
        """Refuse a config no backbone can be built from, before any torch module exists (a zero width
        made torch warn about empty tensors and then fail on a shape mismatch)."""
        check_choice("arch", self.arch, ("vit", "resnet"))
        vit = self.arch == "vit"
        sizes = ("image_size", "patch_size", "dim", "depth", "heads") if vit else ("image_size",)
        for name in sizes:  # integral floats from a JSON file become ints
            object.__setattr__(self, name, check_int(name, getattr(self, name), low=1))
        if vit:
            check_choice("stem", self.stem, ("patch", "conv"))
            check_choice("pool", self.pool, ("cls", "mean"))
            if self.stem == "conv" and self.patch_size & (self.patch_size - 1):
                raise InputError(f"stem 'conv' needs a power-of-two patch_size, got {self.patch_size}")
            check_number("mlp_ratio", self.mlp_ratio, low=0, low_open=True)
            hidden = int(self.dim * self.mlp_ratio)
            if self.image_size % self.patch_size or self.dim % self.heads or hidden < 1:
                raise InputError(
                    f"bad vit config: image_size ({self.image_size}) must be a multiple of patch_size "
                    f"({self.patch_size}), dim ({self.dim}) a multiple of heads ({self.heads}), and "
                    f"dim * mlp_ratio ({self.mlp_ratio}) at least 1"
                )
            return
        for name in ("widths", "blocks"):  # one entry per stage (strides 1, 2, 2, 2)
            value = getattr(self, name)
            if isinstance(value, str | bytes) or not isinstance(value, tuple | list) or len(value) != 4:
                raise InputError(f"{name} must be 4 positive integers (one per resnet stage), got {value!r}")
            value = tuple(check_int(f"{name}[{i}]", v, low=1) for i, v in enumerate(value))
            object.__setattr__(self, name, value)
        if self.image_size % 8:
            raise InputError(f"image_size must be a multiple of 8 (resnet strides), got {self.image_size}")


PRESETS: dict[str, BackboneConfig] = {
    # ViT-Tiny's width (192, 3 heads), 4 blocks, with a convolutional stem and the patch-token mean as its
    # embedding: it learns shape features faster than the plain ViT here (README, Limitations)
    "vit-tiny": BackboneConfig(
        "vit", image_size=32, patch_size=4, dim=192, depth=4, heads=3, stem="conv", pool="mean"
    ),
    "resnet-s": BackboneConfig("resnet", image_size=32, widths=(32, 64, 128, 256), blocks=(1, 1, 1, 1)),
    # the plain ViT: one strided-conv patch embedding, CLS embedding (configs/vit-tiny-patch*)
    "vit-tiny-patch": BackboneConfig("vit", image_size=32, patch_size=4, dim=192, depth=4, heads=3),
    # tiny models for tests
    "micro-vit": BackboneConfig("vit", image_size=16, patch_size=4, dim=32, depth=2, heads=2),
    "micro-resnet": BackboneConfig("resnet", image_size=16, widths=(8, 16, 16, 32), blocks=(1, 1, 1, 1)),
}


def get_preset(name: str) -> BackboneConfig:
    if name not in PRESETS:
        raise InputError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}")
    return PRESETS[name]
