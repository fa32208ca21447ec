"""The anchors: frozen backbone on the truncated window, BM25 retrieval of earlier sessions prepended to
the window (``rank-bm25``), and a LoRA adapter (``peft``) with the same trainable-parameter count."""

from __future__ import annotations

import numpy as np

from delta_mem.data import BOS, Dialogue, encode, words
from papershelf.errors import InputError, MissingDependencyError, check_int


def bm25_window(dialogue: Dialogue, *, top_k: int = 2) -> np.ndarray:
    """The final window with the best-matching history messages (BM25Okapi over the dialogue's own
    history; up to ``top_k``, best first, as many as fit beside the question; kept in their original
    order) inserted after BOS; the window keeps its length by dropping its oldest tokens, never the
    question."""
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        raise MissingDependencyError("rank_bm25", package="delta-mem", extra="bench") from None
    if not isinstance(dialogue, Dialogue):
        raise InputError(f"dialogue must be a Dialogue (make_dialogue), got {type(dialogue).__name__}")
    top_k = check_int("top_k", top_k, low=1)  # a negative k would slice off the worst, not keep the best
    docs = [words(m) for m in dialogue.messages]
    if not docs:
        raise InputError("the dialogue has no history messages to retrieve from")
    scores = BM25Okapi(docs).get_scores(words(dialogue.question))
    W = len(dialogue.window)
    body = dialogue.window[1:].tolist()
    room = W - 1 - dialogue.tail
    chosen: list[int] = []
    for i in np.argsort(-scores, kind="stable")[:top_k].tolist():  # best first, while they fit
        if sum(len(encode(dialogue.messages[j] + "\n")) for j in [*chosen, i]) <= room:
            chosen.append(i)
    if not chosen:
        best = dialogue.messages[int(np.argmax(scores))]
        raise InputError(
            f"window {W} is too short for BM25 retrieval: the best message ({len(encode(best + chr(10)))} "
            f"tokens) does not fit beside the question ({dialogue.tail} tokens); use a longer window"
        )
    retrieved = [b for i in sorted(chosen) for b in encode(dialogue.messages[i] + "\n")]
    keep = W - 1 - len(retrieved)
    return np.asarray([BOS, *retrieved, *body[len(body) - keep :]], dtype=np.int64)


def lora_rank_for(model, n_params: int, targets=("q_proj", "o_proj")) -> tuple[int, int]:
    """The LoRA rank on ``targets`` whose trainable-parameter count is closest to ``n_params``;
    returns ``(rank, count)``."""
    import torch

    n_params = check_int("n_params", n_params, low=1)  # 0 or -5 used to give rank 1 silently
    per_rank = 0
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name.split(".")[-1] in targets:
            per_rank += mod.in_features + mod.out_features
    if per_rank == 0:
        raise InputError(f"no {targets} linears to put LoRA on")
    rank = max(1, round(n_params / per_rank))
    return rank, rank * per_rank


def lora_model(model, rank: int, *, targets=("q_proj", "o_proj"), seed: int = 0):
    """A peft LoRA wrapper of ``model`` (its base weights frozen), alpha = 2·rank."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise MissingDependencyError("peft", package="delta-mem", extra="bench") from None
    import torch

    torch.manual_seed(seed)
    cfg = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=list(targets), lora_dropout=0.0, bias="none")
    import warnings

    with warnings.catch_warnings():  # peft probes a deprecated transformers property
        warnings.simplefilter("ignore", FutureWarning)
        return get_peft_model(model, cfg)
