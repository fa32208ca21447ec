"""A labelling campaign saved in a state file: ask for items, feed labels back, read the interval.

The state file holds the configuration, the pool (ids, surrogate, proxy), the ids drawn so far in
order, and the labels received. Loading it replays the draws through the :class:`~celeus_eval.Celeus`
engine from the same seed, checks each replayed draw against the recorded one, and observes the
labels in draw order — so a campaign run in batches of any size gives exactly the result of
``celeus-eval run`` on the same pool and seed. Writes are atomic and a checksum catches corruption.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from celeus_eval import __version__
from celeus_eval.celeus import Celeus, EvalResult
from papershelf.errors import InputError, check_int
from papershelf.repro import atomic_write_json

FORMAT = "celeus-eval/campaign"
FORMAT_VERSION = 1
CONFIG_KEYS = (
    "alpha",
    "target_width",
    "sampling",
    "beta",
    "loss_range",
    "estimand",
    "alpha_split",
    "grid",
    "bet_cap",
    "hedge",
    "bounds",
    "seed",
    "max_labels",
)


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass
class Campaign:
    """An in-progress evaluation: the engine plus the ids drawn and the labels received."""

    config: dict[str, Any]
    ids: list[str]
    surrogate: np.ndarray
    proxy: np.ndarray | None
    draws: list[str] = field(default_factory=list)
    labels: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._position = {item: i for i, item in enumerate(self.ids)}
        options = {k: v for k, v in self.config.items() if k not in ("seed", "max_labels")}
        self.engine = Celeus(self.surrogate, self.proxy, seed=self.config["seed"], **options)
        self._replay()

    @classmethod
    def new(cls, ids: list[str], surrogate: np.ndarray, proxy: np.ndarray | None, **config: Any) -> Campaign:
        unknown = set(config) - set(CONFIG_KEYS)
        if unknown:
            raise InputError(f"unknown campaign settings: {', '.join(sorted(unknown))}")
        if config.get("seed") is None:
            config["seed"] = int(np.random.default_rng().integers(2**31))
        config["seed"] = check_int("seed", config["seed"], low=0)
        if config.get("max_labels") is not None:
            config["max_labels"] = check_int("max_labels", config["max_labels"], low=1)
        config["loss_range"] = [float(x) for x in config.get("loss_range", (0.0, 1.0))]
        return cls(config, list(ids), np.asarray(surrogate, dtype=float), proxy)

    # ---- replay ---------------------------------------------------------------------------------
    def _replay(self) -> None:
        for expected in self.draws:
            index = self.engine.propose()
            if self.ids[index] != expected:
                raise InputError(
                    "state file is inconsistent: its recorded draws do not match its seed and pool",
                    hint="restore the state file from a backup",
                )
        self._observe_ready()

    def _observe_ready(self) -> None:
        """Observe labels in draw order, up to the first missing one or the stopping time."""
        while self.engine.pending and not self.engine.reached:
            item = self.ids[self.engine.pending[0]]
            if item not in self.labels:
                break
            self.engine.observe(self.labels[item])

    # ---- the verbs ------------------------------------------------------------------------------
    @property
    def budget_left(self) -> int:
        limit = self.config.get("max_labels") or len(self.ids)
        return max(0, min(limit, len(self.ids)) - len(self.draws))

    def next_items(self, k: int) -> list[str]:
        """The ids to label next: the pending ones, topped up with new draws to ``k`` in all."""
        k = check_int("k", k, low=1)
        pending = [item for item in self.draws if item not in self.labels]
        if not self.engine.reached:
            for _ in range(min(k - len(pending), self.budget_left)):
                item = self.ids[self.engine.propose()]
                self.draws.append(item)
                pending.append(item)
        return pending[:k]

    def add_labels(self, labels: dict[str, float]) -> int:
        """Record labels for drawn items (all checked before any is applied); return how many."""
        drawn = set(self.draws)
        for item in labels:
            if item not in self._position:
                raise InputError(f"labels: id {item!r} is not in the pool")
            if item in self.labels:
                raise InputError(f"labels: id {item!r} already has a label")
            if item not in drawn:
                raise InputError(
                    f"labels: id {item!r} was not requested by `next`; label only requested items"
                )
        self.labels.update(labels)
        self._observe_ready()
        return len(labels)

    def result(self) -> EvalResult:
        return self.engine.result()

    def status(self) -> dict[str, Any]:
        res = self.result()
        return {
            **res.as_dict(),
            "target_width": self.config["target_width"],
            "alpha": self.config["alpha"],
            "pool_size": len(self.ids),
            "drawn": len(self.draws),
            "labels_received": len(self.labels),
            "pending": sum(1 for item in self.draws if item not in self.labels),
            "unused_labels": len(self.labels) - res.n_labels,
        }

    # ---- persistence ----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        body = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "package_version": __version__,
            "config": self.config,
            "pool": {
                "ids": self.ids,
                "surrogate": self.surrogate.tolist(),
                "proxy": None if self.proxy is None else self.proxy.tolist(),
            },
            "draws": self.draws,
            "labels": self.labels,
        }
        return {**body, "checksum": _digest(body)}

    def save(self, path: str | Path) -> None:
        atomic_write_json(path, self.to_json(), indent=None)

    @classmethod
    def load(cls, path: str | Path) -> Campaign:
        path = Path(path)
        if not path.is_file():
            raise InputError(
                f"state file {str(path)!r} does not exist", hint="create it with `celeus-eval init`"
            )
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"state file {str(path)!r} is corrupted (not valid JSON: {exc})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InputError(f"state file {str(path)!r} is not a celeus-eval campaign")
        if data.get("format_version") != FORMAT_VERSION:
            raise InputError(f"state file {str(path)!r} has format version {data.get('format_version')!r}")
        checksum = data.pop("checksum", None)
        if checksum != _digest(data):
            raise InputError(
                f"state file {str(path)!r} is corrupted or was edited by hand (checksum mismatch)"
            )
        pool = data["pool"]
        proxy = None if pool["proxy"] is None else np.asarray(pool["proxy"], dtype=float)
        return cls(
            data["config"],
            pool["ids"],
            np.asarray(pool["surrogate"], dtype=float),
            proxy,
            list(data["draws"]),
            {str(k): float(v) for k, v in data["labels"].items()},
        )
