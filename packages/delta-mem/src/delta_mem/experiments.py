"""The headline experiment at small scale: train δ-Mem on a frozen testbed backbone, compare it with the
truncated backbone, BM25 retrieval and a same-size LoRA on out-of-window fact recall; in-window
perplexity on the corpus; decode overhead per token."""

from __future__ import annotations

import copy
import math
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from delta_mem.data import BOS, make_dialogue, stack
from delta_mem.memory import DeltaMemConfig
from delta_mem.wrap import (
    attach_delta_mem,
    count_memory_parameters,
    decode_step_path,
    detach_state,
    memory_parameters,
    reset_state,
)
from papershelf.errors import InputError, MissingDependencyError, check_choice

TRAIN_BASE, EVAL_BASE = 1_000_000_000, 2_000_000_000


@dataclass
class TrainConfig:
    """Training of the memory (or LoRA) parameters on synthetic dialogues, backbone frozen."""

    steps: int = 150
    batch: int = 8
    lr: float = 3e-3
    warmup: int = 10
    window: int = 128
    n_history: int = 1
    n_people: int = 3
    update_prob: float = 0.5
    lm_weight: float = 0.5  # weight of the corpus loss (keeps general ability)
    lm_loss: str = "ce"  # "ce": next-token cross-entropy; "kl": KL(frozen backbone ‖ model) per token
    lm_batch: int = 2
    clip: float = 1.0
    seed: int = 0
    log_every: int = 20
    lm_source: str = "corpus"  # "corpus" (the testbed's) or "random" (quick runs without the testbed)
    fact_position: str = "random"  # "end": facts right before the final window (the easy curriculum)
    curriculum_steps: int = 0  # the first steps: facts right before the final window, question right after
    curriculum_chat: int | None = None  # cap on chat tokens before the question in curriculum steps

    def dialogue_kwargs(self, step: int | None = None) -> dict:
        pos, chat = self.fact_position, None
        if step is not None and step < self.curriculum_steps:
            pos, chat = "end", self.curriculum_chat
        return dict(
            final_chat=chat,
            window=self.window,
            n_history=self.n_history,
            n_people=self.n_people,
            update_prob=self.update_prob,
            fact_position=pos,
        )


# ---- loading --------------------------------------------------------------------------------------------
def load_backbone(name: str, window: int | None = None):
    """``(model, label)`` from a testbed checkpoint name (``tiny-s``, ``tiny-m``) or a local HF folder;
    ``window`` (tokens per forward) is checked against the model's positions before any training."""
    if Path(name).is_dir():
        from transformers import AutoModelForCausalLM

        from papershelf.hf_folder import check_config_fits_weights

        try:  # a corrupt config.json must not be allocated first
            check_config_fits_weights(name)
        except InputError as exc:
            raise InputError(f"--model {name!r} is not a loadable causal-LM folder ({exc})") from None
        try:
            model = AutoModelForCausalLM.from_pretrained(name, local_files_only=True, dtype=torch.float32)
        except Exception as exc:  # missing files, corrupt safetensors or config, mismatched shapes
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(f"--model {name!r} is not a loadable causal-LM folder ({first})") from None
        model, label = model.eval(), str(name)
    else:
        try:
            from papershelf_lm import load
        except ImportError:
            raise MissingDependencyError("papershelf_lm", package="delta-mem", extra="bench") from None
        model, _ = load(name)
        model, label = model.float().eval(), name
    limit = getattr(model.config, "max_position_embeddings", None)
    if window is not None and limit is not None and window > limit:
        raise InputError(f"--window {window} is longer than {label}'s {limit} positions")
    return model, label


def corpus_windows(n: int, length: int, seed: int, split: str = "validation") -> torch.Tensor:
    """``n`` windows (BOS + ``length − 1`` bytes) of the testbed corpus (standard-library sources)."""
    try:
        from papershelf_lm.corpus import corpus_bytes
    except ImportError:
        raise MissingDependencyError("papershelf_lm", package="delta-mem", extra="bench") from None
    text = corpus_bytes(split)
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        s = int(rng.integers(0, len(text) - length))
        rows.append([BOS, *text[s : s + length - 1]])
    return torch.tensor(rows, dtype=torch.int64)


# ---- forward passes and scores ---------------------------------------------------------------------------
def run_dialogues(model, history: torch.Tensor | None, window: torch.Tensor) -> torch.Tensor:
    """Stream the history windows into the memory (state kept, KV cache not), then return the logits of
    the final window. Without memory attached the history passes are skipped (nothing would carry)."""
    from delta_mem.wrap import is_wrapped

    if is_wrapped(model):
        reset_state(model)
        if history is not None:
            for j in range(history.shape[1]):
                model(input_ids=history[:, j])
    return model(input_ids=window).logits


def answer_loss(logits, window, mask) -> torch.Tensor:
    tgt = window[:, 1:]
    m = mask[:, 1:]
    return F.cross_entropy(logits[:, :-1][m].float(), tgt[m])


def exact_solved(logits, window, mask) -> torch.Tensor:
    """Per row: every answer token is the greedy prediction."""
    pred = logits[:, :-1].argmax(-1)
    right = (pred == window[:, 1:]) | ~mask[:, 1:]
    return right.all(dim=1)


LM_LOSSES = ("ce", "kl")


def lm_loss(model, ids: torch.Tensor, kind: str = "ce") -> torch.Tensor:
    """The corpus loss on ``ids``: next-token cross-entropy (``ce``), or the mean per-token
    KL(frozen backbone ‖ model) (``kl``: a distillation toward the backbone's own predictions, which
    ask the trained parameters to leave in-window text alone rather than to fit it)."""
    from delta_mem.wrap import is_wrapped

    check_choice("lm_loss", kind, LM_LOSSES)
    if is_wrapped(model):
        reset_state(model)
    logits = model(input_ids=ids).logits[:, :-1].float()
    if kind == "ce":
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    with torch.no_grad(), _frozen(model):
        ref = model(input_ids=ids).logits[:, :-1].float()
    ref_logp = F.log_softmax(ref, -1).reshape(-1, ref.shape[-1])
    logp = F.log_softmax(logits, -1).reshape(-1, logits.shape[-1])
    return F.kl_div(logp, ref_logp, log_target=True, reduction="batchmean")


def _frozen(model):
    """A context in which ``model`` (δ-Mem-wrapped or a peft LoRA) computes its frozen backbone."""
    from delta_mem.wrap import backbone_only, is_wrapped

    if is_wrapped(model):
        return backbone_only(model)
    if hasattr(model, "disable_adapter"):
        return model.disable_adapter()
    raise InputError("lm_loss='kl' needs a δ-Mem-wrapped or peft model (the frozen reference)")


# ---- training -------------------------------------------------------------------------------------------
def _train_loop(model, params, cfg: TrainConfig, *, use_history: bool, log=print) -> list[dict]:
    params = [p for p in params if p.requires_grad]
    if not params:
        raise InputError("no trainable parameters")
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)

    def lr_at(step):
        if step < cfg.warmup:
            return (step + 1) / cfg.warmup
        return 0.5 * (1 + math.cos(math.pi * (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    model.train()
    logs, t0 = [], time.perf_counter()
    run_loss, run_acc, run_n = 0.0, 0.0, 0
    for step in range(cfg.steps):
        ds = [
            make_dialogue(
                TRAIN_BASE + cfg.seed * 1_000_000 + step * cfg.batch + i, **cfg.dialogue_kwargs(step)
            )
            for i in range(cfg.batch)
        ]
        hist, win, mask = stack(ds)
        logits = run_dialogues(model, hist if use_history else None, win)
        loss = answer_loss(logits, win, mask)
        acc = float(exact_solved(logits.detach(), win, mask).float().mean())
        total = loss
        if cfg.lm_weight > 0:
            src = corpus_windows if cfg.lm_source == "corpus" else random_windows
            ids = src(cfg.lm_batch, cfg.window, TRAIN_BASE + cfg.seed * 7919 + step, "train")
            lm = lm_loss(model, ids, cfg.lm_loss)
            total = total + cfg.lm_weight * lm
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.clip)
        opt.step()
        sched.step()
        from delta_mem.wrap import is_wrapped

        if is_wrapped(model):
            detach_state(model)
            reset_state(model)
        run_loss, run_acc, run_n = run_loss + float(loss.detach()), run_acc + acc, run_n + 1
        if step % cfg.log_every == 0 or step == cfg.steps - 1:
            rec = {  # means over the steps since the last record
                "step": step,
                "loss": run_loss / run_n,
                "acc": run_acc / run_n,
                "elapsed_s": round(time.perf_counter() - t0, 1),
            }
            logs.append(rec)
            run_loss, run_acc, run_n = 0.0, 0.0, 0
            if log:
                msg = f"  step {step:4d}  answer loss {rec['loss']:.3f}  batch acc {rec['acc']:.2f}"
                log(f"{msg}  {rec['elapsed_s']}s")
    model.eval()
    return logs


def seed_memory(model, seed: int) -> None:
    """Re-draw the read/write projections of an attached memory from ``seed`` (``W_Δ`` stay zero), so the
    start of training, and a diagnosis before it, do not depend on the global random state."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in memory_parameters(model).values():
            if p.dim() == 2 and p.abs().sum() > 0:
                torch.nn.init.normal_(p, std=p.shape[1] ** -0.5)


def train_memory(model, mem_cfg: DeltaMemConfig | None, cfg: TrainConfig, *, log=print) -> list[dict]:
    """Attach δ-Mem (if not attached) and train only its parameters; the backbone stays frozen."""
    from delta_mem.wrap import is_wrapped

    if not is_wrapped(model):
        attach_delta_mem(model, mem_cfg)
    seed_memory(model, cfg.seed)
    return _train_loop(model, memory_parameters(model).values(), cfg, use_history=True, log=log)


def train_lora(model, n_params: int, cfg: TrainConfig, *, log=print):
    """A peft LoRA on q_proj/o_proj with about ``n_params`` trainable parameters, trained on the same
    dialogues (the final windows: the history is outside its window) and the same corpus loss."""
    from delta_mem.baselines import lora_model, lora_rank_for

    rank, count = lora_rank_for(model, n_params)
    peft = lora_model(model, rank, seed=cfg.seed)
    logs = _train_loop(peft, peft.parameters(), cfg, use_history=False, log=log)
    return peft, rank, count, logs


@torch.no_grad()
def _record_beta(layer, args, out) -> None:
    layer._diag_beta.append(float(layer.features(args[0].to(layer.in_proj.weight.dtype))[3].mean()))


def diagnose(model, cfg: TrainConfig) -> dict:
    """Gradient-path checks at the current parameters of a wrapped model, on one training batch: the mean
    write gate β per layer (saturation), the reads' size at the question, and the gradient norm of every
    memory parameter group (zero-initialised corrections and the projections behind them)."""
    from delta_mem.wrap import memory_layers

    base = TRAIN_BASE + cfg.seed * 1_000_000
    ds = [make_dialogue(base + i, **cfg.dialogue_kwargs(0)) for i in range(cfg.batch)]
    hist, win, mask = stack(ds)
    layers = memory_layers(model)
    betas = []
    with torch.no_grad():
        for layer in layers:
            layer._diag_beta = []
        hooks = [lyr.register_forward_hook(_record_beta) for lyr in layers]
    model.zero_grad(set_to_none=True)
    logits = run_dialogues(model, hist, win)
    loss = answer_loss(logits, win, mask)
    loss.backward()
    for h in hooks:
        h.remove()
    for layer in layers:
        betas.append(statistics.mean(layer._diag_beta))
        del layer._diag_beta
    grads: dict[str, float] = {}
    for name, p in memory_parameters(model).items():
        key = name.split(".delta_mem.")[-1]
        g = 0.0 if p.grad is None else float(p.grad.norm()) ** 2
        grads[key] = grads.get(key, 0.0) + g
    model.zero_grad(set_to_none=True)
    reset_state(model)
    return {
        "answer_loss": float(loss.detach()),
        "beta_mean_per_layer": betas,
        "grad_norm": {k: math.sqrt(v) for k, v in sorted(grads.items())},
    }


# ---- evaluation -----------------------------------------------------------------------------------------
def eval_dialogues(n: int, seed: int, cfg: TrainConfig):
    return [make_dialogue(EVAL_BASE + seed * 100_000 + i, **cfg.dialogue_kwargs()) for i in range(n)]


@torch.no_grad()
def recall(
    model, dialogues, *, use_history: bool = True, windows: np.ndarray | None = None, batch: int = 16
) -> float:
    """Exact-match fact recall over ``dialogues`` (optionally with replacement final windows)."""
    solved = []
    for s in range(0, len(dialogues), batch):
        ds = dialogues[s : s + batch]
        hist, win, mask = stack(ds)
        if windows is not None:
            win = torch.from_numpy(np.stack(windows[s : s + batch]))
        logits = run_dialogues(model, hist if use_history else None, win)
        solved.append(exact_solved(logits, win, mask))
    return float(torch.cat(solved).float().mean())


@torch.no_grad()
def perplexity(model, windows: torch.Tensor, batch: int = 8) -> float:
    """Per-token perplexity of corpus windows; a wrapped model's memory starts empty in every window."""
    total, count = 0.0, 0
    for s in range(0, len(windows), batch):
        ids = windows[s : s + batch]
        total += float(lm_loss(model, ids)) * ids[:, 1:].numel()
        count += ids[:, 1:].numel()
    return math.exp(total / count)


def _cache_kwargs(out) -> dict:
    if getattr(out, "cache", None) is not None:
        return {"cache": out.cache}
    return {"past_key_values": out.past_key_values}


@torch.no_grad()  # inference, as `generate` runs it: no autograd graph through the trainable memory
def decode_seconds(model, prompt: torch.Tensor, steps: int) -> float:
    """Seconds for ``steps`` greedy decode steps with a KV cache after a prefill (prefill not timed)."""
    from delta_mem.wrap import is_wrapped

    if is_wrapped(model):
        reset_state(model)
    out = model(input_ids=prompt, use_cache=True)
    tok = out.logits[:, -1:].argmax(-1)
    t = time.perf_counter()
    for _ in range(steps):
        out = model(input_ids=tok, use_cache=True, **_cache_kwargs(out))
        tok = out.logits[:, -1:].argmax(-1)
    return time.perf_counter() - t


def decode_overhead(backbone, wrapped, *, prompt_len: int = 64, steps: int = 64, repeat: int = 7) -> dict:
    """Interleaved timing of decode steps, backbone vs wrapped; medians and their ratio."""
    prompt = torch.randint(0, 256, (1, prompt_len), generator=torch.Generator().manual_seed(0))
    decode_seconds(backbone, prompt, 4)
    decode_seconds(wrapped, prompt, 4)
    base, cand = [], []
    for i in range(repeat):
        order = (backbone, wrapped) if i % 2 == 0 else (wrapped, backbone)
        for m in order:
            (base if m is backbone else cand).append(decode_seconds(m, prompt, steps) / steps)
    b, c = statistics.median(base), statistics.median(cand)
    return {"backbone_s_per_token": b, "delta_mem_s_per_token": c, "ratio": c / b, "repeats": repeat}


# ---- the whole comparison -----------------------------------------------------------------------------
def random_llama(seed: int = 0, *, hidden: int = 32, layers: int = 2, vocab: int = 263):
    """A small random transformers Llama (for demos, quick benches and tests; no checkpoint needed)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(cfg).float().eval()


# Public model shapes for timing only: random weights, so the decode overhead can be measured at the
# size the paper's backbones have (timing does not depend on the weights' values).
TIMING_SHAPES = {
    "llama-1b-shape": {  # Llama-3.2-1B's shapes
        "vocab_size": 128256,
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 64,
    },
}


def timing_llama(name: str):
    """A random-weight Llama with the shapes of ``TIMING_SHAPES[name]`` (≈ 5 GB in float32 for the 1B)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(**TIMING_SHAPES[name], max_position_embeddings=4096, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).float().eval()


def random_windows(n: int, length: int, seed: int, split: str = "validation") -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + (0 if split == "validation" else 1))
    return torch.cat([torch.full((n, 1), BOS), torch.randint(32, 127, (n, length - 1), generator=g)], dim=1)


def run_seed(
    model_name: str,
    seed: int,
    tcfg: TrainConfig,
    mcfg: DeltaMemConfig,
    *,
    n_eval: int,
    n_ppl: int,
    log=print,
    quick: bool = False,
) -> dict:
    """One seed: train δ-Mem and LoRA, evaluate every system on the same held-out dialogues."""
    tcfg = (
        copy.replace(tcfg, seed=seed)
        if hasattr(copy, "replace")
        else TrainConfig(**{**asdict(tcfg), "seed": seed})
    )
    backbone, label = (random_llama(0), "random-llama") if quick else load_backbone(model_name, tcfg.window)
    windows_fn = random_windows if quick else corpus_windows
    for p in backbone.parameters():
        p.requires_grad_(False)
    dialogues = eval_dialogues(n_eval, seed, tcfg)
    ppl_windows = windows_fn(n_ppl, tcfg.window, 10_000 + seed)
    row: dict = {"seed": seed, "model": label}
    t = time.perf_counter()
    row["frozen"] = recall(backbone, dialogues, use_history=False)
    from delta_mem.baselines import bm25_window

    row["bm25"] = recall(backbone, dialogues, use_history=False, windows=[bm25_window(d) for d in dialogues])
    row["ppl_frozen"] = perplexity(backbone, ppl_windows)
    log(f"seed {seed}: frozen {row['frozen']:.3f}  bm25 {row['bm25']:.3f}  ppl {row['ppl_frozen']:.3f}")
    # δ-Mem
    mem_model = copy.deepcopy(backbone)
    log(f"seed {seed}: training δ-Mem ({tcfg.steps} steps x {tcfg.batch} dialogues)")
    t1 = time.perf_counter()
    row["delta_mem_train_log"] = train_memory(mem_model, mcfg, tcfg, log=log)
    row["delta_mem_train_s"] = time.perf_counter() - t1
    row["delta_mem_params"] = count_memory_parameters(mem_model)
    row["delta_mem"] = recall(mem_model, dialogues)
    row["delta_mem_no_history"] = recall(mem_model, dialogues, use_history=False)
    row["ppl_delta_mem"] = perplexity(mem_model, ppl_windows)
    log(
        f"seed {seed}: δ-Mem {row['delta_mem']:.3f} (memory emptied: {row['delta_mem_no_history']:.3f})  "
        f"ppl {row['ppl_delta_mem']:.3f}  params {row['delta_mem_params']}"
    )
    # LoRA with the same trainable-parameter count
    lora_base = copy.deepcopy(backbone)
    log(f"seed {seed}: training LoRA")
    t1 = time.perf_counter()
    peft, rank, count, lora_log = train_lora(lora_base, row["delta_mem_params"], tcfg, log=log)
    row.update(
        lora_rank=rank, lora_params=count, lora_train_log=lora_log, lora_train_s=time.perf_counter() - t1
    )
    row["lora"] = recall(peft, dialogues, use_history=False)
    row["ppl_lora"] = perplexity(peft, ppl_windows)
    log(f"seed {seed}: LoRA r={rank} ({count} params) {row['lora']:.3f}  ppl {row['ppl_lora']:.3f}")
    row["seconds"] = time.perf_counter() - t
    row["_mem_model"] = mem_model
    row["_backbone"] = backbone
    return row


def _ratio(a: float, b: float, n: int) -> float:
    """Recall ratio a/b over ``n`` questions; when the baseline solved none, the add-one smoothed ratio
    (a n + 1) / (b n + 1) — finite, so every seed counts in the median and the result stays valid JSON."""
    return a / b if b > 0 else (a * n + 1) / (b * n + 1)


def comparison(
    model_name: str,
    seeds: tuple[int, ...],
    tcfg: TrainConfig,
    mcfg: DeltaMemConfig | None = None,
    *,
    n_eval: int = 100,
    n_ppl: int = 16,
    decode_steps: int = 64,
    log=print,
    quick: bool = False,
    save_dir: str | Path | None = None,
) -> dict:
    """Every seed's systems side by side; ``save_dir``: also keep each seed's trained δ-Mem adapter there
    (``delta-mem-seed{seed}.safetensors``, loadable by ``delta-mem eval``) as soon as it is evaluated."""
    from delta_mem.io import save_adapter

    mcfg = (mcfg or DeltaMemConfig()).validate()
    rows = []
    for seed in seeds:
        rows.append(run_seed(model_name, seed, tcfg, mcfg, n_eval=n_eval, n_ppl=n_ppl, log=log, quick=quick))
        if save_dir is not None:
            Path(save_dir).mkdir(parents=True, exist_ok=True)
            path = Path(save_dir) / f"delta-mem-seed{seed}.safetensors"
            log(f"wrote {save_adapter(rows[-1]['_mem_model'], path)}")
    last = rows[-1]
    mem_model = last.pop("_mem_model")
    dec = decode_overhead(last.pop("_backbone"), mem_model, steps=decode_steps)
    dec["decode_step"] = decode_step_path(mem_model)  # "c", or the torch twin and why
    for r in rows:
        r.pop("_backbone", None)
        r.pop("_mem_model", None)
    return summarize(rows, tcfg, mcfg, n_eval=n_eval, n_ppl=n_ppl, decode=dec)


SUMMARY_KEYS = (
    "frozen",
    "bm25",
    "lora",
    "delta_mem",
    "delta_mem_no_history",
    "ppl_frozen",
    "ppl_delta_mem",
    "ppl_lora",
)


def summarize(rows: list[dict], tcfg: TrainConfig | dict, mcfg: DeltaMemConfig | dict, **extra) -> dict:
    """Medians over seeds and the per-seed ratios of the rows of :func:`run_seed`."""
    med = {k: statistics.median(r[k] for r in rows) for k in SUMMARY_KEYS}
    n = extra["n_eval"]
    per_seed = {
        "delta_mem/frozen": [_ratio(r["delta_mem"], r["frozen"], n) for r in rows],
        "delta_mem/bm25": [_ratio(r["delta_mem"], r["bm25"], n) for r in rows],
        "delta_mem/lora": [_ratio(r["delta_mem"], r["lora"], n) for r in rows],
        "ppl delta_mem/frozen": [r["ppl_delta_mem"] / r["ppl_frozen"] for r in rows],
    }
    return {
        "model": rows[0]["model"],
        "seeds": [r["seed"] for r in rows],
        "train": tcfg if isinstance(tcfg, dict) else asdict(tcfg),
        "memory": mcfg if isinstance(mcfg, dict) else asdict(mcfg),
        **{k: extra[k] for k in ("n_eval", "n_ppl")},
        "rows": rows,
        "median": med,
        "ratios_per_seed": per_seed,
        "ratios_median": {k: statistics.median(v) for k, v in per_seed.items()},
        "decode": extra["decode"],
    }


def merge_results(results: list[dict]) -> dict:
    """One result from several runs of the same setting with different seeds (e.g. run in parallel):
    rows concatenated, medians recomputed; decode timings: the median of the runs' ratios."""
    if not results:
        raise InputError("nothing to merge")
    first = results[0]
    for r in results[1:]:
        for key in ("model", "n_eval", "n_ppl", "memory"):
            if r[key] != first[key]:
                raise InputError(f"cannot merge runs whose {key} differ: {r[key]!r} vs {first[key]!r}")
        a = {k: v for k, v in r["train"].items() if k != "seed"}
        b = {k: v for k, v in first["train"].items() if k != "seed"}
        if a != b:
            raise InputError("cannot merge runs whose training settings differ (other than the seed)")
    rows = sorted((row for r in results for row in r["rows"]), key=lambda row: row["seed"])
    seeds = [row["seed"] for row in rows]
    if len(set(seeds)) != len(seeds):
        raise InputError(f"cannot merge runs with repeated seeds: {seeds}")
    decs = sorted((r["decode"] for r in results), key=lambda d: d["ratio"])
    dec = dict(decs[(len(decs) - 1) // 2])
    return summarize(
        rows, first["train"], first["memory"], n_eval=first["n_eval"], n_ppl=first["n_ppl"], decode=dec
    )


TARGETS = (
    ("recall delta_mem/frozen", "delta_mem/frozen", "higher", 1.2),
    ("recall delta_mem/bm25", "delta_mem/bm25", "higher", 1.0),
    ("ppl delta_mem/frozen", "ppl delta_mem/frozen", "lower", 1.01),
)


def targets(result: dict) -> list[dict]:
    out = []
    for name, key, better, bound in TARGETS:
        v = result["ratios_median"][key]
        met = v >= bound if better == "higher" else v <= bound
        out.append({"name": name, "value": v, "bound": bound, "better": better, "met": bool(met)})
    d = result["decode"]["ratio"]
    out.append(
        {
            "name": "decode time per token delta_mem/backbone",
            "value": d,
            "bound": 1.10,
            "better": "lower",
            "met": bool(d <= 1.10),
        }
    )
    return out


def table(result: dict) -> str:
    cols = (
        "frozen",
        "bm25",
        "lora",
        "delta_mem",
        "delta_mem_no_history",
        "ppl_frozen",
        "ppl_delta_mem",
        "ppl_lora",
    )
    heads = ("frozen", "bm25", "lora", "δ-Mem", "δ-Mem∅", "ppl fr", "ppl δ", "ppl lora")
    lines = [f"{'seed':>5} " + " ".join(f"{h:>8}" for h in heads)]
    for r in result["rows"]:
        lines.append(f"{r['seed']:>5} " + " ".join(f"{r[c]:>8.3f}" for c in cols))
    lines.append(f"{'med':>5} " + " ".join(f"{result['median'][c]:>8.3f}" for c in cols))
    lines.append("(δ-Mem∅: the trained δ-Mem with the history skipped — memory empty at the question)")
    return "\n".join(lines)
