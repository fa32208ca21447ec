"""The repo tooling: scaffolds pass the contract, releases refuse what they must, the bench report."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
import shelf
import test_contract


def test_scaffold_passes_the_contract(tmp_path, monkeypatch, capsys):
    target = shelf.scaffold("demo-paper", root=tmp_path, title="A demo paper")
    capsys.readouterr()
    (target / "LICENSE").write_text("Apache-2.0")
    pkg = shelf.read_package(target)
    monkeypatch.syspath_prepend(str(target / "src"))
    try:
        test_contract.test_files_and_names(pkg)
        test_contract.test_pyproject_metadata(pkg)
        test_contract.test_readme_headings(pkg)
        test_contract.test_cli_verbs(pkg, capsys)
        test_contract.test_bench_quick_writes_schema_records(pkg, tmp_path)
    finally:
        for name in [m for m in sys.modules if m.startswith("demo_paper")]:
            del sys.modules[name]
    with pytest.raises(SystemExit):
        shelf.scaffold("demo-paper", root=tmp_path)
    with pytest.raises(SystemExit):
        shelf.scaffold("Bad_Name", root=tmp_path)


def test_changelog_bump_moves_unreleased_entries():
    text = "# Changelog\n\n## Unreleased\n\n- A change.\n\n## 0.1.0 — 2026-01-01\n\n- First.\n"
    out = shelf.bump_changelog(text, "0.2.0", "2026-12-01")
    assert out.index("## Unreleased") < out.index("## 0.2.0 — 2026-12-01") < out.index("- A change.")
    assert out.index("- A change.") < out.index("## 0.1.0")
    with pytest.raises(SystemExit):
        shelf.bump_changelog("# Changelog\n", "0.2.0", "2026-12-01")


def test_release_refuses_a_version_that_does_not_increase():
    pkg = shelf.packages()[0]
    proc = subprocess.run(
        [sys.executable, str(shelf.ROOT / "tests" / "shelf.py"), "release", pkg.dist, pkg.version],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0 and "not greater" in proc.stderr


def test_papershelf_list_finds_installed_packages(capsys):
    main = importlib.import_module("papershelf.__main__").main
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for pkg in shelf.packages():
        assert pkg.dist in out and pkg.version in out
