"""Slow, obviously-correct references straight from the method's definitions (float64-capable).

Every fast path of the package is tested against these:

* :func:`union_tables_reference` — block tables as Python sets:
  T_g = {j : ∃h∈G(g), b, M_h[b, j]} ∪ own blocks.
* :func:`masked_attention_reference` — attention of a query chunk over the whole cache with an explicit
  token mask (the "broadcast" of a table or a per-row block mask), one query at a time.
* :func:`table_token_mask` — the broadcast of per-KV-head tables to a (H, T, N) token mask with causality.
"""

from __future__ import annotations

import math

import torch


def union_tables_reference(masks, group_size: int, own_blocks=()) -> list[list[int]]:
    """Per KV head, the sorted list of KV blocks selected by any query head of its group in any Q-block,
    plus ``own_blocks``. ``masks`` is a nested (H, Qb, Kb) boolean array (tensor or lists)."""
    masks = torch.as_tensor(masks, dtype=torch.bool)
    H, Qb, Kb = masks.shape
    tables = []
    for g in range(H // group_size):
        chosen = set(int(j) for j in own_blocks)
        for h in range(g * group_size, (g + 1) * group_size):
            for b in range(Qb):
                for j in range(Kb):
                    if bool(masks[h, b, j]):
                        chosen.add(j)
        tables.append(sorted(chosen))
    return tables


def table_token_mask(tables: list[list[int]], heads: int, T: int, N: int, offset: int, block: int):
    """Bool (H, T, N): query t of head h (absolute position offset + t) may read key n iff n's block is in
    its KV head's table and n <= offset + t (causality) and n < N."""
    group = heads // len(tables)
    mask = torch.zeros(heads, T, N, dtype=torch.bool)
    for h in range(heads):
        for j in tables[h // group]:
            for n in range(j * block, min((j + 1) * block, N)):
                for t in range(T):
                    if n <= offset + t:
                        mask[h, t, n] = True
    return mask


def row_block_token_mask(masks, T: int, N: int, offset: int, block: int):
    """Bool (H, T, N) for per-(head, Q-block) execution: query t of Q-block b = t // block reads the KV
    blocks of its own mask row, plus every block it overlaps causally inside the chunk (own blocks)."""
    masks = torch.as_tensor(masks, dtype=torch.bool)
    H = masks.shape[0]
    mask = torch.zeros(H, T, N, dtype=torch.bool)
    for h in range(H):
        for t in range(T):
            row = masks[h, t // block]
            pos = offset + t
            for n in range(N):
                j = n // block
                if n <= pos and (bool(row[j]) or n >= offset):
                    mask[h, t, n] = True
    return mask


def masked_attention_reference(q, k, v, token_mask, scaling: float | None = None):
    """o[h, t] = Σ_n softmax_n(q[h,t]·k[g(h),n]·scaling | mask) v[g(h), n], one query at a time (float64).

    q (H, T, D); k, v (H_kv, N, D); token_mask bool (H, T, N). A query whose mask is empty is an error."""
    H, T, D = q.shape
    Hkv = k.shape[0]
    group = H // Hkv
    scaling = 1.0 / math.sqrt(D) if scaling is None else scaling
    out = torch.zeros(H, T, v.shape[-1], dtype=torch.float64)
    for h in range(H):
        g = h // group
        for t in range(T):
            idx = token_mask[h, t].nonzero().flatten()
            if idx.numel() == 0:
                raise ValueError(f"query ({h}, {t}) reads no key")
            s = (k[g, idx].double() @ q[h, t].double()) * scaling
            p = torch.softmax(s, 0)
            out[h, t] = p @ v[g, idx].double()
    return out


def causal_mask(T: int, N: int, offset: int):
    """Bool (T, N): key n visible to query t at absolute position offset + t."""
    return torch.arange(N)[None, :] <= (offset + torch.arange(T))[:, None]


def attention_mass(q, k, token_mask, scaling: float | None = None):
    """Mean over (head, query) of the dense causal softmax mass that falls on the keys of ``token_mask``
    (attention-mass recall); q (H, T, D), k (H_kv, N, D); the mask is intersected with causality."""
    H, T, D = q.shape
    N = k.shape[1]
    offset = N - T
    scaling = 1.0 / math.sqrt(D) if scaling is None else scaling
    kk = k.double().repeat_interleave(H // k.shape[0], 0)
    s = torch.einsum("htd,hnd->htn", q.double(), kk) * scaling
    causal = causal_mask(T, N, offset)
    s = s.masked_fill(~causal, float("-inf"))
    p = torch.softmax(s, -1)
    return float((p * token_mask.double()).sum(-1).mean())
