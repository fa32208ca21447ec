"""Validation and reading of a models × items score matrix.

A score matrix has one row per evaluated model and one column per benchmark item; cells are scores
(0/1 for right/wrong, or any real number), ``NaN`` where a model was not run on an item. Every public
function validates its matrix here, so a bad matrix fails with one :class:`~papershelf.errors.InputError`
that says what is wrong and where.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from papershelf.errors import InputError

MISSING_TOKENS = frozenset({"", "na", "nan", "null", "none", "?"})
MIN_MODELS = 3
MIN_ITEMS = 2


def _list(indices: np.ndarray, limit: int = 5) -> str:
    shown = ", ".join(str(int(i)) for i in indices[:limit])
    return shown + (f" (and {indices.size - limit} more)" if indices.size > limit else "")


def check_matrix(
    X: object,
    *,
    name: str = "X",
    allow_missing: bool = True,
    drop_constant: bool = False,
    min_models: int = MIN_MODELS,
) -> tuple[np.ndarray, np.ndarray]:
    """Validate a score matrix; return it as a float64 copy and the indices of the columns kept.

    Raises :class:`InputError` for: non-numeric cells, a shape other than 2-D, fewer than ``min_models``
    models (rows) or 2 items (columns), infinite cells, rows or columns with no observed cell, missing
    cells when ``allow_missing`` is false, and constant columns (unless ``drop_constant``, which removes
    them; a constant item carries no information about the ranking).
    """
    try:
        arr = np.array(X, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(
            f"{name} has non-numeric cells; expected a models × items matrix of numbers (NaN for missing)"
        ) from None
    if arr.ndim != 2:
        raise InputError(f"{name} must be a 2-D models × items matrix, got shape {arr.shape}")
    n_models, n_items = arr.shape
    if n_models < min_models:
        raise InputError(f"{name} has {n_models} model row(s); need at least {min_models} models to rank")
    if n_items < MIN_ITEMS:
        raise InputError(f"{name} has {n_items} item column(s); need at least {MIN_ITEMS} items")
    if np.isinf(arr).any():
        r, c = np.argwhere(np.isinf(arr))[0]
        raise InputError(f"{name} has an infinite cell at model row {r}, item column {c}")
    missing = np.isnan(arr)
    if missing.any():
        if not allow_missing:
            r, c = np.argwhere(missing)[0]
            raise InputError(
                f"{name} has {int(missing.sum())} missing cell(s) (first at model row {r}, item column {c}); "
                "this computation needs a complete matrix",
                hint="drop the incomplete models or items first",
            )
        empty_rows = np.flatnonzero(missing.all(axis=1))
        if empty_rows.size:
            raise InputError(f"{name}: model row(s) {_list(empty_rows)} are all missing")
        empty_cols = np.flatnonzero(missing.all(axis=0))
        if empty_cols.size:
            raise InputError(f"{name}: item column(s) {_list(empty_cols)} are all missing")
    lo = np.nanmin(arr, axis=0)
    hi = np.nanmax(arr, axis=0)
    constant = np.flatnonzero((lo == hi) | ((~missing).sum(axis=0) < 2))
    keep = np.arange(n_items)
    if constant.size:
        if not drop_constant:
            raise InputError(
                f"{name}: item column(s) {_list(constant)} are constant across models (or observed once) "
                "and carry no information about the ranking",
                hint="drop them (drop_constant=True; CLI: --drop-constant)",
            )
        keep = np.setdiff1d(keep, constant)
        if keep.size < MIN_ITEMS:
            raise InputError(
                f"{name}: only {keep.size} non-constant item column(s) are left; need at least {MIN_ITEMS}"
            )
        arr = arr[:, keep]
        if missing.any():
            empty_rows = np.flatnonzero(np.isnan(arr).all(axis=1))
            if empty_rows.size:
                raise InputError(
                    f"{name}: model row(s) {_list(empty_rows)} have no observed cell on a non-constant item"
                )
    return arr, keep


def is_binary(X: np.ndarray) -> bool:
    """True when every observed cell is 0 or 1."""
    obs = X[~np.isnan(X)]
    return bool(np.all((obs == 0) | (obs == 1)))


@dataclass(frozen=True)
class ScoreMatrix:
    """A matrix read from disk: ``values`` (models × items, float64, NaN = missing) and optional labels."""

    values: np.ndarray
    models: list[str] | None = None
    items: list[str] | None = None


def _parse_cell(text: str) -> float | None:
    """A number, NaN for a missing token, or None when the cell is not a number."""
    token = text.strip()
    if token.lower() in MISSING_TOKENS:
        return math.nan
    try:
        value = float(token)
    except ValueError:
        return None
    return value


def read_csv(path: str | Path) -> ScoreMatrix:
    """Read a CSV score matrix: optional header row of item names, optional first column of model names.

    A first row whose cells (after the first) are all non-numeric is a header; a first column whose
    data cells are all non-numeric holds model names. Empty, ``NA``, ``nan``, ``null`` and ``?`` cells are
    missing. Any other non-numeric cell is an error naming its row and column.
    """
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            rows = [row for row in csv.reader(handle) if any(cell.strip() for cell in row)]
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 text CSV file") from None
    except csv.Error as exc:
        raise InputError(f"{path}: malformed CSV ({exc})") from None
    if not rows:
        raise InputError(f"{path}: the CSV file is empty")
    items = None
    first = rows[0]
    if len(first) > 1 and all(_parse_cell(c) is None for c in first[1:]):
        items = [c.strip() for c in first]
        rows = rows[1:]
    if not rows:
        raise InputError(f"{path}: the CSV file has a header but no data rows")
    models = None
    if all(_parse_cell(row[0]) is None for row in rows if row):
        models = [row[0].strip() for row in rows]
        rows = [row[1:] for row in rows]
        if items is not None:
            items = items[1:]
    width = len(rows[0])
    offset_row = 2 if items is not None else 1
    offset_col = 2 if models is not None else 1
    values = np.empty((len(rows), width))
    for r, row in enumerate(rows):
        if len(row) != width:
            raise InputError(
                f"{path}: line {r + offset_row} has {len(row)} data cells, expected {width} like the first"
            )
        for c, cell in enumerate(row):
            value = _parse_cell(cell)
            if value is None:
                raise InputError(
                    f"{path}: non-numeric cell {cell.strip()!r} at line {r + offset_row}, "
                    f"column {c + offset_col}; expected a number or an empty cell for missing"
                )
            values[r, c] = value
    if items is not None and len(items) != width:
        items = None
    return ScoreMatrix(values, models, items)


def read_matrix(path: str | Path) -> ScoreMatrix:
    """Read a score matrix from ``.npy`` (a 2-D numeric array) or ``.csv`` (see :func:`read_csv`)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"matrix file {str(p)!r} does not exist")
    suffix = p.suffix.lower()
    if suffix == ".npy":
        try:
            arr = np.load(p, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise InputError(f"{p}: not a readable .npy array ({' '.join(str(exc).split())})") from None
        if arr.dtype.kind not in "biuf":
            raise InputError(f"{p}: the array has non-numeric dtype {arr.dtype}; expected numbers")
        return ScoreMatrix(arr.astype(np.float64))
    if suffix == ".csv":
        return read_csv(p)
    raise InputError(f"matrix file {str(p)!r} must end in .npy or .csv")
