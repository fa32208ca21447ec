"""GPyTorch/BoTorch plumbing: the GP models, the grid indexer and the acquisition functions.

Everything model-related runs in float64 on the CPU: the grids are small (≤ 32³ points) and the
hierarchy compares acquisition values across children, where float32 round-off would show.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

with warnings.catch_warnings():
    # linear_operator decorates two helpers with torch.jit.script at import, which recent torch
    # deprecates with a FutureWarning; the warning is the library's, not ours.
    warnings.filterwarnings("ignore", category=FutureWarning, message=r".*torch\.jit\.script.*")
    import gpytorch
    from botorch.acquisition.analytic import (
        AnalyticAcquisitionFunction,
        LogExpectedImprovement,
        ProbabilityOfImprovement,
    )
    from botorch.models.gpytorch import GPyTorchModel
    from botorch.utils.transforms import t_batch_mode_transform

DTYPE = torch.float64
ACQUISITIONS = ("ucb", "ei", "pi")


class GridIndexer:
    """Maps points of a regular grid on the unit cube to flat (row-major) indices and back.

    ``sizes[k]`` points per axis, at ``linspace(0, 1, sizes[k])``; a point's flat index is
    ``Σ_k round(u_k·(sizes[k]−1))·stride_k``.

    >>> g = GridIndexer([3, 2])
    >>> g.points().tolist()
    [[0.0, 0.0], [0.0, 1.0], [0.5, 0.0], [0.5, 1.0], [1.0, 0.0], [1.0, 1.0]]
    >>> int(g.index(torch.tensor([[0.5, 1.0]], dtype=torch.float64))[0])
    3
    """

    def __init__(self, sizes: list[int] | tuple[int, ...]) -> None:
        self.sizes = tuple(int(s) for s in sizes)
        strides = [1] * len(self.sizes)
        for k in range(len(self.sizes) - 2, -1, -1):
            strides[k] = strides[k + 1] * self.sizes[k + 1]
        self.strides = tuple(strides)
        self.n = int(np.prod(self.sizes))

    def axes(self) -> list[np.ndarray]:
        return [np.linspace(0.0, 1.0, s) for s in self.sizes]

    def points(self) -> torch.Tensor:
        """All grid points, (n, d) float64, in flat-index order."""
        mesh = np.meshgrid(*self.axes(), indexing="ij")
        return torch.as_tensor(np.stack([m.ravel() for m in mesh], axis=1), dtype=DTYPE)

    def index(self, u: torch.Tensor) -> torch.Tensor:
        """Flat indices of grid points ``u`` (..., d) → (...) long."""
        scale = torch.as_tensor([s - 1 for s in self.sizes], dtype=u.dtype, device=u.device)
        steps = torch.round(u * scale).long()
        strides = torch.as_tensor(self.strides, dtype=torch.long, device=u.device)
        return (steps * strides).sum(-1)

    def multi_index(self, flat: np.ndarray) -> np.ndarray:
        """(m,) flat indices → (m, d) integer steps."""
        return np.stack(np.unravel_index(np.asarray(flat), self.sizes), axis=-1)


class ChildExactGP(gpytorch.models.ExactGP, GPyTorchModel):
    """A child: ExactGP over its own sub-input, constant mean, Scale(Matérn-ν), Gaussian likelihood."""

    _num_outputs = 1

    def __init__(self, dim: int, nu: float) -> None:
        likelihood = gpytorch.likelihoods.GaussianLikelihood()
        super().__init__(None, None, likelihood)
        self.mean_module = gpytorch.means.ConstantMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(
            gpytorch.kernels.MaternKernel(nu=nu, ard_num_dims=dim)
        )
        self.to(DTYPE)

    def forward(self, x: torch.Tensor) -> gpytorch.distributions.MultivariateNormal:
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


class PriorMapMean(gpytorch.means.Mean):
    """A frozen look-up of the bottom-up prior map on the parent grid (no trainable parameters)."""

    def __init__(self, indexer: GridIndexer) -> None:
        super().__init__()
        self.indexer = indexer
        self.register_buffer("values", torch.zeros(indexer.n, dtype=DTYPE))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.values[self.indexer.index(x)]


class ScaledPriorMapMean(PriorMapMean):
    """α·m(x) + β over the frozen prior map, with α (from 1) and β (from 0) learned by the parent's MLL."""

    def __init__(self, indexer: GridIndexer) -> None:
        super().__init__(indexer)
        self.alpha = torch.nn.Parameter(torch.ones((), dtype=DTYPE))
        self.beta = torch.nn.Parameter(torch.zeros((), dtype=DTYPE))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.alpha * self.values[self.indexer.index(x)] + self.beta


class ParentExactGP(gpytorch.models.ExactGP, GPyTorchModel):
    """The parent: ExactGP over the joint input with an additive kernel, one Scale(Matérn-2.5) per child.

    ``mean="prior"`` uses :class:`PriorMapMean` (bottom-up), ``mean="scaled"`` its learned affine map
    :class:`ScaledPriorMapMean`; ``mean="constant"`` a learnable constant
    (the paper's "no child prior" ablation, and the single-GP reduction).
    """

    _num_outputs = 1

    def __init__(self, child_dims: list[list[int]], indexer: GridIndexer, mean: str, nu: float = 2.5) -> None:
        likelihood = gpytorch.likelihoods.GaussianLikelihood()
        super().__init__(None, None, likelihood)
        if mean == "prior":
            self.mean_module: gpytorch.means.Mean = PriorMapMean(indexer)
        elif mean == "scaled":
            self.mean_module = ScaledPriorMapMean(indexer)
        else:
            self.mean_module = gpytorch.means.ConstantMean()
        self.sub_kernels = torch.nn.ModuleList(
            gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.MaternKernel(nu=nu, ard_num_dims=len(dims), active_dims=tuple(dims))
            )
            for dims in child_dims
        )
        self.covar_module = gpytorch.kernels.AdditiveKernel(*self.sub_kernels)
        # The kernel's hyperparameters are copied from the children, never trained here.
        for p in self.covar_module.parameters():
            p.requires_grad_(False)
        self.to(DTYPE)

    def forward(self, x: torch.Tensor) -> gpytorch.distributions.MultivariateNormal:
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def train_exact_gp(model: gpytorch.models.ExactGP, iters: int, lr: float) -> None:
    """``iters`` Adam steps (β = 0.9, 0.999; ε = 1e-8; fresh moments each call) on the exact negative
    marginal log-likelihood — the paper's recipe.

    Adam is spelled out here (Kingma & Ba's bias-corrected update, which ``torch.optim.Adam``'s
    defaults implement — tested against a NumPy transcription) because the first ``torch.optim``
    optimiser imports ``torch._dynamo``, several seconds on a small machine, which would dominate
    short runs.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    if iters > 0 and params and model.train_inputs is not None:
        model.train()
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
        x, y = model.train_inputs[0], model.train_targets
        m = [torch.zeros_like(p) for p in params]
        v = [torch.zeros_like(p) for p in params]
        b1, b2, eps = 0.9, 0.999, 1e-8
        for step in range(1, iters + 1):
            loss = -mll(model(x), y)
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, g, mp, vp in zip(params, grads, m, v):
                    mp.mul_(b1).add_(g, alpha=1 - b1)
                    vp.mul_(b2).addcmul_(g, g, value=1 - b2)
                    denom = (vp / (1 - b2**step)).sqrt().add_(eps)
                    p.addcdiv_(mp, denom, value=-lr / (1 - b1**step))
    model.eval()


@torch.no_grad()
def mean_and_sigma(model: Any, x: torch.Tensor, chunk: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """Posterior mean and standard deviation of the latent function at ``x`` (n, d), in chunks (the
    joint posterior of n points would form an n×n covariance just to read its diagonal)."""
    model.eval()
    means, sds = [], []
    for start in range(0, x.shape[0], chunk):
        xs = x[start : start + chunk]
        if model.train_inputs is None:
            with gpytorch.settings.prior_mode(True):
                post = model(xs)
        else:
            post = model(xs)
        means.append(post.mean)
        sds.append(post.variance.clamp_min(1e-12).sqrt())
    return torch.cat(means), torch.cat(sds)


@torch.no_grad()
def posterior_mean(model: Any, x: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """Posterior mean only, in chunks: GPyTorch still forms the test-test covariance of the points it is
    given (about 7 s for the 4,096 points of a 16³ grid), so it is never given the whole grid at once."""
    model.eval()
    out = []
    with gpytorch.settings.skip_posterior_variances(True):
        for start in range(0, x.shape[0], chunk):
            xs = x[start : start + chunk]
            if model.train_inputs is None:
                with gpytorch.settings.prior_mode(True):
                    out.append(model(xs).mean)
            else:
                out.append(model(xs).mean)
    return torch.cat(out)


class CountUCB(AnalyticAcquisitionFunction):
    """Count-discounted UCB on a grid, μ(x) + κ·σ(x)/√n(x), with n(x) the queries of x so far plus one."""

    def __init__(self, model: Any, kappa: float, counts: torch.Tensor, indexer: GridIndexer) -> None:
        super().__init__(model=model)
        self.kappa = float(kappa)
        self.indexer = indexer
        self.register_buffer("counts", counts.to(DTYPE))

    @t_batch_mode_transform(expected_q=1)
    def forward(self, X: torch.Tensor) -> torch.Tensor:
        mean, sigma = self._mean_and_sigma(X)  # (b, 1) each
        n = self.counts[self.indexer.index(X.squeeze(-2))].unsqueeze(-1)
        return (mean + self.kappa * sigma / n.sqrt()).squeeze(-1)


@torch.no_grad()
def acquisition_values(
    model: Any,
    x: torch.Tensor,
    kind: str,
    param: float,
    counts: torch.Tensor,
    indexer: GridIndexer,
    best_f: float,
    chunk: int = 8192,
) -> torch.Tensor:
    """The acquisition map over the grid points ``x`` (n, d) with BoTorch's analytic acquisitions.

    ``ucb``: μ + param·σ/√n (count-discounted); ``ei``: σ(zΦ(z) + φ(z)); ``pi``: Φ(z), with
    z = (μ − best_f − param)/σ (``param`` is the jitter ξ for EI and PI).
    """
    if model.train_inputs is None:  # no data yet: the prior is flat, so the map is too
        mu, sd = mean_and_sigma(model, x)
        if kind == "ucb":
            return mu + param * sd / counts.sqrt()
        z = (mu - best_f - param) / sd
        normal = torch.distributions.Normal(torch.zeros((), dtype=DTYPE), torch.ones((), dtype=DTYPE))
        return sd * (z * normal.cdf(z) + normal.log_prob(z).exp()) if kind == "ei" else normal.cdf(z)
    model.eval()
    if kind == "ucb":
        acq: Any = CountUCB(model, param, counts, indexer)
        transform = None
    elif kind == "ei":
        acq = LogExpectedImprovement(model, best_f=best_f + param)
        transform = torch.exp
    else:
        acq = ProbabilityOfImprovement(model, best_f=best_f + param)
        transform = None
    out = []
    with torch.no_grad():
        for start in range(0, x.shape[0], chunk):
            out.append(acq(x[start : start + chunk].unsqueeze(-2)))
    vals = torch.cat(out)
    return transform(vals) if transform is not None else vals
