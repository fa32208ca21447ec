"""transformers integration: prefill any Llama-family model in chunks over a paged KV cache, with
CompactAttention (or a baseline) as the attention of every layer.

Each chunk runs ``model(input_ids=chunk, position_ids=…, use_cache=False)``; the registered attention
function (``transformers.AttentionInterface``) appends the layer's post-RoPE keys/values to the paged
cache and attends the chunk's queries over it with ``method.attend``. The paged cache is the only KV
store; the causal mask transformers builds for the chunk alone is ignored (causality comes from the
cache positions). Batch size 1.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager

import torch

from compact_attn.paged import PagedKVCache
from compact_attn.prefill import chunk_spans
from papershelf.errors import InputError, check_choice, check_int

DECODE_MODES = ("dense", "method")  # what the decode steps after a chunked prefill go through

_names = itertools.count()


def _model_dims(model) -> tuple[int, int, int, int]:
    cfg = model.config
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return cfg.num_hidden_layers, heads, kv, head_dim


@contextmanager
def _routed(model, fn):
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    name = f"compact_attn_{next(_names)}"
    AttentionInterface.register(name, fn)
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    previous = model.config._attn_implementation
    model.set_attn_implementation(name)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)


class ChunkedPrefill:
    """Chunked prefill of a transformers causal LM with ``method`` (an object with
    ``attend(q, cache, layer, scaling)``, e.g. :class:`CompactAttention`).

    >>> # runner = ChunkedPrefill(model, CompactAttention(), chunk=512, page_size=64)
    >>> # logits = runner.prefill(ids)            # (1, N, vocab), every layer chunked and paged
    """

    def __init__(self, model, method, *, chunk: int = 512, page_size: int = 64,
                 allocation: str = "sequential") -> None:  # fmt: skip
        if not callable(getattr(method, "attend", None)):
            raise InputError(f"method must have attend(q, cache, layer, scaling), e.g. CompactAttention(); "
                             f"got {type(method).__name__}")  # fmt: skip
        self.model = model
        self.method = method
        self.chunk = check_int("chunk", chunk, low=1)
        self.page_size = check_int("page_size", page_size, low=1)
        self.allocation = allocation
        self.cache: PagedKVCache | None = None
        self.fractions: list[float] = []
        self.calls = 0

    def _attention(self, module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kw):
        if query.shape[0] != 1:
            raise InputError(f"ChunkedPrefill runs batch size 1, got {query.shape[0]}")
        layer = module.layer_idx
        self.cache.append(layer, key[0], value[0])
        out = self.method.attend(query[0], self.cache, layer, scaling)
        self.fractions.append(float(self.method.last_fraction))
        self.calls += 1
        return out.transpose(0, 1)[None].contiguous(), None

    def _check_ids(self, ids: torch.Tensor, name: str) -> None:
        """Integer token ids inside the model's vocabulary (an embedding lookup fails obscurely otherwise)."""
        if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
            raise InputError(f"{name} must be integer token ids, got dtype {ids.dtype}")
        vocab = getattr(self.model.config, "vocab_size", None)
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or (vocab is not None and hi >= vocab):
            raise InputError(
                f"{name} must lie in [0, {vocab}) (the model's vocabulary), got ids in [{lo}, {hi}]"
            )

    def _run(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        pos = torch.arange(start, start + ids.shape[1])[None]
        return self.model(input_ids=ids, position_ids=pos, use_cache=False).logits

    def prefill(self, input_ids, *, extra_tokens: int = 0) -> torch.Tensor:
        """Logits (1, N, vocab) of ``input_ids`` (1, N), computed chunk by chunk; the cache keeps room
        for ``extra_tokens`` more (see :meth:`generate`)."""
        ids = torch.as_tensor(input_ids)
        if ids.dim() == 1:
            ids = ids[None]
        if ids.dim() != 2 or ids.shape[0] != 1:
            raise InputError(f"input_ids must be (1, N) (batch size 1), got shape {tuple(ids.shape)}")
        N = ids.shape[1]
        if N == 0:
            raise InputError("input_ids is empty: nothing to prefill")
        self._check_ids(ids, "input_ids")
        layers, _heads, kv, hd = _model_dims(self.model)
        dtype = next(self.model.parameters()).dtype
        self.cache = PagedKVCache.for_length(N + extra_tokens, self.page_size, kv, hd, layers=layers,
                                             dtype=dtype, allocation=self.allocation)  # fmt: skip
        self.fractions = []
        logits = []
        try:
            with _routed(self.model, self._attention), torch.no_grad():
                for s, e in chunk_spans(N, self.chunk):
                    logits.append(self._run(ids[:, s:e], s))
        except BaseException:  # all or nothing: no half-filled cache is left to continue from
            self.cache, self.fractions = None, []
            raise
        return torch.cat(logits, 1)

    def generate(self, input_ids, max_new_tokens: int, *, decode: str = "dense") -> torch.Tensor:
        """Greedy continuation (1, new): chunked prefill with the method, then one token per step over the
        same cache. ``decode="dense"`` (default): the decode steps read the whole cache, as a serving
        engine runs a chunked-prefill attention for the prefill only; ``decode="method"``: every decode
        step goes through the method too, as a one-token chunk (the antidiagonal selector then scores a
        single query against 1/stride of the keys, and retrieval suffers: README, "Task accuracy")."""
        new = check_int("max_new_tokens", max_new_tokens, low=1)
        check_choice("decode", decode, DECODE_MODES)
        logits = self.prefill(input_ids, extra_tokens=new)
        n = logits.shape[1]
        tok = logits[:, -1].argmax(-1, keepdim=True)
        out = [tok]
        try:
            with self._decoding(decode), torch.no_grad():
                for i in range(new - 1):
                    tok = self._run(tok, n + i)[:, -1].argmax(-1, keepdim=True)
                    out.append(tok)
        except BaseException:
            self.cache = None  # a step failed in some layer: the cache no longer matches any sequence
            raise
        return torch.cat(out, 1)

    def continue_logits(self, input_ids, start: int, *, decode: str = "dense") -> torch.Tensor:
        """Logits (1, M, vocab) of ``input_ids`` (1, M) fed one token per step after a :meth:`prefill` of
        ``start`` tokens (made with ``extra_tokens >= M``): teacher-forced decoding, the condition under
        which greedy generation reproduces these tokens."""
        check_choice("decode", decode, DECODE_MODES)
        if self.cache is None:
            raise InputError("continue_logits needs a prefill first")
        ids = torch.as_tensor(input_ids)
        if ids.dim() == 1:
            ids = ids[None]
        if ids.dim() != 2 or ids.shape[0] != 1 or ids.shape[1] == 0:
            raise InputError(f"input_ids must be (1, M) with M >= 1, got shape {tuple(ids.shape)}")
        self._check_ids(ids, "input_ids")
        if start != len(self.cache):  # positions must continue the cache, or RoPE and causality disagree
            raise InputError(
                f"start must be the {len(self.cache)} tokens already in the cache, got {start!r}"
            )
        out = []
        try:
            with self._decoding(decode), torch.no_grad():
                for i in range(ids.shape[1]):
                    out.append(self._run(ids[:, i : i + 1], start + i))
        except BaseException:  # a layer failed part-way: the cache goes back to the prefill's tokens
            self.cache.truncate(start)
            raise
        return torch.cat(out, 1)

    @contextmanager
    def _decoding(self, decode: str):
        """Route decode steps through the method or, for ``"dense"``, through dense attention."""
        method = self.method
        if decode == "dense":
            from compact_attn.baselines import DenseAttention

            self.method = DenseAttention()
        try:
            with _routed(self.model, self._attention):
                yield
        finally:
            self.method = method
