"""CIRCLE: M fixed random BiRC2D reservoirs in G feature groups, one streaming-LDA head per group,
softmax outputs averaged. Training is ``partial_fit`` sample by sample (or a batch, processed as the
sequence of its rows): no replay, no task boundaries, no backpropagation."""

from __future__ import annotations

import time

import numpy as np
import torch

from circle_cil.reservoir import BiRC2D, ReservoirBank, as_images
from circle_cil.slda import StreamingLDA, as_labels
from papershelf.errors import InputError, check_int


class CIRCLE:
    """Class-incremental classifier on fixed reservoir features.

    Parameters
    ----------
    n_reservoirs, n_groups:
        M random BiRC2D instantiations (seeds spawned from ``seed``) split into G contiguous groups
        (``numpy.array_split``; G = 1 is one head on all features, G = M one head per reservoir).
    units, patch, leak, spectral_radius, connectivity, input_scale, activation, rescale, pooling:
        passed to every :class:`~circle_cil.reservoir.BiRC2D`.
    shrinkage, cov_update:
        passed to every :class:`~circle_cil.slda.StreamingLDA` head.
    image_shape:
        ``(C, H, W)``; by default taken from the first batch and fixed afterwards.

    >>> import numpy as np
    >>> from circle_cil.data import load_digits_dataset
    >>> d = load_digits_dataset()
    >>> m = CIRCLE(n_reservoirs=4, n_groups=2, units=32, patch=2, seed=0)
    >>> m.partial_fit(d.X_train, d.y_train)
    >>> bool(m.score(d.X_test, d.y_test) > 0.9)
    True
    """

    def __init__(
        self,
        n_reservoirs: int = 8,
        n_groups: int = 4,
        *,
        units: int = 128,
        patch: int = 4,
        leak: float = 0.9,
        spectral_radius: float = 0.95,
        connectivity: float = 0.1,
        input_scale: float = 1.0,
        activation: str = "leaky_relu",
        rescale: str = "spectral_radius",
        pooling: str = "pyramid",
        shrinkage: float = 1e-4,
        cov_update: str = "hayes_kanan",
        image_shape: tuple[int, int, int] | None = None,
        seed: int = 0,
        chunk: int = 64,
    ) -> None:
        self.n_reservoirs = check_int("n_reservoirs", n_reservoirs, low=1)
        self.n_groups = check_int("n_groups", n_groups, low=1)
        if self.n_groups > self.n_reservoirs:
            raise InputError(f"n_groups={n_groups} must be at most n_reservoirs={n_reservoirs}")
        self.reservoir_kw = dict(
            units=units,
            patch=patch,
            leak=leak,
            spectral_radius=spectral_radius,
            connectivity=connectivity,
            input_scale=input_scale,
            activation=activation,
            rescale=rescale,
            pooling=pooling,
        )
        self.head_kw = dict(shrinkage=shrinkage, cov_update=cov_update)
        StreamingLDA(1, **self.head_kw)  # validate now
        self.seed = check_int("seed", seed, low=0)
        self.chunk = check_int("chunk", chunk, low=1)
        self.groups = [g.tolist() for g in np.array_split(np.arange(self.n_reservoirs), self.n_groups)]
        self.reservoir_seeds = np.random.SeedSequence(self.seed).spawn(self.n_reservoirs)
        self.reservoirs: list[BiRC2D] | None = None
        self.heads: list[StreamingLDA] | None = None
        self.image_shape = None
        self.feature_seconds = 0.0
        self.head_seconds = 0.0
        if image_shape is not None:
            self._build(tuple(image_shape))

    def _build(self, shape: tuple[int, ...]) -> None:
        if len(shape) != 3:
            raise InputError(f"image_shape must be (C, H, W), got {shape}")
        c, h, w = (check_int("image_shape", s, low=1) for s in shape)
        self.image_shape = (c, h, w)
        self.reservoirs = [
            BiRC2D(c, (h, w), seed=s, **self.reservoir_kw)  # type: ignore[arg-type]
            for s in self.reservoir_seeds
        ]
        self._bank = ReservoirBank(self.reservoirs)
        f = self.reservoirs[0].out_dim
        self.heads = [StreamingLDA(f * len(g), **self.head_kw) for g in self.groups]  # type: ignore[arg-type]

    # ---- features ------------------------------------------------------------------------------------
    def features(self, X) -> torch.Tensor:
        """Fixed reservoir features ``(n, M, F)`` (float32)."""
        x = as_images(X)
        if self.reservoirs is None:
            self._build(tuple(x.shape[1:]))
        return self._bank.features(x, chunk=self.chunk)

    def _group_feats(self, feats: torch.Tensor) -> list[torch.Tensor]:
        return [feats[:, g].reshape(len(feats), -1) for g in self.groups]

    # ---- training ------------------------------------------------------------------------------------
    def partial_fit(self, X, y) -> None:
        """Learn from images ``X`` (``(n, C, H, W)``, ``(n, H, W)`` or one ``(C, H, W)`` image with a scalar
        ``y``) in the given order; new classes may appear at any call."""
        if np.ndim(y) == 0:  # one sample: a (C, H, W) or (H, W) image
            arr = X if isinstance(X, torch.Tensor) else np.asarray(X)
            if arr.ndim in (2, 3):
                X = arr.reshape(1, *([1] if arr.ndim == 2 else []), *arr.shape)
        x = as_images(X)
        labels = as_labels(y, len(x))
        t0 = time.perf_counter()
        feats = self.features(x)
        t1 = time.perf_counter()
        for head, f in zip(self.heads, self._group_feats(feats)):  # type: ignore[arg-type]
            head.partial_fit(f, labels)
        self.feature_seconds += t1 - t0
        self.head_seconds += time.perf_counter() - t1

    def fit_features(self, feats: torch.Tensor, y) -> None:
        """``partial_fit`` from precomputed :meth:`features` (skips the reservoirs)."""
        labels = as_labels(y, len(feats))
        for head, f in zip(self._heads(), self._group_feats(feats)):
            head.partial_fit(f, labels)

    def _heads(self) -> list[StreamingLDA]:
        if self.heads is None or self.heads[0].n_seen == 0:
            raise InputError("CIRCLE has seen no samples yet; call partial_fit first")
        return self.heads

    # ---- prediction ----------------------------------------------------------------------------------
    @property
    def classes_(self) -> list[int]:
        return list(self._heads()[0].classes_)

    def proba_from_features(self, feats: torch.Tensor) -> torch.Tensor:
        """Mean over the G heads of their softmax outputs, ``(n, n_classes)`` (float64)."""
        heads = self._heads()
        probs = [h.predict_proba(f) for h, f in zip(heads, self._group_feats(feats))]
        return torch.stack(probs).mean(0)

    def predict_proba(self, X) -> torch.Tensor:
        return self.proba_from_features(self.features(X))

    def predict(self, X) -> np.ndarray:
        return np.asarray(self.classes_, dtype=np.int64)[self.predict_proba(X).argmax(1).numpy()]

    def score(self, X, y) -> float:
        """Accuracy on ``(X, y)``; every label of ``y`` must be a class seen in training."""
        labels = as_labels(y)
        unseen = sorted(set(labels.tolist()) - set(self.classes_))
        if unseen:
            raise InputError(
                f"y contains class(es) {unseen[:5]} never seen in training; a class-incremental model "
                "can only be scored on classes it has learned"
            )
        pred = self.predict(X)
        if len(pred) != len(labels):
            raise InputError(f"y has {len(labels)} labels for {len(pred)} images")
        return float(np.mean(pred == labels))
