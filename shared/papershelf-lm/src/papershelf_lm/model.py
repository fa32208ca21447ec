"""Model presets (Llama architecture, RoPE, grouped-query attention) and offline checkpoint loading."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from papershelf.errors import InputError
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
