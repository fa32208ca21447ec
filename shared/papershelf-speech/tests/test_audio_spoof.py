"""Features, augmentation and the spoofing vocoders."""

import numpy as np
import pytest
from papershelf_speech import audio, spoof

from papershelf.errors import InputError


def _tone(seconds=0.4, rate=16000, seed=0):
    t = np.arange(int(seconds * rate)) / rate
    rng = np.random.default_rng(seed)
    return (
        0.3 * np.sin(2 * np.pi * 140 * t) * (1 + np.sin(2 * np.pi * 3 * t))
        + 0.01 * rng.standard_normal(len(t))
    ).astype(np.float32)


def test_batched_features_equal_one_by_one_and_have_10ms_frames():
    waves = [_tone(0.3), _tone(0.55, seed=1), _tone(0.05, seed=2)]
    batched = audio.log_mel_batch(waves)
    for w, f in zip(waves, batched, strict=True):
        np.testing.assert_array_equal(f, audio.log_mel(w))
        assert f.shape == (1 + len(w) // 160, 80)
    fb = audio.mel_filterbank(16000, 512)
    assert fb.shape == (80, 257) and np.all(fb.sum(1) > 0)
    with pytest.raises(InputError, match="16000"):
        audio.log_mel(waves[0], sample_rate=44100)
    with pytest.raises(InputError, match="empty"):
        audio.log_mel(np.zeros(0))


def test_noise_is_added_at_the_requested_snr_and_speed_changes_duration():
    wave = _tone(1.0)
    for snr in (20.0, 5.0):
        noisy = audio.add_noise(wave, snr, np.random.default_rng(0), color="pink")
        measured = 10 * np.log10(
            np.mean(wave.astype(float) ** 2) / np.mean((noisy - wave).astype(float) ** 2)
        )
        assert measured == pytest.approx(snr, abs=1e-3)
    assert len(audio.change_speed(wave, 1.1)) == pytest.approx(len(wave) / 1.1, abs=2)
    wet = audio.reverberate(wave, 16000, 0.3, np.random.default_rng(0))
    assert len(wet) == len(wave) and np.max(np.abs(wet)) == pytest.approx(np.max(np.abs(wave)), rel=1e-5)
    assert len(audio.resample(wave, 16000, 8000)) == len(wave) // 2


def test_levinson_solves_the_yule_walker_equations():
    from scipy.linalg import solve_toeplitz

    rng = np.random.default_rng(0)
    x = rng.standard_normal(400)
    r = np.correlate(x, x, "full")[399 : 399 + 9]
    a, err = spoof.levinson(r, 8)
    np.testing.assert_allclose(a[1:], solve_toeplitz(r[:8], -r[1:9]), rtol=1e-8)
    assert err == pytest.approx(r[0] + a[1:] @ r[1:9])


@pytest.mark.parametrize("method", ["griffin_lim", "lpc", "noise_vocoder"])
def test_vocoders_return_a_same_length_level_matched_different_wave(method):
    wave = _tone(0.4)
    out = spoof.spoof(wave, 16000, method)
    assert out.shape == wave.shape and np.all(np.isfinite(out))
    assert np.sqrt(np.mean(out**2)) == pytest.approx(np.sqrt(np.mean(wave**2)), rel=0.02)
    assert not np.allclose(out, wave, atol=1e-3)
    np.testing.assert_array_equal(out, spoof.spoof(wave, 16000, method))  # seeded


def test_spoof_set_labels_and_out_of_domain_flags(tiny_corpus):
    from papershelf_speech.corpus import Corpus

    data = spoof.build_spoof_set(Corpus(tiny_corpus), "dev", 1, methods=("lpc", "noise_vocoder"))
    assert list(data["label"]) == [0, 1, 1] and list(data["method"]) == ["bonafide", "lpc", "noise_vocoder"]
    assert list(data["out_of_domain"]) == [False, False, True] and len(data["features"]) == 3
    with pytest.raises(InputError, match="known"):
        spoof.spoof(_tone(), 16000, "wavenet")
    if not spoof.world_available():
        with pytest.raises(InputError, match="unavailable"):
            spoof.build_spoof_set(Corpus(tiny_corpus), "dev", 1, methods=("world",))
