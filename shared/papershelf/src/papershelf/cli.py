"""An argparse-based CLI builder shared by every package.

>>> app = App("demo-pkg", "0.1.0", "A demo.")
>>> @app.command("hello", help="say hello", args=[arg("--name", default="world")])
... def hello(args):
...     print(f"hello {args.name}")
>>> app.main(["hello", "--name", "shelf"])
hello shelf
0

Errors a user can cause (:class:`~papershelf.errors.PapershelfError`, including ``InputError``) print a
single ``error: …`` line on stderr and return exit code 2, with no traceback; argparse usage errors
(a missing required flag, a value of the wrong type, an unknown choice) are one ``error: …`` line too,
with exit code 2; Ctrl-C returns 130.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from papershelf.errors import PapershelfError, check_int

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

MAX_SEED = 2**32 - 1  # the widest range every RNG on the shelf accepts (numpy's legacy RandomState)


def seed_value(text: str) -> int:
    """``--seed``: an integer in [0, 2**32 − 1] (numpy and torch both take it), else a usage error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be in [0, {MAX_SEED}], got {value}")
    return value


def output_path(text: str) -> str:
    """``--out``: a non-empty path (an empty one would silently write nothing), else a usage error."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must be a file name, got an empty string")
    return text


def check_threads(value: Any, flag: str = "--threads") -> int:
    """A thread count in 1..this machine's CPU count: torch crashes (segfault) on counts far beyond it."""
    return check_int(flag, value, low=1, high=os.cpu_count() or 1)


def read_npy(path: str, flag: str) -> Any:
    """The one array a user saved with ``np.save`` at ``path``, or an :class:`InputError` naming ``flag``: a
    missing, empty, corrupt or pickled file, or an ``.npz`` archive. Shape, dtype and values are the
    caller's to check. (NumPy is imported here; the core itself does not depend on it.)"""
    from pathlib import Path

    import numpy as np

    from papershelf.errors import InputError

    p = Path(path)
    if not p.is_file():
        raise InputError(f"{flag}: no such file {str(path)!r}")
    try:
        arr = np.load(p, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        detail = " ".join(str(exc).split())[:100] or "empty file"
        with open(p, "rb") as handle:
            header = handle.read(6)
        if header != b"\x93NUMPY":  # numpy tries any other file as a pickle, and says so
            detail = "no NumPy header: not a file written by np.save" if header else "empty file"
        elif "pickle" in detail:  # an object array: never unpickled from a user's file
            detail = "it holds pickled Python objects, which are not loaded"
        raise InputError(f"{flag}: cannot read {str(path)!r} as .npy ({detail})") from None
    if not isinstance(arr, np.ndarray):  # an .npz archive holds several arrays
        arr.close()
        raise InputError(f"{flag}: {str(path)!r} is an .npz archive; give one array saved with np.save")
    return arr


def read_text(path: str, flag: str) -> str:
    """The UTF-8 text of a user's file at ``path`` (a prompt, a development text), or an :class:`InputError`
    naming ``flag``: a missing path, a folder, or bytes that are not UTF-8. Emptiness is the caller's to
    judge (an empty prompt and an empty token list are different errors)."""
    from pathlib import Path

    from papershelf.errors import InputError

    p = Path(path)
    if not p.is_file():
        raise InputError(f"{flag} {str(path)!r} is not a file")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{flag} {str(path)!r} is not UTF-8 text") from None


# Flags a command may opt into by name; every package spells them the same way.
COMMON_FLAGS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "seed": (("--seed",), {"type": seed_value, "default": 0, "help": "random seed (default: 0)"}),
    "device": (
        ("--device",),
        {"choices": ("auto", "cpu", "cuda"), "default": "auto", "help": "compute device (default: auto)"},
    ),
    "out": (
        ("--out",),
        {"type": output_path, "default": None, "metavar": "FILE", "help": "write results to FILE"},
    ),
    "quiet": (("--quiet", "-q"), {"action": "store_true", "help": "print nothing but results"}),
}


@dataclass(frozen=True)
class Arg:
    """The positional and keyword arguments of one ``parser.add_argument`` call."""

    flags: tuple[str, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


def arg(*flags: str, **kwargs: Any) -> Arg:
    """Describe one command-line argument, exactly as ``ArgumentParser.add_argument`` takes it."""
    return Arg(flags, kwargs)


class _OneLineErrorParser(argparse.ArgumentParser):
    """argparse, but a usage error is one ``error:`` line (naming the flag, pointing at ``--help``)
    instead of the whole usage block followed by the message; subcommand parsers inherit it."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_USAGE, f"error: {message} (see `{self.prog} --help`)\n")


@dataclass
class _Command:
    name: str
    func: Callable[[argparse.Namespace], int | None]
    help: str
    args: Sequence[Arg]
    common: Sequence[str]


class App:
    """A command-line program made of subcommands, with ``--version`` and error mapping."""

    def __init__(self, prog: str, version: str, description: str = "") -> None:
        self.prog = prog
        self.version = version
        self.description = description
        self._commands: dict[str, _Command] = {}

    def command(
        self,
        name: str,
        *,
        help: str,
        args: Sequence[Arg] = (),
        common: Sequence[str] = (),
    ) -> Callable[[Callable[[argparse.Namespace], int | None]], Callable[[argparse.Namespace], int | None]]:
        """Register ``func(args) -> exit code | None`` as subcommand ``name``.

        ``common`` names shared flags from :data:`COMMON_FLAGS` (``seed``, ``device``, ``out``, ``quiet``).
        """
        unknown = [c for c in common if c not in COMMON_FLAGS]
        if unknown:
            raise ValueError(f"unknown common flag(s) {unknown}; known: {sorted(COMMON_FLAGS)}")

        def register(func: Callable[[argparse.Namespace], int | None]):
            self._commands[name] = _Command(name, func, help, tuple(args), tuple(common))
            return func

        return register

    @property
    def commands(self) -> list[str]:
        return list(self._commands)

    def parser(self) -> argparse.ArgumentParser:
        parser = _OneLineErrorParser(prog=self.prog, description=self.description)
        parser.add_argument("--version", action="version", version=f"{self.prog} {self.version}")
        sub = parser.add_subparsers(dest="command", metavar="COMMAND")
        for cmd in self._commands.values():
            p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
            for a in cmd.args:
                p.add_argument(*a.flags, **a.kwargs)
            for c in cmd.common:
                flags, kwargs = COMMON_FLAGS[c]
                p.add_argument(*flags, **kwargs)
            p.set_defaults(_func=cmd.func)
        return parser

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Run the program on ``argv`` (default ``sys.argv[1:]``) and return its exit code."""
        parser = self.parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help, --version, or a usage error
            return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE
        if getattr(args, "command", None) is None:
            parser.print_help()
            return EXIT_USAGE
        try:
            code = args._func(args)
        except PapershelfError as exc:
            print(f"error: {exc.one_line()}", file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt:
            print("error: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        except BrokenPipeError:  # e.g. piped into `head`
            return EXIT_OK
        return EXIT_OK if code is None else int(code)

    def run(self) -> None:
        """Entry point for ``[project.scripts]``: exit with :meth:`main`'s code."""
        sys.exit(self.main())
