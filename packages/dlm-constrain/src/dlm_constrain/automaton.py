"""Token-level automata: a character DFA lifted to a tokenizer vocabulary ("tensorized" as a dense table).

A :class:`TokenDFA` has states ``0 .. Q-1``; state ``dead`` (always the last one) rejects forever.
``table[q, v]`` is the state after reading the whole string of token ``v`` from state ``q``.  With an
``eos_id``, an end-of-sequence token may follow any accepted string and then repeat (it doubles as the
padding token), so a fixed-length window of ``n`` positions holds every accepted string of at most ``n``
tokens.  Tokens whose string is empty (other than EOS) and special tokens map to the dead state.

>>> vocab = ["a", "b", "ab", "<eos>"]
>>> dfa = TokenDFA.from_regex("(ab)+", vocab, eos_id=3)
>>> dfa.accepts([2, 0, 1, 3]), dfa.accepts([0, 2, 3, 3]), dfa.accepts([0, 3, 3, 3])
(True, False, False)
>>> dfa.decode([0, 1, 2, 3])
'abab'
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from dlm_constrain.regex import CharDFA, compile_regex
from papershelf.errors import InputError


@dataclass(frozen=True)
class TokenDFA:
    """A complete deterministic automaton over token ids.

    ``table``: integer ``[Q, V]`` next states (built as int32, which halves the memory of large
    vocabularies; any integer dtype is accepted); ``accept``: bool ``[Q]``; ``start``: start state;
    ``dead``: the rejecting sink (``table[dead] == dead``); ``vocab``: the token strings (``len == V``);
    ``eos_id``: the end/padding token or ``None``; ``name``: a label used in error messages.
    """

    table: np.ndarray
    accept: np.ndarray
    start: int
    dead: int
    vocab: tuple[str, ...]
    eos_id: int | None = None
    name: str = "automaton"
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_states(self) -> int:
        return int(self.table.shape[0])

    @property
    def vocab_size(self) -> int:
        return int(self.table.shape[1])

    # ------------------------------------------------------------------------------------ constructors
    @classmethod
    def from_char_dfa(
        cls,
        cdfa: CharDFA,
        vocab: Sequence[str],
        eos_id: int | None = None,
        *,
        special_ids: Sequence[int] = (),
        name: str = "automaton",
    ) -> TokenDFA:
        """Lift ``cdfa`` to tokens: ``table[q, v] = delta*(q, vocab[v])``, plus EOS/padding handling."""
        vocab = _check_vocab(vocab)
        V = len(vocab)
        if eos_id is not None:
            eos_id = _check_id("eos_id", eos_id, V)
        special = {_check_id("special_ids", s, V) for s in special_ids}
        Qc = cdfa.num_states
        has_eos = eos_id is not None
        ended = Qc if has_eos else None  # the "after EOS" state
        Q = Qc + (1 if has_eos else 0) + 1
        dead = Q - 1
        table = np.full((Q, V), dead, dtype=_state_dtype(Q))
        # walk every token straight into the table, then block EOS, special and empty tokens (EOS gets
        # its own column below)
        _walk_tokens(cdfa, list(vocab), dead, out=table[:Qc])
        blocked = [v for v, text in enumerate(vocab) if v == eos_id or v in special or text == ""]
        table[:Qc, blocked] = dead
        accept = np.zeros(Q, dtype=bool)
        accept[:Qc] = cdfa.accept
        if has_eos:
            table[:Qc, eos_id] = np.where(cdfa.accept, ended, dead)
            table[ended, eos_id] = ended
            accept[ended] = True
        # the character DFA's own dead state becomes unreachable except via remap; point it at the sink
        table[cdfa.dead] = dead
        accept[cdfa.dead] = False
        return cls(table, accept, int(cdfa.start), dead, tuple(vocab), eos_id, name).trimmed()

    @classmethod
    def from_regex(
        cls,
        pattern: str,
        vocab: Sequence[str],
        eos_id: int | None = None,
        *,
        special_ids: Sequence[int] = (),
    ) -> TokenDFA:
        """Token automaton of the strings fully matching ``pattern`` (see :mod:`dlm_constrain.regex`)."""
        vocab = _check_vocab(vocab)
        skip = set(special_ids) | {eos_id}
        alphabet = set().union(*(t for i, t in enumerate(vocab) if i not in skip))
        cdfa = compile_regex(pattern, alphabet)
        return cls.from_char_dfa(cdfa, vocab, eos_id, special_ids=special_ids, name=f"regex {pattern!r}")

    @classmethod
    def from_json_schema(
        cls,
        schema: dict | str,
        vocab: Sequence[str],
        eos_id: int | None = None,
        *,
        special_ids: Sequence[int] = (),
        backend: str = "papershelf",
    ) -> TokenDFA:
        """Token automaton of the JSON texts valid under ``schema``.

        ``backend="papershelf"`` (default): :func:`schema_to_regex`, compact JSON in schema order, integer
        bounds enforced.  ``backend="outlines"``: outlines-core's ``build_regex_from_schema`` (optional
        single spaces around punctuation, ``$ref``/``$defs``, number formats; integer bounds are not
        enforced), compiled by this package's regex compiler; needs ``pip install outlines-core``.
        """
        from dlm_constrain.json_schema import schema_to_regex

        if backend not in ("papershelf", "outlines"):
            raise InputError(f"backend must be 'papershelf' or 'outlines', got {backend!r}")
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as exc:
                raise InputError(f"schema is not valid JSON ({exc.msg})") from None
        if backend == "papershelf":
            pattern = schema_to_regex(schema)
        else:
            pattern = _outlines_schema_regex(schema)
        dfa = cls.from_regex(pattern, vocab, eos_id, special_ids=special_ids)
        return dfa.renamed("JSON schema " + json.dumps(schema, separators=(",", ":"))[:60])

    # ------------------------------------------------------------------------------------ operations
    def renamed(self, name: str) -> TokenDFA:
        return TokenDFA(self.table, self.accept, self.start, self.dead, self.vocab, self.eos_id, name)

    def trimmed(self) -> TokenDFA:
        """Keep only states reachable from the start that can still reach acceptance (plus the sink)."""
        table, accept = self.table, self.accept
        Q = table.shape[0]
        # reachability only needs one token per class of equal columns (~100 for a 128K vocabulary)
        _, reps = _token_classes(table)
        moves = table[:, reps]
        live = accept.copy()
        live[self.dead] = False
        while True:
            grow = live | live[moves].any(axis=1)
            grow[self.dead] = False
            if (grow == live).all():
                break
            live = grow
        reach = np.zeros(Q, dtype=bool)
        reach[self.start] = True
        while True:
            grow = reach.copy()
            grow[moves[reach].reshape(-1)] = True
            if (grow == reach).all():
                break
            reach = grow
        keep = [q for q in range(Q) if live[q] and reach[q]]
        if self.start in keep:
            keep.remove(self.start)
            keep.insert(0, self.start)
        else:
            keep = []
        dead = len(keep)
        remap = np.full(Q, dead, dtype=np.int64)
        remap[keep] = np.arange(dead)
        new = np.full((dead + 1, table.shape[1]), dead, dtype=_state_dtype(dead + 1))
        for a in range(0, len(keep), 16):  # a few rows at a time: no temporary as large as the table
            rows = keep[a : a + 16]
            new[a : a + len(rows)] = remap[table[rows]]
        acc = np.zeros(dead + 1, dtype=bool)
        acc[:dead] = accept[keep]
        return TokenDFA(new, acc, 0, dead, self.vocab, self.eos_id, self.name)

    def run(self, tokens: Sequence[int], state: int | None = None) -> int:
        q = self.start if state is None else int(state)
        for v in tokens:
            v = int(v)
            if not 0 <= v < self.vocab_size:
                return self.dead
            q = int(self.table[q, v])
        return q

    def accepts(self, tokens: Sequence[int]) -> bool:
        return bool(self.accept[self.run(tokens)])

    def decode(self, tokens: Sequence[int]) -> str:
        """The text of ``tokens`` with EOS/padding removed."""
        ids = [int(v) for v in tokens]
        bad = [v for v in ids if not 0 <= v < len(self.vocab)]
        if bad:
            raise InputError(f"token id {bad[0]} is outside the vocabulary [0, {len(self.vocab)})")
        return "".join(self.vocab[v] for v in ids if v != self.eos_id)

    def class_moves(self) -> np.ndarray:
        """``table`` restricted to one token per class of equal columns (``[Q, C]``, ~100 columns for a
        128K vocabulary): enough for every question about states rather than tokens."""
        if "class_moves" not in self._cache:
            _, reps = _token_classes(self.table)
            self._cache["class_moves"] = self.table[:, reps]
        return self._cache["class_moves"]

    def live_table(self) -> np.ndarray:
        """bool ``[Q, V]``: token ``v`` from ``q`` does not fall into the dead state."""
        return self.table != self.dead

    def completable(self, n: int) -> np.ndarray:
        """bool ``[n + 1, Q]``: ``[k, q]`` is True when some ``k`` more tokens lead ``q`` to acceptance."""
        key = ("completable", n)
        if key not in self._cache:
            moves = self.class_moves()
            out = np.zeros((n + 1, self.num_states), dtype=bool)
            out[0] = self.accept
            for k in range(1, n + 1):
                out[k] = out[k - 1][moves].any(axis=1)
            self._cache[key] = out
        return self._cache[key]

    def check_length(self, n: int) -> None:
        """Raise :class:`InputError` when no string of exactly ``n`` tokens is accepted."""
        if not self.completable(n)[n, self.start]:
            raise InputError(f"{self.name} accepts no sequence of length {n} (partition function is 0)")


def _outlines_schema_regex(schema) -> str:
    try:
        from outlines_core.json_schema import build_regex_from_schema
    except ImportError:
        raise InputError("backend='outlines' needs outlines-core: pip install outlines-core") from None
    try:
        return build_regex_from_schema(json.dumps(schema))
    except (ValueError, TypeError) as exc:  # outlines-core reports unsupported schemas as ValueError
        raise InputError(f"outlines-core cannot translate the schema: {str(exc).splitlines()[0]}") from None


def _state_dtype(num_states: int) -> type:
    """int32 for state tables (half the memory of int64 at 128K tokens), int64 beyond its range."""
    return np.int32 if num_states < 2**31 else np.int64


def _token_classes(T: np.ndarray, mult: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(cls [V], reps [C])``: tokens with equal columns of ``T`` share a class, numbered by first token.

    Columns are grouped by a 64-bit random hash and the grouping is then checked exactly; a collision
    (never seen; odds ~V^2 / 2^64) falls back to sorting the columns themselves.  ``mult``: the hash's
    multipliers (tests pass degenerate ones to exercise the fallback).
    """
    Qe, V = T.shape
    if Qe == 0:
        return np.zeros(V, dtype=np.int64), np.zeros(min(V, 1), dtype=np.int64)
    if mult is None:
        mult = np.random.default_rng(0).integers(1, 2**63, size=Qe, dtype=np.uint64) | np.uint64(1)
    # in column chunks, so no temporary as large as T is made (T can be hundreds of MB)
    step = max(1, (1 << 22) // Qe)
    h = np.empty(V, dtype=np.uint64)
    for a in range(0, V, step):
        h[a : a + step] = mult @ T[:, a : a + step].astype(np.uint64)  # wraps modulo 2^64 on purpose
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    reps = first
    exact = all((T[:, a : a + step] == T[:, reps[inverse[a : a + step]]]).all() for a in range(0, V, step))
    if not exact:
        _, first, inverse = np.unique(T.T, axis=0, return_index=True, return_inverse=True)
        reps = first
    # renumber classes by their smallest token id, so class order follows token order
    order = np.argsort(reps, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[inverse.reshape(-1)].astype(np.int64), reps[order].astype(np.int64)


def _walk_tokens(
    cdfa: CharDFA, texts: list[str], dead: int, budget: int = 1 << 22, out: np.ndarray | None = None
) -> np.ndarray:
    """``[Qc, len(texts)]``: the state after reading each whole text from every character state.

    ``out``: where to write it (any ``[Qc, len(texts)]`` view, e.g. columns of the token table, so the
    result is not held twice).

    Vectorised over the texts' prefix trie: one gather per trie level for all its nodes and a chunk of
    start states (at most about ``budget`` cells at a time); characters outside the alphabet map to a
    column into the character DFA's dead state, which is then renamed ``dead``.
    """
    Qc, A = cdfa.delta.shape
    stay, unknown = A, A + 1
    kind = np.int32 if Qc * (A + 2) < 2**31 else np.int64
    delta = np.empty((Qc, A + 2), dtype=kind)
    delta[:, :A] = cdfa.delta
    delta[:, stay] = np.arange(Qc)
    delta[:, unknown] = cdfa.dead
    flat_delta = delta.reshape(-1)
    # every text's characters as DFA columns, in one flat array (code points -> columns by lookup)
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    points = np.frombuffer("".join(texts).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    known = np.frombuffer(cdfa.alphabet.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    if len(known):
        by_point = np.argsort(known, kind="stable")  # a CharDFA's alphabet need not be sorted
        col = by_point[np.minimum(np.searchsorted(known[by_point], points), len(known) - 1)]
        flat = np.where(known[col] == points, col, unknown)
    else:
        flat = np.full(len(points), unknown, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    if out is None:
        out = np.empty((Qc, len(texts)), dtype=np.int64)
    # the texts' prefix trie, level by level: a node at depth j is (its parent at depth j - 1, the j-th
    # character), so each distinct prefix is walked once (a BPE vocabulary has ~0.4 nodes per character)
    parents, columns, node_of = [], [], np.zeros(len(texts), dtype=np.int64)
    ends: list[tuple[np.ndarray, np.ndarray]] = []  # per depth: the texts ending there, their nodes
    alive = np.nonzero(lengths > 0)[0]
    depth = 0
    while len(alive):
        key = node_of[alive] * (A + 2) + flat[starts[alive] + depth]
        keys, inverse = np.unique(key, return_inverse=True)
        parents.append(keys // (A + 2))
        columns.append((keys % (A + 2)).astype(kind))
        node_of[alive] = inverse.reshape(-1)
        depth += 1
        done = lengths[alive] == depth
        ends.append((alive[done], node_of[alive[done]]))
        alive = alive[~done]
    empty = np.nonzero(lengths == 0)[0]
    # walk the trie for a chunk of start states at a time (budget bounds the widest level x chunk)
    widest = max((len(p) for p in parents), default=1)
    step = max(1, budget // widest)
    for lo in range(0, Qc, step):
        start = np.arange(lo, min(Qc, lo + step), dtype=kind)
        states = start[None, :]
        out[lo : lo + len(start), empty] = np.where(start == cdfa.dead, dead, start)[:, None]  # stays put
        for parent, column, (texts_here, nodes_here) in zip(parents, columns, ends, strict=True):
            # row-major flat index state * (A + 2) + column: a 1-D take beats a 2-D fancy index
            states = np.take(flat_delta, states[parent] * kind(A + 2) + column[:, None])
            if len(texts_here):
                block = states[nodes_here].T
                out[lo : lo + len(start), texts_here] = np.where(block == cdfa.dead, dead, block)
    return out


def _check_vocab(vocab: Sequence[str]) -> list[str]:
    if not isinstance(vocab, list | tuple | dict):
        raise InputError(f"vocab must be a list of token strings (or a {{token: id}} dict), got {vocab!r}")
    if isinstance(vocab, dict):  # {token: id}
        ids = sorted(vocab.values())
        if ids != list(range(len(ids))):
            raise InputError("vocab dict ids must be exactly 0 .. len(vocab) - 1")
        inv = {i: t for t, i in vocab.items()}
        vocab = [inv[i] for i in range(len(ids))]
    if isinstance(vocab, str) or not all(isinstance(t, str) for t in vocab):
        raise InputError("vocab must be a list of token strings (or a {token: id} dict)")
    if len(vocab) == 0:
        raise InputError("vocab must not be empty")
    return list(vocab)


def _check_id(name: str, value, V: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 0 <= int(value) < V:
        raise InputError(f"{name} must be a token id in [0, {V - 1}], got {value!r}")
    return int(value)
