"""The baselines run side by side with BIF on the same grid, seeds and initial design.

- :class:`VanillaGPUCB` — GP-UCB on the joint input with BoTorch: ``SingleTaskGP`` (its default
  kernel and priors, ``Standardize`` outcome transform), hyperparameters fitted by
  ``fit_gpytorch_mll`` after every observation, ``UpperConfidenceBound`` maximised over the grid.
- :func:`bottom_up` — the hierarchy without the top-down path (the paper's "no down" ablation):
  children learn only from their own direct observations.
- :class:`RandomSearch` — uniform random grid points.

Children scores for the flat methods: VanillaGPUCB's child estimate is the partial dependence of its
posterior mean (the mean over the other children's dimensions); RandomSearch has no model, so its
estimates are the constant mean of what it observed (R² ≤ 0 for the parent, 0 for children).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from bif_hgp._gp import (
    DTYPE,
    GridIndexer,
    ParentExactGP,
    acquisition_values,
    gpytorch,
    posterior_mean,
    train_exact_gp,
)
from bif_hgp.model import (
    BIF,
    INITIAL_NOISE,
    BOResult,
    _call,
    check_budget,
    check_problem,
    grid_truth,
    initial_design,
    record_scores,
)
from papershelf.errors import InputError, check_choice, check_int, check_number

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=FutureWarning)
    from botorch.acquisition.analytic import UpperConfidenceBound
    from botorch.exceptions.warnings import InputDataWarning, OptimizationWarning
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from botorch.models.transforms.outcome import Standardize


def bottom_up(composition: Mapping[str, Sequence[int]], bounds: Any, **kwargs: Any) -> BIF:
    """The no-top-down ablation: a :class:`~bif_hgp.model.BIF` with ``topdown=False``."""
    model = BIF(composition, bounds, topdown=False, **kwargs)
    model.method = "bottomup"
    return model


class _FlatBO:
    """Shared loop of the flat baselines: validation, initial design, non-finite handling, scores."""

    method = "flat"

    def __init__(
        self,
        composition: Mapping[str, Sequence[int]],
        bounds: Any,
        *,
        grid: int = 32,
        n_init: int = 3,
        on_nonfinite: str = "raise",
    ) -> None:
        self.composition = composition
        self.bounds = bounds
        self.grid = grid
        self.n_init = n_init
        self.on_nonfinite = on_nonfinite

    def _validate(self, budget: Any) -> None:
        self.bounds_, self.composition_, self.grid_ = check_problem(self.bounds, self.composition, self.grid)
        check_int("n_init", self.n_init, low=0)
        check_choice("on_nonfinite", self.on_nonfinite, ("raise", "skip"))
        self.budget_ = check_budget(budget, self.n_init)

    # hooks
    def _start(self, seed: int) -> None: ...

    def _propose(self, t: int) -> int:
        raise NotImplementedError

    def _update(self) -> None: ...

    def _estimates(self) -> tuple[np.ndarray, int]:
        raise NotImplementedError

    def run(
        self,
        objective: Callable[[np.ndarray], float],
        budget: int,
        *,
        seed: int = 0,
        truth: Callable[[np.ndarray], np.ndarray] | None = None,
        child_truth: Mapping[str, Callable[[np.ndarray], np.ndarray]] | None = None,
        **_: Any,
    ) -> BOResult:
        """Optimise ``objective`` with ``budget`` evaluations (``n_init`` random ones included)."""
        if not callable(objective):
            raise InputError("objective must be callable: objective(x: (D,) array) -> float")
        self._validate(budget)
        torch.manual_seed(seed)
        start = time.perf_counter()
        D = self.bounds_.shape[0]
        self.indexer = GridIndexer([self.grid_] * D)
        self.points = self.indexer.points()
        scores = grid_truth(truth, child_truth, self.bounds_, self.composition_, self.grid_)
        self.x: list[int] = []
        self.y: list[float] = []
        queries, ys, skipped = [], [], []
        result = BOResult(self.method, np.zeros((0, D)), np.zeros(0), skipped)
        init = initial_design(seed, self.indexer.n, self.n_init)
        self._start(seed)
        lo, span = self.bounds_[:, 0], self.bounds_[:, 1] - self.bounds_[:, 0]
        for t in range(self.budget_):
            if t == self.n_init:
                self._score(result, scores, t)
            flat = init[t] if t < self.n_init else self._propose(t)
            x = lo + self.points[flat].numpy() * span
            y = _call(objective, x, "objective")
            queries.append(x)
            ys.append(y)
            if not math.isfinite(y):
                if self.on_nonfinite == "raise":
                    raise InputError(f"objective returned {y} at x={x.tolist()} (query {t + 1})")
                skipped.append(t)
            else:
                self.x.append(flat)
                self.y.append(y)
                self._update()
            if t + 1 > self.n_init:
                self._score(result, scores, t + 1)
        if self.n_init == self.budget_:
            self._score(result, scores, self.budget_)
        result.queries = np.asarray(queries, float).reshape(-1, D)
        result.y = np.asarray(ys, float)
        result.seconds = time.perf_counter() - start
        result.model = self
        return result

    def _score(self, result: BOResult, scores: Any, t: int) -> None:
        mean, chosen = self._estimates()
        child_means = {name: self._partial_dependence(mean, name) for name in scores.children}
        record_scores(result, scores, t, self.y, mean, chosen, child_means)

    def _partial_dependence(self, mean: np.ndarray, name: str) -> np.ndarray:
        dims = self.composition_[name]
        D = self.bounds_.shape[0]
        cube = mean.reshape([self.grid_] * D)
        other = tuple(k for k in range(D) if k not in dims)
        pd = cube.mean(axis=other) if other else cube
        order = sorted(dims)  # axes that remain are in increasing order; put them in the child's order
        return np.transpose(pd, [order.index(d) for d in dims]).reshape(-1)


class VanillaGPUCB(_FlatBO):
    """BoTorch GP-UCB on the joint input: ``SingleTaskGP`` + ``fit_gpytorch_mll`` + ``UpperConfidenceBound``.

    ``kappa`` is the UCB multiplier (BoTorch's ``beta`` = κ²); the default 7.5 is BIF's parent κ.
    """

    method = "vanilla"

    def __init__(
        self, composition: Mapping[str, Sequence[int]], bounds: Any, *, kappa: float = 7.5, **kw: Any
    ):
        super().__init__(composition, bounds, **kw)
        self.kappa = kappa

    def _validate(self, budget: Any) -> None:
        super()._validate(budget)
        check_number("kappa", self.kappa, low=0)

    def _start(self, seed: int) -> None:
        self.model: Any = None

    def _update(self) -> None:
        X = self.points[torch.as_tensor(self.x)]
        Y = torch.as_tensor(self.y, dtype=DTYPE).unsqueeze(-1)
        with warnings.catch_warnings():
            # a constant outcome (e.g. two equal observations) makes BoTorch warn that the data are not
            # standardised; fitting may warn that L-BFGS stopped early. Neither is the user's concern here.
            warnings.simplefilter("ignore", InputDataWarning)
            warnings.simplefilter("ignore", OptimizationWarning)
            warnings.filterwarnings("ignore", category=RuntimeWarning)
            model = SingleTaskGP(X, Y, outcome_transform=Standardize(m=1))
            mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
            fit_gpytorch_mll(mll)
        model.eval()
        self.model = model

    def _acquisition(self) -> torch.Tensor:
        acq = UpperConfidenceBound(self.model, beta=float(self.kappa) ** 2)
        with torch.no_grad():
            return torch.cat(
                [acq(self.points[i : i + 8192].unsqueeze(-2)) for i in range(0, self.indexer.n, 8192)]
            )

    def _propose(self, t: int) -> int:
        if self.model is None:  # nothing observed yet: any point is as good as another
            return int(np.random.default_rng([t, 7]).integers(self.indexer.n))
        return int(np.argmax(self._acquisition().numpy()))

    def _estimates(self) -> tuple[np.ndarray, int]:
        if self.model is None:
            mean = np.zeros(self.indexer.n)
        else:
            with torch.no_grad():  # in chunks, for the same reason as posterior_mean
                mean = torch.cat(
                    [
                        self.model.posterior(self.points[i : i + 512]).mean.squeeze(-1)
                        for i in range(0, self.indexer.n, 512)
                    ]
                ).numpy()
        return mean, int(np.argmax(mean))


class SingleGPUCB(_FlatBO):
    """One GPyTorch ExactGP on the joint input, trained with the paper's recipe (``train_iters`` Adam
    steps at ``lr`` after every observation, warm-started), constant mean, Scale(Matérn-ν, ARD), and
    BIF's count-discounted UCB μ + κσ/√n on standardised targets — the hierarchy with one child and no
    bottom-up prior collapses to this loop (tested), and it is our reading of the paper's "vanilla GPBO".
    Its likelihood noise starts at ``initial_noise`` (standardised units; BIF's 0.1 — None keeps
    GPyTorch's 0.693).
    """

    method = "single"

    def __init__(
        self,
        composition: Mapping[str, Sequence[int]],
        bounds: Any,
        *,
        kappa: float = 7.5,
        nu: float = 2.5,
        train_iters: int = 10,
        lr: float = 0.01,
        initial_noise: float | None = INITIAL_NOISE,
        **kw: Any,
    ) -> None:
        super().__init__(composition, bounds, **kw)
        self.kappa = kappa
        self.initial_noise = initial_noise
        self.nu = nu
        self.train_iters = train_iters
        self.lr = lr

    def _validate(self, budget: Any) -> None:
        super()._validate(budget)
        check_number("kappa", self.kappa, low=0)
        check_choice("nu", self.nu, (0.5, 1.5, 2.5))
        check_int("train_iters", self.train_iters, low=0)
        check_number("lr", self.lr, low=0, low_open=True)
        if self.initial_noise is not None:
            check_number("initial_noise", self.initial_noise, low=0, low_open=True)

    def _start(self, seed: int) -> None:
        D = self.bounds_.shape[0]
        self.gp = ParentExactGP([list(range(D))], self.indexer, mean="constant", nu=self.nu)
        for p in self.gp.covar_module.parameters():  # a single GP trains its own kernel
            p.requires_grad_(True)
        if self.initial_noise is not None:
            self.gp.likelihood.noise = self.initial_noise
        self.counts = torch.ones(self.indexer.n, dtype=DTYPE)

    def _standardised(self) -> torch.Tensor:
        y = torch.as_tensor(self.y, dtype=DTYPE)
        if y.numel() < 2:
            return y - y.mean()
        sd = y.std()
        return (y - y.mean()) / (sd if sd > 0 else 1.0)

    def _update(self) -> None:
        self.counts[self.x[-1]] += 1.0
        self.gp.set_train_data(self.points[torch.as_tensor(self.x)], self._standardised(), strict=False)
        train_exact_gp(self.gp, self.train_iters, self.lr)

    def _propose(self, t: int) -> int:
        best = float(self._standardised().max()) if self.y else 0.0
        acq = acquisition_values(self.gp, self.points, "ucb", self.kappa, self.counts, self.indexer, best)
        return int(np.argmax(acq.numpy()))

    def _estimates(self) -> tuple[np.ndarray, int]:
        mu = posterior_mean(self.gp, self.points).numpy()
        y = np.asarray(self.y, float)
        if y.size:
            sd = float(np.std(y, ddof=1)) if y.size > 1 else 1.0
            mu = mu * (sd if sd > 0 else 1.0) + float(y.mean())
        return mu, int(np.argmax(mu))


class RandomSearch(_FlatBO):
    """Uniformly random grid points (with replacement), seeded."""

    method = "random"

    def _start(self, seed: int) -> None:
        self.rng = np.random.default_rng([seed, 3])

    def _propose(self, t: int) -> int:
        return int(self.rng.integers(self.indexer.n))

    def _estimates(self) -> tuple[np.ndarray, int]:
        if not self.y:
            return np.zeros(self.indexer.n), 0
        return np.full(self.indexer.n, float(np.mean(self.y))), self.x[int(np.argmax(self.y))]
