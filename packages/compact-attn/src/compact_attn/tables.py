"""Block-union KV selection: 2D block masks → one sorted block table per KV head.

For a query chunk of ``Qb`` Q-blocks against ``Kb`` KV blocks, a selector gives each query head h a mask
M_h (Qb × Kb). CompactAttention turns the masks into KV-selection signals:

    Q-block union       S_h = {j : ∃b, M_h[b, j]}
    intra-group union   T_g = ∪_{h ∈ G(g)} S_h  ∪  own(chunk)

``own(chunk)`` are the KV blocks that hold the chunk's own tokens (needed for the causal diagonal). T_g is
the *minimal* table under the one-table-per-KV-head constraint: a table for KV head g must contain every
block selected by some (h ∈ G(g), b), and T_g contains nothing else (see tests/test_tables.py).
Tables are emitted as sorted logical block ids and, through the sequence's page table, physical page ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from papershelf.errors import InputError


@dataclass(frozen=True)
class BlockTables:
    """Per-KV-head block tables, padded with -1.

    ``logical`` (H_kv, L) int64: logical KV-block ids in ascending order (block j holds tokens
    [j·B, (j+1)·B)); ``physical`` (H_kv, L) int64: the page ids of those blocks in the paged cache;
    ``lengths`` (H_kv,) int64: valid entries per row."""

    logical: torch.Tensor
    physical: torch.Tensor
    lengths: torch.Tensor

    @property
    def kv_heads(self) -> int:
        return self.logical.shape[0]

    def row(self, g: int, *, physical: bool = False) -> torch.Tensor:
        src = self.physical if physical else self.logical
        return src[g, : int(self.lengths[g])]

    def as_lists(self) -> list[list[int]]:
        return [self.row(g).tolist() for g in range(self.kv_heads)]

    def blocks_read(self) -> int:
        """Total (KV head, block) pairs in the tables: the KV traffic of executing them."""
        return int(self.lengths.sum())


def check_group(heads: int, kv_heads: int) -> int:
    if kv_heads < 1 or heads < 1 or heads % kv_heads:
        raise InputError(
            f"query heads ({heads}) must be a positive multiple of KV heads ({kv_heads}) for GQA"
        )
    return heads // kv_heads


def own_blocks(offset: int, chunk_len: int, block: int) -> range:
    """KV blocks holding tokens [offset, offset + chunk_len): the chunk's own causal blocks."""
    if chunk_len < 1:
        raise InputError(f"a chunk needs at least one query token, got {chunk_len}")
    return range(offset // block, (offset + chunk_len - 1) // block + 1)


def block_union_tables(
    masks: torch.Tensor,
    group_size: int,
    *,
    own=None,
    page_table: torch.Tensor | None = None,
    num_pages: int | None = None,
) -> BlockTables:
    """Q-block union and intra-group (GQA) union of ``masks`` (bool (H, Qb, Kb)) into per-KV-head tables.

    ``group_size`` query heads share one KV head (H % group_size == 0). ``own``: KV blocks always
    included (the chunk's causal blocks; a range or 1-D tensor of logical ids). ``page_table``: int64
    (≥ Kb,) mapping logical blocks to physical pages (identity when None); ``num_pages`` bounds the ids.

    >>> m = torch.zeros(4, 2, 6, dtype=torch.bool)
    >>> m[0, 0, 1] = m[1, 1, 3] = m[2, 0, 0] = True   # heads 0, 1 → KV head 0; heads 2, 3 → KV head 1
    >>> block_union_tables(m, 2, own=range(5, 6)).as_lists()
    [[1, 3, 5], [0, 5]]
    """
    if not isinstance(masks, torch.Tensor) or masks.dim() != 3:
        raise InputError("masks must be a bool tensor of shape (heads, q_blocks, kv_blocks)")
    if masks.dtype != torch.bool:
        raise InputError(f"masks must have dtype torch.bool, got {masks.dtype}")
    H, _Qb, Kb = masks.shape
    if not isinstance(group_size, int) or group_size < 1 or H % group_size:
        raise InputError(f"group_size must divide the {H} query heads, got {group_size!r}")
    Hkv = H // group_size
    sel = masks.any(1).view(Hkv, group_size, Kb).any(1)  # Q-block union, then intra-group union
    if own is not None:
        own_t = _int_ids("own", list(own) if isinstance(own, range) else own)
        if own_t.numel() and (int(own_t.min()) < 0 or int(own_t.max()) >= Kb):
            raise InputError(f"own blocks must lie in [0, {Kb}), got {own_t.tolist()}")
        sel[:, own_t] = True
    lengths = sel.sum(1)
    L = int(lengths.max()) if Hkv else 0
    # stable sort puts selected blocks first, in ascending order
    order = torch.sort((~sel).to(torch.int8), dim=1, stable=True).indices[:, :L]
    valid = torch.arange(L)[None, :] < lengths[:, None]
    logical = torch.where(valid, order, -1)
    if page_table is None:
        physical = logical.clone()
    else:
        page_table = _int_ids("page_table", page_table, flat=False)
        if page_table.dim() != 1 or page_table.numel() < Kb:
            raise InputError(f"page_table must be 1-D with at least {Kb} entries (one per KV block)")
        if Kb and int(page_table[:Kb].min()) < 0:
            raise InputError("page_table points outside the cache: page ids must be >= 0")
        physical = torch.where(valid, page_table[logical.clamp(min=0)], -1)
    if num_pages is not None:
        bad = valid & ((physical < 0) | (physical >= num_pages))
        if bool(bad.any()):
            raise InputError(f"page table points outside the cache: page ids must lie in [0, {num_pages})")
    return BlockTables(logical, physical, lengths)


def tables_from_lists(rows: list[list[int]], page_table=None) -> BlockTables:
    """Build :class:`BlockTables` from explicit sorted lists of logical block ids (one per KV head)."""
    rows = [_int_ids(f"table row {g}", r).tolist() for g, r in enumerate(rows)]
    L = max((len(r) for r in rows), default=0)
    logical = torch.full((len(rows), L), -1, dtype=torch.long)
    for g, r in enumerate(rows):
        if r != sorted(set(r)):
            raise InputError(f"table row {g} must be sorted and duplicate-free")
        if r and r[0] < 0:
            raise InputError(f"table row {g} holds a negative block id ({r[0]})")
        logical[g, : len(r)] = torch.as_tensor(r, dtype=torch.long)
    lengths = torch.as_tensor([len(r) for r in rows], dtype=torch.long)
    if page_table is None:
        physical = logical.clone()
    else:
        pt = _int_ids("page_table", page_table, flat=False)
        top = int(logical.max()) if logical.numel() else -1
        if pt.dim() != 1 or pt.numel() <= top:
            raise InputError(f"page_table must be 1-D with an entry for every block the tables name "
                             f"(block ids up to {top})")  # fmt: skip
        physical = torch.where(logical >= 0, pt[logical.clamp(min=0)], -1)
    return BlockTables(logical, physical, lengths)


def _int_ids(name: str, ids, *, flat: bool = True) -> torch.Tensor:
    """``ids`` (a sequence or tensor of integers) as int64; floats and bools are refused, not truncated."""
    try:
        t = torch.as_tensor(ids)
    except (TypeError, ValueError, RuntimeError):
        raise InputError(f"{name} must be a sequence of integer ids, got {ids!r}") from None
    if t.numel() and (t.dtype == torch.bool or t.is_floating_point() or t.is_complex()):
        raise InputError(f"{name} must hold integer ids, got dtype {t.dtype}")
    t = t.to(torch.long)
    return t.flatten() if flat else t
