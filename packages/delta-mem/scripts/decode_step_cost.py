"""What one δ-Mem decode step of the torch twin costs inside a model versus alone (one thread):

    python scripts/decode_step_cost.py [--model tiny-m]

Prints the memory's decode step (one layer, one token) timed inside greedy decoding of the wrapped
testbed model, the same step timed alone in a loop, and alone right after streaming over 64 MB (what a
backbone layer's weights do to the caches between two memory steps). Medians."""

import argparse
import copy
import statistics
import time

import torch
from delta_mem.experiments import decode_seconds, load_backbone
from delta_mem.memory import DeltaMemConfig, DeltaMemLayer
from delta_mem.wrap import attach_delta_mem, memory_layers


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-m")
    args = ap.parse_args()
    torch.set_num_threads(1)
    backbone, label = load_backbone(args.model)
    model = copy.deepcopy(backbone)
    attach_delta_mem(model, DeltaMemConfig(decode_backend="torch"))  # the torch twin is what is timed
    prompt = torch.randint(0, 256, (1, 64), generator=torch.Generator().manual_seed(0))
    step, inside = DeltaMemLayer._decode_step, []

    def timed(self, x):
        t0 = time.perf_counter()
        out = step(self, x)
        inside.append(time.perf_counter() - t0)
        return out

    DeltaMemLayer._decode_step = timed
    try:
        for _ in range(3):
            decode_seconds(model, prompt, 32)
    finally:
        DeltaMemLayer._decode_step = step
    layer = memory_layers(model)[0]
    x = torch.randn(1, 1, layer.in_proj.in_features)
    stream = torch.zeros(16 * 2**20)  # 64 MB
    alone, after_stream = [], []
    with torch.no_grad():
        for i in range(400):
            if i % 2:
                stream.add_(1.0)
            t0 = time.perf_counter()
            layer._decode_step(x)
            (after_stream if i % 2 else alone).append(time.perf_counter() - t0)
    for name, ts in (("inside decoding", inside), ("alone", alone), ("alone, after 64 MB", after_stream)):
        print(f"{label} decode step {name:20s} {statistics.median(ts) * 1e6:8.1f} us")


if __name__ == "__main__":
    main()
