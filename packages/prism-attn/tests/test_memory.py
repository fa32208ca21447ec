"""No n×n or H×n×n temporaries on the decode path: every tensor a step creates is O(H·n)."""

from prism_attn import PrismConfig, PrismDecoder
from prism_attn.data import random_cache


def _largest(largest_tensor, n, method):
    H, Hkv, D = 8, 2, 16
    q, K, V = random_cache(n, heads=H, kv_heads=Hkv, head_dim=D, seed=0)
    dec = PrismDecoder(PrismConfig(method=method, kappa=n // 16), backend="torch")
    with largest_tensor() as mode:
        for layer in range(3):
            dec.step(layer, q, K, V)
    return mode.largest


def test_largest_temporary_is_linear_in_n(largest_tensor):
    for method in ("prism", "oracle", "static", "quest", "dense"):
        small, big = _largest(largest_tensor, 1024, method), _largest(largest_tensor, 4096, method)
        H, D = 8, 16
        assert big <= max(H * 4096, 2 * 4096 * D), (method, big)  # O(H·n): scores, or one gather of rows
        assert big <= 4.5 * small, (method, small, big)  # grows linearly, not quadratically
        assert big < 4096 * 4096 // 8
