"""The command line: verbs through main(argv), exit code 2 on bad input, one subprocess smoke test."""

import json
import shutil
import subprocess
import sys

import pytest
from papershelf_speech import __version__
from papershelf_speech.cli import main


def test_info_lists_presets_engines_and_splits(capsys):
    assert main(["info"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {"preset": "ctc-small"}.items() <= rows[0].items() and rows[0]["layers"] >= 12
    assert any(r.get("debian_package") == "espeak-ng" for r in rows)
    assert any(r.get("split") == "test" for r in rows)


def test_bad_input_exits_2_with_one_line(capsys, tmp_path):
    assert main(["build-corpus", "--n-train", "1"]) == 2
    assert "--out" in capsys.readouterr().err
    assert main(["build-corpus", "--out", str(tmp_path / "c"), "--sample-rate", "44100"]) == 2
    assert "8000, 16000, 22050" in capsys.readouterr().err
    assert main(["eval", "no-such-model", "--corpus", str(tmp_path)]) == 2
    assert "unknown checkpoint" in capsys.readouterr().err
    assert main(["train", "--corpus", str(tmp_path), "--run", str(tmp_path / "r"), "--preset", "giant"]) == 2
    assert "ctc-small" in capsys.readouterr().err
    assert main(["ship", str(tmp_path), "--name", "Bad Name"]) == 2


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng: apt-get install -y espeak-ng")
def test_build_corpus_and_eval_through_the_cli(tmp_path, capsys):
    out = tmp_path / "c"
    assert main(["build-corpus", "--out", str(out), "--n-train", "2", "--n-dev", "1", "--n-test", "1",
                 "--engines", "espeak-ng", "--spoof", "1", "--quiet"]) == 0  # fmt: skip
    assert len(json.loads(capsys.readouterr().out)["sha256"]) == 64
    assert (out / "test.spoof.npz").is_file()
    from papershelf_speech.model import build_model, save_model

    save_model(build_model("micro"), tmp_path / "m")
    assert main(["eval", str(tmp_path / "m"), "--corpus", str(out), "--probe-train", "1", "--probe-test", "1",
                 "--out", str(tmp_path / "e.json")]) == 0  # fmt: skip
    result = json.loads((tmp_path / "e.json").read_text())
    assert result["asr"]["utterances"] == 1 and len(result["probe"]["accuracy"]) == 3


def test_version_in_a_subprocess():
    proc = subprocess.run([sys.executable, "-m", "papershelf_speech.cli", "--version"], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert proc.returncode == 0 and __version__ in proc.stdout
