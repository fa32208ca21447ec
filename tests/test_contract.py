"""Every package under packages/ meets the contract of docs/conventions.md."""

from __future__ import annotations

import ast
import importlib
import json
import re

import pytest
import shelf

from papershelf.bench import validate_record

PACKAGES = shelf.packages()
IDS = [p.dist for p in PACKAGES]
PAPER_MODULES = {p.module for p in PACKAGES}


def test_there_are_packages():
    assert PACKAGES, "no package under packages/"


@pytest.mark.parametrize("pkg", PACKAGES, ids=IDS)
def test_files_and_names(pkg):
    for rel in (
        "pyproject.toml",
        "README.md",
        "CHANGELOG.md",
        "LICENSE",
        "tests",
        f"src/{pkg.module}/cli.py",
    ):
        assert (pkg.path / rel).exists(), f"{pkg.dist}: missing {rel}"
    assert pkg.path.name == pkg.dist, "the folder is named after the distribution"
    assert re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", pkg.dist), "distribution names are kebab-case"
    assert re.fullmatch(r"\d+\.\d+\.\d+([ab]\d+|rc\d+)?", pkg.version), f"bad __version__ {pkg.version!r}"
    assert "## Unreleased" in (pkg.path / "CHANGELOG.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("pkg", PACKAGES, ids=IDS)
def test_pyproject_metadata(pkg):
    data = pkg.pyproject
    project = data["project"]
    assert data["build-system"]["build-backend"] == "hatchling.build"
    assert project.get("dynamic") == ["version"]
    assert data["tool"]["hatch"]["version"]["path"] == f"src/{pkg.module}/__init__.py"
    assert project["scripts"] == {pkg.dist: f"{pkg.module}.cli:main"}, "console script = distribution name"
    assert project["entry-points"]["papershelf.packages"] == {pkg.dist: pkg.module}
    assert project.get("license") == "Apache-2.0" and project.get("description")
    deps = project.get("dependencies", [])
    assert any(d.startswith("papershelf") for d in deps), "every package depends on the core"
    for dep in deps:
        assert re.search(r">=|~=|==", dep), f"dependency {dep!r} needs a lower bound"
    meta = pkg.meta
    for key in ("title", "arxiv", "seed", "paragraph", "status"):
        assert key in meta, f"[tool.papershelf] lacks {key!r}"
    assert isinstance(meta["title"], str) and meta["title"]
    assert isinstance(meta["arxiv"], str) and re.fullmatch(r"(\d{4}\.\d{4,5})?", meta["arxiv"])
    assert meta["status"] in shelf.STATUSES


@pytest.mark.parametrize("pkg", PACKAGES, ids=IDS)
def test_readme_headings(pkg):
    text = (pkg.path / "README.md").read_text(encoding="utf-8")
    headings = re.findall(r"(?m)^##\s+(\w+)", text)
    missing = [h for h in shelf.README_HEADINGS if h not in headings]
    assert not missing, f"{pkg.dist} README lacks headings {missing}"
    assert not re.search(r"(?i)\bTODO\b|\bTBD\b|coming soon", text)


@pytest.mark.parametrize("pkg", PACKAGES, ids=IDS)
def test_cli_verbs(pkg, capsys):
    cli = importlib.import_module(f"{pkg.module}.cli")
    assert {"demo", "bench", "reproduce"} <= set(cli.app.commands)
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"{pkg.dist} {pkg.version}"
    assert cli.main(["--help"]) == 0
    assert cli.main(["no-such-verb"]) == 2
    assert importlib.import_module(pkg.module).__version__ == pkg.version


@pytest.mark.parametrize("pkg", PACKAGES, ids=IDS)
def test_every_subcommand_help_renders(pkg, capsys):
    # argparse formats help lazily: a bare "%" in a help string only fails when a user asks for --help
    cli = importlib.import_module(f"{pkg.module}.cli")
    for verb in cli.app.commands:
        with pytest.raises(SystemExit) as done:
            cli.app.parser().parse_args([verb, "--help"])
        assert done.value.code == 0, verb
    capsys.readouterr()


def _imported_roots(path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module.split(".")[0]


@pytest.mark.parametrize("pkg", PACKAGES, ids=IDS)
def test_no_paper_package_imports_another(pkg):
    others = PAPER_MODULES - {pkg.module}
    for path in pkg.path.rglob("*.py"):
        bad = others.intersection(_imported_roots(path))
        assert not bad, f"{path.relative_to(shelf.ROOT)} imports paper package(s) {sorted(bad)}"


@pytest.mark.parametrize("pkg", PACKAGES, ids=IDS)
def test_bench_quick_writes_schema_records(pkg, tmp_path):
    cli = importlib.import_module(f"{pkg.module}.cli")
    out = tmp_path / "bench.json"
    assert cli.main(["bench", "--quick", "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert isinstance(records, list) and records
    for rec in records:
        assert validate_record(rec) == [], rec.get("benchmark")
        assert rec["package"] == pkg.dist and rec["version"] == pkg.version


def test_catalog_is_fresh():
    stale = shelf.stale_catalogs()
    assert not stale, f"stale catalog in {[str(p) for p in stale]}: run `make docs`"


def test_docs_exist():
    for name in ("index.md", "architecture.md", "conventions.md", "benchmarks.md"):
        assert (shelf.ROOT / "docs" / name).is_file(), name


def test_benchmarks_page_matches_the_bench_json():
    from papershelf.bench import report

    committed = (shelf.ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert committed == report(sorted((shelf.ROOT / "docs" / "bench").glob("*.json"))), (
        "run `make bench-report`"
    )
