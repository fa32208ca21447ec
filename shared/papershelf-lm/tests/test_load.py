import json

import numpy as np
import pytest
import torch
from papershelf_lm import load
from papershelf_lm.cli import main
from papershelf_lm.train import TrainConfig, copy_sequence, train

from papershelf.errors import InputError


@pytest.fixture(scope="module")
def micro_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("micro")
    config = TrainConfig(
        preset="micro", steps=2, batch_size=2, warmup=1, curriculum=[(0, 64)], mixture={"text": 1, "mqar": 1}
    )
    train(config, out, quiet=True)
    return out


def test_load_a_model_folder_offline_round_trips_the_weights(micro_run):
    model, tokenizer = load(micro_run)
    again, _ = load(str(micro_run))
    ids = torch.tensor([tokenizer("def f(x):")["input_ids"]])
    assert not model.training and model.dtype == torch.float32
    assert torch.equal(model(input_ids=ids).logits, again(input_ids=ids).logits)
    assert tokenizer.decode(ids[0]) == "def f(x):"


def test_unknown_checkpoint_lists_the_known_ones():
    with pytest.raises(InputError, match="unknown checkpoint 'tiny-xl'; shipped checkpoints"):
        load("tiny-xl")


def test_corrupt_weights_are_an_error_not_a_random_model(micro_run, tmp_path):
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((micro_run / name).read_bytes())
    weights = (micro_run / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    with pytest.raises(InputError, match="cannot load the checkpoint"):
        load(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(InputError, match="not a model folder"):
        load(tmp_path)


def test_weights_that_do_not_match_the_config_are_an_error(micro_run, tmp_path):
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((micro_run / name).read_bytes())
    config = json.loads((micro_run / "config.json").read_text())
    config["num_hidden_layers"] += 1  # weights for a layer that is not there
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"does not match|cannot load|weights hold 2 layers"):
        load(tmp_path)


def test_eval_cli_on_a_model_folder(micro_run, tmp_path, capsys):
    out = tmp_path / "eval.json"
    args = ["eval", str(micro_run), "--tasks", "mqar", "--lengths", "64", "-n", "2", "--out", str(out)]
    assert main(args) == 0
    rows = json.loads(out.read_text())
    assert set(rows["accuracy"]) == {"mqar@64"} and rows["bits_per_byte"] > 0
    assert main(["eval", "nope-model"]) == 2
    assert "unknown checkpoint" in capsys.readouterr().err


def test_copy_sequences_repeat_a_span_and_mark_only_the_predictable_part():
    rng = np.random.default_rng(0)
    text = bytes(range(32, 127)) * 100
    for _ in range(50):
        ids, target = copy_sequence(rng, 128, text)
        assert ids.shape == target.shape == (128,)
        where = np.flatnonzero(target)
        span = len(where) + 1
        second = where[0] - 1
        repeat = ids[second : second + span]
        starts = [i for i in range(second - span + 1) if np.array_equal(ids[i : i + span], repeat)]
        assert starts, "the marked span must have appeared earlier"


def test_ship_copies_a_finished_run_and_load_finds_it_by_name(micro_run, tmp_path, monkeypatch, capsys):
    import papershelf_lm.model as model_module

    monkeypatch.setattr(model_module, "CHECKPOINTS", tmp_path / "checkpoints")
    assert main(["ship", str(micro_run), "--name", "micro-test"]) == 0
    shipped = tmp_path / "checkpoints" / "micro-test"
    summary = json.loads((shipped / "loss_summary.json").read_text())
    assert summary["steps"] == 2 and summary["stages"][0]["length"] == 64
    assert model_module.checkpoint_names() == ["micro-test"]
    model, _ = load("micro-test")
    assert model.config.num_hidden_layers == 2
    capsys.readouterr()
    assert main(["ship", str(tmp_path / "nothing"), "--name", "x"]) == 2  # not a finished run
    assert "not a finished run" in capsys.readouterr().err
    assert main(["ship", str(micro_run), "--name", "../escape"]) == 2
    assert model_module.checkpoint_names() == ["micro-test"]  # nothing half-written


def test_lengths_far_beyond_the_context_are_refused_and_extrapolation_is_flagged(micro_run, capsys):
    from papershelf_lm.evaluate import task_accuracy

    model, _ = load(micro_run)
    with pytest.raises(InputError, match="context of 256"):
        task_accuracy(model, "mqar", 9 * 256, n=1)
    assert main(["eval", str(micro_run), "--tasks", "mqar", "--lengths", "64", "512", "-n", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "extrapolation" in next(x for x in lines if x.startswith("mqar") and " 512 " in x)
    assert "extrapolation" not in next(x for x in lines if x.startswith("mqar") and " 64 " in x)
    assert main(["eval", str(micro_run), "--lengths", "4096", "-n", "1"]) == 2
    assert "far beyond" in capsys.readouterr().err
    # with YaRN x2 a length beyond the trained context is flagged as YaRN, not extrapolation
    assert (
        main(["eval", str(micro_run), "--tasks", "mqar", "--lengths", "512", "-n", "1", "--yarn", "2"]) == 0
    )
    assert "YaRN x2" in next(x for x in capsys.readouterr().out.splitlines() if x.startswith("mqar"))
    assert main(["eval", str(micro_run), "--yarn", "0.5"]) == 2
    assert "--yarn" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"num_hidden_layers": 10**9}, "num_hidden_layers = 1000000000"),
        ({"hidden_size": 10**6}, "does not belong to these weights"),
        ({"vocab_size": "x"}, "vocab_size must be a positive integer"),
    ],
)
def test_a_corrupt_config_is_refused_before_the_model_is_built(micro_run, tmp_path, edit, message):
    # from_pretrained would first allocate the model the config describes (10^9 layers: all the memory)
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((micro_run / name).read_bytes())
    config = {**json.loads((micro_run / "config.json").read_text()), **edit}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match=message):
        load(tmp_path)


def test_shipped_checkpoints_pass_the_config_check():
    from papershelf_lm.model import CHECKPOINTS

    from papershelf.hf_folder import check_config_fits_weights

    for folder in sorted(p for p in CHECKPOINTS.iterdir() if (p / "config.json").is_file()):
        check_config_fits_weights(folder)


@pytest.mark.parametrize("content", [b"\xff\xfe\x00", b"[1, 2]"])
def test_train_config_that_is_not_a_json_object_is_one_error(tmp_path, capsys, content):
    path = tmp_path / "c.json"
    path.write_bytes(content)
    assert main(["train", "--preset", "micro", "--out", str(tmp_path / "run"), "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --config"), err
    assert not (tmp_path / "run").exists()


def test_extend_context_is_yarn_keeps_fast_rotations_and_refuses_bad_factors(micro_run):
    """YaRN ×4: the context grows 4×, the fastest RoPE frequency is unchanged and the slowest divided by 4,
    the logits are tempered by 0.1·ln 4 + 1; factor 1 changes nothing; < 1 or a second scaling is refused."""
    from papershelf_lm import extend_context

    model, tokenizer = load(micro_run)
    ids = torch.tensor([tokenizer("def f(x):")["input_ids"]])
    before = model(input_ids=ids).logits
    assert torch.equal(extend_context(model, 1)(input_ids=ids).logits, before)
    inv = model.model.rotary_emb.inv_freq.clone()
    trained = model.config.max_position_embeddings
    extend_context(model, 4)
    rotary = model.model.rotary_emb
    assert model.config.max_position_embeddings == 4 * trained
    assert model.config.rope_parameters["rope_type"] == "yarn"
    torch.testing.assert_close(rotary.inv_freq[0], inv[0])
    torch.testing.assert_close(rotary.inv_freq[-1], inv[-1] / 4)
    assert rotary.attention_scaling == pytest.approx(0.1 * np.log(4) + 1)
    assert not torch.equal(model(input_ids=ids).logits, before)
    with pytest.raises(InputError, match="already scaled"):
        extend_context(model, 2)
    with pytest.raises(InputError, match="factor"):
        extend_context(load(micro_run)[0], 0.5)
