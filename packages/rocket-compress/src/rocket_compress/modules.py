"""``FactorizedLinear``: a drop-in ``nn.Linear`` replacement computing ``y = (x A) B + b``.

Shapes (torch convention, ``in_features`` → ``out_features``): ``a`` is (k × in) — the paper's Aᵀ —;
B (k × out, column-sparse) is stored per output as ``width`` (row index, value) pairs in ``b_index``
(out × width, int32 buffer) and ``b_values`` (out × width, parameter), padded with value 0 at index 0;
``b_count`` (out, int32 buffer) holds the true non-zeros of each output column.
"""

from __future__ import annotations

import torch
from torch import nn

from papershelf.device import resolve_backend
from rocket_compress.kernels.ell_matmul import ell_matmul_torch, ell_matmul_triton, ell_to_dense


class FactorizedLinear(nn.Module):
    """Dense A, column-sparse B: ``in_features·k + Σ b_count`` parameters (+ bias) instead of in·out."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        rank: int,
        width: int,
        *,
        bias: bool = False,
        dtype: torch.dtype = torch.float32,
        device=None,
        backend: str = "torch",
    ) -> None:
        super().__init__()
        self.in_features, self.out_features, self.rank, self.width = in_features, out_features, rank, width
        self.a = nn.Parameter(torch.zeros(rank, in_features, dtype=dtype, device=device), requires_grad=False)
        self.b_values = nn.Parameter(
            torch.zeros(out_features, width, dtype=dtype, device=device), requires_grad=False
        )
        self.register_buffer("b_index", torch.zeros(out_features, width, dtype=torch.int32, device=device))
        self.register_buffer("b_count", torch.zeros(out_features, dtype=torch.int32, device=device))
        self.bias = (
            nn.Parameter(torch.zeros(out_features, dtype=dtype, device=device), requires_grad=False)
            if bias
            else None
        )
        self.backend = backend

    @classmethod
    def from_factors(
        cls,
        A: torch.Tensor,
        B: torch.Tensor,
        mask: torch.Tensor | None,
        bias=None,
        *,
        dtype=torch.float32,
        backend: str = "torch",
    ) -> FactorizedLinear:
        """From the paper's A (in × k) and B (k × out) with pattern ``mask`` (None: all kept)."""
        d1, k = A.shape
        d2 = B.shape[1]
        if mask is None:
            mask = torch.ones(k, d2, dtype=torch.bool)
        counts = mask.sum(0)
        width = max(int(counts.max()), 1)
        # per output column, the kept row indices first (ascending), then padding
        key = (~mask).to(torch.int64) * k + torch.arange(k)[:, None]
        order = key.argsort(dim=0)[:width]  # width × out
        vals = torch.gather(B * mask, 0, order)
        keep = torch.gather(mask, 0, order)
        idx = torch.where(keep, order, torch.zeros_like(order))
        vals = torch.where(keep, vals, torch.zeros_like(vals))
        mod = cls(d1, d2, k, width, bias=bias is not None, dtype=dtype, backend=backend)
        mod.a.data.copy_(A.T.to(dtype))
        mod.b_values.data.copy_(vals.T.to(dtype))
        mod.b_index.copy_(idx.T.to(torch.int32))
        mod.b_count.copy_(counts.to(torch.int32))
        if bias is not None:
            mod.bias.data.copy_(bias.to(dtype))
        return mod

    @property
    def n_params(self) -> int:
        """Stored parameters: A's entries plus B's true non-zeros (plus bias); index storage excluded."""
        extra = self.out_features if self.bias is not None else 0
        return self.rank * self.in_features + int(self.b_count.sum()) + extra

    @property
    def index_entries(self) -> int:
        """Row indices that B's non-zeros need (0 when B is dense)."""
        return 0 if int(self.b_count.min()) == self.rank else int(self.b_count.sum())

    def dense_weight(self) -> torch.Tensor:
        """The equivalent ``nn.Linear`` weight (out × in) = (A B)ᵀ."""
        return ell_to_dense(self.b_values, self.b_index, self.rank) @ self.a

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.linear(x, self.a)
        backend = resolve_backend(self.backend) if self.backend != "torch" else "torch"
        if backend == "triton":
            return ell_matmul_triton(h, self.b_values, self.b_index, self.bias)
        return ell_matmul_torch(h, self.b_values, self.b_index, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, rank={self.rank}, "
            f"width={self.width}, nnz={int(self.b_count.sum())}, bias={self.bias is not None}"
        )
