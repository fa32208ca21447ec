"""A refined layer's candidate-key gather into a fresh tensor versus into a reused buffer (8 KV heads x 517
blocks of 16 tokens, d = 128, fp32, one thread, medians of 9). The README's 53.8 / 18.6 ms come from
``python scripts/gather_buffer.py 32768``.
"""

import sys
import time

import torch


def median_ms(fn, repeat=9) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * sorted(times)[repeat // 2]


def main() -> None:
    torch.set_num_threads(1)
    n, heads, dim = int(sys.argv[1]) if len(sys.argv) > 1 else 32768, 8, 128
    K = torch.randn(1, heads, n, dim)
    g = torch.Generator().manual_seed(0)
    blocks = torch.stack([torch.randperm(n // 16, generator=g)[:517].sort().values for _ in range(heads)])
    tokens = (blocks[..., None] * 16 + torch.arange(16)).reshape(heads, -1)
    rows = (torch.arange(heads)[:, None] * n + tokens).reshape(-1)
    flat = K.reshape(heads * n, dim)
    out = torch.empty(rows.numel(), dim)
    print(f"fresh result: {median_ms(lambda: flat.index_select(0, rows)):.1f} ms")
    print(f"reused buffer: {median_ms(lambda: torch.index_select(flat, 0, rows, out=out)):.1f} ms")
    print(f"streaming the whole key cache (sum): {median_ms(lambda: K.sum()):.1f} ms")


if __name__ == "__main__":
    main()
