"""The CLI through main(argv), one subprocess smoke test, and hostile input (one line, exit 2, no file)."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from dlm_constrain import __version__
from dlm_constrain.cli import main

VOCAB = ["a", "b", "ab", "<e>"]


@pytest.fixture
def files(tmp_path):
    p = np.random.default_rng(0).random((6, 4))
    np.save(tmp_path / "p.npy", p / p.sum(1, keepdims=True))
    (tmp_path / "vocab.json").write_text(json.dumps(VOCAB))
    return tmp_path


def test_sample_regex_writes_json(files, capsys):
    out = files / "s.json"
    argv = [
        "sample",
        "--probs",
        str(files / "p.npy"),
        "--vocab",
        str(files / "vocab.json"),
        "--regex",
        "(ab)+",
        "--eos-id",
        "3",
        "--num-samples",
        "5",
        "--method",
        "bisect",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "log Z =" in text
    data = json.loads(out.read_text())
    assert len(data["texts"]) == 5 and all(
        t and set(t) <= {"a", "b"} and t.count("ab") * 2 == len(t) for t in data["texts"]
    )


def test_sample_schema_greedy(files, capsys):
    vocab = ["{", "}", '"', "k", ":", "1", "2", "<e>"]
    (files / "v2.json").write_text(json.dumps(vocab))
    p = np.full((10, len(vocab)), 1.0 / len(vocab))
    np.save(files / "u.npy", p)
    schema = json.dumps(
        {"type": "object", "properties": {"k": {"type": "integer", "minimum": 1, "maximum": 2}}}
    )
    assert (
        main(
            [
                "sample",
                "--probs",
                str(files / "u.npy"),
                "--vocab",
                str(files / "v2.json"),
                "--schema",
                schema,
                "--eos-id",
                "7",
                "--greedy",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.splitlines()[1] in ('{"k":1}', '{"k":2}')


@pytest.mark.parametrize(
    "extra,match",
    [
        (["--regex", "aaaaaaaa"], "--regex 'aaaaaaaa' accepts no sequence of length 6"),
        (["--schema", '{"type":"null"}'], '--schema {"type":"null"} accepts no sequence of length 6'),
        (["--regex", "(ab"], "missing"),
        ([], "exactly one of --regex and --schema"),
        (["--regex", "a", "--schema", "{}"], "exactly one of"),
        (["--regex", "(ab)+", "--num-samples", "0"], "--num-samples"),
        (["--regex", "(ab)+", "--eos-id", "9"], "eos_id"),
    ],
)
def test_sample_hostile(files, capsys, extra, match):
    out = files / "bad.json"
    argv = [
        "sample",
        "--probs",
        str(files / "p.npy"),
        "--vocab",
        str(files / "vocab.json"),
        *extra,
        "--out",
        str(out),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and match in err and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize(
    "content,match",
    [
        (np.array([[0.5, np.nan, 0.5, 0.0]] * 6), "--probs must be finite"),
        (np.array([[0.5, -0.5, 1.0, 0.0]] * 6), "non-negative"),
        (
            np.full((6, 5), 0.2),
            "vocabulary mismatch: --probs has 5 columns but --regex '(ab)+' has a vocabulary of 4",
        ),
        (np.full((6, 4), 0.5), "sums to 2, not 1 (drop --strict to rescale)"),
    ],
)
def test_sample_hostile_probs(files, capsys, content, match):
    np.save(files / "bad.npy", content)
    out = files / "bad.json"
    argv = [
        "sample",
        "--probs",
        str(files / "bad.npy"),
        "--vocab",
        str(files / "vocab.json"),
        "--regex",
        "(ab)+",
        "--eos-id",
        "3",
        "--strict",
        "--out",
        str(out),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and match in err and err.count("\n") == 1
    assert not out.exists()


def test_missing_files(files, capsys):
    assert main(["sample", "--probs", "nope.npy", "--regex", "a"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["sample", "--probs", str(files / "p.npy"), "--regex", "a"]) == 2
    assert "--vocab is required" in capsys.readouterr().err
    (files / "junk.npy").write_text("not an array")
    assert main(["sample", "--probs", str(files / "junk.npy"), "--regex", "a"]) == 2
    assert "cannot read" in capsys.readouterr().err
    (files / "empty.npy").write_bytes(b"")
    assert main(["sample", "--probs", str(files / "empty.npy"), "--regex", "a"]) == 2
    assert "cannot read" in capsys.readouterr().err
    np.savez(files / "arch.npz", a=np.ones((2, 2)))
    assert main(["sample", "--probs", str(files / "arch.npz"), "--regex", "a"]) == 2
    assert ".npz archive" in capsys.readouterr().err
    base = ["sample", "--probs", str(files / "p.npy"), "--vocab", str(files / "vocab.json")]
    assert main([*base, "--schema", "nope.json"]) == 2
    assert "--schema: no such file 'nope.json'" in capsys.readouterr().err
    (files / "latin.json").write_bytes(b'{"type": "\xff"}')
    assert main([*base, "--schema", str(files / "latin.json")]) == 2
    assert "not UTF-8" in capsys.readouterr().err
    (files / "ids.json").write_text('{"a": "x", "b": 1}')
    assert (
        main(["sample", "--probs", str(files / "p.npy"), "--vocab", str(files / "ids.json"), "--regex", "a"])
        == 2
    )
    assert "integer ids" in capsys.readouterr().err
    assert main([*base, "--regex", "(ab)+", "--out", str(files)]) == 2  # refused before any work
    assert "is a directory" in capsys.readouterr().err


def test_long_inline_schema_is_json_not_a_path(files, capsys):
    props = {f"flag_number_{i:02d}": {"type": "boolean"} for i in range(12)}
    schema = json.dumps({"type": "object", "properties": props})
    assert len(schema) > 255  # longer than a file name may be
    argv = ["sample", "--probs", str(files / "p.npy"), "--vocab", str(files / "vocab.json")]
    assert main([*argv, "--schema", schema]) == 2  # the vocabulary cannot spell it: a clean error
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1


def test_demo_and_bad_counts(capsys):
    assert main(["demo", "--count", "2"]) == 0
    text = capsys.readouterr().out
    assert "exact" in text and "unconstrained" in text
    assert main(["demo", "--count", "0"]) == 2
    assert main(["reproduce", "--count", "0"]) == 2
    assert main(["reproduce", "--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err
    assert main(["reproduce", "--sweep", "8,x"]) == 2
    assert "--sweep" in capsys.readouterr().err
    assert main(["reproduce", "--seeds", "0"]) == 2
    assert "--seeds" in capsys.readouterr().err
    assert main(["train", "--steps", "1"]) == 2
    assert "--out is required" in capsys.readouterr().err


def test_reproduce_small_writes_atomically(tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["reproduce", "--count", "1", "--steps", "4", "--seeds", "2", "--sweep", "17", "--quiet"]
    assert main([*argv, "--confidence", "marginal", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["steps"] == 4 and data["seeds"] == [0, 1] and data["level"] == "format"
    assert data["confidence"] == "marginal" and "--confidence marginal" in data["manifest"]["command"]
    assert data["summary"]["stochastic/exact"]["validity"]["min"] == 1.0
    assert data["summary"]["greedy/exact"]["validity"]["min"] == 1.0
    assert [(e["steps"], e["level"]) for e in data["sweep"]] == [(17, "format"), (17, "rules")]
    assert all(e["exact_validity"]["min"] == 1.0 for e in data["sweep"])
    assert "tokens-per-step sweep" in capsys.readouterr().out


def test_train_cli_writes_loadable_weights_and_its_log(tmp_path, capsys):
    from dlm_constrain.model import load

    out = tmp_path / "w.npz"
    assert main(["train", "--steps", "2", "--quiet", "--out", str(out)]) == 0
    assert load(out).cfg.length > 0
    assert len(json.loads((tmp_path / "w.npz.log.json").read_text())) >= 1
    assert main(["train", "--steps", "0", "--out", str(out)]) == 2
    assert "--steps" in capsys.readouterr().err


def test_train_checks_both_outputs_before_training(tmp_path, capsys, monkeypatch):
    # the log path beside the weights was only tried after training and after the weights were written
    from dlm_constrain import model as M

    def no_training(**kwargs):
        raise AssertionError("trained before checking the outputs")

    monkeypatch.setattr(M, "train", no_training)
    (tmp_path / "w.npz.log.json").mkdir()
    assert main(["train", "--steps", "2", "--quiet", "--out", str(tmp_path / "w.npz")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "w.npz.log.json" in err and err.count("\n") == 1
    assert not (tmp_path / "w.npz").exists()
    assert main(["train", "--steps", "2", "--quiet", "--out", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_weights_round_trip(tmp_path):
    from dlm_constrain.model import TinyMDM, load, save

    out = tmp_path / "w.npz"
    net = TinyMDM()
    save(net, out, {"note": "untrained"})
    back = load(out)
    ids = torch.zeros(1, back.cfg.length, dtype=torch.long)
    with torch.no_grad():
        assert torch.allclose(net(ids), back(ids), atol=0.05)  # float16 storage
    assert [p.name for p in tmp_path.iterdir()] == ["w.npz"]  # no temporary file left behind


def test_subprocess_version():
    r = subprocess.run(
        [sys.executable, "-m", "dlm_constrain.cli", "--version"], capture_output=True, text=True, check=False
    )
    assert r.returncode == 0 and r.stdout.strip() == f"dlm-constrain {__version__}"


def test_sample_schema_with_the_outlines_backend_allows_spaces(files, capsys):
    pytest.importorskip("outlines_core")
    vocab = ["{", "}", '"', "k", ":", "1", "2", " ", "<e>"]
    (files / "v3.json").write_text(json.dumps(vocab))
    p = np.full((12, len(vocab)), 0.01)
    p[:, 7] = 1.0  # the model loves spaces: only the outlines translation can use them
    np.save(files / "s.npy", p / p.sum(1, keepdims=True))
    schema = json.dumps({"type": "object", "properties": {"k": {"type": "integer"}}, "required": ["k"]})
    base = ["sample", "--probs", str(files / "s.npy"), "--vocab", str(files / "v3.json"), "--schema", schema]
    assert main([*base, "--eos-id", "8", "--greedy", "--schema-backend", "outlines"]) == 0
    text = capsys.readouterr().out.splitlines()[1]
    assert " " in text and json.loads(text)["k"] in (1, 2, 11, 12, 21, 22)
    assert main([*base, "--eos-id", "8", "--greedy"]) == 0  # compact JSON only
    assert " " not in capsys.readouterr().out.splitlines()[1]


def test_sample_never_overwrites_inputs_and_bounds_its_arguments(files, capsys):
    base = ["sample", "--probs", str(files / "p.npy"), "--vocab", str(files / "vocab.json")]
    base += ["--regex", "(ab)+", "--eos-id", "3"]
    before = (files / "p.npy").read_bytes()
    assert main([*base, "--out", str(files / "p.npy")]) == 2
    assert "would overwrite the input --probs" in capsys.readouterr().err
    assert main([*base, "--out", str(files / "vocab.json")]) == 2
    assert (files / "p.npy").read_bytes() == before
    assert main([*base, "--num-samples", "100000000000"]) == 2
    assert "--num-samples must be an integer in [1, 1000000]" in capsys.readouterr().err
    np.save(files / "cx.npy", np.ones((6, 4), dtype=complex))
    base[2] = str(files / "cx.npy")
    assert main(base) == 2
    assert "complex128" in capsys.readouterr().err
