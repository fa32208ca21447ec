"""Online class-matching instances: offline agents in classes, items that arrive one at a time.

An :class:`Instance` holds

* ``agent_class`` — int64 array of shape (n_agents,): the class of every offline agent, labels
  0 … n_classes-1, every class non-empty; every agent has unit capacity;
* ``items`` — a tuple of int64 arrays, one per item in arrival order: the agents the item has an
  edge to (sorted, no repeats, possibly empty);
* ``values`` — float64 array of shape (n_items,): the value of one unit of each item (default 1).
  The paper's guarantees are stated for unit values; other values are accepted for the metrics.

Two file formats, both written atomically:

* JSON: ``{"format": "fair-class-matching/instance", "agent_class": [0, 0, 1, ...],
  "items": [[0, 3], [1], ...], "values": [1.0, ...], "class_names": ["north", ...]}``
  (``values`` and ``class_names`` optional);
* NPZ: arrays ``agent_class`` (n,), ``indptr`` (m+1,), ``indices`` (nnz,), optional ``values`` (m,):
  the items' neighbour lists in CSR form.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from papershelf.errors import InputError
from papershelf.repro import atomic_path, atomic_write_json

FORMAT = "fair-class-matching/instance"


@dataclass(frozen=True)
class Instance:
    """A validated instance; build it with :meth:`from_lists` (which checks everything)."""

    agent_class: np.ndarray
    items: tuple[np.ndarray, ...]
    values: np.ndarray
    class_names: tuple[str, ...] = field(default=())
    name: str = "instance"

    # ---- construction --------------------------------------------------------------------------
    @classmethod
    def from_lists(
        cls,
        agent_class: Sequence[int] | np.ndarray,
        items: Sequence[Sequence[int]],
        values: Sequence[float] | np.ndarray | None = None,
        *,
        class_names: Sequence[str] | None = None,
        n_classes: int | None = None,
        name: str = "instance",
    ) -> Instance:
        """Check and build an instance.

        ``agent_class[a]`` is agent a's class; ``items[t]`` lists the agents item t has edges to;
        ``values[t] > 0`` is item t's value per unit (default 1). ``n_classes`` (default: the largest
        label + 1, or ``len(class_names)``) lets you declare classes, every one of which must have an
        agent.
        """
        labels = _int_array("agent_class", agent_class)
        if labels.ndim != 1 or labels.size == 0:
            raise InputError("agent_class must be a non-empty 1-D list of class labels, one per agent")
        if labels.min() < 0:
            raise InputError(f"agent_class has a negative label {int(labels.min())}; labels are 0, 1, ...")
        if class_names is not None:
            if isinstance(class_names, (str, bytes)) or not isinstance(class_names, (Sequence, np.ndarray)):
                raise InputError(f"class_names must be a list of names, got {type(class_names).__name__}")
            class_names = tuple(str(c) for c in class_names)
            if n_classes is None:
                n_classes = len(class_names)
            elif n_classes != len(class_names):
                raise InputError(f"{len(class_names)} class_names given for {n_classes} classes")
        k = int(labels.max()) + 1 if n_classes is None else int(n_classes)
        if labels.max() >= k:
            raise InputError(f"agent_class has label {int(labels.max())} but there are only {k} classes")
        counts = np.bincount(labels, minlength=k)
        if (counts == 0).any():
            empty = [int(c) for c in np.flatnonzero(counts == 0)]
            raise InputError(
                f"class(es) {empty} have no agents; every class needs at least one agent",
                hint="relabel the classes 0..k-1 without gaps",
            )
        n = labels.size
        if isinstance(items, np.ndarray | str | bytes) or not isinstance(items, Sequence):
            raise InputError("items must be a list with one list of agent indices per item")
        checked = []
        for t, nbrs in enumerate(items):
            arr = _int_array(f"item {t}", nbrs)
            if arr.ndim != 1:
                raise InputError(f"item {t} must be a flat list of agent indices")
            if arr.size:
                bad = arr[(arr < 0) | (arr >= n)]
                if bad.size:
                    raise InputError(
                        f"item {t} has an edge to unknown agent {int(bad[0])}; agents are 0..{n - 1}"
                    )
                arr = np.sort(arr)
                if (np.diff(arr) == 0).any():
                    raise InputError(
                        f"item {t} lists agent {int(arr[np.flatnonzero(np.diff(arr) == 0)[0]])} twice"
                    )
            arr.setflags(write=False)
            checked.append(arr)
        m = len(checked)
        if values is None:
            vals = np.ones(m)
        else:
            try:
                vals = np.asarray(values, dtype=np.float64)
            except (TypeError, ValueError):
                raise InputError("values must be a list of numbers, one per item") from None
            if vals.shape != (m,):
                raise InputError(f"values must have one entry per item ({m}), got shape {vals.shape}")
            if not np.isfinite(vals).all():
                raise InputError(
                    f"values must be finite; item {int(np.flatnonzero(~np.isfinite(vals))[0])} is not"
                )
            if (vals <= 0).any():
                t = int(np.flatnonzero(vals <= 0)[0])
                raise InputError(f"values must be positive; item {t} has value {vals[t]:g}")
        labels = labels.astype(np.int64)
        labels.setflags(write=False)
        vals.setflags(write=False)
        return cls(labels, tuple(checked), vals, class_names or tuple(f"class {c}" for c in range(k)), name)

    # ---- shape ---------------------------------------------------------------------------------
    @property
    def n_agents(self) -> int:
        return int(self.agent_class.size)

    @property
    def n_items(self) -> int:
        return len(self.items)

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def n_edges(self) -> int:
        return int(sum(a.size for a in self.items))

    @property
    def class_sizes(self) -> np.ndarray:
        return np.bincount(self.agent_class, minlength=self.n_classes)

    @property
    def unit_values(self) -> bool:
        """True when every item has value 1 (the setting of the paper's guarantees)."""
        return bool(np.all(self.values == 1.0))

    def prefix(self, t: int) -> Instance:
        """The instance made of the first ``t`` items (what an online algorithm has seen at time t)."""
        return Instance(self.agent_class, self.items[:t], self.values[:t], self.class_names, self.name)

    def csr(self) -> tuple[np.ndarray, np.ndarray]:
        """(indptr, indices) of the items' neighbour lists."""
        indptr = np.zeros(self.n_items + 1, dtype=np.int64)
        indptr[1:] = np.cumsum([a.size for a in self.items])
        indices = np.concatenate(self.items) if self.items else np.zeros(0, dtype=np.int64)
        return indptr, indices.astype(np.int64)

    def describe(self) -> str:
        sizes = ", ".join(str(int(s)) for s in self.class_sizes)
        return (
            f"{self.name}: {self.n_agents} agents in {self.n_classes} classes (sizes {sizes}), "
            f"{self.n_items} items, {self.n_edges} edges"
        )

    # ---- files ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": FORMAT,
            "name": self.name,
            "agent_class": self.agent_class.tolist(),
            "class_names": list(self.class_names),
            "items": [a.tolist() for a in self.items],
        }
        if not self.unit_values:
            out["values"] = self.values.tolist()
        return out

    def save(self, path: str | Path) -> None:
        """Write the instance as JSON (``.json``) or NPZ (``.npz``), atomically."""
        path = Path(path)
        if path.suffix == ".npz":
            indptr, indices = self.csr()
            with atomic_path(path, mode="wb") as handle:
                np.savez(
                    handle,
                    agent_class=self.agent_class,
                    indptr=indptr,
                    indices=indices,
                    values=self.values,
                )
        elif path.suffix == ".json":
            atomic_write_json(path, self.to_dict(), indent=None)
        else:
            raise InputError(f"unknown instance file type {path.suffix!r}; use .json or .npz")


def _int_array(name: str, value: Any) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a list of integers") from None
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype == object or arr.dtype.kind not in "iuf" or arr.dtype == np.bool_:
        raise InputError(f"{name} must contain integers, got {arr.dtype} entries")
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all() or not np.all(arr == np.round(arr)):
            raise InputError(f"{name} must contain integers, got non-integral numbers")
    return arr.astype(np.int64)


def from_dict(data: Any, *, name: str = "instance") -> Instance:
    """Build an instance from the JSON structure described in the module docstring."""
    if not isinstance(data, dict):
        raise InputError("an instance file must hold a JSON object with 'agent_class' and 'items'")
    fmt = data.get("format", FORMAT)
    if fmt != FORMAT:
        raise InputError(f"not a fair-class-matching instance (format {fmt!r})")
    missing = [k for k in ("agent_class", "items") if k not in data]
    if missing:
        raise InputError(f"instance file lacks {', '.join(repr(m) for m in missing)}")
    items = data["items"]
    if not isinstance(items, list):
        raise InputError("'items' must be a list with one list of agent indices per item")
    for t, entry in enumerate(items):
        if not isinstance(entry, list):
            raise InputError(f"item {t} must be a list of agent indices, got {type(entry).__name__}")
    return Instance.from_lists(
        data["agent_class"],
        items,
        data.get("values"),
        class_names=data.get("class_names"),
        name=str(data.get("name", name)),
    )


def load(path: str | Path) -> Instance:
    """Read an instance from a ``.json`` or ``.npz`` file (clear errors for malformed files)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"instance file {str(path)!r} does not exist")
    if path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
            raise InputError(f"{path.name} is not a valid .npz instance file ({exc})") from None
        missing = [k for k in ("agent_class", "indptr", "indices") if k not in arrays]
        if missing:
            raise InputError(f"{path.name} lacks array(s) {', '.join(missing)}")
        indptr = _int_array("indptr", arrays["indptr"])
        indices = _int_array("indices", arrays["indices"])
        if (
            indptr.ndim != 1
            or indptr.size == 0
            or indptr[0] != 0
            or (np.diff(indptr) < 0).any()
            or indptr[-1] != indices.size
        ):
            raise InputError(f"{path.name}: indptr must rise from 0 to len(indices)")
        items = [indices[indptr[t] : indptr[t + 1]] for t in range(indptr.size - 1)]
        return Instance.from_lists(arrays["agent_class"], items, arrays.get("values"), name=path.stem)
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"{path.name} is not valid JSON ({exc})") from None
        return from_dict(data, name=path.stem)
    raise InputError(f"unknown instance file type {path.suffix!r}; use .json or .npz")
