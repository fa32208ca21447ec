"""Side-by-side benchmarking: interleaved A/B timing, medians, ratios, and the bench record schema.

Every package's ``bench --out FILE.json`` writes a JSON list of records made by :func:`record`;
:func:`validate_record` is the schema check the repo-wide tests run, and :func:`report` turns a set of
record files into the markdown table of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from papershelf.repro import atomic_write_json, package_version

RECORD_KEYS = (
    "package",
    "version",
    "benchmark",
    "setting",
    "metric",
    "better",
    "candidate",
    "candidate_value",
    "baseline",
    "baseline_value",
    "ratio",
    "target",
    "met",
    "repeats",
    "env",
)


@dataclass(frozen=True)
class Timing:
    """Wall-clock seconds of repeated calls; ``median`` is what comparisons use."""

    times: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.times)


@dataclass(frozen=True)
class Comparison:
    """Timings of a baseline and a candidate measured in the same interleaved run."""

    baseline: Timing
    candidate: Timing

    @property
    def ratio(self) -> float:
        """candidate median / baseline median (< 1 means the candidate is faster)."""
        return self.candidate.median / self.baseline.median

    @property
    def speedup(self) -> float:
        return self.baseline.median / self.candidate.median


def _time_once(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(fn: Callable[[], Any], *, warmup: int = 1, repeat: int = 5) -> Timing:
    """Call ``fn`` ``warmup`` times untimed, then ``repeat`` times timed."""
    if repeat < 1:
        raise ValueError("repeat must be >= 1")
    for _ in range(warmup):
        fn()
    return Timing(tuple(_time_once(fn) for _ in range(repeat)))


def compare(
    baseline: Callable[[], Any], candidate: Callable[[], Any], *, warmup: int = 1, repeat: int = 5
) -> Comparison:
    """Time two functions interleaved (A B, B A, A B, …) so machine drift hits both alike."""
    if repeat < 1:
        raise ValueError("repeat must be >= 1")
    for _ in range(warmup):
        baseline()
        candidate()
    base_times, cand_times = [], []
    for i in range(repeat):
        if i % 2 == 0:
            base_times.append(_time_once(baseline))
            cand_times.append(_time_once(candidate))
        else:
            cand_times.append(_time_once(candidate))
            base_times.append(_time_once(baseline))
    return Comparison(Timing(tuple(base_times)), Timing(tuple(cand_times)))


def environment() -> dict[str, Any]:
    """Versions, threads and device that a benchmark number depends on."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "device": "cpu",
    }
    for lib in ("numpy", "scipy", "torch", "triton"):
        version = package_version(lib)
        if version is not None:
            env[lib] = version
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            env["device"] = torch.cuda.get_device_name(0)
    return env


def record(
    *,
    package: str,
    version: str,
    benchmark: str,
    setting: dict[str, Any],
    metric: str,
    better: str,
    candidate: str,
    candidate_value: float,
    baseline: str,
    baseline_value: float,
    repeats: int,
    target: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One comparison record; ``ratio`` = candidate / baseline and ``met`` checks it against ``target``."""
    if better not in ("lower", "higher"):
        raise ValueError("better must be 'lower' or 'higher'")
    ratio = candidate_value / baseline_value if baseline_value else float("nan")
    met = None
    if target is not None:
        met = bool(ratio <= target) if better == "lower" else bool(ratio >= target)
    rec = {
        "package": package,
        "version": version,
        "benchmark": benchmark,
        "setting": dict(setting),
        "metric": metric,
        "better": better,
        "candidate": candidate,
        "candidate_value": float(candidate_value),
        "baseline": baseline,
        "baseline_value": float(baseline_value),
        "ratio": float(ratio),
        "target": target,
        "met": met,
        "repeats": int(repeats),
        "env": environment(),
    }
    rec.update(extra)
    return rec


def validate_record(rec: Any) -> list[str]:
    """Problems with one bench record (empty when it matches the schema)."""
    if not isinstance(rec, dict):
        return [f"record is a {type(rec).__name__}, not an object"]
    problems = [f"missing key {k!r}" for k in RECORD_KEYS if k not in rec]
    if problems:
        return problems
    checks = [
        (isinstance(rec["package"], str) and rec["package"], "package must be a non-empty string"),
        (isinstance(rec["benchmark"], str) and rec["benchmark"], "benchmark must be a non-empty string"),
        (isinstance(rec["setting"], dict), "setting must be an object"),
        (rec["better"] in ("lower", "higher"), "better must be 'lower' or 'higher'"),
        (_is_number(rec["candidate_value"]), "candidate_value must be a number"),
        (_is_number(rec["baseline_value"]), "baseline_value must be a number"),
        (_is_number(rec["ratio"]), "ratio must be a number"),
        (rec["target"] is None or _is_number(rec["target"]), "target must be a number or null"),
        (rec["met"] is None or isinstance(rec["met"], bool), "met must be a bool or null"),
        (isinstance(rec["repeats"], int) and rec["repeats"] >= 1, "repeats must be a positive integer"),
        (isinstance(rec["env"], dict), "env must be an object"),
    ]
    return [msg for ok, msg in checks if not ok]


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def write_records(path: str | os.PathLike[str], records: list[dict[str, Any]]) -> None:
    """Check and write records atomically as a JSON list."""
    for rec in records:
        problems = validate_record(rec)
        if problems:
            raise ValueError(f"bench record {rec.get('benchmark')!r}: {'; '.join(problems)}")
    atomic_write_json(path, records)


def format_table(records: Iterable[dict[str, Any]]) -> str:
    """A markdown table of records, one row per comparison."""
    rows = [
        "| package | benchmark | metric | candidate | baseline | ratio | target | met |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        target = "—" if r["target"] is None else f"{'≤' if r['better'] == 'lower' else '≥'} {r['target']:g}"
        met = {True: "yes", False: "**no**", None: "—"}[r["met"]]
        rows.append(
            f"| {r['package']} | {r['benchmark']} | {r['metric']} "
            f"| {r['candidate']}: {r['candidate_value']:.4g} | {r['baseline']}: {r['baseline_value']:.4g} "
            f"| {r['ratio']:.3f} | {target} | {met} |"
        )
    return "\n".join(rows)


def report(paths: Iterable[str | os.PathLike[str]]) -> str:
    """The markdown of docs/benchmarks.md built from bench JSON files."""
    records: list[dict[str, Any]] = []
    for path in sorted(map(Path, paths)):
        data = json.loads(path.read_text(encoding="utf-8"))
        for rec in data if isinstance(data, list) else [data]:
            problems = validate_record(rec)
            if problems:
                raise ValueError(f"{path}: {'; '.join(problems)}")
            records.append(rec)
    records.sort(key=lambda r: (r["package"], r["benchmark"]))
    header = (
        "# Benchmarks\n\n"
        "Generated by `make bench-report` from the JSON that each package's full `bench --out` run wrote.\n"
        "Ratios are candidate / baseline measured in the same run; see each package's README for the\n"
        "command, machine and date.\n\n"
    )
    if not records:
        return header + "No full benchmark runs have been gathered yet.\n"
    return header + format_table(records) + "\n"
