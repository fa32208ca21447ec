"""Median wall time of each stage of one refined layer against one dense layer (one thread, random cache,
32 query / 8 KV heads, d = 128, κ = 2048, default config): ``python scripts/refined_layer_stages.py 32768``.
Stages are timed one after another on the same inputs, so compare them within one run only."""

import statistics
import sys
import time

import torch
from prism_attn import PrismConfig, ops
from prism_attn.data import random_cache


def _median_ms(fn, repeat=7):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main() -> None:
    torch.set_num_threads(1)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 32768
    q, K, V = random_cache(n, seed=0)
    cfg = PrismConfig(kappa=2048).validate()
    kappa, scaling = cfg.budget(n), K.shape[-1] ** -0.5
    _, prev = ops.anchor(torch.randn_like(q), K, V, kappa, scaling)
    meta = ops.PageBounds(cfg.block, cfg.global_meta_dtype(K.dtype)).update(K)
    work = ops.Workspace()
    extra = ops.global_blocks(q, meta, cfg.global_count(kappa), n, scaling=scaling)
    cand = ops._propose(prev, n, cfg.radius, cfg.block, cfg.sink, cfg.local, cfg.candidate_cap(kappa), extra)
    cand_local = ops._propose(prev, n, cfg.radius, cfg.block, cfg.sink, cfg.local, cfg.candidate_cap(kappa))
    stages = {
        "global term": lambda: ops.global_blocks(q, meta, cfg.global_count(kappa), n, scaling=scaling),
        "proposal": lambda: ops._propose(
            prev, n, cfg.radius, cfg.block, cfg.sink, cfg.local, cfg.candidate_cap(kappa), extra
        ),
        "refine + attend": lambda: ops.refine_attend(q, K, V, cand, kappa, scaling, work=work),
        "  of which key gather": lambda: ops.gather_rows(K, cand, work.get("keys", cand.numel() * 128, K)),
        "refine + attend, no global": lambda: ops.refine_attend(
            q, K, V, cand_local, kappa, scaling, work=work
        ),
        "dense layer": lambda: ops.dense_decode(q, K, V),
    }
    ms = {name: _median_ms(fn) for name, fn in stages.items()}
    for name, v in ms.items():
        print(f"{name:24s} {v:8.2f} ms")
    refined = ms["global term"] + ms["proposal"] + ms["refine + attend"]
    ratio = refined / ms["dense layer"]
    local = cand_local.shape[-1]
    print(f"refined layer / dense layer: {ratio:.2f} (candidates {cand.shape[-1]}; {local} without global)")


if __name__ == "__main__":
    main()
