"""Benchmarks against the anchors and the paper's applications at small scale.

- :func:`bench`: the GETO-LP against the full LP (POT's and ours) and POT's entropic barycenters on
  the same histograms in one run — wall time, peak memory (each solve in a fresh process), objective
  and variable counts — plus the sizes the full LP cannot reach (64×64 with M = 4, 32³ with M = 3).
- :func:`reproduce`: colour-palette barycenters of scikit-learn's sample photographs, shape averaging
  of scikit-learn digits, and a 3-D volume-averaging stand-in with a known answer.
- :func:`demo`: a runtime-dependency-only tour.
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import time
import traceback
from typing import Any

import numpy as np

from geto_lp import __version__
from geto_lp.baselines import ANCHORS, require_pot
from geto_lp.data import digits, dirac, downsample, sample_images, smooth_histograms, translated_shapes
from geto_lp.model import (
    barycenter_objective,
    full_variable_count,
    solve_barycenter,
    variable_count,
)
from papershelf.bench import compare, record
from papershelf.progress import progress

PACKAGE = "geto-lp"

__all__ = [
    "bench",
    "demo",
    "digits_experiment",
    "palette_experiment",
    "reproduce",
    "run_isolated",
    "run_method",
    "volume_experiment",
]


# ---- measurement ---------------------------------------------------------------------------------
def _rss_status() -> tuple[int, int]:
    """(current RSS, peak RSS) of this process in bytes, from /proc (ru_maxrss as a fallback)."""
    current = peak = 0
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    current = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1]) * 1024
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return current, peak


def run_method(method: str, A: np.ndarray, shape: tuple[int, ...], weights: np.ndarray, **kw: Any) -> dict:
    """Run one method and return its barycenter, objective (None for entropic ones) and wall seconds."""
    start = time.perf_counter()
    if method == "geto-lp":
        res = solve_barycenter(A, shape, weights, **kw)
        out = {"barycenter": res.barycenter, "objective": res.objective, "n_variables": res.n_variables}
    else:
        anchor = ANCHORS[method](A, shape, weights, **kw)
        out = {"barycenter": anchor.barycenter, "objective": anchor.objective}
    out["seconds"] = time.perf_counter() - start
    return out


def _child(queue: Any, method: str, args: tuple, kw: dict) -> None:
    try:
        if method.startswith("pot"):
            require_pot()  # imported before the baseline is taken, like numpy and scipy
        base, _ = _rss_status()
        out = run_method(method, *args, **kw)
        _, peak = _rss_status()
        out.update(peak_rss=peak, baseline_rss=base)
        queue.put(("ok", out))
    except BaseException as exc:  # reported to the parent, which re-raises
        queue.put(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


def run_isolated(method: str, A: np.ndarray, shape: tuple[int, ...], weights: np.ndarray, **kw: Any) -> dict:
    """:func:`run_method` in a fresh process, adding its peak RSS (bytes, whole process) and baseline."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, method, (A, shape, weights), kw))
    proc.start()
    try:
        status, payload = queue.get()
    finally:
        proc.join()
    if status != "ok":
        raise RuntimeError(f"{method} failed in its worker process: {payload}")
    return payload


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300)


def _rec(benchmark: str, setting: dict, metric: str, cand: tuple[str, float], base: tuple[str, float], **kw):
    return record(
        package=PACKAGE,
        version=__version__,
        benchmark=benchmark,
        setting=setting,
        metric=metric,
        better=kw.pop("better", "lower"),
        candidate=cand[0],
        candidate_value=cand[1],
        baseline=base[0],
        baseline_value=base[1],
        repeats=kw.pop("repeats", 1),
        **kw,
    )


def _objective_record(name: str, setting: dict, geto: float, other: float, baseline: str) -> dict:
    rec = _rec(name, setting, "objective", ("geto-lp", geto), (baseline, other), target=1 + 1e-6)
    rec["relative_difference"] = _rel(geto, other)
    rec["met"] = bool(rec["relative_difference"] <= 1e-6)
    rec["target_rule"] = "|objective / baseline - 1| <= 1e-6"
    return rec


def _variables_record(name: str, setting: dict, shape: tuple[int, ...], m: int, measured: int) -> dict:
    formula = variable_count(shape, m)
    rec = _rec(
        name,
        setting,
        "n_variables",
        ("geto-lp", measured),
        ("full-lp", full_variable_count(shape, m)),
    )
    rec["formula"] = "M*N*sum(n_k) + N"
    rec["formula_value"] = formula
    rec["met"] = bool(measured == formula)
    return rec


# ---- bench ---------------------------------------------------------------------------------------
def _has_pot() -> bool:
    try:
        require_pot()
    except ImportError:
        return False
    return True


def bench(
    *,
    quick: bool = False,
    seed: int = 0,
    quiet: bool = True,
    scale: bool = True,
    anchors: bool = True,
    own_full_lp: bool = True,
    log: Any = print,
) -> list[dict]:
    """Side-by-side records; ``quick`` runs tiny grids in-process in a few seconds.

    The full run compares at 32×32 with M = 3 (``anchors``) and then solves the sizes the full LP cannot
    reach (``scale``: 64×64 with M = 4 and 32³ with M = 3 — the latter takes an hour or more).
    """
    if quick:
        return _bench_quick(seed, log)
    return _bench_full(seed, quiet, scale, anchors, own_full_lp, log)


def _bench_quick(seed: int, log: Any) -> list[dict]:
    records = []
    pot = _has_pot()
    for shape, m in (((16,), 3), ((8, 8), 3), ((4, 4, 4), 2)):
        A = smooth_histograms(shape, m, seed=seed)
        w = np.full(m, 1.0 / m)
        name = f"quick-{'x'.join(map(str, shape))}-m{m}"
        setting = {"grid": list(shape), "M": m, "p": 2}
        geto = run_method("geto-lp", A, shape, w)
        methods = ["full-lp"] + (["pot-lp"] if pot and len(shape) == 2 else [])
        for base in methods:
            other = run_method(base, A, shape, w)
            records.append(
                _objective_record(
                    f"{name}/objective-vs-{base}", setting, geto["objective"], other["objective"], base
                )
            )
        args = (A, shape, w)
        cmp = compare(
            lambda args=args: run_method("full-lp", *args),
            lambda args=args: run_method("geto-lp", *args),
            warmup=0,
            repeat=3,
        )
        records.append(
            _rec(
                f"{name}/time-vs-full-lp",
                setting,
                "wall_seconds",
                ("geto-lp", cmp.candidate.median),
                ("full-lp", cmp.baseline.median),
                repeats=3,
            )
        )
        records.append(_variables_record(f"{name}/variables", setting, shape, m, geto["n_variables"]))
        log(
            f"{name}: objective {geto['objective']:.10g}, {geto['n_variables']:,} variables, "
            f"full LP {full_variable_count(shape, m):,}"
        )
    if not pot:
        log(
            "POT is not installed: only the package's own full LP was compared (pip install 'geto-lp[bench]')"
        )
    return records


def _bench_full(
    seed: int, quiet: bool, scale: bool, anchors: bool, own_full_lp: bool, log: Any
) -> list[dict]:
    records: list[dict] = []
    if anchors:
        require_pot()
        records += _bench_anchors(seed, quiet, own_full_lp, log)
    if scale:
        for shape_s, m_s in (((64, 64), 4), ((32, 32, 32), 3)):
            records.append(_scale_record(shape_s, m_s, seed, log))
    return records


def _bench_anchors(seed: int, quiet: bool, own_full_lp: bool, log: Any) -> list[dict]:
    records: list[dict] = []
    shape, m = (32, 32), 3
    A = smooth_histograms(shape, m, seed=seed)
    w = np.full(m, 1.0 / m)
    setting = {"grid": list(shape), "M": m, "p": 2, "solver": "highs-ipm", "isolated_processes": True}
    name = "barycenter-32x32-m3"
    methods = ["geto-lp", "pot-lp"] + (["full-lp"] if own_full_lp else []) + ["pot-ibp", "pot-convolutional"]
    runs = {}
    for method in progress(methods, desc="bench 32x32", quiet=quiet):
        log(f"running {method} on {shape} with M = {m} ...")
        runs[method] = run_isolated(method, A, shape, w)
        r = runs[method]
        log(f"  {r['seconds']:.2f} s, peak RSS {r['peak_rss'] / 2**20:.0f} MiB, objective {r['objective']}")
    geto = runs["geto-lp"]
    g_time, g_mem = ("geto-lp", geto["seconds"]), ("geto-lp", geto["peak_rss"])
    records.append(
        _rec(
            f"{name}/time-vs-pot-lp",
            setting,
            "wall_seconds",
            g_time,
            ("pot-lp", runs["pot-lp"]["seconds"]),
            target=1 / 20,
        )
    )
    records.append(
        _rec(
            f"{name}/peak-rss-vs-pot-lp",
            setting,
            "peak_rss_bytes",
            g_mem,
            ("pot-lp", runs["pot-lp"]["peak_rss"]),
            target=1 / 5,
            candidate_baseline_rss=geto["baseline_rss"],
            baseline_baseline_rss=runs["pot-lp"]["baseline_rss"],
        )
    )
    records.append(
        _objective_record(
            f"{name}/objective-vs-pot-lp", setting, geto["objective"], runs["pot-lp"]["objective"], "pot-lp"
        )
    )
    if own_full_lp:
        full = runs["full-lp"]
        records.append(
            _rec(f"{name}/time-vs-full-lp", setting, "wall_seconds", g_time, ("full-lp", full["seconds"]))
        )
        records.append(
            _rec(
                f"{name}/peak-rss-vs-full-lp", setting, "peak_rss_bytes", g_mem, ("full-lp", full["peak_rss"])
            )
        )
        records.append(
            _objective_record(
                f"{name}/objective-vs-full-lp", setting, geto["objective"], full["objective"], "full-lp"
            )
        )
    records.append(_variables_record(f"{name}/variables", setting, shape, m, geto["n_variables"]))
    for method in ("pot-ibp", "pot-convolutional"):
        exact = barycenter_objective(runs[method]["barycenter"], A, shape, w)
        runs[method]["exact_objective"] = exact
        rec = _rec(
            f"{name}/objective-vs-{method}",
            {**setting, "reg_cells2": 1.0},
            "objective",
            ("geto-lp", geto["objective"]),
            (method, exact),
        )
        rec["note"] = "the entropic barycenter's exact objective sum_m w_m W2^2(nu, mu_m), recomputed"
        records.append(rec)
        records.append(
            _rec(
                f"{name}/time-vs-{method}",
                {**setting, "reg_cells2": 1.0},
                "wall_seconds",
                g_time,
                (method, runs[method]["seconds"]),
            )
        )
    return records


def _scale_record(shape: tuple[int, ...], m: int, seed: int, log: Any) -> dict:
    A = smooth_histograms(shape, m, seed=seed)
    w = np.full(m, 1.0 / m)
    label = "x".join(map(str, shape))
    log(f"running geto-lp on {shape} with M = {m} ({variable_count(shape, m):,} variables) ...")
    r = run_isolated("geto-lp", A, shape, w)
    log(f"  {r['seconds']:.1f} s, peak RSS {r['peak_rss'] / 2**30:.2f} GiB, objective {r['objective']:.10g}")
    rec = _rec(
        f"scale-{label}-m{m}/variables",
        {"grid": list(shape), "M": m, "p": 2},
        "n_variables",
        ("geto-lp", r["n_variables"]),
        ("full-lp", full_variable_count(shape, m)),
    )
    rec.update(
        solved=True,
        met=True,
        target_rule="solved (the full LP is out of reach at this size)",
        geto_seconds=r["seconds"],
        geto_peak_rss_bytes=r["peak_rss"],
        objective=r["objective"],
        formula_value=variable_count(shape, m),
    )
    return rec


# ---- reproduce -----------------------------------------------------------------------------------
def _support(nu: np.ndarray, mass: float = 1.0) -> int:
    return int(np.sum(nu > 1e-6 * mass))


def palette_experiment(*, bins: int = 16, max_side: int = 160) -> dict:
    from geto_lp.palette import palette_barycenter

    images = sample_images()
    names = sorted(images)
    small = [downsample(images[n], max_side) for n in names]
    start = time.perf_counter()
    res = palette_barycenter(small, bins=bins)
    seconds = time.perf_counter() - start
    row = {
        "experiment": "palette",
        "images": names,
        "bins": bins,
        "grid": [bins] * 3,
        "M": len(names),
        "objective": res.objective,
        "costs": res.result.costs.tolist(),
        "n_variables": res.result.n_variables,
        "full_lp_variables": full_variable_count((bins,) * 3, len(names)),
        "seconds": seconds,
        "barycenter_support": _support(res.barycenter),
    }
    return {"row": row, "images": small, "result": res}


def digits_experiment(*, count: int = 6, upsample: int = 2, pot: bool = True, quiet: bool = True) -> dict:
    A, shape = digits(3, count, upsample=upsample)
    m = A.shape[1]
    w = np.full(m, 1.0 / m)
    methods = ["geto-lp", "full-lp"] + (["pot-lp", "pot-ibp", "pot-convolutional"] if pot else [])
    rows, bary = [], {}
    for method in progress(methods, desc="digits", quiet=quiet):
        r = run_method(method, A, shape, w)
        exact = (
            r["objective"]
            if r["objective"] is not None
            else barycenter_objective(r["barycenter"], A, shape, w)
        )
        bary[method] = r["barycenter"]
        rows.append(
            {
                "experiment": "digits",
                "method": method,
                "grid": list(shape),
                "M": m,
                "objective": exact,
                "seconds": r["seconds"],
                "support": _support(r["barycenter"]),
            }
        )
    best = rows[0]["objective"]
    for row in rows:
        row["gap_vs_geto"] = row["objective"] / best - 1
    return {"rows": rows, "barycenters": bary, "inputs": A, "shape": shape}


def volume_experiment(*, size: int = 16, quiet: bool = True) -> dict:
    """Three translates of a 3-D "organ" (an ellipsoid with a cavity); the barycenter is known exactly."""
    shape = (size,) * 3
    s = size // 2
    offsets = np.array([(0, 0, 0), (s - 2, s // 2, 0), (s // 2 + 1, s - 2, s - 1)])
    for k in range(3):  # uniform weights need Σ_m a_m divisible by 3 for an on-grid barycenter
        while offsets[:, k].sum() % 3:
            offsets[2, k] -= 1
    known = translated_shapes(shape, offsets, shape_size=(s, s, s))
    w = known.weights
    rows, bary = [], {}
    for method in progress(["geto-lp", "convolutional"], desc="volumes", quiet=quiet):
        kw = {"max_iter": 500} if method == "convolutional" else {}
        r = run_method(method, known.A, shape, w, **kw)
        exact = (
            r["objective"]
            if r["objective"] is not None
            else barycenter_objective(r["barycenter"], known.A, shape, w)
        )
        bary[method] = r["barycenter"]
        rows.append(
            {
                "experiment": "volumes",
                "method": method,
                "grid": list(shape),
                "M": 3,
                "objective": exact,
                "known_objective": known.objective,
                "max_abs_error_vs_known": float(np.abs(r["barycenter"] - known.barycenter).max()),
                "mass_outside_known_support": float(r["barycenter"][known.barycenter <= 0].sum()),
                "seconds": r["seconds"],
            }
        )
    return {"rows": rows, "barycenters": bary, "known": known, "shape": shape}


def reproduce(*, quick: bool = False, quiet: bool = True) -> dict:
    """All three applications; POT anchors are included when POT is installed."""
    pot = _has_pot()
    out: dict[str, Any] = {"quick": quick, "pot": pot}
    out["palette"] = palette_experiment(bins=8 if quick else 16, max_side=64 if quick else 160)
    out["digits"] = digits_experiment(
        count=3 if quick else 6, upsample=1 if quick else 2, pot=pot, quiet=quiet
    )
    out["volumes"] = volume_experiment(size=10 if quick else 16, quiet=quiet)
    return out


# ---- demo ----------------------------------------------------------------------------------------
def demo(*, seed: int = 0, log: Any = print) -> list[dict]:
    """Runtime dependencies only: GETO-LP against the package's full LP, and known answers."""
    rows = []
    shape, m = (12, 12), 3
    A = smooth_histograms(shape, m, seed=seed)
    w = np.full(m, 1.0 / m)
    geto = run_method("geto-lp", A, shape, w)
    full = run_method("full-lp", A, shape, w)
    rows.append(
        {
            "case": f"random 12x12, M={m}",
            "method": "geto-lp",
            **_pick(geto),
            "n_variables": geto["n_variables"],
        }
    )
    rows.append(
        {
            "case": f"random 12x12, M={m}",
            "method": "full LP",
            **_pick(full),
            "n_variables": full_variable_count(shape, m),
        }
    )
    two = np.stack([dirac((5, 5), (0, 0)), dirac((5, 5), (4, 2))], axis=1)
    res = solve_barycenter(two, (5, 5))
    rows.append(
        {
            "case": "Diracs (0,0),(4,2) -> (2,1)",
            "method": "geto-lp",
            "objective": res.objective,
            "seconds": res.solve_seconds,
            "n_variables": res.n_variables,
            "expected": 5.0,
            "argmax": [int(i) for i in np.unravel_index(int(np.argmax(res.barycenter)), (5, 5))],
        }
    )
    known = translated_shapes((10, 10, 10), [(0, 0, 0), (4, 2, 0), (2, 4, 3)], shape_size=(5, 5, 5))
    res3 = solve_barycenter(known.A, known.shape)
    rows.append(
        {
            "case": "3-D translates, 10^3, M=3",
            "method": "geto-lp",
            "objective": res3.objective,
            "seconds": res3.solve_seconds,
            "n_variables": res3.n_variables,
            "expected": known.objective,
            "max_error": float(np.abs(res3.barycenter - known.barycenter).max()),
            "full_lp_variables": full_variable_count(known.shape, 3),
        }
    )
    return rows


def _pick(r: dict) -> dict:
    return {"objective": r["objective"], "seconds": r["seconds"]}
