import json

import numpy as np
import pytest
import torch
from papershelf_vision import data as D
from papershelf_vision.models import PRESETS, BackboneConfig, build, describe, load, save_model, to_tensor

from papershelf.errors import InputError


@pytest.mark.parametrize("preset", ["micro-vit", "vit-tiny", "vit-tiny-patch"])
def test_vit_feature_shapes(preset):
    m = build(preset).eval()
    c = PRESETS[preset]
    x = torch.rand(2, 3, c.image_size, c.image_size)
    feats = m.features(x)
    n = (c.image_size // c.patch_size) ** 2
    assert len(feats) == c.depth
    assert all(f.shape == (2, 1 + n, c.dim) for f in feats)
    assert m(x).shape == (2, c.dim) == (2, m.embed_dim)
    # the embedding is the final LayerNorm of the last block's CLS token, or of its patch tokens, averaged
    last = m.norm(feats[-1])
    assert torch.allclose(m(x), last[:, 1:].mean(1) if c.pool == "mean" else last[:, 0], atol=1e-6)


@pytest.mark.parametrize("preset", ["micro-resnet", "resnet-s"])
def test_resnet_feature_shapes(preset):
    m = build(preset).eval()
    c = PRESETS[preset]
    s = c.image_size
    feats = m.features(torch.rand(2, 3, s, s))
    assert [tuple(f.shape) for f in feats] == [
        (2, (s // st) ** 2, w) for st, w in zip((1, 2, 4, 8), c.widths)
    ]
    assert m.grid(s, s) == [(s // st, s // st) for st in (1, 2, 4, 8)]
    assert m(torch.rand(2, 3, s, s)).shape == (2, c.widths[-1])


def test_other_sizes_interpolate_positions_or_fail_clearly():
    vit = build("micro-vit").eval()
    assert vit.features(torch.rand(1, 3, 24, 32))[0].shape == (1, 1 + 6 * 8, 32)
    with pytest.raises(InputError, match="not a positive multiple of 4"):
        vit(torch.rand(1, 3, 30, 30))
    with pytest.raises(InputError, match="not a positive multiple of 8"):
        build("micro-resnet")(torch.rand(1, 3, 20, 20))
    with pytest.raises(InputError, match=r"\(B, 3, H, W\)"):
        vit(torch.rand(3, 16, 16))


def test_presets_describe_and_unknown_preset():
    info = describe(PRESETS["vit-tiny"])
    assert info["features"][0] == [65, 192] and info["params"] > 1_000_000
    with pytest.raises(InputError, match="unknown preset 'vit-huge'; known presets: vit-tiny, resnet-s"):
        build("vit-huge")


def test_to_tensor():
    x, _ = D.objects(3, size=16)
    t = to_tensor(x)
    assert t.shape == (3, 3, 16, 16) and 0 <= float(t.min()) and float(t.max()) <= 1
    assert to_tensor(x[..., 0]).shape == (3, 3, 16, 16)
    with pytest.raises(InputError, match="uint8"):
        to_tensor(x.astype(np.float32))


def test_save_and_load_a_model_folder_round_trips(tmp_path):
    m = build("micro-vit", seed=3)
    save_model(m, tmp_path / "run", {"step": 1})
    again = load(tmp_path / "run")
    x = torch.rand(2, 3, 16, 16)
    assert not again.training and torch.equal(m.eval()(x), again(x))


def test_unknown_checkpoint_lists_the_known_ones():
    with pytest.raises(InputError, match="unknown checkpoint 'vit-huge'; shipped checkpoints"):
        load("vit-huge")


def test_corrupt_or_mismatched_weights_are_errors(tmp_path):
    m = build("micro-resnet")
    save_model(m, tmp_path / "a")
    w = (tmp_path / "a" / "model.safetensors").read_bytes()
    (tmp_path / "a" / "model.safetensors").write_bytes(w[: len(w) // 2])
    with pytest.raises(InputError, match="cannot load the checkpoint"):
        load(tmp_path / "a")
    save_model(build("micro-vit"), tmp_path / "b")
    save_model(m, tmp_path / "c")
    (tmp_path / "b" / "model.safetensors").write_bytes((tmp_path / "c" / "model.safetensors").read_bytes())
    with pytest.raises(InputError, match="does not match its config"):
        load(tmp_path / "b")
    (tmp_path / "b" / "model.safetensors").unlink()
    with pytest.raises(InputError, match="not a model folder"):
        load(tmp_path / "b")
    from safetensors.torch import load_file, save_file

    weights = load_file(tmp_path / "c" / "model.safetensors")
    name = next(k for k, v in weights.items() if v.is_floating_point())
    for bad, match in ((weights[name].fill_(float("nan")), "NaN or infinite"),
                       (weights[name].to(torch.complex64), "wrong kind")):  # fmt: skip
        save_file({**weights, name: bad}, tmp_path / "c" / "model.safetensors")
        with pytest.raises(InputError, match=match):
            load(tmp_path / "c")


def test_forward_build_and_load_refuse_malformed_arguments():
    m = build("micro-resnet")
    for x, match in ((torch.zeros(1, 3, 16, 16, dtype=torch.uint8), "float32"),
                     (torch.full((1, 3, 16, 16), float("nan")), "NaN"),
                     (torch.full((1, 3, 16, 16), 255.0), r"in \[0, 1\]"),  # a 0-255 scale
                     (torch.full((1, 3, 16, 16), -2.0), r"in \[0, 1\]")):  # normalised twice  # fmt: skip
        with pytest.raises(InputError, match=match):
            m.features(x)
    assert m.features(torch.zeros(0, 3, 16, 16))[-1].shape[0] == 0  # an empty batch is no error
    for seed in (-1, 1.5):
        with pytest.raises(InputError, match="seed"):
            build("micro-resnet", seed=seed)
    with pytest.raises(InputError, match="checkpoint name or a folder"):
        load(123)


def test_to_tensor_refuses_a_single_rgb_image_and_takes_flipped_views():
    x, _ = D.objects(2, size=16)
    with pytest.raises(InputError, match=r"one \(H, W, 3\) image"):
        to_tensor(x[0])  # (16, 16, 3) read as 16 grey images 3 px wide before
    flipped = x[:, :, ::-1]  # negative strides: torch.from_numpy refused them with a ValueError
    assert torch.equal(to_tensor(flipped), to_tensor(np.ascontiguousarray(flipped)))


def test_build_refuses_a_non_config_and_load_an_empty_or_shadowed_name(tmp_path, monkeypatch):
    for bad in (None, 123):
        with pytest.raises(InputError, match="preset name"):
            build(bad)
    known = "resnet-s, resnet-s-digits, vit-tiny"
    with pytest.raises(InputError, match=f"unknown checkpoint ''; shipped checkpoints: {known}"):
        load("")  # was ". is not a model folder"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "vit-tiny").mkdir()  # an unrelated folder of the same name must not hide the shipped one
    assert load("vit-tiny").config == PRESETS["vit-tiny"]
    with pytest.raises(InputError, match="not a model folder"):
        load(tmp_path / "vit-tiny")  # a path is a path


def test_evaluate_refuses_a_name_and_load_a_config_that_is_not_an_object(tmp_path):
    """`evaluate("vit-tiny")` was an AttributeError; a config.json holding a list read
    "'list' object has no attribute 'items'"."""
    from papershelf_vision.evaluate import evaluate

    with pytest.raises(InputError, match="evaluate needs a backbone module"):
        evaluate("vit-tiny")
    save_model(build("micro-vit"), tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text("[1, 2]")
    with pytest.raises(InputError, match=r"config\.json must hold a JSON object, got list"):
        load(tmp_path / "m")


def test_conv_stem_and_mean_pool_keep_the_token_grid_and_embed_the_patch_mean():
    base = dict(image_size=16, patch_size=4, dim=32, depth=2, heads=2)
    plain = build(BackboneConfig("vit", **base), seed=1).eval()
    conv = build(BackboneConfig("vit", **base, stem="conv", pool="mean"), seed=1).eval()
    x = torch.rand(3, 3, 16, 16)
    assert [f.shape for f in conv.features(x)] == [f.shape for f in plain.features(x)] == [(3, 17, 32)] * 2
    # log2(4) = 2 stride-2 3x3 convolutions, then the 1x1 projection to the width
    strides = [m.stride for m in conv.patch_embed if isinstance(m, torch.nn.Conv2d)]
    assert strides == [(2, 2), (2, 2), (1, 1)]
    last = conv.features(x)[-1]
    assert torch.allclose(conv(x), conv.norm(last[:, 1:]).mean(1))  # the CLS token is not the embedding
    assert not torch.allclose(conv(x), conv.norm(last[:, 0]))
    # a convolutional stem sees across patch borders: changing one pixel moves its neighbour patch too
    y = x.clone()
    y[:, :, 3, 3] += 0.5 * (1 - 2 * (y[:, :, 3, 3] > 0.5).float())
    for model, crosses in ((plain, False), (conv, True)):
        t0 = model.patch_embed((x - 0.5) / 0.25)[..., 0, 1]
        t1 = model.patch_embed((y - 0.5) / 0.25)[..., 0, 1]
        assert bool((t0 - t1).abs().max() > 1e-6) is crosses


def test_stem_and_pool_are_checked_and_old_model_folders_load(tmp_path):
    base = dict(image_size=16, patch_size=4, dim=32, depth=2, heads=2)
    with pytest.raises(InputError, match="stem"):
        BackboneConfig("vit", **base, stem="convnext")
    with pytest.raises(InputError, match="pool"):
        BackboneConfig("vit", **base, pool="max")
    with pytest.raises(InputError, match="power-of-two patch_size"):
        BackboneConfig("vit", image_size=18, patch_size=6, dim=32, depth=1, heads=2, stem="conv")
    # a folder written before stem/pool existed (no such keys) loads as the patch-stem, CLS model
    m = build(BackboneConfig("vit", **base), seed=2)
    save_model(m, tmp_path / "old")
    config = json.loads((tmp_path / "old" / "config.json").read_text())
    del config["stem"], config["pool"]
    (tmp_path / "old" / "config.json").write_text(json.dumps(config))
    x = torch.rand(2, 3, 16, 16)
    assert torch.equal(load(tmp_path / "old")(x), m.eval()(x))
