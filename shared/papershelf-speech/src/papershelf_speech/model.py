"""The speech encoder: a Conformer-style CTC model over log-mel features, every layer's hidden states exposed.

Architecture (``EncoderConfig``): per-utterance-independent feature normalisation (the train split's
mean/std, stored in the checkpoint) -> a 1-D convolutional front end that subsamples time by
``subsample`` -> sinusoidal positions -> ``layers`` pre-norm blocks, each multi-head self-attention,
a convolution module (pointwise GLU, depthwise conv, LayerNorm, SiLU, pointwise) and a feed-forward
module, all residual -> a final LayerNorm -> a linear CTC head over the alphabet (blank = 0).
No batch normalisation anywhere, so an utterance's output does not depend on what it is batched with.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from papershelf.errors import InputError
from papershelf.hf_folder import safetensors_shapes
from papershelf_speech.audio import N_MELS
from papershelf_speech.text import ALPHABET, VOCAB_SIZE, decode

CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"
DEFAULT_CHECKPOINT = "ctc-small"


@dataclass
class EncoderConfig:
    """Architecture of the encoder (saved as ``config.json`` beside the weights)."""

    d_model: int = 128
    layers: int = 12
    heads: int = 4
    ff_mult: int = 2
    conv_kernel: int = 15
    subsample: int = 4
    n_mels: int = N_MELS
    vocab_size: int = VOCAB_SIZE
    dropout: float = 0.0
    alphabet: str = ALPHABET
    feature_mean: list = field(default_factory=lambda: [0.0] * N_MELS)
    feature_std: list = field(default_factory=lambda: [1.0] * N_MELS)

    def validate(self) -> None:
        sizes = ("d_model", "layers", "heads", "ff_mult", "conv_kernel", "subsample", "n_mels", "vocab_size")
        for name in sizes:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{name} must be a positive integer, got {value!r}")
        dropout = self.dropout
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise InputError(f"dropout must be a number in [0, 1), got {dropout!r}")
        if not isinstance(self.alphabet, str) or len(self.alphabet) != self.vocab_size:  # blank included
            raise InputError(f"alphabet must be a string of vocab_size = {self.vocab_size} characters")
        for name in ("feature_mean", "feature_std"):
            values = getattr(self, name)
            ok = isinstance(values, list) and len(values) == self.n_mels
            ok = ok and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
            if not ok or not all(math.isfinite(v) for v in values):
                raise InputError(f"{name} must be a list of n_mels = {self.n_mels} finite numbers")
        if min(self.feature_std) <= 0:
            raise InputError("feature_std must be positive")
        if self.d_model % self.heads:
            raise InputError(f"d_model ({self.d_model}) must be divisible by heads ({self.heads})")
        if self.layers < 1 or self.subsample < 1 or self.conv_kernel % 2 == 0:
            raise InputError("layers and subsample must be >= 1 and conv_kernel odd")


PRESETS = {
    # the shipped model: 12 layers, 2.3 M parameters (sized to learn in about an hour on a shared CPU)
    "ctc-small": dict(d_model=128, layers=12, heads=4, ff_mult=2, conv_kernel=15, subsample=4),
    # a few-second model for tests of the training loop; never shipped
    "micro": dict(d_model=32, layers=2, heads=2, ff_mult=2, conv_kernel=5, subsample=4),
}


def get_preset(name: str) -> dict:
    if name not in PRESETS:
        raise InputError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}")
    return dict(PRESETS[name])


@dataclass
class EncoderOutput:
    """``logits`` (B, T', V); ``lengths`` (B,) valid frames; ``hidden_states``: the front end's output
    then every block's output, ``layers + 1`` tensors of shape (B, T', d_model)."""

    logits: torch.Tensor
    lengths: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None


def sinusoid(length: int, dim: int, device=None) -> torch.Tensor:
    pos = torch.arange(length, device=device, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, device=device, dtype=torch.float32) * (-math.log(1e4) / dim))
    table = torch.zeros(length, dim, device=device)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table


class ConvModule(nn.Module):
    def __init__(self, d: int, kernel: int, dropout: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.pw1 = nn.Linear(d, 2 * d)
        self.dw = nn.Conv1d(d, d, kernel, padding=kernel // 2, groups=d)
        self.norm2 = nn.LayerNorm(d)
        self.pw2 = nn.Linear(d, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        y = F.glu(self.pw1(self.norm(x)), dim=-1)
        y = y.masked_fill(pad[..., None], 0.0)  # padding must not leak into the convolution
        y = self.dw(y.transpose(1, 2)).transpose(1, 2)
        return self.drop(self.pw2(F.silu(self.norm2(y))))


class Block(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.heads = cfg.heads
        self.norm_att = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.conv = ConvModule(d, cfg.conv_kernel, cfg.dropout)
        self.norm_ff = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, cfg.ff_mult * d)
        self.ff2 = nn.Linear(cfg.ff_mult * d, d)
        self.drop = nn.Dropout(cfg.dropout)
        self.p = cfg.dropout

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm_att(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        mask = ~pad[:, None, None, :]  # True = attend
        att = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.p if self.training else 0.0
        )
        x = x + self.drop(self.out(att.transpose(1, 2).reshape(b, t, d)))
        x = x + self.conv(x, pad)
        x = x + self.drop(self.ff2(self.drop(F.silu(self.ff1(self.norm_ff(x))))))
        return x.masked_fill(pad[..., None], 0.0)


class SpeechEncoder(nn.Module):
    """Log-mel features ``(B, T, n_mels)`` -> CTC logits, with every layer's hidden states."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        d = config.d_model
        self.register_buffer("feature_mean", torch.tensor(config.feature_mean, dtype=torch.float32))
        self.register_buffer("feature_std", torch.tensor(config.feature_std, dtype=torch.float32))
        self.conv1 = nn.Conv1d(config.n_mels, d, 3, padding=1)
        self.conv2 = nn.Conv1d(d, d, config.subsample, stride=config.subsample)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, config.vocab_size)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        return torch.div(lengths, self.config.subsample, rounding_mode="floor").clamp(min=1)

    def forward(self, features: torch.Tensor, lengths: torch.Tensor | None = None, *,
                output_hidden_states: bool = False) -> EncoderOutput:  # fmt: skip
        if features.ndim != 3 or features.shape[-1] != self.config.n_mels:
            raise InputError(
                f"features must be (batch, frames, {self.config.n_mels}), got {tuple(features.shape)}"
            )
        b, t, _ = features.shape
        if t < self.config.subsample:
            raise InputError(f"features need at least {self.config.subsample} frames, got {t}")
        if lengths is None:
            lengths = torch.full((b,), t, dtype=torch.long, device=features.device)
        x = (features - self.feature_mean) / self.feature_std
        in_pad = torch.arange(t, device=x.device)[None] >= lengths[:, None]
        x = x.masked_fill(in_pad[..., None], 0.0)
        x = F.gelu(self.conv1(x.transpose(1, 2)))
        x = F.gelu(self.conv2(x)).transpose(1, 2)
        out_len = self.output_lengths(lengths).clamp(max=x.shape[1])
        pad = torch.arange(x.shape[1], device=x.device)[None] >= out_len[:, None]
        x = (x + sinusoid(x.shape[1], x.shape[2], x.device)).masked_fill(pad[..., None], 0.0)
        hidden = [x] if output_hidden_states else None
        for block in self.blocks:
            x = block(x, pad)
            if hidden is not None:
                hidden.append(x)
        logits = self.head(self.norm(x))
        return EncoderOutput(logits, out_len, tuple(hidden) if hidden is not None else None)

    @torch.no_grad()
    def transcribe(self, features: list[np.ndarray] | np.ndarray) -> list[str]:
        """Greedy CTC transcripts of log-mel feature arrays ``(frames, n_mels)``."""
        feats = [features] if isinstance(features, np.ndarray) and features.ndim == 2 else list(features)
        batch, lengths = pad_features(feats)
        out = self(batch, lengths)
        return greedy_decode(out.logits, out.lengths)


def pad_features(feats: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack ``(frames, n_mels)`` arrays into a zero-padded ``(B, T, n_mels)`` tensor and lengths."""
    if not feats:
        raise InputError("no features given")
    lengths = torch.tensor([len(f) for f in feats], dtype=torch.long)
    batch = torch.zeros(len(feats), int(lengths.max()), feats[0].shape[-1])
    for i, f in enumerate(feats):
        batch[i, : len(f)] = torch.from_numpy(np.asarray(f, dtype=np.float32))
    return batch, lengths


def greedy_decode(logits: torch.Tensor, lengths: torch.Tensor) -> list[str]:
    """Best path: argmax per frame, collapse repeats, drop blanks."""
    best = logits.argmax(-1).cpu().numpy()
    out = []
    for row, n in zip(best, lengths.tolist(), strict=True):
        row = row[:n]
        keep = np.ones(len(row), dtype=bool)
        keep[1:] = row[1:] != row[:-1]
        out.append(decode(row[keep]))
    return out


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def build_model(preset: str | dict = "ctc-small", *, seed: int = 0, **overrides) -> SpeechEncoder:
    """A freshly initialised encoder (float32)."""
    params = get_preset(preset) if isinstance(preset, str) else dict(preset)
    params.update(overrides)
    torch.manual_seed(seed)
    return SpeechEncoder(EncoderConfig(**params))


def save_model(model: SpeechEncoder, folder: str | Path, *, dtype=torch.float32) -> None:
    """Write ``config.json`` and ``model.safetensors`` into ``folder``."""
    from safetensors.torch import save_file

    from papershelf.repro import atomic_write_json

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(dtype if v.is_floating_point() else v.dtype).contiguous()
             for k, v in model.state_dict().items()}  # fmt: skip
    tmp = folder / ".model.safetensors.tmp"
    save_file(state, str(tmp))
    tmp.replace(folder / "model.safetensors")
    atomic_write_json(folder / "config.json", asdict(model.config))


def checkpoint_names() -> list[str]:
    """Checkpoints shipped inside the package."""
    if not CHECKPOINTS.is_dir():
        return []
    return sorted(p.name for p in CHECKPOINTS.iterdir() if (p / "config.json").is_file())


def resolve(name: str | Path) -> Path:
    folder = Path(name)
    if folder.is_dir():
        return folder
    known = checkpoint_names()
    if isinstance(name, str) and name in known:
        return CHECKPOINTS / name
    raise InputError(
        f"unknown checkpoint {str(name)!r}; shipped checkpoints: {', '.join(known) or 'none'}"
        " (or pass a model folder written by `papershelf-speech train`)"
    )


def load(name: str | Path = DEFAULT_CHECKPOINT) -> SpeechEncoder:
    """A shipped checkpoint by name, or a model folder by path, in eval mode, float32; offline.

    ``model(features, lengths, output_hidden_states=True).hidden_states`` holds every layer's output.
    Missing, truncated or mismatched weights are an error, never a random-initialised model.
    """
    from safetensors.torch import load_file

    folder = resolve(name)
    config_path, weights = folder / "config.json", folder / "model.safetensors"
    if not config_path.is_file() or not weights.is_file():
        raise InputError(f"{folder} is not a model folder (needs config.json and model.safetensors)")
    try:
        raw = json.loads(config_path.read_text(encoding="utf-8"))
        config = EncoderConfig(**raw)
    except Exception as exc:  # corrupt json, not an object, unknown fields
        raise InputError(f"cannot load the checkpoint in {folder}: {str(exc).splitlines()[0]}") from None
    config.validate()
    _check_weights_fit(folder, config)  # from the safetensors header, before anything is allocated
    try:
        state = load_file(weights)
    except Exception as exc:  # truncated safetensors
        raise InputError(f"cannot load the checkpoint in {folder}: {str(exc).splitlines()[0]}") from None
    model = SpeechEncoder(config)
    model.load_state_dict({k: v.float() for k, v in state.items()})
    return model.eval()


def _check_weights_fit(folder: Path, config: EncoderConfig) -> None:
    """The weights' names and shapes (read from the file header) against the model ``config`` describes,
    built on the meta device: a config that does not belong to its weights (``"layers": 10**9``, a
    huge ``d_model``) is refused without allocating it."""
    shapes = safetensors_shapes(folder)
    stored_layers = {int(m.group(1)) for k in shapes if (m := re.match(r"blocks\.(\d+)\.", k))}
    if config.layers != len(stored_layers):
        raise InputError(
            f"checkpoint {folder} does not match its config: {config.layers} layers in config.json, "
            f"{len(stored_layers)} in the weights"
        )
    try:
        with torch.device("meta"):
            expected = {k: tuple(v.shape) for k, v in SpeechEncoder(config).state_dict().items()}
    except RuntimeError as exc:  # sizes whose element counts overflow even without storage
        raise InputError(
            f"checkpoint {folder} does not match its config ({str(exc).splitlines()[0]})"
        ) from None
    missing = sorted(set(expected) - set(shapes))
    unexpected = sorted(set(shapes) - set(expected))
    mismatched = sorted(k for k in set(shapes) & set(expected) if shapes[k] != expected[k])
    if missing or unexpected or mismatched:
        raise InputError(
            f"checkpoint {folder} does not match its config: missing {missing[:2]}, unexpected "
            f"{unexpected[:2]}, mismatched {mismatched[:2]}"
        )


def ship(run: str | Path, name: str, *, dtype=torch.float16) -> Path:
    """Copy a run's best model into ``papershelf_speech/checkpoints/<name>`` (weights as ``dtype``)."""
    run = Path(run)
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
        raise InputError(f"--name must be lower-case letters, digits and dashes, got {name!r}")
    source = run / "best"
    if not (source / "model.safetensors").is_file():
        raise InputError(f"{run} has no best model yet (it needs best/model.safetensors)")
    model = load(source)
    CHECKPOINTS.mkdir(exist_ok=True)
    staging = CHECKPOINTS / f".{name}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    save_model(model, staging, dtype=dtype)
    for extra in ("train_config.json", "log.jsonl"):
        if (run / extra).is_file():
            shutil.copy2(run / extra, staging / extra)
    target = CHECKPOINTS / name
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return target
