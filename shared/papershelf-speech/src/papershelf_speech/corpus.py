"""The offline speech corpus: seeded transcripts spoken by TTS voices, augmented, split by speaker-voice.

A corpus is a folder: ``manifest.json`` (the build configuration, engine versions, per-split counts and
hashes, train feature statistics) and per split ``<split>.jsonl`` (one line per utterance: text, voice,
rate, pitch, augmentation), ``<split>.feats.npy`` (all log-mel frames, float16, concatenated) with
``<split>.offsets.npy``, and where kept ``<split>.audio.npy`` (int16) with ``<split>.audio_offsets.npy``.
Every utterance is a pure function of ``(seed, split, index)`` and the engines' versions.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from papershelf.errors import InputError
from papershelf_speech import audio, engines
from papershelf_speech.text import sentence

SPLITS = ("train", "dev", "test")
_SPLIT_CODE = {"train": 0, "dev": 1, "test": 2}

# Speaker-voice splits: a variant (espeak-ng) or a flite voice belongs to exactly one split.
DEV_VARIANTS = ("f5", "m8", "robert")
TEST_VARIANTS = ("f4", "m6", "Andy", "steph", "klatt3")
TEST_FLITE = ("slt",)
DEV_FLITE: tuple[str, ...] = ()
FLITE_SHARE = 0.15  # fraction of utterances spoken by flite voices (when flite has voices in the split)

AUGMENTATIONS = ("clean", "noise", "reverb", "speed")


def split_voices(split: str, engines_used=("espeak-ng", "flite")) -> list[engines.Voice]:
    """The voices of one split (disjoint across splits)."""
    if split not in SPLITS:
        raise InputError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
    held = {"dev": DEV_VARIANTS, "test": TEST_VARIANTS}
    held_flite = {"dev": DEV_FLITE, "test": TEST_FLITE}
    if split == "train":
        variants = [v for v in engines.ESPEAK_VARIANTS if v not in DEV_VARIANTS + TEST_VARIANTS]
        flite = [v for v in engines.FLITE_VOICES if v not in DEV_FLITE + TEST_FLITE]
    else:
        variants, flite = list(held[split]), list(held_flite[split])
    voices = []
    if "espeak-ng" in engines_used:
        voices += [engines.Voice("espeak-ng", f"{a}+{v}") for a in engines.ESPEAK_ACCENTS for v in variants]
    if "flite" in engines_used:
        voices += [engines.Voice("flite", v) for v in flite]
    return voices


@dataclass
class CorpusConfig:
    """What to build. Sizes are utterance counts per split."""

    n_train: int = 200
    n_dev: int = 40
    n_test: int = 60
    seed: int = 0
    sample_rate: int = 16000
    engines: tuple[str, ...] = ("espeak-ng", "flite")
    augment: bool = True  # augment the train split (dev and test stay clean)
    keep_audio: tuple[str, ...] = ("dev", "test")
    rate_range: tuple[float, float] = (0.8, 1.15)
    pitch_range: tuple[int, int] = (25, 75)
    snrs_db: tuple[float, ...] = (20.0, 10.0, 5.0)
    rt60_range: tuple[float, float] = (0.2, 0.6)
    speeds: tuple[float, ...] = (0.9, 1.1)
    extra: dict = field(default_factory=dict)

    def validate(self) -> None:
        for name in ("n_train", "n_dev", "n_test"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise InputError(f"{name} must be a non-negative integer, got {value!r}")
        audio.check_sample_rate(self.sample_rate)
        engines.check_engines(tuple(self.engines))
        bad = [s for s in self.keep_audio if s not in SPLITS]
        if bad:
            raise InputError(f"keep_audio: unknown split(s) {bad}; known: {', '.join(SPLITS)}")


def utterance_plan(config: CorpusConfig, split: str, index: int) -> dict:
    """The recipe of one utterance: a pure function of ``(seed, split, index)``."""
    rng = np.random.default_rng([config.seed, _SPLIT_CODE[split], index])
    voices = split_voices(split, config.engines)
    espeak = [v for v in voices if v.engine == "espeak-ng"]
    flite = [v for v in voices if v.engine == "flite"]
    if not voices:
        raise InputError(f"split {split!r} has no voice with engines {list(config.engines)}")
    pool = flite if flite and (not espeak or rng.random() < FLITE_SHARE) else espeak
    voice = pool[int(rng.integers(len(pool)))]
    plan = {
        "index": index,
        "text": sentence(rng),
        "voice": voice.id,
        "rate": round(float(rng.uniform(*config.rate_range)), 3),
        "pitch": int(rng.integers(config.pitch_range[0], config.pitch_range[1] + 1)),
        "aug": {"kind": "clean"},
        "aug_seed": int(rng.integers(2**31)),
    }
    if split == "train" and config.augment:
        kind = AUGMENTATIONS[int(rng.choice(4, p=[0.4, 0.25, 0.2, 0.15]))]
        if kind == "noise":
            plan["aug"] = {"kind": kind, "snr_db": float(rng.choice(config.snrs_db)),
                           "color": str(rng.choice(["white", "pink"]))}  # fmt: skip
        elif kind == "reverb":
            plan["aug"] = {"kind": kind, "rt60": round(float(rng.uniform(*config.rt60_range)), 3)}
        elif kind == "speed":
            plan["aug"] = {"kind": kind, "factor": float(rng.choice(config.speeds))}
    return plan


def render(plan: dict, sample_rate: int) -> np.ndarray:
    """Synthesise and augment one planned utterance at ``sample_rate`` (float32 waveform)."""
    voice = engines.parse_voice(plan["voice"])
    wave, rate = engines.synthesize(voice, plan["text"], rate=plan["rate"], pitch=plan["pitch"])
    wave = audio.resample(wave, rate, sample_rate)
    rng = np.random.default_rng(plan["aug_seed"])
    aug = plan["aug"]
    if aug["kind"] == "noise":
        wave = audio.add_noise(wave, aug["snr_db"], rng, color=aug["color"])
    elif aug["kind"] == "reverb":
        wave = audio.reverberate(wave, sample_rate, aug["rt60"], rng)
    elif aug["kind"] == "speed":
        wave = audio.change_speed(wave, aug["factor"])
    return np.clip(wave, -1.0, 1.0).astype(np.float32)


def _render_chunk(args) -> tuple[list[np.ndarray], list[np.ndarray]]:
    plans, sample_rate = args
    waves = [render(p, sample_rate) for p in plans]
    return waves, audio.log_mel_batch(waves, sample_rate)


def build_corpus(out: str | Path, config: CorpusConfig | None = None, *, workers: int = 1,
                 progress=None) -> Path:  # fmt: skip
    """Build a corpus folder (written to a temporary folder, renamed into place when complete)."""
    config = config or CorpusConfig()
    config.validate()
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise InputError(f"--out {out} exists and is not empty; remove it or choose another folder")
    staging = out.parent / f".{out.name}.building"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    manifest = {"format": 1, "config": asdict(config), "engines": engines.engine_versions(config.engines),
                "splits": {}}  # fmt: skip
    pool = None
    if workers > 1:
        import multiprocessing as mp

        pool = mp.get_context("spawn").Pool(workers)
    try:
        for split in SPLITS:
            n = getattr(config, f"n_{split}")
            plans = [utterance_plan(config, split, i) for i in range(n)]
            chunks = [(plans[i : i + 32], config.sample_rate) for i in range(0, n, 32)]
            results = pool.imap(_render_chunk, chunks) if pool else map(_render_chunk, chunks)
            feats, waves, done = [], [], 0
            for chunk_waves, chunk_feats in results:
                feats += chunk_feats
                if split in config.keep_audio:
                    waves += chunk_waves
                done += len(chunk_feats)
                if progress:
                    progress(split, done, n)
            _write_split(staging, split, plans, feats, waves if split in config.keep_audio else None)
            manifest["splits"][split] = {"utterances": n, "frames": int(sum(len(f) for f in feats)),
                                         "voices": sorted({p["voice"] for p in plans})}  # fmt: skip
            if split == "train" and feats:
                stacked = np.concatenate(feats).astype(np.float64)
                manifest["feature_stats"] = {"mean": stacked.mean(0).round(5).tolist(),
                                             "std": stacked.std(0).round(5).tolist()}  # fmt: skip
    finally:
        if pool:
            pool.close()
            pool.join()
    manifest["hashes"] = {f.name: _file_hash(f) for f in sorted(staging.iterdir())}
    (staging / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    if out.exists():
        out.rmdir()
    os.replace(staging, out)
    return out


def _write_split(folder: Path, split: str, plans, feats, waves) -> None:
    lines = [json.dumps(p, sort_keys=True) for p in plans]
    (folder / f"{split}.jsonl").write_text("".join(line + "\n" for line in lines))
    lengths = [len(f) for f in feats]
    np.save(folder / f"{split}.offsets.npy", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
    data = np.concatenate(feats) if feats else np.zeros((0, audio.N_MELS), np.float32)
    np.save(folder / f"{split}.feats.npy", data.astype(np.float16))
    if waves is not None:
        lengths = [len(w) for w in waves]
        np.save(
            folder / f"{split}.audio_offsets.npy", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        )
        data = np.concatenate(waves) if waves else np.zeros(0, np.float32)
        np.save(folder / f"{split}.audio.npy", np.round(data * 32767).astype(np.int16))


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def corpus_hash(folder: str | Path) -> str:
    """One SHA-256 over every data file of a corpus (the manifest's per-file hashes, recomputed)."""
    folder = Path(folder)
    digest = hashlib.sha256()
    for f in sorted(folder.iterdir()):
        if f.name != "manifest.json" and f.is_file():
            digest.update(f"{f.name}:{_file_hash(f)}\n".encode())
    return digest.hexdigest()


class Split:
    """One split of a built corpus: texts, metadata, log-mel features and (where kept) audio."""

    def __init__(self, folder: Path, name: str, sample_rate: int) -> None:
        self.name = name
        self.sample_rate = sample_rate
        self.meta = [json.loads(line) for line in (folder / f"{name}.jsonl").read_text().splitlines()]
        self.texts = [m["text"] for m in self.meta]
        self._offsets = np.load(folder / f"{name}.offsets.npy")
        self._feats = np.load(folder / f"{name}.feats.npy", mmap_mode="r")
        audio_path = folder / f"{name}.audio.npy"
        self.has_audio = audio_path.is_file()
        if self.has_audio:
            self._audio = np.load(audio_path, mmap_mode="r")
            self._audio_offsets = np.load(folder / f"{name}.audio_offsets.npy")

    def __len__(self) -> int:
        return len(self.meta)

    def lengths(self) -> np.ndarray:
        return np.diff(self._offsets)

    def features(self, i: int) -> np.ndarray:
        """Log-mel features ``(frames, 80)`` float32 of utterance ``i``."""
        return np.asarray(self._feats[self._offsets[i] : self._offsets[i + 1]], dtype=np.float32)

    def audio(self, i: int) -> np.ndarray:
        """The waveform of utterance ``i`` (float32), when this split kept its audio."""
        if not self.has_audio:
            raise InputError(f"split {self.name!r} was built without audio (see CorpusConfig.keep_audio)")
        raw = self._audio[self._audio_offsets[i] : self._audio_offsets[i + 1]]
        return np.asarray(raw, dtype=np.float32) / 32767.0


class Corpus:
    """A built corpus folder."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        path = self.folder / "manifest.json"
        if not path.is_file():
            raise InputError(f"{self.folder} is not a corpus folder (no manifest.json); build one with "
                             "`papershelf-speech build-corpus --out DIR`")  # fmt: skip
        self.manifest = json.loads(path.read_text())
        self.sample_rate = int(self.manifest["config"]["sample_rate"])
        self._splits: dict[str, Split] = {}

    def split(self, name: str) -> Split:
        if name not in SPLITS:
            raise InputError(f"unknown split {name!r}; known: {', '.join(SPLITS)}")
        if name not in self._splits:
            self._splits[name] = Split(self.folder, name, self.sample_rate)
        return self._splits[name]

    @property
    def feature_stats(self) -> tuple[np.ndarray, np.ndarray]:
        stats = self.manifest.get("feature_stats")
        if not stats:
            raise InputError(f"{self.folder} has an empty train split, so no feature statistics")
        return np.asarray(stats["mean"], np.float32), np.asarray(stats["std"], np.float32)
