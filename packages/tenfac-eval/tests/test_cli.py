"""The CLI through main(argv), plus one subprocess smoke test."""

import csv
import json
import subprocess
import sys

from tenfac_eval import simulate, split_human
from tenfac_eval.cli import main
from tenfac_eval.data import write_ratings_csv


def test_fit_leaderboard_predict(tmp_path, capsys):
    sim = simulate(150, 4, 2, rank=1, seed=1)
    cal, _ = split_human(sim.human_all, 0.3, seed=0)
    write_ratings_csv(tmp_path / "r.csv", sim.autorater)
    write_ratings_csv(tmp_path / "h.csv", cal)
    model = tmp_path / "model.json"
    assert (
        main(
            [
                "fit",
                "--ratings",
                str(tmp_path / "r.csv"),
                "--human",
                str(tmp_path / "h.csv"),
                "--rank",
                "1",
                "--out",
                str(model),
                "-q",
            ]
        )
        == 0
    )
    assert model.exists()
    with (tmp_path / "g.csv").open("w", newline="") as h:
        w = csv.writer(h)
        w.writerow(["prompt", "group"])
        w.writerows(sorted(sim.groups.items()))
    board = tmp_path / "board.csv"
    assert (
        main(["leaderboard", "--model", str(model), "--groups", str(tmp_path / "g.csv"), "--out", str(board)])
        == 0
    )
    with board.open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4 * len(set(sim.groups.values()))
    (tmp_path / "pairs.csv").write_text("prompt,model\np00000,m00\np00001,m03\n")
    preds = tmp_path / "preds.json"
    assert (
        main(["predict", "--model", str(model), "--pairs", str(tmp_path / "pairs.csv"), "--out", str(preds)])
        == 0
    )
    got = json.loads(preds.read_text())
    assert len(got) == 2 and abs(sum(got[0][f"p_{v}"] for v in range(1, 6)) - 1) < 1e-9
    # fold in a new model from autorater ratings only, then predict its human ratings
    capsys.readouterr()
    lines = ["prompt,model,rater,rating"] + [
        f"p{i:05d},newbie,auto{r},{1 + (i + r) % 5}" for i in range(150) for r in range(2)
    ]
    (tmp_path / "new.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "pairs2.csv").write_text("prompt,model\np00000,newbie\n")
    assert (
        main(
            [
                "predict",
                "--model",
                str(model),
                "--pairs",
                str(tmp_path / "pairs2.csv"),
                "--fold-in",
                str(tmp_path / "new.csv"),
            ]
        )
        == 0
    )
    assert "newbie" in capsys.readouterr().out


def test_subprocess_version():
    out = subprocess.run(
        [sys.executable, "-m", "tenfac_eval.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip().startswith("tenfac-eval ")


def test_jsonl_reader_and_reproduce_show(tmp_path, capsys):
    from tenfac_eval import read_ratings

    path = tmp_path / "r.jsonl"
    path.write_text(
        '{"prompt": "p1", "model": "m1", "model_b": "m2", "rater": "a", "rating": 2}\n\n'
        '{"prompt": "p2", "model": "m2", "model_b": "m1", "rater": "a", "rating": 0}\n'
    )
    r = read_ratings(path, scale="0-2")
    assert r.pairwise and r.level.tolist() == [2, 0] and list(r.model_b) == ["m2", "m1"]
    (tmp_path / "bad.jsonl").write_text("[1, 2]\n")
    assert (
        main(
            [
                "fit",
                "--ratings",
                str(tmp_path / "bad.jsonl"),
                "--human",
                str(path),
                "--out",
                str(tmp_path / "m.json"),
            ]
        )
        == 2
    )
    assert "line 1 is not a JSON object" in capsys.readouterr().err
    (tmp_path / "junk.json").write_text("{}")
    assert main(["reproduce", "--show", str(tmp_path / "junk.json")]) == 2
    assert "not a reproduce result file" in capsys.readouterr().err
