"""Predictors: anything that maps partially masked sequences to per-position distributions.

The interface is one callable::

    predictor(tokens) -> probs
    tokens: int64 array (B, L), MASK (= -1) at masked positions, token ids in [0, V) elsewhere
    probs:  float64 array (B, L, V); the rows of masked positions must be probability vectors
            (rows of observed positions are ignored)

:class:`ExactOracle` is the optimal mask predictor of an explicit joint distribution (exact
marginalisation). :class:`LogitsPredictor` adapts any masked diffusion LM that returns logits (a
Hugging Face model, a torch module, a jax function): it swaps ``MASK`` for the model's mask id and
applies a float64 softmax.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from papershelf.errors import InputError, check_int, check_number

MASK = -1
ROW_TOL = 1e-6  # a masked row must sum to 1 within this


def token_entropy(probs: np.ndarray) -> np.ndarray:
    """Shannon entropy in nats of each row along the last axis (0 log 0 = 0).

    >>> float(np.round(token_entropy(np.array([0.5, 0.5])), 6))
    0.693147
    """
    p = np.asarray(probs, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, -p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    h = terms.sum(axis=-1)
    return np.where(h < 1e-13, 0.0, h)


def check_tokens(tokens: Any, L: int | None = None, V: int | None = None, name: str = "tokens") -> np.ndarray:
    """Validate a (B, L) token array with MASK = -1; returns int64."""
    arr = np.asarray(tokens)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.size == 0:
        raise InputError(f"{name} must be a non-empty (B, L) integer array, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise InputError(f"{name} must hold integers (token ids, -1 for a mask), got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if L is not None and arr.shape[1] != L:
        raise InputError(f"{name} must have L = {L} columns, got {arr.shape[1]}")
    if arr.min() < MASK or (V is not None and arr.max() >= V):
        raise InputError(
            f"{name} entries must be -1 (mask) or token ids in [0, {V}), got [{arr.min()}, {arr.max()}]"
        )
    return arr


def check_probs(probs: Any, tokens: np.ndarray, name: str = "predictor output") -> np.ndarray:
    """Check a predictor's output against the tokens it was given: shape (B, L, V), and every masked
    row finite, non-negative and summing to 1 (within 1e-6). Returns float64."""
    try:
        p = np.asarray(probs, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a numeric (B, L, V) array") from None
    B, L = tokens.shape
    if p.ndim != 3 or p.shape[:2] != (B, L) or p.shape[2] < 1:
        raise InputError(f"{name} must have shape ({B}, {L}, V), got {p.shape}")
    rows = p[tokens == MASK]
    if rows.size:
        if not np.isfinite(rows).all():
            raise InputError(f"{name} has NaN or infinite probabilities at masked positions")
        if rows.min() < -1e-12:
            raise InputError(f"{name} has negative probabilities at masked positions (min {rows.min():.3g})")
        sums = rows.sum(axis=1)
        worst = float(np.abs(sums - 1.0).max())
        if worst > ROW_TOL:
            raise InputError(
                f"{name} rows at masked positions must sum to 1 (worst |sum - 1| = {worst:.3g})",
                hint="apply a softmax, or normalise the rows",
            )
    return np.clip(p, 0.0, None)


def predict(predictor: Callable[[np.ndarray], Any], tokens: np.ndarray) -> np.ndarray:
    """Call ``predictor`` on validated tokens and validate what it returns."""
    return check_probs(predictor(tokens), tokens)


class ExactOracle:
    """The exact conditional marginals p(x_i | x_obs) of an explicit joint distribution.

    ``support``: (n, L) int array of the distinct sequences with positive probability;
    ``probs``: (n,) their probabilities (summing to 1); ``V``: vocabulary size.
    Contexts of probability zero (a sampler can reach them) get uniform rows when
    ``fallback="uniform"`` (default) or raise with ``fallback="raise"``.

    Marginals are memoised per mask pattern: one pass groups the support by the observed values
    (O(n L)), after which every context with that mask is a lookup.

    >>> oracle = ExactOracle(np.array([[0, 0], [1, 1]]), np.array([0.5, 0.5]), V=2)
    >>> oracle(np.array([[-1, 1]]))[0, 0].tolist()
    [0.0, 1.0]
    """

    offsupport_uniform: bool

    def __init__(
        self, support: Any, probs: Any, V: int, *, fallback: str = "uniform", cache_floats: int = 2**23
    ):
        from entropy_unmask.data import check_joint

        self.support, self.probs = check_joint(support, probs, V)
        self.V = int(V)
        self.L = self.support.shape[1]
        if fallback not in ("uniform", "raise"):
            raise InputError(f"fallback must be 'uniform' or 'raise', got {fallback!r}")
        self.fallback = fallback
        self.offsupport_uniform = fallback == "uniform"
        self._pow = self.V ** np.arange(self.L, dtype=np.int64)
        self._cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._cache_floats = int(cache_floats)
        self._cached = 0

    def _groups(self, mask_bits: int) -> tuple[np.ndarray, np.ndarray]:
        hit = self._cache.get(mask_bits)
        if hit is not None:
            return hit
        obs = np.array([(mask_bits >> i) & 1 for i in range(self.L)], dtype=bool)
        codes = self.support[:, obs] @ self._pow[obs]
        ucodes, inv = np.unique(codes, return_inverse=True)
        G = ucodes.size
        Z = np.bincount(inv, weights=self.probs, minlength=G)
        marg = np.empty((G, self.L, self.V))
        for i in range(self.L):
            counts = np.bincount(inv * self.V + self.support[:, i], weights=self.probs, minlength=G * self.V)
            marg[:, i, :] = counts.reshape(G, self.V) / Z[:, None]
        if self._cached + marg.size > self._cache_floats:
            self._cache.clear()
            self._cached = 0
        self._cache[mask_bits] = (ucodes, marg)
        self._cached += marg.size
        return ucodes, marg

    def __call__(self, tokens: Any) -> np.ndarray:
        tok = check_tokens(tokens, self.L, self.V)
        B = tok.shape[0]
        out = np.empty((B, self.L, self.V))
        observed = tok >= 0
        bits = observed.astype(np.int64) @ (1 << np.arange(self.L, dtype=np.int64))
        for mb in np.unique(bits):
            rows = np.nonzero(bits == mb)[0]
            ucodes, marg = self._groups(int(mb))
            obs = observed[rows[0]]
            codes = tok[np.ix_(rows, np.nonzero(obs)[0])] @ self._pow[obs]
            pos = np.clip(np.searchsorted(ucodes, codes), 0, ucodes.size - 1)
            found = ucodes[pos] == codes
            if not found.all() and self.fallback == "raise":
                raise InputError("the oracle was asked about a context of probability zero under the joint")
            out[rows] = np.where(found[:, None, None], marg[pos], 1.0 / self.V)
        return out

    def conditional_joint(self, tokens_row: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """p(x_S | x_obs) as a flat array over the distinct values of x_S (for H(X_S | x_obs))."""
        tok = np.asarray(tokens_row)
        obs = tok >= 0
        match = (self.support[:, obs] == tok[obs]).all(axis=1)
        w = self.probs[match]
        if w.sum() <= 0:
            raise InputError("context of probability zero")
        codes = self.support[match][:, positions] @ self._pow[: len(positions)]
        _, inv = np.unique(codes, return_inverse=True)
        q = np.bincount(inv, weights=w)
        return q / q.sum()


class LogitsPredictor:
    """Adapter for a real masked diffusion LM.

    ``logits_fn(ids) -> logits`` takes an int64 array (B, L) of token ids in which masked positions
    hold ``mask_id`` and returns logits (B, L, V') as a numpy array or a torch tensor. The adapter
    replaces MASK (-1) by ``mask_id``, keeps the first ``V`` logits when ``V`` is given (drop trailing
    special tokens that way), gives the mask token itself probability 0 wherever its id falls among the
    kept logits (so a masked position never decodes to MASK), divides by ``temperature`` and applies a
    float64 softmax.

    Example for a Hugging Face masked diffusion LM (LLaDA-style), run locally::

        model = AutoModel.from_pretrained(path, local_files_only=True, trust_remote_code=True)
        pred = LogitsPredictor(lambda ids: model(torch.as_tensor(ids)).logits, mask_id=126336)
        x, iters = sample(pred, EntropySum(0.1), L=64, n=4, rng=0)

    >>> pred = LogitsPredictor(lambda ids: np.zeros(ids.shape + (3,)), mask_id=3)
    >>> pred(np.array([[-1, 0]]))[0, 0].tolist()
    [0.3333333333333333, 0.3333333333333333, 0.3333333333333333]
    """

    def __init__(
        self,
        logits_fn: Callable[[np.ndarray], Any],
        mask_id: int,
        *,
        V: int | None = None,
        temperature: float = 1.0,
    ):
        if not callable(logits_fn):
            raise InputError("logits_fn must be callable: ids (B, L) -> logits (B, L, V)")
        self.logits_fn = logits_fn
        self.mask_id = check_int("mask_id", mask_id, low=0)
        self.V = None if V is None else check_int("V", V, low=1)
        if self.V == 1 and self.mask_id == 0:
            raise InputError("V = 1 keeps only the mask token (mask_id 0): nothing left to decode to")
        self.temperature = check_number("temperature", temperature, low=0, low_open=True)

    def __call__(self, tokens: Any) -> np.ndarray:
        tok = check_tokens(tokens)
        if (tok == self.mask_id).any():  # the model could not tell it from a masked position
            raise InputError(f"a revealed token equals mask_id {self.mask_id}; it cannot be told from a mask")
        ids = np.where(tok == MASK, self.mask_id, tok)
        logits = self.logits_fn(ids)
        if hasattr(logits, "detach"):
            logits = logits.detach().to("cpu").double().numpy()
        z = np.asarray(logits, dtype=np.float64)
        if z.ndim != 3 or z.shape[:2] != tok.shape:
            raise InputError(f"logits_fn must return (B, L, V) logits, got shape {z.shape}")
        if self.V is not None:
            if z.shape[-1] < self.V:
                raise InputError(
                    f"logits_fn returned {z.shape[-1]} logits per position, fewer than V = {self.V}"
                )
            z = z[..., : self.V]
        if not np.isfinite(z).all():
            raise InputError("logits_fn returned NaN or infinite logits")
        if self.mask_id < z.shape[-1]:
            if z.shape[-1] == 1:
                raise InputError("logits_fn returned only the mask token's logit: nothing to decode to")
            # models such as LLaDA score their own mask id; a position must never "decode" to MASK
            z = z.copy()
            z[..., self.mask_id] = -np.inf
        z = z / self.temperature
        z = z - z.max(axis=-1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=-1, keepdims=True)
