"""Can this backbone's segmentation-layer tokens segment the scenes at all? A diagnostic, not a checkpoint:
train a preset from its random init *with per-token labels* (each token's majority class, as the probe
uses) on segmentation scenes (seeds disjoint from eval's), and print eval's frozen per-token linear-probe
mIoU before and during training. It places the self-supervised checkpoints between random init and what
labels reach with the same network, probe and data.

    python shared/papershelf-vision/scripts/supervised_segmentation_check.py [--preset P] [--steps 1500]
"""

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F
from papershelf_vision import data as D
from papershelf_vision import evaluate as E
from papershelf_vision.models import build, to_tensor
from papershelf_vision.train import embedding_and_grid, segmentation_grid

TRAIN_SEED = 10**7  # eval's scenes use seeds 11·1000003 + i and 12·1000003 + i


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="resnet-s")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--every", type=int, default=500)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    net = build(args.preset, seed=0)
    size = net.config.image_size
    classes = D.SEGMENTATION_CLASSES
    to_index = np.zeros(len(D.CLASSES) + 1, np.int64)  # semantic id -> 0 (background) or 1 + class index
    for i, name in enumerate(classes):
        to_index[D.class_id(name)] = i + 1

    def probe(step: int) -> None:
        score = E.segmentation_miou(net)
        print(f"step {step:5d}  token-probe mIoU {score:.3f}  ({time.time() - t0:.0f} s)", flush=True)

    t0 = time.time()
    probe(0)
    grid = segmentation_grid(net, embedding_and_grid(net, torch.zeros(1, 3, size, size))[1])
    head = torch.nn.Conv2d(grid.shape[1], len(classes) + 1, 1)
    opt = torch.optim.AdamW([*net.parameters(), *head.parameters()], lr=1e-3)
    for step in range(1, args.steps + 1):
        scenes = [D.scene(TRAIN_SEED + step * args.batch + i, size, n_objects=(1, 4), classes=classes)
                  for i in range(args.batch)]  # fmt: skip
        x = to_tensor(np.stack([s.image for s in scenes]))
        masks = np.stack([s.semantic for s in scenes]).astype(np.int64)
        net.train()
        logits = head(segmentation_grid(net, embedding_and_grid(net, x)[1]))
        target = torch.as_tensor(to_index[E.token_labels(masks, *logits.shape[-2:])])
        loss = F.cross_entropy(logits, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % args.every == 0 or step == args.steps:
            probe(step)


if __name__ == "__main__":
    main()
