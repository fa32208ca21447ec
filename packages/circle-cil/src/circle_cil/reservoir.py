"""The fixed BiRC2D-style reservoir feature extractor, vectorised over images, sequences and reservoirs.

An image ``(C, H, W)`` is cut into non-overlapping ``p×p`` patches, giving a grid of ``Nh×Nw`` positions
with inputs ``u ∈ R^{C·p·p}``. Four leaky echo-state reservoirs, each with ``units/4`` neurons and its own
seed, scan the grid as 1D sequences: → and ← along every row, ↓ and ↑ along every column. From
``h_0 = 0``,

    h̃_t = φ(u_t W_in + h_{t-1} W_rec),      h_t = (1 − a) h_{t-1} + a h̃_t,

with φ = leaky-ReLU(0.01) (or tanh). The four per-position states are concatenated into a
``(Nh, Nw, units)`` map, which is pooled into a vector. No weight is ever fit to data.

Stability by construction: φ is 1-Lipschitz with φ(0) = 0, so ``‖h_t‖ ≤ L‖h_{t-1}‖ + a‖u_t W_in‖`` with
``L = 1 − a + a‖W_rec‖₂``. ``rescale="spectral_norm"`` sets ‖W_rec‖₂ = ρ < 1, so L < 1 and the states are
bounded by ``a·c/(1 − L)`` for any sequence length; the default ``"spectral_radius"`` (as in BiRC2D) sets
the spectral radius to ρ, and the bound ``a·c·Σ_{k<T} L^k`` holds on the finite scans (T = Nw or Nh).
:meth:`BiRC2D.state_bound` returns that bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from papershelf.errors import InputError, check_choice, check_int, check_number

ACTIVATIONS = ("leaky_relu", "tanh")
POOLINGS = ("mean", "meanmax", "grid", "pyramid", "flatten")
RESCALES = ("spectral_radius", "spectral_norm")
LEAKY_SLOPE = 0.01
DIRECTIONS = ("right", "left", "down", "up")


def _seed_int(seed) -> int:
    if isinstance(seed, np.random.SeedSequence):
        return int(seed.generate_state(1)[0])
    return check_int("seed", seed, low=0)


@dataclass(frozen=True)
class ReservoirWeights:
    """The fixed weights of one directional reservoir (float64 numpy)."""

    W_in: np.ndarray  # (input_dim, q)
    W_rec: np.ndarray  # (q, q)


def make_reservoir(
    input_dim: int,
    units: int,
    *,
    spectral_radius: float,
    connectivity: float,
    input_scale: float,
    activation: str,
    rescale: str,
    rng: np.random.Generator,
) -> ReservoirWeights:
    """Draw one reservoir: Kaiming-uniform ``W_in``, Glorot-uniform ``W_rec`` masked to ``connectivity``,
    rescaled so that its spectral radius (or spectral norm) equals ``spectral_radius``."""
    gain2 = 2.0 / (1.0 + LEAKY_SLOPE**2) if activation == "leaky_relu" else 1.0
    bound_in = input_scale * math.sqrt(3.0 * gain2 / input_dim)
    W_in = rng.uniform(-bound_in, bound_in, size=(input_dim, units))
    bound_rec = math.sqrt(6.0 / (2 * units))
    for _ in range(1000):
        W = rng.uniform(-bound_rec, bound_rec, size=(units, units))
        W = W * (rng.random((units, units)) < connectivity)
        size = np.max(np.abs(np.linalg.eigvals(W))) if rescale == "spectral_radius" else np.linalg.norm(W, 2)
        if size > 1e-8:
            break
    else:  # pragma: no cover - practically unreachable: 1000 nilpotent masks in a row
        raise InputError("connectivity is too low to draw a reservoir with a non-zero spectrum")
    W_rec = W * (spectral_radius / size)
    return ReservoirWeights(W_in, W_rec)


def extract_patches(X: torch.Tensor, patch: int) -> torch.Tensor:
    """``(B, C, H, W)`` → ``(B, H/p, W/p, C·p·p)``; each patch flattened in (C, row, col) order."""
    B, C, H, W = X.shape
    p = patch
    t = X.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return t.reshape(B, H // p, W // p, C * p * p)


def _activation_(name: str):
    """The in-place activation φ."""
    if name == "tanh":
        return torch.tanh_
    return lambda z: F.leaky_relu_(z, LEAKY_SLOPE)


def _scan(U: torch.Tensor, W_rec: torch.Tensor, leak: float, act_) -> torch.Tensor:
    """Leaky ESN over axis 1: ``U`` (K, T, S, q) input drives, ``W_rec`` (K, q, q) → states (K, T, S, q)."""
    K, T, S, q = U.shape
    h = U.new_zeros(K, S, q)
    out = U.new_empty(K, T, S, q)
    for t in range(T):
        z = act_(torch.baddbmm(U[:, t], h, W_rec))
        h = h.mul(1.0 - leak).add_(z, alpha=leak)
        out[:, t] = h
    return out


def _scan_pooled(U: torch.Tensor, W_rec: torch.Tensor, leak: float, act_, ranges, want_max: bool):
    """The scan of :func:`_scan` for a (forward, backward) pair, accumulating pooled sums on the fly.

    ``U`` is (R, 2, T, S, q) with the backward half already reversed in time, so that step t of
    direction 1 sits at grid position T−1−t. Returns per-range sums (R, 2, len(ranges), S, q) over the
    grid positions of each range, and the running max (R, 2, S, q) or None. Nothing of size T is stored.
    """
    R, _, T, S, q = U.shape
    Uk = U.reshape(2 * R, T, S, q)
    acc = U.new_zeros(R, 2, len(ranges), S, q)
    mx = U.new_full((2 * R, S, q), -torch.inf) if want_max else None
    for t in range(T):
        if t == 0:  # h_0 = 0: no recurrent product, h_1 = a·φ(u_1)
            h = act_(Uk[:, 0].clone()).mul_(leak)
        else:
            z = act_(torch.baddbmm(Uk[:, t], h, W_rec))
            h = z.mul_(leak).add_(h, alpha=1.0 - leak)  # reuses z's buffer: one allocation per step
        hv = h.view(R, 2, S, q)
        for d, pos in ((0, t), (1, T - 1 - t)):
            for c, (lo, hi) in enumerate(ranges):
                if lo <= pos < hi:
                    acc[:, d, c] += hv[:, d]
        if mx is not None:
            torch.maximum(mx, h, out=mx)
    return acc, (None if mx is None else mx.view(R, 2, S, q))


def _input_drive(seqs: torch.Tensor, W_in: torch.Tensor) -> torch.Tensor:
    """Input drives ``(R, 2, T, B, S, q)`` of a (forward, backward) direction pair: ``seqs`` (B, S, T, P)
    times ``W_in`` (R, 2, P, q), with the backward direction's sequences reversed in time. One batched
    matmul over both directions (the tiny inputs are flipped, not the drives)."""
    B, S, T, P = seqs.shape
    R, _, _, q = W_in.shape
    inp = torch.stack([seqs, seqs.flip(2)]).reshape(2, B * S * T, P)
    W = W_in.permute(1, 2, 0, 3).reshape(2, P, R * q)
    U = torch.bmm(inp, W).view(2, B, S, T, R, q)
    return U.permute(4, 0, 3, 1, 2, 5).contiguous()


def _cells(n: int) -> list[tuple[int, int]]:
    """The two index ranges of adaptive average pooling from n to 2 positions."""
    return [((a * n) // 2, -((-(a + 1) * n) // 2)) for a in range(2)]


def _pool_blocks(maps: torch.Tensor, pooling: str) -> torch.Tensor:
    """``(..., Nh, Nw, D)`` (any strides) → ``(..., factor, D)``."""
    Nh, Nw, D = maps.shape[-3:]
    if pooling == "flatten":
        return maps.reshape(*maps.shape[:-3], Nh * Nw, D)
    blocks = []
    if pooling in ("mean", "meanmax", "pyramid"):
        blocks.append(maps.mean(dim=(-3, -2)))
    if pooling == "meanmax":
        blocks.append(maps.amax(dim=(-3, -2)))
    if pooling in ("grid", "pyramid"):
        for r0, r1 in _cells(Nh):
            for c0, c1 in _cells(Nw):
                blocks.append(maps[..., r0:r1, c0:c1, :].mean(dim=(-3, -2)))
    if not blocks:
        raise InputError(f"pooling must be one of {', '.join(POOLINGS)}; got {pooling!r}")
    return torch.stack(blocks, dim=-2)


def pool_map(maps: torch.Tensor, pooling: str) -> torch.Tensor:
    """Pool state maps ``(..., Nh, Nw, D)`` into vectors ``(..., F)``.

    ``mean`` (D), ``meanmax`` (2D: mean and max), ``grid`` (4D: 2×2 average pooling), ``pyramid`` (5D:
    mean then the 2×2 grid), ``flatten`` (Nh·Nw·D, row-major positions).
    """
    b = _pool_blocks(maps, pooling)
    return b.reshape(*b.shape[:-2], -1)


def pooled_dim(pooling: str, units: int, grid: tuple[int, int]) -> int:
    factor = {"mean": 1, "meanmax": 2, "grid": 4, "pyramid": 5}.get(pooling)
    return units * (grid[0] * grid[1] if factor is None else factor)


def as_images(X, name: str = "X") -> torch.Tensor:
    """Validate images: ``(N, C, H, W)``, ``(N, H, W)`` (one channel) as numpy or torch, finite."""
    if isinstance(X, torch.Tensor):
        t = X.detach()
    else:
        try:
            arr = np.asarray(X)
        except (TypeError, ValueError) as exc:
            raise InputError(f"{name} must be an array of images, got {type(X).__name__}") from exc
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
            raise InputError(f"{name} must be a numeric array of images, got dtype {arr.dtype}")
        t = torch.from_numpy(np.ascontiguousarray(arr))
    if t.is_complex():
        raise InputError(f"{name} must be real-valued")
    if t.ndim == 3:
        t = t[:, None]
    if t.ndim != 4:
        raise InputError(f"{name} must have shape (N, C, H, W) or (N, H, W), got {tuple(t.shape)}")
    if t.shape[0] == 0:
        raise InputError(f"{name} is empty (0 images)")
    if t.dtype not in (torch.float32, torch.float64):
        t = t.to(torch.float32)
    if not torch.isfinite(t).all():
        raise InputError(f"{name} contains NaN or infinite pixels")
    return t


class BiRC2D:
    """One fixed bidirectional 2D reservoir (four directional leaky ESNs over a patch grid).

    Parameters are stored verbatim; weights are drawn from ``seed`` at construction (float64 numpy, so
    they are identical on every platform) and cast to ``dtype`` for the forward pass.

    >>> import torch
    >>> r = BiRC2D(in_channels=1, image_size=8, patch=2, units=16, seed=0)
    >>> r(torch.rand(3, 1, 8, 8)).shape      # pyramid pooling: (1 + 2·2)·16
    torch.Size([3, 80])
    """

    def __init__(
        self,
        in_channels: int = 1,
        image_size: int | tuple[int, int] = 32,
        *,
        patch: int = 4,
        units: int = 64,
        leak: float = 0.9,
        spectral_radius: float = 0.95,
        connectivity: float = 0.1,
        input_scale: float = 1.0,
        activation: str = "leaky_relu",
        rescale: str = "spectral_radius",
        pooling: str = "pyramid",
        seed: int | np.random.SeedSequence = 0,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.in_channels = check_int("in_channels", in_channels, low=1)
        hw = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        if len(hw) != 2:
            raise InputError(f"image_size must be an int or (H, W), got {image_size!r}")
        self.image_size = (check_int("image_size", hw[0], low=1), check_int("image_size", hw[1], low=1))
        self.patch = check_int("patch", patch, low=1)
        if self.image_size[0] % self.patch or self.image_size[1] % self.patch:
            raise InputError(f"image_size {self.image_size} must be divisible by patch={self.patch}")
        self.units = check_int("units", units, low=4)
        if self.units % 4:
            raise InputError(f"units must be divisible by 4 (one quarter per direction), got {units}")
        self.leak = check_number("leak", leak, low=0, high=1, low_open=True)
        self.spectral_radius = check_number("spectral_radius", spectral_radius, low=0, high=1, high_open=True)
        self.connectivity = check_number("connectivity", connectivity, low=0, high=1, low_open=True)
        self.input_scale = check_number("input_scale", input_scale, low=0, low_open=True)
        self.activation = check_choice("activation", activation, ACTIVATIONS)
        self.rescale = check_choice("rescale", rescale, RESCALES)
        self.pooling = check_choice("pooling", pooling, POOLINGS)
        self.dtype = dtype
        self.seed = seed
        ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(_seed_int(seed))
        q = self.units // 4
        self.weights = [
            make_reservoir(
                self.input_dim,
                q,
                spectral_radius=self.spectral_radius,
                connectivity=self.connectivity,
                input_scale=self.input_scale,
                activation=self.activation,
                rescale=self.rescale,
                rng=np.random.default_rng(child),
            )
            for child in (np.random.SeedSequence(ss.entropy, spawn_key=(*ss.spawn_key, k)) for k in range(4))
        ]  # the children ss.spawn(4) would give, without mutating a SeedSequence passed in

    @property
    def input_dim(self) -> int:
        return self.in_channels * self.patch * self.patch

    @property
    def grid(self) -> tuple[int, int]:
        return (self.image_size[0] // self.patch, self.image_size[1] // self.patch)

    @property
    def out_dim(self) -> int:
        return pooled_dim(self.pooling, self.units, self.grid)

    def state_bound(self, input_norm: float) -> float:
        """An upper bound on ‖h_t‖₂ of every directional state, for patch inputs with ‖u‖₂ ≤ input_norm."""
        a = self.leak
        bound = 0.0
        for w, T in zip(self.weights, (self.grid[1], self.grid[1], self.grid[0], self.grid[0])):
            c = np.linalg.norm(w.W_in, 2) * input_norm
            L = 1.0 - a + a * np.linalg.norm(w.W_rec, 2)
            bound = max(bound, a * c * sum(L**k for k in range(T)))
        return float(bound)

    def check_images(self, X, name: str = "X") -> torch.Tensor:
        t = as_images(X, name)
        if t.shape[1] != self.in_channels or tuple(t.shape[2:]) != self.image_size:
            raise InputError(
                f"{name} has images of shape {tuple(t.shape[1:])}, but the extractor was built for "
                f"({self.in_channels}, {self.image_size[0]}, {self.image_size[1]})",
                hint="resize the images or build the model with matching in_channels/image_size",
            )
        return t

    def state_map(self, X) -> torch.Tensor:
        """The unpooled state map ``(B, Nh, Nw, units)``: quarters → ← ↓ ↑ in that order."""
        return ReservoirBank([self]).state_maps(X)[:, 0]

    def __call__(self, X) -> torch.Tensor:
        """Pooled features ``(B, out_dim)`` in ``self.dtype``."""
        return ReservoirBank([self]).features(X)[:, 0]


class ReservoirBank:
    """Several :class:`BiRC2D` run together: one batched scan for all reservoirs and directions."""

    def __init__(self, reservoirs: list[BiRC2D]) -> None:
        if not reservoirs:
            raise InputError("reservoirs must be a non-empty list")
        r0 = reservoirs[0]
        keys = ("in_channels", "image_size", "patch", "units", "leak", "activation", "pooling", "dtype")
        for r in reservoirs[1:]:
            if any(getattr(r, k) != getattr(r0, k) for k in keys):
                raise InputError(f"reservoirs in a bank must share {', '.join(keys)}")
        self.reservoirs = list(reservoirs)
        self.template = r0
        dt = r0.dtype
        # (R, 4, P, q) and (R, 4, q, q)
        self.W_in = torch.tensor(np.stack([[w.W_in for w in r.weights] for r in reservoirs]), dtype=dt)
        self.W_rec = torch.tensor(np.stack([[w.W_rec for w in r.weights] for r in reservoirs]), dtype=dt)
        self._act = _activation_(r0.activation)

    def _oriented(self, x: torch.Tensor):
        """Yield, for rows then columns, the states ``(R, 2, B, Nh, Nw, q)`` (views) of the two
        directions of that orientation, in grid order."""
        r0 = self.template
        B = x.shape[0]
        R, q = self.W_in.shape[0], r0.units // 4
        P = extract_patches(x.to(r0.dtype), r0.patch)  # (B, Nh, Nw, Pd)
        for orient, dirs in ((0, (0, 1)), (1, (2, 3))):
            seqs = P if orient == 0 else P.transpose(1, 2)  # (B, S1, T, Pd): sequences along axis 2
            U = torch.einsum("bstp,rdpq->rdtbsq", seqs, self.W_in[:, list(dirs)])  # (R, 2, T, B, S1, q)
            T = U.shape[2]
            U[:, 1] = U[:, 1].flip(1)  # the second direction scans backwards
            H = _scan(
                U.reshape(2 * R, T, -1, q), self.W_rec[:, list(dirs)].reshape(2 * R, q, q), r0.leak, self._act
            )
            H = H.reshape(R, 2, T, B, -1, q)
            H[:, 1] = H[:, 1].flip(1)
            # (R, 2, T, B, S1, q) → (R, 2, B, Nh, Nw, q) as a view
            yield H.permute(0, 1, 3, 2, 4, 5).transpose(3, 4) if orient == 0 else H.permute(0, 1, 3, 2, 4, 5)

    def state_maps(self, X) -> torch.Tensor:
        """``(B, R, Nh, Nw, units)`` state maps of every reservoir (quarters → ← ↓ ↑)."""
        x = self.template.check_images(X)
        h, v = self._oriented(x)
        m = torch.cat([h[:, 0], h[:, 1], v[:, 0], v[:, 1]], dim=-1)  # (R, B, Nh, Nw, 4q)
        return m.transpose(0, 1)

    def _pooled_chunk(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled features ``(B, R, out_dim)`` of one chunk without materialising the state maps."""
        r0 = self.template
        pooling = r0.pooling
        B = x.shape[0]
        R, q = self.W_in.shape[0], r0.units // 4
        P = extract_patches(x.to(r0.dtype), r0.patch)
        blocks_by_orient = []
        for orient, dirs in ((0, (0, 1)), (1, (2, 3))):
            seqs = P if orient == 0 else P.transpose(1, 2)  # (B, S1, T, Pd)
            S1, T = seqs.shape[1], seqs.shape[2]
            U = _input_drive(seqs, self.W_in[:, list(dirs)]).reshape(R, 2, T, B * S1, q)
            grid_cells = pooling in ("grid", "pyramid")
            ranges = ([(0, T)] if pooling != "grid" else []) + (_cells(T) if grid_cells else [])
            acc, mx = _scan_pooled(
                U,
                self.W_rec[:, list(dirs)].reshape(2 * R, q, q),
                r0.leak,
                self._act,
                ranges,
                pooling == "meanmax",
            )
            acc = acc.view(R, 2, len(ranges), B, S1, q)
            blocks = []
            k = 0
            if pooling != "grid":
                blocks.append(acc[:, :, 0].sum(3) / (T * S1))
                k = 1
            if pooling == "meanmax":
                blocks.append(mx.view(R, 2, B, S1, q).amax(3))  # type: ignore[union-attr]
            if grid_cells:
                tc, sc = _cells(T), _cells(S1)
                for a in range(2):  # grid rows
                    for b in range(2):  # grid columns
                        it, js = (b, a) if orient == 0 else (a, b)  # rows scan along columns (T = Nw)
                        lo, hi = sc[js]
                        cnt = (tc[it][1] - tc[it][0]) * (hi - lo)
                        blocks.append(acc[:, :, k + it, :, lo:hi].sum(3) / cnt)
            blocks_by_orient.append(torch.stack(blocks, dim=-2))  # (R, 2, B, f, q)
        b = torch.cat(blocks_by_orient, dim=1)  # (R, 4, B, f, q)
        return b.permute(2, 0, 3, 1, 4).reshape(B, R, -1)

    def features(self, X, *, chunk: int = 64) -> torch.Tensor:
        """Pooled features ``(B, R, out_dim)``, computed ``chunk`` images at a time."""
        x = self.template.check_images(X)
        pooling = self.template.pooling
        pieces = []
        for i in range(0, len(x), chunk):
            if pooling == "flatten":
                blocks = [_pool_blocks(o, pooling) for o in self._oriented(x[i : i + chunk])]
                b = torch.cat([blocks[0], blocks[1]], dim=1)  # (R, 4, B, f, q)
                pieces.append(b.permute(2, 0, 3, 1, 4).reshape(b.shape[2], b.shape[0], -1))
            else:
                pieces.append(self._pooled_chunk(x[i : i + chunk]))
        return torch.cat(pieces, 0)
