"""``E2TTTLayer``: sliding-window attention paired with a per-head fast-weight memory (E²-TTT), and the
baselines behind the same interface (``rule=``).

Per head, the layer projects ``q, k, v`` (one projection shared by both branches) and per-token scalar
gates (lr, decay γ, momentum β). The SWA branch is causal softmax attention over the last ``window``
tokens (RoPE). The memory branch cuts the sequence into chunks of ``chunk`` tokens: every query of a
chunk reads the fast weights as they stood at the chunk's start (``f_W(q)``), then the chunk's update is
applied with the chosen rule. The memory output goes through a per-head RMS norm and is added to the
SWA output before the output projection.

Decoding is buffered: ``forward(x, state, return_state=True)`` works on any number of new tokens; tokens
(k, v and gates) accumulate in the state's buffer until a full chunk exists, and only then is the update
applied. A full-sequence forward equals any split of the same sequence into prefill + steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from e2ttt.baselines import chunk_average_update, no_momentum_update
from e2ttt.chunk import chunked_memory, e2ttt_chunk_update, row_norms
from e2ttt.fastweights import FastWeight
from papershelf.errors import InputError, check_choice, check_int, check_number

RULES = ("e2ttt", "chunkavg", "nomomentum", "ttt-linear", "swa")
UPDATES = {
    "e2ttt": e2ttt_chunk_update,
    "chunkavg": chunk_average_update,
    "nomomentum": no_momentum_update,
    "ttt-linear": no_momentum_update,
}


@dataclass
class LayerState:
    """Decoding state of one layer: fast weights, momentum, chunk buffer, SWA cache, position."""

    W: tuple[torch.Tensor, ...] | None
    m: tuple[torch.Tensor, ...] | None
    norms: tuple[torch.Tensor, ...] | None
    buf: dict[str, torch.Tensor] | None  # k, v, lr, lg, lb of the buffered tokens of the current chunk
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    pos: int

    @property
    def buffered(self) -> int:
        return 0 if self.buf is None else int(self.buf["k"].shape[2])


def rope(x: torch.Tensor, pos0: int, base: float = 10000.0) -> torch.Tensor:
    """Rotary embedding of x (B, H, T, d) at absolute positions pos0..pos0+T−1 (d even)."""
    d = x.shape[-1]
    half = d // 2
    inv = base ** (-torch.arange(half, dtype=x.dtype, device=x.device) / half)
    ang = torch.arange(pos0, pos0 + x.shape[2], dtype=x.dtype, device=x.device)[:, None] * inv
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., :half], x[..., half : 2 * half]
    out = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)
    return torch.cat([out, x[..., 2 * half :]], -1) if d % 2 else out


def sliding_window_attention(q, k, v, window: int, k_prev=None, v_prev=None):
    """Causal attention of q (B, H, T, d) over the last ``window`` keys, including ``n_prev`` cached ones.

    Key j (in cat(k_prev, k)) is visible to query i when n_prev + i − window < j ≤ n_prev + i. Queries are
    processed in blocks of ``window`` so memory is O(T · window).
    """
    if k_prev is not None and k_prev.shape[2]:
        k = torch.cat([k_prev, k], 2)
        v = torch.cat([v_prev, v], 2)
        n_prev = k_prev.shape[2]
    else:
        n_prev = 0
    T = q.shape[2]
    out = []
    for s in range(0, T, window):
        e = min(s + window, T)
        lo = max(0, n_prev + s - window + 1)
        hi = n_prev + e
        qi = torch.arange(n_prev + s, n_prev + e, device=q.device)[:, None]
        kj = torch.arange(lo, hi, device=q.device)[None, :]
        mask = (kj <= qi) & (kj > qi - window)
        out.append(
            F.scaled_dot_product_attention(q[:, :, s:e], k[:, :, lo:hi], v[:, :, lo:hi], attn_mask=mask)
        )
    return torch.cat(out, 2)


class E2TTTLayer(nn.Module):
    """SWA + fast-weight memory layer. ``rule``: ``e2ttt`` | ``chunkavg`` | ``nomomentum`` | ``ttt-linear`` |
    ``swa``; ``variant``: ``mlp`` | ``swiglu`` (``ttt-linear`` always uses the linear fast weight).

    ``forward(x (B, T, d_model), state=None, return_state=False) -> (y (B, T, d_model), state | None)``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int | None = None,
        *,
        chunk: int = 512,
        window: int = 512,
        rule: str = "e2ttt",
        variant: str = "mlp",
        hidden_mult: int = 2,
        base_lr: float = 0.01,
        base_decay: float = 0.1,
        clip: float | None = 1.0,
        renorm: bool = True,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, low=1)
        self.n_heads = check_int("n_heads", n_heads, low=1)
        if head_dim is None:
            if d_model % n_heads:
                raise InputError(f"d_model={d_model} is not divisible by n_heads={n_heads}; pass head_dim")
            head_dim = d_model // n_heads
        self.head_dim = check_int("head_dim", head_dim, low=2)
        self.chunk = check_int("chunk", chunk, low=1)
        self.window = check_int("window", window, low=1)
        self.rule = check_choice("rule", rule, RULES)
        self.variant = check_choice("variant", variant, ("mlp", "swiglu"))
        self.base_lr = check_number("base_lr", base_lr, low=0)
        self.base_decay = check_number("base_decay", base_decay, low=0, high=1)
        self.clip = None if clip is None else check_number("clip", clip, low=0, low_open=True)
        self.renorm = bool(renorm)
        H, d = self.n_heads, self.head_dim
        self.qkv = nn.Linear(d_model, 3 * H * d, bias=False)
        self.out = nn.Linear(H * d, d_model, bias=False)
        self.fw = None
        if self.rule != "swa":
            kind = "linear" if self.rule == "ttt-linear" else self.variant
            self.fw = FastWeight(kind, d, check_int("hidden_mult", hidden_mult, low=1) * d)
            g = torch.Generator().manual_seed(seed)
            self.W_init = nn.ParameterList([nn.Parameter(w) for w in self.fw.init(H, generator=g)])
            self.ln_w = nn.Parameter(torch.ones(H, d))
            self.ln_b = nn.Parameter(torch.zeros(H, d))
            self.o_norm = nn.Parameter(torch.ones(H, d))
            self.g_lr = nn.Linear(d_model, H)
            if self.rule in ("e2ttt", "chunkavg"):
                self.g_decay = nn.Linear(d_model, H)
                self.g_mom = nn.Linear(d_model, H)

    # ---- state -------------------------------------------------------------------------------------
    def init_state(self, batch: int, *, dtype=None, device=None) -> LayerState:
        p = self.qkv.weight
        dtype, device = dtype or p.dtype, device or p.device
        empty = torch.zeros(batch, self.n_heads, 0, self.head_dim, dtype=dtype, device=device)
        W = m = norms = None
        if self.fw is not None:
            W = tuple(w.to(dtype)[None].expand(batch, *w.shape) for w in self.W_init)
            m = tuple(torch.zeros_like(w) for w in W)
            norms = row_norms(W)
        return LayerState(W, m, norms, None, empty, empty, 0)

    def gates(self, x: torch.Tensor):
        """(lr, log γ, log β), each (B, H, T): lr = base_lr·σ, γ = 1 − base_decay·σ, β = σ.

        With ``base_decay`` = 1, log γ = log(1 − σ(u)) is computed as ``logsigmoid(−u)``: ``log1p(−σ(u))``
        is −inf with NaN gradients wherever σ(u) rounds to 1."""
        lr = self.base_lr * torch.sigmoid(self.g_lr(x)).transpose(1, 2)
        if self.rule in ("e2ttt", "chunkavg"):
            u = self.g_decay(x)
            if self.base_decay == 1:
                lg = F.logsigmoid(-u).transpose(1, 2)
            else:
                lg = torch.log1p(-self.base_decay * torch.sigmoid(u)).transpose(1, 2)
            lb = F.logsigmoid(self.g_mom(x)).transpose(1, 2)
        else:
            lg = lb = torch.zeros_like(lr)
        return lr, lg, lb

    def _check_state(self, state: LayerState, x: torch.Tensor) -> None:
        """A state made by this layer's ``init_state`` (or a previous call) for x's batch and dtype."""
        B, H, d = x.shape[0], self.n_heads, self.head_dim
        kc = state.k_cache
        if kc.shape[0] != B:
            raise InputError(f"state is for batch {kc.shape[0]}, x has batch {B}")
        if kc.dim() != 4 or (kc.shape[1], kc.shape[3]) != (H, d):
            raise InputError(
                f"state is for a layer with (heads, head_dim) = {(kc.shape[1], kc.shape[-1])}, this layer "
                f"has {(H, d)}"
            )
        if kc.dtype != x.dtype:
            raise InputError(f"state has dtype {kc.dtype}, x has {x.dtype}")
        if self.fw is not None:
            if state.W is None or len(state.W) != len(self.fw.shapes):
                raise InputError(
                    f"state has no fast weights for rule {self.rule!r} variant {self.fw.variant!r} (it is "
                    "from a layer with another rule or variant)"
                )
            for w, shape in zip(state.W, self.fw.shapes):
                if tuple(w.shape) != (B, H, *shape) or w.dtype != x.dtype:
                    raise InputError(
                        f"state fast weight is {w.dtype} {tuple(w.shape)}, this layer needs "
                        f"{x.dtype} {(B, H, *shape)}"
                    )
            if state.buffered >= self.chunk:
                raise InputError(f"state buffers {state.buffered} tokens, this layer's chunk is {self.chunk}")

    # ---- forward -----------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, state: LayerState | None = None, *, return_state: bool = False):
        if x.dim() != 3 or x.shape[-1] != self.d_model or x.shape[1] == 0:
            raise InputError(f"x must be (batch, tokens >= 1, {self.d_model}), got {tuple(x.shape)}")
        if x.dtype != self.qkv.weight.dtype:
            raise InputError(f"x has dtype {x.dtype}, the layer's weights {self.qkv.weight.dtype}")
        if state is not None and not isinstance(state, LayerState):
            raise InputError(
                f"state must be a LayerState (from init_state or a previous call), got {type(state).__name__}"
            )
        if not torch.isfinite(x).all():
            raise InputError("x contains non-finite values")
        B, T, _ = x.shape
        H, d = self.n_heads, self.head_dim
        keep = return_state or state is not None
        if state is None:
            state = self.init_state(B, dtype=x.dtype, device=x.device)
        else:
            self._check_state(state, x)
        q, k, v = self.qkv(x).view(B, T, 3, H, d).permute(2, 0, 3, 1, 4)
        qr, kr = rope(q, state.pos), rope(k, state.pos)
        o = sliding_window_attention(qr, kr, v, self.window, state.k_cache, state.v_cache)
        k_all, v_all = torch.cat([state.k_cache, kr], 2), torch.cat([state.v_cache, v], 2)
        keep_n = self.window - 1
        k_cache = k_all[:, :, k_all.shape[2] - min(keep_n, k_all.shape[2]) :]
        v_cache = v_all[:, :, v_all.shape[2] - min(keep_n, v_all.shape[2]) :]
        W, m, buf = state.W, state.m, state.buf
        if self.fw is not None:
            qn, kn = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
            lr, lg, lb = self.gates(x)
            mem, W, m, buf = chunked_memory(
                self.fw,
                W,
                m,
                qn,
                kn,
                v,
                lr,
                lg,
                lb,
                self.ln_w,
                self.ln_b,
                chunk=self.chunk,
                update=UPDATES[self.rule],
                buf=buf,
                clip=self.clip,
                norms=state.norms if self.renorm else None,
                final_update=keep,
            )
            mem = mem * torch.rsqrt(mem.pow(2).mean(-1, keepdim=True) + 1e-6) * self.o_norm[:, None, :]
            o = o + mem
        y = self.out(o.transpose(1, 2).reshape(B, T, H * d))
        if not keep:
            return y, None
        return y, LayerState(W, m, state.norms, buf, k_cache, v_cache, state.pos + T)


def _rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class RMSNorm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return _rms(x, self.weight)


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, mlp_mult: int, **layer_kw) -> None:
        super().__init__()
        self.n1, self.n2 = RMSNorm(d_model), RMSNorm(d_model)
        self.mix = E2TTTLayer(d_model, n_heads, **layer_kw)
        self.up = nn.Linear(d_model, 2 * mlp_mult * d_model, bias=False)
        self.down = nn.Linear(mlp_mult * d_model, d_model, bias=False)

    def forward(self, x, state=None, return_state=False):
        h, state = self.mix(self.n1(x), state, return_state=return_state)
        x = x + h
        a, b = self.up(self.n2(x)).chunk(2, -1)
        return x + self.down(F.silu(a) * b), state


class TinyLM(nn.Module):
    """A small causal LM of ``n_layers`` blocks (mixing layer ``rule`` + SwiGLU MLP), tied embeddings.

    ``forward(ids (B, T) int64, states=None, return_state=False) -> (logits (B, T, vocab), states)``.
    """

    def __init__(
        self,
        vocab: int = 263,
        d_model: int = 64,
        n_layers: int = 2,
        n_heads: int = 2,
        *,
        mlp_mult: int = 2,
        seed: int = 0,
        **layer_kw,
    ) -> None:
        super().__init__()
        self.vocab = check_int("vocab", vocab, low=2)
        check_int("d_model", d_model, low=1)
        self.config = dict(
            vocab=vocab,
            d_model=d_model,
            n_layers=n_layers,
            n_heads=n_heads,
            mlp_mult=mlp_mult,
            seed=seed,
            **layer_kw,
        )
        torch.manual_seed(seed)
        self.embed = nn.Embedding(vocab, d_model)
        nn.init.normal_(self.embed.weight, std=1.0 / math.sqrt(d_model))
        self.blocks = nn.ModuleList(
            Block(d_model, n_heads, mlp_mult, seed=seed + i, **layer_kw)
            for i in range(check_int("n_layers", n_layers, low=1))
        )
        self.norm = RMSNorm(d_model)

    def forward(self, ids: torch.Tensor, states=None, return_state: bool = False):
        if ids.dim() != 2 or ids.dtype not in (torch.int64, torch.int32):
            raise InputError(
                f"ids must be an integer tensor (batch, tokens), got {ids.dtype} {tuple(ids.shape)}"
            )
        if ids.shape[1] == 0:
            raise InputError("ids has no tokens (shape (batch, 0))")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab):
            raise InputError(
                f"ids must be in [0, {self.vocab}), got values in [{int(ids.min())}, {int(ids.max())}]"
            )
        x = self.embed(ids)
        states = [None] * len(self.blocks) if states is None else list(states)
        if len(states) != len(self.blocks):
            raise InputError(f"states must hold one state per layer ({len(self.blocks)}), got {len(states)}")
        for i, blk in enumerate(self.blocks):
            x, states[i] = blk(x, states[i], return_state)
        logits = self.norm(x) @ self.embed.weight.t()
        return logits, (states if return_state or states[0] is not None else None)
