"""How mirror-invariant are a network's features, and what does that cost on digits? A diagnostic, not
a checkpoint. For each model (a shipped name, a model folder, or ``random:PRESET`` for the preset at
random init, seed 0) it prints the digits linear probe and k-NN (eval's protocol), a quicker held-out-class
probe (1000 / 500 object views, seeds 1 / 2), and the mean cosine between the embeddings of each test
digit and of its mirror image (both centred on the training digits' mean embedding): 1 means the
features cannot tell a digit from its mirror image.

    python shared/papershelf-vision/scripts/mirror_check.py random:resnet-s resnet-s [runs/x/model ...]
"""

import argparse

import numpy as np
import torch
from papershelf_vision import build, load
from papershelf_vision import data as D
from papershelf_vision.evaluate import embed, knn_accuracy, linear_probe_accuracy


def mirror_cosine(model, train: np.ndarray, test: np.ndarray) -> float:
    centre = embed(model, train).mean(0)
    a = embed(model, test) - centre
    b = embed(model, test[:, :, ::-1].copy()) - centre
    return float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).mean())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtr, ytr = D.digits("train", 32)
    dte, yte = D.digits("test", 32)
    htr, hytr = D.objects(1000, size=32, seed=1)
    hte, hyte = D.objects(500, size=32, seed=2)
    print("model | digits linear / k-NN | held-out linear / k-NN (1000 / 500) | mirror cosine")
    for name in args.models:
        model = build(name.split(":", 1)[1], seed=0) if name.startswith("random:") else load(name)
        a, b = embed(model, dtr), embed(model, dte)
        h1, h2 = embed(model, htr), embed(model, hte)
        digits = linear_probe_accuracy(a, ytr, b, yte), knn_accuracy(a, ytr, b, yte)
        held = linear_probe_accuracy(h1, hytr, h2, hyte), knn_accuracy(h1, hytr, h2, hyte)
        cos = mirror_cosine(model, dtr, dte)
        scores = f"{digits[0]:.3f} / {digits[1]:.3f} | {held[0]:.3f} / {held[1]:.3f} | {cos:.3f}"
        print(f"{name} | {scores}", flush=True)


if __name__ == "__main__":
    main()
