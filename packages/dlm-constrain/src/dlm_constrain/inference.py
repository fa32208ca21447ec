"""Exact inference in the constrained mean-field posterior (the fast paths; tested against ``reference``).

Setting: a denoising step gives independent per-position distributions ``probs[i, v]`` (n x V, decoded
positions one-hot).  The constrained posterior is

    q_A(x) = prod_i p_i(x_i) * 1[x accepted by A] / Z.

The automaton's state is a hidden Markov chain, so with transfer matrices
``M_i[q, s] = sum_{v : T[q, v] = s} p_i(v)`` everything follows from chain message passing.  Real token
automata connect few state pairs (the bench's JSON automaton: 97 of 56^2), so the matrices of all
positions are built at once on that pair list: tokens that move every state alike form a class, the
vocabulary is summed into classes once (``index_add``, ``n x V``), and a 0/1 ``Bc [C, P]`` maps classes
to pairs (a JSON schema over a 128K-token vocabulary: ~140 classes, ~280 pairs):

* ``Z = e_start^T M_1 ... M_n 1_F``; backward messages ``b_n = 1_F``, ``b_{i-1} = M_i b_i``;
* sampling (sequential): state ``s_i ~ M_i[s_{i-1}, :] * b_i``, then token
  ``x_i ~ p_i(v) 1[T[s_{i-1}, v] = s_i]``;
* greedy: the same recursions in the (max, +) semiring on log-probabilities (the MAP string under q_A);
* log depth: a balanced tree of segment products ``M_{l+1} ... M_r`` (``log2 n`` levels; each level is one
  gather-multiply-scatter over the precomputed sparse "triples" ``(q, r, s)`` of the level's sparsity
  pattern, for all nodes of the level at once, or one batched matmul when the pattern is dense).
  ``method="bisect"`` draws the final state, then every segment midpoint given its two boundary
  states, ``P(s_m = s | s_l, s_r) ∝ [M_{l+1..m}]_{s_l s} [M_{m+1..r}]_{s s_r}``, one tree level at a time.
  ``method="scan"`` gets every backward message from the tree (a Blelloch-style down-sweep), draws for every
  position an independent random map ``f_i : Q -> Q`` from the posterior transition kernel, and composes
  the maps with a parallel prefix scan (``s_i = f_i(...f_1(start))``).

No Python loop runs over positions or states except in ``sequential`` (whose loop over positions is its
point: depth n, a mat-vec per position).  All arithmetic is float64; products are renormalised (each
message or segment matrix divided by its largest entry, the logarithm of the factor carried separately),
so ``log Z`` is exact in log space even when ``Z`` underflows.  The dead state is dropped from every
matrix: leaving the language loses mass.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch

from dlm_constrain.automaton import TokenDFA, _token_classes
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
        if probs.dtype == object or not np.issubdtype(probs.dtype, np.number) or np.iscomplexobj(probs):
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
    sums = t.sum(dim=1)
    if bool(torch.isfinite(sums).all()) and bool(t.amin() >= 0) and bool((sums > 0).all()):
        off = (sums - 1).abs() > _ROW_TOL  # the common case: two reductions, no temporaries
        if not normalize and bool(off.any()):
            bad = int(off.nonzero()[0, 0])
            raise InputError(
                f"{name} row {bad} sums to {float(sums[bad]):.6g}, not 1 (pass normalize=True to rescale)"
            )
        return t / sums[:, None]
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
    if normalize and not bool(torch.isfinite(sums).all()):
        # finite entries whose sum overflows (e.g. 1e308): divide by the row maximum first, which is
        # exact in the posterior (a per-row scale) and keeps the sum finite (at most V)
        t = t / t.amax(dim=1, keepdim=True)
        sums = t.sum(dim=1)
    off = (sums - 1).abs() > _ROW_TOL
    if off.any():
        if not normalize:
            bad = int(off.nonzero()[0, 0])
            raise InputError(
                f"{name} row {bad} sums to {float(sums[bad]):.6g}, not 1 (pass normalize=True to rescale)"
            )
    return t / sums[:, None]


# ------------------------------------------------------------------------------------------ structure
class _Plan:
    """Everything about an automaton's table that the hot path needs, precomputed once (cached on it).

    Token classes: tokens whose column ``T[:, v]`` is the same (``cls[v]``; ``C`` classes, ~100 for a JSON
    schema over a 128K vocabulary).  Live class edges ``(q, c) -> s``, sorted by ``(q, s, c)``, and the
    distinct state pairs ``(q, s)`` they connect (row-major, ``P`` of them; ``P << Q^2`` for real
    automata).  ``Bc[c, k]`` is 1 when class ``c`` moves pair ``k``'s source to its target, so the compact
    transfer matrices of all positions are the class sums of ``probs`` times ``Bc`` (``[n, P]``): the
    sparse scatter over the vocabulary is one ``index_add`` of ``n x V`` entries.  ``pair_cls[k]`` lists
    pair ``k``'s classes, ``members``/``mstart`` each class's tokens.  Product trees (sparsity patterns of
    segment products, one per tree size) are cached here too; none of this depends on the start state or
    the accepting set.
    """

    def __init__(self, dfa: TokenDFA) -> None:
        Qe, V = dfa.dead, dfa.vocab_size
        T = dfa.table[:Qe]
        # tokens with the same column of T (the same move from every state) form a class; real
        # vocabularies have ~100 classes per automaton, so everything below works on classes, and a
        # position's vocabulary is touched once, by the class sums (one pass over probs)
        cls, reps = _token_classes(T)
        C = len(reps)
        Tc = T[:, reps]
        q, c = np.nonzero(Tc != dfa.dead)
        s = Tc[q, c].astype(np.int64)
        order = np.lexsort((c, s, q))
        q, c, s = q[order], c[order], s[order]
        flat, edge_pair = np.unique(q * Qe + s, return_inverse=True)
        edge_pair = edge_pair.reshape(-1)
        P = len(flat)
        self.Qe, self.V, self.P, self.C = Qe, V, P, C
        self.pair_q = torch.from_numpy(flat // Qe)
        self.pair_s = torch.from_numpy(flat % Qe)
        self.pair_flat = torch.from_numpy(flat)
        self.cls = torch.from_numpy(cls)
        # Bc[c, k] = 1: class c moves pair k's source to its target
        Bc = torch.zeros(C, P, dtype=torch.float64)
        Bc[torch.from_numpy(c), torch.from_numpy(edge_pair)] = 1.0
        self.Bc = Bc
        self.edge_c = torch.from_numpy(c)  # the class-level edges (q, c) -> s and their pair
        self.edge_q = torch.from_numpy(q)
        self.edge_s = torch.from_numpy(s)
        self.edge_pair = torch.from_numpy(edge_pair)
        # the classes of each pair, padded with the sentinel class C (row P: "no such pair")
        counts = np.bincount(edge_pair, minlength=P)
        Lmax = max(1, int(counts.max()) if P else 1)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        pair_cls = np.full((P + 1, Lmax), C, dtype=np.int64)
        pair_cls[edge_pair, np.arange(len(c)) - starts[edge_pair]] = c
        self.pair_cls = pair_cls
        # the tokens of each class, by id: members[mstart[c] : mstart[c + 1]]
        self.members = np.argsort(cls, kind="stable")
        self.mstart = np.concatenate([[0], np.cumsum(np.bincount(cls, minlength=C))]).astype(np.int64)
        pair_index = np.full((Qe, Qe), P, dtype=np.int64)
        pair_index[flat // Qe, flat % Qe] = np.arange(P)
        self.pair_index = torch.from_numpy(pair_index)
        self.trees: dict[tuple[int, bool], list[_Level]] = {}

    def levels(self, N: int, padded: bool) -> list[_Level]:
        """Sparsity patterns of the product tree over ``N`` (a power of two) leaves."""
        key = (N, padded)
        if key not in self.trees:
            Qe = self.Qe
            flat = self.pair_flat.numpy()
            if padded:  # identity matrices pad the sequence to a power of two
                flat = np.union1d(flat, np.arange(Qe) * (Qe + 1))
            lv = _Level(flat, Qe)
            out = [lv]
            for _ in range(N.bit_length() - 1):
                lv = lv.square()
                out.append(lv)
            self.trees[key] = out
        return self.trees[key]


_DENSE_FILL = 0.5  # store a product level densely once this fraction of all Q^2 pairs can be non-zero
_DENSE_WORK = 1 / 8  # multiply densely (batched matmul) once the sparse triples exceed this share of Q^3
# (measured on CPU: with the bench automaton, 97..496 pairs per level, sparse gathers beat batched
# float64 matmuls at every level even for a single node)


class _Level:
    """The sparsity pattern of one product-tree level: ``P`` pairs (row-major) and how to form the next.

    Values of a level are stored compactly and pair-major, ``[P + 1, nodes]`` (row ``P`` is a zero/-inf
    sentinel, so ``vals[idx[a, s], j]`` reads entry ``(a, s)`` of node ``j``, zero where no path exists);
    pair-major rows make every gather and scatter of a level a contiguous row operation.
    """

    def __init__(self, flat: np.ndarray, Qe: int) -> None:
        self.Qe = Qe
        self.dense = len(flat) == Qe * Qe
        self.flat_np = flat
        self.P = len(flat)
        self.flat = torch.from_numpy(flat)
        self.pq = torch.from_numpy(flat // Qe)
        self.ps = torch.from_numpy(flat % Qe)
        idx = np.full((Qe, Qe), self.P, dtype=np.int64)
        idx[flat // Qe, flat % Qe] = np.arange(self.P)
        self.idx_np = idx
        self.idx = torch.from_numpy(idx)
        self.idxT = torch.from_numpy(np.ascontiguousarray(idx.T))
        self.a = self.b = self.c = None  # sparse product triples to the next level

    def square(self) -> _Level:
        """The pattern of a product of two nodes of this level, with the triples that compute it."""
        Qe = self.Qe
        pq, ps = self.flat_np // Qe, self.flat_np % Qe
        if self.dense:
            return _Level(np.arange(Qe * Qe), Qe)
        a_list, b_list = [], []
        by_target = [np.nonzero(ps == r)[0] for r in range(Qe)]
        by_source = [np.nonzero(pq == r)[0] for r in range(Qe)]
        work = sum(len(x) * len(y) for x, y in zip(by_target, by_source))
        if work > _DENSE_WORK * Qe**3:
            return _Level(np.arange(Qe * Qe), Qe)
        for r in range(Qe):
            left, right = by_target[r], by_source[r]
            if len(left) and len(right):
                a_list.append(np.repeat(left, len(right)))
                b_list.append(np.tile(right, len(left)))
        a = np.concatenate(a_list) if a_list else np.zeros(0, dtype=np.int64)
        b = np.concatenate(b_list) if b_list else np.zeros(0, dtype=np.int64)
        key = pq[a] * Qe + ps[b]
        flat, c = np.unique(key, return_inverse=True)
        if len(flat) > _DENSE_FILL * Qe * Qe:
            return _Level(np.arange(Qe * Qe), Qe)
        self.a, self.b, self.c = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c.reshape(-1))
        self.ab = torch.cat([self.a, self.b])
        return _Level(flat, Qe)

    def gather_plan(self, nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Flat-index tables for reading a level with ``nodes`` nodes (pair-major ``[P + 1, nodes]``).

        ``tab[a]`` (``a < Q``) are the flat offsets of row ``a``'s entries and ``tab[Q + b]`` those of
        column ``b``'s; ``off[0][j] = 2j`` and ``off[1][j] = 2j + 1`` are segment ``j``'s children.
        """
        if getattr(self, "_gp", None) is None or self._gp[0] != nodes:
            tab = torch.cat([self.idx, self.idxT]) * nodes
            left = torch.arange(0, nodes, 2)[:, None]
            self._gp = (nodes, tab, torch.stack([left, left + 1])[:, None])
        return self._gp[1], self._gp[2]

    def gather_plan_np(self, nodes: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`gather_plan` as numpy arrays: ``tab [2Q, Q]`` and the left children's offsets ``2j``."""
        if getattr(self, "_gpn", None) is None or self._gpn[0] != nodes:
            tab = np.concatenate([self.idx.numpy(), self.idxT.numpy()]) * nodes
            self._gpn = (nodes, tab, np.arange(0, nodes, 2)[:, None])
        return self._gpn[1], self._gpn[2]

    def to_dense(self, vals: torch.Tensor, fill: float) -> torch.Tensor:
        """``[nodes, Q, Q]`` matrices from pair-major compact values ``[P + 1, nodes]``."""
        nodes, Qe = vals.shape[1], self.Qe
        if self.dense:
            return vals[: Qe * Qe].T.reshape(nodes, Qe, Qe)
        out = torch.full((Qe * Qe, nodes), fill, dtype=vals.dtype)
        out.index_copy_(0, self.flat, vals[: self.P])
        return out.T.reshape(nodes, Qe, Qe)


def _plan(dfa: TokenDFA) -> _Plan:
    if "plan" not in dfa._cache:
        dfa._cache["plan"] = _Plan(dfa)
    return dfa._cache["plan"]


def _class_sums(p: torch.Tensor, plan: _Plan) -> torch.Tensor:
    """``pc[i, c] = sum_{v in class c} p_i(v)`` (float64 ``[n, C]``): the one pass over the vocabulary.

    A float32 ``p`` (the decoding loop's softmax) is summed in float64, a few rows at a time, so no
    float64 copy of all of ``p`` is made; the sums equal those of ``p.double()``.
    """
    n, V = p.shape
    out = torch.zeros(n, plan.C, dtype=torch.float64)
    if p.dtype == torch.float64:
        return out.index_add_(1, plan.cls, p)
    rows = max(1, (1 << 20) // max(1, V))
    for a in range(0, n, rows):
        out[a : a + rows].index_add_(1, plan.cls, p[a : a + rows].double())
    return out


def _class_max(p: torch.Tensor, plan: _Plan) -> torch.Tensor:
    """``pm[i, c] = max_{v in class c} p_i(v)`` (``[n, C]``; probabilities are >= 0, so 0 is neutral)."""
    n = p.shape[0]
    out = torch.zeros(n, plan.C, dtype=p.dtype)
    return out.scatter_reduce_(1, plan.cls.expand(n, -1), p, "amax").double()  # a max is exact


def _final(dfa: TokenDFA) -> torch.Tensor:
    return torch.from_numpy(dfa.accept[: dfa.dead].astype(np.float64))


def _gather(values: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``values.view(-1)[idx]`` (a 1-D ``index_select``: on CPU several times faster than ``take``)."""
    return values.view(-1).index_select(0, idx.reshape(-1)).view(idx.shape)


# ------------------------------------------------------------------------------------------ building
def transfer_matrices(probs, dfa: TokenDFA, *, normalize: bool = True) -> torch.Tensor:
    """``M[i, q, s] = sum_{v : T[q,v] = s} probs[i, v]`` over the live states (float64 ``[n, Q', Q']``).

    One dense product ``probs @ B`` onto the automaton's distinct state pairs, scattered into the
    ``Q' x Q'`` grid (the scatter over the vocabulary, ``O(n V P)``).
    """
    p = check_probs(probs, dfa, normalize=normalize)
    if dfa.dead == 0:
        return torch.zeros(p.shape[0], 0, 0, dtype=torch.float64)
    plan = _plan(dfa)
    return _dense(_compact(p, plan), plan, 0.0)


def _compact(p: torch.Tensor, plan: _Plan, pc: torch.Tensor | None = None) -> torch.Tensor:
    """Transfer matrices of all positions on the pair list: ``[n, P]`` (``pc``: the class sums, if known)."""
    return (_class_sums(p, plan) if pc is None else pc) @ plan.Bc


def _compact_log(pm: torch.Tensor, plan: _Plan) -> torch.Tensor:
    """``L[i, k] = max_{v moving pair k} log p_i(v)`` from the class maxima ``pm`` ([n, P]; max-product)."""
    n = pm.shape[0]
    src = pm.index_select(1, plan.edge_c).log_()
    out = torch.full((n, plan.P), -math.inf, dtype=pm.dtype)
    return out.scatter_reduce_(1, plan.edge_pair.expand(n, -1), src, "amax")


def _dense(Mc: torch.Tensor, plan: _Plan, fill: float) -> torch.Tensor:
    n, Qe = Mc.shape[0], plan.Qe
    out = torch.full((n, Qe * Qe), fill, dtype=Mc.dtype)
    out.index_copy_(1, plan.pair_flat, Mc)
    return out.view(n, Qe, Qe)


# ------------------------------------------------------------------------------------------ messages
def _backward(M: torch.Tensor, final: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled backward messages beta [n+1, Q'] (max 1) and ``log Z`` pieces: returns (beta, logZ-scale).

    Depth n: one mat-vec, one max and one division per position.  The second value is
    ``log(prod of the scales)``, so ``log Z = scale + log beta[0, start]``; ``-inf`` when a message
    vanishes (then every earlier message is reported as 0).
    """
    n, Qe, _ = M.shape
    beta = torch.empty(n + 1, Qe, dtype=torch.float64)
    scale = torch.empty(n, dtype=torch.float64)
    beta[n] = final
    Ms, bs, ms = M.unbind(0), beta.unbind(0), scale.unbind(0)
    for i in range(n, 0, -1):
        b = torch.mv(Ms[i - 1], bs[i])
        torch.amax(b, 0, out=ms[i - 1])
        torch.div(b, ms[i - 1], out=bs[i - 1])
    if not bool((scale > 0).all()):  # a vanished message: Z = 0 (NaNs above it are zeros)
        beta.nan_to_num_(nan=0.0)
        last = int((scale <= 0).nonzero().max())
        beta[: last + 1] = 0.0
        return beta, torch.tensor(-math.inf, dtype=torch.float64)
    return beta, scale.log().sum()


def _forward(M: torch.Tensor, start: int) -> torch.Tensor:
    """Scaled forward messages alpha [n+1, Q'] (each row divided by its max)."""
    n, Qe, _ = M.shape
    alpha = torch.zeros(n + 1, Qe, dtype=torch.float64)
    alpha[0, start] = 1.0
    Ms, al = M.unbind(0), alpha.unbind(0)
    m = torch.empty((), dtype=torch.float64)
    for i in range(n):
        a = torch.mv(Ms[i].T, al[i])
        torch.amax(a, 0, out=m)
        torch.div(a, m.clamp_min_(1e-300), out=al[i + 1])
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
    plan = _plan(dfa)
    Mc = _compact(p, plan)
    if method == "sequential":
        beta, scale = _backward(_dense(Mc, plan, 0.0), _final(dfa))
        z = beta[0, dfa.start]
        return float(scale + torch.log(z)) if z > 0 else -math.inf
    tree, levels, scales = _upsweep(Mc, plan, greedy=False, scales=True)
    z = (tree[-1][levels[-1].idx[dfa.start], 0] * _final(dfa)).sum()
    return float(scales[0] + torch.log(z)) if z > 0 else -math.inf  # NaN (Z = 0) is not > 0


def check_feasible(probs, dfa: TokenDFA, *, normalize: bool = True) -> float:
    """``log Z``, raising :class:`InputError` naming the constraint and length when ``Z = 0``."""
    lz = log_partition(probs, dfa, normalize=normalize)
    if lz == -math.inf:
        raise _zero_error(dfa, int(np.shape(probs)[0]))
    return lz


def constrained_marginals(probs, dfa: TokenDFA, *, normalize: bool = True) -> torch.Tensor:
    """``P_{q_A}(x_i = v)`` for every position and token (float64 ``[n, V]``, rows sum to 1).

    ``P(x_i = v) = sum_q alpha_{i-1}[q] p_i(v) beta_i[T[q, v]] / Z``, computed with scaled messages and
    renormalised per row; the sum over states runs over the live edges of all positions at once.
    """
    p = check_probs(probs, dfa, normalize=normalize)
    return _marginals(p, dfa)


def _marginals(p: torch.Tensor, dfa: TokenDFA) -> torch.Tensor:
    n = p.shape[0]
    if dfa.dead == 0:
        raise _zero_error(dfa, n)
    plan = _plan(dfa)
    M = _dense(_compact(p, plan), plan, 0.0)
    beta, _ = _backward(M, _final(dfa))
    if not beta[0, dfa.start] > 0:
        raise _zero_error(dfa, n)
    alpha = _forward(M, dfa.start)
    w = alpha[:n].index_select(1, plan.edge_q) * beta[1:].index_select(1, plan.edge_s)  # [n, E]
    wc = torch.zeros(n, plan.C, dtype=torch.float64).index_add_(1, plan.edge_c, w)
    out = wc.index_select(1, plan.cls).mul_(p)
    return out.div_(out.sum(1, keepdim=True))


# ------------------------------------------------------------------------------------------ product tree
def _upsweep(
    Mc: torch.Tensor, plan: _Plan, greedy: bool, scales: bool = False
) -> tuple[list[torch.Tensor], list[_Level], torch.Tensor | None]:
    """All segment products of a balanced tree, one batched step per level.

    Level 0 holds the (compact) transfer matrices padded with identities to ``N = 2^k`` positions;
    level ``k + 1`` node ``j`` is the product of level-``k`` nodes ``2j`` and ``2j + 1``, computed by a
    gather-multiply-scatter over the precomputed sparse triples (or one ``torch.bmm`` once the pattern is
    dense).  Values are pair-major ``[P + 1, nodes]``.  Sum semiring: every node is divided by its max
    entry, and with ``scales`` the logarithms are accumulated (returned for the top node, as a 1-tensor;
    sampling does not need them).  An all-zero node (no path through its segment, so ``Z = 0``) becomes
    NaN and makes the top NaN, which the callers read as infeasible.  Max semiring (``greedy``): log
    values, no scales.
    """
    n = Mc.shape[0]
    N = 1 << max(0, (n - 1).bit_length())
    levels = plan.levels(N, N > n)
    lv0 = levels[0]
    fill = -math.inf if greedy else 0.0
    vals = torch.full((lv0.P + 1, N), fill, dtype=torch.float64)
    if lv0.P == plan.P:
        vals[: plan.P, :n] = Mc.T
    else:
        vals[:, :n].index_copy_(0, lv0.idx[plan.pair_q, plan.pair_s], Mc.T)
    if N > n:
        vals[lv0.idx.diagonal(), n:] = 0.0 if greedy else 1.0
    scale = None
    if not greedy:
        m = vals.amax(0, keepdim=True)
        vals.div_(m)
        if scales:
            scale = m.log_().view(-1)
    tree = [vals]
    for k in range(len(levels) - 1):
        lv, nxt = levels[k], levels[k + 1]
        nodes = vals.shape[1] // 2
        if nxt.dense and lv.a is None:
            A, B = lv.to_dense(vals[:, 0::2], fill), lv.to_dense(vals[:, 1::2], fill)
            C = _maxplus(A, B) if greedy else torch.bmm(A, B)
            out = torch.cat([C.view(nodes, nxt.P).T, C.new_full((1, nodes), fill)], 0)
        else:
            g = vals.index_select(0, lv.ab)  # [2T, 2 nodes]: both factors of every triple, all nodes
            T = lv.c.shape[0]
            out = torch.full((nxt.P + 1, nodes), fill, dtype=torch.float64)
            if greedy:
                out.scatter_reduce_(0, lv.c[:, None].expand(-1, nodes), g[:T, 0::2] + g[T:, 1::2], "amax")
            else:
                out.index_add_(0, lv.c, g[:T, 0::2] * g[T:, 1::2])
        if not greedy:
            m = out.amax(0, keepdim=True)
            out.div_(m)
            if scales:
                scale = scale[0::2] + scale[1::2] + m.log_().view(-1)
        vals = out
        tree.append(vals)
    return tree, levels, scale


def _maxplus(A: torch.Tensor, B: torch.Tensor, budget: int = 1 << 22) -> torch.Tensor:
    """``out[j] = max_r A[j, :, r] + B[j, r, :]`` in chunks of nodes (max-plus batched product)."""
    nodes, Qe, _ = A.shape
    out = torch.empty(nodes, Qe, Qe, dtype=A.dtype)
    step = max(1, budget // max(1, Qe**3))
    for a in range(0, nodes, step):
        b = min(nodes, a + step)
        out[a:b] = (A[a:b, :, :, None] + B[a:b, None, :, :]).amax(dim=2)
    return out


def _downsweep(tree, levels, final: torch.Tensor, greedy: bool) -> torch.Tensor:
    """Backward messages at every boundary 0..N from the product tree: ``b_l = [M_{l+1..r}] b_r``.

    One batched (sparse) mat-vec per level.  Sum semiring: each message divided by its max; max
    semiring: log values.
    """
    N = tree[0].shape[1]
    Qe = final.shape[0]
    msg = torch.empty(N + 1, Qe, dtype=torch.float64)
    msg[N] = final if not greedy else torch.where(final > 0, 0.0, -math.inf)
    msg[0] = _apply(tree[-1], levels[-1], msg[N][None], greedy)[0]
    for k in range(len(tree) - 1, 0, -1):
        width = 1 << k
        r_idx = torch.arange(width, N + 1, width)
        msg[r_idx - width // 2] = _apply(tree[k - 1][:, 1::2], levels[k - 1], msg[r_idx], greedy)
    return msg


def _apply(vals: torch.Tensor, lv: _Level, b: torch.Tensor, greedy: bool) -> torch.Tensor:
    """``out[j, q] = sum_s A_j[q, s] b_j[s]`` (or max-plus) for pair-major compact ``A``: ``[nodes, Q]``."""
    nodes = vals.shape[1]
    w = b.T.contiguous().index_select(0, lv.ps)  # [P, nodes]
    if greedy:
        w.add_(vals[: lv.P])
        out = torch.full((lv.Qe, nodes), -math.inf, dtype=torch.float64)
        return out.scatter_reduce_(0, lv.pq[:, None].expand(-1, nodes), w, "amax").T
    w.mul_(vals[: lv.P])
    out = torch.zeros(lv.Qe, nodes, dtype=torch.float64).index_add_(0, lv.pq, w)
    return out.div_(out.amax(0, keepdim=True).clamp_min_(1e-300)).T


# ------------------------------------------------------------------------------------------ sampling helpers
def _categorical(weights: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
    """One index per row of non-negative ``weights [..., K]`` (inverse CDF; zero weights never chosen).

    The CDF is divided by its last entry, which makes it exactly 1 from the last positive weight on
    (``x / x == 1`` in IEEE arithmetic), so a uniform ``u < 1`` can never land on a zero weight.
    """
    cdf = weights.cumsum(-1)
    cdf = cdf / cdf[..., -1:]
    u = torch.rand((*cdf.shape[:-1], 1), dtype=cdf.dtype, generator=gen)
    idx = torch.searchsorted(cdf, u, right=True)
    return idx.squeeze(-1).clamp_(max=weights.shape[-1] - 1)


def _tokens_given_states(
    p: torch.Tensor,
    cw: torch.Tensor,
    plan: _Plan,
    states: torch.Tensor,
    greedy: bool,
    gen,
    chunk: int = 1 << 22,
) -> torch.Tensor:
    """Tokens x_i given state pairs (s_{i-1}, s_i): x_i ∝ p_i(v) 1[T[s_{i-1}, v] = s_i] (or its argmax).

    Two exact stages: the token's class among the pair's classes, ∝ its class sum ``cw`` (greedy: ``cw``
    holds class maxima and the largest wins), then the token among the class's members, ∝ ``p_i(v)``
    (greedy: the most probable).  Greedy ties go to the lowest token id, as a scan of the pair's tokens
    would give.  Only the chosen classes' tokens are read.
    """
    S, n = states.shape[0], p.shape[0]
    st = states.numpy()
    pair = plan.pair_index.numpy()[st[:, :-1], st[:, 1:]]  # [S, n]
    cand = plan.pair_cls[pair]  # [S, n, L], padded with the sentinel class C (weight 0)
    cwx = np.concatenate([cw.numpy(), np.zeros((n, 1))], axis=1)
    w = cwx[np.arange(n)[None, :, None], cand]
    pn = p.contiguous().numpy()
    if greedy:
        pick = w.argmax(-1)
        _lowest_id_on_ties(pick, w, cand, pn, plan)
    else:
        # numpy on the tensors' memory; the uniforms come from ``gen`` (classes first, then tokens)
        pick = _categorical_np(w, torch.rand(S, n, dtype=torch.float64, generator=gen).numpy())
    chosen = np.take_along_axis(cand, pick[..., None], -1).reshape(-1)  # [S * n]
    u = None if greedy else torch.rand(S * n, dtype=torch.float64, generator=gen).numpy()
    pos = np.tile(np.arange(n), S)
    out = np.empty(S * n, dtype=np.int64)
    order = np.argsort(chosen, kind="stable")
    classes, first = np.unique(chosen[order], return_index=True)
    bounds = np.append(first, len(order))
    for c, lo, hi in zip(classes.tolist(), bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        members = plan.members[plan.mstart[c] : plan.mstart[c + 1]]
        rows = order[lo:hi]
        if len(members) == 1:
            out[rows] = members[0]
            continue
        step = max(1, chunk // len(members))
        for r in range(0, len(rows), step):
            part = rows[r : r + step]
            wt = pn[pos[part][:, None], members[None, :]]
            k = wt.argmax(-1) if greedy else _categorical_np(wt.astype(np.float64, copy=False), u[part])
            out[part] = members[k]
    return torch.from_numpy(out.reshape(S, n))


def _lowest_id_on_ties(pick, w, cand, pn, plan) -> None:
    """Greedy, in place: where several classes share the largest maximum, pick the one holding the
    lowest-id most probable token (ties are rare: exact equalities, e.g. uniform rows)."""
    top = np.take_along_axis(w, pick[..., None], -1)
    tied = (w == top) & (cand < plan.C)
    for s, i in zip(*np.nonzero(tied.sum(-1) > 1), strict=True):
        best = None
        for slot in np.nonzero(tied[s, i])[0]:
            c = cand[s, i, slot]
            members = plan.members[plan.mstart[c] : plan.mstart[c + 1]]
            token = members[int(np.argmax(pn[i, members] == top[s, i, 0]))]
            if best is None or token < best[0]:
                best = (token, slot)
        pick[s, i] = best[1]


# ------------------------------------------------------------------------------------------ samplers
def _states_sequential(Mc, plan, final, start, S, greedy, gen):
    """Depth n: backward messages, then one categorical (or argmax) per position and sample."""
    n = Mc.shape[0]
    Qe = plan.Qe
    states = torch.empty(n + 1, S, dtype=torch.long)
    states[0] = start
    st = states.unbind(0)
    if greedy:
        L = _dense(Mc, plan, -math.inf)
        delta = torch.empty(n + 1, Qe, dtype=torch.float64)
        delta[n] = torch.where(final > 0, 0.0, -math.inf)
        Ls, ds = L.unbind(0), delta.unbind(0)
        for i in range(n, 0, -1):
            torch.amax(Ls[i - 1] + ds[i], 1, out=ds[i - 1])
        if not bool(torch.isfinite(delta[0, start])):
            return None
        K = (L + delta[1:, None, :]).unbind(0)
        for i in range(n):
            torch.argmax(K[i].index_select(0, st[i]), 1, out=st[i + 1])
        return states.T
    M = _dense(Mc, plan, 0.0)
    beta, _ = _backward(M, final)
    if not beta[0, start] > 0:
        return None
    cdf = M.mul_(beta[1:, None, :]).cumsum_(-1)
    cdf = (cdf / cdf[..., -1:]).nan_to_num_(nan=1.0).unbind(0)  # rows of unreachable states: 0/0
    u = torch.rand(n, S, 1, dtype=torch.float64, generator=gen).unbind(0)
    for i in range(n):
        torch.searchsorted(cdf[i].index_select(0, st[i]), u[i], right=True, out=st[i + 1].view(S, 1))
    return states.T


def _states_bisect(tree, levels, final, start, n, S, greedy, gen):
    """Log depth: the final state, then every segment midpoint of a tree level at once.

    Segment ``[l, r)`` of width ``w`` with boundary states ``(a, b)`` draws its midpoint ``m = l + w/2``
    from ``[M_{l+1..m}]_{a s} [M_{m+1..r}]_{s b}``: row ``a`` of the left child times column ``b`` of the
    right child, read from the compact tree with one gather each.  The levels run in numpy on the tree's
    (shared) memory: each level is a handful of small array operations, and numpy's per-call cost is a
    fraction of torch's; all uniforms are drawn from ``gen`` in one call up front.
    """
    N = tree[0].shape[1]
    Qe = final.shape[0]
    states = np.empty((S, N + 1), dtype=np.int64)
    states[:, 0] = start
    u = None if greedy else torch.rand(S, N, dtype=torch.float64, generator=gen).numpy()
    top = tree[-1][levels[-1].idx[start], 0].numpy()
    fin = final.numpy()
    if greedy:
        states[:, N] = int(np.argmax(top + np.where(fin > 0, 0.0, -np.inf)))
    else:
        states[:, N] = _categorical_np(np.broadcast_to(top * fin, (S, Qe)), u[:, 0])
    col = 1
    for k in range(len(tree) - 1, 0, -1):
        width = 1 << k
        vals, lv = tree[k - 1], levels[k - 1]
        flat = vals.numpy().reshape(-1)
        tab, off = lv.gather_plan_np(vals.shape[1])
        wl = flat[tab[states[:, 0:N:width]] + off]  # [S, segments, Q]: row a of the left child
        wr = flat[tab[states[:, width : N + 1 : width] + Qe] + (off + 1)]  # column b of the right child
        segs = wl.shape[1]
        if greedy:
            states[:, width // 2 : N : width] = np.argmax(wl + wr, -1)
        else:
            states[:, width // 2 : N : width] = _categorical_np(wl * wr, u[:, col : col + segs])
        col += segs
    return torch.from_numpy(states[:, : n + 1])


def _categorical_np(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """:func:`_categorical` in numpy with given uniforms ``u`` (shape ``weights.shape[:-1]``)."""
    cdf = np.cumsum(weights, -1)
    cdf /= cdf[..., -1:]
    idx = (cdf <= u[..., None]).sum(-1)  # searchsorted(right=True) on each sorted row
    return np.minimum(idx, weights.shape[-1] - 1)


def _states_scan(tree, levels, Mc, plan, final, start, n, S, greedy, gen):
    """Down-swept messages, one random map per position (exponential race per state), prefix composition."""
    msg = _downsweep(tree, levels, final, greedy)[1 : n + 1]
    Qe, P = plan.Qe, plan.P
    nxt = msg.index_select(1, plan.pair_s)  # [n, P]
    if greedy:
        key = (Mc + nxt).neg_().expand(S, n, P)  # smallest key = best successor
    else:
        w = Mc * nxt
        e = torch.rand(S, n, P, dtype=torch.float64, generator=gen).log_().neg_()  # Exp(1), > 0
        key = e.div_(w)  # zero weight -> +inf; argmin over a state's pairs is exact P ∝ w
    idx = plan.pair_q.expand(S, n, P)
    best = torch.full((S, n, Qe), math.inf, dtype=torch.float64).scatter_reduce_(2, idx, key, "amin")
    win = key == best.gather(2, idx)
    cand = torch.where(win, plan.pair_s, -1)
    maps = torch.full((S, n, Qe), -1, dtype=torch.long).scatter_reduce_(2, idx, cand, "amax").clamp_(min=0)
    # inclusive prefix composition g_i = f_i ∘ ... ∘ f_1 (Hillis–Steele, log2 n rounds of gathers)
    g = maps
    shift = 1
    while shift < n:
        g = torch.cat([g[:, :shift], torch.gather(g[:, shift:], 2, g[:, :-shift])], dim=1)
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
    if not isinstance(dfa, TokenDFA):
        raise InputError(f"dfa must be a TokenDFA, got {type(dfa).__name__}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise InputError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    p = check_probs(probs, dfa, normalize=normalize)
    if method not in METHODS:
        raise InputError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    S = 1 if num_samples is None else num_samples
    if isinstance(S, bool) or not isinstance(S, int | np.integer) or S < 1:
        raise InputError(f"num_samples must be a positive integer, got {num_samples!r}")
    S = int(S)
    tokens = _sample(p, dfa, S, method, greedy, generator)
    return tokens[0] if num_samples is None else tokens


def _sample(p: torch.Tensor, dfa: TokenDFA, S: int, method: str, greedy: bool, gen) -> torch.Tensor:
    """:func:`sample` on checked, normalised probabilities (the decoding loop's entry point).

    ``p`` is float64, or float32 from the decoding loop's softmax: class sums and maxima are then taken
    in float64 from the float32 values, and token weights are converted before each draw.

    Decoded positions are one-hot rows of ``p``: their class sums are exactly one-hot, so their transfer
    matrices are read off the automaton with no special case.
    """
    n = p.shape[0]
    if dfa.dead == 0:
        raise _zero_error(dfa, n)
    plan, final = _plan(dfa), _final(dfa)  # the plan is shared by automata with other accepting sets
    if greedy:
        cw = _class_max(p, plan)
        Mc = _compact_log(cw, plan)
    else:
        cw = _class_sums(p, plan)
        Mc = cw @ plan.Bc
    if method == "sequential":
        states = _states_sequential(Mc, plan, final, dfa.start, S, greedy, gen)
        if states is None:
            raise _zero_error(dfa, n)
    else:
        tree, levels, _ = _upsweep(Mc, plan, greedy)
        top = tree[-1].numpy()[levels[-1].idx_np[dfa.start], 0]
        fin = final.numpy()
        if greedy:
            feasible = bool(np.isfinite(np.max(top + np.where(fin > 0, 0.0, -np.inf))))
        else:
            feasible = bool(top @ fin > 0)
        if not feasible:
            raise _zero_error(dfa, n)
        if method == "bisect":
            states = _states_bisect(tree, levels, final, dfa.start, n, S, greedy, gen)
        else:
            states = _states_scan(tree, levels, Mc, plan, final, dfa.start, n, S, greedy, gen)
    return _tokens_given_states(p, cw, plan, states, greedy, gen)


def map_decode(
    probs, dfa: TokenDFA, *, method: Method = "sequential", normalize: bool = True
) -> torch.Tensor:
    """The most probable accepted string under ``prod_i probs[i]`` (max-product / Viterbi): LongTensor [n]."""
    return sample(probs, dfa, method=method, greedy=True, normalize=normalize)
