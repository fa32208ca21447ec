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

    ``table``: int64 ``[Q, V]`` next states; ``accept``: bool ``[Q]``; ``start``: start state;
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
        table = np.full((Q, V), dead, dtype=np.int64)
        # walk every token string from every character state, sharing prefixes through a trie
        for v, text in enumerate(vocab):
            if v == eos_id or v in special or text == "":
                continue
            states = np.arange(Qc)
            ok = True
            for ch in text:
                a = cdfa.index(ch)
                if a < 0:
                    ok = False
                    break
                states = cdfa.delta[states, a]
            if ok:
                col = np.where(states == cdfa.dead, dead, states)
                table[:Qc, v] = col
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
        alphabet = {ch for i, t in enumerate(vocab) if i != eos_id and i not in special_ids for ch in t}
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
    ) -> TokenDFA:
        """Token automaton of the compact JSON texts valid under ``schema`` (via :func:`schema_to_regex`)."""
        from dlm_constrain.json_schema import schema_to_regex

        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as exc:
                raise InputError(f"schema is not valid JSON ({exc.msg})") from None
        pattern = schema_to_regex(schema)
        dfa = cls.from_regex(pattern, vocab, eos_id, special_ids=special_ids)
        return dfa.renamed("JSON schema " + json.dumps(schema, separators=(",", ":"))[:60])

    # ------------------------------------------------------------------------------------ operations
    def renamed(self, name: str) -> TokenDFA:
        return TokenDFA(self.table, self.accept, self.start, self.dead, self.vocab, self.eos_id, name)

    def trimmed(self) -> TokenDFA:
        """Keep only states reachable from the start that can still reach acceptance (plus the sink)."""
        table, accept = self.table, self.accept
        Q = table.shape[0]
        live = accept.copy()
        live[self.dead] = False
        while True:
            grow = live | live[table].any(axis=1)
            grow[self.dead] = False
            if (grow == live).all():
                break
            live = grow
        reach = np.zeros(Q, dtype=bool)
        reach[self.start] = True
        while True:
            grow = reach.copy()
            grow[table[reach].reshape(-1)] = True
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
        new = np.full((dead + 1, table.shape[1]), dead, dtype=np.int64)
        if keep:
            new[:dead] = remap[table[keep]]
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

    def live_table(self) -> np.ndarray:
        """bool ``[Q, V]``: token ``v`` from ``q`` does not fall into the dead state."""
        return self.table != self.dead

    def completable(self, n: int) -> np.ndarray:
        """bool ``[n + 1, Q]``: ``[k, q]`` is True when some ``k`` more tokens lead ``q`` to acceptance."""
        key = ("completable", n)
        if key not in self._cache:
            out = np.zeros((n + 1, self.num_states), dtype=bool)
            out[0] = self.accept
            for k in range(1, n + 1):
                out[k] = out[k - 1][self.table].any(axis=1)
            self._cache[key] = out
        return self._cache[key]

    def check_length(self, n: int) -> None:
        """Raise :class:`InputError` when no string of exactly ``n`` tokens is accepted."""
        if not self.completable(n)[n, self.start]:
            raise InputError(f"{self.name} accepts no sequence of length {n} (partition function is 0)")


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
