"""Which anchors ``calibrate_anchors`` picks on each needle prompt by itself (what ``prism-attn eval
--calibrate-anchors 2`` does without a calibration file), counted over the needle sweeps' samples:

    python scripts/prompt_anchor_choices.py

`tiny-m` passkey at 2048 (seeds 2000–5000 × 40) and, stretched by YaRN × 2, at 4096 (seeds 2000–4000 × 40);
κ = n/16, 2 anchors."""

import collections

import papershelf_lm as lm
import torch
from papershelf_lm.tasks import generate
from prism_attn import PrismConfig
from prism_attn.calibrate import calibrate_anchors


def main() -> None:
    torch.set_num_threads(2)
    model, _ = lm.load("tiny-m")
    for n, yarn, seeds in ((2048, None, (2000, 3000, 4000, 5000)), (4096, 2, (2000, 3000, 4000))):
        if yarn:
            lm.extend_context(model, yarn)
        picks = collections.Counter()
        for seed in seeds:
            for i in range(40):
                s = generate("passkey", n, seed + i, split="validation")
                prompt = torch.from_numpy(s.ids[: s.prompt_length])[None]
                cal = calibrate_anchors(model, prompt, PrismConfig(kappa=n // 16), anchors=2)
                picks[cal.anchor_layers] += 1
        yarn_note = f" (YaRN x{yarn})" if yarn else ""
        print(f"passkey n={n}{yarn_note}, {sum(picks.values())} prompts: {dict(picks)}", flush=True)


if __name__ == "__main__":
    main()
