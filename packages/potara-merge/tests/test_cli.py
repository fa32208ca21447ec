"""The CLI through main(argv), one subprocess smoke test, and bad input at the command line."""

import json
import subprocess
import sys

import pytest
import torch
from potara_merge import __version__
from potara_merge.cli import main
from potara_merge.io import save_fisher
from potara_merge.lora import load_adapter, save_adapter


def _adapter(seed):
    g = torch.Generator().manual_seed(seed)
    return {
        "base_model.model.q.lora_A.weight": torch.randn(2, 6, generator=g),
        "base_model.model.q.lora_B.weight": torch.randn(5, 2, generator=g),
    }


CFG = {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q"]}


@pytest.fixture
def dirs(tmp_path):
    save_adapter(tmp_path / "g", _adapter(0), CFG)
    save_adapter(tmp_path / "l", _adapter(1), CFG)
    return tmp_path


def test_merge_fixed_weight(dirs, capsys):
    assert (
        main(
            [
                "merge",
                "--global",
                str(dirs / "g"),
                "--local",
                str(dirs / "l"),
                "--weight",
                "1",
                "--out",
                str(dirs / "o"),
            ]
        )
        == 0
    )
    out, _ = load_adapter(dirs / "o")
    g, _ = load_adapter(dirs / "g")
    assert all(torch.equal(out[k], g[k]) for k in g)
    assert "λ = 1.0000" in capsys.readouterr().out


def test_merge_closed_form_from_fisher_files(dirs, capsys):
    fg = {k: torch.full_like(v, 4.0) for k, v in _adapter(0).items()}
    fl = {k: torch.full_like(v, 1.0) for k, v in _adapter(0).items()}
    save_fisher(dirs / "fg.safetensors", fg)
    save_fisher(dirs / "fl.safetensors", fl)
    args = [
        "merge",
        "--global",
        str(dirs / "g"),
        "--local",
        str(dirs / "l"),
        "--fisher-global",
        str(dirs / "fg.safetensors"),
        "--fisher-local",
        str(dirs / "fl.safetensors"),
        "--damping",
        "0",
        "--mode",
        "product",
        "--out",
        str(dirs / "o"),
    ]
    assert main(args) == 0
    # a = Σ 1/4, b = Σ 1/1 over 22 entries, c = 0: λ* = b/(a+b) = 0.8
    assert "λ = 0.8000" in capsys.readouterr().out
    out, cfg = load_adapter(dirs / "o")
    assert cfg["r"] == 4 and out["base_model.model.q.lora_A.weight"].shape == (4, 6)


def test_merge_closed_form_leaves_out_coordinates_identical_in_both_adapters(dirs, capsys):
    """The CLI's λ follows personalise's rule: an entry equal in both adapters never moves λ*."""
    from potara_merge.weights import global_traces, module_traces

    g, loc = _adapter(0), _adapter(1)
    a_key, b_key = "base_model.model.q.lora_A.weight", "base_model.model.q.lora_B.weight"
    loc[a_key][:, :3] = g[a_key][:, :3]  # columns neither side trained
    save_adapter(dirs / "l2", loc, CFG)
    fg = {a_key: torch.rand(2, 6, generator=torch.Generator().manual_seed(3)), b_key: torch.full((5, 2), 2.0)}
    fl = {k: 4.0 * v for k, v in fg.items()}
    fg[a_key][:, :3] = fl[a_key][:, :3] = 1e-6  # no gradient there: a huge variance on both sides
    save_fisher(dirs / "fg.safetensors", fg)
    save_fisher(dirs / "fl.safetensors", fl)
    args = ["merge", "--global", str(dirs / "g"), "--local", str(dirs / "l2"), "--damping", "0"]
    args += ["--fisher-global", str(dirs / "fg.safetensors"), "--fisher-local", str(dirs / "fl.safetensors")]
    assert main([*args, "--out", str(dirs / "o")]) == 0
    same = {k: g[k] == loc[k] for k in g}
    groups = {"base_model.model.q": [a_key, b_key]}
    want = global_traces(module_traces(fg, fl, groups, damping=0, same=same)).weight
    naive = global_traces(module_traces(fg, fl, groups, damping=0)).weight
    assert abs(want - naive) > 0.05  # the identical columns would have pulled λ toward 0.5
    assert f"λ = {want:.4f}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "msg"),
    [
        ([], "--weight L, or --fisher-global"),
        (["--weight", "2"], "weight must be in"),
        (["--weight", "nan"], "weight must be finite"),
        (["--fisher-global", "nope", "--fisher-local", "nope"], "--fisher-global 'nope' is not a file"),
        (["--weight", "0.5", "--grad-corr", "x.safetensors"], "are exclusive"),
        (["--weight", "0.5", "--per-module"], "--per-module needs the closed form"),
        (["--weight", "0.5", "--damping", "-5"], "damping"),
    ],
)
def test_merge_bad_input_exits_2(dirs, capsys, extra, msg):
    code = main(
        ["merge", "--global", str(dirs / "g"), "--local", str(dirs / "l"), "--out", str(dirs / "o"), *extra]
    )
    assert code == 2
    assert msg in capsys.readouterr().err
    assert not (dirs / "o").exists()  # nothing half-written


def test_merge_mismatched_adapters_exit_2(dirs, capsys):
    bad = _adapter(2)
    bad["base_model.model.q.lora_B.weight"] = torch.randn(7, 2)
    save_adapter(dirs / "b", bad, CFG)
    assert (
        main(
            [
                "merge",
                "--global",
                str(dirs / "g"),
                "--local",
                str(dirs / "b"),
                "--weight",
                "0.5",
                "--out",
                str(dirs / "o"),
            ]
        )
        == 2
    )
    assert "module 'base_model.model.q'" in capsys.readouterr().err
    assert not (dirs / "o").exists()


def test_merge_unwritable_out_exits_2(dirs, capsys):
    (dirs / "file.txt").write_text("x")
    for out in ["/proc/nonexistent/out", str(dirs / "file.txt" / "out")]:
        args = ["merge", "--global", str(dirs / "g"), "--local", str(dirs / "l"), "--weight", "0.5"]
        assert main([*args, "--out", out]) == 2, out
        err = capsys.readouterr().err
        assert err.startswith("error: --out") and len(err.strip().splitlines()) == 1, err
    assert (dirs / "file.txt").read_text() == "x"


@pytest.mark.parametrize("value", [1.5, -3.0, float("nan"), float("inf")])
def test_merge_grad_corr_out_of_range_exits_2(dirs, capsys, value):
    f = {k: torch.ones_like(v) for k, v in _adapter(0).items()}
    save_fisher(dirs / "f.safetensors", f)
    corr = {k: torch.full_like(v, 0.5) for k, v in f.items()}
    corr["base_model.model.q.lora_B.weight"][0, 0] = value
    save_fisher(dirs / "c.safetensors", corr)
    args = ["merge", "--global", str(dirs / "g"), "--local", str(dirs / "l"), "--out", str(dirs / "o")]
    args += ["--fisher-global", str(dirs / "f.safetensors"), "--fisher-local", str(dirs / "f.safetensors")]
    assert main([*args, "--grad-corr", str(dirs / "c.safetensors")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --grad-corr") and len(err.strip().splitlines()) == 1, err
    assert not (dirs / "o").exists()
    corr["base_model.model.q.lora_B.weight"][0, 0] = -1.0  # the ends of [-1, 1] are valid
    save_fisher(dirs / "c.safetensors", corr)
    assert main([*args, "--grad-corr", str(dirs / "c.safetensors")]) == 0


def test_simulate_bad_skew_and_bench_quick(tmp_path, capsys):
    assert main(["simulate", "--skew", "zipf:1"]) == 2
    assert "--skew" in capsys.readouterr().err
    hostile = ["task-cue:0", "task-cue:11", "task-cue:2.5", "task-cue:", "task-cue", "task-cue:nan"]
    hostile += ["task-cue:inf", "task-cue:-1", "task-cue:4:1", "task-cue:1e9", "cue:4", "task-cue:four", ""]
    for bad in hostile:
        assert main(["simulate", "--skew", bad]) == 2, bad
        err = capsys.readouterr().err
        assert err.startswith("error:") and "--skew" in err and len(err.strip().splitlines()) == 1, bad
    # every skew is checked before the first (long) experiment starts
    assert main(["reproduce", "--skews", "iid", "task-cue:0", "--out", str(tmp_path / "r.json")]) == 2
    assert "task-cue:0" in capsys.readouterr().err and not (tmp_path / "r.json").exists()
    assert main(["simulate", "--clients", "0"]) == 2
    assert main(["bench", "--quick", "--seeds", "0", "--out", str(tmp_path / "b.json")]) == 2  # not ignored
    assert "--seeds" in capsys.readouterr().err and not (tmp_path / "b.json").exists()


def test_subprocess_version():
    out = subprocess.run(
        [sys.executable, "-m", "potara_merge.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"potara-merge {__version__}"
    assert json.dumps(out.returncode) == "0"


@pytest.mark.parametrize(
    ("which", "bad", "msg"),
    [
        ("fg", "nan", "error: --fisher-global entry for 'base_model.model.q.lora_A.weight' contains NaN"),
        ("fl", "neg", "error: --fisher-local entry for 'base_model.model.q.lora_A.weight' has negative"),
        ("fg", "missing", "error: --fisher-global: no entry for 'base_model.model.q.lora_B.weight'"),
        ("fl", "extra", "error: --fisher-local: entry 'base_model.model.k.lora_A.weight' is not a parameter"),
        ("fg", "zero", "error: --fisher-global is zero everywhere"),
    ],
)
def test_merge_bad_fisher_file_names_the_flag(dirs, capsys, which, bad, msg):
    """Regression: these errors named module_traces' internal arguments (fisher_fed / fisher_loc)."""
    good = {k: torch.ones_like(v) for k, v in _adapter(0).items()}
    broken = {k: v.clone() for k, v in good.items()}
    if bad == "nan":
        broken["base_model.model.q.lora_A.weight"][0, 0] = float("nan")
    elif bad == "neg":
        broken["base_model.model.q.lora_A.weight"][0, 0] = -1.0
    elif bad == "extra":  # the Fisher of another adapter (it was silently ignored)
        broken["base_model.model.k.lora_A.weight"] = torch.ones(2, 6)
    elif bad == "zero":  # no information: λ fell back to a default silently
        broken = {k: torch.zeros_like(v) for k, v in good.items()}
    else:
        del broken["base_model.model.q.lora_B.weight"]
    save_fisher(dirs / "good.safetensors", good)
    save_fisher(dirs / "bad.safetensors", broken)
    fg, fl = ("bad", "good") if which == "fg" else ("good", "bad")
    args = ["merge", "--global", str(dirs / "g"), "--local", str(dirs / "l"), "--out", str(dirs / "o")]
    args += [
        "--fisher-global",
        str(dirs / f"{fg}.safetensors"),
        "--fisher-local",
        str(dirs / f"{fl}.safetensors"),
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(msg) and len(err.strip().splitlines()) == 1, err
    assert not (dirs / "o").exists()


def test_merge_product_with_a_zero_lora_alpha_exits_2(dirs, capsys):
    """Regression: lora_alpha = 0 in the global adapter crashed `--mode product` (ZeroDivisionError)."""
    save_adapter(dirs / "z", _adapter(2), {**CFG, "lora_alpha": 0})
    args = ["merge", "--global", str(dirs / "z"), "--local", str(dirs / "l"), "--weight", "0.5"]
    assert main([*args, "--mode", "product", "--out", str(dirs / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --global: ") and "lora_alpha" in err and len(err.strip().splitlines()) == 1
    assert not (dirs / "o").exists()


def test_too_many_clients_and_an_unsplittable_skew_fail_before_any_run(tmp_path, capsys):
    """Regressions: --clients beyond what digits holds was reported as `n_clients=…` once the run had
    started; a Dirichlet skew that leaves a client without data failed only when its turn came, after the
    earlier skews of `reproduce` had run for minutes."""
    from potara_merge.data import max_clients

    assert main(["simulate", "--clients", str(max_clients() + 1)]) == 2
    assert f"--clients must be an integer in [1, {max_clients()}]" in capsys.readouterr().err
    out = tmp_path / "r.json"
    assert main(["reproduce", "--seeds", "1", "--skews", "iid", "dirichlet:1e-3", "--out", str(out)]) == 2
    stdout, err = capsys.readouterr()
    assert err.startswith("error: --skew dirichlet:1e-3") and len(err.strip().splitlines()) == 1, err
    assert "skew iid" not in stdout  # the iid experiment never started
    assert not out.exists()


def test_absurd_round_count_is_refused_before_any_work(capsys):
    """Every round's global adapter is kept for the curves: --rounds had no upper bound."""
    assert main(["simulate", "--rounds", "1000000000"]) == 2
    assert "--rounds" in capsys.readouterr().err


def test_engine_choice_and_a_missing_flower_are_one_line_errors(monkeypatch, capsys):
    import builtins

    assert main(["simulate", "--engine", "ray"]) == 2
    assert "--engine" in capsys.readouterr().err
    real_import = builtins.__import__

    def no_flwr(name, *args, **kw):
        if name == "flwr" or name.startswith("flwr."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_flwr)
    assert main(["simulate", "--engine", "flower", "--clients", "2", "--rounds", "1"]) == 2
    err = capsys.readouterr().err  # said before any training starts
    assert "flwr" in err and "potara-merge[flower]" in err
