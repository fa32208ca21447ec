"""Where one decode step of the bench's 32-layer stack spends its time: wall time per stage, summed over
the layers of a step (median-free: the mean of 5 steps after 2 warm-ups), default config, κ = 2048,
every thread of ``--threads``:

    python scripts/stack_stages.py 32768 [--threads 2] [--cap 2.0]

Stages are timed by wrapping the fast-path functions the decoder calls, so nested stages (gather_rows,
_topk_sorted) are also counted inside their callers."""

import argparse
import time

import torch
from prism_attn import PrismConfig, ops
from prism_attn.data import random_cache
from prism_attn.decoder import PrismDecoder

STAGES = ("dense_with_selection", "anchor", "global_blocks", "_propose", "refine_attend")
NESTED = ("gather_rows", "_topk_sorted")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cap", type=float, default=2.0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    caches = [random_cache(args.n, seed=c)[1:] for c in range(2)]
    g = torch.Generator().manual_seed(99)
    qs = [torch.randn(1, 32, 128, generator=g) for _ in range(32)]
    spent: dict[str, float] = {}

    def timed(name, fn):
        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            out = fn(*a, **kw)
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0
            return out

        return wrapper

    for name in STAGES + NESTED:
        setattr(ops, name, timed(name, getattr(ops, name)))
    dec = PrismDecoder(PrismConfig(kappa=2048, max_candidates=args.cap), backend="torch")

    def step():
        for layer, q in enumerate(qs):
            dec.step(layer, q, *caches[layer % 2])

    step(), step()
    spent.clear()
    t0 = time.perf_counter()
    for _ in range(5):
        step()
    per_step = (time.perf_counter() - t0) / 5 * 1e3
    print(f"n {args.n}, cap {args.cap}κ, {args.threads} threads: {per_step:.1f} ms/step")
    for name in STAGES + NESTED:
        print(f"{'  ' if name in NESTED else ''}{name:22s} {spent.get(name, 0.0) / 5 * 1e3:8.1f} ms/step")


if __name__ == "__main__":
    main()
