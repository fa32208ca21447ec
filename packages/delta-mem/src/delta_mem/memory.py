"""δ-Mem layers: a fixed-size delta-rule state per wrapped attention layer and its low-rank corrections.

For the hidden state ``x_t`` entering a wrapped attention layer, per state head (rank ``r``):

    q̃_t = normalize(tanh(W_q^m x_t)),  k̃_t = normalize(tanh(W_k^m x_t)),  ṽ_t = W_v^m x_t
    β_t = σ(W_β x_t + b_β) ∈ (0,1)^r,  λ_t = 1 − β_t (coupled) or σ(W_λ x_t + b_λ)
    r_t = S_{t-1} q̃_t                                   (read before write)
    S_t = diag(λ_t) S_{t-1} − diag(β_t)(S_{t-1} k̃_t) k̃_tᵀ + diag(β_t) ṽ_t k̃_tᵀ   (``standard``)
    Δq_t = (α/r) W_Δq r_t,   Δo_t = (α/r) W_Δo r_t       (W_Δ zero-initialised)

``Δq`` is added to the output of ``q_proj`` and ``Δo`` to the output of ``o_proj`` (``k``/``v`` optional).
With sentence or message write granularity the write uses the mean of ``x`` over the segment, once, at
the segment's last token; reads still happen at every token.
"""

from __future__ import annotations

import ctypes
import json
import operator
from dataclasses import asdict, dataclass, field, fields
from typing import NamedTuple

import torch
from torch import nn

from delta_mem.decode_c import UPDATE_MODE_CODES, Plan, kernel_status, kernels
from delta_mem.scan import BACKENDS, UPDATE_MODES, gate_coefficients, scan
from papershelf.errors import InputError, check_choice, check_int, check_number

GRANULARITIES = ("token", "sentence", "message")
# what a C decode step's plan depends on, read in one C-level call each (see decode_with_kernel)
_WEIGHT, _PARAMS = operator.itemgetter("weight"), operator.attrgetter("_parameters")
_INPUT_KEY = operator.attrgetter("shape", "dtype", "is_cpu")
_CONFIG_KEY = operator.attrgetter("state_update_mode", "couple_lambda", "write_granularity", "heads", "rank")
DECODE_BACKENDS = ("auto", "c", "torch")
DELTA_TARGETS = ("q", "k", "v", "o")
# Byte-level boundaries (the testbed tokenizer maps byte b to id b): . ! ? newline for sentences,
# newline for messages. Other tokenizers pass their own ``boundary_ids``.
SENTENCE_BOUNDARY_IDS = (ord("."), ord("!"), ord("?"), ord("\n"))
MESSAGE_BOUNDARY_IDS = (ord("\n"),)


@dataclass
class DeltaMemConfig:
    """Configuration of δ-Mem; the state of every wrapped layer is ``heads × (rank × rank)``.

    ``rank`` (r) is the state size (8 → an 8×8 state), ``alpha`` the LoRA-style scale numerator (the
    correction is multiplied by ``alpha / rank``), ``beta_bias_init`` the initial bias of the write gate,
    ``couple_lambda`` ties λ = 1 − β, ``state_update_mode`` one of ``standard``, ``lambda_outside``,
    ``no_lambda``; ``delta_targets`` the projections that receive corrections; ``write_granularity`` one
    of ``token``, ``sentence``, ``message``; ``boundary_ids`` overrides the segment-end token ids;
    ``layers`` the decoder-layer indices to wrap (None: all); ``backend`` the scan backend;
    ``decode_backend`` how a single-token decode step runs: ``c`` the fused C step (``decode_c.py``;
    an error when it cannot run that step), ``torch`` the torch twin, ``auto`` C when it can, else torch.
    """

    rank: int = 8
    heads: int = 1
    alpha: float = 16.0
    beta_bias_init: float = -1.5
    lambda_bias_init: float = 3.0
    couple_lambda: bool = True
    state_update_mode: str = "standard"
    delta_targets: tuple[str, ...] = ("q", "o")
    write_granularity: str = "token"
    boundary_ids: tuple[int, ...] | None = None
    layers: tuple[int, ...] | None = None
    backend: str = "auto"
    decode_backend: str = "auto"
    chunk: int = 32
    check_finite: bool = True
    extra: dict = field(default_factory=dict)

    def validate(self) -> DeltaMemConfig:
        # stored back: an integral float such as rank=2.0 passes the check and must not reach nn.Linear
        self.rank = check_int("rank (state size)", self.rank, low=1)
        self.heads = check_int("heads", self.heads, low=1)
        check_number("alpha", self.alpha, low=0, low_open=True)
        check_number("beta_bias_init", self.beta_bias_init)
        check_number("lambda_bias_init", self.lambda_bias_init)
        check_choice("state_update_mode", self.state_update_mode, UPDATE_MODES)
        check_choice("write_granularity", self.write_granularity, GRANULARITIES)
        check_choice("backend", self.backend, BACKENDS)
        check_choice("decode_backend", self.decode_backend, DECODE_BACKENDS)
        self.chunk = check_int("chunk", self.chunk, low=1)
        for name in ("couple_lambda", "check_finite"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if isinstance(self.delta_targets, str):  # tuple("qo") would silently split a typo into letters
            raise InputError(
                f"delta_targets must be a sequence such as ('q', 'o'), got {self.delta_targets!r}"
            )
        self.delta_targets = tuple(self.delta_targets)
        if not self.delta_targets:
            raise InputError("delta_targets must name at least one of q, k, v, o")
        for t in self.delta_targets:
            check_choice("delta_targets entry", t, DELTA_TARGETS)
        if len(set(self.delta_targets)) != len(self.delta_targets):  # a typo: one correction per projection
            raise InputError(f"delta_targets names a projection twice: {self.delta_targets!r}")
        for name in ("boundary_ids", "layers"):  # an int would be a TypeError in tuple() below
            value = getattr(self, name)
            if value is not None and not isinstance(value, (list, tuple)):
                raise InputError(f"{name} must be a list or tuple of ints (or None), got {value!r}")
        if self.boundary_ids is not None:
            self.boundary_ids = tuple(check_int("boundary_ids entry", b, low=0) for b in self.boundary_ids)
        if self.layers is not None:
            self.layers = tuple(check_int("layers entry", i, low=0) for i in self.layers)
            if not self.layers:
                raise InputError("layers must name at least one decoder layer (None wraps them all)")
        return self

    def boundaries(self) -> tuple[int, ...]:
        if self.boundary_ids is not None:
            return self.boundary_ids
        return SENTENCE_BOUNDARY_IDS if self.write_granularity == "sentence" else MESSAGE_BOUNDARY_IDS

    def to_json(self) -> str:
        d = asdict(self)
        # where a memory's decode step runs is the loading machine's choice (it may have no C compiler),
        # not part of the memory: adapters load with "auto" and set_decode_backend() changes it
        d.pop("decode_backend")
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DeltaMemConfig:
        try:
            d = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise InputError(f"δ-Mem config is not valid JSON ({exc})") from None
        if not isinstance(d, dict):
            raise InputError(f"δ-Mem config must be a JSON object, got {type(d).__name__}")
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise InputError(f"δ-Mem config has unknown keys {sorted(unknown)}")
        for key in ("delta_targets", "boundary_ids", "layers"):
            if d.get(key) is not None:
                if not isinstance(d[key], list):
                    raise InputError(f"δ-Mem config {key} must be a list, got {d[key]!r}")
                d[key] = tuple(d[key])
        return cls(**d).validate()


class _KernelPlan(NamedTuple):
    """The C decode step's fixed arguments for one layer and what they point into."""

    key: tuple
    struct: object  # ctypes pointer to a Plan
    kernel: object  # the ctypes function for the dtype
    dtype: torch.dtype
    state_shape: tuple  # (B, heads, rank, rank)
    deltas: dict  # target -> correction buffer, (B, 1, out), or (out,) for one sequence
    reads: torch.Tensor  # (B, 1, heads * rank) buffer
    held: tuple


class _Context:
    """Per-model shared data: the current forward's input ids (for segment boundaries)."""

    def __init__(self) -> None:
        self.input_ids: torch.Tensor | None = None


class DeltaMemLayer(nn.Module):
    """The memory of one attention layer: projections, gates, corrections and the running state."""

    def __init__(self, hidden: int, out_dims: dict[str, int], cfg: DeltaMemConfig, index: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.index = index
        H, r = cfg.heads, cfg.rank
        n_gates = 2 if cfg.couple_lambda else 3  # (k, v, β[, λ]) after q
        self.in_proj = nn.Linear(hidden, H * r * (2 + n_gates), bias=True)  # q, k, v, β[, λ]
        nn.init.normal_(self.in_proj.weight, std=hidden**-0.5)
        with torch.no_grad():
            self.in_proj.bias.zero_()
            b = self.in_proj.bias.view(2 + n_gates, H * r)
            b[3].fill_(cfg.beta_bias_init)
            if not cfg.couple_lambda:
                b[4].fill_(cfg.lambda_bias_init)
        self.deltas = nn.ModuleDict({t: nn.Linear(H * r, out_dims[t], bias=False) for t in cfg.delta_targets})
        for lin in self.deltas.values():
            nn.init.zeros_(lin.weight)
        self.scale = cfg.alpha / r
        self._plan: _KernelPlan | None = None  # the C decode step's fixed arguments
        self._kernel_state: torch.Tensor | None = None  # the state the C step updates in place
        self.state: torch.Tensor | None = None  # (B, H, r, r)
        self.acc_sum: torch.Tensor | None = None  # segment accumulators (non-token granularity)
        self.acc_n: torch.Tensor | None = None
        self.reads: torch.Tensor | None = None  # (B, T, H*r) of the forward in progress
        self.kernel_deltas: dict[str, torch.Tensor] | None = None  # the C step's corrections, by target
        self.reads_owner: str | None = None  # the projection that ran the memory for ``reads``
        self.context: _Context | None = None

    # Plain per-step attributes (never parameters, buffers or submodules), written several times per layer
    # and token: nn.Module.__setattr__'s bookkeeping would cost more than the C decode step itself.
    _PLAIN = frozenset(
        ("state", "acc_sum", "acc_n", "reads", "reads_owner", "kernel_deltas", "_kernel_state", "_plan")
    )

    def __setattr__(self, name: str, value) -> None:
        if name in DeltaMemLayer._PLAIN:
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def __getstate__(self) -> dict:
        # copies and pickles start without the C step's plan (ctypes pointers cannot be copied)
        state = dict(super().__getstate__())
        state["_plan"] = state["_kernel_state"] = None
        return state

    def reset(self) -> None:
        self.state = self.acc_sum = self.acc_n = self.reads = self.kernel_deltas = self._kernel_state = None
        self.reads_owner = None

    def detach_state(self) -> None:
        for name in ("state", "acc_sum", "acc_n"):
            x = getattr(self, name)
            if x is not None:
                setattr(self, name, x.detach())

    def features(self, x: torch.Tensor):
        """``(q̃, k̃, ṽ, β, λ)`` for hidden states ``x`` (B, T, d); each (B, H, T, r)."""
        B, T, _ = x.shape
        H, r = self.cfg.heads, self.cfg.rank
        z = self.in_proj(x).view(B, T, -1, H, r).permute(2, 0, 3, 1, 4)  # (n, B, H, T, r)
        qk = nn.functional.normalize(torch.tanh(z[:2]), dim=-1)
        q, k = qk[0], qk[1]
        v = z[2]
        beta = torch.sigmoid(z[3])
        lam = 1.0 - beta if self.cfg.couple_lambda else torch.sigmoid(z[4])
        return q, k, v, beta, lam

    def _segment_inputs(self, x: torch.Tensor):
        """Segment-mean inputs and a write mask (B, T) for sentence/message granularity."""
        ctx = self.context
        ids = None if ctx is None else ctx.input_ids
        if ids is None or ids.shape != x.shape[:2]:
            raise InputError(
                f"write_granularity={self.cfg.write_granularity!r} needs input_ids (not inputs_embeds) "
                "to find segment boundaries"
            )
        B, T, d = x.shape
        bset = torch.tensor(self.cfg.boundaries(), device=ids.device)
        is_b = torch.isin(ids, bset)  # (B, T)
        acc_sum = x.new_zeros(B, d) if self.acc_sum is None else self.acc_sum
        acc_n = x.new_zeros(B) if self.acc_n is None else self.acc_n
        cs = torch.cumsum(x, dim=1) + acc_sum[:, None]  # includes the carried partial segment
        pos = torch.arange(T, device=x.device).expand(B, T)
        last_b = torch.cummax(torch.where(is_b, pos, torch.full_like(pos, -1)), dim=1).values
        prev = torch.cat([torch.full_like(last_b[:, :1], -1), last_b[:, :-1]], dim=1)  # last boundary < t
        base = torch.gather(cs, 1, prev.clamp(min=0)[..., None].expand(B, T, d))
        base = torch.where((prev >= 0)[..., None], base, torch.zeros_like(base))
        count = torch.where(prev >= 0, (pos - prev).to(x.dtype), pos.to(x.dtype) + 1 + acc_n[:, None])
        seg_mean = (cs - base) / count[..., None]
        # carry the trailing partial segment
        L = last_b[:, -1]
        tail_base = torch.gather(cs, 1, L.clamp(min=0)[:, None, None].expand(B, 1, d))[:, 0]
        tail_base = torch.where((L >= 0)[:, None], tail_base, torch.zeros_like(tail_base))
        self.acc_sum = cs[:, -1] - tail_base
        self.acc_n = torch.where(L >= 0, (T - 1 - L).to(x.dtype), acc_n + T)
        return seg_mean, is_b

    def _decode_step(self, x: torch.Tensor) -> torch.Tensor:
        """One token (token granularity): one read and one write with as few tensor ops as possible."""
        B = x.shape[0]
        H, r = self.cfg.heads, self.cfg.rank
        z = nn.functional.linear(x[:, 0], self.in_proj.weight, self.in_proj.bias).view(B, -1, H, r)
        t = torch.tanh(z[:, :2])  # (B, 2, H, r); F.normalize's x / max(‖x‖, 1e-12) in fewer dispatches
        qk = t / torch.linalg.vector_norm(t, dim=-1, keepdim=True).clamp_min_(1e-12)
        S = x.new_zeros(B, H, r, r) if self.state is None else self.state
        rk = S @ qk.permute(0, 2, 3, 1)  # (B, H, r, 2): the read S q̃ and S k̃ in one product
        k = qk[:, 1]
        beta = torch.sigmoid(z[:, 3])
        mode = self.cfg.state_update_mode
        if mode == "standard" and self.cfg.couple_lambda:
            # keep = 1 − β, erase = write = β:  S' = (1 − β) S + β (ṽ − S k̃) k̃ᵀ = lerp(S, (ṽ − S k̃) k̃ᵀ, β)
            target = (z[:, 2] - rk[..., 1])[..., None] * k[:, :, None, :]
            self.state = torch.lerp(S, target, beta[..., None])
        elif mode == "no_lambda":  # keep = 1, erase = write = β
            self.state = torch.addcmul(S, (beta * (z[:, 2] - rk[..., 1]))[..., None], k[:, :, None, :])
        else:
            lam = 1.0 - beta if self.cfg.couple_lambda else torch.sigmoid(z[:, 4])
            keep, erase, write = gate_coefficients(beta, lam, mode)
            coef = write * z[:, 2] - erase * rk[..., 1]
            self.state = keep[..., None] * S + coef[..., None] * k[:, :, None, :]
        return self.scale * rk[..., 0].reshape(B, 1, H * r)

    def decode_with_kernel(self, x: torch.Tensor) -> torch.Tensor | None:
        """The fused C decode step for one token of ``x`` (B, 1, d): returns the scaled reads like
        :meth:`forward` (in a buffer the next step reuses) and leaves each corrected projection's
        ``W_Δ reads`` in ``kernel_deltas`` ((out,) for one sequence, else (B, 1, out)); None (nothing
        done) where the C step does not apply and :meth:`forward` must run instead.

        It applies to a token-granularity decode step (a state exists) of a float32/float64 memory on the
        CPU with autograd off (the C step records no graph), as in ``generate``. With
        ``decode_backend='c'`` a decode step it cannot run is an error instead of a silent fallback.
        This runs once per layer and token, so the usual step is a handful of attribute reads: whatever
        can change between steps (the weights' storage, the batch, the input's dtype and device, the
        config) is in the plan's key, and anything else rebuilds the plan or refuses."""
        cfg, S = self.cfg, self.state
        if S is None or cfg.decode_backend == "torch" or x.dim() != 3 or x.shape[1] != 1:
            return None  # the first call (no state yet) and prefills run the checked scan
        if torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in self.parameters())):
            return self._refuse("autograd is on (the C step records no graph; decode under torch.no_grad())")
        ip, corrections = self._modules["in_proj"]._parameters, self._modules["deltas"]._modules.values()
        key = (
            _INPUT_KEY(x), _CONFIG_KEY(cfg), ip["weight"].data_ptr(), ip["bias"].data_ptr(),
            # the correction weights, read afresh (a module may be replaced); C-level maps, no frames
            *map(torch.Tensor.data_ptr, map(_WEIGHT, map(_PARAMS, corrections))),
        )  # fmt: skip
        plan = self._plan
        if plan is None or plan.key != key:
            plan = self._build_plan(x, key)
            if isinstance(plan, str):
                return self._refuse(plan)
        if S is not self._kernel_state:
            # the first C step after a prefill (or any other write of the state): a private contiguous
            # copy, which the C steps then update in place. A fresh tensor, never one the caller or an
            # autograd graph may hold, so in-place writes (invisible to autograd) cannot corrupt them.
            if S.shape != plan.state_shape:
                return None  # a state of another batch or size: the checked path names the error
            S = self._kernel_state = torch.empty(S.shape, dtype=plan.dtype, device="cpu").copy_(S)
            plan.struct.contents.state = S.data_ptr()  # the C step's state from now on (the plan holds it)
            plan.held[-1][0] = S
        x = x.contiguous()  # bound to a name: a temporary's memory would be freed before the kernel reads it
        plan.kernel(plan.struct, x.data_ptr())
        step = self.__dict__  # plain per-step attributes, written directly (see __setattr__)
        step["state"], step["kernel_deltas"] = S, plan.deltas
        return plan.reads

    def _refuse(self, why: str) -> None:
        if self.cfg.decode_backend == "c":
            raise InputError(
                f"decode_backend='c' cannot run this decode step of δ-Mem layer {self.index}: {why}"
            )
        return None

    def _build_plan(self, x: torch.Tensor, key: tuple) -> _KernelPlan | str:
        """The C step's fixed arguments for this layer, or why the C step cannot run (a string). Rebuilt
        whenever the key changes: a weight moved (``.to()``, a reload), the batch, the input or the config."""
        self._plan = None  # nothing of an old plan is used (or kept alive) past a refusal
        cfg = self.cfg
        fns = kernels()
        if fns is None:
            return kernel_status()
        if cfg.write_granularity != "token":
            return f"write_granularity={cfg.write_granularity!r} (only 'token' has a C step)"
        ip = self._modules["in_proj"]._parameters
        W = ip["weight"]
        targets = dict(self._modules["deltas"]._modules)
        weights = (W, ip["bias"], *[lin.weight for lin in targets.values()])
        B, H, r = x.shape[0], cfg.heads, cfg.rank
        if not x.is_cpu or not all(w.is_cpu for w in weights):  # a device address would crash the C step
            return f"the input is on {x.device}, the memory on {W.device} (the C step runs on the CPU)"
        if W.dtype not in (torch.float32, torch.float64) or x.dtype != W.dtype:
            return (
                f"the input is {x.dtype}, the memory {W.dtype} (the C step takes float32 or float64, alike)"
            )
        if any(w.dtype != W.dtype or not w.is_contiguous() for w in weights):
            return "the memory's weights are not all contiguous and of one dtype"  # copies would go stale
        # every size the C step indexes by, against the config it reads (the config may have been edited)
        groups = 4 if cfg.couple_lambda else 5
        if W.shape != (groups * H * r, x.shape[2]) or weights[1].shape != (groups * H * r,):
            need = f"({groups * H * r}, {x.shape[2]})"
            return f"in_proj is {tuple(W.shape)}; the config (heads, rank, couple_lambda) needs {need}"
        if any(w.dim() != 2 or w.shape[1] != H * r for w in weights[2:]) or len(targets) > 4:
            return "a correction weight does not take heads × rank inputs"
        z, reads = W.new_empty(W.shape[0]), W.new_empty(B, 1, H * r)
        outs = {t: W.new_empty(B, 1, w.shape[0]) for t, w in zip(targets, weights[2:], strict=True)}
        # one sequence: the projections take their correction as a bias, (out,)-shaped views of outs
        ready = {t: o.view(-1) for t, o in outs.items()} if B == 1 else outs
        struct = Plan(
            w_in=W.data_ptr(), b_in=weights[1].data_ptr(), z=z.data_ptr(), state=None,
            reads=reads.data_ptr(), batch=B, d=W.shape[1], heads=H, r=r, n_groups=groups,
            mode=UPDATE_MODE_CODES[cfg.state_update_mode], couple=int(cfg.couple_lambda), scale=self.scale,
        )  # fmt: skip
        for slot, (t, w) in enumerate(zip(outs, weights[2:], strict=True)):
            struct.dw[slot], struct.dout[slot], struct.dn[slot] = w.data_ptr(), outs[t].data_ptr(), w.shape[0]
        kernel = fns[str(W.dtype).removeprefix("torch.")]
        # holds every tensor the struct points into, so the pointers stay valid as long as the plan
        # the last slot will hold the state the struct points to (set with it by decode_with_kernel)
        held = (weights, z, outs, [None])
        self._plan = _KernelPlan(
            key, ctypes.pointer(struct), kernel, W.dtype, (B, H, r, r), ready, reads, held
        )
        self._kernel_state = None  # the next step copies the state afresh (and checks its batch)
        return self._plan

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Read (before write) for every token of ``x`` (B, T, d), update the state; returns the reads
        times the correction scale α/r, (B, T, H*r). A single-token call (a decode step) takes a fast
        path; its finiteness check is skipped (it would cost a host sync per layer and token) — the
        prefill and every multi-token call are checked."""
        d = self.in_proj.in_features
        if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.dim() == 3 and x.shape[-1] == d):
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise InputError(
                f"hidden states entering δ-Mem layer {self.index} must be a float (batch, tokens, {d}) "
                f"tensor, got {got}" + (f" of {x.dtype}" if isinstance(x, torch.Tensor) else "")
            )
        B, T, _ = x.shape
        if T == 0:  # nothing to read or write (features() cannot reshape an empty sequence)
            return x.new_zeros(B, 0, self.cfg.heads * self.cfg.rank, dtype=self.in_proj.weight.dtype)
        if self.state is not None and self.state.shape[0] != B:
            raise InputError(
                f"batch size {B} differs from the memory state's {self.state.shape[0]}; "
                "call reset_state(model)"
            )
        dtype = self.in_proj.weight.dtype
        if self.state is not None and self.state.dtype != dtype:  # the model was cast mid-conversation
            for name in ("state", "acc_sum", "acc_n"):
                carried = getattr(self, name)
                if carried is not None:
                    setattr(self, name, carried.to(dtype))
        if T == 1 and self.cfg.write_granularity == "token" and self.state is not None:
            return self._decode_step(x if x.dtype == dtype else x.to(dtype))
        if self.cfg.check_finite:
            if not bool(torch.isfinite(x).all()):
                raise InputError(f"hidden states entering δ-Mem layer {self.index} contain NaN or inf")
            if self.state is not None and not bool(torch.isfinite(self.state).all()):
                # a decode step (unchecked, for speed) wrote NaN/inf: say so instead of blaming the
                # next layer's hidden states
                raise InputError(
                    f"the memory state of δ-Mem layer {self.index} holds NaN or inf (written by an "
                    "earlier non-finite step); call reset_state(model)"
                )
        x = x.to(dtype)
        H, r = self.cfg.heads, self.cfg.rank
        if self.cfg.write_granularity == "token":
            q, k, v, beta, lam = self.features(x)
            keep, erase, write = gate_coefficients(beta, lam, self.cfg.state_update_mode)
        else:
            seg, is_b = self._segment_inputs(x)
            q = self.features(x)[0]
            _, k, v, beta, lam = self.features(seg)
            keep, erase, write = gate_coefficients(beta, lam, self.cfg.state_update_mode)
            m = is_b[:, None, :, None].to(x.dtype)  # (B, 1, T, 1)
            keep = 1.0 - m + m * keep
            erase, write = m * erase, m * write
        reads, self.state = scan(
            q, k, v, keep, erase, write, self.state, backend=self.cfg.backend, chunk=self.cfg.chunk
        )
        return self.scale * reads.permute(0, 2, 1, 3).reshape(B, T, H * r)

    def correction(self, target: str) -> torch.Tensor:
        """``(α/r) W_Δ r_t`` for ``target`` (``reads`` already carry the α/r scale)."""
        return nn.functional.linear(self.reads, self.deltas[target].weight)  # no module-call overhead
