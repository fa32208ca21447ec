"""Hostile input: one clear InputError naming the problem; CLI exit 2, one line, no output file."""

import numpy as np
import pytest
from tenfac_eval import (
    Ratings,
    TenFac,
    min_calibration_size,
    parse_scale,
    ppi_plus_plus,
    simulate,
    split_human,
)
from tenfac_eval.cli import main

from papershelf.errors import InputError


@pytest.fixture(scope="module")
def small():
    sim = simulate(120, 4, 2, rank=1, seed=2)
    return sim, TenFac(rank=1, max_iter=50).pretrain(sim.autorater)


def _human(prompts, models, ratings, scale="1-5", rater="human"):
    return Ratings.from_columns(prompts, models, [rater] * len(prompts), ratings, scale=scale)


def test_rating_outside_scale_and_nan():
    with pytest.raises(
        InputError, match=r"rating '7' at row 2 is outside the declared scale \{1, 2, 3, 4, 5\}"
    ):
        Ratings.from_columns(["a", "b"], ["m", "m"], ["r", "r"], ["3", "7"], scale="1-5")
    with pytest.raises(InputError, match="row 1 is NaN"):
        Ratings.from_columns(["a"], ["m"], ["r"], [float("nan")], scale="1-5")
    with pytest.raises(InputError, match="not a number"):
        Ratings.from_columns(["a"], ["m"], ["r"], ["good"], scale="1-5")
    with pytest.raises(InputError, match="missing prompt id at row 1"):
        Ratings.from_columns([None], ["m"], ["r"], [1], scale="1-5")
    with pytest.raises(InputError, match="compares model 'm' with itself"):
        Ratings.from_columns(["a"], ["m"], ["r"], [1], scale="0,1", model_b=["m"])


@pytest.mark.parametrize("text", ["5", "3-1", "1,1,2", "a-b", "1,nan"])
def test_bad_scales(text):
    with pytest.raises(InputError, match="scale"):
        parse_scale(text)


def test_unknown_ids_in_human_set(small):
    _, model = small
    with pytest.raises(InputError, match=r"unknown model id\(s\) in the human set: 'gpt-x'"):
        model.calibrate(_human(["p00000"] * 200, ["gpt-x"] * 200, [1, 2] * 100))
    with pytest.raises(InputError, match=r"unknown prompt id\(s\) in the human set"):
        model.calibrate(_human(["nope"] * 200, ["m00"] * 200, [1, 2] * 100))
    with pytest.raises(InputError, match=r"unknown rater id\(s\) in the human set: 'auto7'"):
        model.calibrate(_human(["p00000"] * 200, ["m00"] * 200, [1, 2] * 100, rater="auto7"))
    with pytest.raises(InputError, match="already an autorater id"):
        model.calibrate(_human(["p00000"] * 200, ["m00"] * 200, [1, 2] * 100), rater="auto0")


def test_calibration_set_too_small_names_the_minimum(small):
    sim, model = small
    need = min_calibration_size(1, 5)
    assert need == 10 * (3 + 4)
    cal, _ = split_human(sim.human_all, 0.1, seed=0)  # 48 ratings
    with pytest.raises(InputError, match=f"has 48 ratings; rank 1 with 5 levels needs at least {need}"):
        model.calibrate(cal)


def test_unused_level_and_bad_parameters(small):
    sim, model = small
    cal = sim.human_all.subset(sim.human_all.level != 2)
    with pytest.raises(InputError, match=r"never uses level\(s\) \[3.0\]"):
        model.calibrate(cal)
    for kwargs, msg in (({"rank": -1}, "rank"), ({"l2": float("nan")}, "l2"), ({"rank": 2.5}, "rank")):
        with pytest.raises(InputError, match=msg):
            TenFac(**kwargs).pretrain(sim.autorater)
    with pytest.raises(InputError, match="not pretrained"):
        TenFac().calibrate(sim.human_all)
    with pytest.raises(InputError, match="ci must be one of"):
        model.calibrate(sim.human_all).model_means(ci="magic")
    with pytest.raises(InputError, match="level must be in"):
        model.model_means(level=1.5)


def test_ppi_needs_data():
    with pytest.raises(InputError, match="PPI"):
        ppi_plus_plus(np.array([1.0]), np.array([1.0]), np.zeros(5))


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("human", "message"),
    [
        ("prompt,model,rating\np1,m9,3\n", "unknown model id(s) in the human set: 'm9'"),
        ("prompt,model,rater,rating\np1,m1,robot,3\n", "unknown rater id(s) in the human set"),
        ("prompt,model,rating\np1,m1,9\n", "rating '9' at row 1 is outside the declared scale"),
        ("prompt,model,rating\np1,m1,nan\n", "row 1 is NaN"),
        ("prompt,model\np1,m1\n", "missing column(s) rating"),
        ("prompt,model,rating\np1,m1,3\n", "needs at least"),
    ],
)
def test_cli_bad_input_exit_2_one_line_no_file(tmp_path, capsys, human, message):
    rows = ["prompt,model,rater,rating"] + [
        f"p{i},m{j},a{r},{1 + (i * j + r) % 5}" for i in range(12) for j in range(3) for r in range(2)
    ]
    ratings = _write(tmp_path / "r.csv", "\n".join(rows) + "\n")
    out = tmp_path / "model.json"
    code = main(
        [
            "fit",
            "--ratings",
            ratings,
            "--human",
            _write(tmp_path / "h.csv", human),
            "--rank",
            "1",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not out.exists() and not list(tmp_path.glob(".model.json*"))


def test_cli_missing_files(tmp_path, capsys):
    assert main(["leaderboard", "--model", str(tmp_path / "none.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    bad = _write(tmp_path / "bad.json", '{"format": "other"}')
    assert main(["leaderboard", "--model", bad]) == 2
    assert "not a tenfac-eval model file" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["models"].pop(0), "must hold 240 indices in \\[0, 3\\)|phi has shape"),  # ids vs rows
        (lambda d: d.update(theta=-1), "theta has shape"),
        (lambda d: d.update(phi=[]), "phi has shape"),
        (lambda d: d["psi"][0].__setitem__(0, None), "psi holds NaN"),
        (lambda d: d.update(auto_scale="x"), "auto_scale must be"),
        (lambda d: d.update(raters=["a", "a", "b"]), "raters repeats an id"),
        (lambda d: d.update(rank="x"), "rank must be an integer"),
        (lambda d: d.update(active=[0, 99]), "active must list"),
        (lambda d: d["human_obs"]["a"].__setitem__(0, 10**6), "human_obs.a must hold"),
    ],
)
def test_a_hand_edited_model_file_is_one_error(small, tmp_path, capsys, edit, message):
    import json

    sim, model = small
    cal, _ = split_human(sim.human_all, 0.5, seed=0)
    path = tmp_path / "m.json"
    model.calibrate(cal).save(path)
    d = json.loads(path.read_text())
    edit(d)
    path.write_text(json.dumps(d))
    with pytest.raises(InputError, match=message):
        TenFac.load(path)
    path.write_text("[1, 2, 3]")  # JSON, but not an object
    assert main(["leaderboard", "--model", str(path)]) == 2
    assert "not a tenfac-eval model file" in capsys.readouterr().err
