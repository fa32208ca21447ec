import json

import pytest
import torch
from papershelf_lm.cli import main
from papershelf_lm.model import build_model, count_parameters, get_preset
from papershelf_lm.train import TrainConfig, make_batch, train, weighted_loss

from papershelf.errors import InputError


def test_presets_have_the_sizes_the_issue_asks_for():
    assert 2e6 <= count_parameters(build_model("tiny-s")) <= 5e6
    cfg = get_preset("tiny-m").config()
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.max_position_embeddings) == (8, 2, 2048)
    with pytest.raises(InputError, match="tiny-s"):
        get_preset("huge")


def test_training_lowers_the_loss_on_a_fixed_batch():
    torch.manual_seed(0)
    config = TrainConfig(preset="micro", batch_size=4, curriculum=[(0, 128)])
    model = build_model("micro")
    ids, weights, _, _ = make_batch(config, 0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = None
    for _ in range(30):
        loss = weighted_loss(model(input_ids=ids).logits, ids, weights)
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.7 * first


def test_train_resumes_and_exports(tmp_path):
    config = TrainConfig(preset="micro", steps=4, batch_size=2, warmup=1, curriculum=[(0, 128)])
    config.checkpoint_every, config.log_every = 2, 1
    first = train(config, tmp_path, quiet=True)
    assert first == {"step": 4, "done": True}
    assert (tmp_path / "model.safetensors").exists() and (tmp_path / "tokenizer.json").exists()
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log] == [1, 2, 3, 4]
    longer = TrainConfig(**{**config.__dict__, "steps": 6})
    assert train(longer, tmp_path, quiet=True)["step"] == 6  # resumed from step 4
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == 6


def test_corrupt_or_foreign_state_is_an_error(tmp_path):
    (tmp_path / "state.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match="cannot resume"):
        train(TrainConfig(preset="micro", steps=1, batch_size=1, curriculum=[(0, 64)]), tmp_path, quiet=True)


def test_config_validation():
    with pytest.raises(InputError, match="mixture"):
        TrainConfig(preset="micro", mixture={"poetry": 1.0})
    with pytest.raises(InputError, match="curriculum"):
        TrainConfig(preset="micro", curriculum=[(0, 4096)])
    with pytest.raises(InputError):
        TrainConfig(preset="nope")


def test_cli_errors_and_tasks(capsys, tmp_path):
    assert main(["tasks", "passkey", "--length", "200"]) == 0
    assert "pass key" in capsys.readouterr().out
    assert main(["train", "--preset", "giant", "--out", str(tmp_path)]) == 2
    assert "tiny-s" in capsys.readouterr().err
    assert main(["eval", str(tmp_path / "missing")]) == 2
    assert "unknown checkpoint" in capsys.readouterr().err


def test_curriculum_stages_override_batch_mixture_and_weights():
    stage = [64, 128, {"batch_size": 3, "mixture": {"mqar": 1.0}, "per_row": True, "context_weight": 0.5}]
    config = TrainConfig(preset="micro", curriculum=[(0, 64), stage], mixture={"text": 1.0})
    ids, weights, answers, sources = make_batch(config, 0)
    assert ids.shape == (16, 64) and set(sources) == {"text"} and torch.all(weights == 1.0)
    ids, weights, answers, sources = make_batch(config, 64)
    assert ids.shape == (3, 128) and sources == ["mqar"] * 3
    assert torch.allclose(weights[:, 1:].sum(1), torch.ones(3))  # per-row normalised
    ratio = weights[answers].max() / weights[1:][~answers[1:]].max()
    assert torch.isclose(ratio, torch.tensor(2.0))  # answer weight 1 over context weight 0.5
    with pytest.raises(InputError, match="per stage"):
        TrainConfig(preset="micro", curriculum=[(0, 64, {"lr": 1.0})])
    with pytest.raises(InputError, match="mixture"):
        TrainConfig(preset="micro", curriculum=[(0, 64, {"mixture": {"poetry": 1}})])


def test_a_longer_horizon_with_a_cooldown_keeps_every_earlier_learning_rate():
    full = TrainConfig(preset="micro", steps=300, warmup=10, lr=1e-3, min_lr=1e-4, curriculum=[(0, 64)])
    short = TrainConfig(**{**full.__dict__, "steps": 200, "lr_horizon": 300, "cooldown": 50})
    assert [short.lr_at(s) for s in range(150)] == [full.lr_at(s) for s in range(150)]
    assert short.lr_at(199) == pytest.approx(1e-4)
    assert all(short.lr_at(s + 1) < short.lr_at(s) for s in range(150, 199))
    with pytest.raises(InputError, match="cooldown"):
        TrainConfig(preset="micro", steps=10, cooldown=11, curriculum=[(0, 64)])
