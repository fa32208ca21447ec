"""Offline data: calibration/evaluation token windows from text, and small random Llama models for tests."""

from __future__ import annotations

import math

import numpy as np
import torch

from papershelf.errors import InputError, check_int


def text_windows(
    tokenizer, text: str | bytes, n: int, length: int, *, seed: int = 0, bos: bool = True
) -> list[torch.Tensor]:
    """``n`` windows of ``length`` token ids taken at random offsets of ``text`` (each a (1, length) tensor).

    A window's text is cut generously (8 characters per token) and its token ids cropped to ``length``;
    with ``bos`` (default) and a tokenizer that has a BOS token, each window starts with it, as the
    model saw its training sequences start.
    """
    n = check_int("n", n, low=1)
    length = check_int("length", length, low=2)
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    span = 8 * length
    if len(text) < span + 1:
        raise InputError(
            f"the calibration text is too short ({len(text)} characters) for {length}-token windows"
        )
    rng = np.random.default_rng(seed)
    out = []
    for start in rng.integers(0, len(text) - span, size=n):
        ids = tokenizer(text[int(start) : int(start) + span], add_special_tokens=False)["input_ids"]
        if bos and getattr(tokenizer, "bos_token_id", None) is not None:
            ids = [tokenizer.bos_token_id, *ids]
        ids = ids[:length]
        if len(ids) < length:
            raise InputError(f"a calibration window tokenized to {len(ids)} < {length} tokens")
        out.append(torch.tensor([ids]))
    return out


def random_llama(
    *,
    hidden: int = 32,
    layers: int = 2,
    intermediate: int = 48,
    vocab: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    seed: int = 0,
):
    """A small randomly initialised ``LlamaForCausalLM`` (float32, eval mode) for tests and the demo."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(cfg).eval()


def random_batches(vocab: int, n: int, length: int, *, seed: int = 0) -> list[torch.Tensor]:
    """``n`` random token-id tensors of shape (1, length)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (1, length), generator=g) for _ in range(n)]


@torch.no_grad()
def perplexity(model, windows: list[torch.Tensor]) -> float:
    """exp(mean next-token negative log-likelihood) over token windows."""
    total, count = 0.0, 0
    for ids in windows:
        logits = model(input_ids=ids).logits[0, :-1].float()
        total += float(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum"))
        count += ids.shape[1] - 1
    return math.exp(total / count)
