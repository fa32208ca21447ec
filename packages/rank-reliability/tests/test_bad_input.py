"""Hostile input: one InputError naming the problem; the CLI prints one line, exits 2, writes nothing."""

import numpy as np
import pytest
from rank_reliability import analyze, select_items, variance_components
from rank_reliability.cli import main
from rank_reliability.matrix import check_matrix, read_matrix

from papershelf.errors import InputError

GOOD = np.random.default_rng(0).normal(size=(6, 5))


@pytest.mark.parametrize(
    ("X", "message"),
    [
        (GOOD[:2], "2 model row"),
        (GOOD[:, :1], "1 item column"),
        (GOOD[0], "2-D"),
        ([["a", "b"], ["c", "d"], ["e", "f"]], "non-numeric"),
        (
            np.where(np.arange(30).reshape(6, 5) == 7, np.inf, GOOD),
            "infinite cell at model row 1, item column 2",
        ),
        (np.vstack([GOOD, np.full(5, np.nan)]), "model row.* 6 are all missing"),
        (np.column_stack([GOOD, np.full(6, np.nan)]), "item column.* 5 are all missing"),
        (np.column_stack([GOOD, np.ones(6)]), "item column.* 5 are constant"),
    ],
)
def test_bad_matrices(X, message):
    with pytest.raises(InputError, match=message):
        variance_components(X)


def test_constant_columns_can_be_dropped():
    X = np.column_stack([GOOD, np.ones(6)])
    arr, keep = check_matrix(X, drop_constant=True)
    assert arr.shape == (6, 5) and keep.tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(InputError, match="only 1 non-constant"):
        check_matrix(np.column_stack([GOOD[:, :1], np.ones(6)]), drop_constant=True)


def test_selection_errors():
    with pytest.raises(InputError, match="budget 6 is larger than the number of items"):
        select_items(GOOD, 6)
    with pytest.raises(InputError, match="budget must be an integer"):
        select_items(GOOD, 0)
    with pytest.raises(InputError, match="method must be one of"):
        select_items(GOOD, 2, method="best")
    with pytest.raises(InputError, match="0/1"):
        select_items(GOOD, 2, method="irt_info")
    X = GOOD.copy()
    X[1, 1] = np.nan
    with pytest.raises(InputError, match="missing cell"):
        select_items(X, 2)
    with pytest.raises(InputError, match="n_splits"):
        analyze(GOOD, n_splits=0)


def test_csv_reading(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("model,q1,q2,q3\nA,1,0,1\nB,0,,1\nC,1,1,NA\n")
    m = read_matrix(path)
    assert m.models == ["A", "B", "C"] and m.items == ["q1", "q2", "q3"]
    assert np.isnan(m.values[1, 1]) and np.isnan(m.values[2, 2])
    path.write_text("1,0,1\n0,x,1\n1,1,0\n")
    with pytest.raises(InputError, match="non-numeric cell 'x' at line 2, column 2"):
        read_matrix(path)
    path.write_text("1,0,1\n0,1\n1,1,0\n")
    with pytest.raises(InputError, match="line 2 has 2 data cells"):
        read_matrix(path)
    with pytest.raises(InputError, match="does not exist"):
        read_matrix(tmp_path / "nope.npy")
    (tmp_path / "m.txt").write_text("1")
    with pytest.raises(InputError, match=r"\.npy or \.csv"):
        read_matrix(tmp_path / "m.txt")
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    with pytest.raises(InputError, match="not a readable"):
        read_matrix(tmp_path / "bad.npy")


@pytest.mark.parametrize(
    ("matrix", "extra", "message"),
    [
        (GOOD[:2], [], "need at least 3 models"),
        (np.column_stack([GOOD, np.ones(6)]), [], "constant"),
        (GOOD, ["--budget", "50"], "budget 50 is larger"),
    ],
)
def test_cli_bad_input_exit_2_and_no_file(tmp_path, capsys, matrix, extra, message):
    path = tmp_path / "m.npy"
    np.save(path, matrix)
    out = tmp_path / "out.json"
    verb = "select" if extra else "analyze"
    code = main([verb, "--matrix", str(path), *extra, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and message in err
    assert not out.exists() and list(tmp_path.iterdir()) == [path]


def test_cli_non_numeric_csv_and_bad_out(tmp_path, capsys):
    path = tmp_path / "m.csv"
    path.write_text("1,0,1\n0,oops,1\n1,1,0\n")
    assert main(["analyze", "--matrix", str(path)]) == 2
    assert "non-numeric cell 'oops'" in capsys.readouterr().err
    np.save(tmp_path / "g.npy", GOOD)
    assert main(["analyze", "--matrix", str(tmp_path / "g.npy"), "--out", str(tmp_path / "r.txt")]) == 2
    assert "--out" in capsys.readouterr().err
    assert main(["select", "--matrix", str(tmp_path / "g.npy"), "--budget", "2", "--method", "x"]) == 2
    assert main(["analyze", "--matrix", str(tmp_path / "g.npy"), "--splits", "0"]) == 2
    assert "--splits" in capsys.readouterr().err
