"""The ``papershelf`` command: list installed paper packages, gather bench reports, show the environment."""

from __future__ import annotations

import argparse
import glob
import json
import sys
from importlib import metadata

from papershelf import __version__
from papershelf.bench import environment, report
from papershelf.cli import App, arg
from papershelf.errors import InputError
from papershelf.repro import atomic_write_text

ENTRY_POINT_GROUP = "papershelf.packages"

app = App(
    "papershelf", __version__, "The papershelf core: list installed paper packages and gather benchmarks."
)


def installed_packages() -> list[dict[str, str]]:
    """Every distribution registered in the ``papershelf.packages`` entry-point group."""
    found = []
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist
        name = dist.metadata["Name"] if dist is not None else ep.name
        version = dist.version if dist is not None else "?"
        scripts = [
            e.name for e in (dist.entry_points if dist is not None else []) if e.group == "console_scripts"
        ]
        found.append(
            {"distribution": name, "module": ep.value, "version": version, "cli": ", ".join(scripts)}
        )
    return sorted(found, key=lambda d: d["distribution"])


@app.command("list", help="list the installed paper packages", args=[arg("--json", action="store_true")])
def _list(args: argparse.Namespace) -> None:
    packages = installed_packages()
    if args.json:
        print(json.dumps(packages, indent=2))
        return
    if not packages:
        print("no papershelf packages installed (pip install <package>, e.g. celeus-eval)")
        return
    width = max(len(p["distribution"]) for p in packages)
    print(f"{'distribution':<{width}}  {'version':<9}  cli")
    for p in packages:
        print(f"{p['distribution']:<{width}}  {p['version']:<9}  {p['cli']}")


@app.command(
    "bench-report",
    help="gather bench JSON files into a markdown table",
    args=[arg("files", nargs="*", help="bench JSON files or glob patterns")],
    common=["out"],
)
def _bench_report(args: argparse.Namespace) -> None:
    # A pattern that matches nothing contributes nothing; a plain path that is missing is an error.
    paths = sorted(
        {p for pattern in args.files for p in (glob.glob(pattern) if glob.has_magic(pattern) else [pattern])}
    )
    try:
        text = report(paths)
    except (OSError, json.JSONDecodeError, ValueError) as exc:
        raise InputError(f"cannot build the report: {exc}") from None
    if args.out:
        atomic_write_text(args.out, text)
    else:
        sys.stdout.write(text)


@app.command("env", help="print the environment a benchmark would record")
def _env(args: argparse.Namespace) -> None:
    print(json.dumps(environment(), indent=2))


def main(argv: list[str] | None = None) -> int:
    return app.main(argv)


if __name__ == "__main__":
    sys.exit(main())
