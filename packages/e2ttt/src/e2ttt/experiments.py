"""The headline experiments at small scale: throughput (``bench``), length extrapolation (``reproduce``)."""

from __future__ import annotations

import math
import statistics
import time

import numpy as np
import torch

from e2ttt.chunk import e2ttt_chunk_update, per_token_chunk_update
from e2ttt.fastweights import FastWeight
from e2ttt.layer import E2TTTLayer, TinyLM
from e2ttt.reference import chunk_loop
from papershelf.bench import compare

# ---- throughput -------------------------------------------------------------------------------------


def _chunk_inputs(B, H, d, dh, L, variant="mlp", seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    fw = FastWeight(variant, d, dh)
    W = tuple(w[None].expand(B, *w.shape).clone() for w in fw.init(H, generator=g, dtype=dtype))
    m = tuple(0.01 * torch.randn(w.shape, generator=g, dtype=dtype) for w in W)
    k = torch.nn.functional.normalize(torch.randn(B, H, L, d, generator=g, dtype=dtype), dim=-1)
    v = torch.randn(B, H, L, d, generator=g, dtype=dtype)
    lr = 0.01 * torch.rand(B, H, L, generator=g, dtype=dtype)
    lg = torch.log1p(-0.1 * torch.rand(B, H, L, generator=g, dtype=dtype))
    lb = torch.log(torch.rand(B, H, L, generator=g, dtype=dtype))
    ln = (torch.ones(H, d, dtype=dtype), torch.zeros(H, d, dtype=dtype))
    return fw, (W, m, k, v, lr, lg, lb, *ln)


def chunk_update_throughput(*, B=1, H=16, d=64, dh=128, L=512, repeat=5, reference_repeat=1):
    """Tokens/s of the closed-form chunk update vs the per-token loops at one chunk of L tokens."""
    fw, args = _chunk_inputs(B, H, d, dh, L)
    with torch.no_grad():
        cmp = compare(
            lambda: per_token_chunk_update(fw, *args),
            lambda: e2ttt_chunk_update(fw, *args, validate=False),
            repeat=repeat,
        )
    W, _, k, v, _, _, _, ln_w, ln_b = args

    def factors():  # the factors both fast paths need, per head block (token_grads_blocked minus its cat)
        for s in fw.head_blocks(k.shape):
            fw.token_grads(tuple(x[:, s] for x in W), k[:, s], v[:, s], ln_w[s], ln_b[s])

    with torch.no_grad():  # the loop again, interleaved with the factor stage alone
        stage = compare(lambda: per_token_chunk_update(fw, *args), factors, repeat=repeat)
    ref = compare(
        lambda: chunk_loop(fw, *args),
        lambda: e2ttt_chunk_update(fw, *args, validate=False),
        warmup=0,
        repeat=reference_repeat,
    )
    toks = B * L
    return {
        "setting": {"batch": B, "heads": H, "head_dim": d, "hidden": dh, "chunk": L, "dtype": "float32"},
        "closed_form_tok_s": toks / cmp.candidate.median,
        "closed_form_tok_s_vs_reference_run": toks / ref.candidate.median,
        "loop_tok_s": toks / cmp.baseline.median,
        "reference_tok_s": toks / ref.baseline.median,
        "closed_form_vs_loop": cmp.baseline.median / cmp.candidate.median,
        "closed_form_vs_reference": ref.baseline.median / ref.candidate.median,
        # any update that needs the per-token gradients at W_s pays the factor stage, so no closed form
        # can beat this loop by more than loop time / factor time (Amdahl)
        "factor_stage_ms": 1e3 * stage.candidate.median,
        "loop_ms": 1e3 * stage.baseline.median,
        "closed_form_ms": 1e3 * cmp.candidate.median,
        "bound_vs_loop": stage.baseline.median / stage.candidate.median,
        "repeats": repeat,
        "reference_repeats": reference_repeat,
    }


def layer_training_throughput(
    *, B=1, T=2048, d_model=512, n_heads=8, chunk=512, window=512, repeat=5, rules=("e2ttt", "chunkavg")
):
    """Training tokens/s (forward + backward) of one layer per rule, timed interleaved against rules[1]."""
    x = torch.randn(B, T, d_model, generator=torch.Generator().manual_seed(0))
    layers = {r: E2TTTLayer(d_model, n_heads, chunk=chunk, window=window, rule=r) for r in rules}

    def step(layer):
        def run():
            layer.zero_grad(set_to_none=True)
            y, _ = layer(x)
            y.square().mean().backward()

        return run

    base = rules[1]
    out = {
        "setting": {
            "batch": B,
            "tokens": T,
            "d_model": d_model,
            "heads": n_heads,
            "chunk": chunk,
            "window": window,
        },
        "tok_s": {},
        "ratio_vs_" + base: {},
        "repeats": repeat,
    }
    for r in rules:
        if r == base:
            continue
        c = compare(step(layers[base]), step(layers[r]), repeat=repeat)
        out["tok_s"][r] = B * T / c.candidate.median
        out["tok_s"][base] = B * T / c.baseline.median
        out["ratio_vs_" + base][r] = c.baseline.median / c.candidate.median
    return out


# ---- training and extrapolation ---------------------------------------------------------------------


class AdamW:
    """Decoupled-weight-decay Adam with global gradient-norm clipping, written out (torch.optim's first use
    imports torch._dynamo, which costs tens of seconds on a loaded machine; this is the same update)."""

    def __init__(self, params, *, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-8):
        self.params = [p for p in params if p.requires_grad]
        self.wd, self.betas, self.eps, self.t = weight_decay, betas, eps, 0
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, lr: float, *, clip: float | None = None):
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        if clip is not None:
            norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
            scale = min(1.0, clip / (float(norm) + 1e-6))
            grads = [g * scale for g in grads]
        self.t += 1
        b1, b2 = self.betas
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v / (1 - b2**self.t)).sqrt_().add_(self.eps)
            p.mul_(1 - lr * self.wd).addcdiv_(m, denom, value=-lr / (1 - b1**self.t))


MODEL_DEFAULTS = dict(d_model=64, n_layers=2, n_heads=2, chunk=32, window=32, hidden_mult=2, base_lr=0.1)


def build(rule: str, seed: int, vocab: int, **kw) -> TinyLM:
    cfg = {**MODEL_DEFAULTS, **kw}
    return TinyLM(vocab, rule=rule, seed=seed, **cfg)


def train(
    model: TinyLM,
    *,
    tasks=("passkey", "mqar"),
    length=128,
    steps=300,
    batch=8,
    lr=3e-3,
    seed=0,
    log=None,
    log_every=50,
):
    """AdamW on the answer tokens of task samples at ``length``; returns the loss history."""
    from e2ttt.data import task_batch

    opt = AdamW(list(model.parameters()), weight_decay=0.01, betas=(0.9, 0.95))
    warm = max(1, steps // 20)

    def lr_at(step):
        return lr * min(1.0, (step + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, step / steps)))

    hist = []
    model.train()
    t0 = time.perf_counter()
    for step in range(steps):
        ids, w = task_batch(tasks, length, batch, seed * 1_000_003 + step)
        logits, _ = model(ids)
        ce = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
        ).view(ids.shape[0], -1)
        wt = w[:, 1:]
        loss = (ce * wt).sum() / wt.sum().clamp(min=1)
        opt.zero_grad()
        loss.backward()
        opt.step(lr_at(step), clip=1.0)
        hist.append(float(loss.detach()))
        if log is not None and (step % log_every == 0 or step == steps - 1):
            log(
                f"  step {step:4d} loss {statistics.mean(hist[-log_every:]):.3f} "
                f"({time.perf_counter() - t0:.0f}s)"
            )
    model.eval()
    return hist


@torch.no_grad()
def far_questions(sample, window: int) -> np.ndarray:
    """MQAR questions whose key token does not occur in the ``window`` tokens before the query's key, so
    the answer cannot be copied from a recent pair or an earlier query of the same key inside the SWA
    receptive field (pass n_layers × window): only a memory reaching further back can answer them."""
    ids, q = sample.ids, sample.question
    far = []
    for k in range(sample.n_questions):
        pos = int(np.flatnonzero(q == k)[0])  # the answer token; the layout is <query> key <val> answer
        key_pos = pos - 2
        far.append(ids[key_pos] not in ids[max(0, key_pos - window) : key_pos])
    return np.asarray(far, dtype=bool)


@torch.no_grad()
def evaluate_detail(model: TinyLM, task: str, length: int, n: int = 20, seed: int = 10_000,
                    window: int | None = None) -> dict:  # fmt: skip
    """Greedy exact-match accuracy (the testbed's scorer), mean over n samples; for MQAR with ``window``
    also the accuracy on the questions the SWA window cannot answer (:func:`far_questions`)."""
    from e2ttt.data import samples, score

    accs, far_right, far_n = [], 0, 0
    for s in samples(task, length, n, seed):
        logits, _ = model(torch.from_numpy(s.ids)[None])
        pred = np.full(s.ids.shape, -1, dtype=np.int64)
        pred[1:] = logits[0, :-1].argmax(-1).numpy()
        accs.append(score(s, pred))
        if task == "mqar" and window is not None:
            far = far_questions(s, window)
            right = np.array([bool((pred == s.ids)[s.question == k].all()) for k in range(s.n_questions)])
            far_right += int(right[far].sum())
            far_n += int(far.sum())
    out = {"acc": float(np.mean(accs))}
    if far_n:
        out["far_acc"] = far_right / far_n
        out["far_n"] = far_n
    return out


def evaluate(model: TinyLM, task: str, length: int, n: int = 20, seed: int = 10_000) -> float:
    """Fraction of questions answered by greedy exact match (the testbed's scorer), mean over n samples."""
    return evaluate_detail(model, task, length, n, seed)["acc"]


def _one_run(job):
    rule, seed, cfg = job
    torch.set_num_threads(1)
    from e2ttt.data import vocab_size

    t0 = time.perf_counter()
    lines = []
    model = build(rule, seed, vocab_size(), **cfg["model_kw"])
    hist = train(
        model,
        tasks=cfg["tasks"],
        length=cfg["train_len"],
        steps=cfg["steps"],
        batch=cfg["batch"],
        seed=seed,
        log=lines.append,
        log_every=max(1, cfg["steps"] // 4),
    )
    row = {
        "rule": rule,
        "seed": seed,
        "final_loss": statistics.mean(hist[-20:]),
        "params": sum(p.numel() for p in model.parameters()),
    }
    # the SWA stack's receptive field: each layer looks `window` tokens back
    window = model.config.get("window", MODEL_DEFAULTS["window"]) * model.config["n_layers"]
    for task in cfg["tasks"]:
        for L in (cfg["train_len"], cfg["factor"] * cfg["train_len"]):
            res = evaluate_detail(model, task, L, cfg["n_eval"], window=window)
            row[f"{task}@{L}"] = res["acc"]
            if "far_acc" in res:
                row[f"{task}-far@{L}"] = res["far_acc"]
    row["seconds"] = time.perf_counter() - t0
    return row, lines


def extrapolation(
    rules=("e2ttt", "chunkavg", "swa"),
    seeds=(0, 1, 2),
    *,
    train_len=128,
    factor=8,
    steps=500,
    batch=8,
    n_eval=20,
    tasks=("passkey", "mqar"),
    jobs=1,
    log=print,
    **model_kw,
):
    """Train each rule × seed at ``train_len`` (same model size, steps and data); evaluate at train_len
    and at factor × train_len. ``jobs`` > 1 runs that many single-threaded processes."""
    cfg = dict(
        tasks=tuple(tasks),
        train_len=train_len,
        factor=factor,
        steps=steps,
        batch=batch,
        n_eval=n_eval,
        model_kw=model_kw,
    )
    todo = [(rule, seed, cfg) for rule in rules for seed in seeds]
    runs = []

    def done(row, lines):
        log(f"{row['rule']} seed {row['seed']} ({row['params']:,} parameters, {row['seconds']:.0f}s)")
        for line in lines:
            log(line)
        log(
            "  "
            + ", ".join(f"{k} {v:.3f}" for k, v in row.items() if isinstance(v, float) and k != "seconds")
        )
        runs.append(row)

    if jobs > 1:
        import concurrent.futures as cf
        import multiprocessing as mp

        with cf.ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
            for row, lines in pool.map(_one_run, todo):
                done(row, lines)
    else:
        for job in todo:
            done(*_one_run(job))
    summary = {}
    for rule in rules:
        rows = [r for r in runs if r["rule"] == rule]
        summary[rule] = {
            key: {
                "mean": float(np.mean([r[key] for r in rows])),
                "std": float(np.std([r[key] for r in rows])),
            }
            for key in rows[0]
            if "@" in key or key == "final_loss"
        }
    return {
        "train_len": train_len,
        "test_len": factor * train_len,
        "steps": steps,
        "batch": batch,
        "n_eval": n_eval,
        "tasks": list(tasks),
        "seeds": list(seeds),
        "model": {**MODEL_DEFAULTS, **model_kw},
        "runs": runs,
        "summary": summary,
    }


def extrapolation_targets(result) -> list[dict]:
    """E²-TTT above each of the chunk-averaged baseline and SWA-only at the test length, per task (means)."""
    out = []
    s = result["summary"]
    if "e2ttt" not in s:
        return out
    for task in result["tasks"]:
        key = f"{task}@{result['test_len']}"
        keys = [key] + ([f"mqar-far@{result['test_len']}"] if task == "mqar" else [])
        for key, base in ((k, b) for k in keys for b in ("chunkavg", "swa")):
            if base in s and key in s["e2ttt"]:
                e, b = s["e2ttt"][key]["mean"], s[base][key]["mean"]
                out.append({"name": f"{key} e2ttt vs {base}", "e2ttt": e, "baseline": b, "met": bool(e > b)})
    return out


def table(result) -> str:
    keys = [k for k in next(iter(result["summary"].values())) if "@" in k]
    lines = ["| rule | " + " | ".join(keys) + " | final loss |", "|---" * (len(keys) + 2) + "|"]
    for rule, s in result["summary"].items():
        cells = [f"{s[k]['mean']:.3f} ± {s[k]['std']:.3f}" for k in keys]
        lines.append(f"| {rule} | " + " | ".join(cells) + f" | {s['final_loss']['mean']:.3f} |")
    return "\n".join(lines)
