"""A small, dependency-free regular-expression compiler: pattern -> minimal character DFA.

Supported syntax (full-match semantics, no anchors): literals, ``.``, escapes ``\\d \\w \\s \\D \\W \\S``
(Unicode classes, as Python's ``re`` has them for ``str`` patterns) and escaped metacharacters, classes
``[a-z0-9_]`` and negated ``[^...]``, groups ``( )`` and ``(?: )``, alternation ``|``, quantifiers
``* + ?`` and ``{m}``, ``{m,}``, ``{m,n}`` (lazy ``?`` suffixes are accepted and ignored: they do not
change the language; a second quantifier on the same atom, ``a**`` or the possessive ``a*+``, is refused
as in Python's ``re``).  Back-references and look-around are not regular
and are rejected with :class:`~papershelf.errors.InputError`.

The compiler works over a finite alphabet (the characters that occur in the tokenizer vocabulary):
Thompson NFA -> subset construction -> Moore minimisation, keeping only live states plus one dead state.

>>> dfa = compile_regex("a(b|c)*d", alphabet="abcd")
>>> dfa.accepts("abcbd"), dfa.accepts("abca")
(True, False)
>>> dfa.num_states   # minimal: start, loop, accept, dead
4
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from papershelf.errors import InputError

_MAX_REPEAT = 1000
_CLASS_ESCAPES = frozenset({"\\d", "\\w", "\\s", "\\D", "\\W", "\\S"})


@dataclass(frozen=True)
class CharDFA:
    """A complete DFA over ``alphabet``: ``delta[q, a]`` is the next state, state ``dead`` rejects forever."""

    alphabet: str
    delta: np.ndarray  # int64 [Q, |alphabet|]
    start: int
    accept: np.ndarray  # bool [Q]
    dead: int

    @property
    def num_states(self) -> int:
        return int(self.delta.shape[0])

    def index(self, ch: str) -> int:
        return self.alphabet.find(ch)

    def run(self, text: str, state: int | None = None) -> int:
        """The state reached after reading ``text`` (the dead state on a character outside the alphabet)."""
        q = self.start if state is None else state
        for ch in text:
            a = self.alphabet.find(ch)
            if a < 0:
                return self.dead
            q = int(self.delta[q, a])
        return q

    def accepts(self, text: str) -> bool:
        return bool(self.accept[self.run(text)])


# ----------------------------------------------------------------------------------------------- parser
# AST nodes: ("set", frozenset), ("cat", [nodes]), ("alt", [nodes]), ("rep", node, lo, hi|None), ("eps",)


class _Parser:
    def __init__(self, pattern: str, alphabet: frozenset[str]) -> None:
        self.p = pattern
        self.i = 0
        self.alphabet = alphabet

    def error(self, msg: str) -> InputError:
        return InputError(f"regex {self.p!r}: {msg} at position {self.i}")

    def peek(self) -> str | None:
        return self.p[self.i] if self.i < len(self.p) else None

    def parse(self):
        node = self.alt()
        if self.i != len(self.p):
            raise self.error(f"unexpected {self.p[self.i]!r}")
        return node

    def alt(self):
        branches = [self.cat()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.cat())
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def cat(self):
        items = []
        while self.peek() is not None and self.peek() not in "|)":
            items.append(self.repeat())
        if not items:
            return ("eps",)
        return items[0] if len(items) == 1 else ("cat", items)

    def repeat(self):
        node = self.atom()
        quantified = False
        while self.peek() is not None and self.peek() in "*+?{":
            c, at = self.peek(), self.i
            if c == "{":
                bounds = self.braces()
                if bounds is None:  # a literal brace, as in Python's re
                    break
                lo, hi = bounds
            else:
                self.i += 1
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
            if quantified:  # as Python's re: "a**" or "a{2}{3}" is an error; "(a*)*" says what is meant
                self.i = at
                raise self.error(f"multiple repeat {c!r} (no possessive quantifiers; group the inner repeat)")
            quantified = True
            if self.peek() == "?":  # lazy quantifier: same language
                self.i += 1
            node = ("rep", node, lo, hi)
        return node

    def braces(self):
        j = self.p.find("}", self.i)
        if j < 0:
            raise self.error("unterminated '{'")
        body = self.p[self.i + 1 : j]
        parts = body.split(",")
        try:
            if len(parts) == 1:
                lo = hi = int(parts[0])
            elif len(parts) == 2:
                lo = int(parts[0]) if parts[0] else 0
                hi = int(parts[1]) if parts[1] else None
            else:
                raise ValueError
        except ValueError:
            raise self.error(f"bad repetition {{{body}}}") from None
        if max(lo, hi or 0) > _MAX_REPEAT:
            raise self.error(f"repetition bounds {{{body}}} exceed the supported {_MAX_REPEAT}")
        if lo < 0 or (hi is not None and hi < lo):
            raise self.error(f"bad repetition bounds {{{body}}}")
        self.i = j + 1
        return lo, hi

    def atom(self):
        c = self.peek()
        if c == "(":
            self.i += 1
            if self.p.startswith("?:", self.i):
                self.i += 2
            elif self.peek() == "?":
                raise self.error("look-around and named groups are not supported")
            node = self.alt()
            if self.peek() != ")":
                raise self.error("missing ')'")
            self.i += 1
            return node
        if c in ("*", "+", "?", "{"):
            raise self.error(f"nothing to repeat before {c!r}")
        if c == ")":
            raise self.error("unbalanced ')'")
        if c == "[":
            return ("set", self.char_class())
        if c == ".":
            self.i += 1
            return ("set", self.alphabet - {"\n"})
        if c in ("^", "$"):
            raise self.error("anchors are not supported (patterns always match the whole string)")
        if c == "\\":
            return ("set", self.escape())
        self.i += 1
        return ("set", frozenset(c))

    def escape(self) -> frozenset[str]:
        self.i += 1
        c = self.peek()
        if c is None:
            raise self.error("trailing backslash")
        self.i += 1
        # Unicode classes, as Python's re defines them for str patterns (over the vocabulary's characters)
        classes = {
            "d": frozenset(ch for ch in self.alphabet if ch.isdecimal()),
            "w": frozenset(ch for ch in self.alphabet if ch.isalnum() or ch == "_"),
            "s": frozenset(ch for ch in self.alphabet if ch.isspace()),
        }
        if c in classes:
            return classes[c]
        if c in "DWS":
            return self.alphabet - classes[c.lower()]
        simple = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}
        if c == "x":
            code = self.p[self.i : self.i + 2]
            if len(code) != 2 or any(h not in "0123456789abcdefABCDEF" for h in code):
                raise self.error("\\x needs two hex digits")
            self.i += 2
            return frozenset(chr(int(code, 16)))
        if c in simple:
            return frozenset(simple[c])
        if c.isalnum():
            raise self.error(f"unsupported escape \\{c}")
        return frozenset(c)

    def char_class(self) -> frozenset[str]:
        self.i += 1
        negate = self.peek() == "^"
        if negate:
            self.i += 1
        chars: set[str] = set()
        first = True
        while True:
            c = self.peek()
            if c is None:
                raise self.error("unterminated '['")
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            # a class escape (\d, \w, ...) cannot bound a range, as in Python's re: its size depends on
            # the vocabulary, so "[\d-x]" must not turn into a range when only one digit occurs
            is_class = self.p[self.i : self.i + 2] in _CLASS_ESCAPES
            if c == "\\":
                item = self.escape()
            else:
                self.i += 1
                item = frozenset(c)
            ranged = self.peek() == "-" and self.i + 1 < len(self.p) and self.p[self.i + 1] != "]"
            if ranged and (is_class or self.p[self.i + 1 : self.i + 3] in _CLASS_ESCAPES):
                raise self.error("bad character range: a class such as \\d cannot bound a range")
            if ranged:
                self.i += 1
                if self.peek() == "\\":
                    end_set = self.escape()
                    if len(end_set) != 1:
                        raise self.error("a class cannot end a range")
                    (end,) = end_set
                else:
                    end = self.p[self.i]
                    self.i += 1
                (begin,) = item
                if ord(end) < ord(begin):
                    raise self.error(f"bad range {begin}-{end}")
                chars |= {ch for ch in self.alphabet if begin <= ch <= end}  # only these can occur
            else:
                chars |= item
        return frozenset(self.alphabet - chars) if negate else frozenset(chars)


# ----------------------------------------------------------------------------------------------- NFA


class _NFA:
    def __init__(self) -> None:
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[frozenset[str], int]]] = []

    def new(self) -> int:
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def build(self, node) -> tuple[int, int]:
        kind = node[0]
        if kind == "eps":
            s = self.new()
            return s, s
        if kind == "set":
            s, t = self.new(), self.new()
            self.edges[s].append((node[1], t))
            return s, t
        if kind == "cat":
            s, t = self.build(node[1][0])
            for child in node[1][1:]:
                s2, t2 = self.build(child)
                self.eps[t].append(s2)
                t = t2
            return s, t
        if kind == "alt":
            s, t = self.new(), self.new()
            for child in node[1]:
                s2, t2 = self.build(child)
                self.eps[s].append(s2)
                self.eps[t2].append(t)
            return s, t
        # repetition: lo mandatory copies, then (hi - lo) optional copies or a star
        _, child, lo, hi = node
        s = t = self.new()
        for _ in range(lo):
            s2, t2 = self.build(child)
            self.eps[t].append(s2)
            t = t2
        if hi is None:
            s2, t2 = self.build(child)
            hub = self.new()
            self.eps[t].append(hub)
            self.eps[hub].append(s2)
            self.eps[t2].append(hub)
            t = hub
        else:
            end = self.new()
            for _ in range(hi - lo):
                self.eps[t].append(end)
                s2, t2 = self.build(child)
                self.eps[t].append(s2)
                t = t2
            self.eps[t].append(end)
            t = end
        return s, t

    def closure(self, states) -> frozenset[int]:
        stack = list(states)
        seen = set(stack)
        while stack:
            for nxt in self.eps[stack.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return frozenset(seen)


def _minimise(delta: np.ndarray, accept: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Moore partition refinement on a complete DFA, then drop everything that cannot reach acceptance."""
    q = delta.shape[0]
    block = accept.astype(np.int64)
    while True:
        sig = np.concatenate([block[:, None], block[delta]], axis=1)
        _, new = np.unique(sig, axis=0, return_inverse=True)
        new = new.reshape(-1)
        if len(np.unique(new)) == len(np.unique(block)):
            block = new
            break
        block = new
    nb = int(block.max()) + 1
    mdelta = np.zeros((nb, delta.shape[1]), dtype=np.int64)
    macc = np.zeros(nb, dtype=bool)
    for s in range(q):
        mdelta[block[s]] = block[delta[s]]
        macc[block[s]] |= accept[s]
    mstart = int(block[start])
    # live = can reach an accepting state; all dead states collapse into one
    live = macc.copy()
    while True:
        grow = live | live[mdelta].any(axis=1)
        if (grow == live).all():
            break
        live = grow
    # reachable from start
    reach = np.zeros(nb, dtype=bool)
    reach[mstart] = True
    while True:
        grow = reach.copy()
        grow[mdelta[reach].reshape(-1)] = True
        if (grow == reach).all():
            break
        reach = grow
    keep = [s for s in range(nb) if live[s] and reach[s]]
    if mstart not in keep:  # empty language: a single dead start state
        return np.zeros((1, delta.shape[1]), dtype=np.int64), np.zeros(1, dtype=bool), 0, 0
    order = [mstart] + [s for s in keep if s != mstart]
    remap = np.full(nb, len(order), dtype=np.int64)
    remap[order] = np.arange(len(order))
    dead = len(order)
    out = np.full((dead + 1, delta.shape[1]), dead, dtype=np.int64)
    out[:dead] = remap[mdelta[order]]
    acc = np.zeros(dead + 1, dtype=bool)
    acc[:dead] = macc[order]
    return out, acc, 0, dead


def compile_regex(pattern: str, alphabet: str | set[str] | frozenset[str]) -> CharDFA:
    """Compile ``pattern`` (whole-string match) into a minimal complete :class:`CharDFA` over ``alphabet``.

    Characters of the pattern outside ``alphabet`` can never be produced, so they simply make the branches
    that need them unreachable.
    """
    if not isinstance(pattern, str):
        raise InputError(f"regex must be a string, got {type(pattern).__name__}")
    alpha = frozenset(alphabet)
    letters = "".join(sorted(alpha))
    tree = _Parser(pattern, alpha).parse()
    nfa = _NFA()
    s, t = nfa.build(tree)
    # characters that belong to exactly the same character sets of the pattern behave alike: build the
    # DFA over one representative per class (a tokenizer alphabet has ~1000 characters, a pattern ~10s
    # of classes), then give every character its class's column
    sets = list({chars for out in nfa.edges for chars, _ in out})
    signature: dict[tuple[bool, ...], int] = {}
    reps: list[str] = []
    column = np.empty(len(letters), dtype=np.int64)
    for i, ch in enumerate(letters):
        key = tuple(ch in chars for chars in sets)
        if key not in signature:
            signature[key] = len(reps)
            reps.append(ch)
        column[i] = signature[key]
    start = nfa.closure([s])
    index = {start: 0}
    subsets = [start]
    rows: list[list[int]] = []
    k = 0
    while k < len(subsets):
        cur = subsets[k]
        row = []
        for ch in reps:
            nxt = nfa.closure([dst for st in cur for (chars, dst) in nfa.edges[st] if ch in chars])
            if nxt not in index:
                index[nxt] = len(subsets)
                subsets.append(nxt)
                if len(subsets) > 200_000:
                    raise InputError(f"regex {pattern!r}: the DFA exceeds 200000 states")
            row.append(index[nxt])
        rows.append(row)
        k += 1
    delta = np.array(rows, dtype=np.int64).reshape(len(subsets), len(reps))
    accept = np.array([t in sub for sub in subsets], dtype=bool)
    d, a, st, dead = _minimise(delta, accept, 0)
    d = d[:, column] if len(letters) else np.zeros((d.shape[0], 0), dtype=np.int64)
    return CharDFA(letters, d, st, a, dead)
