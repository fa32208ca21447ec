"""rocket-compress: ROCKET, training-free LLM compression by knapsack allocation and single-step sparse
factorization.

Each target linear layer ``y = x W`` (W: d_in × d_out) becomes ``W ≈ A B`` with ``A`` dense (d_in × k) and
``B`` column-sparse (k × d_out), chosen to minimise the output error on calibration inputs; the compression
level of every layer is picked by a multi-choice knapsack under a global parameter budget.

>>> import torch
>>> from rocket_compress import rank_and_sparsity, whiten, sparse_factorize
>>> g = torch.Generator().manual_seed(0)
>>> X = torch.randn(200, 16, generator=g, dtype=torch.float64)
>>> W = torch.randn(16, 12, generator=g, dtype=torch.float64)
>>> S, S_inv = whiten(X.T @ X / 200)
>>> f = sparse_factorize(W, S, S_inv, ratio=0.3, ks=1.5)
>>> (f.k, f.nnz, f.params <= 0.7 * 16 * 12)
(5, 4, True)
"""

__version__ = "0.1.0"

# Public names resolve lazily (PEP 562), so `rocket-compress --version` does not pay for importing torch.
_EXPORTS = {
    "magnitude_prune": "baselines",
    "svd_llm": "baselines",
    "truncated_svd": "baselines",
    "Calibration": "calibration",
    "collect_input_grams": "calibration",
    "target_linears": "calibration",
    "CompressConfig": "pipeline",
    "LayerProfile": "pipeline",
    "Report": "pipeline",
    "allocate": "pipeline",
    "apply": "pipeline",
    "calibrate": "pipeline",
    "compress": "pipeline",
    "count_params": "pipeline",
    "profile": "pipeline",
    "Factorization": "factorize",
    "LayerProblem": "factorize",
    "Option": "factorize",
    "profile_layer": "factorize",
    "rank_and_sparsity": "factorize",
    "sparse_factorize": "factorize",
    "whiten": "factorize",
    "load_compressed": "io",
    "load_model": "io",
    "save_compressed": "io",
    "solve_mckp": "knapsack",
    "FactorizedLinear": "modules",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"rocket_compress.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'rocket_compress' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)


__all__ = [
    "Calibration",
    "CompressConfig",
    "Factorization",
    "FactorizedLinear",
    "LayerProblem",
    "LayerProfile",
    "Option",
    "Report",
    "__version__",
    "allocate",
    "apply",
    "calibrate",
    "collect_input_grams",
    "compress",
    "count_params",
    "load_compressed",
    "load_model",
    "magnitude_prune",
    "profile",
    "profile_layer",
    "rank_and_sparsity",
    "save_compressed",
    "solve_mckp",
    "sparse_factorize",
    "svd_llm",
    "target_linears",
    "truncated_svd",
    "whiten",
]
