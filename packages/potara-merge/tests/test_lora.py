"""LoRA merging: factors vs product, exact endpoints, PEFT compatibility, adapter folders, bad input."""

import json

import numpy as np
import pytest
import torch
from potara_merge.federated import base_mlp, lora_model, peft_config, to_peft_state
from potara_merge.lora import delta_weights, load_adapter, merge_lora, save_adapter
from potara_merge.reference import merge_factors_reference, merged_delta_reference

from papershelf.errors import InputError
from papershelf.testing import assert_close


def _adapter(seed, rank=3, shapes=((8, 5), (4, 8)), scale=1.0):
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for i, (out, inp) in enumerate(shapes):
        sd[f"base_model.model.l{i}.lora_A.weight"] = torch.randn(rank, inp, generator=g, dtype=torch.float64)
        sd[f"base_model.model.l{i}.lora_B.weight"] = scale * torch.randn(
            out, rank, generator=g, dtype=torch.float64
        )
    return sd


CFG = {"r": 3, "lora_alpha": 6}


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.5, 1.0])
def test_factor_merge_matches_reference(lam):
    f, loc = _adapter(0), _adapter(1)
    merged, _ = merge_lora(f, loc, lam, mode="factors")
    ref = merge_factors_reference(
        {k: v.numpy() for k, v in f.items()}, {k: v.numpy() for k, v in loc.items()}, lam
    )
    for k in f:
        np.testing.assert_allclose(merged[k].numpy(), ref[k], rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("mode", ["factors", "product"])
def test_weight_one_is_the_federated_adapter_and_zero_the_local_one(mode):
    f, loc = _adapter(0), _adapter(1)
    m1, c1 = merge_lora(f, loc, 1.0, mode=mode, fed_config=CFG, loc_config=CFG)
    m0, c0 = merge_lora(f, loc, 0.0, mode=mode, fed_config=CFG, loc_config=CFG)
    if mode == "factors":  # the adapter itself, bit for bit
        assert all(torch.equal(m1[k], f[k]) for k in f)
        assert all(torch.equal(m0[k], loc[k]) for k in loc)
    d_f, d_l = delta_weights(f, CFG), delta_weights(loc, CFG)
    d1, d0 = delta_weights(m1, c1), delta_weights(m0, c0)
    for mod in d_f:  # the dense update it applies (product mode: rank r_F + r_L, zero block exactly 0)
        assert (
            torch.equal(d1[mod], d_f[mod])
            if mode == "factors"
            else torch.allclose(d1[mod], d_f[mod], rtol=1e-14)
        )
        assert torch.allclose(d0[mod], d_l[mod], rtol=1e-14, atol=1e-14)


def test_product_mode_is_the_exact_convex_mix_of_task_vectors_even_with_different_ranks():
    f = _adapter(0, rank=3)
    loc = _adapter(1, rank=5)
    cfg_l = {"r": 5, "lora_alpha": 20}  # different scaling too
    lam = 0.37
    merged, cfg = merge_lora(f, loc, lam, mode="product", fed_config=CFG, loc_config=cfg_l)
    assert cfg["r"] == 8
    d = delta_weights(merged, cfg)
    for mod, (a, b) in {"base_model.model.l0": ("l0.lora_A", "l0.lora_B")}.items():
        ref = merged_delta_reference(
            f[f"base_model.model.{a}.weight"].numpy(),
            f[f"base_model.model.{b}.weight"].numpy(),
            loc[f"base_model.model.{a}.weight"].numpy(),
            loc[f"base_model.model.{b}.weight"].numpy(),
            lam,
            "product",
            s_f=2.0,
            s_l=4.0,
        )
        np.testing.assert_allclose(d[mod].numpy(), ref, rtol=1e-12, atol=1e-12)


def test_factor_mode_carries_cross_terms_the_product_mode_does_not():
    f, loc = _adapter(0), _adapter(1)
    lam = 0.5
    dp = delta_weights(merge_lora(f, loc, lam, mode="product", fed_config=CFG)[0], {"r": 6, "lora_alpha": 12})
    df = delta_weights(merge_lora(f, loc, lam, mode="factors")[0], CFG)
    mod = "base_model.model.l0"
    A_f, B_f = f[f"{mod}.lora_A.weight"], f[f"{mod}.lora_B.weight"]
    A_l, B_l = loc[f"{mod}.lora_A.weight"], loc[f"{mod}.lora_B.weight"]
    cross = 2.0 * lam * (1 - lam) * (B_f @ A_l + B_l @ A_f)
    # factors = product − λ(1−λ)s(B_F A_F + B_L A_L) + λ(1−λ)s(B_F A_L + B_L A_F)
    expect = dp[mod] - 2.0 * lam * (1 - lam) * (B_f @ A_f + B_l @ A_l) + cross
    assert_close(df[mod], expect, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(df[mod], dp[mod])


def test_per_module_weights():
    f, loc = _adapter(0), _adapter(1)
    w = {"base_model.model.l0": 1.0, "base_model.model.l1": 0.0}
    m, _ = merge_lora(f, loc, w)
    assert torch.equal(m["base_model.model.l0.lora_A.weight"], f["base_model.model.l0.lora_A.weight"])
    assert torch.equal(m["base_model.model.l1.lora_B.weight"], loc["base_model.model.l1.lora_B.weight"])
    with pytest.raises(InputError, match="l1"):
        merge_lora(f, loc, {"base_model.model.l0": 0.5})


def test_bad_adapters_name_the_module():
    f = _adapter(0)
    with pytest.raises(InputError, match=r"l1.*different shapes"):
        merge_lora(f, _adapter(1, shapes=((8, 5), (4, 9))), 0.5)
    with pytest.raises(InputError, match=r"target different modules.*l1"):
        merge_lora(f, _adapter(1, shapes=((8, 5),)), 0.5)
    with pytest.raises(InputError, match="ranks differ"):
        merge_lora(f, _adapter(1, rank=2), 0.5, mode="factors")
    bad = _adapter(1)
    bad["base_model.model.l0.lora_A.weight"][0, 0] = float("nan")
    with pytest.raises(InputError, match=r"l0.*NaN"):
        merge_lora(f, bad, 0.5)
    with pytest.raises(InputError, match="weight"):
        merge_lora(f, _adapter(1), 1.5)
    with pytest.raises(InputError, match="scalings differ"):
        merge_lora(f, _adapter(1), 0.5, fed_config=CFG, loc_config={"r": 3, "lora_alpha": 3})


def test_simulation_adapter_is_a_peft_adapter(tmp_path):
    """lora_model's adapter, saved as a PEFT folder, loads into PEFT and reproduces the outputs."""
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

    base = base_mlp(64, 16, 10, seed=0)
    import copy

    ours = lora_model(copy.deepcopy(base), rank=2, alpha=4.0, seed=3)
    with torch.no_grad():
        for n, p in ours.named_parameters():
            if "lora_B" in n:
                p.normal_()
    state = {n: p.detach() for n, p in ours.named_parameters() if p.requires_grad}
    folder = save_adapter(tmp_path / "ad", to_peft_state(state), peft_config(2, 4.0, ["0", "2", "4"]))
    sd, cfg = load_adapter(folder)
    peft_model = get_peft_model(
        copy.deepcopy(base), LoraConfig(**{k: cfg[k] for k in ("r", "lora_alpha", "target_modules")})
    )
    res = set_peft_model_state_dict(peft_model, sd)
    assert not [k for k in res.missing_keys if "lora" in k]
    X = torch.rand(7, 64)
    assert_close(peft_model(X), ours(X), rtol=1e-5, atol=1e-6)


def test_adapter_folder_errors(tmp_path):
    with pytest.raises(InputError, match="not a folder"):
        load_adapter(tmp_path / "missing")
    (tmp_path / "x").mkdir()
    with pytest.raises(InputError, match=r"adapter_config.json"):
        load_adapter(tmp_path / "x")
    (tmp_path / "x" / "adapter_config.json").write_text(json.dumps({"peft_type": "PREFIX_TUNING"}))
    with pytest.raises(InputError, match=r"adapter_model.safetensors"):
        load_adapter(tmp_path / "x")
    (tmp_path / "x" / "adapter_model.safetensors").write_bytes(b"garbage")
    with pytest.raises(InputError, match="not a LoRA adapter"):
        load_adapter(tmp_path / "x")
    cfg_file = tmp_path / "x" / "adapter_config.json"
    for bad, msg in (([1, 2], "JSON object"), ({"r": 0}, "r must be"), ({"r": "4"}, "r must be")):
        cfg_file.write_text(json.dumps(bad))
        with pytest.raises(InputError, match=msg):
            load_adapter(tmp_path / "x")
    cfg_file.write_text(json.dumps({"lora_alpha": None}))
    with pytest.raises(InputError, match="lora_alpha"):
        load_adapter(tmp_path / "x")
    cfg_file.write_bytes(b"\xff\xfe{}")
    with pytest.raises(InputError, match="not UTF-8"):
        load_adapter(tmp_path / "x")
    cfg_file.write_text(json.dumps({"peft_type": "LORA"}))
    with pytest.raises(InputError, match="cannot read"):
        load_adapter(tmp_path / "x")
    save_adapter(tmp_path / "y", _adapter(0), CFG)
    with pytest.raises(InputError, match="not an empty folder"):
        save_adapter(tmp_path / "y", _adapter(0), CFG)


@pytest.mark.parametrize("mode", ["factors", "product"])
def test_merge_peft_models_applies_the_mixed_update(mode):
    import copy

    from peft import LoraConfig, get_peft_model
    from potara_merge.lora import merge_peft_models

    base = base_mlp(64, 16, 10, seed=0)
    cfg = LoraConfig(r=2, lora_alpha=4, target_modules=["0", "2", "4"])
    torch.manual_seed(0)
    fed_m = get_peft_model(copy.deepcopy(base), cfg)
    torch.manual_seed(1)
    loc_m = get_peft_model(copy.deepcopy(base), cfg)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for m in (fed_m, loc_m):
            for n, p in m.named_parameters():
                if "lora_B" in n:
                    p.copy_(torch.randn(p.shape, generator=g))
    X = torch.rand(5, 64)
    one = merge_peft_models(fed_m, loc_m, 1.0, mode=mode)
    assert_close(one(X), fed_m(X), rtol=1e-5, atol=1e-6)
    if mode == "factors":
        assert torch.equal(one(X), fed_m(X))
    zero = merge_peft_models(fed_m, loc_m, 0.0, mode=mode)
    assert_close(zero(X), loc_m(X), rtol=1e-5, atol=1e-6)
    mid = merge_peft_models(fed_m, loc_m, 0.3, mode=mode)
    if mode == "product":  # every layer's update is exactly 0.3 ΔW_F + 0.7 ΔW_L
        lin = mid.base_model.model[0]
        dense = (
            base[0].weight
            + 0.3 * fed_m.base_model.model[0].get_delta_weight("default")
            + 0.7 * (loc_m.base_model.model[0].get_delta_weight("default"))
        )
        assert_close(base[0].weight + lin.get_delta_weight("potara"), dense, rtol=1e-5, atol=1e-6)


def test_corrupt_adapters_are_refused_not_merged(tmp_path):
    """Regressions: each of these used to merge silently (or crash with a traceback)."""
    from safetensors.torch import save_file

    f = _adapter(0)
    # lora_alpha = 0 made mode='product' divide by zero (it keeps the federated scaling s_F)
    with pytest.raises(InputError, match="lora_alpha must be a finite non-zero number"):
        merge_lora(f, _adapter(1), 0.5, mode="product", fed_config={"r": 3, "lora_alpha": 0}, loc_config=CFG)
    # two keys for one factor ("x.lora_A.weight" and "x.lora_A.default.weight"): one was dropped silently
    dup = {**_adapter(1), "base_model.model.l0.lora_A.default.weight": torch.zeros(3, 5, dtype=torch.float64)}
    with pytest.raises(InputError, match=r"module 'base_model.model.l0' has two lora_A entries"):
        merge_lora(f, dup, 0.5)
    # integer factors were mixed and truncated to the global adapter's integer dtype
    ints = {k: v.round().long() for k, v in _adapter(1).items()}
    with pytest.raises(InputError, match=r"l0.*dtype torch.int64"):
        merge_lora(ints, _adapter(1), 0.5)
    # a config whose r is not the rank of the saved factors (PEFT could not load it either)
    (tmp_path / "a").mkdir()
    save_file(
        {k: v.float() for k, v in _adapter(1).items()}, str(tmp_path / "a" / "adapter_model.safetensors")
    )
    (tmp_path / "a" / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 16}))
    with pytest.raises(InputError, match=r"module 'base_model.model.l0' has rank 3 .* says r = 8"):
        load_adapter(tmp_path / "a", "--local")
    (tmp_path / "a" / "adapter_config.json").write_text(json.dumps({"r": 3, "rank_pattern": {"l0": 2}}))
    with pytest.raises(InputError, match=r"--local: .*adapter_config.json uses rank_pattern"):
        load_adapter(tmp_path / "a", "--local")
    (tmp_path / "a" / "adapter_config.json").write_text(json.dumps({"r": 3, "lora_alpha": 6}))
    assert load_adapter(tmp_path / "a")[1]["r"] == 3
