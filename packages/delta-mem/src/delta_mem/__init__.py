"""delta-mem: δ-Mem, a compact delta-rule associative memory that corrects a frozen attention backbone.

Every wrapped attention layer keeps a fixed-size state ``S`` (8×8 by default) updated online by the
delta rule with learned gates (read before write); its readout gives zero-initialised low-rank
corrections to the query and output projections, so the wrapped model starts as the backbone exactly.

>>> import torch
>>> from delta_mem import scan_reference, scan_chunked
>>> k = torch.eye(4, dtype=torch.float64)[None, None]          # orthonormal keys, (B, H, T, d_k)
>>> v = torch.arange(16.0, dtype=torch.float64).view(1, 1, 4, 4)
>>> ones = torch.ones_like(v)                                   # keep = erase = write = 1: β = 1, no decay
>>> _, S = scan_reference(k, k, v, ones, ones, ones)
>>> bool(torch.allclose(S @ k[0, 0, 2], v[0, 0, 2]))            # the state returns each written value
True
>>> reads, S2 = scan_chunked(k, k, v, ones, ones, ones, chunk=3)
>>> bool(torch.allclose(S2, S))
True
"""

__version__ = "0.1.0"

# Public names resolve lazily (PEP 562), so `delta-mem --version` does not pay for importing torch.
_EXPORTS = {
    "scan_reference": "reference",
    "BACKENDS": "scan",
    "UPDATE_MODES": "scan",
    "gate_coefficients": "scan",
    "scan": "scan",
    "scan_chunked": "scan",
    "scan_recurrent": "scan",
    "DeltaMemConfig": "memory",
    "DeltaMemLayer": "memory",
    "GRANULARITIES": "memory",
    "attach_delta_mem": "wrap",
    "count_memory_parameters": "wrap",
    "detach_delta_mem": "wrap",
    "detach_state": "wrap",
    "get_state": "wrap",
    "is_wrapped": "wrap",
    "memory_parameters": "wrap",
    "reset_state": "wrap",
    "set_decode_backend": "wrap",
    "DECODE_BACKENDS": "memory",
    "kernel_status": "decode_c",
    "backbone_fingerprint": "io",
    "same_backbone": "io",
    "load_adapter": "io",
    "save_adapter": "io",
    "Dialogue": "data",
    "make_dialogue": "data",
    "make_dialogues": "data",
    "bm25_window": "baselines",
    "lora_model": "baselines",
    "lora_rank_for": "baselines",
    "scan_triton": "kernels",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"delta_mem.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'delta_mem' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)


__all__ = ["__version__", *sorted(_EXPORTS)]
