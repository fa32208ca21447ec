"""Real-size vocabularies: a BPE vocabulary trained offline, and outlines-core's index side by side.

Users plug diffusion LMs with 32K-150K token vocabularies (LLaDA: 126,464).  ``bench`` checks the token
automata and the decode step at that scale: a byte-level BPE vocabulary is trained (``tokenizers``) on
the Python standard library's own source files, which every Python installation ships, so nothing is
downloaded; outlines-core, the usual token-FSM builder for autoregressive decoding, indexes the same
regex over the same vocabulary, and the two token languages are compared state pair by state pair.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import numpy as np

from dlm_constrain.automaton import TokenDFA
from papershelf.errors import InputError

# a JSON schema like those of function-calling benchmarks: strings, bounded integers, a pattern, an array
SCALE_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "email": {"type": "string", "pattern": r"[a-z]+@[a-z]+\.com"},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
    },
    "required": ["name", "age"],
}

# regexes for the language comparison with outlines-core (Python's ``re`` decides who is right)
AGREEMENT_REGEXES = (
    r"[a-z]{1,8}",
    r"\d{3}-\d{4}",
    r'\{"id":[0-9]+(,"k":"[^"]{0,4}")?\}',
    r"(true|false|null)",
    r"(ab)+",
    r"[0-9]+(\.[0-9]+)?",
    r"(def|class) [a-z_]+\(",
)


def stdlib_corpus(max_bytes: int) -> list[str]:
    """UTF-8 source files of the running Python's standard library, sorted by path, up to ``max_bytes``."""
    root = Path(os.__file__).parent
    texts, total = [], 0
    for path in sorted(root.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        texts.append(text)
        total += len(text)
        if total >= max_bytes:
            break
    return texts


def bpe_vocab(size: int, corpus_bytes: int = 40_000_000) -> tuple[list[str], int, list[int]]:
    """``(vocab, eos_id, special_ids)``: a byte-level BPE vocabulary of ``size`` tokens, as decoded text.

    Token 0 is ``<eos>``.  Tokens that decode to an incomplete UTF-8 sequence (text containing U+FFFD)
    can only be part of a character, so they are listed as special (never allowed by an automaton).
    """
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        raise InputError(
            "the real-vocabulary bench needs tokenizers: pip install 'dlm-constrain[bench]'"
        ) from None
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=size,
        special_tokens=["<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(stdlib_corpus(corpus_bytes), trainer)
    vocab = [tok.decode([i]) for i in range(tok.get_vocab_size())]
    vocab[0] = "<eos>"
    special = [i for i, t in enumerate(vocab) if "\ufffd" in t]
    return vocab, 0, special


def outlines_index(regex: str, vocab: list[str], eos_id: int, special_ids: list[int]):
    """outlines-core's ``Index`` of ``regex`` over the same vocabulary (specials left out), or None."""
    try:
        import outlines_core
    except ImportError:
        return None
    skip = set(special_ids) | {eos_id}
    ids: dict[str, list[int]] = {}
    for i, t in enumerate(vocab):
        if i not in skip and t != "":
            ids.setdefault(t, []).append(i)
    return outlines_core.Index(regex, outlines_core.Vocabulary(eos_id, ids))


def compare_languages(dfa: TokenDFA, index, pattern: str) -> dict:
    """Walk both automata in lockstep; report the first token string one accepts and the other does not.

    At every reached pair of states the allowed non-EOS tokens and acceptance must agree.  A
    disagreement is returned as a witness (the token texts read so far, the token, who allows it)
    with Python's ``re`` verdict on the witness text when it completes a string either side accepts.
    """
    eos = dfa.eos_id
    trans = {s: dict(t) for s, t in index.get_transitions().items()}
    final = set(index.get_final_states())
    start = (dfa.start, index.get_initial_state())
    path = {start: ()}
    queue = [start]
    while queue:
        q, s = queue.pop(0)
        ours = {int(v): int(dfa.table[q, v]) for v in np.nonzero(dfa.table[q] != dfa.dead)[0] if v != eos}
        theirs = {v: r for v, r in trans.get(s, {}).items() if v != eos}
        diff = sorted(set(ours) ^ set(theirs))
        if diff or bool(dfa.accept[q]) != (s in final):
            prefix = "".join(dfa.vocab[v] for v in path[(q, s)])
            out = {"equal": False, "pairs": len(path), "prefix": prefix}
            if diff:
                v = diff[0]
                out.update(token=dfa.vocab[v], allowed_by="ours" if v in ours else "outlines-core")
                text = prefix + dfa.vocab[v]
                completion = _complete(dfa, ours.get(v)) if v in ours else None
                if completion is not None:
                    out["accepted_string"] = text + completion
                    out["python_re_accepts"] = re.fullmatch(pattern, text + completion) is not None
            return out
        for v in ours.keys() & theirs.keys():
            nxt = (ours[v], theirs[v])
            if nxt not in path:
                path[nxt] = (*path[(q, s)], v)
                queue.append(nxt)
    return {"equal": True, "pairs": len(path)}


def _complete(dfa: TokenDFA, q: int | None) -> str | None:
    """The text of a shortest token path from ``q`` to acceptance (breadth first), or None."""
    if q is None:
        return None
    back = {q: None}
    queue = [q]
    while queue:
        cur = queue.pop(0)
        if dfa.accept[cur]:  # EOS is never followed, so the after-EOS state is never reached
            parts = []
            while back[cur] is not None:
                cur, v = back[cur]
                parts.append(dfa.vocab[v])
            return "".join(reversed(parts))
        for v in np.nonzero(dfa.table[cur] != dfa.dead)[0]:
            nxt = int(dfa.table[cur, v])
            if v != dfa.eos_id and nxt not in back:
                back[nxt] = (cur, int(v))
                queue.append(nxt)
    return None


def timed(fn, repeat: int) -> tuple[float, object]:
    """Median wall seconds of ``repeat`` calls and the last result."""
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times)), out


def python_version() -> str:
    return sys.version.split()[0]
