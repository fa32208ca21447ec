"""Backbones: a ViT (patch tokens + CLS) and a small ResNet, with per-layer token features; presets,
offline checkpoint loading.

Input: float tensors ``(B, 3, H, W)`` with values in [0, 1] (:func:`to_tensor` converts ``uint8``
``(N, H, W, 3)`` arrays); the models normalise internally (mean 0.5, std 0.25 per channel).

Feature shapes (``model.features(x)`` returns one tensor per layer, shallow to deep):

- ViT (``image_size`` S, ``patch_size`` P, width D, depth L): ``L`` tensors ``(B, 1 + (H/P)(W/P), D)``,
  token 0 the CLS token, then the patch tokens in row-major order, each the output of one
  transformer block (before the final LayerNorm). ``model(x)`` ``(B, D)`` is the final-LayerNorm CLS
  token (``pool="cls"``) or the mean of the final-LayerNorm patch tokens (``pool="mean"``, ``vit-tiny``).
  ``stem="conv"`` (``vit-tiny``) embeds patches with a small convolutional stem instead of one strided
  convolution; the token grid is the same. Inputs whose sides are multiples of P are accepted: other
  sizes than S use bicubic interpolation of the position embeddings; any other size is an ``InputError``.
- ResNet (widths ``w1..w4``, strides 1, 2, 2, 2): 4 tensors ``(B, (H/s)(W/s), w_i)`` for s = 1, 2, 4, 8
  (stage outputs flattened row-major; no CLS token). ``model(x)`` is the global average of the last
  stage ``(B, w4)``. Sides must be multiples of 8.

``model.grid(h, w)`` gives each layer's token grid; ``model.embed_dim`` the width of ``model(x)``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from papershelf.errors import InputError, check_int
from papershelf_vision.presets import PRESETS, BackboneConfig, get_preset  # get_preset re-exported

CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"
MEAN, STD = 0.5, 0.25


def to_tensor(images: np.ndarray) -> torch.Tensor:
    """``uint8`` ``(N, H, W, 3)`` (or ``(N, H, W)`` grey) to float ``(N, 3, H, W)`` in [0, 1]."""
    images = np.asarray(images)
    if images.dtype != np.uint8 or images.ndim not in (3, 4) or (images.ndim == 4 and images.shape[-1] != 3):
        raise InputError(f"images must be uint8 (N, H, W, 3) or (N, H, W), got {images.dtype} {images.shape}")
    if images.ndim == 3 and images.shape[-1] == 3:  # one RGB image, not N grey images 3 px wide
        raise InputError(
            f"images {images.shape} reads as one (H, W, 3) image; pass a batch (N, H, W, 3), e.g. image[None]"
        )
    if images.ndim == 3:
        images = np.repeat(images[..., None], 3, axis=-1)
    images = np.ascontiguousarray(images)  # torch takes no negative strides (flipped views)
    return torch.from_numpy(images).permute(0, 3, 1, 2).float().div_(255.0)


def _check_input(x: torch.Tensor, multiple: int) -> None:
    if not isinstance(x, torch.Tensor) or x.ndim != 4 or x.shape[1] != 3:
        raise InputError(f"input must be a float tensor (B, 3, H, W), got {getattr(x, 'shape', type(x))}")
    if x.dtype != torch.float32:  # uint8 would be read on a 0-255 scale; use to_tensor
        raise InputError(f"input must be float32 in [0, 1] (see to_tensor), got {x.dtype}")
    if not bool(torch.isfinite(x).all()):
        raise InputError("input contains NaN or infinite values")
    lo, hi = (float(x.min()), float(x.max())) if x.numel() else (0.0, 0.0)
    if lo < -1e-4 or hi > 1 + 1e-4:  # e.g. already mean/std-normalised: it would be normalised twice
        raise InputError(
            f"input must be in [0, 1] (the backbone normalises it itself; see to_tensor), "
            f"got values in [{lo:.3g}, {hi:.3g}]"
        )
    h, w = x.shape[-2:]
    if h % multiple or w % multiple or h < multiple or w < multiple:
        raise InputError(
            f"image size {h}x{w} is not a positive multiple of {multiple}; resize it first "
            f"(e.g. F.interpolate(x, size=(S, S), mode='bilinear'))"
        )


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        hidden = int(dim * mlp_ratio)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = x + self.proj(a)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


def conv_stem(dim: int, patch_size: int) -> nn.Sequential:
    """Xiao et al. (2021)'s convolutional stem: log2(patch_size) 3x3 stride-2 convolutions (BatchNorm,
    ReLU; widths doubling up to dim / 2) and a 1x1 projection to dim: the same token grid as the
    one-conv patch embedding, with the locality a ConvNet starts from."""
    layers, cin = [], 3
    n = patch_size.bit_length() - 1
    for i in range(n):
        cout = max(dim // 2 ** (n - i), 8)
        layers += [nn.Conv2d(cin, cout, 3, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]
        cin = cout
    layers.append(nn.Conv2d(cin, dim, 1))
    return nn.Sequential(*layers)


class ViT(nn.Module):
    """Vision transformer: patch embedding (one strided conv, or a conv stem), CLS token, learned position
    embeddings, pre-norm blocks; the embedding is the CLS token or the patch-token mean (``pool``)."""

    def __init__(self, config: BackboneConfig) -> None:
        super().__init__()
        c = self.config = config
        if c.image_size % c.patch_size or c.dim % c.heads:
            raise InputError(f"bad ViT config {c}: image_size % patch_size and dim % heads must be 0")
        self.patch_size, self.embed_dim = c.patch_size, c.dim
        self.patch_embed = (
            conv_stem(c.dim, c.patch_size)
            if c.stem == "conv"
            else nn.Conv2d(3, c.dim, c.patch_size, c.patch_size)
        )
        self.cls_token = nn.Parameter(torch.zeros(1, 1, c.dim))
        n = (c.image_size // c.patch_size) ** 2
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + n, c.dim))
        self.blocks = nn.ModuleList(Block(c.dim, c.heads, c.mlp_ratio) for _ in range(c.depth))
        self.norm = nn.LayerNorm(c.dim)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def grid(self, h: int, w: int) -> list[tuple[int, int]]:
        return [(h // self.patch_size, w // self.patch_size)] * len(self.blocks)

    def _pos(self, gh: int, gw: int) -> torch.Tensor:
        g0 = self.config.image_size // self.patch_size
        if (gh, gw) == (g0, g0):
            return self.pos_embed
        patch = self.pos_embed[:, 1:].reshape(1, g0, g0, -1).permute(0, 3, 1, 2)
        patch = F.interpolate(patch, size=(gh, gw), mode="bicubic", align_corners=False)
        return torch.cat([self.pos_embed[:, :1], patch.flatten(2).transpose(1, 2)], 1)

    def features(self, x: torch.Tensor) -> list[torch.Tensor]:
        _check_input(x, self.patch_size)
        t = self.patch_embed((x - MEAN) / STD)
        gh, gw = t.shape[-2:]
        t = torch.cat([self.cls_token.expand(len(t), -1, -1), t.flatten(2).transpose(1, 2)], 1)
        t = t + self._pos(gh, gw)
        out = []
        for block in self.blocks:
            t = block(t)
            out.append(t)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        last = self.features(x)[-1]
        return self.norm(last[:, 1:]).mean(1) if self.config.pool == "mean" else self.norm(last[:, 0])


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.norm1 = nn.GroupNorm(min(8, cout), cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.norm2 = nn.GroupNorm(min(8, cout), cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.GroupNorm(min(8, cout), cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm2(self.conv2(F.relu(self.norm1(self.conv1(x)))))
        return F.relu(y + (x if self.short is None else self.short(x)))


class ResNet(nn.Module):
    """A small ResNet for 32–64 px images: 3x3 stem, four stages of basic blocks (GroupNorm)."""

    def __init__(self, config: BackboneConfig) -> None:
        super().__init__()
        c = self.config = config
        w = c.widths
        self.embed_dim = w[-1]
        self.stem = nn.Sequential(
            nn.Conv2d(3, w[0], 3, 1, 1, bias=False), nn.GroupNorm(min(8, w[0]), w[0]), nn.ReLU()
        )
        stages, cin = [], w[0]
        for i, (cout, n) in enumerate(zip(w, c.blocks)):
            layers = [
                BasicBlock(cin if j == 0 else cout, cout, (1 if i == 0 else 2) if j == 0 else 1)
                for j in range(n)
            ]
            stages.append(nn.Sequential(*layers))
            cin = cout
        self.stages = nn.ModuleList(stages)

    def grid(self, h: int, w: int) -> list[tuple[int, int]]:
        return [(h // s, w // s) for s in (1, 2, 4, 8)]

    def feature_maps(self, x: torch.Tensor) -> list[torch.Tensor]:
        _check_input(x, 8)
        t = self.stem((x - MEAN) / STD)
        out = []
        for stage in self.stages:
            t = stage(t)
            out.append(t)
        return out

    def features(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [m.flatten(2).transpose(1, 2) for m in self.feature_maps(x)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.feature_maps(x)[-1].mean(dim=(2, 3))


def build(config: BackboneConfig | str, seed: int | None = 0) -> nn.Module:
    """A randomly initialised backbone of a preset name or config (``seed`` fixes the init)."""
    if isinstance(config, str):
        config = get_preset(config)
    if not isinstance(config, BackboneConfig):
        raise InputError(
            f"build needs a preset name ({', '.join(PRESETS)}) or a BackboneConfig, got {config!r}"
        )
    if seed is not None:
        seed = check_int("seed", seed, low=0, high=2**63 - 1)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _build(config)
    return _build(config)


def _build(config: BackboneConfig) -> nn.Module:
    if config.arch == "vit":
        return ViT(config)
    if config.arch == "resnet":
        return ResNet(config)
    raise InputError(f"unknown arch {config.arch!r}; expected 'vit' or 'resnet'")


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def config_to_json(config: BackboneConfig) -> dict:
    return asdict(config)


def config_from_json(obj: dict) -> BackboneConfig:
    obj = dict(obj)
    for key in ("widths", "blocks"):
        if key in obj:
            obj[key] = tuple(obj[key])
    return BackboneConfig(**obj)


def save_model(model: nn.Module, folder: str | Path, extra: dict | None = None) -> None:
    """Write ``model.safetensors`` and ``config.json`` (backbone config plus ``extra``) atomically."""
    from safetensors.torch import save

    from papershelf.repro import atomic_path, atomic_write_json

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    with atomic_path(folder / "model.safetensors", mode="wb") as handle:
        handle.write(save(state, metadata={"format": "pt"}))
    atomic_write_json(folder / "config.json", {**config_to_json(model.config), **(extra or {})})


def checkpoint_names() -> list[str]:
    """Checkpoints shipped inside the package (folders under ``papershelf_vision/checkpoints``)."""
    if not CHECKPOINTS.is_dir():
        return []
    return sorted(p.name for p in CHECKPOINTS.iterdir() if (p / "config.json").is_file())


def load(name: str | Path) -> nn.Module:
    """A pretrained backbone: a shipped checkpoint by name, or a model folder (``config.json`` +
    ``model.safetensors``) by path; offline, float32, eval mode. Missing, truncated or mismatched
    weights are an error, never a silently random-initialised model."""
    from safetensors.torch import load_file

    if not isinstance(name, str | Path):
        raise InputError(f"load needs a checkpoint name or a folder path, got {type(name).__name__}")
    folder = Path(name)
    model_files = ("config.json", "model.safetensors")
    if not str(name).strip() or not all((folder / f).is_file() for f in model_files):
        known = checkpoint_names()
        if isinstance(name, str) and name in known:  # a shipped name, even beside a same-named folder
            folder = CHECKPOINTS / name
        elif folder.is_dir() and str(name).strip():
            raise InputError(f"{folder} is not a model folder (needs config.json and model.safetensors)")
        else:
            raise InputError(
                f"unknown checkpoint {str(name)!r}; shipped checkpoints: {', '.join(known) or 'none'}"
                " (or pass a model folder written by `papershelf-vision train`)"
            )
    if not (folder / "config.json").is_file() or not (folder / "model.safetensors").is_file():
        raise InputError(f"{folder} is not a model folder (needs config.json and model.safetensors)")
    try:
        raw = json.loads((folder / "config.json").read_text())
        if not isinstance(raw, dict):
            raise ValueError(f"config.json must hold a JSON object, got {type(raw).__name__}")
        config = config_from_json({k: v for k, v in raw.items() if k in BackboneConfig.__dataclass_fields__})
        model = build(config, seed=None)
        state = load_file(folder / "model.safetensors")
    except Exception as exc:  # corrupt json, truncated safetensors, bad config
        raise InputError(f"cannot load the checkpoint in {folder}: {str(exc).splitlines()[0]}") from None
    own = model.state_dict()
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    mismatched = sorted(k for k in set(own) & set(state) if own[k].shape != state[k].shape)
    if missing or unexpected or mismatched:
        raise InputError(
            f"checkpoint {folder} does not match its config: missing {missing[:2]}, unexpected "
            f"{unexpected[:2]}, mismatched {mismatched[:2]}"
        )
    wrong = sorted(k for k in own if state[k].is_floating_point() != own[k].is_floating_point()
                   or state[k].is_complex())  # fmt: skip
    if wrong:
        raise InputError(
            f"checkpoint {folder} holds tensors of the wrong kind (e.g. {wrong[0]}: {state[wrong[0]].dtype})"
        )
    nonfinite = sorted(k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all())
    if nonfinite:
        raise InputError(f"checkpoint {folder} holds NaN or infinite weights (e.g. {nonfinite[0]})")
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()})
    return model.eval()


def describe(config: BackboneConfig) -> dict:
    model = build(config)
    info = {"arch": config.arch, "params": n_params(model), "image_size": config.image_size,
            "embed_dim": model.embed_dim}  # fmt: skip
    s = config.image_size
    with torch.no_grad():
        feats = model.features(torch.zeros(1, 3, s, s))
    info["features"] = [list(f.shape[1:]) for f in feats]
    info["grid"] = model.grid(s, s)
    return info


def ceil_to(x: int, m: int) -> int:
    return int(math.ceil(x / m) * m)
