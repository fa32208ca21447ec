"""Synthetic structured tasks with exact checkers and per-instance automata (offline, seeded).

* ``json``: a prompt ``j <name> <age> <city>`` -> the record ``{"n":"<name>","a":<age>,"c":"<city>"}``;
  the constraint is the schema (name ``[a-z]{2,6}``, age an integer in [10, 99], city one of four).
* ``sudoku``: a 4x4 puzzle with a unique solution (``.`` for blanks) -> the 16 digits row by row.
  Constraint level ``"format"`` (default): the *row* rule plus the givens (every row a permutation of
  1-4); level ``"rules"``: the full Sudoku rules for the givens (every row, column and 2x2 box a
  permutation of 1-4, the givens kept) -- for a uniquely solvable puzzle this language holds exactly
  one string, the solution, so at that level the constraint alone solves the task.
* ``countdown``: three numbers and a target -> an expression over + - * using each number exactly once;
  the constraint (both levels) is that: the given numbers, each once, in any order, joined by two
  operators.  It does not encode the target value (that would make the constraint the scorer);
  accuracy needs the value to equal the target.
* ``json``: both levels are the schema.

Every answer sits in a window of ``ANSWER_LEN`` positions padded with the EOS token ``$``.

>>> inst = make_instances("countdown", 1, seed=3)[0]
>>> inst.prompt, inst.answer, score(inst, inst.answer)
('c 8 1 2 11', '8+1+2', True)
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dlm_constrain.automaton import TokenDFA
from papershelf.errors import InputError, check_choice, check_int

TASKS = ("json", "sudoku", "countdown")
LEVELS = ("format", "rules")
PROMPT_LEN = 20
ANSWER_LEN = 34
EOS, PAD, MASK = "$", "_", "#"
CHARS = 'abcdefghijklmnopqrstuvwxyz0123456789{}":,.+-* '
VOCAB: tuple[str, ...] = (*CHARS, EOS, PAD, MASK)
EOS_ID, PAD_ID, MASK_ID = VOCAB.index(EOS), VOCAB.index(PAD), VOCAB.index(MASK)

NAMES = ("ann", "bob", "carla", "dev", "eli", "fay", "gus", "hana", "ivo", "jun", "kim", "lea", "mo", "nils")
CITIES = ("rome", "oslo", "lima", "kyiv")
JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "n": {"type": "string", "pattern": "[a-z]{2,6}"},
        "a": {"type": "integer", "minimum": 10, "maximum": 99},
        "c": {"enum": list(CITIES)},
    },
    "required": ["n", "a", "c"],
}


@dataclass(frozen=True)
class Instance:
    task: str
    prompt: str
    answer: str
    data: tuple  # task-specific ground truth


def encode(text: str) -> list[int]:
    try:
        return [VOCAB.index(c) for c in text]
    except ValueError:
        raise InputError(f"text {text!r} has characters outside the task vocabulary") from None


def decode(ids) -> str:
    return "".join(VOCAB[int(i)] for i in ids if int(i) not in (EOS_ID, PAD_ID, MASK_ID))


@lru_cache(maxsize=1)
def _sudoku_grids() -> list[tuple[int, ...]]:
    rows = list(itertools.permutations((1, 2, 3, 4)))
    out = []

    def fits(grid: tuple[tuple[int, ...], ...], row: tuple[int, ...]) -> bool:
        r = len(grid)
        if any(row[c] == g[c] for g in grid for c in range(4)):  # columns
            return False
        if r % 2 == 1:  # second row of a band: the two 2x2 boxes
            top = grid[-1]
            return len({top[0], top[1], row[0], row[1]}) == 4 and len({top[2], top[3], row[2], row[3]}) == 4
        return True

    def extend(grid):
        if len(grid) == 4:
            out.append(tuple(v for row in grid for v in row))
            return
        for row in rows:
            if fits(grid, row):
                extend((*grid, row))

    extend(())
    return out


def _sudoku_puzzle(rng: np.random.Generator) -> tuple[str, str]:
    grids = _sudoku_grids()
    sol = grids[rng.integers(len(grids))]
    cells = list(range(16))
    rng.shuffle(cells)
    given = set(range(16))
    for c in cells:  # remove cells while the solution stays unique
        trial = given - {c}
        matches = [g for g in grids if all(g[i] == sol[i] for i in trial)]
        if len(matches) == 1:
            given = trial
        if len(given) <= 6:
            break
    puzzle = "".join(str(sol[i]) if i in given else "." for i in range(16))
    return puzzle, "".join(map(str, sol))


def _instance(task: str, rng: np.random.Generator) -> Instance:
    if task == "json":
        name, age, city = NAMES[rng.integers(len(NAMES))], int(rng.integers(10, 100)), CITIES[rng.integers(4)]
        answer = json.dumps({"n": name, "a": age, "c": city}, separators=(",", ":"))
        return Instance(task, f"j {name} {age} {city}", answer, (name, age, city))
    if task == "sudoku":
        puzzle, sol = _sudoku_puzzle(rng)
        return Instance(task, f"s {puzzle}", sol, (puzzle,))
    nums = [int(v) for v in rng.integers(1, 10, size=3)]
    ops = [str(o) for o in rng.choice(list("+-*"), size=2)]
    expr = f"{nums[0]}{ops[0]}{nums[1]}{ops[1]}{nums[2]}"
    target = int(eval(expr))  # a three-number expression over + - * on digits we generated
    shown = sorted(nums) if rng.random() < 0.5 else nums
    return Instance(task, f"c {' '.join(map(str, shown))} {target}", expr, (tuple(shown), target))


def make_instances(task: str, count: int, seed: int = 0) -> list[Instance]:
    """``count`` seeded instances of ``task`` (or of every task in turn when ``task == "mix"``)."""
    check_choice("task", task, (*TASKS, "mix"))
    count = check_int("count", count, low=0)
    rng = np.random.default_rng(seed)
    kinds = TASKS if task == "mix" else (task,)
    return [_instance(kinds[i % len(kinds)], rng) for i in range(count)]


def score(inst: Instance, text: str) -> bool:
    """Task accuracy: the exact record / the exact solution / an expression hitting the target."""
    if inst.task in ("json", "sudoku"):
        return text == inst.answer
    _nums, target = inst.data
    import re

    if not re.fullmatch(constraint_regex(inst, "format"), text):
        return False
    return int(eval(text)) == target  # text is digits and + - * only (checked by the regex)


def sudoku_rules_ok(text: str, puzzle: str) -> bool:
    """Whether ``text`` is a full 4x4 grid (16 digits 1-4, row by row) obeying the Sudoku rules (rows,
    columns, 2x2 boxes) and the givens of ``puzzle`` (a direct check, independent of the automaton)."""
    if len(text) != 16 or any(ch not in "1234" for ch in text):
        return False
    if any(g != "." and g != t for g, t in zip(puzzle, text)):
        return False
    groups = [[4 * r + c for c in range(4)] for r in range(4)] + [
        [4 * r + c for r in range(4)] for c in range(4)
    ]
    groups += [[4 * (br + i) + bc + j for i in (0, 1) for j in (0, 1)] for br in (0, 2) for bc in (0, 2)]
    return all(len({text[i] for i in g}) == 4 for g in groups)


def sudoku_rules_regex(puzzle: str) -> str:
    """The Sudoku rules for the givens of ``puzzle`` as a regex: the alternation of every 4x4 grid
    (of the 288 that satisfy the row, column and box rules) that agrees with the givens."""
    if not isinstance(puzzle, str) or len(puzzle) != 16 or any(ch not in ".1234" for ch in puzzle):
        raise InputError(f"puzzle must be 16 characters from '.1234', got {puzzle!r}")
    fits = [
        "".join(map(str, g))
        for g in _sudoku_grids()
        if all(ch == "." or int(ch) == g[i] for i, ch in enumerate(puzzle))
    ]
    if not fits:
        raise InputError(f"puzzle {puzzle!r} has no solution under the Sudoku rules")
    return "(" + "|".join(fits) + ")"


def constraint_regex(inst: Instance, level: str = "format") -> str:
    """The per-instance constraint as a regex (whole-answer match) at ``level`` (see the module doc)."""
    check_choice("level", level, LEVELS)
    if inst.task == "json":
        from dlm_constrain.json_schema import schema_to_regex

        return schema_to_regex(JSON_SCHEMA)
    if inst.task == "sudoku":
        puzzle = inst.data[0]
        if level == "rules":
            return sudoku_rules_regex(puzzle)
        rows = []
        for r in range(4):
            givens = puzzle[4 * r : 4 * r + 4]
            perms = [
                "".join(map(str, p))
                for p in itertools.permutations((1, 2, 3, 4))
                if all(g == "." or int(g) == p[j] for j, g in enumerate(givens))
            ]
            rows.append("(" + "|".join(perms) + ")")
        return "".join(rows)
    nums = inst.data[0]
    exprs = {f"{a}[-+*]{b}[-+*]{c}" for a, b, c in itertools.permutations(nums)}
    return "(" + "|".join(sorted(exprs)) + ")"


def constraint(inst: Instance, level: str = "format") -> TokenDFA:
    """The instance's token automaton over :data:`VOCAB` (EOS pads the window; PAD and MASK never allowed)."""
    regex = constraint_regex(inst, level)
    dfa = TokenDFA.from_regex(regex, VOCAB, eos_id=EOS_ID, special_ids=(PAD_ID, MASK_ID))
    return dfa.renamed(f"{inst.task} constraint ({level})")


def valid(inst: Instance, text: str, level: str = "format") -> bool:
    """Validity under the constraint at ``level``, checked independently with Python's ``re``."""
    import re

    return re.fullmatch(constraint_regex(inst, level), text) is not None


def format_example(inst: Instance) -> tuple[list[int], list[int]]:
    """(prompt ids padded to PROMPT_LEN, answer ids padded with EOS to ANSWER_LEN)."""
    if len(inst.prompt) > PROMPT_LEN or len(inst.answer) > ANSWER_LEN:
        raise InputError(f"instance too long for the window: {inst.prompt!r} -> {inst.answer!r}")
    prompt = encode(inst.prompt) + [PAD_ID] * (PROMPT_LEN - len(inst.prompt))
    answer = encode(inst.answer) + [EOS_ID] * (ANSWER_LEN - len(inst.answer))
    return prompt, answer
