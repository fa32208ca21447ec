"""Streaming linear discriminant analysis with sample-wise closed-form updates.

For a sample (x, y) with Δ = x − μ_y (the class mean *before* the update), both modes update

    μ_y ← μ_y + Δ/(n_y + 1),   n_y ← n_y + 1,   S ← S + w·ΔΔᵀ,   t ← t + 1,   Σ = S/t,

and differ only in the weight w:

* ``"hayes_kanan"`` (the published SLDA of Hayes & Kanan, CVPRW 2020, as in Avalanche's StreamingLDA):
  ``Σ ← (tΣ + t/(t+1)·ΔΔᵀ)/(t+1)``, i.e. w = t/(t+1) with t the *total* number of samples seen before,
  and μ_y starting at 0. It depends on the sample order and is not the pooled covariance.
* ``"exact"`` (per-class Welford): w = n_y/(n_y+1) with n_y the class count before. Then S is exactly
  the pooled within-class scatter Σ_c Σ_{i∈c}(x_i − μ_c)(x_i − μ_c)ᵀ whatever the order, and the head
  equals batch LDA.

A batch passed to :meth:`StreamingLDA.partial_fit` is processed *as the sequence of its rows*: the
old means every row would have seen are recovered from per-class prefix sums, and the rank-1 updates
are summed in one rank-k product. S is symmetric, so for ``dim ≥ 2·SYRK_BLOCK`` only its lower block
triangle is updated (:func:`syrk_lower_`, about half the flops of a full ``addmm``); the upper blocks
are mirrored once, lazily, when Σ is read. Prediction uses the shrunk precision Λ = ((1−ε)Σ + εI)⁻¹:
scores_c(x) = xᵀΛμ_c − ½μ_cᵀΛμ_c.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from papershelf.errors import InputError, check_choice, check_int, check_number

COV_UPDATES = ("hayes_kanan", "exact")
SYRK_BLOCK = 256  # block size of the lower-triangular rank-k update


def _blocks(dim: int, block: int) -> list[tuple[int, int]]:
    nb = max(1, round(dim / block))
    edges = [(i * dim) // nb for i in range(nb + 1)]
    return list(itertools.pairwise(edges))


def syrk_lower_(S: torch.Tensor, A: torch.Tensor, B: torch.Tensor, block: int = SYRK_BLOCK) -> torch.Tensor:
    """``S += Aᵀ B`` on the diagonal and lower off-diagonal blocks of ``S`` only (in place).

    For a symmetric update (``B = diag(w)·A`` row-scaled), the full result is the lower block triangle
    mirrored: see :func:`mirror_lower_`. ``A``, ``B`` are ``(k, dim)``.
    """
    for lo, hi in _blocks(S.shape[0], block):
        # rows lo:hi, columns 0:hi: the diagonal block and everything left of it, in one product
        S[lo:hi, :hi].addmm_(A[:, lo:hi].T, B[:, :hi])
    return S


def mirror_lower_(S: torch.Tensor, block: int = SYRK_BLOCK) -> torch.Tensor:
    """Copy the strictly-lower blocks of ``S`` onto the upper ones (in place), making it symmetric
    again after :func:`syrk_lower_` updates."""
    for lo, hi in _blocks(S.shape[0], block):
        if lo > 0:
            S[:lo, lo:hi] = S[lo:hi, :lo].T
    return S


def as_labels(y, n: int | None = None, name: str = "y") -> np.ndarray:
    """Validate integer class labels (numpy/torch/list or a scalar) → int64 ``(n,)``."""
    if isinstance(y, torch.Tensor):
        y = y.detach().cpu().numpy()
    arr = np.asarray(y)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise InputError(f"{name} must be a 1-D array of integer labels, got shape {arr.shape}")
    if arr.dtype == bool or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise InputError(f"{name} must hold integer class labels, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise InputError(f"{name} must hold integer class labels, got non-integer values")
        arr = arr.astype(np.int64)
    arr = arr.astype(np.int64)
    if n is not None and len(arr) != n:
        raise InputError(f"{name} has {len(arr)} labels for {n} samples")
    return arr


def _as_matrix(X, dim: int, dtype: torch.dtype, name: str = "X") -> torch.Tensor:
    t = X.detach() if isinstance(X, torch.Tensor) else torch.as_tensor(np.asarray(X, dtype=np.float64))
    if t.ndim == 1:
        t = t[None]
    if t.ndim != 2 or t.shape[1] != dim:
        raise InputError(f"{name} must have shape (n, {dim}), got {tuple(t.shape)}")
    t = t.to(dtype)
    if not torch.isfinite(t).all():
        raise InputError(f"{name} contains NaN or infinite values")
    return t


class StreamingLDA:
    """A streaming LDA head over ``dim``-dimensional features; classes may appear at any time.

    >>> import numpy as np
    >>> h = StreamingLDA(2, cov_update="exact")
    >>> h.partial_fit(np.array([[0.0, 0.0], [0.2, 0.0], [3.0, 3.0], [3.2, 3.0]]), [5, 5, 9, 9])
    >>> h.predict(np.array([[0.1, 0.1], [2.9, 3.1]])).tolist()
    [5, 9]
    """

    def __init__(self, dim: int, *, shrinkage: float = 1e-4, cov_update: str = "hayes_kanan") -> None:
        self.dim = check_int("dim", dim, low=1)
        self.shrinkage = check_number("shrinkage", shrinkage, low=0, high=1)
        self.cov_update = check_choice("cov_update", cov_update, COV_UPDATES)
        self.dtype = torch.float64
        self.classes_: list[int] = []
        self._index: dict[int, int] = {}
        self._means = torch.zeros(0, dim, dtype=self.dtype)
        self._counts = torch.zeros(0, dtype=self.dtype)
        self._S = torch.zeros(dim, dim, dtype=self.dtype)
        self.n_seen = 0
        self._cache: tuple[torch.Tensor, torch.Tensor] | None = None
        self._blocked = dim >= 2 * SYRK_BLOCK  # lower-block-triangle updates; upper mirrored on read
        self._stale_upper = False

    # ---- state ---------------------------------------------------------------------------------------
    @property
    def means_(self) -> np.ndarray:
        return self._means.numpy().copy()

    @property
    def counts_(self) -> np.ndarray:
        return self._counts.numpy().astype(np.int64)

    def _scatter(self) -> torch.Tensor:
        """The full symmetric S (mirrors the upper blocks if lower-triangular updates left them stale)."""
        if self._stale_upper:
            mirror_lower_(self._S)
            self._stale_upper = False
        return self._S

    @property
    def covariance_(self) -> np.ndarray:
        """Σ = S/t (zeros before the first sample)."""
        return (self._scatter() / max(self.n_seen, 1)).numpy().copy()

    def _add_classes(self, labels: np.ndarray) -> torch.Tensor:
        new = [int(c) for c in dict.fromkeys(labels.tolist()) if int(c) not in self._index]
        if new:
            for c in new:
                self._index[c] = len(self.classes_)
                self.classes_.append(c)
            self._means = torch.cat([self._means, torch.zeros(len(new), self.dim, dtype=self.dtype)])
            self._counts = torch.cat([self._counts, torch.zeros(len(new), dtype=self.dtype)])
        return torch.tensor([self._index[int(c)] for c in labels], dtype=torch.long)

    # ---- updates -------------------------------------------------------------------------------------
    def partial_fit(self, X, y) -> None:
        """Update with the rows of ``X`` (``(n, dim)`` or ``(dim,)``) in order, labels ``y``."""
        x = _as_matrix(X, self.dim, self.dtype)
        labels = as_labels(y, len(x))
        for i in range(0, len(x), 1024):  # bounded prefix sums keep the float64 error at ~1e-15
            self._update(x[i : i + 1024], labels[i : i + 1024])
        self._cache = None

    def _update(self, x: torch.Tensor, labels: np.ndarray) -> None:
        n = len(x)
        idx = self._add_classes(labels)
        if n == 1:  # the recurrence itself, without the batch bookkeeping
            k = int(idx[0])
            c = float(self._counts[k])
            delta = x[0] - self._means[k]
            w = c / (c + 1) if self.cov_update == "exact" else self.n_seen / (self.n_seen + 1)
            if self._blocked:
                syrk_lower_(self._S, delta[None], w * delta[None])
                self._stale_upper = True
            else:
                self._S.addr_(delta, delta, alpha=w)
            self._means[k] += delta / (c + 1)
            self._counts[k] += 1
            self.n_seen += 1
            return
        order = torch.argsort(idx, stable=True)
        xs, ys = x[order], idx[order]
        _, seg_counts = torch.unique_consecutive(ys, return_counts=True)
        seg_start = torch.repeat_interleave(torch.cumsum(seg_counts, 0) - seg_counts, seg_counts)
        csum = torch.cumsum(xs, 0) - xs  # exclusive prefix sums over the sorted rows
        prior_sum = csum - csum[seg_start]  # earlier rows of the same class within this batch
        prior_cnt = (torch.arange(n) - seg_start).to(self.dtype)
        n0 = self._counts[ys]
        c_old = n0 + prior_cnt
        mean_old = (n0[:, None] * self._means[ys] + prior_sum) / c_old.clamp(min=1)[:, None]
        delta = xs - mean_old
        if self.cov_update == "exact":
            w = c_old / (c_old + 1)
        else:
            t_before = (self.n_seen + order).to(self.dtype)  # global position of each row
            w = t_before / (t_before + 1)
        if self._blocked:
            syrk_lower_(self._S, delta, delta * w[:, None])
            self._stale_upper = True
        else:
            self._S.addmm_((delta * w[:, None]).T, delta)
        sums = torch.zeros_like(self._means).index_add_(0, ys, xs)
        add = torch.zeros_like(self._counts).index_add_(0, ys, torch.ones(n, dtype=self.dtype))
        touched = add > 0
        new_counts = self._counts + add
        self._means[touched] = (
            self._counts[touched, None] * self._means[touched] + sums[touched]
        ) / new_counts[touched, None]
        self._counts = new_counts
        self.n_seen += n

    # ---- prediction ----------------------------------------------------------------------------------
    def _weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.n_seen == 0:
            raise InputError("the SLDA head has seen no samples yet; call partial_fit first")
        if self._cache is None:
            eps = self.shrinkage
            A = (1 - eps) * self._scatter() / self.n_seen + eps * torch.eye(self.dim, dtype=self.dtype)
            M = self._means.T  # (dim, K)
            L, info = torch.linalg.cholesky_ex(A)
            if int(info) == 0:
                W = torch.cholesky_solve(M, L)
            else:  # only when shrinkage = 0 and Σ is singular
                W = torch.linalg.pinv(A, hermitian=True) @ M
            b = -0.5 * (M * W).sum(0)
            self._cache = (W, b)
        return self._cache

    def decision_function(self, X) -> torch.Tensor:
        """Linear scores ``(n, n_classes)`` in the order of ``classes_`` (float64)."""
        W, b = self._weights()
        return _as_matrix(X, self.dim, self.dtype) @ W + b

    def predict_proba(self, X) -> torch.Tensor:
        """Softmax of the scores (temperature 1), ``(n, n_classes)``."""
        return torch.softmax(self.decision_function(X), dim=1)

    def predict(self, X) -> np.ndarray:
        s = self.decision_function(X)
        return np.asarray(self.classes_, dtype=np.int64)[s.argmax(1).numpy()]
