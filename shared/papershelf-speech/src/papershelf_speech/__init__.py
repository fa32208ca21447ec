"""papershelf-speech: the speech testbed — an offline TTS speech corpus (espeak-ng, flite), a spoofing
proxy with known ground truth, log-mel features and a small CTC speech encoder shipped as safetensors.

>>> from papershelf_speech import wer
>>> wer(["the red dog runs"], ["the red dog run"])
0.25
"""

__version__ = "0.0.1"

# Public names resolve lazily (PEP 562), so `papershelf-speech --version` does not import torch.
_EXPORTS = {
    "log_mel": "audio",
    "log_mel_batch": "audio",
    "Corpus": "corpus",
    "CorpusConfig": "corpus",
    "build_corpus": "corpus",
    "corpus_hash": "corpus",
    "synthesize": "engines",
    "cer": "evaluate",
    "wer": "evaluate",
    "probe_layers": "evaluate",
    "SpeechEncoder": "model",
    "checkpoint_names": "model",
    "load": "model",
    "build_spoof_set": "spoof",
    "TrainConfig": "train",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        module = importlib.import_module(f"papershelf_speech.{_EXPORTS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'papershelf_speech' has no attribute {name!r}")
