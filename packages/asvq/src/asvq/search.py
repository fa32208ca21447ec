"""Fast nearest-code search: chunked matmul distances with the code norms precomputed, then argmin.

``argmin_k ||x - c_k||² = argmin_k (||c_k||² - 2 x·c_k)`` because ``||x||²`` is the same for every code,
so each chunk of rows costs one ``addmm`` against the (K, d) codebook and one ``argmin``; memory is
``chunk_size × K`` scores, never ``N × K``.
"""

from __future__ import annotations

import torch

from papershelf.errors import InputError, check_int

DEFAULT_CHUNK = 4096


def nearest_code(
    x: torch.Tensor,
    codes: torch.Tensor,
    *,
    codes_sqnorm: torch.Tensor | None = None,
    chunk_size: int = DEFAULT_CHUNK,
) -> torch.Tensor:
    """Index of the nearest code (squared Euclidean) for every row of ``x``.

    Args:
        x: ``(N, d)`` float32 or float64 vectors.
        codes: ``(K, d)`` codebook of the same dtype and device.
        codes_sqnorm: optional precomputed ``(codes ** 2).sum(-1)``, shape ``(K,)``.
        chunk_size: rows of ``x`` scored at a time.

    Returns:
        ``(N,)`` int64 indices; ties go to the lowest index (``torch.argmin``).

    >>> import torch
    >>> codes = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    >>> nearest_code(torch.tensor([[0.9, 0.1], [-2.0, 0.0]]), codes).tolist()
    [0, 1]
    """
    if not (isinstance(x, torch.Tensor) and isinstance(codes, torch.Tensor)):
        raise InputError(
            f"x and codes must be torch tensors, got {type(x).__name__} and {type(codes).__name__}"
        )
    if x.ndim != 2 or codes.ndim != 2:
        raise InputError(f"x and codes must be 2-D, got shapes {tuple(x.shape)} and {tuple(codes.shape)}")
    if x.shape[1] != codes.shape[1]:
        raise InputError(f"x has dimension {x.shape[1]} but the codes have dimension {codes.shape[1]}")
    if codes.shape[0] < 1:
        raise InputError("codes must hold at least one code")
    if not (x.is_floating_point() and codes.is_floating_point()):
        raise InputError(f"x and codes must be floating point, got {x.dtype} and {codes.dtype}")
    if not bool(torch.isfinite(x).all()):  # one pass over x, small next to the N·K·d scores
        raise InputError("x contains NaN or infinite values")
    if not bool(torch.isfinite(codes).all()):  # a NaN code would silently win or lose every argmin
        raise InputError("codes contain NaN or infinite values")
    if codes_sqnorm is not None:
        if not isinstance(codes_sqnorm, torch.Tensor) or tuple(codes_sqnorm.shape) != (codes.shape[0],):
            raise InputError(f"codes_sqnorm must be a ({codes.shape[0]},) tensor of the codes' squared norms")
        if not bool(torch.isfinite(codes_sqnorm).all()):
            raise InputError("codes_sqnorm contains NaN or infinite values")
    chunk_size = check_int("chunk_size", chunk_size, low=1)
    with torch.no_grad():
        codes = codes.detach().to(x.dtype)
        if codes_sqnorm is None:
            codes_sqnorm = (codes * codes).sum(-1)
        csq = codes_sqnorm.detach().to(x.dtype).unsqueeze(0)
        codes_t = codes.t()
        out = torch.empty(x.shape[0], dtype=torch.long, device=x.device)
        for start in range(0, x.shape[0], chunk_size):
            xc = x[start : start + chunk_size].detach()
            scores = torch.addmm(csq, xc, codes_t, beta=1.0, alpha=-2.0)
            out[start : start + xc.shape[0]] = scores.argmin(dim=1)
    return out


def cdist_nearest(x: torch.Tensor, codes: torch.Tensor, *, chunk_size: int = DEFAULT_CHUNK) -> torch.Tensor:
    """The same search with ``torch.cdist`` + argmin (a second baseline for ``bench``)."""
    with torch.no_grad():
        out = torch.empty(x.shape[0], dtype=torch.long, device=x.device)
        for start in range(0, x.shape[0], chunk_size):
            xc = x[start : start + chunk_size]
            out[start : start + xc.shape[0]] = torch.cdist(xc, codes).argmin(dim=1)
    return out
