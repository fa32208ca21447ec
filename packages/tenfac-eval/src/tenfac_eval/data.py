"""Long-format ratings (prompt, model, rater, rating), readers for CSV/JSONL, and offline data sets.

A :class:`Ratings` object holds one rating per row. Absolute ratings sit on a declared ordered scale
(e.g. 1..5, or 0/1 correctness); side-by-side ratings also name ``model_b`` and rate the preference of
``model`` over ``model_b`` on the declared scale (e.g. 0 = B better, 1 = tie, 2 = A better).
"""

from __future__ import annotations

import csv
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from papershelf.errors import InputError

_COLUMNS = ("prompt", "model", "rater", "rating")


def parse_scale(text: str | Sequence[float]) -> tuple[float, ...]:
    """A declared rating scale: ``"1-5"`` (integers), ``"0,1"`` / ``"1,2,3"`` (listed), or a sequence."""
    if isinstance(text, str):
        s = text.strip()
        try:
            if "," in s:
                values = [float(x) for x in s.split(",")]
            elif "-" in s[1:]:
                lo, hi = s[0] + s[1:].split("-", 1)[0], s[1:].split("-", 1)[1]
                lo_i, hi_i = int(lo), int(hi)
                values = [float(v) for v in range(lo_i, hi_i + 1)]
            else:
                raise ValueError
        except ValueError:
            raise InputError(f"scale must look like '1-5' or '0,1,2', got {text!r}") from None
    else:
        values = [float(v) for v in text]
    if len(values) < 2:
        raise InputError(f"scale needs at least 2 levels, got {len(values)}")
    if not all(math.isfinite(v) for v in values):
        raise InputError("scale levels must be finite numbers")
    if any(b <= a for a, b in itertools.pairwise(values)):
        raise InputError(f"scale levels must be strictly increasing, got {values}")
    return tuple(values)


@dataclass(frozen=True)
class Ratings:
    """Validated long-format ratings on one declared scale.

    ``prompt``, ``model``, ``rater``: string ids, shape (n,); ``model_b``: string ids or None (absolute
    ratings); ``level``: int64 (n,), the 0-based index of each rating on ``scale``.
    """

    prompt: np.ndarray
    model: np.ndarray
    rater: np.ndarray
    level: np.ndarray
    scale: tuple[float, ...]
    model_b: np.ndarray | None = None
    name: str = field(default="ratings", compare=False)

    @classmethod
    def from_columns(
        cls,
        prompt: Sequence[Any],
        model: Sequence[Any],
        rater: Sequence[Any],
        rating: Sequence[Any],
        *,
        scale: str | Sequence[float],
        model_b: Sequence[Any] | None = None,
        name: str = "ratings",
    ) -> Ratings:
        """Build from columns; every rating must be one of the ``scale`` levels (no NaN, no gaps)."""
        levels = parse_scale(scale)
        n = len(rating)
        cols = {"prompt": prompt, "model": model, "rater": rater}
        if model_b is not None:
            cols["model_b"] = model_b
        for key, col in cols.items():
            if len(col) != n:
                raise InputError(f"{name}: column {key!r} has {len(col)} rows but rating has {n}")
        if n == 0:
            raise InputError(f"{name}: no ratings")
        ids = {
            k: np.array([_as_id(v, k, i, name) for i, v in enumerate(c)], dtype=object)
            for k, c in cols.items()
        }
        lookup = {v: j for j, v in enumerate(levels)}
        level = np.empty(n, dtype=np.int64)
        for i, value in enumerate(rating):
            try:
                x = float(value)
            except (TypeError, ValueError):
                raise InputError(f"{name}: rating at row {i + 1} is not a number: {value!r}") from None
            if math.isnan(x):
                raise InputError(f"{name}: rating at row {i + 1} is NaN")
            if x not in lookup:
                raise InputError(
                    f"{name}: rating {value!r} at row {i + 1} is outside the declared scale "
                    f"{_fmt_scale(levels)}"
                )
            level[i] = lookup[x]
        if model_b is not None:
            same = np.flatnonzero(ids["model"] == ids["model_b"])
            if same.size:
                raise InputError(
                    f"{name}: row {same[0] + 1} compares model {ids['model'][same[0]]!r} with itself"
                )
        return cls(ids["prompt"], ids["model"], ids["rater"], level, levels, ids.get("model_b"), name)

    def __len__(self) -> int:
        return int(self.level.size)

    @property
    def pairwise(self) -> bool:
        return self.model_b is not None

    @property
    def values(self) -> np.ndarray:
        """The ratings as numbers on the declared scale, float64 (n,)."""
        return np.asarray(self.scale, dtype=np.float64)[self.level]

    def subset(self, mask: np.ndarray) -> Ratings:
        """The rows where ``mask`` is true."""
        mb = None if self.model_b is None else self.model_b[mask]
        return Ratings(
            self.prompt[mask], self.model[mask], self.rater[mask], self.level[mask], self.scale, mb, self.name
        )

    def to_rows(self) -> list[dict[str, Any]]:
        rows = []
        vals = self.values
        for i in range(len(self)):
            row = {"prompt": self.prompt[i], "model": self.model[i]}
            if self.model_b is not None:
                row["model_b"] = self.model_b[i]
            row.update(rater=self.rater[i], rating=_fmt_num(vals[i]))
            rows.append(row)
        return rows


def _fmt_num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else float(x)


def _fmt_scale(levels: tuple[float, ...]) -> str:
    return "{" + ", ".join(str(_fmt_num(v)) for v in levels) + "}"


def _as_id(value: Any, column: str, row: int, name: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise InputError(f"{name}: missing {column} id at row {row + 1}")
    text = str(value).strip()
    if not text:
        raise InputError(f"{name}: empty {column} id at row {row + 1}")
    return text


def read_ratings(
    path: str | Path, *, scale: str | Sequence[float], default_rater: str | None = None
) -> Ratings:
    """Read ratings from a ``.csv`` or ``.jsonl`` file with columns prompt, model, [model_b], rater, rating.

    ``rater`` may be absent when ``default_rater`` is given (e.g. a human file).
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"ratings file {str(p)!r} does not exist")
    suffix = p.suffix.lower()
    if suffix == ".csv":
        with p.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            rows = list(reader)
            header = reader.fieldnames or []
    elif suffix in (".jsonl", ".ndjson"):
        rows = []
        with p.open(encoding="utf-8") as handle:
            for i, line in enumerate(handle):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InputError(f"{p.name}: line {i + 1} is not valid JSON ({exc.msg})") from None
                if not isinstance(obj, dict):
                    raise InputError(f"{p.name}: line {i + 1} is not a JSON object")
                rows.append(obj)
        header = sorted({k for r in rows for k in r})
    else:
        raise InputError(f"ratings file must end in .csv or .jsonl, got {p.name!r}")
    need = [c for c in _COLUMNS if c not in header and not (c == "rater" and default_rater)]
    if need:
        raise InputError(f"{p.name}: missing column(s) {', '.join(need)}; expected {', '.join(_COLUMNS)}")
    for i, r in enumerate(rows):
        missing = [c for c in _COLUMNS if c not in r and not (c == "rater" and default_rater)]
        if missing:
            raise InputError(f"{p.name}: row {i + 1} lacks {', '.join(missing)}")
    pairwise = "model_b" in header
    return Ratings.from_columns(
        [r["prompt"] for r in rows],
        [r["model"] for r in rows],
        [r.get("rater", default_rater) if r.get("rater") not in (None, "") else default_rater for r in rows],
        [r["rating"] for r in rows],
        scale=scale,
        model_b=[r["model_b"] for r in rows] if pairwise else None,
        name=p.name,
    )


def read_groups(path: str | Path) -> dict[str, str]:
    """A CSV with columns prompt,group (one group per prompt) → {prompt: group}."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"groups file {str(p)!r} does not exist")
    with p.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames or not {"prompt", "group"} <= set(reader.fieldnames):
            raise InputError(f"{p.name}: expected columns prompt,group")
        out: dict[str, str] = {}
        for i, row in enumerate(reader):
            pid = _as_id(row["prompt"], "prompt", i, p.name)
            out[pid] = _as_id(row["group"], "group", i, p.name)
    if not out:
        raise InputError(f"{p.name}: no rows")
    return out


def write_ratings_csv(path: str | Path, ratings: Ratings) -> None:
    """Write ratings as CSV, atomically."""
    from papershelf.repro import atomic_path

    rows = ratings.to_rows()
    with atomic_path(path, mode="w") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
