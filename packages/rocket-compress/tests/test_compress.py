"""compress() end to end on small random Llamas: grams, budget, baselines, save/load round trip, errors."""

import copy
import dataclasses
import json

import pytest
import torch
from rocket_compress import (
    CompressConfig,
    FactorizedLinear,
    collect_input_grams,
    compress,
    count_params,
    load_compressed,
    magnitude_prune,
    save_compressed,
    svd_llm,
    truncated_svd,
)
from rocket_compress.data import random_batches, random_llama

from papershelf.errors import InputError

CFG = CompressConfig(ratios=(0.2, 0.4, 0.6), ks_grid=(1.0, 2.0))


@pytest.fixture(scope="module")
def setup():
    model = random_llama(hidden=32, layers=2, intermediate=48, vocab=64, seed=0)
    calib = random_batches(64, 6, 32, seed=0)
    held = torch.cat(random_batches(64, 2, 32, seed=1))
    return model, calib, held


def test_grams_match_captured_inputs_and_are_shared(setup):
    model, calib, _ = setup
    cal = collect_input_grams(
        model,
        calib,
        [
            "model.layers.0.self_attn.q_proj",
            "model.layers.0.self_attn.k_proj",
            "model.layers.0.mlp.down_proj",
        ],
    )
    seen = {}
    hooks = [
        model.get_submodule(n).register_forward_pre_hook(
            lambda m, i, n=n: seen.setdefault(n, []).append(i[0])
        )
        for n in ("model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj")
    ]
    with torch.no_grad():
        for b in calib:
            model(input_ids=b, use_cache=False)
    for h in hooks:
        h.remove()
    for name in seen:
        X = torch.cat([x.reshape(-1, x.shape[-1]) for x in seen[name]]).double()
        torch.testing.assert_close(cal.grams[name], X.T @ X / X.shape[0], rtol=1e-12, atol=1e-14)
    assert cal.shared["model.layers.0.self_attn.k_proj"] == "model.layers.0.self_attn.q_proj"
    assert cal.shared["model.layers.0.mlp.down_proj"] == "model.layers.0.mlp.down_proj"
    assert cal.tokens == 6 * 32


@pytest.mark.parametrize("allocation", ["knapsack", "uniform"])
def test_compress_meets_the_budget_and_accounts_parameters(setup, allocation):
    model, calib, held = setup
    m = copy.deepcopy(model)
    cfg = dataclasses.replace(CFG, allocation=allocation)
    m, rep = compress(m, calib, 0.4, cfg)
    assert rep.params <= rep.budget == int(0.6 * rep.params_dense)
    span = max(r["d_in"] + r["d_out"] for r in rep.layers)
    assert rep.budget - rep.params < span  # the budget is met within rounding
    fl = [mod for mod in m.modules() if isinstance(mod, FactorizedLinear)]
    assert fl
    assert count_params(m) == rep.model_params_after == count_params(model) - rep.params_dense + rep.params
    assert rep.index_entries == sum(f.index_entries for f in fl)
    with torch.no_grad():
        ref, out = model(input_ids=held).logits, m(input_ids=held).logits
    assert torch.isfinite(out).all() and float((out - ref).norm() / ref.norm()) < 0.5


def test_knapsack_total_error_is_at_most_uniform(setup):
    from rocket_compress import allocate, calibrate, profile

    model, calib, _ = setup
    cal = calibrate(model, calib, CFG)
    prof = profile(model, cal, CFG, extra_ratios=(0.4,))
    k = allocate(prof, 0.4, "knapsack")
    u = allocate(prof, 0.4, "uniform")
    assert sum(o.rel_error for o in k.values()) <= sum(o.rel_error for o in u.values()) + 1e-12
    assert sum(o.params for o in k.values()) <= int(0.6 * sum(lp.d_in * lp.d_out for lp in prof))


def test_baselines_use_the_budget(setup):
    model, calib, _ = setup
    from rocket_compress import calibrate

    cal = calibrate(model, calib, CFG)
    for fn in (
        lambda m: svd_llm(m, cal, 0.3),
        lambda m: truncated_svd(m, 0.3),
        lambda m: magnitude_prune(m, 0.3),
    ):
        m = copy.deepcopy(model)
        rep = fn(m)
        assert rep.params <= rep.budget
        for r in rep.layers:  # every layer at the uniform ratio, within rounding
            assert 0 <= 0.7 * r["d_in"] * r["d_out"] - r["params"] < r["d_in"] + r["d_out"]
        if rep.allocation == "magnitude":  # pruned weights stay dense tensors: count their non-zeros
            assert sum(int((m.get_submodule(r["name"]).weight != 0).sum()) for r in rep.layers) == rep.params
        else:
            assert count_params(m) == rep.model_params_after


def test_save_load_round_trips_exactly(setup, tmp_path):
    model, calib, held = setup
    m, rep = compress(copy.deepcopy(model), calib, 0.3, CFG)
    out = save_compressed(m, tmp_path / "c", report=rep.to_dict())
    back = load_compressed(out)
    sd1, sd2 = m.state_dict(), back.state_dict()
    assert sd1.keys() == sd2.keys() and all(torch.equal(sd1[k], sd2[k]) for k in sd1)
    with torch.no_grad():
        assert torch.equal(m(input_ids=held).logits, back(input_ids=held).logits)
    assert json.loads((out / "rocket_report.json").read_text())["params"] == rep.params
    with pytest.raises(InputError, match="not empty"):
        save_compressed(m, out)


def test_bad_inputs(setup, tmp_path):
    model, calib, _ = setup
    for ratio in (0.0, 1.0, -0.2):
        with pytest.raises(InputError, match="ratio"):
            compress(copy.deepcopy(model), calib, ratio, CFG)
    with pytest.raises(InputError, match="no linear layers"):
        compress(torch.nn.Sequential(torch.nn.ReLU()), calib, 0.3, CFG)
    with pytest.raises(InputError, match="tokens"):
        compress(copy.deepcopy(model), random_batches(64, 1, 8), 0.3, CFG)
    with pytest.raises(InputError, match="empty"):
        compress(copy.deepcopy(model), [], 0.3, CFG)
    tiny = random_llama(hidden=4, layers=1, intermediate=4, vocab=16, heads=2, kv_heads=1)
    with pytest.raises(InputError, match=r"too small|no feasible"):
        compress(tiny, random_batches(16, 4, 16), 0.3, dataclasses.replace(CFG, allocation="uniform"))
    with pytest.raises(InputError, match="allocation"):
        compress(copy.deepcopy(model), calib, 0.3, CompressConfig(allocation="greedy"))
