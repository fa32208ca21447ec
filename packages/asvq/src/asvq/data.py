"""Offline data: scikit-learn digits, patches of scikit-learn's sample photos, Gaussian mixtures with
known clusters, and log-mel frames of speech synthesised with espeak-ng (when the system has it).

Every loader returns float32 numpy arrays ``(train, test)`` of shape ``(N, D)``; nothing is downloaded.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np

from papershelf.errors import InputError, MissingDependencyError, PapershelfError, check_int, check_number

DATASETS = ("digits", "patches", "speech")


def _sklearn():
    try:
        import sklearn.datasets as ds
    except ImportError:
        raise MissingDependencyError("sklearn", package="asvq", extra="data") from None
    return ds


def load_digits_split(seed: int = 0, n_test: int = 297) -> tuple[np.ndarray, np.ndarray]:
    """The 1,797 scikit-learn 8×8 digits scaled to [0, 1], shape (N, 64), split by a fixed permutation."""
    x = _sklearn().load_digits().data.astype(np.float32) / 16.0
    perm = np.random.default_rng(seed).permutation(len(x))
    return x[perm[n_test:]], x[perm[:n_test]]


def load_patches(
    patch: int = 8, n_train: int = 20000, n_test: int = 4000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """RGB ``patch×patch`` patches of scikit-learn's two sample photos, scaled to [0, 1], (N, 3·patch²).

    Train patches come from the left 80 % of each photo and test patches from the right 20 %, so the two
    sets never overlap.
    """
    patch = check_int("patch", patch, low=2, high=64)
    n_train = check_int("n_train", n_train, low=1)
    n_test = check_int("n_test", n_test, low=1)
    try:
        images = _sklearn().load_sample_images().images
    except ImportError:
        raise MissingDependencyError("PIL", package="asvq", extra="data") from None
    rng = np.random.default_rng(seed)

    def sample(n: int, lo: float, hi: float) -> np.ndarray:
        out = np.empty((n, patch, patch, 3), dtype=np.float32)
        which = rng.integers(len(images), size=n)
        for i, w in enumerate(which):
            img = images[w]
            h, wd = img.shape[:2]
            c0, c1 = int(lo * wd), int(hi * wd) - patch
            r = rng.integers(0, h - patch + 1)
            c = rng.integers(c0, c1 + 1)
            out[i] = img[r : r + patch, c : c + patch]
        return out.reshape(n, -1) / 255.0

    return sample(n_train, 0.0, 0.8), sample(n_test, 0.8, 1.0)


def gaussian_mixture(
    n: int, k: int, dim: int, *, spread: float = 1.0, noise: float = 0.5, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` points from ``k`` equally likely isotropic Gaussians in ``dim`` dimensions.

    Centres ~ N(0, spread²·I); points = centre + N(0, noise²·I). Returns ``(x, labels, centres)``.
    """
    n, k, dim = check_int("n", n, low=1), check_int("k", k, low=1), check_int("dim", dim, low=1)
    spread = check_number("spread", spread, low=0)
    noise = check_number("noise", noise, low=0)
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, spread, size=(k, dim))
    labels = rng.integers(k, size=n)
    x = centres[labels] + rng.normal(0.0, noise, size=(n, dim))
    return x.astype(np.float32), labels, centres.astype(np.float32)


# ---- speech ------------------------------------------------------------------------------------------
SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "A vector quantizer maps every frame to the nearest code in its codebook.",
    "She sells sea shells by the sea shore.",
    "Seven slow swans swam silently southward.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "Six spoons of fresh snow peas, five thick slabs of blue cheese.",
    "We also need a small plastic snake and a big toy frog for the kids.",
    "The rainbow is a division of white light into many beautiful colours.",
    "Numbers like forty two and nineteen eighty four are easy to say.",
    "How razorback jumping frogs can level six piqued gymnasts.",
    "Every codebook entry should be used at least once during training.",
    "Bright morning sunlight warmed the quiet little village by the river.",
)
VOICES_TRAIN = ("en", "en-us", "en-gb-x-rp")
VOICES_TEST = ("en-gb-scotland",)
RATES = (140, 175, 210)
ESPEAK_HINT = (
    "install espeak-ng (Debian/Ubuntu: sudo apt-get install espeak-ng; Fedora: sudo dnf install espeak-ng; "
    "macOS: brew install espeak-ng), then rerun"
)


class ToolMissingError(PapershelfError):
    """A system tool (espeak-ng) that an experiment needs is not installed."""


def espeak_binary() -> str | None:
    """Path of ``espeak-ng`` (or ``espeak``) on PATH, or None."""
    return shutil.which("espeak-ng") or shutil.which("espeak")


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """A 16-bit PCM WAV as mono float32 in [-1, 1] and its sample rate (standard library only)."""
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2:
            raise InputError(f"{path}: only 16-bit PCM WAV is supported")
        rate, channels = w.getframerate(), w.getnchannels()
        data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
    return data.reshape(-1, channels).mean(axis=1), rate


def mel_filterbank(n_mels: int, n_fft: int, sample_rate: int, fmin: float = 0.0, fmax: float | None = None):
    """HTK-mel triangular filters, shape ``(n_mels, n_fft // 2 + 1)``."""
    fmax = sample_rate / 2 if fmax is None else fmax

    def hz_to_mel(f):
        return 2595.0 * np.log10(1.0 + np.asarray(f) / 700.0)

    def mel_to_hz(m):
        return 700.0 * (10.0 ** (np.asarray(m) / 2595.0) - 1.0)

    freqs = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    fb = np.zeros((n_mels, freqs.size))
    for m in range(n_mels):
        lo, mid, hi = edges[m], edges[m + 1], edges[m + 2]
        up = (freqs - lo) / max(mid - lo, 1e-9)
        down = (hi - freqs) / max(hi - mid, 1e-9)
        fb[m] = np.clip(np.minimum(up, down), 0.0, None)
    return fb


def log_mel(
    signal: np.ndarray, sample_rate: int, *, n_mels: int = 40, n_fft: int = 512, hop: int = 128
) -> np.ndarray:
    """Log-mel spectrogram frames ``(T, n_mels)`` = log(mel power + 1e-5), Hann window, no centring."""
    signal = np.asarray(signal, dtype=np.float64)
    if signal.ndim != 1 or signal.size < n_fft:
        raise InputError(f"signal must be 1-D with at least n_fft={n_fft} samples")
    n_frames = 1 + (signal.size - n_fft) // hop
    idx = np.arange(n_fft)[None, :] + hop * np.arange(n_frames)[:, None]
    frames = signal[idx] * np.hanning(n_fft)[None, :]
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    return np.log(power @ mel_filterbank(n_mels, n_fft, sample_rate).T + 1e-5).astype(np.float32)


def synthesize(text: str, voice: str, rate: int, folder: Path) -> tuple[np.ndarray, int]:
    """Speak ``text`` with espeak-ng into a WAV in ``folder`` and read it back."""
    exe = espeak_binary()
    if exe is None:
        raise ToolMissingError(
            "espeak-ng is not installed, so the speech experiment cannot run", hint=ESPEAK_HINT
        )
    path = folder / f"{voice}-{rate}-{abs(hash(text)) % 10**8}.wav"
    done = subprocess.run(
        [exe, "-v", voice, "-s", str(rate), "-w", str(path), text], capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0 or not path.exists():
        raise ToolMissingError(f"espeak-ng failed for voice {voice!r}: {done.stderr.strip()[:200]}")
    return read_wav(path)


def load_speech(n_mels: int = 40, context: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Log-mel frames of espeak-ng speech: train on three voices, test on a fourth, each at three rates.

    Each sample stacks ``context`` consecutive frames (``n_mels · context`` features), standardised with
    the training mean and std. Raises :class:`ToolMissingError` (with install instructions) without
    espeak-ng.
    """
    if espeak_binary() is None:
        raise ToolMissingError(
            "espeak-ng is not installed, so the speech experiment cannot run", hint=ESPEAK_HINT
        )

    def collect(voices) -> np.ndarray:
        rows = []
        with tempfile.TemporaryDirectory() as tmp:
            for voice in voices:
                for rate in RATES:
                    for text in SENTENCES:
                        sig, sr = synthesize(text, voice, rate, Path(tmp))
                        mel = log_mel(sig, sr, n_mels=n_mels)
                        t = (mel.shape[0] // context) * context
                        rows.append(mel[:t].reshape(-1, context * n_mels))
        return np.concatenate(rows)

    train, test = collect(VOICES_TRAIN), collect(VOICES_TEST)
    mu, sd = train.mean(0), train.std(0) + 1e-6
    return ((train - mu) / sd).astype(np.float32), ((test - mu) / sd).astype(np.float32)


def load_dataset(name: str, *, patch: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``digits`` | ``patches`` (``patch`` = 8 or 16) | ``speech``."""
    if name == "digits":
        return load_digits_split(seed)
    if name == "patches":
        return load_patches(patch, seed=seed)
    if name == "speech":
        return load_speech()
    raise InputError(f"unknown dataset {name!r}; known datasets: {', '.join(DATASETS)}")
