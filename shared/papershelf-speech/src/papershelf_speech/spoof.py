"""A proxy anti-spoofing task with known ground truth: bona fide = the TTS output; spoofed = the same
utterance passed through an analysis-resynthesis vocoder.

Vocoders: ``griffin_lim`` (phase reconstructed from the 80-band mel power by Griffin-Lim iterations),
``lpc`` (order-16 linear prediction with a pulse-train / noise excitation from a per-frame pitch
estimate) — the *in-domain* attacks — and ``noise_vocoder`` (the mel envelope imposed on white noise)
plus ``world`` (WORLD analysis-synthesis, only when the optional ``pyworld`` imports) — held out as
*out-of-domain* attacks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from papershelf.errors import InputError
from papershelf_speech.audio import frame_params, log_mel_batch, mel_filterbank

IN_DOMAIN = ("griffin_lim", "lpc")
OUT_OF_DOMAIN = ("noise_vocoder", "world")


def world_available() -> bool:
    try:
        import pyworld  # noqa: F401
    except Exception:  # ImportError, or a broken build (e.g. missing pkg_resources)
        return False
    return True


def available_methods() -> tuple[str, ...]:
    return IN_DOMAIN + tuple(m for m in OUT_OF_DOMAIN if m != "world" or world_available())


def _stft(wave: np.ndarray, sample_rate: int) -> np.ndarray:
    from scipy.signal import stft

    n_fft, _, hop = frame_params(sample_rate)
    return stft(wave, nperseg=n_fft, noverlap=n_fft - hop, window="hann", boundary="even")[2]


def _istft(spec: np.ndarray, sample_rate: int, length: int) -> np.ndarray:
    from scipy.signal import istft

    n_fft, _, hop = frame_params(sample_rate)
    wave = istft(spec, nperseg=n_fft, noverlap=n_fft - hop, window="hann")[1]
    return np.pad(wave, (0, max(0, length - len(wave))))[:length]


def _mel_magnitude(wave: np.ndarray, sample_rate: int) -> tuple[np.ndarray, np.ndarray]:
    """The STFT, and the linear magnitude recovered from its 80-band mel power (pseudo-inverse)."""
    spec = _stft(wave, sample_rate)
    n_fft = 2 * (spec.shape[0] - 1)
    fb = mel_filterbank(sample_rate, n_fft)
    mel = fb @ (np.abs(spec) ** 2)
    power = np.maximum(np.linalg.pinv(fb) @ mel, 0.0)
    return spec, np.sqrt(power)


def griffin_lim(wave: np.ndarray, sample_rate: int, *, n_iter: int = 32, seed: int = 0) -> np.ndarray:
    """Resynthesise from the mel spectrogram alone: Griffin-Lim phase retrieval from random phase."""
    _, mag = _mel_magnitude(wave, sample_rate)
    rng = np.random.default_rng(seed)
    phase = np.exp(2j * np.pi * rng.random(mag.shape))
    out = _istft(mag * phase, sample_rate, len(wave))
    for _ in range(n_iter):
        rebuilt = _stft(out, sample_rate)[:, : mag.shape[1]]
        rebuilt = np.pad(rebuilt, ((0, 0), (0, mag.shape[1] - rebuilt.shape[1])))
        out = _istft(mag * np.exp(1j * np.angle(rebuilt)), sample_rate, len(wave))
    return _match_level(out, wave)


def noise_vocoder(wave: np.ndarray, sample_rate: int, *, seed: int = 0) -> np.ndarray:
    """The mel envelope imposed on white noise (no pitch, no phase): a channel vocoder."""
    _, mag = _mel_magnitude(wave, sample_rate)
    rng = np.random.default_rng(seed)
    noise = _stft(rng.standard_normal(len(wave)), sample_rate)[:, : mag.shape[1]]
    noise = noise / (np.abs(noise) + 1e-9)
    return _match_level(_istft(mag * noise, sample_rate, len(wave)), wave)


def levinson(r: np.ndarray, order: int) -> tuple[np.ndarray, float]:
    """LPC coefficients ``a`` (a[0] = 1) and the prediction error from autocorrelation ``r``."""
    a = np.zeros(order + 1)
    a[0] = 1.0
    err = float(r[0])
    if err <= 0:
        return a, 0.0
    for i in range(1, order + 1):
        k = -(r[i] + a[1:i] @ r[i - 1 : 0 : -1]) / err
        a[1 : i + 1] = a[1 : i + 1] + k * a[i - 1 :: -1][:i]
        err *= 1.0 - k * k
        if err <= 1e-12:
            break
    return a, err


def lpc_resynthesis(wave: np.ndarray, sample_rate: int, *, order: int = 16, seed: int = 0) -> np.ndarray:
    """Order-``order`` LPC analysis per 25 ms frame; synthesis excites ``1/A(z)`` with a pulse train at the
    frame's autocorrelation pitch (60-400 Hz) when voiced, else white noise, at the analysis gain."""
    from scipy.signal import lfilter

    _, win, hop = frame_params(sample_rate)
    rng = np.random.default_rng(seed)
    x = np.asarray(wave, dtype=np.float64)
    padded = np.pad(x, (0, win))
    window = np.hanning(win + 2)[1:-1]
    lo, hi = int(sample_rate / 400), int(sample_rate / 60)
    out = np.zeros(len(x) + win)
    state = np.zeros(order)
    next_pulse = 0
    for start in range(0, len(x), hop):
        frame = padded[start : start + win] * window
        r = np.correlate(frame, frame, "full")[win - 1 : win + order]
        a, err = levinson(r + np.r_[r[0] * 1e-6, np.zeros(order)], order)
        gain = np.sqrt(max(err, 0.0) / win)
        ac = np.correlate(frame, frame, "full")[win - 1 :]
        lag = lo + int(np.argmax(ac[lo:hi])) if ac[0] > 0 and hi < len(ac) else 0
        voiced = lag > 0 and ac[lag] > 0.3 * ac[0]
        exc = np.zeros(hop)
        if voiced:
            while next_pulse < start + hop:
                if next_pulse >= start:
                    exc[next_pulse - start] = np.sqrt(lag)
                next_pulse += lag
        else:
            exc = rng.standard_normal(hop)
            next_pulse = start + hop
        seg, state = lfilter([gain], a, exc, zi=state * 1.0)
        out[start : start + hop] = seg
    return _match_level(out[: len(x)], wave)


def world_resynthesis(wave: np.ndarray, sample_rate: int) -> np.ndarray:
    """WORLD analysis-synthesis (f0, spectral envelope, aperiodicity) via the optional ``pyworld``."""
    if not world_available():
        from papershelf.errors import MissingDependencyError

        raise MissingDependencyError("pyworld", package="papershelf-speech", extra="world")
    import pyworld

    x = np.asarray(wave, dtype=np.float64)
    f0, sp, ap = pyworld.wav2world(x, sample_rate)
    return _match_level(pyworld.synthesize(f0, sp, ap, sample_rate)[: len(x)], wave)


def _match_level(out: np.ndarray, ref: np.ndarray) -> np.ndarray:
    rms_out = float(np.sqrt(np.mean(np.square(out)))) or 1.0
    rms_ref = float(np.sqrt(np.mean(np.square(ref, dtype=np.float64))))
    return np.clip(out * rms_ref / rms_out, -1.0, 1.0).astype(np.float32)


def spoof(wave: np.ndarray, sample_rate: int, method: str, *, seed: int = 0) -> np.ndarray:
    """One spoofed version of ``wave`` made by ``method`` (see :func:`available_methods`)."""
    if method not in IN_DOMAIN + OUT_OF_DOMAIN:
        raise InputError(f"unknown spoofing method {method!r}; known: {', '.join(IN_DOMAIN + OUT_OF_DOMAIN)}")
    if len(wave) < 2 * frame_params(sample_rate)[1]:
        raise InputError("wave is too short to resynthesise (needs at least two 25 ms frames)")
    if method == "griffin_lim":
        return griffin_lim(wave, sample_rate, seed=seed)
    if method == "lpc":
        return lpc_resynthesis(wave, sample_rate, seed=seed)
    if method == "noise_vocoder":
        return noise_vocoder(wave, sample_rate, seed=seed)
    return world_resynthesis(wave, sample_rate)


def build_spoof_set(
    corpus, split: str, n: int, methods: tuple[str, ...] | None = None, seed: int = 0
) -> dict:
    """Bona fide and spoofed versions of the first ``n`` utterances of a split that kept its audio.

    Returns ``{"waves", "features", "label" (0 bona fide, 1 spoofed), "method", "utterance",
    "out_of_domain"}``: every utterance once bona fide and once per method.
    """
    methods = tuple(methods or available_methods())
    missing = [m for m in methods if m not in available_methods()]
    if missing:
        raise InputError(
            f"spoofing method(s) {missing} unavailable; available: {', '.join(available_methods())}"
        )
    part = corpus.split(split)
    n = min(n, len(part))
    waves, labels, names, utts = [], [], [], []
    for i in range(n):
        wave = part.audio(i)
        waves.append(wave)
        labels.append(0)
        names.append("bonafide")
        utts.append(i)
        for k, method in enumerate(methods):
            waves.append(spoof(wave, corpus.sample_rate, method, seed=seed + 1000 * i + k))
            labels.append(1)
            names.append(method)
            utts.append(i)
    return {
        "waves": waves,
        "features": log_mel_batch(waves, corpus.sample_rate) if waves else [],
        "label": np.asarray(labels, dtype=np.int64),
        "method": np.asarray(names),
        "utterance": np.asarray(utts, dtype=np.int64),
        "out_of_domain": np.asarray([m in OUT_OF_DOMAIN for m in names]),
    }


def save_spoof_set(data: dict, path: str | Path) -> None:
    """Write a spoof set as one ``.npz`` (waves int16 concatenated with offsets), atomically."""
    from papershelf.repro import atomic_path

    lengths = [len(w) for w in data["waves"]]
    with atomic_path(path, mode="wb") as handle:
        np.savez(
            handle,
            audio=np.round(np.concatenate(data["waves"]) * 32767).astype(np.int16),
            audio_offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            label=data["label"],
            method=data["method"],
            utterance=data["utterance"],
            out_of_domain=data["out_of_domain"],
        )
