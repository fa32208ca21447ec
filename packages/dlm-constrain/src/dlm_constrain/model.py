"""A tiny masked-diffusion LM (bidirectional transformer) trained by this package on the tasks.

Training follows the masked-diffusion objective: draw ``t ~ U(0, 1)``, mask each answer position with
probability ``t`` (the prompt is always visible), and minimise the cross-entropy of the masked positions.
The shipped weights (``weights/tiny_mdm.npz``, float16) were produced by ``dlm-constrain train`` with the
defaults below; loading never downloads anything.

>>> model = load_pretrained()
>>> sum(p.numel() for p in model.parameters()) < 400_000
True
"""

from __future__ import annotations

import functools
import json
import operator
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from dlm_constrain import tasks
from papershelf.errors import InputError
from papershelf.repro import atomic_path

WEIGHTS = Path(__file__).resolve().parent / "weights" / "tiny_mdm.npz"


@dataclass(frozen=True)
class MDMConfig:
    vocab: int = len(tasks.VOCAB)
    length: int = tasks.PROMPT_LEN + tasks.ANSWER_LEN
    d_model: int = 96
    n_layers: int = 3
    n_heads: int = 4
    d_ff: int = 256


class TinyMDM(nn.Module):
    """Token + position embeddings, ``n_layers`` pre-norm encoder blocks, tied-free output head."""

    def __init__(self, cfg: MDMConfig = MDMConfig()) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.length, cfg.d_model)
        layer = nn.TransformerEncoderLayer(
            cfg.d_model, cfg.n_heads, cfg.d_ff, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, cfg.n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """``ids`` LongTensor ``[B, L]`` -> logits ``[B, L, vocab]``."""
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = self.tok(ids) + self.pos(pos)[None]
        return self.head(self.norm(self.blocks(h)))


def _batch(rng: np.random.Generator, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    insts = [tasks._instance(tasks.TASKS[int(rng.integers(3))], rng) for _ in range(size)]
    rows = [functools.reduce(operator.iadd, tasks.format_example(i), []) for i in insts]
    return torch.tensor(rows, dtype=torch.long), torch.tensor(rng.random(size), dtype=torch.float32)


def train(
    steps: int = 800,
    batch: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    cfg: MDMConfig = MDMConfig(),
    log_every: int = 250,
    quiet: bool = False,
) -> tuple[TinyMDM, list[dict]]:
    """Train a :class:`TinyMDM` from scratch on the task mixture; returns the model and a loss log."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = TinyMDM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.05)
    P = tasks.PROMPT_LEN
    log: list[dict] = []
    start = time.perf_counter()
    running = 0.0
    for step in range(1, steps + 1):
        ids, t = _batch(rng, batch)
        t = t.clamp_min(0.05)[:, None]
        mask = torch.zeros_like(ids, dtype=torch.bool)
        mask[:, P:] = torch.rand(ids.shape[0], ids.shape[1] - P) < t
        inp = ids.masked_fill(mask, tasks.MASK_ID)
        logits = model(inp)
        loss = nn.functional.cross_entropy(logits[mask], ids[mask])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        running += float(loss.detach())
        if step % log_every == 0 or step == steps:
            k = log_every if step % log_every == 0 else step % log_every
            entry = {"step": step, "loss": running / k, "seconds": time.perf_counter() - start}
            log.append(entry)
            running = 0.0
            if not quiet:
                print(f"step {step:5d}  loss {entry['loss']:.4f}  {entry['seconds']:.0f}s", flush=True)
    model.eval()
    return model, log


def save(model: TinyMDM, path: str | Path, meta: dict | None = None) -> None:
    """float16 ``.npz`` of the state dict plus the config as JSON (written atomically)."""
    arrays = {k: v.detach().cpu().numpy().astype(np.float16) for k, v in model.state_dict().items()}
    arrays["__config__"] = np.frombuffer(json.dumps(asdict(model.cfg)).encode(), dtype=np.uint8)
    arrays["__meta__"] = np.frombuffer(json.dumps(meta or {}).encode(), dtype=np.uint8)
    with atomic_path(path, mode="wb") as fh:
        np.savez_compressed(fh, **arrays)


def load(path: str | Path) -> TinyMDM:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"no model weights at {str(path)!r}")
    try:
        with np.load(path, allow_pickle=False) as data:
            cfg = MDMConfig(**json.loads(bytes(data["__config__"]).decode()))
            state = {
                k: torch.from_numpy(data[k].astype(np.float32)) for k in data.files if not k.startswith("__")
            }
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"cannot read model weights {str(path)!r} ({type(exc).__name__})") from None
    model = TinyMDM(cfg)
    try:
        model.load_state_dict(state)
    except RuntimeError:
        raise InputError(f"model weights {str(path)!r} do not match the TinyMDM architecture") from None
    model.eval()
    return model


def load_pretrained() -> TinyMDM:
    """The shipped checkpoint (trained by ``dlm-constrain train``; see the README's Results)."""
    return load(WEIGHTS)


def window_model_fn(model: TinyMDM, inst: tasks.Instance):
    """A ``model_fn`` for :class:`~dlm_constrain.ConstrainedSampler`: logits of the answer window.

    The mask token's logit is set to -inf (a DLM never proposes the mask), so all strategies see the same
    distribution over real tokens.
    """
    prompt, _ = tasks.format_example(inst)
    prefix = torch.tensor(prompt, dtype=torch.long)
    mask_col = tasks.MASK_ID

    @torch.no_grad()
    def fn(x: torch.Tensor) -> torch.Tensor:
        logits = model(torch.cat([prefix, x])[None])[0, len(prefix) :].double()
        logits[:, mask_col] = -torch.inf
        return logits

    return fn
