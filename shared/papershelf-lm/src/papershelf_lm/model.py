"""Model presets (Llama architecture, RoPE, grouped-query attention) and offline checkpoint loading."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from papershelf.errors import InputError, check_number
from papershelf.hf_folder import check_config_fits_weights
from papershelf_lm.tokenizer import BOS, EOS, PAD, VOCAB_SIZE

CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"


@dataclass(frozen=True)
class Preset:
    """Architecture of one testbed model."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    context: int
    rope_theta: float = 10_000.0

    def config(self):
        from transformers import LlamaConfig

        return LlamaConfig(
            vocab_size=VOCAB_SIZE,
            hidden_size=self.hidden,
            intermediate_size=self.intermediate,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            max_position_embeddings=self.context,
            rope_theta=self.rope_theta,
            bos_token_id=BOS,
            eos_token_id=EOS,
            pad_token_id=PAD,
            tie_word_embeddings=True,
            attention_bias=False,
            mlp_bias=False,
        )


PRESETS = {
    "tiny-s": Preset("tiny-s", hidden=256, layers=4, heads=8, kv_heads=2, intermediate=688, context=1024),
    "tiny-m": Preset("tiny-m", hidden=384, layers=8, heads=8, kv_heads=2, intermediate=1024, context=2048),
    # A few-second model for tests of the training loop; not shipped as a checkpoint.
    "micro": Preset("micro", hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, context=256),
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise InputError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}")
    return PRESETS[name]


def build_model(preset: str | Preset, *, seed: int = 0):
    """A freshly initialised ``LlamaForCausalLM`` for a preset (float32)."""
    import torch
    from transformers import LlamaForCausalLM

    preset = get_preset(preset) if isinstance(preset, str) else preset
    torch.manual_seed(seed)
    return LlamaForCausalLM(preset.config())


def count_parameters(model) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def preset_summary(preset: str | Preset) -> dict:
    preset = get_preset(preset) if isinstance(preset, str) else preset
    return {**asdict(preset), "parameters": count_parameters(build_model(preset))}


def checkpoint_names() -> list[str]:
    """Checkpoints shipped inside the package (folders under ``papershelf_lm/checkpoints``)."""
    if not CHECKPOINTS.is_dir():
        return []
    return sorted(p.name for p in CHECKPOINTS.iterdir() if (p / "config.json").is_file())


def load(name: str | Path, *, dtype=None):
    """``(model, tokenizer)`` of a shipped checkpoint by name, or of a model folder by path; offline.

    The model is in eval mode, float32 unless ``dtype`` says otherwise. A folder with missing or
    mismatched weights is an error, never a silently random-initialised model.
    """
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    folder = Path(name)
    if not folder.is_dir():
        known = checkpoint_names()
        if isinstance(name, str) and name in known:
            folder = CHECKPOINTS / name
        else:
            raise InputError(
                f"unknown checkpoint {str(name)!r}; shipped checkpoints: {', '.join(known) or 'none'}"
                " (or pass a model folder written by `papershelf-lm train`)"
            )
    weights = folder / "model.safetensors"
    if not (folder / "config.json").is_file() or not weights.is_file():
        raise InputError(f"{folder} is not a model folder (needs config.json and model.safetensors)")
    check_config_fits_weights(folder)  # before from_pretrained allocates what a corrupt config says
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a per-tensor loading bar on every load is noise; restored below
    try:
        model, info = LlamaForCausalLM.from_pretrained(
            folder, local_files_only=True, output_loading_info=True, dtype=dtype or torch.float32
        )
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception as exc:  # corrupt json, truncated safetensors, wrong shapes
        raise InputError(f"cannot load the checkpoint in {folder}: {str(exc).splitlines()[0]}") from None
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    problems = {
        "missing": sorted(k for k in info["missing_keys"] if k != "lm_head.weight"),  # tied to embeddings
        "unexpected": sorted(info["unexpected_keys"]),
        "mismatched": sorted(map(str, info.get("mismatched_keys", []))),
    }
    if any(problems.values()):
        detail = "; ".join(f"{kind} {keys[:2]}" for kind, keys in problems.items() if keys)
        raise InputError(f"checkpoint {folder} does not match its config: {detail}")
    return model.eval(), tokenizer


def extend_context(model, factor: float):
    """Stretch a loaded model's RoPE to ``factor`` × its trained context with YaRN (Peng et al. 2023), in
    place and without training; returns the model. ``max_position_embeddings`` becomes the extended
    context. YaRN keeps the high-frequency dimensions (local order), interpolates the low-frequency ones
    and tempers the attention logits; its factor is fixed, so keys cached in chunks stay consistent
    (dynamic NTK scaling would change the frequencies as the sequence grows)."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    check_number("factor", factor, low=1)
    cfg = model.config
    rope = dict(cfg.rope_parameters)
    if rope.get("rope_type", "default") != "default":
        raise InputError(f"the model's RoPE is already scaled ({rope['rope_type']!r}); load it afresh")
    if factor == 1:
        return model
    trained = cfg.max_position_embeddings
    rope.update(rope_type="yarn", factor=float(factor), original_max_position_embeddings=trained)
    cfg.rope_parameters = rope
    cfg.max_position_embeddings = int(trained * factor)
    rotary = model.model.rotary_emb
    model.model.rotary_emb = LlamaRotaryEmbedding(cfg).to(rotary.inv_freq.device)
    return model


REQUIRED_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "train_config.json",
)
OPTIONAL_FILES = ("generation_config.json", "special_tokens_map.json")


def summarize_log(log_path: Path) -> dict:
    """The loss curve in brief: per stage (sequence length), first/last loss and final answer accuracy."""
    entries = [json.loads(line) for line in Path(log_path).read_text().splitlines() if line.strip()]
    if not entries:
        raise InputError(f"{log_path} is empty")
    stages: dict[int, list[dict]] = {}
    for entry in entries:
        stages.setdefault(entry["length"], []).append(entry)
    summary = {"steps": entries[-1]["step"], "stages": []}
    for length, rows in stages.items():
        first, last = rows[0], rows[-1]
        summary["stages"].append({
            "length": length, "first_step": first["step"], "last_step": last["step"],
            "first_loss": round(first["loss"], 4), "last_loss": round(last["loss"], 4),
            "last_answer_token_acc": last.get("answer_token_acc"),
        })  # fmt: skip
    return summary


def ship(run: str | Path, name: str) -> Path:
    """Copy a finished run's exported model into ``papershelf_lm/checkpoints/<name>`` (atomically)."""
    run = Path(run)
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
        raise InputError(f"--name must be lower-case letters, digits and dashes, got {name!r}")
    missing = [f for f in REQUIRED_FILES if not (run / f).is_file()]
    if missing:
        raise InputError(f"{run} is not a finished run: it lacks {', '.join(missing)}")
    load(run)  # refuse to ship weights that do not load cleanly
    CHECKPOINTS.mkdir(exist_ok=True)
    staging = CHECKPOINTS / f".{name}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for f in REQUIRED_FILES + OPTIONAL_FILES:
        if (run / f).is_file():
            shutil.copy2(run / f, staging / f)
    (staging / "loss_summary.json").write_text(json.dumps(summarize_log(run / "log.jsonl"), indent=1) + "\n")
    target = CHECKPOINTS / name
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return target
