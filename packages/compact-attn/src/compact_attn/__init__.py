"""CompactAttention: block-union KV selection for sparse attention under chunked prefill.

A block selector marks, for each query head h of a chunk, the KV blocks each of its Q-blocks needs
(bool (H, Qb, Kb)). Block-Union KV Selection turns the masks into one sorted table of KV blocks per KV
head — the Q-block union and the GQA intra-group union, plus the chunk's own causal blocks, the minimal
table that keeps every selected block — and a dense paged attention reads exactly those pages in place.

>>> import torch
>>> from compact_attn import block_union_tables
>>> masks = torch.zeros(2, 2, 4, dtype=torch.bool)   # 2 query heads (one KV group), 2 Q-blocks, 4 KV blocks
>>> masks[0, 0, 0] = masks[1, 1, 2] = True
>>> block_union_tables(masks, 2, own=range(3, 4)).as_lists()
[[0, 2, 3]]
"""

__version__ = "0.1.0"

# Public names resolve lazily (PEP 562), so `compact-attn --version` does not pay for importing torch.
_EXPORTS = {
    "BlockTables": "tables",
    "block_union_tables": "tables",
    "own_blocks": "tables",
    "tables_from_lists": "tables",
    "PagedKVCache": "paged",
    "paged_attention": "paged",
    "BlockSelector": "selectors",
    "AntidiagonalSelector": "selectors",
    "MeanPoolSelector": "selectors",
    "BoundSelector": "selectors",
    "TailQuerySelector": "selectors",
    "FixedMask": "selectors",
    "make_selector": "selectors",
    "CompactAttention": "compact",
    "DenseAttention": "baselines",
    "QuokaAttention": "baselines",
    "PerHeadBlockSparse": "baselines",
    "dense_chunk_attention": "baselines",
    "quoka_select": "baselines",
    "chunked_prefill": "prefill",
    "chunk_spans": "prefill",
    "ChunkedPrefill": "hf",
}

__all__ = [*sorted(_EXPORTS), "__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"compact_attn.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'compact_attn' has no attribute {name!r}")


def __dir__():
    return __all__
