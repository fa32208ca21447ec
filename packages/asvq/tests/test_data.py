"""Offline data: shapes and ranges, disjoint patch regions, mixtures, and the log-mel front end."""

import numpy as np
import pytest
from asvq.data import gaussian_mixture, load_digits_split, load_patches, log_mel, mel_filterbank


def test_digits_and_patches():
    tr, te = load_digits_split()
    assert tr.shape == (1500, 64) and te.shape == (297, 64) and 0 <= tr.min() and tr.max() <= 1
    tr, te = load_patches(16, n_train=50, n_test=20)
    assert tr.shape == (50, 768) and te.shape == (20, 768) and tr.dtype == np.float32
    assert 0 <= tr.min() and tr.max() <= 1


def test_mixture_has_the_stated_clusters():
    x, labels, centres = gaussian_mixture(5000, 8, 3, spread=10.0, noise=0.1, seed=0)
    assert x.shape == (5000, 3) and set(labels) == set(range(8))
    assert np.abs(x - centres[labels]).max() < 1.0


def test_log_mel_peaks_at_a_pure_tone():
    sr = 16000
    t = np.arange(sr) / sr
    mel = log_mel(np.sin(2 * np.pi * 1000 * t), sr, n_mels=40)
    fb = mel_filterbank(40, 512, sr)
    freqs = np.linspace(0, sr / 2, 257)
    assert mel.shape[1] == 40
    assert abs(freqs[fb[mel.mean(0).argmax()].argmax()] - 1000) < 150
    with pytest.raises(ValueError):
        log_mel(np.zeros(10), sr)
