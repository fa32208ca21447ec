"""Offline data: heterogeneous client partitions of scikit-learn's digits, and a Gaussian generator.

Skews (the ``--skew`` strings of the CLI):

* ``dirichlet:A`` — label skew: every class is split across clients with Dirichlet(A) proportions;
* ``task-cue:T`` — task skew with a task cue (the paper's setting: in its 8-task FLAN subset each
  task's inputs carry its instruction, so one federated model can learn every task jointly): the split
  and labels of ``task:T`` (client i solves task ``t = i mod T``, digit y labelled ``(y + t) mod 10``),
  and every input (train, Fisher, test; the public split with t = 0) gets T extra features, the one-hot
  code of its task (value 1.0, pixels are in [0, 1]), so ``n_features = 64 + T``;
* ``task:T`` — the stress case: the same split and labels *without* the cue; the tasks relabel the same
  images differently, so they conflict and no shared model can serve them all;
* ``iid`` — a uniform split, one task.

For both task skews ``1 <= T <= 10`` (there are 10 distinct label maps ``(y + t) mod 10``).

A public split (``public_frac`` of the images, task 0) pretrains the frozen base model that the LoRA
adapters fine-tune. With ``augment`` each image also appears shifted by one pixel in each of the four
directions; the copies always stay in the same client and split as their original (no leakage).
Every client's data is split into train / Fisher (``fisher_n`` held-out samples, the "30 extra client
samples" of the paper) / test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from papershelf.errors import InputError


@dataclass
class ClientData:
    """One client's tensors (float32 inputs in [0, 1], int64 labels) and its task id."""

    cid: int
    task: int
    X_train: torch.Tensor
    y_train: torch.Tensor
    X_fisher: torch.Tensor
    y_fisher: torch.Tensor
    X_test: torch.Tensor
    y_test: torch.Tensor

    @property
    def n_train(self) -> int:
        return int(self.X_train.shape[0])


@dataclass
class Federation:
    public_X: torch.Tensor
    public_y: torch.Tensor
    clients: list[ClientData]
    n_features: int
    n_classes: int
    skew: str


N_DIGITS = 1797  # images in scikit-learn's digits
MIN_SAMPLES = 12  # per client, before the train / Fisher / test split


def max_clients(public_frac: float = 0.15, min_samples: int = MIN_SAMPLES) -> int:
    """The most clients :func:`digits_federation` can give ``min_samples`` images each."""
    return (N_DIGITS - round(public_frac * N_DIGITS)) // min_samples


SKEW_HELP = "'dirichlet:A' (A > 0), 'task-cue:T' or 'task:T' (integer 1 <= T <= 10) or 'iid'"


def parse_skew_kinds(skew, integer_kinds: tuple[str, ...], high: int, help_text: str) -> tuple[str, float]:
    """``"iid"``, ``"dirichlet:A"`` (A > 0) or ``"<kind>:T"`` for a kind in ``integer_kinds`` (an integer
    1 <= T <= high) -> (kind, value); anything else is an error quoting ``help_text``."""
    s = skew.strip().lower() if isinstance(skew, str) else ""
    if s == "iid":
        return "iid", 0.0
    kind, _, val = s.partition(":")
    try:
        v = float(val)
    except ValueError:
        v = float("nan")
    if kind == "dirichlet" and np.isfinite(v) and v > 0:
        return kind, v
    if kind in integer_kinds and np.isfinite(v) and 1 <= v <= high and float(v).is_integer():
        return kind, int(v)
    raise InputError(f"{help_text}; got {skew!r}")


def parse_skew(skew: str) -> tuple[str, float]:
    """``"dirichlet:0.3"`` -> ("dirichlet", 0.3); ``"task-cue:4"`` -> ("task-cue", 4); ``"task:4"`` ->
    ("task", 4); ``"iid"`` -> ("iid", 0)."""
    return parse_skew_kinds(skew, ("task", "task-cue"), 10, f"--skew must be {SKEW_HELP}")


def _shifted(img: np.ndarray) -> list[np.ndarray]:
    out = []
    for axis, step in ((0, 1), (0, -1), (1, 1), (1, -1)):
        s = np.roll(img, step, axis=axis)
        if axis == 0:
            s[0 if step == 1 else -1, :] = 0
        else:
            s[:, 0 if step == 1 else -1] = 0
        out.append(s)
    return out


def _expand(X: np.ndarray, y: np.ndarray, augment: bool) -> tuple[np.ndarray, np.ndarray]:
    if not augment or len(X) == 0:
        return X, y
    imgs = X.reshape(-1, 8, 8)
    xs, ys = [X], [y]
    for k in range(4):
        xs.append(np.stack([_shifted(im)[k] for im in imgs]).reshape(len(X), -1))
        ys.append(y)
    return np.concatenate(xs), np.concatenate(ys)


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits (1797 × 64 in [0, 1], labels 0–9).

    The CSV that scikit-learn ships is read directly when it can be located without importing
    scikit-learn (whose import dominates start-up time on a busy machine); otherwise ``load_digits``.
    """
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("sklearn")
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            data = np.loadtxt(path, delimiter=",")
            return (data[:, :-1] / 16.0).astype(np.float32), data[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)


def digits_federation(
    n_clients: int = 20,
    skew: str = "dirichlet:0.3",
    *,
    seed: int = 0,
    public_frac: float = 0.15,
    fisher_n: int = 30,
    test_frac: float = 0.3,
    augment: bool = True,
    min_samples: int = MIN_SAMPLES,
) -> Federation:
    """Partition digits into a public pretraining split and ``n_clients`` heterogeneous clients."""
    if not isinstance(n_clients, int) or n_clients < 1:
        raise InputError(f"n_clients must be a positive integer, got {n_clients!r}")
    kind, val = parse_skew(skew)
    X, y = load_digits_arrays()
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(y))
    n_pub = round(public_frac * len(y))
    pub, rest = perm[:n_pub], perm[n_pub:]
    if len(rest) < n_clients * min_samples:
        raise InputError(
            f"n_clients (--clients) = {n_clients} is too many: digits leaves {len(rest)} samples "
            f"for clients, at most {len(rest) // min_samples} clients of {min_samples}"
        )
    parts: list[np.ndarray]
    if kind == "dirichlet":
        for _ in range(100):
            parts_l: list[list[int]] = [[] for _ in range(n_clients)]
            for c in range(10):
                idx = rest[y[rest] == c]
                idx = idx[rng.permutation(len(idx))]
                props = rng.dirichlet(np.full(n_clients, val))
                cuts = (np.cumsum(props) * len(idx)).astype(int)[:-1]
                for i, chunk in enumerate(np.split(idx, cuts)):
                    parts_l[i].extend(chunk.tolist())
            if min(len(p) for p in parts_l) >= min_samples:
                break
        else:
            raise InputError(f"--skew {skew}: could not give every one of {n_clients} clients data; raise A")
        parts = [np.array(p, dtype=np.int64) for p in parts_l]
    else:
        parts = np.array_split(rest[rng.permutation(len(rest))], n_clients)
    n_tasks = int(val) if kind in ("task", "task-cue") else 1
    n_cue = n_tasks if kind == "task-cue" else 0

    def cue(Xa: np.ndarray, task: int) -> np.ndarray:
        if not n_cue:
            return Xa
        code = np.zeros((len(Xa), n_cue), dtype=Xa.dtype)
        code[:, task] = 1.0
        return np.concatenate([Xa, code], axis=1)

    clients = []
    for i, idx in enumerate(parts):
        idx = idx[rng.permutation(len(idx))]
        n_test = max(1, round(test_frac * len(idx)))
        n_fis = min(fisher_n, max(1, round(0.2 * len(idx))))
        te, fi, tr = idx[:n_test], idx[n_test : n_test + n_fis], idx[n_test + n_fis :]
        task = i % n_tasks

        def mk(sel, task=task):
            Xa, ya = _expand(X[sel], y[sel], augment)
            return torch.from_numpy(cue(Xa, task)), torch.from_numpy((ya + task) % 10)

        Xtr, ytr = mk(tr)
        Xte, yte = mk(te)
        Xfi, yfi = (torch.from_numpy(cue(X[fi], task)), torch.from_numpy((y[fi] + task) % 10))  # un-augmented
        clients.append(ClientData(i, task, Xtr, ytr, Xfi, yfi, Xte, yte))
    pX, py = _expand(X[pub], y[pub], augment)
    return Federation(torch.from_numpy(cue(pX, 0)), torch.from_numpy(py), clients, 64 + n_cue, 10, skew)


def correlated_gaussian_cov(d: int, a: float, b: float, rho: float, *, seed: int = 0) -> np.ndarray:
    """A (2d × 2d) joint covariance of (e_F, e_L) with tr Σ_F = a, tr Σ_L = b and Σ_FL = ρ √(Σ_F Σ_L).

    Σ_F and Σ_L are random diagonals (heterogeneous per coordinate) scaled to the requested traces; the
    cross-covariance is per-coordinate correlation ρ, so its trace is ``ρ Σ_j √(σ²_Fj σ²_Lj)``.
    """
    rng = np.random.default_rng(seed)
    sf = rng.uniform(0.2, 2.0, d)
    sl = rng.uniform(0.2, 2.0, d)
    sf *= a / sf.sum()
    sl *= b / sl.sum()
    cross = rho * np.sqrt(sf * sl)
    cov = np.zeros((2 * d, 2 * d))
    cov[:d, :d] = np.diag(sf)
    cov[d:, d:] = np.diag(sl)
    cov[:d, d:] = np.diag(cross)
    cov[d:, :d] = np.diag(cross)
    return cov
