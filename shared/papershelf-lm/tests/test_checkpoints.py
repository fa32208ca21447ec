"""The shipped checkpoints load offline and retrieve; the README quickstart runs as written."""

import json
import re
from pathlib import Path

import pytest
import torch
from papershelf_lm import checkpoint_names, greedy_generate, load
from papershelf_lm.evaluate import task_accuracy
from papershelf_lm.model import CHECKPOINTS, get_preset
from papershelf_lm.tasks import generate

SHIPPED = ["tiny-s", "tiny-m"]


def test_the_checkpoints_ship_inside_the_package_within_the_size_budget():
    assert set(SHIPPED) <= set(checkpoint_names())
    total = sum(f.stat().st_size for f in CHECKPOINTS.rglob("*") if f.is_file())
    assert total <= 40 * 2**20
    for name in checkpoint_names():
        folder = CHECKPOINTS / name
        assert {"model.safetensors", "train_config.json", "loss_summary.json", "eval.json"} <= {
            f.name for f in folder.iterdir()
        }
        assert json.loads((folder / "eval.json").read_text())["accuracy"]


@pytest.mark.parametrize("name", SHIPPED)
def test_checkpoint_loads_offline_with_its_preset_architecture(name):
    model, tokenizer = load(name)
    preset = get_preset(name)
    assert model.config.hidden_size == preset.hidden and model.config.num_key_value_heads == preset.kv_heads
    assert tokenizer.decode(tokenizer("pass key")["input_ids"]) == "pass key"


def test_tiny_s_retrieves_the_passkey_at_1k_on_a_fixed_set():
    model, _ = load("tiny-s")
    assert task_accuracy(model, "passkey", 1024, n=5, seed=123) >= 0.8


def test_tiny_s_generates_the_passkey_greedily_with_the_kv_cache():
    model, _ = load("tiny-s")
    sample = generate("passkey", 512, seed=7, split="validation")
    prompt = sample.ids[: sample.prompt_length]
    out = greedy_generate(model, torch.from_numpy(prompt)[None], len(sample.answers[0]))
    assert bytes(out[0].tolist()).decode() == sample.answers[0]


def test_readme_quickstart_runs():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    namespace: dict = {}
    exec(compile(block, "README quickstart", "exec"), namespace)
    assert namespace["answer"] == namespace["sample"].answers[0]
