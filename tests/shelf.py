"""Repository tooling behind the Makefile: package metadata, the catalog, scaffolding, releases, and the
isolated-install check. The repo-wide tests import it too, so the checks and the tools agree.

    python tests/shelf.py catalog [--write]      # print or rewrite the generated catalog tables
    python tests/shelf.py new <dist>             # scaffold a package that passes the contract checks
    python tests/shelf.py release <dist> <x.y.z> # bump, changelog, build, check, tag
    python tests/shelf.py check-dist             # each package alone in a fresh venv (wheels in dist/)
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "packages"
README_HEADINGS = (
    "Paper",
    "Install",
    "Quickstart",
    "CLI",
    "Results",
    "Fidelity",
    "Anchors",
    "Limitations",
    "Citation",
)
STATUSES = ("scaffold", "in-progress", "complete")
CATALOG_START, CATALOG_END = "<!-- catalog:start -->", "<!-- catalog:end -->"
VERSION_RE = re.compile(r'^__version__\s*=\s*"([^"]+)"', re.MULTILINE)


@dataclass(frozen=True)
class Package:
    """What the shelf knows about one paper package, read from its source tree."""

    path: Path
    dist: str
    module: str
    version: str
    description: str
    meta: dict
    pyproject: dict

    @property
    def init_file(self) -> Path:
        return self.path / "src" / self.module / "__init__.py"


def module_name(dist: str) -> str:
    return dist.replace("-", "_")


def read_package(path: Path) -> Package:
    data = tomllib.loads((path / "pyproject.toml").read_text(encoding="utf-8"))
    project = data.get("project", {})
    dist = project.get("name", "")
    module = module_name(dist)
    init = path / "src" / module / "__init__.py"
    match = VERSION_RE.search(init.read_text(encoding="utf-8")) if init.exists() else None
    return Package(
        path=path,
        dist=dist,
        module=module,
        version=match.group(1) if match else "",
        description=project.get("description", ""),
        meta=data.get("tool", {}).get("papershelf", {}),
        pyproject=data,
    )


def packages() -> list[Package]:
    """Every package under packages/, sorted by distribution name."""
    if not PACKAGES.is_dir():
        return []
    return sorted(
        (read_package(p) for p in PACKAGES.iterdir() if (p / "pyproject.toml").exists()), key=lambda p: p.dist
    )


# ---- catalog ---------------------------------------------------------------------------------------
def catalog_table(pkgs: list[Package] | None = None, *, link_prefix: str = "packages/") -> str:
    rows = [
        "| package | paper | arXiv | version | status |",
        "|---|---|---|---|---|",
    ]
    for p in pkgs if pkgs is not None else packages():
        arxiv = p.meta.get("arxiv") or ""
        arxiv_cell = f"[{arxiv}](https://arxiv.org/abs/{arxiv})" if arxiv else "—"
        rows.append(
            f"| [{p.dist}]({link_prefix}{p.dist}/README.md) | {p.meta.get('title', '')} | {arxiv_cell} "
            f"| {p.version} | {p.meta.get('status', '')} |"
        )
    return "\n".join(rows)


CATALOG_FILES = {ROOT / "README.md": "packages/", ROOT / "docs" / "index.md": "../packages/"}


def render_with_catalog(text: str, table: str) -> str:
    if CATALOG_START not in text or CATALOG_END not in text:
        raise SystemExit(f"catalog markers {CATALOG_START} … {CATALOG_END} are missing")
    head, rest = text.split(CATALOG_START, 1)
    _, tail = rest.split(CATALOG_END, 1)
    return f"{head}{CATALOG_START}\n{table}\n{CATALOG_END}{tail}"


def stale_catalogs() -> list[Path]:
    """Files whose generated catalog differs from what the packages' metadata gives."""
    pkgs = packages()
    return [
        path
        for path, prefix in CATALOG_FILES.items()
        if path.read_text(encoding="utf-8")
        != render_with_catalog(path.read_text(encoding="utf-8"), catalog_table(pkgs, link_prefix=prefix))
    ]


def write_catalogs() -> None:
    pkgs = packages()
    for path, prefix in CATALOG_FILES.items():
        text = path.read_text(encoding="utf-8")
        path.write_text(render_with_catalog(text, catalog_table(pkgs, link_prefix=prefix)), encoding="utf-8")
        print(f"wrote the catalog into {path.relative_to(ROOT)}")


# ---- scaffold ----------------------------------------------------------------------------------
SCAFFOLD = {
    "pyproject.toml": """[build-system]
requires = ["hatchling>=1.21"]
build-backend = "hatchling.build"

[project]
name = "{dist}"
dynamic = ["version"]
description = "{title}"
readme = "README.md"
license = "Apache-2.0"
requires-python = ">=3.11"
authors = [{{ name = "papershelf developers" }}]
dependencies = ["papershelf>=0.1.0", "numpy>=1.24"]

[project.scripts]
{dist} = "{module}.cli:main"

[project.entry-points."papershelf.packages"]
{dist} = "{module}"

[tool.hatch.version]
path = "src/{module}/__init__.py"

[tool.hatch.build.targets.wheel]
packages = ["src/{module}"]

[tool.uv.sources]
papershelf = {{ workspace = true }}

[tool.papershelf]
title = "{title}"
arxiv = ""
seed = ""
paragraph = 0
status = "scaffold"
""",
    "README.md": """# {dist}

## Paper
{title}. Scaffolded package: the method is not implemented yet.

## Install
```
pip install {dist}
```

## Quickstart
```python
import {module}
print({module}.__version__)
```

## CLI
`{dist} demo`, `{dist} bench --quick`, `{dist} reproduce`.

## Results
None yet: nothing is implemented.

## Fidelity
Nothing of the paper is implemented yet.

## Anchors
None chosen yet.

## Limitations
This is a scaffold: every verb only proves the wiring works.

## Citation
See the paper.
""",
    "CHANGELOG.md": "# Changelog\n\n## Unreleased\n\n- Scaffold.\n",
    "src/{module}/__init__.py": '''"""{dist} — {title} (scaffold)."""

__version__ = "0.0.1"

__all__ = ["__version__"]
''',
    "src/{module}/cli.py": '''"""The ``{dist}`` command line (scaffold: the verbs prove the wiring only)."""

from __future__ import annotations

import argparse
import sys

from papershelf.bench import compare, record, write_records
from papershelf.cli import App, arg

from {module} import __version__

app = App("{dist}", __version__, "{title}")


@app.command("demo", help="scaffold demo")
def _demo(args: argparse.Namespace) -> None:
    print("{dist} is a scaffold: nothing is implemented yet")


@app.command(
    "bench",
    help="scaffold bench: times sum() against itself",
    args=[arg("--quick", action="store_true")],
    common=["out"],
)
def _bench(args: argparse.Namespace) -> None:
    data = list(range(1000))
    comp = compare(lambda: sum(data), lambda: sum(data), repeat=3)
    rec = record(
        package="{dist}",
        version=__version__,
        benchmark="scaffold-wiring",
        setting={{}},
        metric="seconds",
        better="lower",
        candidate="sum",
        candidate_value=comp.candidate.median,
        baseline="sum",
        baseline_value=comp.baseline.median,
        repeats=3,
    )
    print(rec["ratio"])
    if args.out:
        write_records(args.out, [rec])


@app.command("reproduce", help="scaffold reproduce")
def _reproduce(args: argparse.Namespace) -> None:
    print("{dist} is a scaffold: nothing to reproduce yet")


def main(argv: list[str] | None = None) -> int:
    return app.main(argv)


if __name__ == "__main__":
    sys.exit(main())
''',
    "tests/test_wiring.py": """from {module}.cli import main


def test_version_and_demo(capsys):
    assert main(["--version"]) == 0
    assert main(["demo"]) == 0
    assert "scaffold" in capsys.readouterr().out
""",
}


def scaffold(dist: str, *, root: Path = PACKAGES, title: str | None = None) -> Path:
    if not re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", dist):
        raise SystemExit(f"error: {dist!r} is not a kebab-case distribution name")
    target = root / dist
    if target.exists():
        raise SystemExit(f"error: {target} already exists")
    fields = {"dist": dist, "module": module_name(dist), "title": title or f"{dist} (paper title to fill in)"}
    for rel, template in SCAFFOLD.items():
        path = target / rel.format(**fields)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(**fields), encoding="utf-8")
    print(f"scaffolded {target}")
    return target


# ---- release -----------------------------------------------------------------------------------
def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, check=True, text=True, **kw)


def bump_changelog(text: str, version: str, date: str) -> str:
    """Move the Unreleased entries under a new ``## <version> — <date>`` heading."""
    if "## Unreleased" not in text:
        raise SystemExit("error: CHANGELOG.md has no '## Unreleased' section")
    return text.replace("## Unreleased", f"## Unreleased\n\n## {version} — {date}", 1)


def release(dist: str, version: str) -> None:
    from packaging.version import InvalidVersion, Version

    pkg = next((p for p in packages() if p.dist == dist), None)
    if pkg is None:
        raise SystemExit(f"error: no package {dist!r} under packages/")
    try:
        new, old = Version(version), Version(pkg.version)
    except InvalidVersion as exc:
        raise SystemExit(f"error: {exc}") from None
    if new <= old:
        raise SystemExit(f"error: VERSION {new} is not greater than the current {old}")
    if _run(["git", "status", "--porcelain"], capture_output=True).stdout.strip():
        raise SystemExit("error: the working tree is dirty; commit or stash first")
    init = pkg.init_file.read_text(encoding="utf-8")
    pkg.init_file.write_text(VERSION_RE.sub(f'__version__ = "{new}"', init, count=1), encoding="utf-8")
    changelog = pkg.path / "CHANGELOG.md"
    changelog.write_text(
        bump_changelog(changelog.read_text(encoding="utf-8"), str(new), dt.date.today().isoformat()),
        encoding="utf-8",
    )
    uv = [sys.executable, "-m", "uv"] if shutil.which("uv") is None else ["uv"]
    _run([*uv, "lock"])
    out = ROOT / "dist"
    _run([*uv, "build", "--package", dist, "--out-dir", str(out)])
    artefacts = sorted(str(p) for p in out.glob(f"{pkg.module}-{new}*"))
    _run([sys.executable, "-m", "twine", "check", "--strict", *artefacts])
    _run(["git", "commit", "-q", "-am", f"release {dist} {new}"])
    _run(["git", "tag", f"{dist}-v{new}"])
    print(f"released {dist} {new}: {', '.join(Path(a).name for a in artefacts)}; tag {dist}-v{new}")


# ---- check-dist --------------------------------------------------------------------------------
def check_dist() -> None:
    """For each paper package: a fresh venv with only its wheel, the core's wheel and their deps."""
    dist_dir = ROOT / "dist"
    core = sorted(dist_dir.glob("papershelf-*.whl"))
    if not core:
        raise SystemExit("error: no papershelf wheel in dist/ (run make build)")
    uv = [sys.executable, "-m", "uv"] if shutil.which("uv") is None else ["uv"]
    failures = []
    for pkg in packages():
        wheels = sorted(dist_dir.glob(f"{pkg.module}-*.whl"))
        if not wheels:
            failures.append(f"{pkg.dist}: no wheel in dist/")
            continue
        with tempfile.TemporaryDirectory(prefix=f"check-{pkg.dist}-") as tmp:
            venv = Path(tmp) / "venv"
            py, script = venv / "bin" / "python", venv / "bin" / pkg.dist
            steps = [
                [*uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
                [*uv, "pip", "install", "--quiet", "--python", str(py), str(core[-1]), str(wheels[-1])],
                [str(py), "-c", f"import {pkg.module}; print({pkg.module}.__version__)"],
                [str(script), "--version"],
                [str(script), "demo"],
            ]
            for cmd in steps:
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tmp)
                if proc.returncode != 0:
                    failures.append(f"{pkg.dist}: `{' '.join(cmd[-2:])}` failed:\n{proc.stdout}{proc.stderr}")
                    break
            else:
                print(f"ok  {pkg.dist}: import, --version and demo in an isolated venv")
    if failures:
        print("\n".join(failures), file=sys.stderr)
        raise SystemExit(1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="shelf", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    cat = sub.add_parser("catalog")
    cat.add_argument("--write", action="store_true")
    sub.add_parser("new").add_argument("dist")
    rel = sub.add_parser("release")
    rel.add_argument("dist")
    rel.add_argument("version")
    sub.add_parser("check-dist")
    args = parser.parse_args(argv)
    if args.cmd == "catalog":
        write_catalogs() if args.write else print(catalog_table())
    elif args.cmd == "new":
        scaffold(args.dist)
    elif args.cmd == "release":
        release(args.dist, args.version)
    else:
        check_dist()


if __name__ == "__main__":
    main()
