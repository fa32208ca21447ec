"""The error types every package raises, and small validators that name the offending argument.

A user's mistake raises :class:`InputError` (a ``ValueError``); the CLI turns it into one
``error: …`` line and exit code 2. Bugs keep their tracebacks.
"""

from __future__ import annotations

import math
from typing import Any


class PapershelfError(Exception):
    """Base class of papershelf errors; ``hint`` says what to do about it."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def one_line(self) -> str:
        """The message (and hint) on a single line, for the CLI."""
        text = " ".join(str(self).split())
        return f"{text} (hint: {self.hint})" if self.hint else text


class InputError(PapershelfError, ValueError):
    """Bad input from the user: a wrong shape, NaN, an out-of-range parameter, a corrupt file."""


class ConfigError(PapershelfError):
    """An inconsistent configuration (options that cannot be combined, a missing setting)."""


class MissingDependencyError(PapershelfError, ImportError):
    """An optional dependency is missing; the message names the extra that provides it."""

    def __init__(self, module: str, *, package: str, extra: str) -> None:
        super().__init__(
            f"this needs the optional module {module!r}, which is not installed",
            hint=f"pip install '{package}[{extra}]'",
        )
        self.module = module
        self.extra = extra


def check_number(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Return ``value`` as a float after checking it is finite and inside the stated interval.

    >>> check_number("alpha", 0.05, low=0, high=1, low_open=True, high_open=True)
    0.05
    """
    if isinstance(value, bool):
        raise InputError(f"{name} must be a number, got {value!r}")
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number, got {value!r}") from None
    except OverflowError:  # an integer beyond the float range
        raise InputError(f"{name} must be finite, got an integer of {len(str(abs(value)))} digits") from None
    if not math.isfinite(value):
        raise InputError(f"{name} must be finite, got {value}")
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        left = "(" if low_open else "["
        right = ")" if high_open else "]"
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        raise InputError(f"{name} must be in {left}{lo}, {hi}{right}, got {value:g}")
    return value


def check_int(name: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    """Return ``value`` as an int after checking it is an integer inside [low, high]."""
    if hasattr(value, "item") and not isinstance(value, bool):  # numpy / torch scalars
        try:
            value = value.item()
        except (TypeError, ValueError):
            raise InputError(f"{name} must be a single integer, got an array") from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{name} must be an integer, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        lo = "-inf" if low is None else str(low)
        hi = "inf" if high is None else str(high)
        raise InputError(f"{name} must be an integer in [{lo}, {hi}], got {value}")
    return value


def check_choice(name: str, value: Any, choices: tuple[str, ...] | list[str]) -> str:
    """Return ``value`` after checking it is one of ``choices``."""
    if value not in choices:
        raise InputError(f"{name} must be one of {', '.join(map(str, choices))}; got {value!r}")
    return value
