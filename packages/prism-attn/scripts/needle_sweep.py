"""Greedy needle accuracy at κ = n/16 for several Prism settings on fresh samples — the data the page
floor (``global_min_pages``) was chosen and checked on:

    python scripts/needle_sweep.py tiny-s niah:512 --seed 2000 --samples 100 \
        dense oracle floor=0 floor=16 anchors=0,3+floor=0 radius=2+floor=0 cap=4+floor=0 g=0
    python scripts/needle_sweep.py tiny-m passkey:2048 --seed 2000 --samples 40 \
        dense oracle floor=16 floor=32 floor=64
    python scripts/needle_sweep.py tiny-m passkey:1024 passkey:2048 --seed 3000 --samples 40 \
        dense floor=0 floor=16
    python scripts/needle_sweep.py tiny-m passkey:4096 --yarn 2 --seed 2000 --samples 40 dense g=1

A setting is ``dense``, ``oracle``, or comma-free ``key=value`` pairs joined by ``+``: ``floor=``
(global_min_pages), ``g=`` (global_pages), ``cap=`` (max_candidates), ``radius=``, ``mb=`` (min_blocks),
``span=`` (global_span), ``anchors=0,3`` (anchor_layers); everything else is the package default.
``--yarn F`` stretches the model's RoPE to F × its trained context first (papershelf-lm's
``extend_context``). ``--calibrate N`` gives every Prism setting without ``anchors=`` the N anchor layers
``prism_attn.calibrate_anchors`` picks on 4 held-out corpus texts of each case's length;
``--calibrate-on-prompt N`` instead calibrates every Prism setting on each sample's own prompt (what
``prism-attn eval --calibrate-anchors N`` does without a calibration file):

    python scripts/needle_sweep.py tiny-m passkey:4096 --yarn 2 --seed 2000 --samples 40 --calibrate 2 \
        dense g=1"""

import argparse

import torch
from prism_attn import PrismConfig
from prism_attn.experiments import needle_accuracy

KEYS = {"floor": ("global_min_pages", int), "g": ("global_pages", float), "cap": ("max_candidates", float),
        "radius": ("radius", int), "mb": ("min_blocks", int), "span": ("global_span", int)}  # fmt: skip


def parse(spec: str, kappa: int) -> PrismConfig:
    if spec in ("dense", "oracle"):
        return PrismConfig(method=spec, kappa=kappa)
    kw = {}
    for part in spec.split("+"):
        key, value = part.split("=")
        if key == "anchors":
            kw["anchor_layers"] = tuple(int(v) for v in value.split(","))
        else:
            name, cast = KEYS[key]
            kw[name] = cast(value)
    return PrismConfig(kappa=kappa, **kw)


def main() -> None:
    import papershelf_lm as lm

    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("cases", nargs="+", help="task:n cases, then the settings")
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--seed", type=int, default=2000)
    ap.add_argument("--yarn", type=float, default=None)
    ap.add_argument("--calibrate", type=int, default=None, metavar="N")
    ap.add_argument("--calibrate-on-prompt", type=int, default=None, metavar="N")
    args = ap.parse_intermixed_args()
    cases = [c for c in args.cases if ":" in c]
    specs = [c for c in args.cases if ":" not in c]
    if args.calibrate_on_prompt is not None and (
        args.calibrate is not None or any("anchors=" in s for s in specs)
    ):
        ap.error("--calibrate-on-prompt sets every Prism setting's anchors: no --calibrate, no anchors=")
    torch.set_num_threads(1)
    model, _ = lm.load(args.model)
    if args.yarn is not None:
        lm.extend_context(model, args.yarn)
    yarn = f" YaRN x{args.yarn:g}" if args.yarn else ""
    for case in cases:
        task, n = case.split(":")
        configs = {spec: parse(spec, int(n) // 16) for spec in specs}
        if args.calibrate is not None:
            from prism_attn.calibrate import calibrate_anchors
            from prism_attn.experiments import corpus_texts

            cal = calibrate_anchors(model, corpus_texts(int(n)), PrismConfig(kappa=int(n) // 16),
                                    anchors=args.calibrate)  # fmt: skip
            print(f"calibrated anchors {cal.anchor_layers} at n={n}", flush=True)
            for spec, cfg in configs.items():
                if cfg.method == "prism" and "anchors=" not in spec:
                    configs[spec] = PrismConfig(**{**vars(cfg), "anchor_layers": cal.anchor_layers})
        acc = needle_accuracy(model, int(n), configs, samples=args.samples, task=task, seed=args.seed,
                              prompt_anchors=args.calibrate_on_prompt)  # fmt: skip
        setup = f"{task} n={n} κ={int(n) // 16} ({args.samples} samples from seed {args.seed})"
        head = f"{args.model}{yarn} {setup}:"
        print(head, acc, flush=True)


if __name__ == "__main__":
    main()
