"""Waveform utilities: resampling, augmentation (noise at an SNR, reverberation, speed), log-mel features."""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

import numpy as np

from papershelf.errors import InputError

SAMPLE_RATES = (8000, 16000, 22050)
N_MELS = 80


def check_sample_rate(sample_rate: int) -> int:
    if sample_rate not in SAMPLE_RATES:
        raise InputError(
            f"unsupported sample rate {sample_rate}; supported: {', '.join(map(str, SAMPLE_RATES))}"
        )
    return int(sample_rate)


def resample(wave: np.ndarray, source: int, target: int) -> np.ndarray:
    """Polyphase resampling from ``source`` to ``target`` Hz (exact rational ratio)."""
    from scipy.signal import resample_poly

    if source == target:
        return np.asarray(wave, dtype=np.float32)
    ratio = Fraction(target, source)
    return resample_poly(wave, ratio.numerator, ratio.denominator).astype(np.float32)


def add_noise(
    wave: np.ndarray, snr_db: float, rng: np.random.Generator, *, color: str = "white"
) -> np.ndarray:
    """Add white or pink noise so that signal power / noise power is ``snr_db`` decibels."""
    noise = rng.standard_normal(len(wave))
    if color == "pink":  # 1/f power: shape white noise's spectrum by 1/sqrt(f)
        spec = np.fft.rfft(noise)
        f = np.arange(len(spec), dtype=np.float64)
        f[0] = 1.0
        noise = np.fft.irfft(spec / np.sqrt(f), n=len(wave))
    elif color != "white":
        raise InputError(f"color must be 'white' or 'pink', got {color!r}")
    p_signal = float(np.mean(np.square(wave, dtype=np.float64)))
    p_noise = float(np.mean(np.square(noise)))
    scale = np.sqrt(p_signal / (p_noise * 10 ** (snr_db / 10))) if p_noise > 0 else 0.0
    return (wave + scale * noise).astype(np.float32)


def reverberate(wave: np.ndarray, sample_rate: int, rt60: float, rng: np.random.Generator) -> np.ndarray:
    """Convolve with a synthetic room impulse response: a direct path plus exponentially decaying noise
    whose energy falls by 60 dB in ``rt60`` seconds; the output keeps the input's peak level."""
    from scipy.signal import fftconvolve

    n = max(1, int(rt60 * sample_rate))
    t = np.arange(n) / sample_rate
    rir = rng.standard_normal(n) * np.exp(-6.9078 * t / rt60)  # 10^(-60/20) amplitude at rt60
    rir[0] = 1.0 / 0.3  # direct path dominates the early tail
    out = fftconvolve(wave, rir)[: len(wave)]
    peak = float(np.max(np.abs(out))) or 1.0
    return (out * (float(np.max(np.abs(wave))) or 1.0) / peak).astype(np.float32)


def change_speed(wave: np.ndarray, factor: float) -> np.ndarray:
    """Play ``factor`` times faster (tempo and pitch together, as in Kaldi's speed perturbation)."""
    ratio = Fraction(factor).limit_denominator(100)
    from scipy.signal import resample_poly

    return resample_poly(wave, ratio.denominator, ratio.numerator).astype(np.float32)


@lru_cache(maxsize=8)
def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int = N_MELS) -> np.ndarray:
    """Triangular filters on the HTK mel scale, ``(n_mels, n_fft // 2 + 1)``, from 20 Hz to Nyquist."""

    def hz_to_mel(hz):
        return 2595.0 * np.log10(1.0 + np.asarray(hz) / 700.0)

    def mel_to_hz(mel):
        return 700.0 * (10 ** (np.asarray(mel) / 2595.0) - 1.0)

    freqs = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(20.0), hz_to_mel(sample_rate / 2), n_mels + 2))
    lower, center, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    up = (freqs[None] - lower) / (center - lower)
    down = (upper - freqs[None]) / (upper - center)
    fb = np.maximum(0.0, np.minimum(up, down))
    fb.setflags(write=False)
    return fb


def frame_params(sample_rate: int) -> tuple[int, int, int]:
    """``(n_fft, window, hop)``: 25 ms Hann windows every 10 ms."""
    win = round(0.025 * sample_rate)
    hop = round(0.010 * sample_rate)
    n_fft = 1 << (win - 1).bit_length()
    return n_fft, win, hop


def power_spectrogram(wave: np.ndarray, sample_rate: int) -> np.ndarray:
    """``(frames, n_fft // 2 + 1)`` power spectrum, frames centred every 10 ms (reflect padding)."""
    n_fft, win, hop = frame_params(sample_rate)
    wave = np.asarray(wave, dtype=np.float64)
    padded = np.pad(wave, (win // 2, win // 2), mode="reflect" if len(wave) > win // 2 else "constant")
    n_frames = 1 + max(0, (len(padded) - win) // hop)
    idx = np.arange(win)[None] + hop * np.arange(n_frames)[:, None]
    frames = padded[idx] * np.hanning(win + 2)[1:-1]
    return np.abs(np.fft.rfft(frames, n=n_fft)) ** 2


def log_mel(wave: np.ndarray, sample_rate: int = 16000, n_mels: int = N_MELS) -> np.ndarray:
    """Log-mel features ``(frames, n_mels)`` float32: natural log of mel power plus 1e-6."""
    check_sample_rate(sample_rate)
    if len(wave) == 0:
        raise InputError("wave is empty")
    n_fft, _, _ = frame_params(sample_rate)
    spec = power_spectrogram(wave, sample_rate)
    return np.log(spec @ mel_filterbank(sample_rate, n_fft, n_mels).T + 1e-6).astype(np.float32)


def log_mel_batch(
    waves: list[np.ndarray], sample_rate: int = 16000, n_mels: int = N_MELS
) -> list[np.ndarray]:
    """:func:`log_mel` of many waveforms in one batched FFT (equal to calling it on each)."""
    check_sample_rate(sample_rate)
    if any(len(w) == 0 for w in waves):
        raise InputError("a wave in the batch is empty")
    n_fft, win, hop = frame_params(sample_rate)
    window = np.hanning(win + 2)[1:-1]
    frames, counts = [], []
    for w in waves:
        w = np.asarray(w, dtype=np.float64)
        padded = np.pad(w, (win // 2, win // 2), mode="reflect" if len(w) > win // 2 else "constant")
        n = 1 + max(0, (len(padded) - win) // hop)
        frames.append(padded[np.arange(win)[None] + hop * np.arange(n)[:, None]])
        counts.append(n)
    spec = np.abs(np.fft.rfft(np.concatenate(frames) * window, n=n_fft)) ** 2
    feats = np.log(spec @ mel_filterbank(sample_rate, n_fft, n_mels).T + 1e-6).astype(np.float32)
    return np.split(feats, np.cumsum(counts)[:-1])
