"""A tiny masked diffusion LM trained by the package on samples of a synthetic language (needs torch).

The network is a small bidirectional transformer over L positions with V tokens plus a mask token.
Training (Adam, cosine decay) uses the standard masked-diffusion objective: draw t ~ U(0, 1), mask
each position with probability t (at least one), and minimise the cross-entropy of the masked
positions. The trained network is wrapped as a predictor with
:class:`~entropy_unmask.predictors.LogitsPredictor`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from entropy_unmask.data import Joint
from entropy_unmask.predictors import LogitsPredictor
from papershelf.errors import MissingDependencyError, check_int


def _torch():
    try:
        import torch
    except ImportError:
        raise MissingDependencyError("torch", package="entropy-unmask", extra="bench") from None
    return torch


def build_model(L: int, V: int, d: int = 64, layers: int = 2, heads: int = 4):
    torch = _torch()
    nn = torch.nn

    class TinyMDM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(V + 1, d)
            self.pos = nn.Parameter(torch.randn(L, d) * 0.02)
            layer = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, V)

        def forward(self, ids):
            return self.head(self.norm(self.enc(self.tok(ids) + self.pos)))

    return TinyMDM()


@dataclass
class TrainedMDM:
    model: Any
    L: int
    V: int
    steps: int
    final_loss: float
    seconds: float

    @property
    def mask_id(self) -> int:
        return self.V

    def predictor(self) -> LogitsPredictor:
        torch = _torch()
        model = self.model

        def logits(ids: np.ndarray):
            with torch.no_grad():
                return model(torch.as_tensor(ids, dtype=torch.long))

        return LogitsPredictor(logits, mask_id=self.mask_id, V=self.V)


def train_mdm(
    joint: Joint,
    *,
    steps: int = 1200,
    batch: int = 128,
    lr: float = 3e-3,
    seed: int = 0,
    d: int = 64,
    layers: int = 2,
    log: Any = None,
) -> TrainedMDM:
    """Train the tiny MDM on fresh samples of ``joint`` (one torch thread)."""
    torch = _torch()
    steps = check_int("steps", steps, low=1)
    batch = check_int("batch", batch, low=1)
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    L, V = joint.L, joint.V
    model = build_model(L, V, d=d, layers=layers)
    # Adam with a cosine learning-rate decay, written out: torch.optim imports torch._dynamo, which
    # costs seconds of start-up for a model this small.
    params = [p for p in model.parameters() if p.requires_grad]
    m1 = [torch.zeros_like(p) for p in params]
    m2 = [torch.zeros_like(p) for p in params]
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    t0 = time.perf_counter()
    loss_val = float("nan")
    for step in range(steps):
        x = torch.as_tensor(joint.sample(batch, rng))
        t = torch.as_tensor(rng.uniform(0.0, 1.0, size=(batch, 1)))
        m = torch.as_tensor(rng.random((batch, L))) < t
        none = ~m.any(dim=1)
        m[none, torch.as_tensor(rng.integers(0, L, size=int(none.sum())))] = True
        ids = torch.where(m, torch.full_like(x, V), x)
        logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits[m], x[m])
        for p in params:
            p.grad = None
        loss.backward()
        lr_t = lr * 0.5 * (1.0 + math.cos(math.pi * step / steps))
        with torch.no_grad():
            for p, a, b in zip(params, m1, m2):
                a.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                b.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                denom = (b / (1 - beta2 ** (step + 1))).sqrt_().add_(eps)
                p.addcdiv_(a, denom, value=-lr_t / (1 - beta1 ** (step + 1)))
        loss_val = float(loss.detach())
        if log is not None and (step % 500 == 0 or step == steps - 1):
            log(f"  step {step:5d}  loss {loss_val:.4f}")
    model.eval()
    return TrainedMDM(model, L, V, steps, loss_val, time.perf_counter() - t0)
