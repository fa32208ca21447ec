"""Exact inference in the constrained mean-field posterior (the fast paths; tested against ``reference``).

Setting: a denoising step gives independent per-position distributions ``probs[i, v]`` (n x V, decoded
positions one-hot).  The constrained posterior is

    q_A(x) = prod_i p_i(x_i) * 1[x accepted by A] / Z.

The automaton's state is a hidden Markov chain, so with transfer matrices
``M_i[q, s] = sum_{v : T[q, v] = s} p_i(v)`` (built by one sparse product over the vocabulary) everything
follows from chain message passing:

* ``Z = e_start^T M_1 ... M_n 1_F``; backward messages ``b_n = 1_F``, ``b_{i-1} = M_i b_i``;
* sampling (sequential): state ``s_i ~ M_i[s_{i-1}, :] * b_i``, then token
  ``x_i ~ p_i(v) 1[T[s_{i-1}, v] = s_i]``;
* greedy: the same recursions in the (max, +) semiring on log-probabilities (the MAP string under q_A);
* log depth: a balanced tree of segment products ``M_{l+1} ... M_r`` (``log2 n`` levels of batched matrix
  products).  ``method="bisect"`` draws the final state, then every segment midpoint given its two boundary
  states, ``P(s_m = s | s_l, s_r) ∝ [M_{l+1..m}]_{s_l s} [M_{m+1..r}]_{s s_r}``, one tree level at a time.
  ``method="scan"`` gets every backward message from the tree (a Blelloch-style down-sweep), draws for every
  position an independent random map ``f_i : Q -> Q`` from the posterior transition kernel, and composes
  the maps with a parallel prefix scan (``s_i = f_i(...f_1(start))``).

All arithmetic is float64; products are renormalised (each message or segment matrix divided by its
largest entry, the logarithm of the factor carried separately), so ``log Z`` is exact in log space even
when ``Z`` underflows.  The dead state is dropped from every matrix: leaving the language loses mass.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch

from dlm_constrain.automaton import TokenDFA
from papershelf.errors import InputError

Method = Literal["sequential", "scan", "bisect"]
METHODS = ("sequential", "scan", "bisect")
_ROW_TOL = 1e-6


# ------------------------------------------------------------------------------------------ validation
def check_probs(probs, dfa: TokenDFA, *, name: str = "probs", normalize: bool = True) -> torch.Tensor:
    """Return ``probs`` as a float64 ``[n, V]`` tensor after checking it against ``dfa``.

    NaN, infinite or negative entries and all-zero rows raise :class:`InputError`.  Rows that do not sum
    to 1 (beyond 1e-6) are renormalised when ``normalize`` is True (the default; the posterior does not
    depend on a per-row scale) and rejected otherwise.
    """
    if isinstance(probs, np.ndarray):
        if probs.dtype == object or not np.issubdtype(probs.dtype, np.number):
            raise InputError(f"{name} must be a numeric array, got dtype {probs.dtype}")
        t = torch.from_numpy(np.ascontiguousarray(probs, dtype=np.float64))
    elif isinstance(probs, torch.Tensor):
        if probs.is_complex() or probs.dtype == torch.bool:
            raise InputError(f"{name} must be a real tensor, got {probs.dtype}")
        t = probs.detach().to("cpu", torch.float64)
    else:
        try:
            t = torch.as_tensor(np.asarray(probs, dtype=np.float64))
        except (TypeError, ValueError):
            raise InputError(f"{name} must be an array of probabilities") from None
    if t.ndim != 2:
        raise InputError(f"{name} must be 2-D [positions, vocab], got shape {tuple(t.shape)}")
    n, V = t.shape
    if n == 0:
        raise InputError(f"{name} has no positions (shape {tuple(t.shape)})")
    if V != dfa.vocab_size:
        raise InputError(
            f"vocabulary mismatch: {name} has {V} columns but {dfa.name} has a vocabulary of {dfa.vocab_size}"
        )
    if not torch.isfinite(t).all():
        bad = int((~torch.isfinite(t)).any(dim=1).nonzero()[0, 0])
        raise InputError(f"{name} must be finite (NaN or inf in row {bad})")
    if (t < 0).any():
        bad = int((t < 0).any(dim=1).nonzero()[0, 0])
        raise InputError(f"{name} must be non-negative (negative entry in row {bad})")
    sums = t.sum(dim=1)
    if (sums <= 0).any():
        bad = int((sums <= 0).nonzero()[0, 0])
        raise InputError(f"{name} row {bad} sums to 0")
    off = (sums - 1).abs() > _ROW_TOL
    if off.any():
        if not normalize:
            bad = int(off.nonzero()[0, 0])
            raise InputError(
                f"{name} row {bad} sums to {float(sums[bad]):.6g}, not 1 (pass normalize=True to rescale)"
            )
    return t / sums[:, None]


# ------------------------------------------------------------------------------------------ building
def _scatter(dfa: TokenDFA) -> torch.Tensor:
    """The sparse 0/1 matrix B^T [Q'*Q', V] with B^T[q*Q' + T[q,v], v] = 1 over live transitions."""
    key = "scatter"
    if key not in dfa._cache:
        Qe = dfa.dead
        T = dfa.table[:Qe]
        q, v = np.nonzero(T != dfa.dead)
        rows = q * Qe + T[q, v]
        idx = torch.from_numpy(np.stack([rows, v]))
        vals = torch.ones(len(v), dtype=torch.float64)
        dfa._cache[key] = torch.sparse_coo_tensor(
            idx, vals, (Qe * Qe, dfa.vocab_size), check_invariants=False
        ).coalesce()
    return dfa._cache[key]


def _table(dfa: TokenDFA) -> torch.Tensor:
    if "table_t" not in dfa._cache:
        dfa._cache["table_t"] = torch.from_numpy(dfa.table[: dfa.dead].copy())
    return dfa._cache["table_t"]


def _final(dfa: TokenDFA) -> torch.Tensor:
    return torch.from_numpy(dfa.accept[: dfa.dead].astype(np.float64))


def transfer_matrices(probs, dfa: TokenDFA, *, normalize: bool = True) -> torch.Tensor:
    """``M[i, q, s] = sum_{v : T[q,v] = s} probs[i, v]`` over the live states (float64 ``[n, Q', Q']``).

    One sparse-dense product ``B^T @ probs^T`` (the scatter over the vocabulary, ``O(n |Q| V)``).
    """
    p = check_probs(probs, dfa, normalize=normalize)
    return _transfer(p, dfa)


def _transfer(p: torch.Tensor, dfa: TokenDFA) -> torch.Tensor:
    Qe = dfa.dead
    if Qe == 0:
        return torch.zeros(p.shape[0], 0, 0, dtype=torch.float64)
    out = (_scatter(dfa) @ p.T.contiguous()).T
    return out.reshape(p.shape[0], Qe, Qe)


def _log_transfer(p: torch.Tensor, dfa: TokenDFA, chunk: int = 64) -> torch.Tensor:
    """``L[i, q, s] = max_{v : T[q,v] = s} log p_i(v)`` (``-inf`` when there is none)."""
    n, V = p.shape
    Qe = dfa.dead
    T = _table(dfa)
    out = torch.full((n, Qe, Qe + 1), -math.inf, dtype=torch.float64)
    logp = p.log()
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        src = logp[a:b, None, :].expand(b - a, Qe, V)
        idx = T[None].expand(b - a, Qe, V)
        out[a:b].scatter_reduce_(2, idx, src, reduce="amax")
    return out[:, :, :Qe]


# ------------------------------------------------------------------------------------------ messages
def _backward(M: torch.Tensor, final: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled backward messages: beta [n+1, Q'] (max 1, or all 0) and their log scales [n+1]."""
    n, Qe, _ = M.shape
    beta = torch.empty(n + 1, Qe, dtype=torch.float64)
    logm = torch.ones(n + 1, dtype=torch.float64)
    beta[n] = final
    for i in range(n, 0, -1):
        b = torch.mv(M[i - 1], beta[i])
        m = b.max().clamp_min(1e-300)  # an all-zero message stays zero; Z = 0 is detected below
        torch.div(b, m, out=beta[i - 1])
        logm[i - 1] = m
    logc = logm.log().flip(0).cumsum(0).flip(0)
    logc[n] = 0.0
    if not beta[0].max() > 0:
        zero = (beta.amax(-1) == 0).nonzero()
        logc[: int(zero.max()) + 1] = -math.inf
    return beta, logc


def _forward(M: torch.Tensor, start: int) -> torch.Tensor:
    """Scaled forward messages alpha [n+1, Q'] (each row divided by its max)."""
    n, Qe, _ = M.shape
    alpha = torch.zeros(n + 1, Qe, dtype=torch.float64)
    a = torch.zeros(Qe, dtype=torch.float64)
    a[start] = 1.0
    alpha[0] = a
    for i in range(n):
        a = a @ M[i]
        m = a.max()
        a = a / m if m > 0 else a
        alpha[i + 1] = a
    return alpha


def _zero_error(dfa: TokenDFA, n: int) -> InputError:
    if not dfa.completable(n)[n, dfa.start]:
        return InputError(f"{dfa.name} accepts no sequence of length {n} (partition function is 0)")
    return InputError(
        f"{dfa.name} has probability 0 at length {n} under the given probabilities (partition function is 0)"
    )


def log_partition(probs, dfa: TokenDFA, *, method: Method = "sequential", normalize: bool = True) -> float:
    """``log Z`` = log of the probability mass of accepted strings under ``prod_i probs[i]`` (float).

    Returns ``-inf`` when nothing accepted has positive probability (use :func:`check_feasible` to raise).
    ``method="scan"``/``"bisect"`` use the log-depth product tree, ``"sequential"`` the backward recursion.
    """
    p = check_probs(probs, dfa, normalize=normalize)
    if method not in METHODS:
        raise InputError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    if dfa.dead == 0:
        return -math.inf
    M = _transfer(p, dfa)
    final = _final(dfa)
    if method == "sequential":
        beta, logc = _backward(M, final)
        z = beta[0, dfa.start]
        return float(logc[0] + torch.log(z)) if z > 0 else -math.inf
    tree, scales = _upsweep_sum(M)
    top, ls = tree[-1][0], scales[-1][0]
    z = top[dfa.start] @ final
    return float(ls + torch.log(z)) if z > 0 else -math.inf


def check_feasible(probs, dfa: TokenDFA, *, normalize: bool = True) -> float:
    """``log Z``, raising :class:`InputError` naming the constraint and length when ``Z = 0``."""
    lz = log_partition(probs, dfa, normalize=normalize)
    if lz == -math.inf:
        raise _zero_error(dfa, int(np.shape(probs)[0]))
    return lz


def constrained_marginals(probs, dfa: TokenDFA, *, normalize: bool = True) -> torch.Tensor:
    """``P_{q_A}(x_i = v)`` for every position and token (float64 ``[n, V]``, rows sum to 1).

    ``P(x_i = v) = sum_q alpha_{i-1}[q] p_i(v) beta_i[T[q, v]] / Z``, computed with scaled messages and
    renormalised per row.
    """
    p = check_probs(probs, dfa, normalize=normalize)
    n, V = p.shape
    if dfa.dead == 0:
        raise _zero_error(dfa, n)
    M = _transfer(p, dfa)
    beta, _logc = _backward(M, _final(dfa))
    if not beta[0, dfa.start] > 0:
        raise _zero_error(dfa, n)
    alpha = _forward(M, dfa.start)
    T = _table(dfa)
    out = torch.empty(n, V, dtype=torch.float64)
    pad = torch.zeros(1, dtype=torch.float64)
    for i in range(n):
        b = torch.cat([beta[i + 1], pad])  # the dead state has beta = 0
        w = (alpha[i][:, None] * b[T]).sum(0) * p[i]
        out[i] = w / w.sum()
    return out


# ------------------------------------------------------------------------------------------ sampling helpers
def _categorical(weights: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
    """One index per row of non-negative ``weights [..., K]`` (inverse CDF; zero weights never chosen)."""
    cdf = weights.cumsum(-1)
    total = cdf[..., -1:]
    u = torch.rand(total.shape, dtype=torch.float64, generator=gen) * total
    idx = torch.searchsorted(cdf, u, right=True)
    return idx.squeeze(-1).clamp_(max=weights.shape[-1] - 1)


def _tokens_given_states(
    p: torch.Tensor, dfa: TokenDFA, states: torch.Tensor, greedy: bool, gen, chunk: int = 1 << 22
) -> torch.Tensor:
    """Tokens x_i given state pairs (s_{i-1}, s_i): x_i ∝ p_i(v) 1[T[s_{i-1}, v] = s_i] (or its argmax)."""
    S, _n1 = states.shape
    n, V = p.shape
    T = _table(dfa)
    out = torch.empty(S, n, dtype=torch.long)
    rows = max(1, chunk // max(1, n * V))
    for a in range(0, S, rows):
        b = min(S, a + rows)
        prev, nxt = states[a:b, :-1], states[a:b, 1:]
        ok = T[prev] == nxt[..., None]  # [s, n, V]
        if greedy:
            w = torch.where(ok, p.log()[None], torch.tensor(-math.inf, dtype=torch.float64))
            out[a:b] = w.argmax(-1)
        else:
            out[a:b] = _categorical(p[None] * ok, gen)
    return out


def _mm_sum(A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    C = A @ B
    m = C.amax(dim=(-2, -1)).clamp_min(1e-300)
    return C / m[..., None, None], m.log()


def _mm_max(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return (A[..., :, :, None] + B[..., None, :, :]).amax(dim=-2)


def _pad_pow2(M: torch.Tensor, fill_identity: float, fill_off: float) -> torch.Tensor:
    n, Qe, _ = M.shape
    N = 1 << max(0, (n - 1).bit_length())
    if N == n:
        return M
    eye = torch.full((Qe, Qe), fill_off, dtype=M.dtype)
    eye.fill_diagonal_(fill_identity)
    return torch.cat([M, eye.expand(N - n, Qe, Qe)], dim=0)


def _upsweep_sum(M: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Levels of segment products (each renormalised) and their log scales; level 0 is M padded."""
    level = _pad_pow2(M, 1.0, 0.0)
    m = level.amax(dim=(-2, -1)).clamp_min(1e-300)
    level = level / m[:, None, None]
    scale = m.log()
    tree, scales = [level], [scale]
    while level.shape[0] > 1:
        C, s = _mm_sum(level[0::2], level[1::2])
        scale = scale[0::2] + scale[1::2] + s
        level = C
        tree.append(level)
        scales.append(scale)
    return tree, scales


def _upsweep_max(L: torch.Tensor) -> list[torch.Tensor]:
    level = _pad_pow2(L, 0.0, -math.inf)
    tree = [level]
    while level.shape[0] > 1:
        level = _mm_max(level[0::2], level[1::2])
        tree.append(level)
    return tree


def _downsweep(tree: list[torch.Tensor], final: torch.Tensor, greedy: bool) -> torch.Tensor:
    """Messages at every boundary 0..N from the product tree: ``b_l = [M_{l+1..r}] b_r`` level by level.

    Sum semiring: each message is renormalised (scale irrelevant for sampling); max semiring: log values.
    """
    N = tree[0].shape[0]
    Qe = final.shape[0]
    msg = torch.empty(N + 1, Qe, dtype=torch.float64)
    msg[N] = final if not greedy else torch.where(final > 0, 0.0, -math.inf)
    top = tree[-1][0]
    msg[0] = _apply(top, msg[N][None], greedy)[0]
    for k in range(len(tree) - 1, 0, -1):
        width = 1 << k
        left = tree[k - 1][0::2]  # [nodes, Q, Q], covering [l, m)
        right = tree[k - 1][1::2]  # covering [m, r)
        r_idx = torch.arange(width, N + 1, width)
        m_idx = r_idx - width // 2
        msg[m_idx] = _apply(right, msg[r_idx], greedy)
        del left
    return msg


def _apply(A: torch.Tensor, b: torch.Tensor, greedy: bool) -> torch.Tensor:
    if greedy:
        return (A + b[:, None, :]).amax(-1)
    out = (A @ b[..., None])[..., 0]
    return out / out.amax(-1, keepdim=True).clamp_min(1e-300)


# ------------------------------------------------------------------------------------------ samplers
def _states_sequential(M, final, start, S, greedy, gen, L, beta):
    n, Qe, _ = M.shape
    states = torch.empty(S, n + 1, dtype=torch.long)
    states[:, 0] = start
    if greedy:
        delta = torch.empty(n + 1, Qe, dtype=torch.float64)
        delta[n] = torch.where(final > 0, 0.0, -math.inf)
        for i in range(n, 0, -1):
            delta[i - 1] = (L[i - 1] + delta[i][None]).amax(-1)
        for i in range(1, n + 1):
            states[:, i] = (L[i - 1][states[:, i - 1]] + delta[i][None]).argmax(-1)
        return states
    for i in range(1, n + 1):
        w = M[i - 1][states[:, i - 1]] * beta[i][None]
        states[:, i] = _categorical(w, gen)
    return states


def _states_bisect(tree, final, start, n, S, greedy, gen):
    N = tree[0].shape[0]
    states = torch.empty(S, N + 1, dtype=torch.long)
    states[:, 0] = start
    top = tree[-1][0]
    if greedy:
        states[:, N] = (top[start] + torch.where(final > 0, 0.0, -math.inf)).argmax()
    else:
        states[:, N] = _categorical((top[start] * final).expand(S, -1), gen)
    for k in range(len(tree) - 1, 0, -1):
        width = 1 << k
        left, right = tree[k - 1][0::2], tree[k - 1][1::2]  # [nodes, Q, Q]
        l_idx = torch.arange(0, N, width)
        a = states[:, l_idx]  # [S, nodes]
        b = states[:, l_idx + width]
        nodes = torch.arange(len(l_idx))
        lw = left[nodes[None, :], a]  # [S, nodes, Q]: row a of the left segment
        rw = right[nodes[None, :], :, b]  # [S, nodes, Q]: column b of the right segment
        if greedy:
            mid = (lw + rw).argmax(-1)
        else:
            mid = _categorical(lw * rw, gen)
        states[:, l_idx + width // 2] = mid
    return states[:, : n + 1]


def _states_scan(tree, final, start, n, S, greedy, gen, level0):
    """Posterior kernels from the down-swept messages, random maps per position, prefix composition."""
    msg = _downsweep(tree, final, greedy)[: n + 1]
    Qe = final.shape[0]
    K = level0[:n]  # [n, Q, Q] (sum: M_i scaled; max: log M_i)
    if greedy:
        maps = (K + msg[1:, None, :]).argmax(-1).expand(S, n, Qe)
    else:
        w = K * msg[1:, None, :]  # rows of never-visited states may be all 0: any map entry will do
        maps = _categorical(w[None].expand(S, n, Qe, Qe), gen)  # [S, n, Q]
    # inclusive prefix composition g_i = f_i ∘ ... ∘ f_1 (Hillis–Steele, log2 n rounds of gathers)
    g = maps.clone()
    shift = 1
    while shift < n:
        prev = g[:, :-shift]  # g_{i-shift}
        g = torch.cat([g[:, :shift], torch.gather(g[:, shift:], 2, prev)], dim=1)
        shift *= 2
    states = torch.empty(S, n + 1, dtype=torch.long)
    states[:, 0] = start
    states[:, 1:] = g[:, :, start]
    return states


def sample(
    probs,
    dfa: TokenDFA,
    num_samples: int | None = None,
    *,
    method: Method = "sequential",
    greedy: bool = False,
    generator: torch.Generator | None = None,
    normalize: bool = True,
) -> torch.Tensor:
    """Exact samples from ``q_A`` (or its MAP string when ``greedy``): LongTensor ``[n]`` or ``[S, n]``.

    ``method``: ``"sequential"`` (backward messages, forward sampling: depth n), ``"bisect"`` (log-depth
    midpoint sampling) or ``"scan"`` (log-depth messages + prefix-composed random maps).  All three draw from
    the same distribution; with ``greedy`` all three return the same most probable accepted string (up to
    exact ties).  Raises :class:`InputError` when the constraint has probability 0 at this length.
    """
    p = check_probs(probs, dfa, normalize=normalize)
    if method not in METHODS:
        raise InputError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    S = 1 if num_samples is None else int(num_samples)
    if S < 1:
        raise InputError(f"num_samples must be a positive integer, got {num_samples!r}")
    n = p.shape[0]
    if dfa.dead == 0:
        raise _zero_error(dfa, n)
    final = _final(dfa)
    M = _transfer(p, dfa)
    L = _log_transfer(p, dfa) if greedy else None
    if method == "sequential":
        beta, _ = _backward(M, final)
        if not beta[0, dfa.start] > 0:
            raise _zero_error(dfa, n)
        states = _states_sequential(M, final, dfa.start, S, greedy, generator, L, beta)
    else:
        if greedy:
            tree = _upsweep_max(L)
            feasible = bool(
                torch.isfinite((tree[-1][0][dfa.start] + torch.where(final > 0, 0.0, -math.inf)).max())
            )
        else:
            tree, _ = _upsweep_sum(M)
            feasible = bool(tree[-1][0][dfa.start] @ final > 0)
        if not feasible:
            raise _zero_error(dfa, n)
        if method == "bisect":
            states = _states_bisect(tree, final, dfa.start, n, S, greedy, generator)
        else:
            states = _states_scan(tree, final, dfa.start, n, S, greedy, generator, tree[0])
    tokens = _tokens_given_states(p, dfa, states, greedy, generator)
    return tokens[0] if num_samples is None else tokens


def map_decode(
    probs, dfa: TokenDFA, *, method: Method = "sequential", normalize: bool = True
) -> torch.Tensor:
    """The most probable accepted string under ``prod_i probs[i]`` (max-product / Viterbi): LongTensor [n]."""
    return sample(probs, dfa, method=method, greedy=True, normalize=normalize)
