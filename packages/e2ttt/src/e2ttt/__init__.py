"""e2ttt: E²-TTT, test-time training with a closed-form chunk transition (per-token momentum and decay).

A fast-weight memory (a 2-layer GELU MLP with layer norm and residual, or SwiGLU) is trained online on a
reconstruction loss of values from keys, chunk by chunk; inside a chunk the update follows the per-token
recurrence ``m_t = β_t m_{t−1} − lr_t g_t``, ``W_t = γ_t W_{t−1} + m_t`` with gradients at the chunk start,
and :func:`e2ttt_chunk_update` computes the chunk-end ``W`` and ``m`` exactly in closed form.

Shapes: fast-weight states are tuples of ``(B, H, rows, cols)`` tensors; ``k``, ``v``, ``q`` are
``(B, H, L, d)``; the gates ``lr``, ``log_gamma``, ``log_beta`` are ``(B, H, L)``. Any float dtype
(float64 for exactness checks).

>>> from e2ttt import e2ttt_chunk_update
>>> from e2ttt.reference import chunk_loop
>>> from e2ttt.testing import problem, rel
>>> args = problem("mlp", L=16)
>>> rel(e2ttt_chunk_update(*args)[0], chunk_loop(*args)[0]) < 1e-10
True
"""

__version__ = "0.1.0"

# Public names resolve lazily (PEP 562), so `e2ttt --version` does not pay for importing torch.
_EXPORTS = {
    "chunk_average_update": "baselines",
    "no_momentum_update": "baselines",
    "TokenWeights": "chunk",
    "chunked_memory": "chunk",
    "clip_by_norm": "chunk",
    "e2ttt_chunk_update": "chunk",
    "per_token_chunk_update": "chunk",
    "renorm_rows": "chunk",
    "token_weights": "chunk",
    "FastWeight": "fastweights",
    "E2TTTLayer": "layer",
    "LayerState": "layer",
    "TinyLM": "layer",
    "chunk_loop": "reference",
    "sequence_loop": "reference",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"e2ttt.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'e2ttt' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)


__all__ = ["__version__", *sorted(_EXPORTS)]
