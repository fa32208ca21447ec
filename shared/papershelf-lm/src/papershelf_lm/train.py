"""Training the testbed models: a mixture of corpus text and tasks, a length curriculum, answer-weighted
loss, resumable checkpoints.

A run lives in one folder: ``state.pt`` (model, optimizer, step, config; rewritten atomically every
``checkpoint_every`` steps), ``log.jsonl`` (one line per logged step) and, on completion, the exported
model (``model.safetensors`` + ``config.json`` + tokenizer files + ``train_config.json``). Calling
:func:`train` again on the same folder resumes from the last state.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from papershelf.errors import InputError, check_int, check_number
from papershelf.repro import atomic_write_json
from papershelf_lm.corpus import corpus_bytes, corpus_id
from papershelf_lm.model import build_model, get_preset
from papershelf_lm.tasks import TASKS, generate
from papershelf_lm.tokenizer import BOS, byte_tokenizer

SOURCES = ("text", "copy", *TASKS)
STAGE_FIELDS = ("batch_size", "mixture", "answer_weight", "context_weight", "text_weight", "per_row")


@dataclass
class TrainConfig:
    """Everything a training run depends on (stored with the run, so it resumes identically)."""

    preset: str
    steps: int = 2000
    batch_size: int = 16
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup: int = 100
    lr_horizon: int | None = None  # steps of the cosine decay (default: steps)
    cooldown: int = 0  # final steps of linear decay to min_lr
    weight_decay: float = 0.05
    # Stages (first step, sequence length) or (first step, length, {field: value, ...}): the length
    # curriculum, each stage optionally overriding the fields in STAGE_FIELDS (unset ones keep the default)
    curriculum: list[tuple] = field(default_factory=lambda: [(0, 128), (500, 256), (1000, 512)])
    # share of sequences per source; "text" is plain corpus text, "copy" a random span repeated later
    mixture: dict[str, float] = field(
        default_factory=lambda: {"text": 0.3, "mqar": 0.3, "passkey": 0.2, "niah": 0.1, "vartrack": 0.1}
    )
    answer_weight: float = 1.0  # loss weight of answer tokens
    context_weight: float = 0.1  # loss weight of the other tokens of task sequences
    text_weight: float = 1.0  # loss weight of the tokens of plain-text sequences
    # Normalise each sequence's weights to sum 1, so a task with 5 answer tokens in 1024 counts as much
    # as one whose every other token is an answer (otherwise long copy/MQAR rows drown out passkey)
    per_row: bool = False
    seed: int = 0
    # bf16 autocast for the forward/backward (weights and optimizer stay float32): 1.5x faster on CPUs
    # with AMX/AVX512-BF16, measured on this project's machine
    bf16: bool = True
    checkpoint_every: int = 100
    log_every: int = 10

    def __post_init__(self) -> None:
        get_preset(self.preset)
        check_int("steps", self.steps, low=1)
        check_int("batch_size", self.batch_size, low=1)
        check_number("lr", self.lr, low=0, low_open=True)
        check_int("cooldown", self.cooldown, low=0, high=self.steps)
        if self.lr_horizon is not None:
            check_int("lr_horizon", self.lr_horizon, low=1)
        _check_mixture(self.mixture)
        if not self.curriculum or any(len(stage) not in (2, 3) for stage in self.curriculum):
            raise InputError("curriculum stages must be [first step, length] or [first step, length, {...}]")
        self.curriculum = sorted((tuple(stage) for stage in self.curriculum), key=lambda stage: stage[0])
        if self.curriculum[0][0] != 0:
            raise InputError("the curriculum must start at step 0")
        context = get_preset(self.preset).context
        for stage in self.curriculum:
            check_int("curriculum length", stage[1], low=32, high=context)
            extra = stage[2] if len(stage) == 3 else {}
            if not isinstance(extra, dict) or set(extra) - set(STAGE_FIELDS):
                raise InputError(
                    f"curriculum stage {list(stage)}: only {', '.join(STAGE_FIELDS)} can change per stage"
                )
            if "batch_size" in extra:
                check_int("curriculum batch_size", extra["batch_size"], low=1)
            if "mixture" in extra:
                _check_mixture(extra["mixture"])
            for name in ("answer_weight", "context_weight", "text_weight"):
                if name in extra:
                    check_number(f"curriculum {name}", extra[name], low=0)

    def stage_at(self, step: int) -> dict:
        """The fields in effect at ``step``: ``length`` and every one of STAGE_FIELDS."""
        stage = [stage for stage in self.curriculum if stage[0] <= step][-1]
        extra = stage[2] if len(stage) == 3 else {}
        return {"length": stage[1], **{name: extra.get(name, getattr(self, name)) for name in STAGE_FIELDS}}

    def length_at(self, step: int) -> int:
        return self.stage_at(step)["length"]

    def lr_at(self, step: int) -> float:
        """Linear warm-up, cosine decay towards ``min_lr`` over ``lr_horizon`` steps (default: ``steps``),
        then, over the last ``cooldown`` steps, a linear decay to ``min_lr``.

        A horizon longer than the run with a cool-down shortens a run without changing the learning
        rate of any step before the cool-down (so a shortened run is still reproducible from step 0).
        """
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        start = self.steps - self.cooldown
        if self.cooldown and step >= start:
            at_start = self._cosine(start)
            return at_start + (self.min_lr - at_start) * (step - start + 1) / self.cooldown
        return self._cosine(step)

    def _cosine(self, step: int) -> float:
        horizon = self.lr_horizon or self.steps
        progress = min(1.0, max(0, step - self.warmup) / max(1, horizon - self.warmup))
        return self.min_lr + 0.5 * (self.lr - self.min_lr) * (1 + math.cos(math.pi * progress))


def _check_mixture(mixture) -> None:
    if not isinstance(mixture, dict) or not mixture:
        raise InputError("mixture must be a non-empty mapping of source -> weight")
    unknown = set(mixture) - set(SOURCES)
    if unknown:
        raise InputError(f"unknown mixture source(s) {sorted(unknown)}; known: {', '.join(SOURCES)}")
    if min(mixture.values()) < 0 or sum(mixture.values()) <= 0:
        raise InputError("mixture weights must be non-negative with a positive sum")


def make_batch(config: TrainConfig, step: int):
    """(input ids, per-token loss weights, answer mask, source of each row) for one step, deterministic
    in (seed, step)."""
    import torch

    rng = np.random.default_rng([config.seed, step])
    stage = config.stage_at(step)
    length, batch_size, mixture = stage["length"], stage["batch_size"], stage["mixture"]
    sources = list(mixture)
    probs = np.array([mixture[s] for s in sources], dtype=float)
    picks = rng.choice(len(sources), size=batch_size, p=probs / probs.sum())
    text = corpus_bytes("train")
    ids = np.empty((batch_size, length), dtype=np.int64)
    weights = np.empty((batch_size, length), dtype=np.float32)
    answers = np.zeros((batch_size, length), dtype=bool)
    for row, pick in enumerate(picks):
        source = sources[pick]
        if source == "text":
            start = int(rng.integers(0, len(text) - length))
            ids[row] = [BOS, *text[start : start + length - 1]]
            weights[row] = stage["text_weight"]
        elif source == "copy":
            ids[row], answers[row] = copy_sequence(rng, length, text)
            weights[row] = np.where(answers[row], stage["answer_weight"], stage["context_weight"])
        else:
            sample = generate(source, length, int(rng.integers(2**31)))
            ids[row] = sample.ids
            weights[row] = np.where(sample.answer_mask, stage["answer_weight"], stage["context_weight"])
            answers[row] = sample.answer_mask
    if stage["per_row"]:  # the first token is never a target, so it does not count
        weights /= np.maximum(weights[:, 1:].sum(axis=1, keepdims=True), 1e-8)
    row_sources = [sources[pick] for pick in picks]
    return torch.from_numpy(ids), torch.from_numpy(weights), torch.from_numpy(answers), row_sources


def copy_sequence(rng: np.random.Generator, length: int, text: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Corpus text with a span of random printable bytes that reappears later (the repeat is the target).

    Predicting the repeat needs an induction circuit (find the earlier occurrence, copy what followed),
    the mechanism every retrieval task relies on; it forms far faster on this signal than on the few
    answer tokens of the tasks themselves.
    """
    span = int(rng.integers(4, max(5, length // 2 - 1)))
    span_bytes = rng.integers(33, 127, size=span)
    first = int(rng.integers(1, length - 2 * span))
    second = int(rng.integers(first + span, length - span + 1))
    start = int(rng.integers(0, len(text) - length))
    ids = np.array([BOS, *text[start : start + length - 1]], dtype=np.int64)
    ids[first : first + span] = span_bytes
    ids[second : second + span] = span_bytes
    target = np.zeros(length, dtype=bool)
    target[second + 1 : second + span] = True  # the first byte of the repeat is not predictable
    return ids, target


def weighted_loss(logits, ids, weights):
    """Next-token cross-entropy, each target token weighted (the first token is never a target)."""
    import torch.nn.functional as F

    per_token = F.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1), reduction="none"
    )
    w = weights[:, 1:].reshape(-1)
    return (per_token * w).sum() / w.sum().clamp_min(1e-8)


def _answer_accuracy(logits, ids, answers, row_sources) -> dict[str, float]:
    """Per source, the share of its answer tokens that are the greedy prediction (teacher-forced)."""
    right = (logits[:, :-1].argmax(-1) == ids[:, 1:]) & answers[:, 1:]
    out = {}
    for source in sorted(set(row_sources) - {"text"}):
        rows = [i for i, s in enumerate(row_sources) if s == source]
        total = int(answers[rows, 1:].sum())
        if total:
            out[source] = round(int(right[rows].sum()) / total, 4)
    return out


def _save_state(path: Path, model, optimizer, step: int, config: TrainConfig, elapsed: float) -> None:
    import torch

    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "config": asdict(config), "elapsed_s": elapsed}, tmp)  # fmt: skip
    os.replace(tmp, path)


def train(
    config: TrainConfig,
    out_dir: str | Path,
    *,
    max_minutes: float | None = None,
    threads: int | None = None,
    quiet: bool = False,
) -> dict:
    """Train (or resume) a run in ``out_dir``; stop at ``config.steps`` or after ``max_minutes``.

    ``threads`` defaults to every core; on a machine shared with other jobs, 1 thread is several times
    faster than 2 (oversubscribed threads wait on each other at every parallel region).
    """
    import torch

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state_path, log_path = out / "state.pt", out / "log.jsonl"
    torch.set_num_threads(threads or max(1, os.cpu_count() or 1))
    model = build_model(config.preset, seed=config.seed)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config.lr,
        betas=(0.9, 0.95),
    )
    step, elapsed_before = 0, 0.0  # elapsed: training wall time summed over resumed sittings
    if state_path.exists():
        try:
            state = torch.load(state_path, map_location="cpu", weights_only=True)
        except Exception as exc:  # a truncated or foreign file must not become a silent restart
            raise InputError(f"cannot resume from {state_path}: {exc}") from None
        if state["config"]["preset"] != config.preset:
            raise InputError(f"{state_path} holds a {state['config']['preset']!r} run, not {config.preset!r}")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = int(state["step"])
        elapsed_before = float(state.get("elapsed_s", 0.0))
    start_time = time.perf_counter()
    model.train()
    while step < config.steps:
        if max_minutes is not None and time.perf_counter() - start_time > 60 * max_minutes:
            break
        for group in optimizer.param_groups:
            group["lr"] = config.lr_at(step)
        ids, weights, answers, row_sources = make_batch(config, step)
        tick = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=config.bf16):
            logits = model(input_ids=ids).logits
        loss = weighted_loss(logits, ids, weights)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        if step % config.log_every == 0 or step == config.steps:
            entry = {"step": step, "loss": loss.item(), "lr": config.lr_at(step - 1), "length": ids.shape[1],
                     "elapsed_s": round(elapsed_before + time.perf_counter() - start_time, 1),
                     "answer_token_acc": _answer_accuracy(logits, ids, answers, row_sources),
                     "tokens_per_s": ids.numel() / (time.perf_counter() - tick)}  # fmt: skip
            with log_path.open("a") as handle:
                handle.write(json.dumps(entry) + "\n")
            if not quiet:
                print(json.dumps(entry), flush=True)
        if step % config.checkpoint_every == 0 or step == config.steps:
            _save_state(
                state_path, model, optimizer, step, config, elapsed_before + time.perf_counter() - start_time
            )
    if step >= config.steps:
        export(model, config, out)
    return {"step": step, "done": step >= config.steps}


def export(model, config: TrainConfig, out: Path) -> None:
    """Write the finished model as a transformers folder (bf16 safetensors) with tokenizer and config."""
    import torch

    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    byte_tokenizer().save_pretrained(out)
    atomic_write_json(out / "train_config.json", {**asdict(config), "corpus": corpus_id()})
