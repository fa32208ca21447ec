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
#: head blocking of the chunk gradients: at most this many elements (1 MiB of float32) per intermediate
BLOCK_ELEMS = 1 << 18
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
        """Per-token gradient factors: ∇_W ℓ_t = Σ outer products of these (never materialised per token).

        One forward of the inner model and one hand-derived backward, on fused kernels: ``F.gelu`` and
        ``aten.gelu_backward`` for the GELU, ``native_layer_norm`` (no affine) and its backward for the LN.
        The LN bias cancels in ``n − target`` and the affine weight enters as ``w²``:
        ∂ℓ/∂ŷ = 2 w² (ŷ − t̂), with ŷ, t̂ the normalised inner output and target.
        """
        w2 = 2.0 * ln_w[:, None, :].square()
        d = (k.shape[-1],)
        th = torch.native_layer_norm(v - k, d, None, None, LN_EPS)[0]
        if self.variant == "mlp":
            W0, W1 = W
            z = k @ W0.transpose(-1, -2)
            a = F.gelu(z)
            y = a @ W1.transpose(-1, -2)
        elif self.variant == "swiglu":
            W1, W2, W3 = W
            h1 = k @ W1.transpose(-1, -2)
            h3 = k @ W3.transpose(-1, -2)
            s = F.silu(h1)
            p = s * h3
            y = p @ W2.transpose(-1, -2)
        else:
            y = k @ W[0].transpose(-1, -2)
        yh, mu, rstd = torch.native_layer_norm(y, d, None, None, LN_EPS)
        dyh = (yh - th) * w2
        mask = [True, False, False]
        dy = torch.ops.aten.native_layer_norm_backward(dyh, y, d, mu, rstd, None, None, mask)[0]
        if self.variant == "mlp":
            dz = torch.ops.aten.gelu_backward(dy @ W1, z)
            return ("mlp", dy, a, dz, k)
        if self.variant == "swiglu":
            dp = dy @ W2
            return ("swiglu", dy, p, dp * h3 * silu_grad(h1), dp * s, k)
        return ("linear", dy, k)

    @staticmethod
    def weighted_grads(factors, cs) -> tuple[tuple[torch.Tensor, ...], ...]:
        """Σ_t c_t ∇_W ℓ_t for each per-token weighting ``c`` in ``cs`` (each (B, H, L)), sharing one matmul
        per weight tensor across the weightings: the weights scale the narrower factor (k or ∂ℓ/∂y, width
        d), the scaled copies are concatenated, and one batched matmul contracts over the L tokens."""
        n = len(cs)
        kind = factors[0]
        c = torch.stack(cs, -1)[..., None] if n > 1 else cs[0][..., None]

        def scaled(x):  # (B, H, L, n·d): [c_1 x, ..., c_n x]
            return (c * x[..., None, :]).flatten(-2) if n > 1 else c * x

        def split(g, dim):
            return g.chunk(n, dim) if n > 1 else (g,)

        if kind == "mlp":
            _, dy, a, dz, k = factors
            g0 = split(dz.transpose(-1, -2) @ scaled(k), -1)  # Σ c dz kᵀ
            g1 = split(scaled(dy).transpose(-1, -2) @ a, -2)  # Σ c dy aᵀ
            return tuple(zip(g0, g1))
        if kind == "swiglu":
            _, dy, p, dh1, dh3, k = factors
            ck = scaled(k)
            g1 = split(dh1.transpose(-1, -2) @ ck, -1)
            g2 = split(scaled(dy).transpose(-1, -2) @ p, -2)
            g3 = split(dh3.transpose(-1, -2) @ ck, -1)
            return tuple(zip(g1, g2, g3))
        _, dy, k = factors
        return tuple((g,) for g in split(scaled(dy).transpose(-1, -2) @ k, -2))

    def head_blocks(self, shape, block_elems: int = BLOCK_ELEMS) -> list[slice]:
        """Slices of heads for k of ``shape`` (B, H, L, d), each block's largest per-token intermediate
        (B · heads · L · max(d, dh) elements) at most ``block_elems`` (at least one head per block)."""
        B, H, L, _ = shape
        hb = max(1, min(H, block_elems // max(1, B * L * max(self.d, self.dh))))
        return [slice(h, h + hb) for h in range(0, H, hb)]

    def chunk_grads(self, W, k, v, ln_w, ln_b, cs, *, block_elems: int = BLOCK_ELEMS):
        """``weighted_grads(token_grads(...), cs)`` computed over blocks of heads, each block's largest
        per-token intermediate (B · heads · L · max(d, dh) elements) at most ``block_elems`` so that the
        factors stay in cache between the forward, the backward and the weighted contractions."""
        blocks = self.head_blocks(k.shape, block_elems)
        if len(blocks) == 1:
            return self.weighted_grads(self.token_grads(W, k, v, ln_w, ln_b), cs)
        parts = []
        for s in blocks:
            f = self.token_grads(tuple(x[:, s] for x in W), k[:, s], v[:, s], ln_w[s], ln_b[s])
            parts.append(self.weighted_grads(f, tuple(c[:, s] for c in cs)))
        return tuple(
            tuple(torch.cat([p[i][j] for p in parts], 1) for j in range(len(W))) for i in range(len(cs))
        )

    def token_grads_blocked(self, W, k, v, ln_w, ln_b, *, block_elems: int = BLOCK_ELEMS):
        """``token_grads`` over the same head blocks as :meth:`chunk_grads`, factors concatenated."""
        blocks = self.head_blocks(k.shape, block_elems)
        if len(blocks) == 1:
            return self.token_grads(W, k, v, ln_w, ln_b)
        parts = [
            self.token_grads(tuple(x[:, s] for x in W), k[:, s], v[:, s], ln_w[s], ln_b[s]) for s in blocks
        ]
        return (parts[0][0], *(torch.cat([p[i] for p in parts], 1) for i in range(1, len(parts[0]))))

    @staticmethod
    def weighted_grad(factors, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Σ_t c_t ∇_W ℓ_t for per-token weights ``c`` of shape (B, H, L) (one weighting, no blocking)."""
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
