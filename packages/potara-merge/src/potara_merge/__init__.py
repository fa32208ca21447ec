"""potara-merge: Potara, closed-form mixing of federated and local LoRA adapters for personalisation.

Each client's personalised model is ``θ₀ + λ Δ_F + (1 − λ) Δ_L`` (federated and local task vectors).
With ``a = tr Σ_F``, ``b = tr Σ_L``, ``c = tr Σ_FL`` from diagonal Fisher estimates and a clipped
gradient correlation, the variance-trace bound ``V(λ) = λ²a + (1−λ)²b + 2λ(1−λ)c`` is minimised at
``λ* = (b − c)/(a + b − 2c)``, and ``V(λ*) ≤ min(V(0), V(1))``.

>>> from potara_merge import optimal_weight, variance_bound, bound_at_optimum
>>> lam = optimal_weight(1.0, 3.0, 0.5)
>>> round(lam, 4), round(bound_at_optimum(1.0, 3.0, 0.5), 4), variance_bound(1.0, 1.0, 3.0, 0.5)
(0.8333, 0.9167, 1.0)
"""

__version__ = "0.1.0"

# Public names resolve lazily (PEP 562), so `potara-merge --version` does not pay for importing torch.
_EXPORTS = {
    "Traces": "weights",
    "bound_at_optimum": "weights",
    "global_traces": "weights",
    "module_traces": "weights",
    "module_weights": "weights",
    "optimal_weight": "weights",
    "variance_bound": "weights",
    "correlation": "fisher",
    "diag_fisher": "fisher",
    "grad_correlation": "fisher",
    "per_sample_grads": "fisher",
    "check_compatible": "lora",
    "delta_weights": "lora",
    "load_adapter": "lora",
    "lora_modules": "lora",
    "merge_lora": "lora",
    "merge_peft_models": "lora",
    "save_adapter": "lora",
    "load_fisher": "io",
    "merge_adapter_dirs": "io",
    "save_fisher": "io",
    "PotaraInfo": "potara",
    "estimate_traces": "potara",
    "personalise": "potara",
    "CommMeter": "federated",
    "fedavg": "federated",
    "lora_model": "federated",
    "APFL": "baselines",
    "Ditto": "baselines",
    "finetune": "baselines",
    "digits_federation": "data",
    "text_federation": "text",
    "lm_lora_model": "text",
    "save_text_adapter": "text",
    "SimConfig": "experiments",
    "experiment": "experiments",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"potara_merge.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'potara_merge' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)


__all__ = sorted([*_EXPORTS, "__version__"])
