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
import zipfile
import zlib
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


_CONFIG_LIMITS = {
    "vocab": 1 << 20,
    "length": 1 << 20,
    "d_model": 1 << 14,
    "n_layers": 64,
    "n_heads": 256,
    "d_ff": 1 << 16,
}
_MAX_PARAMS = 1 << 28  # 1 GiB of float32: far above any TinyMDM, far below a memory blow-up


def _checked_config(raw, where: str) -> MDMConfig:
    """The checkpoint's ``__config__`` as an :class:`MDMConfig`, refused unless every field is a
    positive integer within bounds and ``n_heads`` divides ``d_model`` (before anything is built)."""
    fields = set(_CONFIG_LIMITS)
    if not isinstance(raw, dict) or set(raw) != fields:
        got = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
        raise InputError(f"{where}: config must have the fields {sorted(fields)}, got {got}")
    for key, high in _CONFIG_LIMITS.items():
        v = raw[key]
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= high:
            raise InputError(f"{where}: config {key} must be an integer in [1, {high}], got {v!r}")
    if raw["d_model"] % raw["n_heads"]:
        raise InputError(
            f"{where}: config d_model = {raw['d_model']} is not divisible by n_heads = {raw['n_heads']}"
        )
    cfg = MDMConfig(**raw)
    if _num_params(cfg) > _MAX_PARAMS:
        raise InputError(f"{where}: config {raw} has more than {_MAX_PARAMS} parameters")
    return cfg


def _num_params(cfg: MDMConfig) -> int:
    """Parameter count of a :class:`TinyMDM` (closed form, so that a huge config is refused at once)."""
    d, f, V = cfg.d_model, cfg.d_ff, cfg.vocab
    per_layer = 4 * d * d + 2 * d * f + 9 * d + f  # attention in/out projections, feed-forward, 2 norms
    return 2 * V * d + cfg.length * d + cfg.n_layers * per_layer + 2 * d + V


def _expected_shapes(cfg: MDMConfig) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` of a :class:`TinyMDM` state dict for ``cfg`` (built on the meta device)."""
    with torch.device("meta"):
        net = TinyMDM(cfg)
    return {k: tuple(v.shape) for k, v in net.state_dict().items()}


def _array_header(archive, name: str) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of one array of an ``.npz`` from its ``.npy`` header (no data is read)."""
    with archive.zip.open(name + ".npy") as fh:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
    return tuple(shape), dtype


def load(path: str | Path) -> TinyMDM:
    """A :class:`TinyMDM` from a checkpoint written by :func:`save`.

    Everything is checked before the model is built: the config (positive bounded integers, ``n_heads``
    divides ``d_model``), then every saved tensor's name, shape and dtype against the architecture
    (read from the ``.npy`` headers, before any data is decompressed), then finiteness.  A missing,
    corrupt or mismatched checkpoint raises one :class:`InputError` naming the file.
    """
    path = Path(path)
    where = f"model weights {str(path)!r}"
    if not path.is_file():
        raise InputError(f"no model weights at {str(path)!r}")
    try:
        archive = np.load(path, allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise InputError(f"cannot read {where}: a single .npy array, not an .npz written by save()")
        with archive as data:
            if "__config__" not in data.files:
                raise InputError(f"cannot read {where}: no __config__ entry (not written by save())")
            try:
                raw = json.loads(bytes(data["__config__"]).decode())
            except (UnicodeDecodeError, json.JSONDecodeError):
                raise InputError(f"cannot read {where}: __config__ is not JSON") from None
            cfg = _checked_config(raw, where)
            shapes = _expected_shapes(cfg)
            saved = [k for k in data.files if not k.startswith("__")]
            missing, extra = sorted(set(shapes) - set(saved)), sorted(set(saved) - set(shapes))
            if missing or extra:
                raise InputError(
                    f"{where} do not match the TinyMDM architecture of their config "
                    f"(missing {missing[:3]}, unexpected {extra[:3]})"
                )
            for k in saved:
                shape, dtype = _array_header(data, k)
                if shape != shapes[k] or dtype.kind != "f":
                    raise InputError(
                        f"{where}: tensor {k!r} has shape {shape} and dtype {dtype}, "
                        f"the config needs shape {shapes[k]} (floating point)"
                    )
            state = {}
            for k in saved:
                arr = data[k].astype(np.float32)
                if not np.isfinite(arr).all():
                    raise InputError(f"{where}: tensor {k!r} holds NaN or inf")
                state[k] = torch.from_numpy(arr)
    except InputError:
        raise
    except (OSError, EOFError, ValueError, KeyError, TypeError, zipfile.BadZipFile, zlib.error) as exc:
        raise InputError(f"cannot read {where} ({type(exc).__name__}: corrupt or not an .npz)") from None
    model = TinyMDM(cfg)
    model.load_state_dict(state)
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
