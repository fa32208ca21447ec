import numpy as np
import pytest
import torch
from delta_mem.baselines import bm25_window, lora_rank_for
from delta_mem.data import make_dialogue, stack

from papershelf.errors import InputError


def _text(ids):
    return bytes(int(x) for x in ids if x < 256).decode()


def test_dialogues_are_seeded_and_the_fact_is_outside_the_window():
    for seed in range(20):
        d = make_dialogue(seed, window=128, n_history=2)
        e = make_dialogue(seed, window=128, n_history=2)
        assert np.array_equal(d.window, e.window) and np.array_equal(d.history, e.history)
        assert d.history.shape == (2, 128) and d.window.shape == (128,)
        assert d.answer_mask.sum() == 1 and _text(d.window[d.answer_mask]) == d.answer
        final = _text(d.window)
        assert f"{d.person}: my number is {d.answer}." not in final  # the fact is not in the window
        assert f"my number is {d.answer}." in _text(d.history.reshape(-1)) or (
            f"update, my number is {d.answer}." in _text(d.history.reshape(-1))
        )
        if d.stale is not None:
            assert d.stale != d.answer
    assert not np.array_equal(make_dialogue(1).window, make_dialogue(2).window)


def test_bm25_window_keeps_length_and_question():
    d = make_dialogue(5, window=128, update_prob=1.0)
    w = bm25_window(d)
    assert w.shape == d.window.shape and w[0] == 256
    assert _text(w).endswith(_text(d.window[-d.tail :]))
    assert f"{d.person}: " in _text(w[: len(w) - 40])  # the retrieved line names the person


def test_stack_shapes_and_bad_args():
    ds = [make_dialogue(i, window=96, n_people=2) for i in range(3)]
    h, w, m = stack(ds)
    assert h.shape == (3, 1, 96) and w.shape == (3, 96) and m.dtype.is_floating_point is False
    with pytest.raises(InputError, match="window"):
        make_dialogue(0, window=10)
    with pytest.raises(InputError, match="update_prob"):
        make_dialogue(0, update_prob=2.0)


def test_lora_rank_matches_parameter_count(tiny_llama):
    rank, count = lora_rank_for(tiny_llama, 1000)
    per = sum(
        m.in_features + m.out_features
        for n, m in tiny_llama.named_modules()
        if n.endswith(("q_proj", "o_proj"))
    )
    assert count == rank * per and abs(count - 1000) <= per / 2


def test_people_are_limited_by_the_digits_and_top_k_is_checked():
    from delta_mem.data import MAX_PEOPLE

    d = make_dialogue(0, window=256, n_people=MAX_PEOPLE, update_prob=1.0)
    assert d.stale is not None and d.answer != d.stale
    for n in (MAX_PEOPLE + 1, 16):  # 10 with an update, 11+ always, used to be numpy ValueErrors
        with pytest.raises(InputError, match="n_people"):
            make_dialogue(0, window=256, n_people=n)
    for k in (0, -1):  # -1 used to slice off the worst message instead
        with pytest.raises(InputError, match="top_k"):
            bm25_window(make_dialogue(5), top_k=k)


def test_seeds_and_sizes_are_checked_at_the_public_boundary(tiny_llama):
    for seed, match in ((-1, r"seed must be an integer in \[0"), (1.5, "seed must be an integer")):
        with pytest.raises(InputError, match=match):  # were numpy's ValueError / TypeError
            make_dialogue(seed)
    with pytest.raises(InputError, match="seed"):
        from delta_mem.data import make_dialogues

        make_dialogues(2, -3)
    for n in (0, -5):  # used to return rank 1 silently
        with pytest.raises(InputError, match="n_params"):
            lora_rank_for(tiny_llama, n)
    with pytest.raises(InputError, match="dialogue must be a Dialogue"):
        bm25_window("Maya: my number is 7.")


def test_a_window_too_short_for_retrieval_names_the_window():
    d = make_dialogue(0, window=64, n_people=1, update_prob=0.0)
    with pytest.raises(InputError, match="window 64 is too short for BM25 retrieval"):
        bm25_window(d)


@pytest.mark.parametrize("module", ["rank_bm25", "peft", "papershelf_lm"])
def test_a_missing_optional_dependency_names_its_extra(monkeypatch, tiny_llama, module):
    """The errors were built with positional arguments the core's MissingDependencyError does not take:
    a TypeError instead of "pip install 'delta-mem[bench]'"."""
    import sys

    from delta_mem.baselines import lora_model
    from delta_mem.experiments import corpus_windows, load_backbone

    from papershelf.errors import MissingDependencyError

    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    if module == "papershelf_lm":
        monkeypatch.setitem(sys.modules, "papershelf_lm.corpus", None)
    call = {
        "rank_bm25": lambda: bm25_window(make_dialogue(0)),
        "peft": lambda: lora_model(tiny_llama, 2),
        "papershelf_lm": lambda: corpus_windows(1, 64, 0),
    }[module]
    with pytest.raises(MissingDependencyError) as info:
        call()
    assert "delta-mem[bench]" in info.value.one_line()
    if module == "papershelf_lm":
        with pytest.raises(MissingDependencyError):
            load_backbone("tiny-s")


def test_a_missing_triton_names_its_extra(monkeypatch):
    import importlib

    from papershelf.errors import MissingDependencyError

    st = importlib.import_module(
        "delta_mem.kernels.scan_triton"
    )  # the package re-exports a same-named function

    monkeypatch.setattr(st, "triton", None)
    q = torch.zeros(1, 1, 2, 2)
    with pytest.raises(MissingDependencyError) as info:
        st.scan_triton(q, q, q, q, q, q)
    assert "delta-mem[triton]" in info.value.one_line()
