"""Scoring: exact edit-distance WER/CER, greedy-CTC evaluation by voice group, CTC forced alignment, and
per-layer linear probes for character identity."""

from __future__ import annotations

import numpy as np
import torch

from papershelf.errors import InputError
from papershelf_speech.model import pad_features
from papershelf_speech.text import ALPHABET, BLANK, encode


def edit_distance(ref, hyp) -> int:
    """Levenshtein distance between two sequences (substitutions, insertions, deletions cost 1)."""
    ref, hyp = list(ref), list(hyp)
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def wer(references: list[str] | str, hypotheses: list[str] | str) -> float:
    """Corpus word error rate: total word edits / total reference words."""
    return error_rates(references, hypotheses)["wer"]


def cer(references: list[str] | str, hypotheses: list[str] | str) -> float:
    """Corpus character error rate: total character edits / total reference characters."""
    return error_rates(references, hypotheses)["cer"]


def error_rates(references, hypotheses) -> dict:
    """``{"wer", "cer", "words", "chars"}`` over paired transcripts (whitespace-normalised)."""
    if isinstance(references, str):
        references, hypotheses = [references], [hypotheses]
    references, hypotheses = list(references), list(hypotheses)
    if len(references) != len(hypotheses):
        raise InputError(f"{len(references)} references but {len(hypotheses)} hypotheses")
    word_edits = char_edits = words = chars = 0
    for ref, hyp in zip(references, hypotheses, strict=True):
        rw, hw = ref.split(), hyp.split()
        word_edits += edit_distance(rw, hw)
        char_edits += edit_distance(" ".join(rw), " ".join(hw))
        words += len(rw)
        chars += len(" ".join(rw))
    if words == 0:
        raise InputError("the references hold no words")
    return {"wer": word_edits / words, "cer": char_edits / max(chars, 1), "words": words, "chars": chars}


@torch.no_grad()
def transcribe_split(model, split, n: int | None = None, batch_size: int = 16) -> list[str]:
    n = len(split) if n is None else min(n, len(split))
    order = np.argsort(split.lengths()[:n], kind="stable")
    hyps: list[str] = [""] * n
    for start in range(0, n, batch_size):
        idx = order[start : start + batch_size]
        for i, h in zip(idx, model.transcribe([split.features(int(i)) for i in idx]), strict=True):
            hyps[int(i)] = h
    return hyps


def evaluate_asr(model, split, n: int | None = None) -> dict:
    """Greedy-CTC WER/CER on a split, overall and per engine, with a few examples."""
    hyps = transcribe_split(model, split, n)
    refs = split.texts[: len(hyps)]
    engines = [m["voice"].split(":")[0] for m in split.meta[: len(hyps)]]
    result = {"split": split.name, "utterances": len(hyps), **error_rates(refs, hyps), "by_engine": {}}
    for engine in sorted(set(engines)):
        pick = [i for i, e in enumerate(engines) if e == engine]
        scores = error_rates([refs[i] for i in pick], [hyps[i] for i in pick])
        result["by_engine"][engine] = {"utterances": len(pick), "wer": scores["wer"], "cer": scores["cer"]}
    result["examples"] = [
        {"ref": refs[i], "hyp": hyps[i], "voice": split.meta[i]["voice"]} for i in range(min(3, len(hyps)))
    ]
    return result


def ctc_forced_align(log_probs: np.ndarray, target: list[int]) -> np.ndarray:
    """Viterbi CTC alignment: for each frame, the index into ``target`` it is assigned to, or -1 (blank).

    ``log_probs`` is ``(T, V)``; the path runs over the blank-extended target ``_ c1 _ c2 ... _``.
    """
    t_len, s_len = len(log_probs), 2 * len(target) + 1
    ext = [BLANK if s % 2 == 0 else target[s // 2] for s in range(s_len)]
    neg = -np.inf
    score = np.full((t_len, s_len), neg)
    back = np.zeros((t_len, s_len), dtype=np.int8)
    score[0, 0] = log_probs[0, ext[0]]
    if s_len > 1:
        score[0, 1] = log_probs[0, ext[1]]
    for t in range(1, t_len):
        for s in range(s_len):
            cands = [score[t - 1, s]]
            if s >= 1:
                cands.append(score[t - 1, s - 1])
            if s >= 2 and ext[s] != BLANK and ext[s] != ext[s - 2]:
                cands.append(score[t - 1, s - 2])
            k = int(np.argmax(cands))
            score[t, s] = cands[k] + log_probs[t, ext[s]]
            back[t, s] = k
    ends = [s_len - 1] + ([s_len - 2] if s_len > 1 else [])
    s = max(ends, key=lambda e: score[-1, e])
    if not np.isfinite(score[-1, s]):
        raise InputError("the target is longer than the frames allow; no CTC alignment exists")
    path = np.zeros(t_len, dtype=np.int64)
    for t in range(t_len - 1, -1, -1):
        path[t] = s
        s -= int(back[t, s])
    return np.where(path % 2 == 1, path // 2, -1)


def frame_labels(log_probs: np.ndarray, text: str) -> np.ndarray:
    """Character id per frame from the forced alignment: a blank frame takes the character before it;
    frames before the first character or after the last are -1 (silence, excluded from probes)."""
    target = encode(text)
    assigned = ctc_forced_align(log_probs, target)
    labels = np.full(len(assigned), -1, dtype=np.int64)
    current = -1
    for t, a in enumerate(assigned):
        if a >= 0:
            current = a
        labels[t] = target[current] if current >= 0 else -1
    last = np.flatnonzero(assigned >= 0)
    if len(last):
        labels[last[-1] + 1 :] = -1
    return labels


@torch.no_grad()
def layer_features(model, split, indices) -> tuple[list[np.ndarray], np.ndarray]:
    """Per layer, the stacked hidden states of the labelled frames of ``indices``; and the labels."""
    per_layer: list[list[np.ndarray]] | None = None
    labels = []
    for i in indices:
        feats, lengths = pad_features([split.features(int(i))])
        out = model(feats, lengths, output_hidden_states=True)
        log_probs = torch.log_softmax(out.logits[0], -1).numpy()
        try:
            lab = frame_labels(log_probs, split.texts[int(i)])
        except InputError:  # too few frames for the transcript: no alignment, the utterance is skipped
            continue
        keep = lab >= 0
        if per_layer is None:
            per_layer = [[] for _ in out.hidden_states]
        for layer, h in enumerate(out.hidden_states):
            per_layer[layer].append(h[0].numpy()[keep])
        labels.append(lab[keep])
    if per_layer is None:
        raise InputError("no utterance could be aligned for the probes")
    return [np.concatenate(x) for x in per_layer], np.concatenate(labels)


def ridge_probe(train_x, train_y, test_x, test_y, *, alpha: float = 1.0) -> float:
    """Accuracy of a linear classifier fit in closed form (ridge regression onto one-hot labels)."""
    classes = np.unique(train_y)
    mu, sd = train_x.mean(0), train_x.std(0) + 1e-6
    x = np.hstack([(train_x - mu) / sd, np.ones((len(train_x), 1))]).astype(np.float64)
    y = (train_y[:, None] == classes[None]).astype(np.float64)
    w = np.linalg.solve(x.T @ x + alpha * np.eye(x.shape[1]), x.T @ y)
    xt = np.hstack([(test_x - mu) / sd, np.ones((len(test_x), 1))])
    return float(np.mean(classes[np.argmax(xt @ w, 1)] == test_y))


def probe_layers(model, train_split, test_split, n_train: int = 150, n_test: int = 100) -> dict:
    """Per-layer linear-probe accuracy for the character a frame is aligned to (train-split utterances
    fit the probe, held-out-voice test utterances score it), with the majority-class baseline."""
    if n_train < 1 or n_test < 1:
        raise InputError("probe utterance counts must be at least 1")
    tr_x, tr_y = layer_features(model, train_split, range(min(n_train, len(train_split))))
    te_x, te_y = layer_features(model, test_split, range(min(n_test, len(test_split))))
    values, counts = np.unique(tr_y, return_counts=True)
    majority = float(np.mean(te_y == values[np.argmax(counts)]))
    accs = [ridge_probe(a, tr_y, b, te_y) for a, b in zip(tr_x, te_x, strict=True)]
    return {
        "accuracy": accs,
        "majority_baseline": majority,
        "train_frames": len(tr_y),
        "test_frames": len(te_y),
        "classes": "".join(ALPHABET[c] for c in values),
    }
