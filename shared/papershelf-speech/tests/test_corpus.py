"""The corpus builder: deterministic, speaker-voice splits, clear errors for missing engines and bad input."""

import hashlib
import json

import numpy as np
import pytest
from papershelf_speech import engines
from papershelf_speech.corpus import (
    SPLITS,
    Corpus,
    CorpusConfig,
    build_corpus,
    corpus_hash,
    split_voices,
    utterance_plan,
)

from papershelf.errors import InputError, PapershelfError

# sha256 of the tiny corpus's utterance plans (texts, voices, rates, pitches, augmentations): these
# depend only on the seed and this package, not on the engines' versions.
PLANS_SHA256 = "6e159112403153bce4d28692bc62a53485aeea4eb5d4d6f4ad1d2fe4edbb4c8a"


def _plans_digest(folder):
    digest = hashlib.sha256()
    for split in SPLITS:
        digest.update((folder / f"{split}.jsonl").read_bytes())
    return digest.hexdigest()


def test_a_small_build_is_deterministic(tiny_corpus, tiny_sizes, tmp_path):
    TINY = tiny_sizes
    again = build_corpus(tmp_path / "again", CorpusConfig(**TINY))
    assert corpus_hash(again) == corpus_hash(tiny_corpus)  # audio and features bit-identical
    assert _plans_digest(tiny_corpus) == PLANS_SHA256
    manifest = json.loads((tiny_corpus / "manifest.json").read_text())
    assert manifest["hashes"]["train.feats.npy"] == manifest["hashes"]["train.feats.npy"]
    other = build_corpus(tmp_path / "other", CorpusConfig(**{**TINY, "seed": 4, "n_dev": 0, "n_test": 0}))
    assert corpus_hash(other) != corpus_hash(tiny_corpus)


def test_splits_hold_disjoint_voices_and_the_features_match_the_audio(tiny_corpus, tiny_sizes):
    TINY = tiny_sizes
    voices = {s: {v.id for v in split_voices(s)} for s in SPLITS}
    assert not (voices["train"] & voices["dev"]) and not (voices["train"] & voices["test"])
    assert not (voices["dev"] & voices["test"])
    corpus = Corpus(tiny_corpus)
    for s in SPLITS:
        part = corpus.split(s)
        assert len(part) == TINY[f"n_{s}"]
        assert {m["voice"] for m in part.meta} <= voices[s]
    test = corpus.split("test")
    from papershelf_speech.audio import log_mel

    wave = test.audio(0)
    assert abs(len(test.features(0)) - len(wave) / 160) <= 1
    np.testing.assert_allclose(test.features(0), log_mel(wave), atol=0.1)  # int16 audio, float16 features
    assert corpus.split("train").meta[0]["text"] == utterance_plan(CorpusConfig(**TINY), "train", 0)["text"]
    with pytest.raises(InputError, match="without audio"):
        corpus.split("train").audio(0)


def test_missing_engines_name_the_debian_packages(monkeypatch):
    monkeypatch.setattr(engines.shutil, "which", lambda name: None)
    with pytest.raises(PapershelfError, match="apt-get install -y espeak-ng flite"):
        engines.check_engines()
    with pytest.raises(PapershelfError, match="espeak-ng"):
        CorpusConfig().validate()


def test_unknown_voices_and_sample_rates_list_the_supported_ones(tmp_path):
    with pytest.raises(InputError, match="en-gb-scotland"):
        engines.parse_voice("espeak-ng:fr+m1")
    with pytest.raises(InputError, match="8000, 16000, 22050"):
        CorpusConfig(sample_rate=44100).validate()
    with pytest.raises(InputError, match="espeak-ng, flite"):
        CorpusConfig(engines=("festival",)).validate()
    with pytest.raises(InputError, match="n_train"):
        CorpusConfig(n_train=-1).validate()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(InputError, match="not empty"):
        build_corpus(tmp_path / "full", CorpusConfig(n_train=1, n_dev=0, n_test=0))
    with pytest.raises(InputError, match="manifest"):
        Corpus(tmp_path)


def test_engines_synthesise_at_their_rates():
    wave, rate = engines.synthesize(engines.parse_voice("espeak-ng:en-us+m1"), "hello", rate=1.2)
    assert rate == 22050 and 0.1 < len(wave) / rate < 2.0 and np.abs(wave).max() > 0.05
    wave, rate = engines.synthesize(engines.parse_voice("flite:kal"), "hello")
    assert rate == 8000 and len(wave) > 0
    with pytest.raises(InputError, match="rate"):
        engines.synthesize(engines.parse_voice("flite:kal"), "hello", rate=5.0)
