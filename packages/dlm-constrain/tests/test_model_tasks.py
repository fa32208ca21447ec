"""Tasks, checkers, constraint builders and the shipped tiny DLM."""

import itertools
import json
import zipfile

import numpy as np
import pytest
import torch
from dlm_constrain import tasks
from dlm_constrain.model import WEIGHTS, load, load_pretrained, window_model_fn

from papershelf.errors import InputError


@pytest.mark.parametrize("task", tasks.TASKS)
@pytest.mark.parametrize("level", tasks.LEVELS)
def test_ground_truth_is_valid_and_scores(task, level):
    for inst in tasks.make_instances(task, 8, seed=5):
        dfa = tasks.constraint(inst, level)
        prompt, answer = tasks.format_example(inst)
        assert (
            dfa.accepts(answer) and tasks.valid(inst, inst.answer, level) and tasks.score(inst, inst.answer)
        )
        assert len(prompt) == tasks.PROMPT_LEN and len(answer) == tasks.ANSWER_LEN


def test_checkers_reject_wrong_answers():
    s = tasks.make_instances("sudoku", 1, seed=2)[0]
    wrong = s.answer[1] + s.answer[0] + s.answer[2:]
    assert not tasks.score(s, wrong)
    c = tasks.make_instances("countdown", 1, seed=2)[0]
    a, b, d = c.data[0]
    assert not tasks.score(c, f"{a}+{b}+{d}+1") and not tasks.score(c, "1/1")


def test_sudoku_puzzles_have_unique_solutions():
    grids = tasks._sudoku_grids()
    assert len(grids) == 288
    for inst in tasks.make_instances("sudoku", 5, seed=9):
        puzzle = inst.data[0]
        fits = [g for g in grids if all(ch == "." or int(ch) == g[i] for i, ch in enumerate(puzzle))]
        assert len(fits) == 1


def test_pretrained_model_learned_the_tasks():
    model = load_pretrained()
    inst = tasks.make_instances("json", 1, seed=123)[0]
    fn = window_model_fn(model, inst)
    x = torch.full((tasks.ANSWER_LEN,), tasks.MASK_ID)
    x[:5] = torch.tensor(tasks.encode('{"n":'))
    logits = fn(x)
    assert logits.shape == (tasks.ANSWER_LEN, len(tasks.VOCAB))
    assert logits[5].argmax() == tasks.VOCAB.index('"')  # a string opens after the key


def test_bad_weights(tmp_path):
    with pytest.raises(InputError, match="no model weights"):
        load(tmp_path / "none.npz")
    (tmp_path / "bad.npz").write_bytes(b"junk")
    with pytest.raises(InputError, match="cannot read model weights"):
        load(tmp_path / "bad.npz")
    with pytest.raises(InputError, match="task must be one of"):
        tasks.make_instances("chess", 1)


def _checkpoint(tmp_path, name, config=None, edit=None):
    """A copy of the shipped checkpoint with its config replaced and/or its arrays edited in place."""
    with np.load(WEIGHTS) as d:
        arrays = {k: d[k].copy() for k in d.files}
    if config is not None:
        arrays["__config__"] = np.frombuffer(json.dumps(config).encode(), dtype=np.uint8)
    if edit is not None:
        edit(arrays)
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


def _shorten_head_bias(a):
    a["head.bias"] = a["head.bias"][:7]


def _nan_embedding(a):
    a["tok.weight"][0, 0] = np.nan


def test_mismatched_or_corrupt_checkpoints_are_one_error_naming_the_file(tmp_path):
    with np.load(WEIGHTS) as d:
        cfg = json.loads(bytes(d["__config__"]).decode())
    cases = {
        # n_heads must divide d_model: building the model first died in torch with an AssertionError
        "heads.npz": (dict(cfg, n_heads=5), None, "not divisible by n_heads"),
        # a model too large to allocate: building it first raised a raw RuntimeError (or exhausted
        # memory) before any saved shape was compared
        "huge.npz": (dict(cfg, vocab=1 << 20, d_model=1 << 14, n_layers=1), None, "parameters"),
        "string.npz": (dict(cfg, d_model="96"), None, "d_model must be an integer"),
        "fields.npz": ({"vocab": 49}, None, "config must have the fields"),
        "shape.npz": (None, _shorten_head_bias, r"tensor 'head.bias' has shape \(7,\)"),
        "nan.npz": (None, _nan_embedding, "'tok.weight' holds NaN"),
        "missing.npz": (None, lambda a: a.pop("head.weight"), r"missing \['head.weight'\]"),
    }
    for name, (config, edit, match) in cases.items():
        path = _checkpoint(tmp_path, name, config, edit)
        with pytest.raises(InputError, match=match) as info:
            load(path)
        assert str(path) in str(info.value), name
    # a zip whose member is corrupt after a valid header, and a plain .npy
    good = _checkpoint(tmp_path, "good.npz")
    raw = bytearray(good.read_bytes())
    with zipfile.ZipFile(good) as z:
        info = z.getinfo("tok.weight.npy")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra) + 200
    raw[start : start + 64] = bytes(64)
    (tmp_path / "crc.npz").write_bytes(bytes(raw))
    np.save(tmp_path / "one.npy", np.zeros(3))
    for name in ("crc.npz", "one.npy"):
        with pytest.raises(InputError, match="cannot read model weights") as info:
            load(tmp_path / name)
        assert name in str(info.value)
    assert isinstance(load(good), torch.nn.Module)


def test_expected_shapes_equal_a_built_model():
    from dlm_constrain.model import MDMConfig, TinyMDM, _expected_shapes, _num_params

    cfg = MDMConfig(d_model=32, n_layers=2, n_heads=2, d_ff=48)
    net = TinyMDM(cfg)
    assert _expected_shapes(cfg) == {k: tuple(v.shape) for k, v in net.state_dict().items()}
    assert _num_params(cfg) == sum(p.numel() for p in net.parameters())


def _accepts_all(dfa, strings: list[str]) -> list[bool]:
    """Vectorised automaton walk over equal-length strings (one table lookup per position)."""
    ids = np.array([tasks.encode(s) for s in strings], dtype=np.int64)
    q = np.full(len(strings), dfa.start, dtype=np.int64)
    for i in range(ids.shape[1]):
        q = dfa.table[q, ids[:, i]]
    return dfa.accept[q].tolist()


def test_sudoku_rules_automaton_equals_brute_force():
    # 7 blanks in a valid grid: all 4**7 fillings, automaton vs the direct rule check
    sol = "".join(map(str, tasks._sudoku_grids()[17]))
    blanks = [0, 3, 5, 6, 10, 12, 15]
    puzzle = "".join("." if i in blanks else ch for i, ch in enumerate(sol))
    inst = tasks.Instance("sudoku", f"s {puzzle}", sol, (puzzle,))
    rules, fmt = tasks.constraint(inst, "rules"), tasks.constraint(inst, "format")
    strings = []
    for fill in itertools.product("1234", repeat=len(blanks)):
        grid = list(puzzle)
        for i, d in zip(blanks, fill):
            grid[i] = d
        strings.append("".join(grid))
    want = [tasks.sudoku_rules_ok(s, puzzle) for s in strings]
    assert 1 <= sum(want) < len(strings)
    assert _accepts_all(rules, strings) == want
    # the row-format constraint is weaker: it accepts every rules-valid grid and more
    fmt_ok = _accepts_all(fmt, strings)
    assert all(f for f, w in zip(fmt_ok, want) if w) and sum(fmt_ok) > sum(want)
    # other digits, wrong givens and wrong lengths are rejected
    assert not any(
        _accepts_all(rules, [sol.replace("1", "5"), "2" + sol[1:] if sol[0] != "2" else "3" + sol[1:]])
    )
    assert not rules.accepts(tasks.encode(sol[:15])) and rules.accepts(tasks.encode(sol) + [tasks.EOS_ID] * 3)


def test_sudoku_rules_without_givens_is_all_288_grids():
    grids = tasks._sudoku_grids()
    assert all(tasks.sudoku_rules_ok("".join(map(str, g)), "." * 16) for g in grids)
    dfa = tasks.TokenDFA.from_regex(tasks.sudoku_rules_regex("." * 16), tasks.VOCAB)
    counts = np.zeros(dfa.num_states)
    counts[dfa.start] = 1
    for _ in range(16):  # number of accepted strings of length 16, by a path count over the table
        nxt = np.zeros_like(counts)
        np.add.at(nxt, dfa.table.reshape(-1), np.repeat(counts, dfa.vocab_size))
        counts = nxt
    assert counts[dfa.accept].sum() == 288  # the number of 4x4 Sudoku grids
    # a row-valid grid breaking a column is rejected
    assert not tasks.sudoku_rules_ok("1234" * 4, "." * 16)
    with pytest.raises(InputError, match="puzzle must be"):
        tasks.sudoku_rules_regex("12")
    with pytest.raises(InputError, match="no solution"):
        tasks.sudoku_rules_regex("11" + "." * 14)


@pytest.mark.parametrize("seed", [2, 1])  # distinct numbers; a repeated number
def test_countdown_constraint_equals_brute_force(seed):
    inst = tasks.make_instances("countdown", 1, seed=seed)[0]
    nums = inst.data[0]
    other = next(str(d) for d in range(1, 10) if d not in nums)
    alphabet = sorted({*map(str, nums), other, "+", "-", "*"})
    for level in tasks.LEVELS:
        dfa = tasks.constraint(inst, level)
        five = ["".join(t) for t in itertools.product(alphabet, repeat=5)]
        for strings in (
            ["".join(t) for t in itertools.product(alphabet, repeat=4)],
            five,
            [s + "1" for s in five],
        ):
            want = [
                len(s) == 5 and sorted(s[0::2]) == sorted(map(str, nums)) and all(c in "+-*" for c in s[1::2])
                for s in strings
            ]
            assert _accepts_all(dfa, strings) == want
