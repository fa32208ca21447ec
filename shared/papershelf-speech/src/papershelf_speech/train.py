"""CTC training of the encoder on a built corpus; resumable from its own run folder.

A run folder holds ``train_config.json``, ``state.pt`` (model, optimiser, step, data position; rewritten
atomically every ``checkpoint_minutes`` and at the end), ``log.jsonl`` (loss, learning rate, dev
CER/WER, elapsed seconds) and ``best/`` (the model with the lowest dev CER so far, as safetensors).
Running the same command again resumes from ``state.pt``. Touching a file named ``STOP`` in the run
folder, or sending SIGTERM, makes the trainer save its state and exit cleanly.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from papershelf.errors import InputError
from papershelf_speech.corpus import Corpus
from papershelf_speech.model import build_model, get_preset, pad_features, save_model
from papershelf_speech.text import encode


@dataclass
class TrainConfig:
    preset: str = "ctc-small"
    corpus: str = ""
    seed: int = 0
    batch_size: int = 16
    bucket: int = 32  # batches sorted by length within windows of bucket * batch_size utterances
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 150
    lr_horizon: int = 1500  # cosine decay to min_lr over this many steps, then constant
    weight_decay: float = 0.01
    grad_clip: float = 5.0
    max_steps: int = 100_000
    eval_every: int = 100
    dev_utterances: int = 100
    checkpoint_minutes: float = 3.0
    freq_masks: int = 2
    freq_mask_width: int = 10
    time_masks: int = 2
    time_mask_width: int = 20
    specaug_from: int = 500  # SpecAugment starts at this step (clean targets first speed up alignment)

    def validate(self) -> None:
        """Every field checked (type, finiteness, range): one ``InputError`` naming the first bad one."""
        from papershelf.errors import check_int, check_number

        get_preset(self.preset)
        if not isinstance(self.corpus, str):
            raise InputError(f"corpus must be a path, got {self.corpus!r}")
        for name, low in _INT_FIELDS.items():
            setattr(self, name, check_int(name, getattr(self, name), low=low))
        self.seed = check_int("seed", self.seed, low=0, high=2**32 - 1)
        for name, (low, high, low_open) in _NUMBER_FIELDS.items():
            setattr(
                self, name, check_number(name, getattr(self, name), low=low, high=high, low_open=low_open)
            )


# minimum of each integer field, and (low, high, low excluded) of each real one
_INT_FIELDS = {"batch_size": 1, "bucket": 1, "warmup": 0, "lr_horizon": 1, "max_steps": 0,
               "eval_every": 1, "dev_utterances": 1, "freq_masks": 0, "freq_mask_width": 0, "time_masks": 0,
               "time_mask_width": 0, "specaug_from": 0}  # fmt: skip
_NUMBER_FIELDS = {"lr": (0, None, True), "min_lr_ratio": (0, 1, False), "weight_decay": (0, None, False),
                  "grad_clip": (0, None, True), "checkpoint_minutes": (0, None, True)}  # fmt: skip


def learning_rate(config: TrainConfig, step: int) -> float:
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    progress = min(1.0, (step - config.warmup) / max(1, config.lr_horizon - config.warmup))
    floor = config.lr * config.min_lr_ratio
    return floor + (config.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def epoch_batches(lengths: np.ndarray, config: TrainConfig, epoch: int) -> list[np.ndarray]:
    """The batches of one epoch: a seeded permutation, length-sorted within buckets, batches shuffled."""
    rng = np.random.default_rng([config.seed, epoch])
    order = rng.permutation(len(lengths))
    window = config.bucket * config.batch_size
    batches = []
    for start in range(0, len(order), window):
        chunk = order[start : start + window]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i : i + config.batch_size] for i in range(0, len(chunk), config.batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def spec_augment(batch: torch.Tensor, lengths: torch.Tensor, config: TrainConfig, gen: torch.Generator):
    """Zero random frequency bands and time spans (in normalised units: the model's feature mean)."""
    batch = batch.clone()
    b, _, f = batch.shape
    for i in range(b):
        for _ in range(config.freq_masks):
            w = int(torch.randint(0, config.freq_mask_width + 1, (1,), generator=gen))
            s = int(torch.randint(0, max(1, f - w), (1,), generator=gen))
            batch[i, :, s : s + w] = float("nan")
        n = int(lengths[i])
        for _ in range(config.time_masks):
            w = min(int(torch.randint(0, config.time_mask_width + 1, (1,), generator=gen)), n // 5)
            s = int(torch.randint(0, max(1, n - w), (1,), generator=gen))
            batch[i, s : s + w] = float("nan")
    return batch


def ctc_loss(model, feats, lengths, targets: list[list[int]]) -> torch.Tensor:
    out = model(feats, lengths)
    log_probs = F.log_softmax(out.logits.float(), dim=-1).transpose(0, 1)
    flat = torch.tensor([c for t in targets for c in t], dtype=torch.long)
    target_lengths = torch.tensor([len(t) for t in targets], dtype=torch.long)
    return F.ctc_loss(
        log_probs, flat, out.lengths, target_lengths, blank=0, reduction="mean", zero_infinity=True
    )


@torch.no_grad()
def dev_scores(model, split, n: int, batch_size: int = 16) -> dict:
    from papershelf_speech.evaluate import error_rates

    model.eval()
    n = min(n, len(split))
    hyps = []
    for start in range(0, n, batch_size):
        hyps += model.transcribe([split.features(i) for i in range(start, min(n, start + batch_size))])
    model.train()
    return error_rates(split.texts[:n], hyps)


def _atomic_torch_save(obj, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def train(
    config: TrainConfig,
    out: str | Path,
    *,
    max_minutes: float | None = None,
    threads: int | None = None,
    quiet: bool = False,
) -> dict:
    """Train (or resume) into run folder ``out``; returns the final log entry."""
    config.validate()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    saved = out / "train_config.json"
    if saved.is_file():
        try:
            previous = json.loads(saved.read_text())
            if not isinstance(previous, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot resume: {saved} is not a training config ({exc})") from None
        unknown = sorted(set(previous) - {f.name for f in fields(TrainConfig)})
        if unknown:
            raise InputError(f"cannot resume: {saved} has unknown field(s) {unknown}")
        config = TrainConfig(**{**previous, **{k: v for k, v in asdict(config).items()
                                               if k in ("max_steps", "checkpoint_minutes")}})  # fmt: skip
        config.validate()  # a hand-edited train_config.json is checked like --config
    if not config.corpus:
        raise InputError("--corpus is required (a folder written by `papershelf-speech build-corpus`)")
    corpus = Corpus(config.corpus)
    train_split, dev_split = corpus.split("train"), corpus.split("dev")
    if len(train_split) == 0:
        raise InputError(f"the corpus in {config.corpus} has no training utterances")
    saved.write_text(json.dumps(asdict(config), indent=1) + "\n")
    if threads:
        torch.set_num_threads(threads)
    mean, std = corpus.feature_stats
    model = build_model(config.preset, seed=config.seed, feature_mean=mean.tolist(),
                        feature_std=np.maximum(std, 1e-3).tolist())  # fmt: skip
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, 0.98))
    step, epoch, position, elapsed, best = 0, 0, 0, 0.0, None
    gen = torch.Generator().manual_seed(config.seed)
    state_path = out / "state.pt"
    if state_path.is_file():
        try:
            state = torch.load(state_path, weights_only=False)
            missing = [k for k in ("model", "optimizer", "step", "epoch", "position", "elapsed", "best")
                       if k not in state]  # fmt: skip
        except Exception as exc:  # a truncated or foreign file must not become a traceback or a restart
            raise InputError(f"cannot resume from {state_path}: {type(exc).__name__}: {exc}") from None
        if missing:
            raise InputError(f"cannot resume from {state_path}: not a training state (missing {missing})")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, epoch, position = state["step"], state["epoch"], state["position"]
        elapsed, best = state["elapsed"], state["best"]
        gen.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
    targets = [encode(t) for t in train_split.texts]
    lengths = train_split.lengths()
    batches = epoch_batches(lengths, config, epoch)
    stop = {"flag": False}

    def on_term(signum, frame):  # save and leave at the next step boundary
        stop["flag"] = True

    old_handler = signal.signal(signal.SIGTERM, on_term) if _main_thread() else None

    def checkpoint():
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step, "epoch": epoch,
                 "position": position, "elapsed": elapsed, "best": best, "generator": gen.get_state(),
                 "torch_rng": torch.get_rng_state()}  # fmt: skip
        _atomic_torch_save(state, state_path)

    log = open(out / "log.jsonl", "a", encoding="utf-8")
    model.train()
    started = time.monotonic()
    last_save = started
    session_start = elapsed
    entry: dict = {"step": step}
    losses: list[float] = []
    try:
        while step < config.max_steps:
            now = time.monotonic()
            if stop["flag"] or (out / "STOP").exists():
                break
            if max_minutes is not None and now - started > 60 * max_minutes:
                break
            if position >= len(batches):
                epoch, position = epoch + 1, 0
                batches = epoch_batches(lengths, config, epoch)
            idx = batches[position]
            feats, flen = pad_features([train_split.features(int(i)) for i in idx])
            if step >= config.specaug_from:
                feats = spec_augment(feats, flen, config, gen)
                feats = torch.where(torch.isnan(feats), model.feature_mean.expand_as(feats), feats)
            for group in opt.param_groups:
                group["lr"] = learning_rate(config, step)
            loss = ctc_loss(model, feats, flen, [targets[int(i)] for i in idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            opt.step()
            losses.append(loss.item())
            step, position = step + 1, position + 1
            elapsed = session_start + time.monotonic() - started
            if step % config.eval_every == 0 or step == config.max_steps:
                scores = dev_scores(model, dev_split, config.dev_utterances)
                entry = {"step": step, "epoch": epoch, "loss": round(float(np.mean(losses)), 4),
                         "lr": round(learning_rate(config, step - 1), 6), "dev_cer": round(scores["cer"], 4),
                         "dev_wer": round(scores["wer"], 4), "elapsed_s": round(elapsed, 1)}  # fmt: skip
                losses = []
                if best is None or scores["cer"] < best["dev_cer"]:
                    best = {"step": step, "dev_cer": scores["cer"], "dev_wer": scores["wer"]}
                    save_model(model, out / "best")
                    entry["best"] = True
                log.write(json.dumps(entry) + "\n")
                log.flush()
                if not quiet:
                    print(json.dumps(entry), flush=True)
            if time.monotonic() - last_save > 60 * config.checkpoint_minutes:
                checkpoint()
                last_save = time.monotonic()
        checkpoint()
        if (out / "STOP").exists():  # consumed, so that running the command again resumes
            (out / "STOP").unlink()
    finally:
        log.close()
        if old_handler is not None:
            signal.signal(signal.SIGTERM, old_handler)
    return {"step": step, "epoch": epoch, "best": best, "elapsed_s": round(elapsed, 1), "last": entry}


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
