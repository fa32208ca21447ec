"""Tasks, checkers and the shipped tiny DLM."""

import pytest
import torch
from dlm_constrain import tasks
from dlm_constrain.model import load, load_pretrained, window_model_fn

from papershelf.errors import InputError


@pytest.mark.parametrize("task", tasks.TASKS)
def test_ground_truth_is_valid_and_scores(task):
    for inst in tasks.make_instances(task, 8, seed=5):
        dfa = tasks.constraint(inst)
        prompt, answer = tasks.format_example(inst)
        assert dfa.accepts(answer) and tasks.valid(inst, inst.answer) and tasks.score(inst, inst.answer)
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
