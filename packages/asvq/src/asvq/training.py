"""Training loop of the tokenizer autoencoder, with codebook diagnostics recorded along the way."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from asvq.diagnostics import CodebookTracker, codebook_stats, loss_variance
from asvq.models import mlp_autoencoder
from asvq.registry import make_quantizer
from papershelf.errors import InputError, check_int, check_number


def train_autoencoder(
    train: np.ndarray,
    test: np.ndarray,
    quantizer: str = "asvq",
    *,
    codebook_size: int = 4096,
    dim: int = 16,
    tokens: int = 8,
    hidden: int = 256,
    steps: int = 1500,
    batch_size: int = 128,
    lr: float = 2e-3,
    quantizer_lr: float | None = None,
    seed: int = 0,
    eval_every: int = 100,
    dead_window: int = 100,
    quantizer_options: dict[str, Any] | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Train ``mlp_autoencoder`` with the named quantizer on ``train`` (N, D) and evaluate on ``test``.

    Loss per step: ``mean((x̂ - x)²) + quantizer loss``, Adam. Returns the final test MSE, test-set code
    utilisation and perplexity, the quantizer's parameter count, the per-step training loss, the dead
    codes over training (no use within ``dead_window`` steps) and the model itself.
    """
    for name, arr in (("train", train), ("test", test)):
        if not isinstance(arr, np.ndarray) or arr.ndim != 2 or arr.shape[0] < 1:
            raise InputError(f"{name} must be a non-empty 2-D array (samples, features)")
        if arr.dtype.kind not in "iuf":  # complex would lose its imaginary part, strings cannot be checked
            raise InputError(f"{name} must hold real numbers, got dtype {arr.dtype}")
        if not np.isfinite(arr).all():
            raise InputError(f"{name} contains NaN or infinite values")
    if train.shape[1] != test.shape[1]:
        raise InputError(f"train has {train.shape[1]} features but test has {test.shape[1]}")
    steps = check_int("steps", steps, low=2)  # the loss-spread diagnostics need two losses
    batch_size = check_int("batch_size", batch_size, low=1)
    eval_every = check_int("eval_every", eval_every, low=1)
    lr = check_number("lr", lr, low=0, low_open=True)
    seed = check_int("seed", seed, low=0, high=2**63 - 1)
    options = dict(quantizer_options or {})
    if "seed" in options:  # the run's seed seeds the quantizer too
        raise InputError("quantizer_options must not hold 'seed'; pass seed= to train_autoencoder")
    torch.manual_seed(seed)
    q = make_quantizer(quantizer, dim, codebook_size, seed=seed, **options)
    model = mlp_autoencoder(train.shape[1], q, tokens=tokens, dim=dim, hidden=hidden)
    K = q.codebook_size
    qlr = lr if quantizer_lr is None else check_number("quantizer_lr", quantizer_lr, low=0, low_open=True)
    qparams = [p for p in q.parameters() if p.requires_grad]
    qids = {id(p) for p in qparams}
    rest = [p for p in model.parameters() if id(p) not in qids]
    groups = [{"params": rest, "lr": lr}] + ([{"params": qparams, "lr": qlr}] if qparams else [])
    opt = torch.optim.Adam(groups, lr=lr)
    xtr = torch.from_numpy(np.ascontiguousarray(train, dtype=np.float32))
    xte = torch.from_numpy(np.ascontiguousarray(test, dtype=np.float32))
    gen = torch.Generator().manual_seed(seed)
    tracker = CodebookTracker(K, window=dead_window)
    losses, recons = [], []
    start = time.perf_counter()
    model.train()
    for step in range(1, steps + 1):
        xb = xtr[torch.randint(len(xtr), (batch_size,), generator=gen)]
        recon, idx, qloss = model(xb)
        rec = torch.mean((recon - xb) ** 2)
        loss = rec + qloss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        recons.append(float(rec.detach()))
        tracker.update(idx)
        if step % eval_every == 0 or step == steps:
            row = tracker.snapshot()
            if log is not None:
                log(
                    f"  {quantizer:<9} seed {seed} step {step:>5}: loss {np.mean(losses[-eval_every:]):.5f} "
                    f"dead {row['dead']:>5}/{K} window-perplexity {row['perplexity_window']:.0f}"
                )
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        recon, idx, _ = model(xte)
        test_mse = float(torch.mean((recon - xte) ** 2))
        _, idx_tr, _ = model(xtr)
    stats = codebook_stats(idx, K)
    stats_tr = codebook_stats(idx_tr, K)
    tail = max(2, steps // 5)
    return {
        "quantizer": quantizer,
        "seed": seed,
        "codebook_size": K,
        "dim": dim,
        "tokens": tokens,
        "steps": steps,
        "test_mse": test_mse,
        "test_utilization": stats["utilization"],
        "test_perplexity": stats["perplexity"],
        "train_utilization": stats_tr["utilization"],
        "train_perplexity": stats_tr["perplexity"],
        "final_train_loss": float(np.mean(losses[-tail:])),
        "train_loss_variance": loss_variance(recons, last=tail),
        "quantizer_params": int(q.num_quantizer_params()),
        "seconds": seconds,
        "seconds_per_step": seconds / steps,
        "dead_codes": tracker.history,
        "losses": losses,
        "model": model,
    }
