"""Reading pools and labels from the files users have: CSV (any column names) and .npy arrays.

Every problem is an :class:`~papershelf.errors.InputError` naming the file, the column and the row.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from papershelf.cli import read_npy
from papershelf.errors import InputError


@dataclass(frozen=True)
class PoolFile:
    """Columns read from a pool CSV: item ids (strings), and the numeric columns asked for."""

    ids: list[str]
    columns: dict[str, np.ndarray]


def _read_rows(path: str | Path, what: str) -> tuple[list[str], list[dict[str, str]]]:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{what} file {str(path)!r} does not exist")
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            header = list(reader.fieldnames or [])
            rows = list(reader)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{what} file {str(path)!r} is not a readable CSV: {exc}") from None
    if not header:
        raise InputError(f"{what} file {str(path)!r} is empty (no header row)")
    if not rows:
        raise InputError(f"{what} file {str(path)!r} has a header but no rows")
    return header, rows


def _number(path: str | Path, column: str, row: int, text: str | None, low: float, high: float) -> float:
    try:
        value = float(text) if text is not None else math.nan
    except ValueError:
        raise InputError(f"{path}: column {column!r}, row {row}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise InputError(f"{path}: column {column!r}, row {row}: value is missing, NaN or infinite")
    if not low <= value <= high:
        raise InputError(f"{path}: column {column!r}, row {row}: {value:g} is outside [{low:g}, {high:g}]")
    return value


def read_pool_csv(
    path: str | Path,
    *,
    id_col: str,
    numeric: dict[str, str | None],
    loss_range: tuple[float, float],
) -> PoolFile:
    """Read ``id_col`` and the numeric columns ``numeric`` (role -> column name, None to skip).

    Ids must be unique and non-empty; numbers finite and inside ``loss_range``.
    """
    header, rows = _read_rows(path, "pool")
    wanted = {role: col for role, col in numeric.items() if col is not None}
    for col in [id_col, *wanted.values()]:
        if col not in header:
            raise InputError(f"pool file {str(path)!r} has no column {col!r} (columns: {', '.join(header)})")
    ids: list[str] = []
    seen: set[str] = set()
    for row_number, row in enumerate(rows, start=2):
        item = (row.get(id_col) or "").strip()
        if not item:
            raise InputError(f"{path}: column {id_col!r}, row {row_number}: empty id")
        if item in seen:
            raise InputError(f"{path}: column {id_col!r}, row {row_number}: duplicate id {item!r}")
        seen.add(item)
        ids.append(item)
    low, high = loss_range
    columns = {
        role: np.array(
            [_number(path, col, i, row.get(col), low, high) for i, row in enumerate(rows, start=2)]
        )
        for role, col in wanted.items()
    }
    return PoolFile(ids, columns)


def read_labels_csv(
    path: str | Path, *, id_col: str, label_col: str, loss_range: tuple[float, float]
) -> dict[str, float]:
    """``{id: label}`` from a labels CSV; duplicate ids and out-of-range labels are errors."""
    header, rows = _read_rows(path, "labels")
    for col in (id_col, label_col):
        if col not in header:
            raise InputError(
                f"labels file {str(path)!r} has no column {col!r} (columns: {', '.join(header)})"
            )
    labels: dict[str, float] = {}
    low, high = loss_range
    for row_number, row in enumerate(rows, start=2):
        item = (row.get(id_col) or "").strip()
        if not item:
            raise InputError(f"{path}: column {id_col!r}, row {row_number}: empty id")
        if item in labels:
            raise InputError(f"{path}: row {row_number}: duplicate label for id {item!r}")
        labels[item] = _number(path, label_col, row_number, row.get(label_col), low, high)
    return labels


def read_vector(path: str | Path, what: str) -> np.ndarray:
    """A 1-D float array from a .npy file (no pickles)."""
    arr = read_npy(str(path), what)  # missing, corrupt, pickled or .npz: one error line
    if arr.ndim != 1:
        raise InputError(f"{what} file {str(path)!r} must hold a 1-D array, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
        raise InputError(f"{what} file {str(path)!r} must hold real numbers, got dtype {arr.dtype}")
    return arr.astype(np.float64)
