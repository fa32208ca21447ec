"""The ablation behind the README's diagnosis: its dimension measure and its CLI."""

import json

import torch
from asvq.cli import main
from asvq.experiments import ABLATION_SPECS, effective_dim


def test_effective_dim_is_d_for_isotropic_and_one_for_a_line():
    g = torch.Generator().manual_seed(0)
    iso = torch.randn(20000, 8, generator=g, dtype=torch.float64)
    assert abs(effective_dim(iso) - 8) < 0.1
    line = torch.randn(500, 1, generator=g, dtype=torch.float64) * torch.randn(1, 8, generator=g).double()
    assert abs(effective_dim(line) - 1) < 1e-6
    # two equal axes out of five: exactly 2
    two = torch.zeros(1000, 5, dtype=torch.float64)
    two[:, :2] = torch.randn(1000, 2, generator=g, dtype=torch.float64)
    two[:, :2] -= two[:, :2].mean(0)
    two[:, :2] /= two[:, :2].std(0)
    two[:, :2] = torch.linalg.qr(two[:, :2])[0] * 30  # orthogonal, equal variance
    assert abs(effective_dim(two) - 2) < 1e-6


def test_ablate_cli_runs_the_specs_with_anchors(tmp_path, capsys, monkeypatch):
    from asvq import experiments

    specs = tuple(s for s in ABLATION_SPECS if s[0] in ("vq", "simvq", "asvq offset"))
    monkeypatch.setattr(experiments, "ABLATION_SPECS", specs)
    out = tmp_path / "ab.json"
    argv = ["ablate", "--seeds", "2", "--steps", "2", "--codebook-size", "32", "--quiet", "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    rep = json.loads(out.read_text())
    labels = [s["label"] for s in rep["summary"]]
    assert labels == ["vq", "simvq", "asvq offset"] and all(label in text for label in labels)
    by = {s["label"]: s for s in rep["summary"]}
    assert abs(by["simvq"]["mse_over_simvq"] - 1.0) < 1e-12 and abs(by["vq"]["loss_std_over_vq"] - 1.0) < 1e-9
    assert by["asvq offset"]["quantizer_params"] == 32 and len(rep["runs"]) == 6
    assert len(rep["runs"][-1]["scale"]) == 16


def test_ablation_specs_cover_the_documented_options():
    labels = [s[0] for s in ABLATION_SPECS]
    assert labels[:3] == ["vq", "simvq", "asvq"]
    opts = [s[2] for s in ABLATION_SPECS if s[1] == "asvq"]
    wanted = [("offset", True), ("init", "kmeans"), ("rotation_trick", True), ("scale_init", "data")]
    for key, value in wanted:
        assert any(o.get(key) == value for o in opts), key
    assert {o.get("scale") for o in opts} >= {"per_code", "scalar", "ema_stats"}


def test_ablate_rejects_one_seed(capsys):
    assert main(["ablate", "--seeds", "1", "--steps", "2"]) == 2
    assert capsys.readouterr().err.startswith("error:")


def test_sweep_steps_cli_retrains_per_length_and_reports_the_ratios(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    assert main(["sweep-steps", "--steps", "2", "3", "--seeds", "2", "--quiet", "--out", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert [r["steps"] for r in rep["ratios"]] == [2, 3]
    for ratio in rep["ratios"]:
        by = {r["quantizer"]: r for r in rep["rows"] if r["steps"] == ratio["steps"]}
        assert set(by) == {"asvq", "vq", "simvq"} and all(r["seeds"] == 2 for r in by.values())
        assert abs(ratio["mse_over_simvq"] - by["asvq"]["test_mse"] / by["simvq"]["test_mse"]) < 1e-12
        assert (
            abs(
                ratio["loss_std_over_vq"]
                - by["asvq"]["final_loss_seed_std"] / by["vq"]["final_loss_seed_std"]
            )
            < 1e-12
        )
    # different lengths are separate trainings, not one run read at two points
    assert rep["rows"][0]["test_mse"] != rep["rows"][3]["test_mse"]
    assert "MSE/SimVQ" in capsys.readouterr().out


def test_sweep_steps_rejects_a_zero_length(capsys):
    assert main(["sweep-steps", "--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err
