"""Print the per-task diagnosis lines (λ*, variance traces, held-out losses, accuracy along the merge path
and its barrier) of stored `simulate`/`reproduce` results, including files written before the barrier
column existed (it is recomputed from the stored accuracy-vs-λ grid), and the byte comparison recomputed
from the stored curves with the current accounting (files written before that fix charged local
adapters trained from the federated one nothing; `local_rounds` is filled in from the config).

    python scripts/diagnose_results.py results/reproduce.json results/reproduce_taskcue_r400_base.json
"""

from __future__ import annotations

import json
import math
import sys

from potara_merge.experiments import accuracy_barrier, diagnosis_lines, summarise


def _with_float_keys(result: dict) -> dict:
    """JSON turned the λ keys into strings; restore them and fill in the barrier."""
    for run in result["runs"]:
        for d in run.get("diagnostics", []):
            d["acc_vs_lambda"] = {float(k): v for k, v in d["acc_vs_lambda"].items()}
            d["barrier"] = accuracy_barrier(d["acc_vs_lambda"])
    return result


def _bytes_line(result: dict) -> str:
    """The communication target recomputed from the stored per-seed curves (JSON keys back to ints)."""
    cfg = result["config"]
    rp = max(1, math.ceil(cfg["potara_frac"] * cfg["rounds"]))
    runs = []
    for run in result["runs"]:
        run = dict(run)
        for k in ("potara_curve", "ft_curve", "bytes_at"):
            run[k] = {int(r): v for r, v in run[k].items()}
        run.setdefault("local_rounds", rp if cfg.get("local_init", "base") == "federated" else 0)
        runs.append(run)
    s = summarise(runs)
    return (
        f"  bytes to FedAvg+FT's final accuracy ({s['ft_final']:.2f}%): Potara "
        f"{s['potara_bytes_to_ft_final']:.4g} vs FedAvg+FT {s['ft_bytes_to_final']:.4g} "
        f"(ratio {s['bytes_ratio']:.3f}; Potara charged from round {runs[0]['local_rounds']})"
    )


def main(paths: list[str]) -> None:
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        results = data["results"] if "results" in data else [data]
        for result in results:
            cfg = result["config"]
            init = cfg.get("local_init", "base")
            print(f"{path}: {cfg['skew']}, {cfg['rounds']} rounds, local init {init}")
            print(_bytes_line(result))
            if not any(run.get("diagnostics") for run in result["runs"]):
                print("  (no per-client diagnostics stored)")
                continue
            for line in diagnosis_lines(_with_float_keys(result)):
                print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
