"""The encoder: hidden states, padding independence, CTC alignment, probes, training and resuming."""

import json

import numpy as np
import pytest
import torch
from papershelf_speech.evaluate import ctc_forced_align, frame_labels, ridge_probe
from papershelf_speech.model import build_model, count_parameters, load, pad_features, save_model
from papershelf_speech.text import encode
from papershelf_speech.train import TrainConfig, ctc_loss, train

from papershelf.errors import InputError


def test_hidden_states_have_one_tensor_per_layer_plus_the_front_end():
    model = build_model("micro").eval()
    feats, lengths = pad_features([np.random.default_rng(0).standard_normal((50, 80)).astype(np.float32)] * 2)
    out = model(feats, lengths, output_hidden_states=True)
    assert len(out.hidden_states) == model.config.layers + 1
    assert all(h.shape == (2, 12, model.config.d_model) for h in out.hidden_states)
    assert out.logits.shape == (2, 12, 29) and out.lengths.tolist() == [12, 12]
    assert model(feats, lengths).hidden_states is None
    with pytest.raises(InputError, match="80"):
        model(torch.zeros(1, 50, 40))


def test_an_utterance_gives_the_same_output_alone_and_padded_in_a_batch():
    model = build_model("micro").eval()
    rng = np.random.default_rng(1)
    short, long = (
        rng.standard_normal((41, 80)).astype(np.float32),
        rng.standard_normal((90, 80)).astype(np.float32),
    )
    alone = model(*pad_features([short]), output_hidden_states=True)
    batched = model(*pad_features([long, short]), output_hidden_states=True)
    n = int(alone.lengths[0])
    assert int(batched.lengths[1]) == n
    torch.testing.assert_close(batched.logits[1, :n], alone.logits[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        batched.hidden_states[-1][1, :n], alone.hidden_states[-1][0], atol=1e-5, rtol=1e-5
    )


def test_forced_alignment_recovers_a_planted_path():
    target = encode("abba")
    path = [0, target[0], target[1], 0, target[2], 0, target[3], 0, 0]  # 'b','b' need a blank between
    log_probs = np.full((len(path), 29), np.log(0.01))
    log_probs[np.arange(len(path)), path] = np.log(0.72)
    assigned = ctc_forced_align(log_probs, target)
    assert assigned.tolist() == [-1, 0, 1, -1, 2, -1, 3, -1, -1]
    a, b = target[0], target[1]
    assert frame_labels(log_probs, "abba").tolist() == [-1, a, b, b, b, b, a, -1, -1]
    with pytest.raises(InputError, match="no CTC alignment"):
        ctc_forced_align(log_probs[:3], target)


def test_ridge_probe_separates_linearly_separable_classes_and_not_noise():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 600)
    x = rng.standard_normal((600, 8)) * 0.3 + np.eye(8)[y] * 2
    assert ridge_probe(x[:400], y[:400], x[400:], y[400:]) == 1.0
    noise = rng.standard_normal((600, 8))
    assert ridge_probe(noise[:400], y[:400], noise[400:], y[400:]) < 0.5


def test_ctc_training_lowers_the_loss_on_a_fixed_batch(tiny_corpus):
    from papershelf_speech.corpus import Corpus

    split = Corpus(tiny_corpus).split("train")
    feats, lengths = pad_features([split.features(i) for i in range(2)])
    targets = [encode(t) for t in split.texts[:2]]
    model = build_model("micro", seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        loss = ctc_loss(model, feats, lengths, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]


def test_train_logs_keeps_the_best_model_and_resumes(tiny_corpus, tmp_path):
    config = TrainConfig(preset="micro", corpus=str(tiny_corpus), batch_size=3, eval_every=2, max_steps=4,
                         dev_utterances=2, warmup=1)  # fmt: skip
    first = train(config, tmp_path, quiet=True)
    assert first["step"] == 4 and (tmp_path / "state.pt").is_file()
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log] == [2, 4] and all("dev_cer" in e and "elapsed_s" in e for e in log)
    best = load(tmp_path / "best")
    assert count_parameters(best) == count_parameters(build_model("micro"))
    again = train(TrainConfig(**{**config.__dict__, "max_steps": 6}), tmp_path, quiet=True)
    assert again["step"] == 6 and again["epoch"] >= 1
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == 3


@pytest.mark.parametrize("bad", ["state-truncated", "state-foreign", "config-garbage", "config-unknown"])
def test_resume_refuses_a_corrupt_run_folder_and_keeps_it(tiny_corpus, tmp_path, bad):
    config = TrainConfig(preset="micro", corpus=str(tiny_corpus), batch_size=3, eval_every=2, max_steps=2,
                         dev_utterances=2, warmup=1)  # fmt: skip
    train(config, tmp_path, quiet=True)
    state, saved = tmp_path / "state.pt", tmp_path / "train_config.json"
    if bad == "state-truncated":
        state.write_bytes(state.read_bytes()[:100])
    elif bad == "state-foreign":
        torch.save({"step": 1}, state)
    elif bad == "config-garbage":
        saved.write_text("{not json")
    else:
        saved.write_text(json.dumps({**json.loads(saved.read_text()), "colour": 1}))
    before = state.read_bytes()
    with pytest.raises(InputError, match="cannot resume"):
        train(TrainConfig(**{**config.__dict__, "max_steps": 4}), tmp_path, quiet=True)
    assert state.read_bytes() == before


def test_load_refuses_missing_truncated_or_mismatched_weights(tmp_path):
    with pytest.raises(InputError, match="unknown checkpoint"):
        load("no-such-model")
    model = build_model("micro")
    save_model(model, tmp_path / "ok")
    assert load(tmp_path / "ok").config.d_model == 32
    data = (tmp_path / "ok" / "model.safetensors").read_bytes()
    (tmp_path / "ok" / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="cannot load"):
        load(tmp_path / "ok")
    save_model(build_model("micro", d_model=64, heads=2), tmp_path / "bad")
    cfg = json.loads((tmp_path / "bad" / "config.json").read_text())
    (tmp_path / "bad" / "config.json").write_text(json.dumps({**cfg, "d_model": 32}))
    with pytest.raises(InputError, match="does not match"):
        load(tmp_path / "bad")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"layers": 10**9}, "1000000000 layers in config.json, 2 in the weights"),
        ({"d_model": 10**9}, "does not match"),
        ({"ff_mult": 10**9}, "does not match"),
        ({"heads": 0}, "heads must be a positive integer"),
        ({"dropout": "x"}, "dropout must be a number"),
        ({"feature_std": None}, "feature_std must be a list"),
        ([1, 2], "cannot load"),
    ],
)
def test_a_corrupt_config_is_refused_before_the_model_is_built(tmp_path, edit, message):
    # each of these used to build (or try to allocate) the model the config describes, or raise a
    # TypeError/ZeroDivisionError; 10^9 layers would have taken the machine's memory
    save_model(build_model("micro"), tmp_path / "m")
    path = tmp_path / "m" / "config.json"
    config = edit if isinstance(edit, list) else {**json.loads(path.read_text()), **edit}
    path.write_text(json.dumps(config))
    with pytest.raises(InputError, match=message):
        load(tmp_path / "m")


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("lr", "abc", "lr must be a number"),
        ("lr", float("nan"), "lr must be finite"),
        ("batch_size", 0, "batch_size must be an integer in"),
        ("max_steps", "x", "max_steps must be an integer"),
        ("min_lr_ratio", 2.0, "min_lr_ratio must be in"),
        ("corpus", 3, "corpus must be a path"),
        ("seed", 2**64, "seed must be an integer in"),
    ],
)
def test_a_bad_train_config_field_is_one_error_naming_it(field, value, message):
    with pytest.raises(InputError, match=message):
        TrainConfig(preset="micro", **{field: value}).validate()


def test_cli_refuses_a_config_file_that_is_not_an_object(tmp_path, capsys):
    from papershelf_speech.cli import main

    bad = tmp_path / "config.json"
    bad.write_text("[1, 2]")
    code = main(["train", "--corpus", str(tmp_path), "--run", str(tmp_path / "run"), "--config", str(bad)])
    assert code == 2 and "JSON object" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
