"""Is the held-out-class probe learnable from the pretraining classes at all? A diagnostic, not a
checkpoint: train a preset *with labels* on object views of the pretraining classes (never the held-out
ones) and print the held-out linear probe and k-NN (eval's object views, seeds 1 / 2) before and during
training. If supervised features transfer and the self-supervised checkpoints do not, the objective is
what fails, not the data or the probe.

    python shared/papershelf-vision/scripts/supervised_transfer_check.py [--preset resnet-s] [--steps 400] \
        [--lr 1e-3 --warmup 0]
"""

import argparse
import time

import torch
import torch.nn.functional as F
from papershelf_vision import data as D
from papershelf_vision import evaluate as E
from papershelf_vision.models import build, to_tensor


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="resnet-s")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-train", type=int, default=1000)
    ap.add_argument("--n-test", type=int, default=500)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=0, help="linear learning-rate warm-up steps")
    ap.add_argument("--weight-decay", type=float, default=0.01)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    net = build(args.preset, seed=0)
    size = net.config.image_size
    xtr, ytr = D.objects(args.n_train, D.HELDOUT_CLASSES, size, seed=1)
    xte, yte = D.objects(args.n_test, D.HELDOUT_CLASSES, size, seed=2)

    def probe(step: int) -> None:
        ftr, fte = E.embed(net, xtr), E.embed(net, xte)
        lin = E.linear_probe_accuracy(ftr, ytr, fte, yte)
        knn = E.knn_accuracy(ftr, ytr, fte, yte)
        elapsed = time.time() - t0
        print(f"step {step:5d}  held-out linear {lin:.3f}  k-NN {knn:.3f}  ({elapsed:.0f} s)", flush=True)

    t0 = time.time()
    probe(0)
    head = torch.nn.Linear(net.embed_dim, len(D.PRETRAIN_CLASSES))
    opt = torch.optim.AdamW(
        [*net.parameters(), *head.parameters()], lr=args.lr, weight_decay=args.weight_decay
    )
    for step in range(1, args.steps + 1):
        for group in opt.param_groups:
            group["lr"] = args.lr * min(1.0, step / args.warmup) if args.warmup else args.lr
        x, y = D.objects(args.batch, D.PRETRAIN_CLASSES, size, seed=1000 + step)  # never seeds 1 / 2
        net.train()
        loss = F.cross_entropy(head(net(to_tensor(x))), torch.as_tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == args.steps:
            probe(step)


if __name__ == "__main__":
    main()
