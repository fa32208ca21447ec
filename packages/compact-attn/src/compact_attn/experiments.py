"""The headline experiments at small scale: CPU attention time of one chunk, attention-mass recall and
output error versus KV budget on testbed attention, and RULER-like task accuracy under chunked prefill."""

from __future__ import annotations

import math
import statistics
import time

import torch

from compact_attn.baselines import DenseAttention, PerHeadBlockSparse, QuokaAttention, row_blocks
from compact_attn.compact import CompactAttention
from compact_attn.paged import PagedKVCache
from compact_attn.selectors import make_selector
from papershelf.errors import MissingDependencyError, check_choice


def need_testbed():
    try:
        import papershelf_lm
    except ImportError:
        raise MissingDependencyError("papershelf_lm", package="compact-attn", extra="bench") from None
    return papershelf_lm


def methods_for(budget, *, block: int, stride: int = 8, n_queries: int = 32, rule: str = "max", sink: int = 0,
                pool: str = "mean", alloc: str = "head", queries: int = 8) -> dict:  # fmt: skip
    """The compared methods at one KV budget (compact with the four selectors, QUOKA, per-head);
    ``rule``/``sink``/``alloc`` go to every selector, ``pool`` to the antidiagonal one (the bound and tail
    selectors pool by max), ``queries`` to the tail selector."""
    ad = dict(stride=stride, budget=budget, rule=rule, sink=sink, pool=pool, alloc=alloc)
    mp = dict(budget=budget, rule=rule, sink=sink, alloc=alloc)
    return {
        "compact-antidiag": CompactAttention(make_selector("antidiagonal", **ad)),
        "compact-meanpool": CompactAttention(make_selector("meanpool", **mp)),
        "compact-bound": CompactAttention(make_selector("bound", **mp)),
        "compact-tail": CompactAttention(make_selector("tail", queries=queries, **mp)),
        "quoka": QuokaAttention(budget, n_queries=n_queries),
        "per-head-antidiag": PerHeadBlockSparse(make_selector("antidiagonal", **ad)),
    }


# ---- speed ----------------------------------------------------------------------------------------------
def speed_chunk(n=32768, chunk=512, *, heads=32, kv_heads=8, head_dim=128, block=64, budget=0.25, stride=8,
                repeat=3, seed=0, per_head=True, alloc="head", rule="max", sink=0,
                pool="mean", queries=8) -> dict:  # fmt: skip
    """Time one chunk of ``chunk`` queries at ``n`` accumulated tokens, every method interleaved in the
    same run (``repeat`` rounds after one warm-up round; medians). Selection cost is included."""
    from compact_attn.data import random_chunk

    q, k, v = random_chunk(n, chunk, heads=heads, kv_heads=kv_heads, head_dim=head_dim, seed=seed)
    cache = PagedKVCache.for_length(n, block, kv_heads, head_dim)
    cache.append(0, k, v)
    del k, v
    runs = {"dense-sdpa": DenseAttention("sdpa"), "dense-matmul": DenseAttention("matmul")}
    runs.update(methods_for(budget, block=block, stride=stride, alloc=alloc, rule=rule, sink=sink, pool=pool,
                            queries=queries))  # fmt: skip
    if not per_head:
        runs.pop("per-head-antidiag")
    times: dict[str, list[float]] = {m: [] for m in runs}
    fractions = {}
    with torch.no_grad():
        for r in range(repeat + 1):
            order = list(runs) if r % 2 == 0 else list(reversed(runs))
            for name in order:
                t0 = time.perf_counter()
                runs[name].attend(q, cache, 0)
                dt = time.perf_counter() - t0
                if r > 0:
                    times[name].append(dt)
                fractions[name] = float(runs[name].last_fraction)
    med = {m: statistics.median(t) for m, t in times.items()}
    dense_name = min(("dense-sdpa", "dense-matmul"), key=med.get)
    return {
        "n": n, "chunk": chunk, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim, "block": block,
        "budget": budget, "stride": stride, "alloc": alloc, "rule": rule, "sink": sink, "pool": pool,
        "queries": queries,
        "repeat": repeat, "median_s": med, "times_s": times,
        "kv_fraction": fractions, "dense": dense_name, "dense_s": med[dense_name],
        "speedup": {m: med[dense_name] / med[m] for m in med},
    }  # fmt: skip


# ---- recall / error on testbed attention ---------------------------------------------------------------
def _token_masks(method, q, N, block):
    """Bool (H, T, N) of the keys each query reads (before causality) for the method's last call."""
    H, T, _ = q.shape
    if isinstance(method, CompactAttention):
        t = method.last_tables
        G = H // t.kv_heads
        m = torch.zeros(t.kv_heads, N, dtype=torch.bool)
        for g in range(t.kv_heads):
            pos = (t.row(g)[:, None] * block + torch.arange(block)).flatten()
            m[g, pos[pos < N]] = True
        return m.repeat_interleave(G, 0)[:, None, :].expand(H, T, N)
    if isinstance(method, QuokaAttention):
        idx = method.last_index
        G = H // idx.shape[0]
        m = torch.zeros(idx.shape[0], N, dtype=torch.bool)
        m.scatter_(1, idx, True)
        return m.repeat_interleave(G, 0)[:, None, :].expand(H, T, N)
    raise TypeError(type(method))


def recall_and_error(q, k, v, methods: dict, *, block: int, scaling=None) -> dict:
    """For one chunk (q (H, T, D) at the end of k, v (H_kv, N, D)): per method, attention-mass recall
    (mean over heads and queries of the dense causal softmax mass on the keys it reads), relative output
    error ‖o − o_dense‖/‖o_dense‖ and the KV fraction read. ``methods`` maps a name to a method, or a
    key (e.g. a budget) to such a dict; the dense pass is shared."""
    H, T, D = q.shape
    Hkv, N, _ = k.shape
    G = H // Hkv
    offset = N - T
    scaling = 1.0 / math.sqrt(D) if scaling is None else scaling
    cache = PagedKVCache.for_length(N, block, Hkv, D, dtype=k.dtype)
    cache.append(0, k, v)
    dense = DenseAttention("matmul").attend(q, cache, 0, scaling)
    causal = torch.arange(N)[None, :] <= (offset + torch.arange(T))[:, None]
    probs = []
    for g in range(Hkv):
        s = torch.einsum("htd,nd->htn", q[g * G : (g + 1) * G].double(), k[g].double()) * scaling
        probs.append(torch.softmax(s.masked_fill(~causal, float("-inf")), -1).float())
    p = torch.cat(probs)
    if methods and all(isinstance(m, dict) for m in methods.values()):
        return {key: _score_methods(q, cache, p, dense, ms, block, scaling) for key, ms in methods.items()}
    return _score_methods(q, cache, p, dense, methods, block, scaling)


def _score_methods(q, cache, p, dense, methods, block, scaling) -> dict:
    H, T, _ = q.shape
    N = cache.lengths[0]
    offset = N - T
    out = {}
    for name, m in methods.items():
        o = m.attend(q, cache, 0, scaling)
        err = float((o - dense).norm() / dense.norm())
        if isinstance(m, PerHeadBlockSparse):
            masks = m.selector(q, cache.logical_keys(0), offset=offset, block=block)
            rows = row_blocks(masks, offset, T, block)
            rec = 0.0
            for h in range(H):
                for b, blocks in enumerate(rows[h]):
                    pos = (blocks[:, None] * block + torch.arange(block)).flatten()
                    pos = pos[pos < N]
                    rec += float(p[h, b * block : (b + 1) * block][:, pos].sum())
            recall = rec / (H * T)
        else:
            recall = float((p * _token_masks(m, q, N, block)).sum() / (H * T))
        out[name] = {"recall": recall, "rel_error": err, "kv_fraction": float(m.last_fraction)}
    return out


def capture_layers(model, ids: torch.Tensor):
    """Post-RoPE q, k, v (H, N, D) / (H_kv, N, D) of every layer for one sequence (dense SDPA pass)."""
    lm = need_testbed()
    _, caps = lm.capture(model, ids)
    return [(c.query[0], c.key[0], c.value[0], c.scaling) for c in caps]


def testbed_curves(model, n: int, budgets, *, chunk=512, block=64, stride=8, samples=1, seed=0,
                   chunks_per_sample=2, **selection) -> dict:  # fmt: skip
    """Recall and error vs KV budget on the testbed model's own attention at context n: the text is a
    held-out NIAH haystack; the last ``chunks_per_sample`` chunks of every layer are scored."""
    need_testbed()
    from papershelf_lm.tasks import generate

    rows = {b: {} for b in budgets}
    for s in range(samples):
        sample = generate("niah", n, seed=seed + s, split="validation")
        layers = capture_layers(model, torch.from_numpy(sample.ids)[None])
        for q, k, v, scaling in layers:
            for c in range(chunks_per_sample):
                end = n - c * chunk
                qc = q[:, end - chunk : end].contiguous()
                by_budget = recall_and_error(
                    qc, k[:, :end].contiguous(), v[:, :end].contiguous(),
                    {b: methods_for(b, block=block, stride=stride, **selection) for b in budgets},
                    block=block, scaling=scaling,
                )  # fmt: skip
                for b in budgets:
                    for name, r in by_budget[b].items():
                        acc = rows[b].setdefault(name, {"recall": [], "rel_error": [], "kv_fraction": []})
                        for key in acc:
                            acc[key].append(r[key])
        del layers
    table = []
    for b in budgets:
        entry = {"budget": b}
        for name, acc in rows[b].items():
            entry[name] = {key: statistics.fmean(vals) for key, vals in acc.items()}
        table.append(entry)
    return {
        "n": n, "chunk": chunk, "block": block, "stride": stride, "samples": samples,
        "chunks_per_sample": chunks_per_sample, "layers": len(model.model.layers), "rows": table,
    }  # fmt: skip


# ---- task accuracy under chunked prefill ---------------------------------------------------------------
TASK_PROTOCOLS = ("prefill", "decode-dense", "decode-method")


def task_accuracy(model, task: str, n: int, method_factories: dict, *, chunk=512, block=64, samples=10,
                  seed=10_000, protocol: str = "prefill") -> dict:  # fmt: skip
    """Greedy (teacher-forced) accuracy of ``task`` at length n for each method.

    ``protocol``: ``"prefill"`` — the whole sample (answer included) prefilled in chunks over the paged
    cache, so the answer tokens are queries of the last chunk; ``"decode-dense"`` — the prompt prefilled in
    chunks with the method, then the answer fed one token per step with dense attention over the same
    cache (how a serving engine uses a chunked-prefill attention); ``"decode-method"`` — the same with the
    decode steps through the method as one-token chunks. All three score exactly the condition under which
    greedy decoding produces the answer."""
    import numpy as np

    need_testbed()
    from papershelf_lm.tasks import generate, score

    from compact_attn.hf import ChunkedPrefill

    check_choice("protocol", protocol, TASK_PROTOCOLS)
    acc = {}
    for name, factory in method_factories.items():
        scores = []
        for i in range(samples):
            s = (
                generate(task, n, seed + i, split="validation")
                if task != "mqar"
                else generate(task, n, seed + i)
            )
            runner = ChunkedPrefill(model, factory(), chunk=chunk, page_size=block)
            ids = torch.from_numpy(s.ids)[None]
            if protocol == "prefill":
                logits = runner.prefill(ids)[0]
            else:
                p = s.prompt_length
                head = runner.prefill(ids[:, :p], extra_tokens=ids.shape[1] - p)
                tail = runner.continue_logits(ids[:, p:], p, decode=protocol.removeprefix("decode-"))
                logits = torch.cat([head, tail], 1)[0]
            pred = np.full(s.ids.shape, -1, dtype=np.int64)
            pred[1:] = logits[:-1].argmax(-1).numpy()
            scores.append(score(s, pred))
        acc[name] = float(np.mean(scores))
    return acc
