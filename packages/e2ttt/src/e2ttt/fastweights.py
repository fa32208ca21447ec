"""Fast-weight (inner) models and their per-token reconstruction losses, with hand-written gradients.

A fast-weight state is a tuple of tensors, each with leading dimensions ``(B, H)`` (batch, head). Every
model ``f`` maps a head vector ``x`` (dimension ``d``) to ``x + LN(g_W(x))`` where ``LN`` is a per-head
layer norm with affine weight ``ln_w`` and bias ``ln_b`` (shape ``(H, d)``), and is trained online on

    ℓ_t(W) = ‖ LN(g_W(k_t)) − LN(v_t − k_t) ‖²          (both LNs with the same affine parameters)

so ``f(k_t) ≈ k_t + LN(v_t − k_t)``: the TTT-Linear residual target. ``g`` is

- ``"mlp"``:    g(x) = W1 · GELU(W0 · x),   W0 ∈ R^{dh×d}, W1 ∈ R^{d×dh}   (E²-TTT's MLP variant)
- ``"swiglu"``: g(x) = W2 · (silu(W1 · x) ⊙ (W3 · x)),  W1, W3 ∈ R^{dh×d}, W2 ∈ R^{d×dh}
- ``"linear"``: g(x) = W · x,  W ∈ R^{d×d}   (TTT-Linear)

:meth:`FastWeight.token_grads` returns per-token factors of ∇_W ℓ_t, and :meth:`FastWeight.weighted_grad`
turns them into Σ_t c_t ∇_W ℓ_t for any per-token weights c — the "one backward pass of a per-token-weighted
loss" of the closed-form chunk update. The gradients are written out by hand (layer-norm backward
included) and are plain differentiable torch expressions, so outer training back-propagates through them;
``tests/`` checks them against autograd in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

LN_EPS = 1e-8
VARIANTS = ("mlp", "swiglu", "linear")


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = LN_EPS):
    """Per-head LN over the last dim; ``w``, ``b`` broadcast as ``(H, 1, d)``. Returns (out, x̂, 1/σ)."""
    mu = x.mean(-1, keepdim=True)
    xc = x - mu
    inv = torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps)
    xh = xc * inv
    return xh * w + b, xh, inv


def layer_norm_backward(dout: torch.Tensor, xh: torch.Tensor, inv: torch.Tensor, w: torch.Tensor):
    """∂/∂x of LN given ∂/∂out, from x̂ and 1/σ (the standard closed form)."""
    dxh = dout * w
    return inv * (dxh - dxh.mean(-1, keepdim=True) - xh * (dxh * xh).mean(-1, keepdim=True))


_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def normal_cdf(z: torch.Tensor) -> torch.Tensor:
    """Φ(z); the exact GELU is z·Φ(z)."""
    return 0.5 * (1.0 + torch.erf(z * _INV_SQRT2))


def gelu_grad(z: torch.Tensor, cdf: torch.Tensor | None = None) -> torch.Tensor:
    """d GELU(z) / dz for the exact (erf) GELU: Φ(z) + z φ(z) (Φ(z) reused when given)."""
    cdf = normal_cdf(z) if cdf is None else cdf
    return cdf + z * torch.exp(-0.5 * z * z) * _INV_SQRT_2PI


def silu_grad(h: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(h)
    return s * (1.0 + h * (1.0 - s))


def _lnp(ln_w: torch.Tensor, ln_b: torch.Tensor):
    return ln_w[:, None, :], ln_b[:, None, :]  # (H, 1, d): broadcasts against (B, H, L, d)


@dataclass(frozen=True)
class FastWeight:
    """An inner model: ``variant`` in ``VARIANTS``, head dimension ``d``, hidden dimension ``dh``."""

    variant: str
    d: int
    dh: int

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")

    # ---- shapes ------------------------------------------------------------------------------------
    @property
    def shapes(self) -> tuple[tuple[int, int], ...]:
        d, dh = self.d, self.dh
        if self.variant == "mlp":
            return ((dh, d), (d, dh))
        if self.variant == "swiglu":
            return ((dh, d), (d, dh), (dh, d))
        return ((d, d),)

    def init(self, n_heads: int, *, generator: torch.Generator | None = None, dtype=torch.float32):
        """Initial weights ``(H, *shape)``, scaled so every row has norm ≈ 1."""
        out = []
        for shape in self.shapes:
            w = torch.randn(n_heads, *shape, generator=generator, dtype=dtype) / math.sqrt(shape[1])
            out.append(w)
        return tuple(out)

    # ---- the model ---------------------------------------------------------------------------------
    def inner(self, W: tuple[torch.Tensor, ...], x: torch.Tensor):
        """g_W(x) for x of shape (B, H, L, d); returns (y, cache for the backward)."""
        if self.variant == "mlp":
            W0, W1 = W
            z = x @ W0.transpose(-1, -2)
            cdf = normal_cdf(z)
            a = z * cdf  # = F.gelu(z) (exact erf form)
            return a @ W1.transpose(-1, -2), (z, cdf, a)
        if self.variant == "swiglu":
            W1, W2, W3 = W
            h1 = x @ W1.transpose(-1, -2)
            h3 = x @ W3.transpose(-1, -2)
            s = F.silu(h1)
            p = s * h3
            return p @ W2.transpose(-1, -2), (h1, h3, s, p)
        (Wl,) = W
        return x @ Wl.transpose(-1, -2), ()

    def apply(self, W, x, ln_w, ln_b):
        """f_W(x) = x + LN(g_W(x)); x (B, H, L, d) → (B, H, L, d)."""
        y, _ = self.inner(W, x)
        return x + layer_norm(y, *_lnp(ln_w, ln_b))[0]

    def target(self, k, v, ln_w, ln_b):
        return layer_norm(v - k, *_lnp(ln_w, ln_b))[0]

    def loss(self, W, k, v, ln_w, ln_b) -> torch.Tensor:
        """Per-token losses ℓ_t(W), shape (B, H, L) (the definition; autograd-friendly)."""
        y, _ = self.inner(W, k)
        n = layer_norm(y, *_lnp(ln_w, ln_b))[0]
        return (n - self.target(k, v, ln_w, ln_b)).pow(2).sum(-1)

    # ---- hand-written gradients -------------------------------------------------------------------
    def token_grads(self, W, k, v, ln_w, ln_b):
        """Per-token gradient factors: ∇_W ℓ_t = Σ outer products of these (never materialised per token)."""
        w, b = _lnp(ln_w, ln_b)
        y, cache = self.inner(W, k)
        n, yh, inv = layer_norm(y, w, b)
        dy = layer_norm_backward(2.0 * (n - self.target(k, v, ln_w, ln_b)), yh, inv, w)
        if self.variant == "mlp":
            z, cdf, a = cache
            dz = (dy @ W[1]) * gelu_grad(z, cdf)
            return ("mlp", dy, a, dz, k)
        if self.variant == "swiglu":
            h1, h3, s, p = cache
            dp = dy @ W[1]
            return ("swiglu", dy, p, dp * h3 * silu_grad(h1), dp * s, k)
        return ("linear", dy, k)

    @staticmethod
    def weighted_grad(factors, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Σ_t c_t ∇_W ℓ_t for per-token weights ``c`` of shape (B, H, L)."""
        c = c[..., None]
        kind = factors[0]
        if kind == "mlp":
            _, dy, a, dz, k = factors
            return ((c * dz).transpose(-1, -2) @ k, (c * dy).transpose(-1, -2) @ a)
        if kind == "swiglu":
            _, dy, p, dh1, dh3, k = factors
            return (
                (c * dh1).transpose(-1, -2) @ k,
                (c * dy).transpose(-1, -2) @ p,
                (c * dh3).transpose(-1, -2) @ k,
            )
        _, dy, k = factors
        return ((c * dy).transpose(-1, -2) @ k,)
