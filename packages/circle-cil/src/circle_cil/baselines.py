"""Cold-start class-incremental baselines in torch, re-implemented for side-by-side runs.

* :class:`FrozenCNN` — a small CNN trained on the first task only, then frozen; its features feed a
  streaming-LDA head (the same head as CIRCLE, so only the extractor differs).
* :class:`LwF` — Learning without Forgetting (Li & Hoiem 2017): the CNN and an expanding linear head
  are fine-tuned on every task with cross-entropy over the seen classes plus distillation (T = 2) of
  the previous model's logits on the old classes. With ``patience`` set, each task trains until its
  mean epoch loss has not improved by more than ``tol`` (absolute) for ``patience`` epochs (at
  most ``epochs``).
* :class:`RandomConvSLDA` — the same CNN architecture left at its random initialisation (never
  trained), global+2×2 pooled, with a streaming-LDA head: random convolution features.
* :class:`JointCNN` — the upper bound: the CNN trained on all tasks' data at once (not incremental).

All learners expose ``learn_task(X, y)`` (the baselines need task boundaries; CIRCLE does not) and
``predict(X)``. ``train_seconds`` accumulates the time spent learning.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from circle_cil.slda import StreamingLDA, as_labels


class SmallCNN(nn.Module):
    """conv(3×3, stride 2)-ReLU ×2, conv(3×3)-ReLU, global-mean + 2×2 average pooling: 5·64w features."""

    def __init__(self, in_channels: int = 1, width: int = 1) -> None:
        super().__init__()
        c1, c2, c3 = 16 * width, 32 * width, 64 * width
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, c1, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(c1, c2, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(c2, c3, 3, padding=1),
            nn.ReLU(),
        )
        self.out_dim = 5 * c3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.body(x)
        return torch.cat([m.mean(dim=(2, 3)), F.adaptive_avg_pool2d(m, 2).flatten(1)], dim=1)


def _batches(n: int, batch: int, rng: np.random.Generator):
    perm = rng.permutation(n)
    for i in range(0, n, batch):
        yield perm[i : i + batch]


class _Learner:
    name = "learner"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.train_seconds = 0.0
        self.classes_: list[int] = []
        self._index: dict[int, int] = {}

    def _register(self, y: np.ndarray) -> torch.Tensor:
        for c in y.tolist():
            if c not in self._index:
                self._index[c] = len(self.classes_)
                self.classes_.append(c)
        return torch.tensor([self._index[c] for c in y.tolist()], dtype=torch.long)

    def learn_task(self, X, y) -> None:
        x = torch.as_tensor(np.asarray(X, dtype=np.float32))
        labels = as_labels(y, len(x))
        t0 = time.perf_counter()
        self._learn(x, labels)
        self.train_seconds += time.perf_counter() - t0

    def _learn(self, x: torch.Tensor, y: np.ndarray) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def scores(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    @torch.no_grad()
    def predict(self, X) -> np.ndarray:
        x = torch.as_tensor(np.asarray(X, dtype=np.float32))
        out = torch.cat([self.scores(x[i : i + 512]).argmax(1) for i in range(0, len(x), 512)])
        return np.asarray(self.classes_, dtype=np.int64)[out.numpy()]


class _TrainedCNN(_Learner):
    def __init__(
        self,
        in_channels: int,
        max_classes: int,
        *,
        epochs: int = 5,
        lr: float = 1e-3,
        batch: int = 32,
        width: int = 1,
        patience: int | None = None,
        tol: float = 0.01,
        seed: int = 0,
    ) -> None:
        super().__init__(seed)
        torch.manual_seed(seed)
        self.net = SmallCNN(in_channels, width)
        self.head = nn.Linear(self.net.out_dim, max_classes)
        self.epochs, self.lr, self.batch = epochs, lr, batch
        self.patience, self.tol = patience, tol
        self.epochs_run: list[int] = []  # epochs actually trained, per call of _fit (per task)
        self.final_losses: list[float] = []  # the last epoch's mean training loss, per task
        self.rng = np.random.default_rng(seed)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.net(x))[:, : len(self.classes_)]

    def _fit(self, x, yi, old=None, n_old: int = 0, T: float = 2.0, lam: float = 1.0) -> None:
        params = list(self.net.parameters()) + list(self.head.parameters())
        opt = torch.optim.Adam(params, lr=self.lr)
        self.net.train()
        best, since, epoch_loss, done = float("inf"), 0, float("nan"), 0
        for _ in range(self.epochs):
            total, count = 0.0, 0
            for b in _batches(len(x), self.batch, self.rng):
                out = self.logits(x[b])
                loss = F.cross_entropy(out, yi[b])
                if old is not None and n_old > 0:
                    with torch.no_grad():
                        target = F.softmax(old(x[b])[:, :n_old] / T, dim=1)
                    loss = loss + lam * T * T * F.kl_div(
                        F.log_softmax(out[:, :n_old] / T, dim=1), target, reduction="batchmean"
                    )
                opt.zero_grad()
                loss.backward()
                opt.step()
                total, count = total + float(loss.detach()) * len(b), count + len(b)
            done += 1
            epoch_loss = total / count
            if self.patience is not None:  # stop once the epoch loss has plateaued
                if epoch_loss < best - self.tol:
                    best, since = epoch_loss, 0
                else:
                    since += 1
                    if since >= self.patience:
                        break
        self.epochs_run.append(done)
        self.final_losses.append(epoch_loss)
        self.net.eval()


class LwF(_TrainedCNN):
    """Learning without Forgetting with an expanding head (CE over seen classes + logit distillation)."""

    name = "LwF"

    def __init__(self, *args, lam: float = 1.0, T: float = 2.0, **kw) -> None:
        super().__init__(*args, **kw)
        self.lam, self.T = lam, T

    def _learn(self, x, y):
        n_old = len(self.classes_)
        old = None
        if n_old:
            old_net, old_head = copy.deepcopy(self.net).eval(), copy.deepcopy(self.head).eval()

            def old(z):
                return old_head(old_net(z))

        yi = self._register(y)
        self._fit(x, yi, old, n_old, self.T, self.lam)

    def scores(self, x):
        return self.logits(x)


class JointCNN(_TrainedCNN):
    """The upper bound: all data at once (call ``learn_task`` once with everything)."""

    name = "joint"

    def _learn(self, x, y):
        self._fit(x, self._register(y))

    def scores(self, x):
        return self.logits(x)


class _SLDAOnFeatures(_Learner):
    def __init__(self, *, shrinkage: float = 1e-4, cov_update: str = "hayes_kanan", seed: int = 0) -> None:
        super().__init__(seed)
        self.head_kw = dict(shrinkage=shrinkage, cov_update=cov_update)
        self.slda: StreamingLDA | None = None

    @torch.no_grad()
    def feats(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.net(x[i : i + 256]) for i in range(0, len(x), 256)])

    def _update_head(self, x, y):
        f = self.feats(x)
        if self.slda is None:
            self.slda = StreamingLDA(f.shape[1], **self.head_kw)
        self.slda.partial_fit(f, y)
        self.classes_ = list(self.slda.classes_)

    @torch.no_grad()
    def scores(self, x):
        return self.slda.decision_function(self.net(x))  # type: ignore[union-attr]


class RandomConvSLDA(_SLDAOnFeatures):
    """Random (never trained) convolution features + streaming LDA."""

    name = "random-conv+SLDA"

    def __init__(self, in_channels: int = 1, *, width: int = 2, seed: int = 0, **kw) -> None:
        super().__init__(seed=seed, **kw)
        torch.manual_seed(seed)
        self.net = SmallCNN(in_channels, width).eval()

    def _learn(self, x, y):
        self._update_head(x, y)


class FrozenCNN(_SLDAOnFeatures):
    """CNN trained on the first task, then frozen; streaming-LDA head on its features for every task."""

    name = "frozen-CNN+SLDA"

    def __init__(
        self,
        in_channels: int,
        max_classes: int,
        *,
        epochs: int = 5,
        lr: float = 1e-3,
        batch: int = 32,
        seed: int = 0,
        **kw,
    ) -> None:
        super().__init__(seed=seed, **kw)
        self.cnn = _TrainedCNN(in_channels, max_classes, epochs=epochs, lr=lr, batch=batch, seed=seed)
        self.net = self.cnn.net
        self.tasks_seen = 0

    def _learn(self, x, y):
        if self.tasks_seen == 0:
            self.cnn._fit(x, self.cnn._register(y))
            self.net.eval()
        self.tasks_seen += 1
        self._update_head(x, y)
