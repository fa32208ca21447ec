"""Random float64 chunk problems (used by the tests and the demo)."""

import torch

from e2ttt.fastweights import FastWeight

DT = torch.float64


def problem(variant="mlp", B=2, H=2, d=4, dh=6, L=16, seed=0, beta=None, gamma=None):
    g = torch.Generator().manual_seed(seed)
    fw = FastWeight(variant, d, dh)
    W = tuple(w[None].expand(B, *w.shape).clone() for w in fw.init(H, generator=g, dtype=DT))
    W = tuple(w + 0.1 * torch.randn(w.shape, generator=g, dtype=DT) for w in W)
    m = tuple(0.1 * torch.randn(w.shape, generator=g, dtype=DT) for w in W)
    k = torch.randn(B, H, L, d, generator=g, dtype=DT)
    v = torch.randn(B, H, L, d, generator=g, dtype=DT)
    lr = 0.1 * torch.rand(B, H, L, generator=g, dtype=DT)
    lg = torch.log(
        torch.rand(B, H, L, generator=g, dtype=DT)
        if gamma is None
        else torch.full((B, H, L), gamma, dtype=DT)
    )
    lb = torch.log(
        torch.rand(B, H, L, generator=g, dtype=DT) if beta is None else torch.full((B, H, L), beta, dtype=DT)
    )
    ln_w = 0.5 + torch.rand(H, d, generator=g, dtype=DT)
    ln_b = 0.1 * torch.randn(H, d, generator=g, dtype=DT)
    return fw, W, m, k, v, lr, lg, lb, ln_w, ln_b


def rel(a, b):
    return max(float((x - y).norm() / y.norm().clamp(min=1e-300)) for x, y in zip(a, b))
