"""The slow, obviously-correct δ-Mem state scan, straight from the update equation (float64-capable).

For every batch row ``b`` and state head ``h`` the state ``S`` is a ``d_v × d_k`` matrix. At step ``t``
the read happens first, then the write:

    r_t = S_{t-1} q_t
    S_t = diag(keep_t) S_{t-1} − diag(erase_t) (S_{t-1} k_t) k_tᵀ + diag(write_t) v_t k_tᵀ

``keep``, ``erase`` and ``write`` are per-row (value-dimension) coefficients; the paper's update modes
only differ in how they are made from the gates β and λ (see :func:`delta_mem.scan.gate_coefficients`).
"""

from __future__ import annotations

import torch


def scan_reference(q, k, v, keep, erase, write, S0=None):
    """Sequential scan, one step at a time, with explicit matrix algebra.

    Shapes: ``q``, ``k`` (B, H, T, d_k); ``v``, ``keep``, ``erase``, ``write`` (B, H, T, d_v);
    ``S0`` (B, H, d_v, d_k) or None (zeros). Returns ``(reads (B, H, T, d_v), S_T (B, H, d_v, d_k))``.
    """
    from delta_mem.scan import _check  # shapes and dtypes, the same contract as the fast forms

    _check(q, k, v, keep, erase, write, S0)
    B, H, T, dk = q.shape
    dv = v.shape[-1]
    S = torch.zeros(B, H, dv, dk, dtype=q.dtype, device=q.device) if S0 is None else S0.clone()
    reads = torch.zeros(B, H, T, dv, dtype=q.dtype, device=q.device)
    for b in range(B):
        for h in range(H):
            St = S[b, h]
            for t in range(T):
                reads[b, h, t] = St @ q[b, h, t]
                kt = k[b, h, t][:, None]  # column vector
                vt = v[b, h, t][:, None]
                St = (
                    torch.diag(keep[b, h, t]) @ St
                    - torch.diag(erase[b, h, t]) @ (St @ kt) @ kt.T
                    + torch.diag(write[b, h, t]) @ vt @ kt.T
                )
            S[b, h] = St
    return reads, S
