"""Where a refined layer's time goes: torch.profiler over 3 decode steps of a 6-layer stack (layer 0 dense,
layers 1-5 refined; random caches, 32 query / 8 KV heads, d = 128, κ = 2048, one thread), grouped by op and
input shape. The README's profile numbers come from ``python scripts/profile_refined_layer.py 32768``.
"""

import sys

import torch
from prism_attn import PrismConfig, PrismDecoder
from prism_attn.data import random_cache
from torch.profiler import ProfilerActivity, profile


def main() -> None:
    torch.set_num_threads(1)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 32768
    q, K, V = random_cache(n, seed=0)
    qs = [torch.randn_like(q) for _ in range(6)]
    dec = PrismDecoder(PrismConfig(kappa=2048, anchor_every=100), backend="torch")
    for layer in range(6):
        dec.step(layer, qs[layer], K, V)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(3):
            for layer in range(6):
                dec.step(layer, qs[layer], K, V)
    print(prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=20))


if __name__ == "__main__":
    main()
