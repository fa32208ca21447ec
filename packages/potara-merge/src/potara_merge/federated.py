"""An in-process federated simulation with exact round and byte metering.

One frozen base model (an MLP pretrained on a public split) carries one LoRA adapter through PEFT; the
server and every client exchange only the adapter's tensors. States are dicts ``name -> tensor`` of the
adapter parameters, swapped into the single PEFT model before each client's computation, so the
simulation is sequential and deterministic for a seed.

:class:`CommMeter` counts every tensor that crosses the network: with full participation one FedAvg
round costs ``clients × adapter_bytes`` upstream and the same downstream.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from papershelf.errors import InputError

State = dict[str, torch.Tensor]


# ---- model --------------------------------------------------------------------------------------------
def base_mlp(n_features: int = 64, hidden: int = 64, n_classes: int = 10, *, seed: int = 0) -> nn.Sequential:
    """A 3-layer ReLU MLP (the frozen base); its Linear layers are named "0", "2", "4"."""
    g = torch.Generator().manual_seed(seed)
    m = nn.Sequential(
        nn.Linear(n_features, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, n_classes),
    )
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (1.0 / max(p.shape[-1], 1)) ** 0.5)
    return m


class Adam:
    """Plain Adam (Kingma & Ba) on a list of tensors; torch.optim's first use imports torch._dynamo,
    which costs tens of seconds on a loaded machine, and this loop is all the simulation needs."""

    def __init__(self, params: list[torch.Tensor], lr: float, betas=(0.9, 0.999), eps: float = 1e-8):
        self.params, self.lr, self.b1, self.b2, self.eps, self.t = list(params), lr, *betas, eps, 0
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        c1, c2 = 1 - self.b1**self.t, 1 - self.b2**self.t
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            if p.grad is None:
                continue
            m.mul_(self.b1).add_(p.grad, alpha=1 - self.b1)
            v.mul_(self.b2).addcmul_(p.grad, p.grad, value=1 - self.b2)
            p.addcdiv_(m, (v / c2).sqrt_().add_(self.eps), value=-self.lr / c1)


def pretrain(
    model: nn.Module, X: torch.Tensor, y: torch.Tensor, *, steps: int = 300, seed: int = 0
) -> nn.Module:
    """Full training of the base model on the public split (Adam, batch 64)."""
    g = torch.Generator().manual_seed(seed)
    opt = Adam(list(model.parameters()), lr=3e-3)
    for _ in range(steps):
        idx = torch.randint(0, X.shape[0], (64,), generator=g)
        opt.zero_grad()
        nn.functional.cross_entropy(model(X[idx]), y[idx]).backward()
        opt.step()
    return model


class LoRALinear(nn.Module):
    """A frozen Linear plus a LoRA update ``s B A`` — the same maths, parameter names (``lora_A.weight``,
    ``lora_B.weight``) and initialisation (A Kaiming-uniform, B zero) as PEFT's LoRA layer, without
    PEFT's import cost, for the simulation's inner loops. :func:`to_peft_state` maps its state to PEFT.
    """

    def __init__(self, base: nn.Linear, rank: int, alpha: float, generator: torch.Generator):
        super().__init__()
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        dtype = base.weight.dtype  # the factors take the frozen layer's dtype, as PEFT's do
        self.lora_A = nn.Linear(base.in_features, rank, bias=False, dtype=dtype)
        self.lora_B = nn.Linear(rank, base.out_features, bias=False, dtype=dtype)
        bound = 1.0 / math.sqrt(base.in_features)  # kaiming_uniform_(a=√5) on a (rank, in) matrix
        with torch.no_grad():
            self.lora_A.weight.uniform_(-bound, bound, generator=generator)
            self.lora_B.weight.zero_()
        self.scaling = alpha / rank
        self.override: tuple[torch.Tensor, torch.Tensor] | None = None  # (A, B) set by forward_with

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.override is not None:
            A, B = self.override
            return self.base(x) + (x @ A.T) @ B.T * self.scaling
        return self.base(x) + self.lora_B(self.lora_A(x)) * self.scaling


def lora_model(
    base: nn.Module,
    *,
    rank: int = 4,
    alpha: float = 8.0,
    seed: int = 0,
    targets: tuple[str, ...] | None = None,
) -> nn.Module:
    """Freeze ``base`` and put a LoRA update on its Linear layers (in place; returns ``base``).

    ``targets=None``: every Linear that is a direct child (the MLP). Otherwise every Linear, at any depth,
    whose own name is in ``targets`` (PEFT's ``target_modules``, e.g. ``("q_proj", "v_proj")``).
    """
    g = torch.Generator().manual_seed(seed)
    for p in base.parameters():
        p.requires_grad_(False)
    if targets is None:
        for name, mod in list(base.named_children()):
            if isinstance(mod, nn.Linear):
                setattr(base, name, LoRALinear(mod, rank, alpha, g))
        return base
    hits = [
        (parent, child)
        for _, parent in base.named_modules()
        for child, mod in parent.named_children()
        if child in targets and isinstance(mod, nn.Linear)
    ]
    if not hits:
        linear = sorted({n.rsplit(".", 1)[-1] for n, m in base.named_modules() if isinstance(m, nn.Linear)})
        raise InputError(f"lora_model: no Linear layer named {sorted(targets)}; the model's are {linear}")
    for parent, child in hits:
        setattr(parent, child, LoRALinear(getattr(parent, child), rank, alpha, g))
    return base


def lora_layers(model: nn.Module) -> list[tuple[str, LoRALinear]]:
    """The model's LoRA layers with their qualified names, in module order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, LoRALinear)]


def forward_with(model: nn.Module, state: Mapping[str, torch.Tensor], X: torch.Tensor) -> torch.Tensor:
    """``model(X)`` with the adapter tensors taken from ``state`` (differentiable in them)."""
    layers = lora_layers(model)
    try:
        for name, mod in layers:
            mod.override = (state[f"{name}.lora_A.weight"], state[f"{name}.lora_B.weight"])
        return model(X)
    finally:
        for _, mod in layers:
            mod.override = None


def to_peft_state(state: Mapping[str, torch.Tensor], prefix: str = "base_model.model.") -> State:
    """Keys of :func:`lora_model`'s adapter -> PEFT's saved keys (``base_model.model.0.lora_A.weight``)."""
    return {prefix + k: v for k, v in state.items()}


def peft_config(rank: int, alpha: float, targets: list[str]) -> dict:
    """The adapter_config.json content matching :func:`lora_model` (PEFT LoraConfig fields)."""
    return {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": alpha,
        "target_modules": sorted(targets),
        "lora_dropout": 0.0,
        "bias": "none",
        "use_rslora": False,
        "use_dora": False,
        "fan_in_fan_out": False,
        "task_type": None,
        "base_model_name_or_path": None,
        "inference_mode": True,
    }


def get_state(model: nn.Module) -> State:
    """A detached copy of the trainable (adapter) parameters."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def set_state(model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.requires_grad:
                p.copy_(state[n])


def state_bytes(state: Mapping[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


def average(states: list[State], weights: list[float]) -> State:
    tot = float(sum(weights))
    return {k: sum(w / tot * s[k] for s, w in zip(states, weights, strict=True)) for k in states[0]}


def mix(
    fed: State, loc: State, lam: float | Mapping[str, float], module_of: Callable[[str], str] | None = None
):
    """Parameter-wise ``λ fed + (1 − λ) loc`` (λ per module when a mapping is given)."""
    out = {}
    for k in fed:
        w = lam[module_of(k)] if isinstance(lam, Mapping) else lam
        out[k] = w * fed[k] + (1 - w) * loc[k]
    return out


# ---- metering -----------------------------------------------------------------------------------------
@dataclass
class CommMeter:
    """Exact count of bytes and messages sent each way."""

    up_bytes: int = 0
    down_bytes: int = 0
    up_messages: int = 0
    down_messages: int = 0
    rounds: int = 0
    log: list[tuple[int, int]] = field(default_factory=list)  # (round, cumulative total bytes)

    def send_down(self, state: Mapping[str, torch.Tensor], n_clients: int = 1) -> None:
        self.down_bytes += state_bytes(state) * n_clients
        self.down_messages += n_clients

    def send_up(self, state: Mapping[str, torch.Tensor]) -> None:
        self.up_bytes += state_bytes(state)
        self.up_messages += 1

    def end_round(self) -> None:
        self.rounds += 1
        self.log.append((self.rounds, self.total))

    @property
    def total(self) -> int:
        return self.up_bytes + self.down_bytes


# ---- local computation --------------------------------------------------------------------------------
def train(
    model: nn.Module,
    state: State,
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    steps: int,
    lr: float = 5e-3,
    batch: int = 32,
    seed: int = 0,
    prox: tuple[float, State] | None = None,
) -> State:
    """``steps`` Adam steps on the adapter from ``state``; ``prox=(μ, w)`` adds ``μ/2 ‖θ − w‖²`` (Ditto)."""
    if X.shape[0] == 0:
        raise InputError("train: the client has no training data")
    set_state(model, state)
    params = [p for p in model.parameters() if p.requires_grad]
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    opt = Adam(params, lr=lr)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(0, X.shape[0], (min(batch, X.shape[0]),), generator=g)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(X[idx]), y[idx])
        if prox is not None:
            mu, w = prox
            loss = loss + 0.5 * mu * sum(((p - w[n]) ** 2).sum() for n, p in zip(names, params, strict=True))
        loss.backward()
        opt.step()
    return get_state(model)


@torch.no_grad()
def accuracy(model: nn.Module, state: State, X: torch.Tensor, y: torch.Tensor) -> float:
    """Top-1 accuracy; the class axis of the logits is dim 1 (``(n, C)``, or ``(n, C, T)`` for a sequence
    model, where every position counts once)."""
    set_state(model, state)
    return float((model(X).argmax(1) == y).float().mean())


def check_clients(clients: list) -> None:
    """Every client must hold training data (named otherwise), before any round starts."""
    for c in clients:
        if c.n_train == 0:
            raise InputError(f"client {c.cid} has no training data")


@dataclass
class FedAvgResult:
    checkpoints: dict[int, State]  # round -> global adapter after that round (0 = the initial adapter)
    bytes_at: dict[int, int]  # round -> cumulative bytes
    meter: CommMeter
    wire_bytes: int | None = None  # what a framework actually serialised (Flower engine); None in the loop


def fedavg(
    model: nn.Module,
    clients: list,
    init: State,
    *,
    rounds: int,
    local_steps: int = 5,
    lr: float = 5e-3,
    batch: int = 32,
    seed: int = 0,
    checkpoints: Iterable[int] | None = None,
    on_round: Callable[[int, State, list[State]], None] | None = None,
) -> FedAvgResult:
    """FedAvg over LoRA adapters (FedIT): broadcast, ``local_steps`` local steps, weighted average.

    ``on_round(r, global_before, client_states)`` lets personalisation baselines piggy-back on the same
    trajectory without changing the traffic (Ditto and APFL send exactly FedAvg's messages).
    """
    if rounds < 0:
        raise InputError(f"rounds must be >= 0, got {rounds}")
    check_clients(clients)
    keep = set(range(rounds + 1)) if checkpoints is None else set(checkpoints) | {0, rounds}
    meter = CommMeter()
    w = {k: v.clone() for k, v in init.items()}
    ck, bytes_at = {0: w}, {0: 0}
    for r in range(1, rounds + 1):
        meter.send_down(w, len(clients))
        locals_ = []
        for c in clients:
            s = train(
                model,
                w,
                c.X_train,
                c.y_train,
                steps=local_steps,
                lr=lr,
                batch=batch,
                seed=seed * 100003 + r * 1009 + c.cid,
            )
            meter.send_up(s)
            locals_.append(s)
        if on_round is not None:
            on_round(r, w, locals_)
        w = average(locals_, [c.n_train for c in clients])
        meter.end_round()
        bytes_at[r] = meter.total
        if r in keep:
            ck[r] = w
    return FedAvgResult(ck, bytes_at, meter)


def lora_per_sample_grads(model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> State:
    """Per-sample ``∇ log p(y_s | x_s)`` for every :class:`LoRALinear` in ``model`` from ONE batched backward.

    For a LoRA layer ``o = W h + s B A h`` and the output gradient ``g = ∂ log p / ∂ o`` (samples are
    independent, so one backward of the summed log-likelihood yields every sample's ``g``):
    ``∂/∂B = s Σ_t g_t (A h_t)ᵀ`` and ``∂/∂A = s Σ_t (Bᵀ g_t) h_tᵀ``, the sums over every position t of
    sample s (one position for a classifier; every token of a window for a sequence model, whose
    log-likelihood is the sum over its positions). Tested equal to one backward per sample.
    """
    from potara_merge.fisher import log_likelihood

    layers = lora_layers(model)
    inputs: dict[str, torch.Tensor] = {}
    outputs: dict[str, torch.Tensor] = {}

    def capture(name):
        def hook(_mod, args, out):
            inputs[name] = args[0].detach()
            outputs[name] = out

        return hook

    handles = [mod.register_forward_hook(capture(name)) for name, mod in layers]
    try:
        logp = log_likelihood(model(X), y).sum()
    finally:
        for h in handles:
            h.remove()
    names = [n for n, _ in layers]
    gouts = torch.autograd.grad(logp, [outputs[n] for n in names], allow_unused=True)
    out: State = {}
    for (name, mod), g in zip(layers, gouts, strict=True):
        hin = inputs[name]
        g = torch.zeros_like(outputs[name]) if g is None else g
        hin, g = hin.reshape(hin.shape[0], -1, hin.shape[-1]), g.reshape(g.shape[0], -1, g.shape[-1])
        A, B = mod.lora_A.weight.detach(), mod.lora_B.weight.detach()
        s = mod.scaling
        out[f"{name}.lora_A.weight"] = s * torch.einsum("ntr,nti->nri", g @ B, hin)
        out[f"{name}.lora_B.weight"] = s * torch.einsum("nto,ntr->nor", g, hin @ A.T)
    return out
