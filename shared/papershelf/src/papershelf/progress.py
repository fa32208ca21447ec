"""Progress bars that stay silent when asked to, or when stderr is not a terminal (CI, pipes, tests)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


def progress(
    iterable: Iterable[T], *, total: int | None = None, desc: str | None = None, quiet: bool = False
) -> Iterator[T]:
    """Wrap ``iterable`` in a tqdm bar unless ``quiet`` or stderr is not a TTY."""
    disable = quiet or not sys.stderr.isatty()
    yield from tqdm(iterable, total=total, desc=desc, disable=disable, leave=False, dynamic_ncols=True)
