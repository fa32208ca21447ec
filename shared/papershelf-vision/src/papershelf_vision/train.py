"""Self-supervised pretraining on the procedural corpus: DINO-style self-distillation with multi-crop
(Caron et al., ICCV 2021; ``objective="dino"``, the default) or SimCLR's InfoNCE (Chen et al., ICML 2020;
``objective="infonce"``, what the shipped ``resnet-s`` uses; see the README for why).

DINO: a student and a teacher share an architecture: backbone + projection head (3-layer MLP to a
bottleneck, L2-normalised, then a weight-normalised linear layer to ``out_dim`` prototypes). Each
step draws a batch of source images (scenes, object views and photo patches of the *pretraining*
classes only, and optionally train-split digits, ``mixture[3]``), makes 2 global crops (``global_size``
px, area ``global_scale``) and ``n_local`` local crops (``local_size`` px, area ``local_scale``) with
flips, colour jitter, grey, blur and solarisation.
The teacher sees the global crops; its outputs are centred (``c`` an EMA of the batch mean) and
sharpened with ``teacher_temp``; the student sees every crop and is trained by cross-entropy
``-sum softmax((t - c) / tau_t) log softmax(s / tau_s)`` over every (teacher view, other student view)
pair. The teacher is an EMA of the student, momentum following a cosine from ``momentum`` to 1.
AdamW, linear warm-up then cosine learning rate, weight decay cosine from ``weight_decay`` to
``weight_decay_end``, gradient clipping, the last head layer frozen for ``freeze_last_layer`` steps.

InfoNCE: the same data, crops and optimiser; the two global crops of each image go through the backbone
and a projection head (Linear, BatchNorm, ReLU, Linear, L2-normalised), and NT-Xent at temperature
``infonce_temp`` makes each view pick out the other view of its image among the batch's 2B - 1 other views.
With ``views="rerender"`` the two views are crops of two renderings of one geometry in two appearances,
so only shape and layout can tell the positive apart. With ``dense_weight`` > 0 a per-token InfoNCE is
added on the segmentation layer's grid: the crop boxes are known, so each token of view 1 has an exact
corresponding point in view 2 (:func:`token_correspondence`, :func:`dense_info_nce`; VADeR-style).

Distillation (``objective="distill"``): a frozen self-supervised backbone (``distill_from``, e.g. the shipped
``resnet-s``) teaches the student from the same two global views — the student's embedding of each view,
through an MLP, is matched in cosine to the teacher's embeddings of both views, and its last-layer token
grid, through a 1x1 map, to the teacher's feature map of the same view at that grid (weight
``distill_dense``); the teacher's features are centred on the batch mean first. A ConvNet teacher hands a
ViT the locality it cannot bootstrap at this scale (DeiT's observation); no label is used anywhere.

Data and augmentation are functions of ``(seed, step)``, so a run resumed from ``state.pt`` sees the
same stream as an uninterrupted one. The run folder holds ``state.pt`` (rewritten atomically every
``checkpoint_minutes``), ``log.jsonl``, ``model/`` (the latest exported backbone: DINO's teacher, or the
InfoNCE network) and ``best/`` (the one with the best k-NN accuracy on a small held-out-class probe set
that the ``eval`` command never uses).
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from papershelf.errors import InputError, check_int
from papershelf_vision import data as D
from papershelf_vision.models import build, get_preset, load, save_model

PROBE_SEED = 424242  # the training-time probe set; eval uses other seeds


@dataclass
class TrainConfig:
    preset: str
    steps: int = 3000
    batch_size: int = 64
    lr: float = 1e-3
    min_lr: float = 1e-5
    warmup: int = 100
    weight_decay: float = 0.04
    weight_decay_end: float = 0.2
    momentum: float = 0.99
    teacher_temp: float = 0.04
    student_temp: float = 0.1
    center_momentum: float = 0.9
    out_dim: int = 1024
    hidden_dim: int = 512
    bottleneck_dim: int = 128
    n_local: int = 4
    global_size: int = 32
    local_size: int = 16
    source_size: int = 48
    global_scale: tuple[float, float] = (0.3, 1.0)
    local_scale: tuple[float, float] = (0.05, 0.3)
    # weights of the source kinds: scenes, object views, photo patches and, optionally, digits. The
    # digits are the images of the evaluation's digits *train* split (its 1000 probe-training images,
    # labels never read); the 797 test digits are never a source. Three numbers mean no digits.
    mixture: tuple[float, ...] = (0.45, 0.4, 0.15, 0.0)
    clip_grad: float = 3.0
    freeze_last_layer: int = 50
    seed: int = 0
    log_every: int = 10
    checkpoint_minutes: float = 3.0
    probe_n: int = 600
    head_bn: bool = False  # BatchNorm in the projection head (DINO's setting for ResNets)
    # horizontal flips in the crops. Off, the views never differ by a mirror image, so the features
    # need not be mirror-invariant, which glyphs and digits are not ("b" / "d", "2" / a mirrored "2").
    flips: bool = True
    # "crop": every view is a crop of one image (DINO). "rerender": the generator draws each scene or
    # object view twice, same geometry in two appearances (background, colours, textures), and view i
    # is cropped from rendering i mod 2, so what the views share is shape and layout, not appearance.
    views: str = "crop"
    # "dino": the self-distillation above. "infonce": SimCLR's NT-Xent between the two global views
    # (each view's positive is the other view of its image, the other 2B - 2 views are negatives) through
    # a projection head (hidden_dim, BatchNorm, ReLU, bottleneck_dim); no teacher, the student is exported.
    # "distill": the student learns a frozen self-supervised backbone's features (``distill_from``, a
    # shipped checkpoint name or a model folder): its global embedding of each view is matched to the
    # teacher's embeddings of both views (cosine), and its last-layer token grid to the teacher's feature
    # map of the same view at that grid (``distill_dense`` weighs that term). No labels anywhere.
    objective: str = "dino"
    infonce_temp: float = 0.2
    distill_from: str = "resnet-s"
    distill_dense: float = 1.0
    # ``objective="infonce"`` only: weight of a dense, per-token InfoNCE between the two global views
    # (VADeR-style; 0 = off). The views' crop boxes are known, so each token of view 1 has an exact
    # corresponding point in view 2 (same scene point, other rendering); ``dense_tokens`` of them per image
    # are contrasted against every other sampled token of the batch, on the segmentation layer's grid.
    dense_weight: float = 0.0
    dense_tokens: int = 16
    # a shipped checkpoint name or a model folder whose weights the backbone starts from ("" = random init)
    init_from: str = ""

    def __post_init__(self) -> None:
        from papershelf.errors import check_number

        backbone = get_preset(self.preset)
        for name, low in _INT_FIELDS.items():
            setattr(self, name, check_int(name, getattr(self, name), low=low))
        multiple = backbone.patch_size if backbone.arch == "vit" else 8  # the backbone's input grid
        for name in ("global_size", "local_size"):  # refused here, not after the step-0 checkpoint
            if getattr(self, name) % multiple:
                raise InputError(
                    f"{name} must be a positive multiple of {multiple} for preset {self.preset!r} "
                    f"(its patch / stride), got {getattr(self, name)}"
                )
        self.seed = check_int("seed", self.seed, low=0, high=2**32 - 1)  # seeds torch generators per step
        for name, (low, high, low_open) in _NUMBER_FIELDS.items():
            setattr(
                self, name, check_number(name, getattr(self, name), low=low, high=high, low_open=low_open)
            )
        for name in ("global_scale", "local_scale"):
            self._check_scale(name)
        self.mixture = _mixture(self.mixture)
        if self.views not in VIEWS:
            raise InputError(f"views must be one of {', '.join(VIEWS)}, got {self.views!r}")
        if self.objective not in OBJECTIVES:
            raise InputError(f"objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if not isinstance(self.distill_from, str) or not self.distill_from:
            raise InputError(f"distill_from must name a checkpoint or a folder, got {self.distill_from!r}")
        if self.objective == "infonce" and self.batch_size < 2:
            raise InputError(f"batch_size must be at least 2 for objective='infonce', got {self.batch_size}")
        if not isinstance(self.init_from, str):
            raise InputError(f"init_from must name a checkpoint or a folder, got {self.init_from!r}")
        if self.dense_weight > 0 and self.objective != "infonce":
            raise InputError(f"dense_weight needs objective='infonce', got objective={self.objective!r}")
        for name in ("head_bn", "flips"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"{name} must be true or false, got {getattr(self, name)!r}")

    def _check_scale(self, name: str) -> None:
        lo, hi = _numbers(name, getattr(self, name), 2)
        if not 0 < lo <= hi <= 1:
            raise InputError(
                f"{name} must be (low, high) area fractions with 0 < low <= high <= 1, got {(lo, hi)}"
            )
        setattr(self, name, (lo, hi))


def _numbers(name: str, value, count: int) -> tuple[float, ...]:
    from papershelf.errors import check_number

    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != count:
        raise InputError(f"{name} must be a list of {count} numbers, got {value!r}")
    return tuple(check_number(f"{name}[{i}]", v) for i, v in enumerate(value))


def _mixture(value) -> tuple[float, ...]:
    """3 weights (scenes, objects, photos) or 4 (and digits), as 4: a 3-weight config draws no digits."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) not in (3, 4):
        raise InputError(f"mixture must be a list of 3 or 4 numbers, got {value!r}")
    weights = _numbers("mixture", value, len(value))
    if min(weights) < 0 or sum(weights) <= 0:  # reported as given, before the digits weight is added
        raise InputError(
            f"mixture must be 3 or 4 non-negative weights (scenes, objects, photos[, digits]), got {weights}"
        )
    return (*weights, 0.0)[:4]


# minimum of each integer field, and (low, high, low excluded) of each real one
_INT_FIELDS = {"steps": 1, "batch_size": 1, "n_local": 1, "global_size": 1, "local_size": 1, "source_size": 8,
               "probe_n": 3, "warmup": 0, "out_dim": 1, "hidden_dim": 1, "bottleneck_dim": 1,
               "freeze_last_layer": 0, "log_every": 1, "dense_tokens": 1}  # fmt: skip
_NUMBER_FIELDS = {"lr": (0, None, True), "min_lr": (0, None, False), "weight_decay": (0, None, False),
                  "weight_decay_end": (0, None, False), "momentum": (0, 1, False),
                  "teacher_temp": (0, None, True), "student_temp": (0, None, True),
                  "center_momentum": (0, 1, False), "clip_grad": (0, None, True),
                  "checkpoint_minutes": (0, None, True), "infonce_temp": (0, None, True),
                  "distill_dense": (0, None, False), "dense_weight": (0, None, False)}  # fmt: skip

VIEWS = ("crop", "rerender")
OBJECTIVES = ("dino", "infonce", "distill")


class DINOHead(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, hidden: int, bottleneck: int, bn: bool = False) -> None:
        super().__init__()

        def norm():
            return [nn.BatchNorm1d(hidden)] if bn else []

        self.mlp = nn.Sequential(
            nn.Linear(in_dim, hidden),
            *norm(),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            *norm(),
            nn.GELU(),
            nn.Linear(hidden, bottleneck),
        )
        self.last = nn.Parameter(torch.empty(out_dim, bottleneck))
        nn.init.trunc_normal_(self.last, std=0.02)
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = F.normalize(self.mlp(x), dim=-1)
        return z @ F.normalize(self.last, dim=-1).T  # weight norm with g = 1


class ProjectionHead(nn.Module):
    """SimCLR's projection for ``objective="infonce"``: Linear, BatchNorm, ReLU, Linear, L2-normalised."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, out_dim)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.mlp(x), dim=-1)


def embedding_and_grid(backbone: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One pass: the backbone's global embedding ``(B, C)`` (what ``forward`` returns) and its token
    grids as maps ``[(B, C_l, h_l, w_l)]`` — a ViT's last-layer patch tokens (after the final LayerNorm,
    as its embedding), every stage of a ResNet."""
    from papershelf_vision.models import ViT

    if isinstance(backbone, ViT):
        t = backbone.norm(backbone.features(x)[-1])
        gh, gw = x.shape[-2] // backbone.patch_size, x.shape[-1] // backbone.patch_size
        emb = t[:, 1:].mean(1) if backbone.config.pool == "mean" else t[:, 0]
        return emb, [t[:, 1:].transpose(1, 2).reshape(len(x), -1, gh, gw)]
    maps = backbone.feature_maps(x)
    return maps[-1].mean(dim=(2, 3)), maps


def at_grid(maps: list[torch.Tensor], size: tuple[int, int]) -> torch.Tensor:
    """The map of ``maps`` with spatial ``size``, else the last one average-pooled (or resized) to it."""
    for m in maps:
        if tuple(m.shape[-2:]) == tuple(size):
            return m
    return F.adaptive_avg_pool2d(maps[-1], size)


class DistillHead(nn.Module):
    """The student's heads for ``objective="distill"``: an MLP from its global embedding to the teacher's,
    and a per-token linear map (1x1 convolution) from its token grid to the teacher's feature map."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, grid_in: int, grid_out: int) -> None:
        super().__init__()
        self.embedding = nn.Sequential(nn.Linear(in_dim, hidden), nn.GELU(), nn.Linear(hidden, out_dim))
        self.grid = nn.Conv2d(grid_in, grid_out, 1)


def distill_loss(student: nn.Module, head: DistillHead, teacher: nn.Module, views: list[torch.Tensor],
                 dense: float) -> tuple[torch.Tensor, dict]:  # fmt: skip
    """Mean over (student view v, teacher view u) of 1 - cos(head(s_v), t_u), plus ``dense`` times the
    mean over views and positions of 1 - cos(grid head(s_v), t_v at the student's grid); the teacher's
    embeddings and maps are centred on their batch means first."""
    x = torch.cat(views)
    with torch.no_grad():
        t_emb, t_maps = embedding_and_grid(teacher, x)
    s_emb, s_maps = embedding_and_grid(student, x)
    s_map = s_maps[-1]
    # the teacher's features are post-ReLU, all in one orthant, so every pair is already close in cosine;
    # centred on the batch mean, what is left is what tells images (and positions) apart
    t_emb = t_emb - t_emb.mean(0, keepdim=True)
    t_map = at_grid(t_maps, tuple(s_map.shape[-2:]))
    t_map = t_map - t_map.mean(dim=(0, 2, 3), keepdim=True)
    s_glob = F.normalize(head.embedding(s_emb), dim=-1).chunk(len(views))
    t_glob = F.normalize(t_emb, dim=-1).chunk(len(views))
    glob = torch.stack([1 - (sv * tu).sum(-1).mean() for sv in s_glob for tu in t_glob]).mean()
    target = F.normalize(t_map, dim=1)
    grid = 1 - (F.normalize(head.grid(s_map), dim=1) * target).sum(1).mean()
    with torch.no_grad():  # the health statistic: agreement with the teacher on the *other* rendering
        cross = float(torch.stack([(s_glob[v] * t_glob[1 - v]).sum(-1).mean() for v in range(2)]).mean())
    stats = {"global_cos": 1 - glob.item(), "grid_cos": 1 - grid.item(), "cross_view_cos": cross}
    return glob + dense * grid, {k: round(v, 4) for k, v in stats.items()}


class DenseHead(nn.Module):
    """The dense term's projection of a token grid: 1x1 conv, BatchNorm, ReLU, 1x1 conv, L2-normalised per
    token (SimCLR's head applied at every position)."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Conv2d(in_dim, hidden, 1), nn.BatchNorm2d(hidden), nn.ReLU(), nn.Conv2d(hidden, out_dim, 1)
        )

    def forward(self, grid: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.mlp(grid), dim=1)


def segmentation_grid(backbone: nn.Module, maps: list[torch.Tensor]) -> torch.Tensor:
    """Of :func:`embedding_and_grid`'s maps, the one the segmentation probe reads (a ResNet's stage 3, a
    ViT's last layer; :func:`papershelf_vision.evaluate.default_seg_layer`)."""
    from papershelf_vision.evaluate import default_seg_layer
    from papershelf_vision.models import ViT

    return maps[-1] if isinstance(backbone, ViT) else maps[default_seg_layer(backbone)]


def token_centre(backbone: nn.Module) -> float:
    """Where a token of the segmentation grid sits inside its cell of the image, in cell units: a ViT patch
    token in the middle (0.5); a ResNet token on the first pixel's centre (0.5 / stride), because its
    stride-2 3x3 convolutions (padding 1) and 1x1 shortcuts are centred on input pixel 2j."""
    from papershelf_vision.evaluate import default_seg_layer
    from papershelf_vision.models import ViT

    if isinstance(backbone, ViT):
        return 0.5
    return 0.5 / 2 ** default_seg_layer(backbone)


def token_correspondence(theta_a: torch.Tensor, theta_b: torch.Tensor, grid: int, centre: float = 0.5):
    """Where each token of view a's ``grid`` x ``grid`` map lies in view b's map: ``grid_sample``
    coordinates on view b's token grid ``(B, grid * grid, 2)`` (x, y; row-major tokens) and whether the
    point is inside view b. ``centre``: :func:`token_centre` (0.5 when tokens sit mid-cell). The views are
    crops (``theta``: crop → source) of renderings that share their geometry, so equal source coordinates
    are the same scene point."""
    c = (torch.arange(grid, dtype=theta_a.dtype) + centre) * 2 / grid - 1  # token positions, crop coords
    yy, xx = torch.meshgrid(c, c, indexing="ij")
    positions = torch.stack([xx, yy, torch.ones_like(xx)], -1).reshape(1, -1, 3)
    source = positions @ theta_a.transpose(1, 2)  # (B, grid², 2)
    a, t = theta_b[:, :, :2], theta_b[:, :, 2]
    in_b = torch.linalg.solve(a, (source - t[:, None]).transpose(1, 2)).transpose(1, 2)
    # grid_sample (align_corners=False) reads token j at (j + 0.5) * 2 / grid - 1; token j sits at
    # (j + centre) * 2 / grid - 1 in the crop
    return in_b + (0.5 - centre) * 2 / grid, (in_b.abs() <= 1).all(-1)


def dense_info_nce(za: torch.Tensor, zb: torch.Tensor, where: torch.Tensor, inside: torch.Tensor,
                   n_tokens: int, temperature: float, g: torch.Generator):  # fmt: skip
    """Per-token InfoNCE between two views' projected grids ``za``, ``zb`` ``(B, d, G, G)`` (unit norm per
    token): up to ``n_tokens`` tokens of view a per image whose point lies ``inside`` view b are drawn;
    each one's positive is view b's feature at its point (``where``, bilinear, re-normalised), and every
    other drawn token's positive in the batch is a negative — in both directions. Returns the loss and the
    fraction of drawn tokens whose nearest key is their positive (0 and 0.0 if fewer than 2 are drawn)."""
    b, d, G, _ = za.shape
    kb = F.grid_sample(zb, where.view(b, 1, G * G, 2), mode="bilinear", align_corners=False)
    kb = F.normalize(kb.view(b, d, G * G).transpose(1, 2), dim=-1)
    qa = za.flatten(2).transpose(1, 2)
    draw = torch.rand(b, G * G, generator=g).masked_fill_(~inside, -1.0)
    pick = draw.topk(min(n_tokens, G * G), dim=-1).indices
    keep = inside.gather(1, pick).reshape(-1)
    q = qa.gather(1, pick[..., None].expand(-1, -1, d)).reshape(-1, d)[keep]
    k = kb.gather(1, pick[..., None].expand(-1, -1, d)).reshape(-1, d)[keep]
    if len(q) < 2:
        return za.sum() * 0.0, 0.0
    sim = q @ k.T / temperature
    target = torch.arange(len(q))
    loss = 0.5 * (F.cross_entropy(sim, target) + F.cross_entropy(sim.T, target))
    return loss, float((sim.argmax(-1) == target).float().mean())


class Net(nn.Module):
    def __init__(self, backbone: nn.Module, head: nn.Module, dense: DenseHead | None = None) -> None:
        super().__init__()
        self.backbone, self.head, self.dense = backbone, head, dense

    def forward(self, crops: list[torch.Tensor]) -> torch.Tensor:
        # one backbone call per resolution, as in DINO's multi-crop wrapper
        out, i = [], 0
        while i < len(crops):
            j = i
            while j < len(crops) and crops[j].shape[-1] == crops[i].shape[-1]:
                j += 1
            out.append(self.backbone(torch.cat(crops[i:j])))
            i = j
        return self.head(torch.cat(out))


def dino_loss(student: torch.Tensor, teacher: torch.Tensor, center: torch.Tensor, n_crops: int,
              student_temp: float, teacher_temp: float,
              source: tuple[int, ...] | None = None) -> torch.Tensor:  # fmt: skip
    """Mean over (teacher global view i, student view v != i) of the cross-entropy; inputs are logits
    stacked view-major: ``student`` ``(n_crops * B, K)``, ``teacher`` ``(2 * B, K)``. ``source``: the
    rendering each view was cropped from (``views="rerender"``); a pair is then used only when its two
    views come from different renderings, so no pair can be matched by appearance alone."""
    s = (student / student_temp).chunk(n_crops)
    t = F.softmax((teacher - center) / teacher_temp, dim=-1).detach().chunk(2)
    total, pairs = 0.0, 0
    for i, ti in enumerate(t):
        for v, sv in enumerate(s):
            if v == i or (source is not None and source[v] == source[i]):
                continue
            total = total + torch.sum(-ti * F.log_softmax(sv, dim=-1), dim=-1).mean()
            pairs += 1
    return total / pairs


def info_nce(z: torch.Tensor, temperature: float) -> tuple[torch.Tensor, float]:
    """NT-Xent over ``z`` ``(2B, d)`` (L2-normalised, view-major: rows i and i + B are the two views of
    image i): the mean over all 2B rows of the cross-entropy of the positive against the other 2B - 2
    rows. Also returns the fraction of rows whose nearest other row is their positive."""
    b = len(z) // 2
    sim = (z @ z.T) / temperature
    sim.fill_diagonal_(float("-inf"))
    positive = torch.cat([torch.arange(b, 2 * b), torch.arange(0, b)]).to(z.device)
    hit = float((sim.argmax(-1) == positive).float().mean())
    return F.cross_entropy(sim, positive), hit


def cosine(step: int, total: int, start: float, end: float, warmup: int = 0) -> float:
    if step < warmup:
        return start * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return end + 0.5 * (start - end) * (1 + math.cos(math.pi * p))


# ---------------------------------------------------------------------------------------------------
# data and augmentation


def source_batch(config: TrainConfig, step: int) -> list[torch.Tensor]:
    """The step's source images as renderings ``[(B, 3, S, S)]`` float in [0, 1], one for ``views="crop"``
    and two for ``"rerender"``; a function of ``(seed, step)``. The two renderings of an image draw their
    appearance from two look seeds of their own, so they share geometry (shape, pose, layout, masks) and
    nothing else; photo patches and digits are repeated."""
    from papershelf_vision.models import to_tensor

    kinds, seeds, looks = source_plan(config, step)
    s = config.source_size
    renderings = []
    for look in looks:
        imgs = []
        for kind, sd in zip(kinds, seeds):
            own = None if look is None else (look + 2 * sd) % 2**63  # a look stream per image and rendering
            if kind == 0:
                imgs.append(D.scene(sd, s, n_objects=(1, 5), look_seed=own).image)
            elif kind == 1:
                name = D.PRETRAIN_CLASSES[sd % len(D.PRETRAIN_CLASSES)]
                imgs.append(D.object_view(sd, name, s, look_seed=own))
            elif kind == 2:
                imgs.append(D.photo_patches(1, s, sd)[0])
            else:  # a train-split digit, the same image in both renderings
                digits = _digit_sources(s)
                imgs.append(digits[sd % len(digits)])
        renderings.append(to_tensor(np.stack(imgs)))
    return renderings


def source_plan(config: TrainConfig, step: int) -> tuple[list[int], list[int], list[int | None]]:
    """(kind per image: 0 scene, 1 object view, 2 photo patch, 3 digit; generator seed per image; look seed
    per rendering). ``views="crop"`` renders once with the geometry's own stream (look ``None``); a
    ``"rerender"`` pair needs two explicit looks, because a scene drawn with look ``None`` interleaves its
    appearance draws with its geometry draws and so does not share geometry with any re-rendering."""
    rng = np.random.default_rng([config.seed, step])
    p = np.asarray(config.mixture, float) / sum(config.mixture)
    # four kinds: with a zero digits weight numpy draws exactly what it drew for three (same CDF search)
    kinds = [int(k) for k in rng.choice(4, size=config.batch_size, p=p)]
    seeds = [int(v) for v in rng.integers(0, 2**62, config.batch_size)]
    if config.views == "rerender":
        return kinds, seeds, [int(v) for v in rng.integers(0, 2**62, 2)]
    return kinds, seeds, [None]


@functools.cache
def _digit_sources(size: int) -> np.ndarray:
    """The evaluation's digits train split (labels dropped) at the source size, ``(1000, s, s, 3)``."""
    images = D.digits("train", size)[0]
    images.flags.writeable = False  # cached and shared by every step: no caller may change it
    return images


def random_resized_crop(
    x: torch.Tensor, out: int, scale, g: torch.Generator, *, with_theta: bool = False, flips: bool = True
):  # fmt: skip
    """Random crops (area ``scale`` of the source, aspect 3/4–4/3, horizontal flips unless ``flips`` is
    off) resized to ``out``; ``with_theta``: also the (B, 2, 3) affine maps from crop to source
    normalised coordinates. The flip draws are made either way, so ``flips`` changes nothing else."""
    b = len(x)
    area = torch.empty(b).uniform_(scale[0], scale[1], generator=g)
    ratio = torch.exp(torch.empty(b).uniform_(math.log(3 / 4), math.log(4 / 3), generator=g))
    w = torch.sqrt(area * ratio).clamp(max=1.0)
    h = torch.sqrt(area / ratio).clamp(max=1.0)
    cx = (torch.rand(b, generator=g) * 2 - 1) * (1 - w)
    cy = (torch.rand(b, generator=g) * 2 - 1) * (1 - h)
    flip = torch.where((torch.rand(b, generator=g) < 0.5) & flips, -1.0, 1.0)
    theta = torch.zeros(b, 2, 3, dtype=x.dtype)
    theta[:, 0, 0], theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = w * flip, cx, h, cy
    grid = F.affine_grid(theta, (b, 3, out, out), align_corners=False)
    crop = F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=False)
    return (crop, theta) if with_theta else crop


def _grey(x: torch.Tensor) -> torch.Tensor:
    return (0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3]).expand_as(x)


def colour(x: torch.Tensor, g: torch.Generator, p_blur: float, p_solar: float) -> torch.Tensor:
    b = len(x)

    def u(lo, hi):
        return torch.empty(b, 1, 1, 1).uniform_(lo, hi, generator=g)

    def coin(p):
        return (torch.rand(b, 1, 1, 1, generator=g) < p).float()

    jit = coin(0.8)
    y = x * (1 + jit * (u(0.6, 1.4) - 1))
    mean = y.mean(dim=(1, 2, 3), keepdim=True)
    y = (y - mean) * (1 + jit * (u(0.6, 1.4) - 1)) + mean
    grey = _grey(y)
    y = grey + (y - grey) * (1 + jit * (u(0.6, 1.4) - 1))
    y = y.clamp(0, 1)
    gmask = coin(0.2)
    y = gmask * _grey(y) + (1 - gmask) * y
    if p_blur > 0:
        k = torch.tensor([1.0, 2.0, 1.0])
        k = (k[:, None] * k[None, :] / 16).expand(3, 1, 3, 3)
        blurred = F.conv2d(F.pad(y, (1, 1, 1, 1), mode="replicate"), k, groups=3)
        bmask = coin(p_blur)
        y = bmask * blurred + (1 - bmask) * y
    if p_solar > 0:
        smask = coin(p_solar)
        y = smask * torch.where(y > 0.5, 1 - y, y) + (1 - smask) * y
    return y


def crops(
    config: TrainConfig, renderings: list[torch.Tensor], step: int, *, local: bool = True,
    with_theta: bool = False,
):  # fmt: skip
    """2 global and ``n_local`` local augmented crops (``local=False``: the global ones only, the same
    two, as they are drawn first); view i is cropped from rendering i mod len. ``with_theta``: also the
    two global crops' boxes (:func:`random_resized_crop`), for the dense term's correspondences."""
    g = torch.Generator().manual_seed(config.seed * 1_000_003 + step)

    def src(i: int) -> torch.Tensor:
        return renderings[i % len(renderings)]

    glob, loc = (config.global_size, config.global_scale), (config.local_size, config.local_scale)
    v0, t0 = random_resized_crop(src(0), *glob, g, with_theta=True, flips=config.flips)
    v1, t1 = random_resized_crop(src(1), *glob, g, with_theta=True, flips=config.flips)
    out = [colour(v0, g, 1.0, 0.0), colour(v1, g, 0.1, 0.2)]
    for j in range(config.n_local if local else 0):
        out.append(colour(random_resized_crop(src(j), *loc, g, flips=config.flips), g, 0.5, 0.0))
    return (out, (t0, t1)) if with_theta else out


# ---------------------------------------------------------------------------------------------------
# the loop


def _probe_set(config: TrainConfig, size: int):
    x, y = D.objects(config.probe_n, D.HELDOUT_CLASSES, size, seed=PROBE_SEED)
    return x, y


def probe_knn(backbone: nn.Module, images: np.ndarray, labels: np.ndarray) -> float:
    """k-NN (k = 10, cosine) accuracy, first two thirds of the set as the bank, the rest as queries."""
    from papershelf_vision.evaluate import embed, knn_accuracy

    f = embed(backbone, images)
    cut = 2 * len(f) // 3
    return knn_accuracy(f[:cut], labels[:cut], f[cut:], labels[cut:], k=10)


def _param_groups(model: nn.Module):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim <= 1 or name.endswith(("pos_embed", "cls_token")) else decay).append(p)
    return [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]


def train(config: TrainConfig, out: str | Path, *, max_minutes: float | None = None,
          threads: int | None = None, quiet: bool = False) -> dict:  # fmt: skip
    """Train (or resume) into the run folder ``out``; returns a summary dict."""
    from papershelf.repro import atomic_path, atomic_write_json

    if threads is not None:  # far more threads than CPUs crashes torch's thread pool
        torch.set_num_threads(check_int("threads", threads, low=1, high=os.cpu_count() or 1))
    out = Path(out)
    state_file, log_file = out / "state.pt", out / "log.jsonl"
    torch.manual_seed(config.seed)

    infonce, distill = config.objective == "infonce", config.objective == "distill"
    probe = torch.zeros(1, 3, config.global_size, config.global_size)  # sizes the dense head
    frozen = _distill_teacher(config) if distill else None

    def net() -> Net:
        backbone = _initial_backbone(config, resuming=state_file.is_file())
        if distill:
            return Net(backbone, _distill_head(config, backbone, frozen))
        if infonce:
            head = ProjectionHead(backbone.embed_dim, config.hidden_dim, config.bottleneck_dim)
            dense = None
            if config.dense_weight > 0:
                grid_dim = segmentation_grid(backbone, embedding_and_grid(backbone, probe)[1]).shape[1]
                dense = DenseHead(grid_dim, config.hidden_dim, config.bottleneck_dim)
            return Net(backbone, head, dense)
        head = DINOHead(
            backbone.embed_dim, config.out_dim, config.hidden_dim, config.bottleneck_dim, config.head_bn
        )
        return Net(backbone, head)

    student, teacher = net(), net()  # a bad init_from / distill_from fails here, before any file is written
    out.mkdir(parents=True, exist_ok=True)
    teacher.load_state_dict(student.state_dict())
    for p in teacher.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(_param_groups(student), lr=config.lr, weight_decay=config.weight_decay)
    center = torch.zeros(1, config.out_dim)
    step, best, elapsed0 = 0, -1.0, 0.0
    if state_file.is_file():
        state = load_state(state_file)
        if not isinstance(state["config"], dict):
            raise InputError(f"{state_file} is not a training state of this package (its config is no dict)")
        saved = _normalised(state["config"])
        mine, defaults = asdict(config), {f.name: f.default for f in fields(TrainConfig)}
        diff = [k for k in mine if k not in ("steps", "log_every", "checkpoint_minutes")
                and json.dumps(saved.get(k, defaults[k])) != json.dumps(mine[k])]  # fmt: skip
        if diff:
            raise InputError(
                f"{out} holds a run with a different config ({', '.join(diff)}); use another --out"
            )
        try:  # a readable state.pt with the wrong contents: one error line naming it
            student.load_state_dict(state["student"])
            teacher.load_state_dict(state["teacher"])
            opt.load_state_dict(state["opt"])
            center, step, best, elapsed0 = state["center"], state["step"], state["best"], state["elapsed_s"]
            step, best, elapsed0 = check_int("state step", step, low=0), float(best), float(elapsed0)
            lines = None
            if log_file.is_file():  # drop log lines written after the checkpoint we resume from
                lines = [
                    ln for ln in log_file.read_text().splitlines() if ln and json.loads(ln)["step"] <= step
                ]
        except (RuntimeError, TypeError, ValueError, KeyError, AttributeError, InputError) as exc:
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(f"{state_file} or its log.jsonl cannot be resumed from ({detail})") from None
        if lines is not None:
            atomic_write_json_lines(log_file, lines)
    probe_x, probe_y = _probe_set(config, config.global_size)

    # the exported backbone: DINO's teacher, or SimCLR's only network
    exported = student.backbone if infonce or distill else teacher.backbone
    method = "simclr-infonce" if infonce else "dino-multicrop"
    method += "-dense" if infonce and config.dense_weight > 0 else ""
    if distill:
        method = f"distill-{Path(config.distill_from).name}"
    method += "-rerender" if config.views == "rerender" else ""
    method += "-digits" if config.mixture[3] > 0 else ""  # what the network saw, in `info`'s method column

    def checkpoint(final: bool = False) -> None:
        nonlocal best
        acc = probe_knn(exported, probe_x, probe_y)
        extra = {"preset": config.preset, "step": step, "probe_knn": acc, "method": method}
        save_model(exported, out / "model", extra)
        if acc > best:
            best = acc
            save_model(exported, out / "best", extra)
        state = {"config": asdict(config), "student": student.state_dict(), "teacher": teacher.state_dict(),
                 "opt": opt.state_dict(), "center": center, "step": step, "best": best,
                 "elapsed_s": elapsed0 + time.time() - t0}  # fmt: skip
        with atomic_path(state_file, mode="wb") as handle:
            torch.save(state, handle)
        _append(log_file, {"step": step, "probe_knn": acc, "best_probe_knn": best, "final": final,
                           "elapsed_s": round(elapsed0 + time.time() - t0, 1)})  # fmt: skip
        if not quiet:
            print(f"checkpoint step {step}: probe k-NN {acc:.3f} (best {best:.3f})", flush=True)

    t0 = time.time()
    if step == 0 and not state_file.is_file():
        checkpoint()  # the random-init teacher's probe, for reference
    last_ckpt, n_crops = time.time(), 2 + config.n_local
    while step < config.steps:
        if max_minutes is not None and time.time() - t0 > 60 * max_minutes:
            break
        ts = time.time()
        lr = cosine(step, config.steps, config.lr, config.min_lr, config.warmup)
        wd = cosine(step, config.steps, config.weight_decay, config.weight_decay_end)
        m = cosine(step, config.steps, config.momentum, 1.0)
        opt.param_groups[0]["lr"], opt.param_groups[1]["lr"] = lr, lr
        opt.param_groups[0]["weight_decay"] = wd
        views, boxes = crops(config, source_batch(config, step), step, local=config.objective == "dino",
                             with_theta=True)  # fmt: skip
        student.train()
        teacher.train()  # the probe put the exported backbone in eval mode; BatchNorm must see batch stats
        if distill:
            loss, stats = distill_loss(student.backbone, student.head, frozen, views, config.distill_dense)
        elif infonce and student.dense is not None:
            loss, stats = _global_and_dense(student, views, boxes, config, step)
        elif infonce:
            loss, hit = info_nce(student([torch.cat(views)]), config.infonce_temp)
            stats = {"positive_top1": hit}
        else:
            with torch.no_grad():
                t_out = teacher(views[:2])
            s_out = student(views)
            source = tuple(i % 2 for i in range(n_crops)) if config.views == "rerender" else None
            loss = dino_loss(s_out, t_out, center, n_crops, config.student_temp, config.teacher_temp, source)
        if not torch.isfinite(loss):
            # a user-correctable setting (learning rate, temperatures, NaN init weights): one error line
            raise InputError(f"non-finite loss at step {step}; lower --config lr or raise the temperatures")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if step < config.freeze_last_layer and config.objective == "dino":
            student.head.last.grad = None
        gnorm = float(nn.utils.clip_grad_norm_(student.parameters(), config.clip_grad))
        opt.step()
        if config.objective == "dino":
            with torch.no_grad():
                for ps, pt in zip(student.parameters(), teacher.parameters()):
                    pt.mul_(m).add_(ps.detach(), alpha=1 - m)
                center.mul_(config.center_momentum).add_(
                    t_out.mean(0, keepdim=True), alpha=1 - config.center_momentum
                )
                probs = F.softmax((t_out - center) / config.teacher_temp, dim=-1)
            stats = {
                "teacher_entropy": float(-(probs * probs.clamp_min(1e-12).log()).sum(-1).mean()),
                "prototypes_used": int(probs.argmax(-1).unique().numel()),
            }
        step += 1
        if step % config.log_every == 0 or step == config.steps:
            rec = {"step": step, "loss": loss.item(), "lr": lr, "wd": wd, "momentum": m, "grad_norm": gnorm,
                   **stats, "step_s": round(time.time() - ts, 3),
                   "elapsed_s": round(elapsed0 + time.time() - t0, 1)}  # fmt: skip
            _append(log_file, rec)
            if not quiet:
                print(json.dumps(rec), flush=True)
        if time.time() - last_ckpt > 60 * config.checkpoint_minutes and step < config.steps:
            checkpoint()
            last_ckpt = time.time()
    checkpoint(final=step >= config.steps)
    summary = {"run": str(out), "step": step, "steps": config.steps, "best_probe_knn": best,
               "finished": step >= config.steps}  # fmt: skip
    atomic_write_json(out / "train_config.json", {**asdict(config), "corpus": corpus_id()})
    return summary


def _global_and_dense(student: Net, views, boxes, config: TrainConfig, step: int):
    """InfoNCE on the global embeddings plus ``dense_weight`` times :func:`dense_info_nce` on the
    segmentation layer's grids, from one backbone pass."""
    emb, maps = embedding_and_grid(student.backbone, torch.cat(views))
    glob, hit = info_nce(student.head(emb), config.infonce_temp)
    z = student.dense(segmentation_grid(student.backbone, maps))
    za, zb = z.chunk(2)
    where, inside = token_correspondence(boxes[0], boxes[1], za.shape[-1], token_centre(student.backbone))
    g = torch.Generator().manual_seed(2**40 + config.seed * 1_000_003 + step)  # apart from the crops' seeds
    dense, dense_hit = dense_info_nce(za, zb, where, inside, config.dense_tokens, config.infonce_temp, g)
    stats = {"positive_top1": hit, "dense_loss": round(dense.item(), 4), "dense_top1": dense_hit}
    return glob + config.dense_weight * dense, stats


def _initial_backbone(config: TrainConfig, resuming: bool) -> nn.Module:
    """The preset at random init (``seed``), or with the weights of ``init_from`` (same architecture);
    ``resuming``: the run's state.pt replaces the weights, so ``init_from`` is not read (it may be gone)."""
    from papershelf_vision.models import load

    backbone = build(get_preset(config.preset), seed=config.seed)
    if config.init_from and not resuming:
        start = load(config.init_from)
        if start.config != backbone.config:
            raise InputError(f"init_from {config.init_from!r} is not a {config.preset} backbone")
        backbone.load_state_dict(start.state_dict())
    return backbone


def _distill_teacher(config: TrainConfig) -> nn.Module:
    """The frozen backbone a ``distill`` run learns from (a shipped name or a model folder)."""
    from papershelf_vision.models import load

    teacher = load(config.distill_from)
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


def _distill_head(config: TrainConfig, backbone: nn.Module, teacher: nn.Module) -> DistillHead:
    """Heads sized from one dry pass of both networks at the global crop size."""
    x = torch.zeros(1, 3, config.global_size, config.global_size)
    with torch.no_grad():
        s_emb, s_maps = embedding_and_grid(backbone, x)
        t_emb, t_maps = embedding_and_grid(teacher, x)
    t_map = at_grid(t_maps, tuple(s_maps[-1].shape[-2:]))
    s_dim, t_dim = s_emb.shape[-1], t_emb.shape[-1]
    return DistillHead(s_dim, config.hidden_dim, t_dim, s_maps[-1].shape[1], t_map.shape[1])


def _normalised(saved: dict) -> dict:
    """A saved config as this version's ``TrainConfig`` would hold it (ints in float fields as floats,
    lists as tuples), so resuming compares values, not spellings; as saved if it no longer validates."""
    known = {f.name for f in fields(TrainConfig)}
    try:
        return asdict(TrainConfig(**{k: v for k, v in saved.items() if k in known}))
    except (InputError, TypeError):
        return dict(saved)


STATE_KEYS = ("config", "student", "teacher", "opt", "center", "step", "best", "elapsed_s")


def load_state(path: Path) -> dict:
    """A run's ``state.pt``, or an ``InputError`` naming the file when it is missing, truncated or foreign
    (the file is left as it is)."""
    try:
        # weights_only: the state is dicts, tensors and numbers, and a pickle could run code on load
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises EOFError, UnpicklingError, RuntimeError, ... for a bad file
        raise InputError(f"{path} is not a readable training state ({type(exc).__name__}: {exc})") from None
    missing = [k for k in STATE_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise InputError(f"{path} is not a training state of this package (missing {', '.join(missing)})")
    return state


def corpus_id() -> str:
    import sklearn

    from papershelf_vision import __version__

    return f"papershelf-vision-{__version__}-procedural+sklearn-{sklearn.__version__}"


def _append(path: Path, rec: dict) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(rec) + "\n")


def atomic_write_json_lines(path: Path, lines: list[str]) -> None:
    from papershelf.repro import atomic_write_text

    atomic_write_text(path, "".join(ln + "\n" for ln in lines))


def config_from_file(preset: str, path: str | None) -> TrainConfig:
    overrides = {}
    if path:
        try:
            overrides = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:  # ValueError: bad JSON and non-UTF-8 bytes alike
            raise InputError(f"--config: {exc}") from None
        if not isinstance(overrides, dict):
            raise InputError(
                f"--config must hold a JSON object of TrainConfig fields, got {type(overrides).__name__}"
            )
    names = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise InputError(f"--config: unknown field(s) {unknown}; known: {sorted(names)}")
    if overrides.get("preset", preset) != preset:  # silently training another preset would mislead
        raise InputError(f"--config names preset {overrides['preset']!r} but --preset is {preset!r}")
    overrides.pop("preset", None)
    try:
        return TrainConfig(preset=preset, **overrides)
    except InputError as exc:  # a bad value: say which file it came from
        raise InputError(f"--config {path}: {exc}") from None


def loss_summary(log_file: Path, every: int = 50) -> dict:
    """Mean loss / teacher entropy per ``every`` steps and the probe history, from a run's log."""
    try:
        rows = [json.loads(line) for line in log_file.read_text(encoding="utf-8").splitlines() if line]
    except (OSError, ValueError) as exc:
        raise InputError(f"{log_file} is not a readable run log ({exc})") from None
    steps = [r for r in rows if "loss" in r]
    out: dict = {"per_steps": every, "windows": [], "probe_knn": []}
    for start in range(0, (steps[-1]["step"] if steps else 0), every):
        w = [r for r in steps if start < r["step"] <= start + every]
        if w:
            window = {
                "steps": [start + 1, start + every],
                "loss": round(float(np.mean([r["loss"] for r in w])), 4),
            }
            for key in ("teacher_entropy", "positive_top1", "dense_loss", "dense_top1", "cross_view_cos"):
                if key in w[0]:
                    window[key] = round(float(np.mean([r[key] for r in w])), 3)
            out["windows"].append({**window, "elapsed_s": w[-1]["elapsed_s"]})
    out["probe_knn"] = [[r["step"], r["probe_knn"]] for r in rows if "probe_knn" in r]
    return out


def ship(run: str | Path, name: str, *, which: str = "best") -> Path:
    """Copy a run's ``best`` (or ``model``: the latest) exported backbone into the package as checkpoint
    ``name``, with its training config and loss summary."""
    from papershelf.repro import atomic_write_json
    from papershelf_vision.models import CHECKPOINTS

    run = Path(run)
    src = run / which
    if which not in ("best", "model") or not (src / "model.safetensors").is_file():
        raise InputError(f"{src} holds no exported model (which must be 'best' or 'model' of a run folder)")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name or ""):
        raise InputError(f"checkpoint name {name!r} must be letters, digits, '.', '_' or '-'")
    # everything is read and checked before anything is written, and the checkpoint is assembled in a
    # temporary folder beside its destination, so a bad run can neither half-write nor clobber one
    state = load_state(run / "state.pt")
    load(src)  # a corrupt or foreign model.safetensors / config.json is refused here
    try:
        shipped = json.loads((src / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{src / 'config.json'} is not readable JSON ({exc})") from None
    losses = loss_summary(run / "log.jsonl")
    dest = CHECKPOINTS / name
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=CHECKPOINTS))
    try:
        shutil.copyfile(src / "model.safetensors", tmp / "model.safetensors")
        shutil.copyfile(src / "config.json", tmp / "config.json")
        atomic_write_json(tmp / "train_config.json", {
            **state["config"], "corpus": corpus_id(), "shipped_step": shipped.get("step"),
            "run_step": state["step"], "run_elapsed_s": round(state["elapsed_s"], 1),
        })  # fmt: skip
        atomic_write_json(tmp / "loss_summary.json", losses)
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return dest
