"""Print the per-task diagnosis lines (λ*, variance traces, held-out losses, accuracy along the merge path
and its barrier) of stored `simulate`/`reproduce` results, including files written before the barrier
column existed (it is recomputed from the stored accuracy-vs-λ grid).

    python scripts/diagnose_results.py results/reproduce.json results/reproduce_taskcue_r400_base.json
"""

from __future__ import annotations

import json
import sys

from potara_merge.experiments import accuracy_barrier, diagnosis_lines


def _with_float_keys(result: dict) -> dict:
    """JSON turned the λ keys into strings; restore them and fill in the barrier."""
    for run in result["runs"]:
        for d in run.get("diagnostics", []):
            d["acc_vs_lambda"] = {float(k): v for k, v in d["acc_vs_lambda"].items()}
            d["barrier"] = accuracy_barrier(d["acc_vs_lambda"])
    return result


def main(paths: list[str]) -> None:
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        results = data["results"] if "results" in data else [data]
        for result in results:
            cfg = result["config"]
            init = cfg.get("local_init", "base")
            print(f"{path}: {cfg['skew']}, {cfg['rounds']} rounds, local init {init}")
            if not any(run.get("diagnostics") for run in result["runs"]):
                print("  (no per-client diagnostics stored)")
                continue
            for line in diagnosis_lines(_with_float_keys(result)):
                print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
