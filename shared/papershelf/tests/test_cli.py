import subprocess
import sys

import pytest

from papershelf.cli import App, arg
from papershelf.errors import InputError, MissingDependencyError


def _app():
    app = App("toy", "1.2.3", "A toy program.")

    @app.command("fail", help="raise an InputError", args=[arg("--what", default="alpha")])
    def fail(args):
        raise InputError(f"{args.what} must be in (0, 1), got 7\nsecond line", hint="try 0.05")

    @app.command("missing", help="missing extra")
    def missing(args):
        raise MissingDependencyError("sklearn", package="toy", extra="bench")

    @app.command("ok", help="succeed", common=["seed", "out", "quiet", "device"])
    def ok(args):
        print(f"seed={args.seed} out={args.out} quiet={args.quiet} device={args.device}")

    @app.command("code", help="return 3")
    def code(args):
        return 3

    @app.command("bug", help="a programming error keeps its traceback")
    def bug(args):
        raise ZeroDivisionError("bug")

    return app


def test_input_error_is_one_line_exit_2(capsys):
    assert _app().main(["fail"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert lines == ["error: alpha must be in (0, 1), got 7 second line (hint: try 0.05)"]
    assert "Traceback" not in captured.err


def test_missing_dependency_names_the_extra(capsys):
    assert _app().main(["missing"]) == 2
    assert "pip install 'toy[bench]'" in capsys.readouterr().err


def test_common_flags_version_usage_and_codes(capsys):
    app = _app()
    assert app.main(["ok", "--seed", "5", "--out", "x.json", "-q"]) == 0
    assert capsys.readouterr().out.strip() == "seed=5 out=x.json quiet=True device=auto"
    assert app.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == "toy 1.2.3"
    assert app.main(["ok", "--seed", "abc"]) == 2  # argparse usage error: one line, no usage block
    err = capsys.readouterr().err
    assert err.startswith("error: argument --seed") and len(err.splitlines()) == 1, err
    assert "`toy ok --help`" in err
    for argv in (["nope"], ["ok", "--unknown"]):  # unknown subcommand, unknown flag
        assert app.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error:") and len(err.splitlines()) == 1, err
    for bad in ("-1", str(2**32), "1.5"):  # numpy rejects negative seeds with a traceback; catch them here
        assert app.main(["ok", "--seed", bad]) == 2
        assert "argument --seed" in capsys.readouterr().err
    assert app.main(["ok", "--seed", str(2**32 - 1)]) == 0
    for empty in ("", " "):  # an empty --out would silently write nothing
        assert app.main(["ok", "--out", empty]) == 2
        assert "argument --out" in capsys.readouterr().err
    assert app.main([]) == 2  # no command: help, usage exit code
    assert app.main(["code"]) == 3


def test_bugs_are_not_swallowed():
    import pytest

    with pytest.raises(ZeroDivisionError):
        _app().main(["bug"])


def test_papershelf_command_in_a_subprocess():
    proc = subprocess.run(
        [sys.executable, "-m", "papershelf", "--version"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0 and proc.stdout.startswith("papershelf ")
    proc = subprocess.run(
        [sys.executable, "-m", "papershelf", "bench-report", "/nonexistent/bench.json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and "Traceback" not in proc.stderr


def test_read_npy_refuses_what_is_not_one_saved_array(tmp_path):
    np = pytest.importorskip("numpy")
    from papershelf.cli import read_npy

    good = tmp_path / "a.npy"
    np.save(good, np.arange(3.0))
    assert read_npy(str(good), "--x").tolist() == [0.0, 1.0, 2.0]
    (tmp_path / "empty.npy").write_bytes(b"")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.savez(tmp_path / "z.npz", a=np.ones(2))
    for name, match in (("missing.npy", "no such file"), ("empty.npy", "cannot read"),
                        ("obj.npy", "pickled Python objects"), ("z.npz", "an .npz archive")):  # fmt: skip
        with pytest.raises(InputError, match=f"--x: .*{match}"):
            read_npy(str(tmp_path / name), "--x")


def test_check_threads_bounds_the_count_by_the_machine():
    import os

    from papershelf.cli import check_threads
    from papershelf.errors import InputError

    cpus = os.cpu_count() or 1
    assert check_threads(1) == 1 and check_threads(cpus) == cpus
    for bad in (0, cpus + 1, 100_000, 1.5):
        with pytest.raises(InputError, match=r"--threads must be an integer"):
            check_threads(bad)


def test_read_text_reads_utf8_and_names_the_flag_otherwise(tmp_path):
    from papershelf.cli import read_text
    from papershelf.errors import InputError

    good = tmp_path / "p.txt"
    good.write_text("héllo", encoding="utf-8")
    assert read_text(str(good), "--prompt-file") == "héllo"
    (tmp_path / "latin1.txt").write_bytes("héllo".encode("latin-1"))
    for path, word in ((tmp_path / "none.txt", "is not a file"), (tmp_path, "is not a file"),
                       (tmp_path / "latin1.txt", "is not UTF-8 text")):  # fmt: skip
        with pytest.raises(InputError, match=f"^--prompt-file .*{word}"):
            read_text(str(path), "--prompt-file")
