"""ROCKET's single-step sparse factorization of one layer (float64 torch), and its per-layer profile.

A layer ``y = x W`` (``W``: d1 inputs × d2 outputs, the transposed torch weight) with calibration Gram
``C = XᵀX/N`` is whitened by ``S = chol(C)ᵀ`` so that ``‖X(W − W′)‖_F = √N‖S(W − W′)‖_F``. The
factorization ``W ≈ A B`` keeps ``A`` (d1 × k) dense and ``B`` (k × d2) with ``nnz`` non-zeros per column:

1. dictionary initialisation: the top-k left singular vectors ``U_k`` of ``X̃ = S W`` (the top-k
   eigenvectors of ``X̃X̃ᵀ``) and coefficients ``V = U_kᵀ X̃``;
2. activation–weight sensitivity: ``score_ij = |V_ij|^λ (|V_ij|·‖(S⁻¹U_k)_{:,i}‖)^{1−λ}`` (the geometric
   mean of the activation and weight importances); each column keeps its best ``nnz − r`` entries, then the
   ``d2·r`` zeroed entries with the largest weight importance come back (``r = ⌊recover·k⌋``), so the
   total stays ``d2·nnz``;
3. closed-form dictionary update ``U* = X̃V_sᵀ(V_sV_sᵀ + εI)⁻¹`` (Cholesky solve), kept only when it does
   not increase the whitened error;
4. map back: ``A = S⁻¹U*``, ``B = V_s``.

The slow oracle is :func:`rocket_compress.reference.sparse_factorize_ref`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from papershelf.errors import InputError, check_number

DEFAULT_RATIOS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
DEFAULT_KS = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0)


def whiten(C: torch.Tensor, jitter: float = 7e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """``(S, S⁻¹)`` with ``S`` upper triangular and ``SᵀS = C`` (float64).

    When ``C`` is not positive definite, ``(max(0, −λ_min) + jitter·mean(diag C))·I`` is added first
    (the paper adds ``(−λ_min + 7e-6)·I``; the jitter here is relative to the Gram's scale).
    """
    C = torch.as_tensor(C).to(torch.float64)
    if C.ndim != 2 or C.shape[0] != C.shape[1]:
        raise InputError(f"C must be a square Gram matrix, got shape {tuple(C.shape)}")
    if not torch.isfinite(C).all():
        raise InputError("C (the calibration Gram) contains NaN or infinity")
    C = 0.5 * (C + C.T)
    L, info = torch.linalg.cholesky_ex(C)
    if int(info) != 0:
        lam = float(torch.linalg.eigvalsh(C)[0])
        shift = max(0.0, -lam) + jitter * max(float(C.diagonal().mean()), 1e-30)
        L = torch.linalg.cholesky(C + shift * torch.eye(len(C), dtype=C.dtype))
    S = L.T.contiguous()
    eye = torch.eye(len(C), dtype=C.dtype)
    S_inv = torch.linalg.solve_triangular(S, eye, upper=True)
    return S, S_inv


def rank_and_sparsity(ratio: float, d1: int, d2: int, ks: float) -> tuple[int, int]:
    """Rank ``k`` and non-zeros per column ``nnz`` of ``B`` for compression ``ratio`` and ``ks = k / nnz``.

    ``k = ⌊(1−ratio)·d1·d2 / (d1 + d2/ks)⌋``; ``nnz`` is the largest integer ≤ k with
    ``d1·k + d2·nnz ≤ (1−ratio)·d1·d2``, so the parameter count never exceeds the budget and misses it by
    less than ``d1 + d2``. Raises :class:`InputError` when the layer is too small for the ratio (k or nnz
    would be 0) or when ``k`` exceeds ``min(d1, d2)``.

    >>> rank_and_sparsity(0.3, 256, 256, 1.0)
    (89, 89)
    >>> rank_and_sparsity(0.3, 256, 256, 2.0)
    (119, 60)
    """
    check_number("ratio", ratio, low=0, high=1, low_open=True, high_open=True)
    check_number("ks", ks, low=1)
    budget = (1.0 - ratio) * d1 * d2
    k = math.floor(budget / (d1 + d2 / ks) + 1e-9)
    nnz = min(k, math.floor((budget - d1 * k) / d2 + 1e-9))
    if k < 1 or nnz < 1:
        raise InputError(
            f"a {d1}×{d2} layer is too small to compress at ratio {ratio:g} with ks {ks:g} "
            f"(rank {k}, {nnz} non-zeros per column)"
        )
    if k > min(d1, d2):
        raise InputError(f"ks {ks:g} gives rank {k} > min(d1, d2) = {min(d1, d2)} for a {d1}×{d2} layer")
    return k, nnz


def recover_count(k: int, nnz: int, recover: float) -> int:
    """Entries per column handed to the global re-admission step (0 when B is dense)."""
    if nnz >= k:
        return 0
    return max(0, min(math.floor(recover * k), nnz - 1))


@dataclass
class Factorization:
    """``W ≈ A @ B``: ``A`` (d1 × k) dense, ``B`` (k × d2) with ``mask`` its non-zero pattern (float64).

    ``rel_error`` is the relative whitened error ‖S(W − AB)‖_F / ‖SW‖_F; ``params`` counts A's entries
    and B's non-zeros (index storage excluded: see :attr:`index_entries`). A dense layer (ratio 0) has
    ``A = W``, ``B = None``.
    """

    A: torch.Tensor
    B: torch.Tensor | None
    mask: torch.Tensor | None
    ratio: float
    ks: float | None
    k: int | None
    nnz: int | None
    rel_error: float
    params: int
    extra: dict = field(default_factory=dict)

    @property
    def dense(self) -> bool:
        return self.B is None

    @property
    def index_entries(self) -> int:
        """Row indices stored for B's non-zeros (0 for a dense B or a dense layer)."""
        if self.B is None or self.nnz == self.k:
            return 0
        return int(self.mask.sum())

    def weight(self) -> torch.Tensor:
        """The approximation of W (d1 × d2)."""
        return self.A if self.B is None else self.A @ self.B


class LayerProblem:
    """One layer prepared for factorization: X̃ = SW and its SVD, computed once and shared by every option."""

    def __init__(self, W: torch.Tensor, S: torch.Tensor, S_inv: torch.Tensor) -> None:
        W = torch.as_tensor(W).to(torch.float64)
        if W.ndim != 2:
            raise InputError(f"W must be a matrix (d1 inputs × d2 outputs), got shape {tuple(W.shape)}")
        if S.shape != (W.shape[0], W.shape[0]) or S_inv.shape != S.shape:
            raise InputError(f"S must be {W.shape[0]}×{W.shape[0]} for W of shape {tuple(W.shape)}")
        if not torch.isfinite(W).all():
            raise InputError("W contains NaN or infinity")
        self.W = W
        self.S = S.to(torch.float64)
        self.S_inv = S_inv.to(torch.float64)
        self.d1, self.d2 = W.shape
        self.Xt = self.S @ W
        U, sig, Vh = torch.linalg.svd(self.Xt, full_matrices=False)
        self.U, self.sig, self.Vh = U, sig, Vh
        self.norm2 = float((sig**2).sum())
        self.atom_norm = (self.S_inv @ U).norm(dim=0)  # ‖(S⁻¹U)_{:,i}‖

    def factorize(
        self,
        k: int,
        nnz: int,
        *,
        lam: float = 0.5,
        recover: float = 0.005,
        eps: float | None = None,
        ratio: float = float("nan"),
        ks: float | None = None,
        build: bool = True,
    ) -> Factorization:
        """The ROCKET step at rank ``k`` with ``nnz`` non-zeros per column (see the module docstring)."""
        if not 1 <= nnz <= k <= min(self.d1, self.d2):
            raise InputError(f"need 1 <= nnz <= k <= {min(self.d1, self.d2)}, got k={k}, nnz={nnz}")
        Uk = self.U[:, :k]
        V = self.sig[:k, None] * self.Vh[:k]  # = U_kᵀ X̃
        if nnz == k:
            mask = None
            Vs = V
        else:
            absV = V.abs()
            imp_w = absV * self.atom_norm[:k, None]
            score = absV * self.atom_norm[:k, None] ** (1.0 - lam)
            r = recover_count(k, nnz, recover)
            top = score.topk(nnz - r, dim=0).indices
            mask = torch.zeros(k, self.d2, dtype=torch.bool)
            mask.scatter_(0, top, True)
            if r:
                flat = imp_w.masked_fill(mask, -1.0).flatten()
                back = flat.topk(self.d2 * r).indices
                mask.view(-1)[back] = True
            Vs = V * mask
        G = Vs @ Vs.T
        M = self.Xt @ Vs.T  # d1 × k
        init_err2 = self.norm2 - 2.0 * float((Uk * M).sum()) + float(G.diagonal().sum())
        e = max(1e-6, 1e-3 * float(G.diagonal().sum()) / k) if eps is None else float(eps)
        Ls, info = torch.linalg.cholesky_ex(G + e * torch.eye(k, dtype=G.dtype))
        U = Uk
        err2 = init_err2
        if int(info) == 0:
            cand = torch.cholesky_solve(M.T, Ls).T
            cand_err2 = self.norm2 - 2.0 * float((cand * M).sum()) + float(((cand.T @ cand) * G).sum())
            if cand_err2 <= init_err2:
                U, err2 = cand, cand_err2
        rel = math.sqrt(max(err2, 0.0) / self.norm2) if self.norm2 > 0 else 0.0
        params = self.d1 * k + self.d2 * nnz
        A = self.S_inv @ U if build else U
        return Factorization(A, Vs, mask, ratio, ks, k, nnz, rel, params, {"ls_applied": U is not Uk})

    def factorize_ratio(self, ratio: float, ks: float = 1.0, **kwargs) -> Factorization:
        """The ROCKET step at compression ``ratio`` (0 keeps the layer dense and exact)."""
        if ratio == 0:
            return Factorization(self.W.clone(), None, None, 0.0, None, None, None, 0.0, self.d1 * self.d2)
        k, nnz = rank_and_sparsity(ratio, self.d1, self.d2, ks)
        return self.factorize(k, nnz, ratio=ratio, ks=ks, **kwargs)


def sparse_factorize(
    W: torch.Tensor,
    S: torch.Tensor,
    S_inv: torch.Tensor,
    ratio: float,
    ks: float = 1.0,
    *,
    lam: float = 0.5,
    recover: float = 0.005,
    eps: float | None = None,
) -> Factorization:
    """Factorize ``W`` (d1 × d2, float64) as ``A B`` at compression ``ratio`` ∈ [0, 1) and ``ks ≥ 1``."""
    check_number("ratio", ratio, low=0, high=1, high_open=True)
    return LayerProblem(W, S, S_inv).factorize_ratio(ratio, ks, lam=lam, recover=recover, eps=eps)


@dataclass(frozen=True)
class Option:
    """One profiled compression level of a layer."""

    ratio: float
    ks: float | None
    k: int | None
    nnz: int | None
    params: int
    rel_error: float


def profile_layer(
    problem: LayerProblem,
    ratios=DEFAULT_RATIOS,
    ks_grid=DEFAULT_KS,
    *,
    lam: float = 0.5,
    recover: float = 0.005,
    include_dense: bool = True,
) -> list[Option]:
    """Relative whitened error of every feasible (ratio, ks) of one layer (plus the dense option)."""
    options = [Option(0.0, None, None, None, problem.d1 * problem.d2, 0.0)] if include_dense else []
    seen: set[tuple[int, int]] = set()
    for ratio in ratios:
        for ks in ks_grid:
            try:
                k, nnz = rank_and_sparsity(ratio, problem.d1, problem.d2, ks)
            except InputError:
                continue
            if (k, nnz) in seen:
                continue
            seen.add((k, nnz))
            f = problem.factorize(k, nnz, lam=lam, recover=recover, ratio=ratio, ks=ks, build=False)
            options.append(Option(ratio, ks, k, nnz, f.params, f.rel_error))
    return options


def best_per_ratio(options: list[Option]) -> dict[float, Option]:
    """For each ratio, the profiled option with the smallest error (the paper keeps the best ks per ratio)."""
    best: dict[float, Option] = {}
    for o in options:
        if o.ratio not in best or o.rel_error < best[o.ratio].rel_error:
            best[o.ratio] = o
    return best
