import json

import numpy as np
import pytest
import torch
from papershelf_vision.evaluate import knn_accuracy, miou
from papershelf_vision.train import TrainConfig, cosine, dino_loss, train

from papershelf.errors import InputError

MICRO = dict(steps=4, batch_size=4, n_local=2, global_size=16, local_size=8, source_size=24, warmup=2,
             out_dim=32, hidden_dim=16, bottleneck_dim=8, probe_n=30, log_every=1)  # fmt: skip


def test_dino_loss_matches_a_direct_reading_of_the_equation():
    g = torch.Generator().manual_seed(0)
    b, k, n = 3, 5, 4
    s, t, c = (
        torch.randn(n * b, k, generator=g),
        torch.randn(2 * b, k, generator=g),
        torch.randn(1, k, generator=g),
    )
    total, pairs = 0.0, 0
    for i in range(2):
        for v in range(n):
            if v == i:
                continue
            for r in range(b):
                pt = torch.softmax((t[i * b + r] - c[0]) / 0.04, -1).double()
                ls = torch.log_softmax(s[v * b + r] / 0.1, -1).double()
                total += float(-(pt * ls).sum()) / b
            pairs += 1
    assert float(dino_loss(s, t, c, n, 0.1, 0.04)) == pytest.approx(total / pairs, rel=1e-5)


def test_cosine_schedule_endpoints():
    assert cosine(0, 100, 1.0, 0.0, warmup=10) == pytest.approx(0.1)
    assert cosine(10, 100, 1.0, 0.0, warmup=10) == pytest.approx(1.0)
    assert cosine(100, 100, 1.0, 0.0, warmup=10) == pytest.approx(0.0)


def test_knn_and_miou_known_answers():
    bank = np.array([[1.0, 0], [0.9, 0.1], [0, 1.0], [0.1, 0.9]])
    assert (
        knn_accuracy(
            bank, np.array([0, 0, 1, 1]), np.array([[1.0, 0.05], [0.05, 1.0]]), np.array([0, 1]), k=2
        )
        == 1.0
    )
    truth = np.array([[0, 0], [1, 1]])
    assert miou(truth, truth) == 1.0
    assert miou(np.array([[0, 0], [0, 1]]), truth) == pytest.approx((2 / 3 + 1 / 2) / 2)


def test_training_resumes_to_the_same_weights_as_an_uninterrupted_run(tmp_path):
    config = TrainConfig(preset="micro-vit", **MICRO)
    full = train(config, tmp_path / "full", quiet=True)
    assert full["finished"] and (tmp_path / "full" / "best" / "model.safetensors").is_file()
    stopped = train(config, tmp_path / "part", max_minutes=1e-9, quiet=True)  # stops at once, checkpointed
    assert stopped["step"] == 0 and not stopped["finished"]
    resumed = train(config, tmp_path / "part", quiet=True)
    assert resumed["step"] == 4 and resumed["finished"]
    a = torch.load(tmp_path / "full" / "state.pt", weights_only=False)
    b = torch.load(tmp_path / "part" / "state.pt", weights_only=False)
    assert all(torch.equal(a["teacher"][k], b["teacher"][k]) for k in a["teacher"])
    assert torch.equal(a["center"], b["center"])
    assert any(not torch.equal(a["teacher"][k], a["student"][k]) for k in a["teacher"])  # it trained
    log = [json.loads(line) for line in (tmp_path / "full" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "loss" in r] == [1, 2, 3, 4]
    assert all(np.isfinite(r["loss"]) for r in log if "loss" in r)


def test_resume_with_another_config_is_refused(tmp_path):
    train(TrainConfig(preset="micro-resnet", **MICRO), tmp_path, quiet=True, max_minutes=1e-9)
    with pytest.raises(InputError, match="different config"):
        train(TrainConfig(preset="micro-resnet", **{**MICRO, "lr": 1.0}), tmp_path, quiet=True)


@pytest.mark.parametrize("content", [b"", b"not a torch file", "foreign"])
def test_a_corrupt_or_foreign_state_file_is_refused_and_kept(tmp_path, content):
    from papershelf_vision.train import ship

    state = tmp_path / "state.pt"
    if content == "foreign":
        torch.save({"step": 3}, state)
    else:
        state.write_bytes(content)
    before = state.read_bytes()
    with pytest.raises(InputError, match=r"state\.pt"):
        train(TrainConfig(preset="micro-resnet", **MICRO), tmp_path, quiet=True)
    (tmp_path / "best").mkdir()
    for name in ("model.safetensors", "config.json"):
        (tmp_path / "best" / name).write_text("x")
    with pytest.raises(InputError, match=r"state\.pt"):
        ship(tmp_path, "never-shipped")
    assert state.read_bytes() == before  # nothing overwritten


def test_rerender_views_share_geometry_and_crop_each_rendering():
    from papershelf_vision.train import crops, source_batch

    cfg = TrainConfig(preset="resnet-s", **MICRO)
    re = TrainConfig(preset="resnet-s", views="rerender", **MICRO)
    one, two = source_batch(cfg, 3), source_batch(re, 3)
    assert len(one) == 1 and len(two) == 2
    assert torch.equal(one[0], two[0])  # the first rendering does not depend on the mode
    a, b = two
    mixed, only_a, only_b = crops(re, [a, b], 3), crops(re, [a, a], 3), crops(re, [b, b], 3)
    for i, view in enumerate(mixed):  # view i is cropped from rendering i mod 2, same crop boxes
        assert torch.equal(view, (only_a if i % 2 == 0 else only_b)[i])
    with pytest.raises(InputError, match="views"):
        TrainConfig(preset="resnet-s", views="both")
