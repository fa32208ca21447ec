import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from papershelf_lm import tasks
from papershelf_lm.corpus import corpus_bytes, corpus_files
from papershelf_lm.tokenizer import (
    SPECIAL_IDS,
    VOCAB_SIZE,
    byte_tokenizer,
    decode_bytes,
    encode_bytes,
    encode_text,
)

from papershelf.errors import InputError

TOKENIZER = byte_tokenizer()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_bytes_round_trip_losslessly(data):
    assert decode_bytes(encode_bytes(data)) == data


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_transformers_tokenizer_round_trips_text_as_bytes(text):
    # marker strings written in text ("<bos>", "<key>", ...) are parsed as their special tokens, the
    # transformers convention (test_special_tokens_and_save_load_offline); every other text is its bytes
    assume(not any(marker in text for marker in SPECIAL_IDS))
    ids = TOKENIZER(text, add_special_tokens=False)["input_ids"]
    assert ids == encode_text(text)
    assert TOKENIZER.decode(ids) == text


def test_special_tokens_and_save_load_offline(tmp_path):
    from transformers import PreTrainedTokenizerFast

    ids = TOKENIZER("a<key>b<eos>", add_special_tokens=False)["input_ids"]
    assert ids == [97, SPECIAL_IDS["<key>"], 98, SPECIAL_IDS["<eos>"]]
    assert len(TOKENIZER) == VOCAB_SIZE
    TOKENIZER.save_pretrained(tmp_path)
    again = PreTrainedTokenizerFast.from_pretrained(tmp_path, local_files_only=True)
    assert again("héllo 🙂")["input_ids"] == TOKENIZER("héllo 🙂")["input_ids"]
    with pytest.raises(InputError):
        decode_bytes([VOCAB_SIZE])


def test_corpus_split_is_by_file_and_disjoint():
    train, val = set(corpus_files("train")), set(corpus_files("validation"))
    assert train and val and not train & val
    assert len(val) < len(train) / 5
    assert b"def " in corpus_bytes("validation")


@pytest.mark.parametrize("task", tasks.TASKS)
def test_tasks_are_deterministic_exact_length_and_scored_exactly(task):
    a = tasks.generate(task, 400, 7)
    b = tasks.generate(task, 400, 7)
    assert np.array_equal(a.ids, b.ids) and np.array_equal(a.question, b.question)
    assert a.ids.size == 400 and a.n_questions >= 1
    assert not np.array_equal(a.ids, tasks.generate(task, 400, 8).ids)
    assert tasks.score(a, a.ids) == 1.0  # perfect predictions solve every question
    wrong = a.ids.copy()
    first_answer = np.flatnonzero(a.question == 0)[-1]
    wrong[first_answer] = (wrong[first_answer] + 1) % 256  # one wrong token fails that question
    assert tasks.score(a, wrong) == pytest.approx(1 - 1 / a.n_questions)


def test_answers_appear_in_the_context():
    s = tasks.generate("passkey", 600, 3)
    text = decode_bytes(s.ids[: s.prompt_length])
    assert text.count(s.answers[0].encode()) == 2  # the needle states the key twice
    m = tasks.generate("mqar", 200, 3)
    assert m.n_questions == len(m.answers) > 1


def test_bad_task_inputs():
    with pytest.raises(InputError, match="task"):
        tasks.generate("sudoku", 100, 0)
    with pytest.raises(InputError, match="too short"):
        tasks.generate("passkey", 40, 0)
    with pytest.raises(InputError, match="shape"):
        tasks.score(tasks.generate("mqar", 100, 0), np.zeros(3))
