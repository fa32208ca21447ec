import json
import re

import numpy as np
import pytest
import torch
from papershelf_vision.evaluate import knn_accuracy, miou
from papershelf_vision.train import TrainConfig, cosine, dino_loss, loss_summary, train

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


def test_dino_loss_with_renderings_uses_only_cross_rendering_pairs():
    g = torch.Generator().manual_seed(1)
    b, k, n = 2, 6, 6
    s, t, c = torch.randn(n * b, k, generator=g), torch.randn(2 * b, k, generator=g), torch.zeros(1, k)
    source = (0, 1, 0, 1, 0, 1)
    terms = []
    for i in range(2):
        for v in range(n):
            if source[v] != source[i]:
                pt = torch.softmax(t[i * b : (i + 1) * b] / 0.04, -1)
                ls = torch.log_softmax(s[v * b : (v + 1) * b] / 0.1, -1)
                terms.append(float(-(pt * ls).sum(-1).mean()))
    assert len(terms) == 6  # teacher 0 with student 1, 3, 5; teacher 1 with 0, 2, 4
    got = float(dino_loss(s, t, c, n, 0.1, 0.04, source))
    assert got == pytest.approx(sum(terms) / len(terms), rel=1e-5)
    assert got != pytest.approx(float(dino_loss(s, t, c, n, 0.1, 0.04)), rel=1e-3)


def test_info_nce_matches_a_direct_reading_of_nt_xent():
    from papershelf_vision.train import info_nce

    g = torch.Generator().manual_seed(2)
    b, tau = 3, 0.2
    z = torch.nn.functional.normalize(torch.randn(2 * b, 5, generator=g), dim=-1).double()
    total = 0.0
    for i in range(2 * b):
        pos = (i + b) % (2 * b)
        logits = torch.tensor([float(z[i] @ z[j]) / tau for j in range(2 * b) if j != i], dtype=torch.float64)
        target = [j for j in range(2 * b) if j != i].index(pos)
        total += float(-torch.log_softmax(logits, 0)[target])
    loss, _ = info_nce(z, tau)
    assert float(loss) == pytest.approx(total / (2 * b), rel=1e-9)
    same = torch.cat([z[:b], z[:b]])  # each row's positive is itself: every row finds it
    assert info_nce(same, tau)[1] == 1.0 and float(info_nce(same, tau)[0]) < float(loss)


def _trains_resumes_and_exports_the_student(config: TrainConfig, tmp_path) -> list[dict]:
    """Train ``config`` straight and in two sittings: same student; the exported model is the student.
    Returns the straight run's log records."""
    from safetensors.torch import load_file

    assert train(config, tmp_path / "full", quiet=True)["finished"]
    train(config, tmp_path / "part", max_minutes=1e-9, quiet=True)
    train(config, tmp_path / "part", quiet=True)
    a = torch.load(tmp_path / "full" / "state.pt", weights_only=False)
    b = torch.load(tmp_path / "part" / "state.pt", weights_only=False)
    assert all(torch.equal(a["student"][k], b["student"][k]) for k in a["student"])
    exported = load_file(tmp_path / "full" / "model" / "model.safetensors")
    student = {k.removeprefix("backbone."): v for k, v in a["student"].items() if k.startswith("backbone.")}
    assert exported.keys() == student.keys() and all(torch.equal(exported[k], student[k]) for k in student)
    return [json.loads(line) for line in (tmp_path / "full" / "log.jsonl").read_text().splitlines()]


def _method(tmp_path) -> str:
    return json.loads((tmp_path / "full" / "model" / "config.json").read_text())["method"]


def test_infonce_objective_trains_resumes_and_exports_the_student(tmp_path):
    config = TrainConfig(preset="micro-resnet", objective="infonce", views="rerender", **MICRO)
    log = _trains_resumes_and_exports_the_student(config, tmp_path)
    assert all(0.0 <= r["positive_top1"] <= 1.0 for r in log if "loss" in r)
    windows = loss_summary(tmp_path / "full" / "log.jsonl", every=2)["windows"]
    assert len(windows) == 2 and all("positive_top1" in w and "teacher_entropy" not in w for w in windows)
    assert _method(tmp_path) == "simclr-infonce-rerender"


def test_infonce_with_the_dense_term_and_digits_trains_resumes_and_exports_the_student(tmp_path):
    config = TrainConfig(preset="micro-resnet", objective="infonce", views="rerender", dense_weight=0.5,
                         dense_tokens=4, **{**MICRO, "mixture": (1.0, 1.0, 0.0, 1.0)})  # fmt: skip
    log = _trains_resumes_and_exports_the_student(config, tmp_path)
    steps = [r for r in log if "loss" in r]
    assert steps and all(0.0 <= r["dense_top1"] <= 1.0 and r["dense_loss"] > 0 for r in steps)
    assert _method(tmp_path) == "simclr-infonce-dense-rerender-digits"


def test_init_from_starts_the_student_from_a_saved_backbone_of_the_same_architecture(tmp_path):
    from papershelf_vision.models import build, save_model
    from safetensors.torch import load_file

    start = build("micro-resnet", seed=5)
    save_model(start, tmp_path / "start", {"preset": "micro-resnet"})
    config = TrainConfig(preset="micro-resnet", objective="infonce", views="rerender",
                         init_from=str(tmp_path / "start"), **MICRO)  # fmt: skip
    train(config, tmp_path / "run", max_minutes=1e-9, quiet=True)  # exports the step-0 student
    exported = load_file(tmp_path / "run" / "model" / "model.safetensors")
    assert all(torch.equal(exported[k], v) for k, v in start.state_dict().items())
    seed0 = build("micro-resnet", seed=0).state_dict()
    assert not torch.equal(exported["stem.0.weight"], seed0["stem.0.weight"])
    save_model(build("micro-vit"), tmp_path / "vit", {"preset": "micro-vit"})
    other = TrainConfig(preset="micro-resnet", init_from=str(tmp_path / "vit"), **MICRO)
    with pytest.raises(InputError, match="is not a micro-resnet backbone"):
        train(other, tmp_path / "bad", quiet=True)
    missing = TrainConfig(preset="micro-resnet", init_from=str(tmp_path / "nothing-here"), **MICRO)
    with pytest.raises(InputError, match="nothing-here"):
        train(missing, tmp_path / "bad", quiet=True)
    assert not (tmp_path / "bad").exists()  # refused before the run folder is made
    # resuming does not read init_from again: the state holds the weights, and the folder may be gone
    train(config, tmp_path / "run", max_minutes=1e-9, quiet=True)
    import shutil

    shutil.rmtree(tmp_path / "start")
    assert train(config, tmp_path / "run", quiet=True)["finished"]


def test_token_correspondence_finds_the_same_source_point_in_the_other_crop():
    from papershelf_vision.train import random_resized_crop, token_correspondence

    # a source whose channels are its own normalised (x, y): a crop's pixel holds its source point
    s, out = 24, 8
    c = (torch.arange(s, dtype=torch.float64) + 0.5) * 2 / s - 1
    yy, xx = torch.meshgrid(c, c, indexing="ij")
    src = torch.stack([xx, yy, xx * 0]).expand(5, 3, s, s).contiguous()
    g = torch.Generator().manual_seed(3)
    va, ta = random_resized_crop(src, out, (0.3, 1.0), g, with_theta=True)
    vb, tb = random_resized_crop(src, out, (0.3, 1.0), g, with_theta=True)
    where, inside = token_correspondence(ta, tb, out)
    at_b = torch.nn.functional.grid_sample(vb, where.view(5, 1, -1, 2), align_corners=False)[:, :2, 0]
    at_a = va[:, :2].flatten(2)
    assert inside.any() and not inside.all()
    # bilinear crops of a linear ramp are exact away from the reflected border
    interior = inside & (where.abs() <= 1 - 2 / out).all(-1)
    assert interior.sum() > 10
    assert torch.allclose(at_b.transpose(1, 2)[interior], at_a.transpose(1, 2)[interior], atol=1e-9)
    # a strided map whose token j sits on pixel 4j (a ResNet's stage 3: centre 0.5 / 4 of its cell)
    va, ta = random_resized_crop(src, 32, (0.3, 1.0), g, with_theta=True)
    vb, tb = random_resized_crop(src, 32, (0.3, 1.0), g, with_theta=True)
    where, inside = token_correspondence(ta, tb, 8, centre=0.125)
    at_b = torch.nn.functional.grid_sample(vb[:, :, ::4, ::4], where.view(5, 1, -1, 2), align_corners=False)
    at_a = va[:, :2, ::4, ::4].flatten(2)
    # away from the crop's edge and from the source's: view b's neighbouring tokens (4 crop pixels apart,
    # 0.25·|theta_b| in source units) must lie inside the source's pixel centres, where the ramp is linear
    reach = 1 - 1 / s - 0.25 * torch.diagonal(tb[:, :, :2], dim1=1, dim2=2).abs()  # (5, 2): x, y
    interior = (
        inside & (where.abs() <= 1 - 2 / 8).all(-1) & (at_a.transpose(1, 2).abs() <= reach[:, None]).all(-1)
    )
    assert interior.sum() > 10
    assert torch.allclose(at_b[:, :2, 0].transpose(1, 2)[interior], at_a.transpose(1, 2)[interior], atol=1e-9)


def test_token_centre_follows_the_architecture():
    from papershelf_vision.models import build
    from papershelf_vision.train import token_centre

    # ViT patch tokens sit mid-patch; a ResNet's stage-3 token j on pixel 4j (stride-2 convs centred on 2j)
    assert token_centre(build("micro-vit")) == 0.5 and token_centre(build("micro-resnet")) == 0.125


def test_dense_info_nce_matches_a_direct_reading():
    from papershelf_vision.train import dense_info_nce

    g = torch.Generator().manual_seed(4)
    b, d, G, n, tau = 3, 5, 2, 3, 0.3
    za = torch.nn.functional.normalize(torch.randn(b, d, G, G, generator=g, dtype=torch.float64), dim=1)
    zb = torch.nn.functional.normalize(torch.randn(b, d, G, G, generator=g, dtype=torch.float64), dim=1)
    where = torch.rand(b, G * G, 2, generator=g, dtype=torch.float64) * 2 - 1
    inside = torch.tensor([[1, 1, 0, 1], [0, 0, 0, 0], [1, 0, 1, 1]], dtype=torch.bool)
    loss, hit = dense_info_nce(za, zb, where, inside, n, tau, torch.Generator().manual_seed(9))
    # direct: image 1 has no point inside view b; images 0 and 2 have exactly n = 3, so all are drawn
    pairs = []
    for i in range(b):
        for t in range(G * G):
            if inside[i, t]:
                x, y = float(where[i, t, 0]), float(where[i, t, 1])
                px, py = (x + 1) * G / 2 - 0.5, (y + 1) * G / 2 - 0.5  # align_corners=False pixel coords
                acc = torch.zeros(d, dtype=torch.float64)
                for yi in range(G):
                    for xi in range(G):
                        w = max(0.0, 1 - abs(px - xi)) * max(0.0, 1 - abs(py - yi))
                        acc += w * zb[i, :, yi, xi]
                pairs.append((za[i, :, t // G, t % G], acc / acc.norm()))
    q = torch.stack([p[0] for p in pairs])
    k = torch.stack([p[1] for p in pairs])
    sim = q @ k.T / tau
    direct = 0.0
    for i in range(len(q)):
        direct += -float(torch.log_softmax(sim[i], 0)[i]) - float(torch.log_softmax(sim[:, i], 0)[i])
    assert float(loss) == pytest.approx(direct / (2 * len(q)), rel=1e-9)
    assert hit == pytest.approx(float((sim.argmax(-1) == torch.arange(len(q))).double().mean()))
    # more points inside than drawn: each image draws its own n uniformly (top-n of one uniform per token)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    every = torch.ones_like(inside)
    loss2, _ = dense_info_nce(za, zb, where, every, 2, tau, g1)
    pick = torch.rand(b, G * G, generator=g2, dtype=torch.float32).topk(2, dim=-1).indices
    sub = torch.zeros_like(inside).scatter_(1, pick, True)
    assert float(loss2) == pytest.approx(float(dense_info_nce(za, zb, where, sub, 2, tau, g2)[0]), rel=1e-9)
    assert len({tuple(row) for row in pick.sort(-1).values.tolist()}) > 1  # not the same tokens everywhere
    none_inside = torch.zeros_like(inside)
    assert dense_info_nce(za, zb, where, none_inside, n, tau, g)[1] == 0.0


def test_distill_loss_matches_a_direct_reading():
    from papershelf_vision.models import build
    from papershelf_vision.train import DistillHead, distill_loss, embedding_and_grid

    torch.manual_seed(0)
    student, teacher = build("micro-vit", seed=1), build("micro-resnet", seed=2)
    head = DistillHead(32, 16, 32, 32, 16)  # micro-vit: 32-d, 4x4 grid; micro-resnet: 32-d, 4x4 map of 16
    views = [torch.rand(3, 3, 16, 16), torch.rand(3, 3, 16, 16)]
    loss, stats = distill_loss(student, head, teacher, views, dense=0.5)
    cos = torch.nn.functional.cosine_similarity
    t_emb, t_maps = embedding_and_grid(teacher, torch.cat(views))
    t_emb, t_map = t_emb - t_emb.mean(0), t_maps[2] - t_maps[2].mean(dim=(0, 2, 3), keepdim=True)
    glob, grid = [], []
    for v in range(2):
        s_emb, s_maps = embedding_and_grid(student, views[v])
        for u in range(2):
            glob.append(1 - cos(head.embedding(s_emb), t_emb[3 * u : 3 * u + 3], dim=-1).mean())
        grid.append(1 - cos(head.grid(s_maps[0]), t_map[3 * v : 3 * v + 3], dim=1).mean())
    expected = torch.stack(glob).mean() + 0.5 * torch.stack(grid).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert stats["global_cos"] == pytest.approx(1 - torch.stack(glob).mean().item(), abs=1e-4)
    loss.backward()  # the frozen teacher gets no gradient, the student and both heads do
    assert all(p.grad is None for p in teacher.parameters())
    assert all(p.grad is not None for p in [*student.parameters(), *head.parameters()] if p.requires_grad)


def test_distill_objective_trains_from_a_frozen_checkpoint_and_exports_the_student(tmp_path):
    from papershelf_vision.models import build, save_model

    save_model(build("micro-resnet", seed=3), tmp_path / "teacher")
    config = TrainConfig(preset="micro-vit", objective="distill", distill_from=str(tmp_path / "teacher"),
                         views="rerender", **MICRO)  # fmt: skip
    log = _trains_resumes_and_exports_the_student(config, tmp_path)
    assert all(-1.0 <= r["cross_view_cos"] <= 1.0 for r in log if "loss" in r)
    assert _method(tmp_path) == "distill-teacher-rerender"
    with pytest.raises(InputError, match="unknown checkpoint 'no-such'"):
        train(TrainConfig(preset="micro-vit", objective="distill", distill_from="no-such", **MICRO),
              tmp_path / "bad", quiet=True)  # fmt: skip


def test_crops_without_flips_are_the_same_crops_never_mirrored():
    from papershelf_vision.train import crops

    config = TrainConfig(preset="micro-resnet", **MICRO)
    renderings = [torch.rand(6, 3, 24, 24, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    with_flips, (t0, t1) = crops(config, renderings, step=5, with_theta=True)
    config.flips = False
    without, (u0, u1) = crops(config, renderings, step=5, with_theta=True)
    thetas = torch.cat([t0, t1]), torch.cat([u0, u1])
    assert (thetas[0][:, 0, 0] < 0).any()  # some crops were mirrored with flips on
    assert (thetas[1][:, 0, 0] > 0).all()  # none without
    # the same draws otherwise: identical boxes up to the sign of the x scale, and so identical views
    # wherever no flip was drawn (every view, global and local, shares one generator stream)
    assert torch.equal(thetas[0].abs(), thetas[1].abs())
    unflipped = thetas[0][: len(t0), 0, 0] > 0
    assert torch.equal(with_flips[0][unflipped], without[0][unflipped])
    assert len(without) == len(with_flips)


def test_digit_sources_are_train_split_digits_and_three_weights_draw_what_they_drew():
    from papershelf_vision import data as D
    from papershelf_vision.train import source_batch, source_plan

    config = TrainConfig(preset="micro-resnet", views="rerender", **{**MICRO, "mixture": (0, 0, 0, 1)})
    renderings = source_batch(config, step=3)
    assert torch.equal(renderings[0], renderings[1])  # a digit has one appearance
    train_x, test_x = (
        torch.from_numpy(D.digits(s, 24)[0]).permute(0, 3, 1, 2) / 255 for s in ("train", "test")
    )
    for img in renderings[0]:
        assert (train_x - img).abs().flatten(1).amax(1).min() < 1e-6  # one of the 1000 train digits
        assert (test_x - img).abs().flatten(1).amax(1).min() > 0.1  # never a test digit
    # a 3-weight mixture is stored with a zero digits weight and draws the kinds numpy's three-way
    # choice draws, so runs and checkpoints from before the digits option keep their data stream
    three = TrainConfig(preset="micro-resnet", **{**MICRO, "batch_size": 64, "mixture": (0.45, 0.4, 0.15)})
    assert three.mixture == (0.45, 0.4, 0.15, 0.0)
    for step in range(3):
        rng = np.random.default_rng([three.seed, step])
        assert source_plan(three, step)[0] == list(rng.choice(3, size=64, p=np.array([0.45, 0.4, 0.15])))


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("lr", "abc", "lr must be a number"),
        ("lr", float("nan"), "lr must be finite"),
        ("infonce_temp", 0.0, "infonce_temp"),
        ("steps", "x", "steps must be an integer"),
        ("momentum", 2.0, "momentum must be in"),
        ("global_scale", (0.9, 0.2), "global_scale"),
        ("local_scale", (0.5,), "local_scale must be a list of 2"),
        ("mixture", "abc", "mixture must be a list of 3 or 4"),
        ("mixture", (0.0, 0.0, 0.0), "mixture"),
        ("mixture", (1.0, 1.0, 1.0, 1.0, 1.0), "mixture must be a list of 3 or 4"),
        ("mixture", (1.0, 1.0, 1.0, -0.5), "mixture must be 3 or 4 non-negative"),
        (
            "mixture",
            (1.0, -1.0, 1.0),
            re.escape("non-negative weights (scenes, objects, photos[, digits]), got (1.0, -1.0, 1.0)"),
        ),
        ("mixture", (1.0, 1.0, 1.0, float("nan")), "mixture\\[3\\] must be finite"),
        ("head_bn", "yes", "head_bn"),
        ("flips", 1, "flips must be true or false"),
        ("objective", "byol", "objective"),
        ("distill_from", "", "distill_from"),
        ("distill_dense", -1.0, "distill_dense"),
        ("dense_weight", -0.5, "dense_weight"),
        ("dense_tokens", 0, "dense_tokens"),
        ("dense_weight", 1.0, "dense_weight needs objective='infonce'"),
        ("init_from", 3, "init_from must name"),
        ("seed", 2**40, "seed must be an integer in"),
        ("lr", 10**400, "lr must be finite"),
        ("local_size", 12, "local_size must be a positive multiple of 8"),
        ("source_size", 4, "source_size"),
        ("probe_n", 1, "probe_n"),
    ],
)
def test_a_bad_config_field_is_one_error_naming_it(field, value, message):
    with pytest.raises(InputError, match=message):
        TrainConfig(preset="micro-resnet", **{**MICRO, field: value})


def test_resume_compares_config_values_not_their_spelling(tmp_path):
    config = TrainConfig(preset="micro-resnet", **{**MICRO, "mixture": (1.0, 0.0, 0.0)})
    train(config, tmp_path, quiet=True, max_minutes=1e-9)
    state = torch.load(tmp_path / "state.pt", weights_only=False)
    state["config"]["mixture"] = [1, 0, 0]  # as a run from before validation normalised it would hold
    state["config"].pop("objective")  # a field added since: its default applies
    torch.save(state, tmp_path / "state.pt")
    assert train(config, tmp_path, quiet=True)["finished"]


def test_a_config_file_that_is_not_an_object_is_refused(tmp_path):
    from papershelf_vision.train import config_from_file

    bad = tmp_path / "config.json"
    bad.write_text("[1, 2]")
    with pytest.raises(InputError, match="JSON object"):
        config_from_file("micro-resnet", str(bad))


def test_infonce_needs_two_images_per_batch():
    with pytest.raises(InputError, match="batch_size must be at least 2"):
        TrainConfig(preset="micro-resnet", objective="infonce", **{**MICRO, "batch_size": 1})


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


def test_token_labels_take_each_patch_majority_and_upsample_back():
    from papershelf_vision.evaluate import to_pixels, token_labels

    masks = np.zeros((1, 4, 4), np.int64)
    masks[0, :2, :2] = [[3, 3], [3, 0]]  # top-left patch: 3 of 4 pixels are class 3
    masks[0, 2:, 2:] = [[1, 0], [0, 0]]  # bottom-right: background wins
    labels = token_labels(masks, 2, 2)
    assert labels.tolist() == [[[3, 0], [0, 0]]]
    assert to_pixels(labels, (4, 4))[0, :2, :2].tolist() == [[3, 3], [3, 3]]


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


def test_ship_refuses_bad_names_and_runs_without_writing_anything(tmp_path, monkeypatch):
    from papershelf_vision import models
    from papershelf_vision.train import ship

    shelf = tmp_path / "shelf"
    shelf.mkdir()
    monkeypatch.setattr(models, "CHECKPOINTS", shelf)
    run = tmp_path / "run"
    train(TrainConfig(preset="micro-resnet", **MICRO), run, quiet=True)
    for bad in (" ", "a/b", "x\ny", ".hidden"):
        with pytest.raises(InputError, match="checkpoint name"):
            ship(run, bad)
    (run / "log.jsonl").write_text("garbage{\n")
    with pytest.raises(InputError, match="log"):
        ship(run, "ok")
    assert list(shelf.iterdir()) == []  # nothing half-written


def test_a_state_file_that_would_run_code_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (open, (str(tmp_path / "pwned"), "w"))

    torch.save({"config": Evil()}, tmp_path / "state.pt")
    with pytest.raises(InputError, match=r"state\.pt"):
        train(TrainConfig(preset="micro-resnet", **MICRO), tmp_path, quiet=True)
    assert not (tmp_path / "pwned").exists()


def test_rerender_views_share_geometry_and_crop_each_rendering():
    from papershelf_vision import data as D
    from papershelf_vision.train import crops, source_batch, source_plan

    cfg = TrainConfig(preset="resnet-s", **MICRO)
    re = TrainConfig(preset="resnet-s", views="rerender", mixture=(1.0, 0.0, 0.0), **MICRO)
    one, two = source_batch(cfg, 3), source_batch(re, 3)
    assert len(one) == 1 and len(two) == 2
    a, b = two
    assert not torch.equal(a, b)  # other appearance ...
    kinds, seeds, looks = source_plan(re, 3)
    assert kinds == [0] * len(seeds) and len(looks) == 2 and None not in looks
    for sd in seeds:  # ... same geometry: the masks of both renderings agree
        own = [(lk + 2 * sd) % 2**63 for lk in looks]
        s0, s1 = (D.scene(sd, re.source_size, n_objects=(1, 5), look_seed=o) for o in own)
        assert np.array_equal(s0.instance, s1.instance) and np.array_equal(s0.labels, s1.labels)
    assert all(torch.equal(x, y) for x, y in zip(crops(re, [a, b], 3, local=False), crops(re, [a, b], 3)[:2]))
    mixed, only_a, only_b = crops(re, [a, b], 3), crops(re, [a, a], 3), crops(re, [b, b], 3)
    for i, view in enumerate(mixed):  # view i is cropped from rendering i mod 2, same crop boxes
        assert torch.equal(view, (only_a if i % 2 == 0 else only_b)[i])
    with pytest.raises(InputError, match="views"):
        TrainConfig(preset="resnet-s", views="both")


@pytest.mark.parametrize("change", ["student", "config", "step", "log"])
def test_a_readable_state_with_wrong_contents_is_one_error(tmp_path, change):
    train(TrainConfig(preset="micro-resnet", **MICRO), tmp_path, quiet=True, max_minutes=1e-9)
    state = torch.load(tmp_path / "state.pt", weights_only=True)
    if change == "log":
        with open(tmp_path / "log.jsonl", "a") as handle:
            handle.write("garbage{\n")
    else:
        state[change] = {"student": {}, "config": [1, 2], "step": "x"}[change]
        torch.save(state, tmp_path / "state.pt")
    with pytest.raises(InputError, match=r"state\.pt"):
        train(TrainConfig(preset="micro-resnet", **MICRO), tmp_path, quiet=True)


def test_config_file_bytes_and_preset_mismatch_are_refused(tmp_path):
    from papershelf_vision.train import config_from_file

    binary = tmp_path / "c.json"
    binary.write_bytes(b"\xff\xfe\x00junk")
    with pytest.raises(InputError, match="--config"):
        config_from_file("micro-resnet", str(binary))
    other = tmp_path / "d.json"
    other.write_text('{"preset": "vit-tiny"}')
    with pytest.raises(InputError, match="names preset 'vit-tiny'"):
        config_from_file("micro-resnet", str(other))


def test_a_bad_value_in_a_config_file_names_the_flag_and_the_file(tmp_path):
    from papershelf_vision.train import config_from_file

    for text, field in (
        ('{"views": "mosaic"}', "views"),
        ('{"lr": "fast"}', "lr"),
        ('{"batch_size": 0}', "batch_size"),
    ):
        bad = tmp_path / "c.json"
        bad.write_text(text)
        with pytest.raises(InputError, match=rf"^--config {re.escape(str(bad))}: .*{field}"):
            config_from_file("micro-resnet", str(bad))


def test_dino_with_a_batchnorm_stem_keeps_the_teacher_in_train_mode_and_resumes_exactly(
    tmp_path, monkeypatch
):
    """The first checkpoint's probe put DINO's exported teacher backbone in eval mode for good, so a
    BatchNorm stem (``stem="conv"``) normalised the teacher's views with its initial running statistics."""
    from papershelf_vision.presets import PRESETS, BackboneConfig

    conv = BackboneConfig(
        "vit", image_size=16, patch_size=4, dim=32, depth=2, heads=2, stem="conv", pool="mean"
    )
    monkeypatch.setitem(PRESETS, "micro-vit-conv", conv)
    config = TrainConfig(preset="micro-vit-conv", **MICRO)
    train(config, tmp_path / "full", quiet=True)
    train(config, tmp_path / "part", max_minutes=1e-9, quiet=True)
    train(config, tmp_path / "part", quiet=True)
    a = torch.load(tmp_path / "full" / "state.pt", weights_only=False)
    b = torch.load(tmp_path / "part" / "state.pt", weights_only=False)
    tracked = [k for k in a["teacher"] if k.endswith("num_batches_tracked")]
    assert len(tracked) == 2 and all(int(a["teacher"][k]) == MICRO["steps"] for k in tracked)
    assert all(torch.equal(a["teacher"][k], b["teacher"][k]) for k in a["teacher"])  # running stats too
