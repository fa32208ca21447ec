"""Needle accuracy on samples other than `reproduce`'s (which uses seeds 0..9), to check a setting chosen
while looking at the `reproduce` table on data it was not chosen on. κ = n/16, greedy decoding:

    python scripts/needle_fresh_samples.py tiny-s niah:512 passkey:1024 [--samples 20] [--seed 1000]

Prints dense, oracle, Prism with fixed 16-token blocks and pages (``min_blocks=0``), Prism with the
previous release's small-budget rules (``min_blocks=8``: κ spans 8 blocks, the global term at least 16
pages), the release before it (``min_blocks=8``, no page floor) and Prism with the default (``min_blocks=64``:
blocks and global pages of κ/64 tokens below κ = 1024)."""

import argparse

import torch
from prism_attn import PrismConfig
from prism_attn.experiments import needle_accuracy


def main() -> None:
    import papershelf_lm as lm

    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("cases", nargs="+", help="task:n, e.g. niah:512")
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, _ = lm.load(args.model)
    for case in args.cases:
        task, n = case.split(":")
        k = int(n) // 16
        configs = {
            "dense": PrismConfig(method="dense", kappa=k),
            "oracle": PrismConfig(method="oracle", kappa=k),
            "prism, 16-token blocks": PrismConfig(kappa=k, min_blocks=0, global_min_pages=0),
            "prism, min_blocks=8, no page floor": PrismConfig(kappa=k, min_blocks=8, global_min_pages=0),
            "prism, min_blocks=8": PrismConfig(kappa=k, min_blocks=8),
            "prism (default)": PrismConfig(kappa=k),
        }
        acc = needle_accuracy(model, int(n), configs, samples=args.samples, task=task, seed=args.seed)
        print(
            f"{args.model} {task} n={n} κ={k} ({args.samples} samples from seed {args.seed}):",
            acc,
            flush=True,
        )


if __name__ == "__main__":
    main()
