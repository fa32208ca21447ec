"""Drop-in vector quantizers with one interface: ``quantized, indices, loss = q(z)``.

Every quantizer takes ``z`` of shape ``(..., dim)`` (float32 or float64) and returns a
:class:`QuantizeOutput` (a named tuple, so it unpacks like ``vector-quantize-pytorch``'s):

- ``quantized``: ``(..., dim)``, equal in value to the selected code, with gradients reaching ``z`` by the
  straight-through estimator (``z + sg[c - z]``) or by the rotation trick;
- ``indices``: ``(...)`` int64 code indices;
- ``loss``: scalar, the codebook term plus the β-weighted commitment term (zero for FSQ).

Quantizers:

- :class:`AdaptiveScaleVQ` (ASVQ): codes ``c_k = s ⊙ u_k`` with a frozen random basis ``u`` and a learned
  per-dimension scale ``s`` (the default; other scale modes are options, see the class).
- :class:`VectorQuantizer`: plain VQ-VAE, a learned ``(K, d)`` codebook.
- :class:`EMAVectorQuantizer`: the codebook follows exponential moving averages of its assigned vectors.
- :class:`SimVQ`: codes ``c_k = W u_k + b`` with a frozen basis and a learned ``Linear(d, d)``.
- :class:`FSQ`: finite scalar quantization (no codebook parameters, no auxiliary loss).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

from asvq.search import DEFAULT_CHUNK, nearest_code
from papershelf.errors import InputError, check_choice, check_int, check_number


def _flag(name: str, value: object) -> bool:
    """A boolean option; ``bool("no")`` would be True, so only real booleans pass."""
    if not isinstance(value, bool):
        raise InputError(f"{name} must be True or False, got {value!r}")
    return value


def _generator(seed: int | None) -> torch.Generator | None:
    """A CPU generator for ``seed`` (an integer in [0, 2**63 − 1]; None: torch's global RNG)."""
    return (
        None
        if seed is None
        else torch.Generator().manual_seed(check_int("seed", seed, low=0, high=2**63 - 1))
    )


def _check_indices(indices: object, codebook_size: int) -> torch.Tensor:
    if not isinstance(indices, torch.Tensor) or indices.dtype not in (torch.int64, torch.int32):
        raise InputError(
            f"indices must be an integer tensor, got {getattr(indices, 'dtype', type(indices).__name__)}"
        )
    if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= codebook_size):
        raise InputError(f"indices must lie in [0, {codebook_size - 1}]")
    return indices.long()


class QuantizeOutput(NamedTuple):
    """What every quantizer returns."""

    quantized: torch.Tensor
    indices: torch.Tensor
    loss: torch.Tensor


def check_latents(z: torch.Tensor, dim: int, name: str = "z") -> None:
    """Raise :class:`InputError` unless ``z`` is a finite floating tensor whose last axis is ``dim``."""
    if not isinstance(z, torch.Tensor):
        raise InputError(f"{name} must be a torch.Tensor, got {type(z).__name__}")
    if not z.is_floating_point():
        raise InputError(f"{name} must be a floating-point tensor, got dtype {z.dtype}")
    if z.ndim < 1 or z.shape[-1] != dim:
        raise InputError(
            f"{name} has last dimension {z.shape[-1] if z.ndim else 'none'} but the quantizer has dim={dim}; "
            f"expected shape (..., {dim})"
        )
    if z.numel() and not bool(torch.isfinite(z).all()):
        raise InputError(f"{name} contains NaN or infinite values")


def rotate_to(z: torch.Tensor, c: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """The rotation trick (Fifty et al., 2024): ``sg[λ R] z`` with ``R`` rotating ``z/|z|`` onto ``c/|c|``.

    ``R = I - 2 r rᵀ + 2 ĉ ẑᵀ`` with ``r = (ẑ + ĉ)/|ẑ + ĉ|`` and ``λ = |c|/|z|``, both treated as constants,
    so the output equals ``c`` in value and the gradient reaching ``z`` is ``λ Rᵀ g``.
    """
    with torch.no_grad():
        zn = z.norm(dim=-1, keepdim=True).clamp_min(eps)
        cn = c.norm(dim=-1, keepdim=True).clamp_min(eps)
        zh = z / zn
        ch = c / cn
        r = zh + ch
        r = r / r.norm(dim=-1, keepdim=True).clamp_min(eps)
        lam = cn / zn
    zr = z - 2.0 * r * (r * z).sum(-1, keepdim=True) + 2.0 * ch * (zh * z).sum(-1, keepdim=True)
    return lam * zr


def gaussian_basis(codebook_size: int, dim: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``(K, d)`` draws from N(0, 1/d), SimVQ's frozen basis."""
    return torch.randn(codebook_size, dim, generator=generator) / math.sqrt(dim)


def kmeans(
    x: torch.Tensor, k: int, iters: int = 10, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Lloyd's k-means on ``x`` (N, d) with ``k`` centres seeded by distinct samples (with replacement if
    N < k); empty clusters keep their previous centre."""
    n = x.shape[0]
    if n >= k:
        pick = torch.randperm(n, generator=generator)[:k]
    else:
        pick = torch.randint(n, (k,), generator=generator)
    centres = x[pick].clone()
    for _ in range(iters):
        idx = nearest_code(x, centres)
        sums = torch.zeros_like(centres).index_add_(0, idx, x)
        counts = torch.bincount(idx, minlength=k).to(x.dtype)
        used = counts > 0
        centres[used] = sums[used] / counts[used, None]
    return centres


class _CodebookQuantizer(nn.Module):
    """Nearest-code quantization against ``self.codes()``, the STE or rotation trick, and the VQ loss."""

    has_codebook_loss = True  # EMA VQ sets this False: its codebook follows moving averages instead

    def __init__(
        self,
        dim: int,
        codebook_size: int,
        *,
        beta: float = 0.25,
        rotation_trick: bool = False,
        legacy: bool = False,
        chunk_size: int = DEFAULT_CHUNK,
    ) -> None:
        super().__init__()
        self.dim = check_int("dim", dim, low=1)
        self.codebook_size = check_int("codebook_size", codebook_size, low=2)
        self.beta = check_number("beta", beta, low=0)
        self.rotation_trick = _flag("rotation_trick", rotation_trick)
        self.legacy = _flag("legacy", legacy)
        self.chunk_size = check_int("chunk_size", chunk_size, low=1)

    def codes(self) -> torch.Tensor:
        """The effective ``(K, dim)`` codebook (differentiable in the learned parameters)."""
        raise NotImplementedError

    @property
    def codebook(self) -> torch.Tensor:
        """The effective codebook, detached."""
        return self.codes().detach()

    def num_quantizer_params(self) -> int:
        """Trainable parameters of the quantizer (what the codebook costs to learn)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def _before(self, flat: torch.Tensor) -> None:
        """Hook before the search (data-dependent initialisation)."""

    def _after(self, flat: torch.Tensor, idx: torch.Tensor) -> None:
        """Hook after the search in training mode (EMA updates)."""

    def encode(self, z: torch.Tensor) -> torch.Tensor:
        """Indices of the nearest codes, shape ``z.shape[:-1]``."""
        check_latents(z, self.dim)
        flat = z.reshape(-1, self.dim)
        codes = self.codebook.to(flat.dtype)
        return nearest_code(flat, codes, chunk_size=self.chunk_size).view(z.shape[:-1])

    def decode(self, indices: torch.Tensor) -> torch.Tensor:
        """Codes of ``indices`` (any shape), shape ``indices.shape + (dim,)``."""
        return self.codebook[_check_indices(indices, self.codebook_size)]

    def forward(self, z: torch.Tensor) -> QuantizeOutput:
        check_latents(z, self.dim)
        flat = z.reshape(-1, self.dim)
        if self.training:
            self._before(flat.detach())
        codes = self.codes().to(flat.dtype)
        idx = nearest_code(flat, codes.detach(), chunk_size=self.chunk_size)
        c = codes[idx]
        commit = torch.mean((flat - c.detach()) ** 2)
        if self.has_codebook_loss:
            cb = torch.mean((c - flat.detach()) ** 2)
            loss = commit + self.beta * cb if self.legacy else cb + self.beta * commit
        else:
            loss = self.beta * commit
        if self.training:
            self._after(flat.detach(), idx)
        if self.rotation_trick:
            q = rotate_to(flat, c.detach())
        else:
            q = flat + (c - flat).detach()
        return QuantizeOutput(q.view_as(z), idx.view(z.shape[:-1]), loss)


SCALE_MODES = ("per_dim", "per_code", "scalar", "ema_stats")


class AdaptiveScaleVQ(_CodebookQuantizer):
    """Adaptive-Scale VQ: a frozen random basis ``u`` (K, d) and a small learned scale.

    ``scale`` selects the reparameterisation (all reconstructed from the paper's abstract, see README):

    - ``"per_dim"`` (default, H1): ``c_k = s ⊙ u_k (+ t)``, ``s ∈ R^d`` learned (``t ∈ R^d`` too when
      ``offset=True``): SimVQ's ``W`` restricted to a diagonal; every code moves when any code is used.
    - ``"per_code"`` (H2): ``c_k = α_k u_k``, one learned magnitude per code (direction frozen).
    - ``"scalar"`` (H3): ``c_k = α u_k``, one learned number.
    - ``"ema_stats"`` (H4): ``c_k = μ + σ ⊙ (√d u_k)`` with ``μ, σ`` exponential moving averages of the
      per-dimension mean and std of the encoder outputs; nothing is learned by gradient.

    ``init="gaussian"`` draws ``u ~ N(0, 1/d)`` (SimVQ's basis); ``init="kmeans"`` sets ``u`` once from
    k-means of the first training batch. The basis is a buffer: it never receives gradients.

    >>> import torch
    >>> q = AdaptiveScaleVQ(dim=8, codebook_size=64, seed=0)
    >>> quantized, indices, loss = q(torch.randn(4, 10, 8))
    >>> tuple(quantized.shape), tuple(indices.shape), q.num_quantizer_params()
    ((4, 10, 8), (4, 10), 8)
    """

    def __init__(
        self,
        dim: int,
        codebook_size: int,
        *,
        scale: str = "per_dim",
        offset: bool = False,
        init: str = "gaussian",
        beta: float = 0.25,
        rotation_trick: bool = False,
        legacy: bool = False,
        scale_init: str = "ones",
        ema_decay: float = 0.99,
        std_floor: float = 1e-3,
        seed: int | None = None,
        chunk_size: int = DEFAULT_CHUNK,
    ) -> None:
        super().__init__(
            dim, codebook_size, beta=beta, rotation_trick=rotation_trick, legacy=legacy, chunk_size=chunk_size
        )
        self.scale_mode = check_choice("scale", scale, SCALE_MODES)
        self.scale_init = check_choice("scale_init", scale_init, ("ones", "data"))
        self.init = check_choice("init", init, ("gaussian", "kmeans"))
        self.offset = _flag("offset", offset)
        self.ema_decay = check_number("ema_decay", ema_decay, low=0, high=1, high_open=True)
        self.std_floor = check_number("std_floor", std_floor, low=0, low_open=True)
        gen = _generator(seed)
        self._gen = gen
        self.register_buffer("basis", gaussian_basis(self.codebook_size, self.dim, gen))
        self.register_buffer("initted", torch.tensor(self.init == "gaussian"))
        self.register_buffer("scale_initted", torch.tensor(self.scale_init == "ones"))
        if self.scale_mode == "per_dim":
            self.scale = nn.Parameter(torch.ones(self.dim))
        elif self.scale_mode == "per_code":
            self.scale = nn.Parameter(torch.ones(self.codebook_size))
        elif self.scale_mode == "scalar":
            self.scale = nn.Parameter(torch.ones(()))
        else:
            self.register_buffer("ema_mean", torch.zeros(self.dim))
            self.register_buffer("ema_std", torch.full((self.dim,), 1.0 / math.sqrt(self.dim)))
            self.register_buffer("stats_initted", torch.tensor(False))
        if self.offset and self.scale_mode != "ema_stats":
            self.shift = nn.Parameter(torch.zeros(self.dim))
        else:
            self.shift = None

    def codes(self) -> torch.Tensor:
        u = self.basis
        if self.scale_mode == "per_dim":
            c = u * self.scale
        elif self.scale_mode == "per_code":
            c = u * self.scale[:, None]
        elif self.scale_mode == "scalar":
            c = u * self.scale
        else:
            return self.ema_mean + self.ema_std * (math.sqrt(self.dim) * u)
        return c + self.shift if self.shift is not None else c

    def _before(self, flat: torch.Tensor) -> None:
        if not bool(self.initted):
            centres = kmeans(flat.float(), self.codebook_size, generator=self._gen)
            if self.scale_mode == "ema_stats":  # basis in standardised units
                centres = (centres - flat.mean(0)) / (
                    flat.std(0).clamp_min(self.std_floor) * math.sqrt(self.dim)
                )
            self.basis.copy_(centres.to(self.basis.dtype))
            self.initted.fill_(True)
        if not bool(self.scale_initted) and self.scale_mode != "ema_stats":
            self._init_scale_from(flat)
            self.scale_initted.fill_(True)
        if self.scale_mode == "ema_stats":
            mean = flat.mean(0).to(self.ema_mean.dtype)
            std = (flat.std(0) if flat.shape[0] > 1 else torch.zeros_like(mean)).to(self.ema_std.dtype)
            std = std.clamp_min(self.std_floor)
            if not bool(self.stats_initted):
                self.ema_mean.copy_(mean)
                self.ema_std.copy_(std)
                self.stats_initted.fill_(True)
            else:
                g = self.ema_decay
                self.ema_mean.mul_(g).add_((1 - g) * mean)
                self.ema_std.mul_(g).add_((1 - g) * std)

    @torch.no_grad()
    def _init_scale_from(self, flat: torch.Tensor) -> None:
        """``scale_init="data"``: match the codes' per-dimension spread (and mean) to the first batch."""
        mean = flat.mean(0)
        centred = flat - mean if self.shift is not None else flat
        rms = centred.pow(2).mean(0).sqrt().clamp_min(self.std_floor).to(self.basis.dtype)
        target = rms / self.basis.pow(2).mean(0).sqrt().clamp_min(1e-12)
        if self.scale_mode == "per_dim":
            self.scale.copy_(target)
        else:
            self.scale.fill_(float(target.mean()))
        if self.shift is not None:
            self.shift.copy_(mean.to(self.shift.dtype))


class VectorQuantizer(_CodebookQuantizer):
    """Plain VQ-VAE: a learned ``(K, d)`` codebook, codebook loss + β commitment, STE.

    ``init="gaussian"`` draws N(0, 1/d) (the same law as ASVQ's basis), ``"uniform"`` draws
    U(-1/K, 1/K) (the VQ-VAE / taming default), ``"kmeans"`` uses k-means of the first training batch.
    """

    def __init__(
        self,
        dim: int,
        codebook_size: int,
        *,
        init: str = "gaussian",
        beta: float = 0.25,
        rotation_trick: bool = False,
        legacy: bool = False,
        seed: int | None = None,
        chunk_size: int = DEFAULT_CHUNK,
    ) -> None:
        super().__init__(
            dim, codebook_size, beta=beta, rotation_trick=rotation_trick, legacy=legacy, chunk_size=chunk_size
        )
        self.init = check_choice("init", init, ("gaussian", "uniform", "kmeans"))
        gen = _generator(seed)
        self._gen = gen
        if self.init == "uniform":
            w = (torch.rand(self.codebook_size, self.dim, generator=gen) * 2 - 1) / self.codebook_size
        else:
            w = gaussian_basis(self.codebook_size, self.dim, gen)
        self.embedding = nn.Parameter(w)
        self.register_buffer("initted", torch.tensor(self.init != "kmeans"))

    def codes(self) -> torch.Tensor:
        return self.embedding

    def _before(self, flat: torch.Tensor) -> None:
        if not bool(self.initted):
            with torch.no_grad():
                self.embedding.copy_(kmeans(flat.float(), self.codebook_size, generator=self._gen))
            self.initted.fill_(True)


class EMAVectorQuantizer(_CodebookQuantizer):
    """VQ-VAE with an exponential-moving-average codebook (van den Oord et al., 2017, appendix).

    Per training batch with assignment counts ``n_k`` and sums ``S_k``:
    ``N_k ← γ N_k + (1-γ) n_k``, ``M_k ← γ M_k + (1-γ) S_k``, ``c_k = M_k / Ñ_k`` with Laplace smoothing
    ``Ñ_k = (N_k + ε) / (Σ N + K ε) · Σ N``. ``N`` starts at 1 and ``M`` at the initial codes, so an
    unused code decays towards its start instead of blowing up. The loss is the commitment term only.
    """

    has_codebook_loss = False

    def __init__(
        self,
        dim: int,
        codebook_size: int,
        *,
        decay: float = 0.99,
        eps: float = 1e-5,
        beta: float = 0.25,
        rotation_trick: bool = False,
        seed: int | None = None,
        chunk_size: int = DEFAULT_CHUNK,
    ) -> None:
        super().__init__(dim, codebook_size, beta=beta, rotation_trick=rotation_trick, chunk_size=chunk_size)
        self.decay = check_number("decay", decay, low=0, high=1, high_open=True)
        self.eps = check_number("eps", eps, low=0, low_open=True)
        gen = _generator(seed)
        w = gaussian_basis(self.codebook_size, self.dim, gen)
        self.register_buffer("embedding", w.clone())
        self.register_buffer("cluster_size", torch.ones(self.codebook_size))
        self.register_buffer("embed_sum", w.clone())

    def codes(self) -> torch.Tensor:
        return self.embedding

    def _after(self, flat: torch.Tensor, idx: torch.Tensor) -> None:
        g = self.decay
        counts = torch.bincount(idx, minlength=self.codebook_size).to(self.cluster_size.dtype)
        sums = torch.zeros_like(self.embed_sum).index_add_(0, idx, flat.to(self.embed_sum.dtype))
        self.cluster_size.mul_(g).add_((1 - g) * counts)
        self.embed_sum.mul_(g).add_((1 - g) * sums)
        total = self.cluster_size.sum()
        smoothed = (self.cluster_size + self.eps) / (total + self.codebook_size * self.eps) * total
        self.embedding.copy_(self.embed_sum / smoothed[:, None])


class SimVQ(_CodebookQuantizer):
    """SimVQ (Zhu et al., 2024/ICCV 2025): codes ``c_k = W u_k + b`` with a frozen basis ``u ~ N(0, 1/d)``
    and a learned ``Linear(d, d)`` (bias on by default, as in the official code).

    The official code uses the taming ``legacy=True`` weighting (β on the codebook term); pass
    ``legacy=True`` for that, the default here is the VQ-VAE weighting shared by every quantizer.
    """

    def __init__(
        self,
        dim: int,
        codebook_size: int,
        *,
        bias: bool = True,
        beta: float = 0.25,
        rotation_trick: bool = False,
        legacy: bool = False,
        seed: int | None = None,
        chunk_size: int = DEFAULT_CHUNK,
    ) -> None:
        super().__init__(
            dim, codebook_size, beta=beta, rotation_trick=rotation_trick, legacy=legacy, chunk_size=chunk_size
        )
        gen = _generator(seed)
        self.register_buffer("basis", gaussian_basis(self.codebook_size, self.dim, gen))
        self.proj = nn.Linear(self.dim, self.dim, bias=_flag("bias", bias))
        if gen is not None:  # deterministic init of the projection as well
            bound = 1.0 / math.sqrt(self.dim)
            with torch.no_grad():
                self.proj.weight.copy_((torch.rand(self.dim, self.dim, generator=gen) * 2 - 1) * bound)
                if self.proj.bias is not None:
                    self.proj.bias.copy_((torch.rand(self.dim, generator=gen) * 2 - 1) * bound)

    def codes(self) -> torch.Tensor:
        return self.proj(self.basis)


# ---- FSQ ---------------------------------------------------------------------------------------------
FSQ_LEVELS = {  # Mentzer et al. (2023), table of recommended levels per codebook size
    2**8: (8, 6, 5),
    2**10: (8, 5, 5, 5),
    2**12: (7, 5, 5, 5, 5),
    2**14: (8, 8, 8, 6, 5),
    2**16: (8, 8, 8, 5, 5, 5),
}


def fsq_levels(codebook_size: int) -> tuple[int, ...]:
    """The FSQ paper's levels for a target codebook size (their product is close to it)."""
    if codebook_size in FSQ_LEVELS:
        return FSQ_LEVELS[codebook_size]
    raise InputError(
        f"no recommended FSQ levels for codebook_size={codebook_size}; pass levels= explicitly "
        f"(known sizes: {', '.join(map(str, FSQ_LEVELS))})"
    )


def _round_ste(x: torch.Tensor) -> torch.Tensor:
    return x + (torch.round(x) - x).detach()


class FSQ(nn.Module):
    """Finite scalar quantization (Mentzer et al., 2023) behind the same interface.

    ``z`` (…, dim) is projected to ``len(levels)`` channels, each bounded with ``tanh`` and rounded to
    one of ``L_i`` values (STE), then projected back to ``dim``. ``codebook_size = Π L_i``; the loss is 0.
    """

    def __init__(
        self,
        dim: int,
        codebook_size: int | None = None,
        *,
        levels: tuple[int, ...] | list[int] | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        self.dim = check_int("dim", dim, low=1)
        if levels is None:
            if codebook_size is None:
                raise InputError("FSQ needs codebook_size or levels")
            levels = fsq_levels(check_int("codebook_size", codebook_size, low=2))
        if isinstance(levels, int | str) or not hasattr(levels, "__iter__"):
            raise InputError(f"levels must be a sequence of integers >= 2, got {levels!r}")
        levels = tuple(check_int("levels", L, low=2) for L in levels)
        if not levels:
            raise InputError("levels must not be empty")
        if math.prod(levels) > 2**31:  # indices are int64 digit sums; codebooks this large are not tables
            raise InputError(f"levels give {math.prod(levels):,} codes, more than 2**31")
        self.levels = levels
        self.codebook_size = math.prod(levels)
        self.rotation_trick = False
        self.register_buffer("_levels", torch.tensor(levels, dtype=torch.float32))
        basis = torch.cumprod(torch.tensor((1, *levels[:-1]), dtype=torch.long), dim=0)
        self.register_buffer("_basis", basis)
        n = len(levels)
        self.project_in = nn.Linear(self.dim, n)
        self.project_out = nn.Linear(n, self.dim)
        if seed is not None:
            gen = _generator(seed)
            with torch.no_grad():
                for lin in (self.project_in, self.project_out):
                    bound = 1.0 / math.sqrt(lin.in_features)
                    lin.weight.copy_((torch.rand(lin.weight.shape, generator=gen) * 2 - 1) * bound)
                    lin.bias.copy_((torch.rand(lin.bias.shape, generator=gen) * 2 - 1) * bound)

    def num_quantizer_params(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def bound(self, h: torch.Tensor) -> torch.Tensor:
        levels = self._levels.to(h.dtype)
        half_l = (levels - 1) * (1 + 1e-3) / 2
        offset = torch.where(levels % 2 == 0, 0.5, 0.0).to(h.dtype)
        shift = torch.atanh(offset / half_l)
        return torch.tanh(h + shift) * half_l - offset

    def quantize_channels(self, h: torch.Tensor) -> torch.Tensor:
        """Bounded, rounded and rescaled to [-1, 1] per channel (STE through the rounding)."""
        half_width = (self._levels // 2).to(h.dtype)
        return _round_ste(self.bound(h)) / half_width

    def channels_to_indices(self, qc: torch.Tensor) -> torch.Tensor:
        half_width = (self._levels // 2).to(qc.dtype)
        digits = torch.round(qc * half_width + half_width).long()
        return (digits * self._basis).sum(-1)

    def indices_to_channels(self, indices: torch.Tensor) -> torch.Tensor:
        digits = (indices.long()[..., None] // self._basis) % self._levels.long()
        half_width = self._levels // 2
        return (digits.to(self._levels.dtype) - half_width) / half_width

    @property
    def codebook(self) -> torch.Tensor:
        """All ``Π L_i`` codes in the output space, ``(K, dim)``."""
        with torch.no_grad():
            return self.project_out(self.indices_to_channels(torch.arange(self.codebook_size)))

    def encode(self, z: torch.Tensor) -> torch.Tensor:
        check_latents(z, self.dim)
        with torch.no_grad():
            return self.channels_to_indices(self.quantize_channels(self.project_in(z)))

    def decode(self, indices: torch.Tensor) -> torch.Tensor:
        indices = _check_indices(indices, self.codebook_size)
        with torch.no_grad():
            return self.project_out(self.indices_to_channels(indices))

    def forward(self, z: torch.Tensor) -> QuantizeOutput:
        check_latents(z, self.dim)
        qc = self.quantize_channels(self.project_in(z))
        indices = self.channels_to_indices(qc.detach())
        return QuantizeOutput(self.project_out(qc), indices, z.new_zeros(()))
