"""Sweep of the proposal's global term on a testbed model: mean attention loss (8 decode positions x 2
held-out samples, every sparse layer) and greedy passkey / 4-key NIAH accuracy (10 held-out samples) at
κ = n/16 for each configuration. The README's "How much global term" numbers come from:

    python scripts/global_term_sweep.py tiny-m 1024 g=0 g=0.25 g=0.5 g=1 quest
    python scripts/global_term_sweep.py tiny-m 1024 g=1,cap=2 g=1,cap=3 g=0.5,cap=2
    python scripts/global_term_sweep.py tiny-m 1024 g=1,cap=2,span=2 g=1,cap=2,span=4

A configuration is ``quest`` or comma-separated ``g=`` (global_pages), ``cap=`` (max_candidates, default 4),
``span=`` (global_span, default 1); everything else is the package default.
"""

import sys

import torch
from prism_attn import PrismConfig
from prism_attn.experiments import loss_table, needle_accuracy, testbed_steps


def parse(spec: str, kappa: int) -> PrismConfig:
    if spec == "quest":
        return PrismConfig(method="quest", kappa=kappa)
    kw = {"g": 1.0, "cap": 4.0, "span": 1}
    for part in spec.split(","):
        key, value = part.split("=")
        kw[key] = float(value) if key != "span" else int(value)
    return PrismConfig(kappa=kappa, global_pages=kw["g"], max_candidates=kw["cap"], global_span=kw["span"])


def main() -> None:
    import papershelf_lm as lm

    torch.set_num_threads(1)
    model_name, n, specs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    model, _ = lm.load(model_name)
    k = n // 16
    configs = {spec: parse(spec, k) for spec in specs}
    steps = [testbed_steps(model, n, seed=s) for s in (0, 1)]
    loss = dict.fromkeys(configs, 0.0)
    for qs, Ks, Vs, scalings in steps:
        for name, value in loss_table(qs, Ks, Vs, configs, scalings).items():
            loss[name] += value / len(steps)
    print(model_name, n, "attention loss", {m: round(v, 4) for m, v in loss.items()}, flush=True)
    for task in ("passkey", "niah"):
        print(task, needle_accuracy(model, n, configs, samples=10, task=task), flush=True)


if __name__ == "__main__":
    main()
