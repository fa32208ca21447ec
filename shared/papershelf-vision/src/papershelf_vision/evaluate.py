"""Frozen-feature evaluation: linear probe and k-NN classification, per-token linear segmentation.

Protocol (``evaluate(model)``; the ``eval`` command runs it on a checkpoint *and* on the same
architecture at random init):

- **held-out procedural classes**: object views of the 10 :data:`~papershelf_vision.data.HELDOUT_CLASSES`
  (never drawn in pretraining), ``n_train`` / ``n_test`` images (seeds 1 / 2), at the model's size;
- **digits**: scikit-learn digits upsampled to the model's size, the fixed 1000 / 797 split;
- features: ``model(x)`` (a ViT's final-LayerNorm CLS token or patch-token mean, by its ``pool``; the
  pooled last stage of a ResNet);
- **linear probe**: standardised features, multinomial logistic regression (L2, ``C`` = 1, lbfgs);
- **k-NN**: cosine similarity, ``k`` = 10 nearest training features, majority vote (ties to the nearest);
- **segmentation**: scenes of :data:`~papershelf_vision.data.SEGMENTATION_CLASSES` (1–4 objects) at the
  model's size; per-token features of one layer (default: the last block of a ViT, stage 3 of a
  ResNet, both an 8x8 grid at 32 px) standardised; a logistic-regression probe trained on each token's
  majority label in its patch; its predictions upsampled (nearest) to pixels; mean IoU over
  background + the classes present in the test set.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from papershelf.errors import InputError, check_int
from papershelf_vision import data as D
from papershelf_vision.models import to_tensor


@torch.no_grad()
def embed(model: nn.Module, images: np.ndarray, batch_size: int = 128) -> np.ndarray:
    model.eval()
    out = [model(to_tensor(images[i : i + batch_size])) for i in range(0, len(images), batch_size)]
    return torch.cat(out).numpy().astype(np.float64)


@torch.no_grad()
def tokens(model: nn.Module, images: np.ndarray, layer: int, batch_size: int = 128) -> np.ndarray:
    """Patch tokens of ``layer`` as ``(N, gh, gw, D)`` (a ViT's CLS token dropped)."""
    model.eval()
    s = images.shape[1]
    gh, gw = model.grid(s, s)[layer]
    out = []
    for i in range(0, len(images), batch_size):
        t = model.features(to_tensor(images[i : i + batch_size]))[layer]
        out.append(t[:, -gh * gw :])
    return torch.cat(out).reshape(len(images), gh, gw, -1).numpy().astype(np.float64)


def knn_accuracy(train_x, train_y, test_x, test_y, k: int = 10) -> float:
    a = train_x / (np.linalg.norm(train_x, axis=1, keepdims=True) + 1e-12)
    b = test_x / (np.linalg.norm(test_x, axis=1, keepdims=True) + 1e-12)
    sim = b @ a.T
    k = min(k, len(a))
    idx = np.argsort(-sim, axis=1, kind="stable")[:, :k]
    votes = train_y[idx]
    n_cls = int(max(train_y.max(), test_y.max())) + 1
    counts = np.zeros((len(b), n_cls))
    for j in range(k):  # earlier neighbours break ties: a tiny bonus decreasing with rank
        np.add.at(counts, (np.arange(len(b)), votes[:, j]), 1.0 + 1e-6 * (k - j))
    return float((counts.argmax(1) == test_y).mean())


def _logreg(train_x, train_y, max_iter: int = 1000):
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    clf = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=max_iter))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(train_x, train_y)
    return clf


def linear_probe_accuracy(train_x, train_y, test_x, test_y) -> float:
    return float((_logreg(train_x, train_y).predict(test_x) == test_y).mean())


def default_seg_layer(model: nn.Module) -> int:
    """The last block of a ViT; stage 3 (stride 4) of a ResNet."""
    return len(model.blocks) - 1 if hasattr(model, "blocks") else 2


def scene_set(n: int, size: int, seed: int):
    scenes = [
        D.scene(seed * 1_000_003 + i, size, n_objects=(1, 4), classes=D.SEGMENTATION_CLASSES)
        for i in range(n)
    ]
    return np.stack([s.image for s in scenes]), np.stack([s.semantic for s in scenes]).astype(np.int64)


def miou(pred: np.ndarray, truth: np.ndarray) -> float:
    ious = []
    for c in np.unique(truth):
        inter = np.sum((pred == c) & (truth == c))
        union = np.sum((pred == c) | (truth == c))
        ious.append(inter / union)
    return float(np.mean(ious))


def segmentation_miou(model: nn.Module, n_train: int = 200, n_test: int = 100, size: int | None = None,
                      layer: int | None = None) -> float:  # fmt: skip
    size = size or model.config.image_size
    layer = default_seg_layer(model) if layer is None else layer
    xtr, mtr = scene_set(n_train, size, seed=11)
    xte, mte = scene_set(n_test, size, seed=12)
    ftr, fte = tokens(model, xtr, layer), tokens(model, xte, layer)
    gh, gw = ftr.shape[1:3]
    ytr = token_labels(mtr, gh, gw).reshape(-1)
    clf = _logreg(ftr.reshape(-1, ftr.shape[-1]), ytr, max_iter=300)
    pred = clf.predict(fte.reshape(-1, fte.shape[-1])).reshape(len(fte), gh, gw)
    return miou(to_pixels(pred, mte.shape[1:]), mte)


def token_labels(masks: np.ndarray, gh: int, gw: int) -> np.ndarray:
    """Each token's label: the majority class of the pixels in its patch, ``(N, gh, gw)``."""
    n, h, w = masks.shape
    p = masks.reshape(n, gh, h // gh, gw, w // gw).transpose(0, 1, 3, 2, 4).reshape(n, gh, gw, -1)
    counts = np.apply_along_axis(lambda v: np.bincount(v, minlength=len(D.CLASSES) + 1), -1, p)
    return counts.argmax(-1)


def to_pixels(labels: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Token labels ``(N, gh, gw)`` upsampled (nearest) to pixels ``(N, H, W)``."""
    return labels.repeat(shape[0] // labels.shape[1], axis=1).repeat(shape[1] // labels.shape[2], axis=2)


def segmentation_reference(grid: tuple[int, int], n_test: int = 100, size: int = 32) -> dict:
    """Two reference scores for the token probe's mIoU on the same test scenes: ``all_background`` (every
    pixel called background, what a probe that learned nothing scores) and ``true_token_labels`` (every
    token given its patch's true majority label: a perfect per-token classifier at this grid, which the
    pixel resolution keeps below 1)."""
    _, mte = scene_set(n_test, size, seed=12)
    return {
        "all_background": miou(np.zeros_like(mte), mte),
        "true_token_labels": miou(to_pixels(token_labels(mte, *grid), mte.shape[1:]), mte),
    }


def evaluate(model: nn.Module, *, n_train: int = 2000, n_test: int = 1000, seg_train: int = 200,
             seg_test: int = 100, k: int = 10) -> dict:  # fmt: skip
    """Every score of the protocol above for one model (a dict of floats)."""
    if not isinstance(model, nn.Module) or not hasattr(model, "config"):
        raise InputError(f"evaluate needs a backbone module (from load or build), got {type(model).__name__}")
    for name, value in (
        ("n_train", n_train),
        ("n_test", n_test),
        ("seg_train", seg_train),
        ("seg_test", seg_test),
    ):
        check_int(name, value, low=10, high=1_000_000)  # every count up front, before minutes of embedding
    check_int("k", k, low=1)
    size = model.config.image_size
    xtr, ytr = D.objects(n_train, D.HELDOUT_CLASSES, size, seed=1)
    xte, yte = D.objects(n_test, D.HELDOUT_CLASSES, size, seed=2)
    ftr, fte = embed(model, xtr), embed(model, xte)
    res = {
        "heldout_linear": linear_probe_accuracy(ftr, ytr, fte, yte),
        "heldout_knn": knn_accuracy(ftr, ytr, fte, yte, k),
    }
    dtr, dytr = D.digits("train", size)
    dte, dyte = D.digits("test", size)
    gtr, gte = embed(model, dtr), embed(model, dte)
    res["digits_linear"] = linear_probe_accuracy(gtr, dytr, gte, dyte)
    res["digits_knn"] = knn_accuracy(gtr, dytr, gte, dyte, k)
    res["seg_miou"] = segmentation_miou(model, seg_train, seg_test)
    return res
