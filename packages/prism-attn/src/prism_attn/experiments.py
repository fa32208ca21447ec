"""The package's experiments: decode-step speed against dense attention (``bench``), and attention loss
versus κ plus needle accuracy at equal budget on the LM testbed (``reproduce``)."""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

import torch

from prism_attn import ops
from prism_attn.baselines import sdpa_decode
from prism_attn.config import PrismConfig
from prism_attn.data import random_cache
from prism_attn.decoder import PrismDecoder


# ---- speed --------------------------------------------------------------------------------------------
def speed_stack(
    n: int,
    *,
    layers: int = 32,
    heads: int = 32,
    kv_heads: int = 8,
    head_dim: int = 128,
    kappa: int = 2048,
    distinct_caches: int = 2,
    repeat: int = 3,
    config: PrismConfig | None = None,
    seed: int = 0,
    small_threads: int | None = None,
) -> dict[str, Any]:
    """One decode step through a synthetic ``layers``-deep stack, dense versus Prism, timed side by side.
    ``small_threads``: :class:`prism_attn.PrismDecoder`'s setting (``None``: every thread).

    The dense baseline is the faster (per layer, measured here) of SDPA with ``enable_gqa`` and the
    grouped-query matmul. Every layer gets its own random query; the KV caches (random, float32) cycle
    through ``distinct_caches`` tensors to bound memory — each is far larger than any CPU cache, so every
    layer streams its cache from memory as a real stack would.
    """
    from papershelf.bench import compare, measure

    caches = [
        random_cache(n, heads=heads, kv_heads=kv_heads, head_dim=head_dim, seed=seed + c)[1:]
        for c in range(distinct_caches)
    ]
    g = torch.Generator().manual_seed(seed + 99)
    qs = [torch.randn(1, heads, head_dim, generator=g) for _ in range(layers)]
    KVs = [caches[i % distinct_caches] for i in range(layers)]
    cfg = config or PrismConfig(kappa=kappa)

    threads = torch.get_num_threads()

    def grouped_1t(q, K, V):
        torch.set_num_threads(1)
        try:
            return ops.dense_decode(q, K, V)
        finally:
            torch.set_num_threads(threads)

    one = compare(
        lambda: sdpa_decode(qs[0], *KVs[0]), lambda: ops.dense_decode(qs[0], *KVs[0]), repeat=repeat
    )
    one_1t = measure(lambda: grouped_1t(qs[0], *KVs[0]), repeat=repeat)
    layer_ms = {
        f"sdpa-gqa@{threads}t": 1e3 * one.baseline.median,
        f"grouped-matmul@{threads}t": 1e3 * one.candidate.median,
    }
    if threads > 1:
        layer_ms["grouped-matmul@1t"] = 1e3 * one_1t.median
    dense_name = min(layer_ms, key=layer_ms.get)
    dense_layer = {"sdpa-gqa": sdpa_decode, "grouped-matmul": ops.dense_decode}[dense_name.split("@")[0]]
    if dense_name.endswith("@1t") and threads > 1:
        dense_layer = grouped_1t

    def dense_stack():
        for q, (K, V) in zip(qs, KVs):
            dense_layer(q, K, V)

    def stack_of(config):
        dec = PrismDecoder(config, backend="torch", small_threads=small_threads)

        def run():
            for layer, (q, (K, V)) in enumerate(zip(qs, KVs)):
                dec.step(layer, q, K, V)

        run()  # warm-up: builds the per-layer block metadata (kept incrementally while decoding)
        dec.bytes_read = 0
        run()
        return run, dec.bytes_read

    prism_stack, prism_bytes = stack_of(cfg)
    # the same schedule without the proposal's global term, timed in the same interleaved run
    local_stack, local_bytes = stack_of(_with(cfg, global_pages=0))
    row = kv_heads * head_dim * 4
    dense_bytes = layers * 2 * n * row
    times: dict[str, list[float]] = {"dense": [], "prism": [], "local": []}
    order = [("dense", dense_stack), ("prism", prism_stack), ("local", local_stack)]
    for i in range(repeat):  # rotate the order so machine drift hits every variant alike
        for name, fn in order[i % 3 :] + order[: i % 3]:
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "n": n,
        "layers": layers,
        "kappa": cfg.budget(n),
        "threads": threads,
        "dense_layer_ms": layer_ms,
        "dense": dense_name,
        "dense_ms": 1e3 * med["dense"],
        "prism_ms": 1e3 * med["prism"],
        "prism_local_ms": 1e3 * med["local"],
        "speedup": med["dense"] / med["prism"],
        "speedup_local": med["dense"] / med["local"],
        "dense_bytes": dense_bytes,
        "prism_bytes": prism_bytes,
        "prism_local_bytes": local_bytes,
        "dense_gbps": dense_bytes / med["dense"] / 1e9,
        "repeats": repeat,
        "config": _config_dict(cfg),
    }


def _config_dict(cfg: PrismConfig) -> dict[str, Any]:
    from dataclasses import asdict

    d = asdict(cfg)
    d["anchor_layers"] = None if cfg.anchor_layers is None else list(cfg.anchor_layers)
    d["dense_layers"] = list(cfg.dense_layers)
    return d


def kappa_for(n: int, frac: float) -> int:
    return max(1, math.ceil(frac * n))


# ---- quality -----------------------------------------------------------------------------------------
COMPARED = ("oracle", "prism", "prism-local", "static", "quest")


def _compared(base: PrismConfig, k: int) -> dict[str, PrismConfig]:
    """The compared methods at budget k; ``prism-local`` is Prism without the global term."""
    out = {}
    for m in COMPARED:
        if m == "prism-local":
            out[m] = _with(base, method="prism", kappa=k, global_pages=0)
        else:
            out[m] = _with(base, method=m, kappa=k)
    return out


def _need_testbed():
    try:
        import papershelf_lm
    except ImportError:
        from papershelf.errors import MissingDependencyError

        raise MissingDependencyError("papershelf_lm", package="prism-attn", extra="bench") from None
    return papershelf_lm


def corpus_texts(n: int, count: int = 4, seed: int = 0) -> list[torch.Tensor]:
    """``count`` windows of n tokens (1, n) from the testbed corpus's validation split — development text
    for :func:`prism_attn.calibrate.calibrate_anchors` (no task needle or question in it)."""
    import numpy as np
    from papershelf_lm.corpus import corpus_bytes
    from papershelf_lm.tokenizer import encode_bytes

    _need_testbed()
    data = corpus_bytes("validation")
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(data) - n, size=count)
    return [torch.tensor(encode_bytes(data[int(s) : int(s) + n]))[None] for s in starts]


def loss_table(qs_by_pos, Ks_by_pos, Vs_by_pos, configs: dict[str, PrismConfig], scalings=None, errors=None):
    """Mean attention loss of each config over the given decode steps and every non-dense layer.

    With a dict ``errors``, also fills ``errors[name]`` with the mean relative error ‖o − o_dense‖/‖o_dense‖
    of the attention outputs of those layers (each layer fed the true q, K, V)."""
    from prism_attn.decoder import decode_step
    from prism_attn.ops import attention_loss, dense_decode

    out = {}
    for name, cfg in configs.items():
        losses, errs = [], []
        for qs, Ks, Vs in zip(qs_by_pos, Ks_by_pos, Vs_by_pos):
            outs, sels = decode_step(qs, Ks, Vs, cfg, backend="torch")
            for layer, sel in enumerate(sels):
                if sel is None:
                    continue
                sc = None if scalings is None else scalings[layer]
                losses.append(float(attention_loss(qs[layer], Ks[layer], sel, sc).mean()))
                ref = dense_decode(qs[layer], Ks[layer], Vs[layer], sc)
                errs.append(float((outs[layer] - ref).norm() / ref.norm()))
        out[name] = sum(losses) / len(losses) if losses else 0.0
        if errors is not None:
            errors[name] = sum(errs) / len(errs) if errs else 0.0
    return out


def testbed_steps(model, n: int, *, positions: int = 8, seed: int = 0, task: str = "niah"):
    """Decode steps taken from one forward pass of the testbed model over an ``n``-token task sample:
    the query of each of the last ``positions`` tokens (spaced 37 apart) against the cache before it."""
    lm = _need_testbed()
    from papershelf_lm.tasks import generate

    sample = generate(task, n, seed, split="validation")
    _, caps = lm.capture(model, torch.from_numpy(sample.ids)[None])
    T = len(sample.ids)
    steps_q, steps_k, steps_v = [], [], []
    for i in range(positions):
        t = T - 1 - 37 * i
        steps_q.append([c.query[:, :, t].contiguous() for c in caps])
        steps_k.append([c.key[:, :, : t + 1].contiguous() for c in caps])
        steps_v.append([c.value[:, :, : t + 1].contiguous() for c in caps])
    return steps_q, steps_k, steps_v, [c.scaling for c in caps]


def loss_curves(model, n: int, fracs=(1 / 64, 1 / 32, 1 / 16, 1 / 8), *, base: PrismConfig | None = None,
                positions: int = 8, seeds=(0, 1)) -> dict[str, Any]:  # fmt: skip
    """Mean attention loss versus κ for oracle / Prism / static reuse / Quest on testbed attention."""
    base = base or PrismConfig()
    steps = [testbed_steps(model, n, positions=positions, seed=s) for s in seeds]
    rows = []
    for frac in fracs:
        k = kappa_for(n, frac)
        configs = _compared(base, k)
        acc = {m: 0.0 for m in COMPARED}
        err = {m: 0.0 for m in COMPARED}
        for qs, Ks, Vs, scalings in steps:
            errors: dict[str, float] = {}
            for m, v in loss_table(qs, Ks, Vs, configs, scalings, errors).items():
                acc[m] += v / len(steps)
                err[m] += errors[m] / len(steps)
        rows.append({"n": n, "kappa": k, "frac": frac, **acc, "output_rel_error": err})
    return {"n": n, "rows": rows}


def synthetic_curves(fracs=(1 / 64, 1 / 32, 1 / 16, 1 / 8), *, n=2048, layers=8, seeds=(0, 1, 2)):
    """The same curves on planted drifting spans (the premise of the method holds by construction)."""
    from prism_attn.data import planted_stack

    rows = []
    for frac in fracs:
        k = kappa_for(n, frac)
        acc = {m: 0.0 for m in COMPARED}
        for seed in seeds:
            shape = dict(spans=4, span_len=16, drift=8, heads=8, kv_heads=2, head_dim=32, strength=6.0)
            qs, Ks, Vs, _ = planted_stack(n, layers=layers, **shape, seed=seed)
            configs = _compared(PrismConfig(dense_layers=(), block=8, radius=1), k)
            for m, v in loss_table([qs], [Ks], [Vs], configs).items():
                acc[m] += v / len(seeds)
        rows.append({"n": n, "kappa": k, "frac": frac, **acc})
    return {"n": n, "rows": rows}


def _with(cfg: PrismConfig, **changes) -> PrismConfig:
    from dataclasses import replace

    return replace(cfg, **changes)


def needle_accuracy(model, n: int, configs: dict[str, PrismConfig], *, samples=10, task="niah", seed=0,
                    prompt_anchors: int | None = None):  # fmt: skip
    """Greedy-decoding accuracy (whole answer exact) of each config on ``samples`` held-out samples; the
    prefill is dense and every answer token is decoded through the config's attention.

    ``prompt_anchors=N``: every Prism / static config gets the N anchor layers
    :func:`prism_attn.calibrate.calibrate_anchors` picks on each sample's own prompt (what ``eval
    --calibrate-anchors N`` does without a calibration file)."""
    lm = _need_testbed()
    from papershelf_lm.tasks import generate

    from prism_attn.calibrate import calibrate_anchors
    from prism_attn.hf import enable

    right = {name: 0 for name in configs}
    for i in range(samples):
        s = generate(task, n, seed + i, split="validation")
        prompt = torch.from_numpy(s.ids[: s.prompt_length])[None]
        answer = s.ids[s.prompt_length :][s.question[s.prompt_length :] == 0]  # the first question
        for name, cfg in configs.items():
            if prompt_anchors is not None and cfg.method in ("prism", "static"):
                anchors = calibrate_anchors(model, prompt, cfg, anchors=prompt_anchors).anchor_layers
                cfg = _with(cfg, anchor_layers=anchors)
            with enable(model, cfg):
                got = lm.greedy_generate(model, prompt, len(answer))[0].numpy()
            right[name] += int(len(got) == len(answer) and (got == answer).all())
    return {name: r / samples for name, r in right.items()}
