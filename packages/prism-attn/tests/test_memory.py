"""No n×n or H×n×n temporaries on the decode path: every tensor a step creates is O(H·n)."""

import torch
from prism_attn import PrismConfig, PrismDecoder
from prism_attn.data import random_cache
from torch.utils._python_dispatch import TorchDispatchMode


class Largest(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def _largest(n, method):
    H, Hkv, D = 8, 2, 16
    q, K, V = random_cache(n, heads=H, kv_heads=Hkv, head_dim=D, seed=0)
    dec = PrismDecoder(PrismConfig(method=method, kappa=n // 16), backend="torch")
    with Largest() as mode:
        for layer in range(3):
            dec.step(layer, q, K, V)
    return mode.largest


def test_largest_temporary_is_linear_in_n():
    for method in ("prism", "oracle", "static", "quest", "dense"):
        small, big = _largest(1024, method), _largest(4096, method)
        H, D = 8, 16
        assert big <= max(H * 4096, 2 * 4096 * D), (method, big)  # O(H·n): scores, or one gather of rows
        assert big <= 4.5 * small, (method, small, big)  # grows linearly, not quadratically
        assert big < 4096 * 4096 // 8
