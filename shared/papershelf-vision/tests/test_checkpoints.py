"""The shipped checkpoints load offline and beat their architecture at random init on a small probe."""

import pytest
from papershelf_vision import data as D
from papershelf_vision.evaluate import embed, knn_accuracy
from papershelf_vision.models import build, checkpoint_names, load

SHIPPED = ("resnet-s", "resnet-s-digits", "vit-tiny", "vit-tiny-ssl")


def test_every_shipped_checkpoint_is_listed():
    assert set(SHIPPED) <= set(checkpoint_names())


def test_shipped_checkpoints_fit_the_30_mb_budget():
    from papershelf_vision.models import CHECKPOINTS

    total = sum(f.stat().st_size for f in CHECKPOINTS.rglob("*") if f.is_file())
    assert total <= 30 * 10**6, total


_random_init_scores: dict = {}


def random_init_score(config, probe_name: str, score) -> float:
    """``score`` of ``config`` at random init (seed 0), once per architecture and probe: ``vit-tiny`` and
    ``vit-tiny-ssl`` share theirs."""
    key = (repr(config), probe_name)
    if key not in _random_init_scores:
        _random_init_scores[key] = score(build(config, seed=0).eval())
    return _random_init_scores[key]


@pytest.fixture(scope="module")
def probe():
    # 300 object views of the 10 held-out classes (never drawn in pretraining); 200 form the k-NN bank
    x, y = D.objects(300, D.HELDOUT_CLASSES, 32, seed=7)
    return x, y


@pytest.mark.parametrize("name", SHIPPED)
def test_checkpoints_load_offline_with_documented_shapes_and_trained_weights(name):
    import torch

    model = load(name)
    random = build(model.config, seed=0).eval()
    x = torch.rand(2, 3, 32, 32)
    feats = model.features(x)
    assert len(feats) == 4 and all(torch.isfinite(f).all() for f in feats)
    assert model(x).shape == (2, model.embed_dim)
    ours, init = model.state_dict(), random.state_dict()
    assert any(not torch.equal(ours[k], init[k]) for k in ours)


# The bar of issue 20 on held-out classes -- the shipped checkpoints beat random init -- is met by all four:
# resnet-s (InfoNCE on re-rendered pairs, then with the dense term), resnet-s-digits (the same stage 2 with
# the digits train split among its sources), vit-tiny (conv stem, distilled from the shipped resnet-s) and
# vit-tiny-ssl (conv stem, InfoNCE on re-rendered pairs) (README, "Results").
@pytest.mark.parametrize("name", SHIPPED)
def test_checkpoint_beats_random_init_on_a_small_fixed_probe(name, probe):
    x, y = probe
    trained = load(name)

    def score(model):
        f = embed(model, x)
        return knn_accuracy(f[:200], y[:200], f[200:], y[200:], k=10)

    ours, base = score(trained), random_init_score(trained.config, "held-out", score)
    # 100 queries: a 10-point margin is ~3 binomial standard deviations at these accuracies
    assert ours >= base + 0.10, (ours, base)


@pytest.mark.parametrize(
    "name",
    [
        "vit-tiny",
        pytest.param(
            "resnet-s",
            marks=pytest.mark.xfail(
                strict=True,
                reason="resnet-s: -0.9 k-NN points against its random init on digits, not +8 (README)",
            ),
        ),
        # small probe: 0.585 vs 0.390 at random init; the README's full eval (1000-image bank) has it
        # 6.1 points *below* random init (0.632 vs 0.693), where the random ViT gains most from the bank
        "vit-tiny-ssl",
    ],
)
def test_checkpoint_beats_random_init_on_a_digits_knn_probe(name):
    # 300 training digits form the bank, 200 test digits the queries (fixed split, no randomness)
    xtr, ytr = D.digits("train", 32)
    xte, yte = D.digits("test", 32)
    trained = load(name)

    def score(model):
        return knn_accuracy(embed(model, xtr[:300]), ytr[:300], embed(model, xte[:200]), yte[:200], k=10)

    ours, base = score(trained), random_init_score(trained.config, "digits", score)
    # 200 queries: a 8-point margin is ~2.5 binomial standard deviations at these accuracies
    assert ours >= base + 0.08, (ours, base)


def test_the_digits_checkpoint_halves_the_random_init_error_on_the_full_digits_split():
    """The README's reading of the digits bar, on eval's own split (1000 train / 797 test digits): the
    linear probe's and k-NN's test error at most half the random init's. ``resnet-s-digits`` saw the 1000
    train digits in pretraining (no labels), never the test digits. Its small k-NN probe above is not
    used: with a 300-digit bank it gains 6.5 points, under that test's fixed 8."""
    from papershelf_vision.evaluate import linear_probe_accuracy

    xtr, ytr = D.digits("train", 32)
    xte, yte = D.digits("test", 32)
    trained = load("resnet-s-digits")

    def errors(model):
        ftr, fte = embed(model, xtr), embed(model, xte)
        return 1 - linear_probe_accuracy(ftr, ytr, fte, yte), 1 - knn_accuracy(ftr, ytr, fte, yte, k=10)

    ours, base = errors(trained), random_init_score(trained.config, "digits-full", errors)
    assert ours[0] <= base[0] / 2 and ours[1] <= base[1] / 2, (ours, base)


def test_readme_results_rows_are_the_shipped_eval_files():
    """Every score in the README's rows for the shipped checkpoints and their random inits is the
    corresponding number of ``eval.json`` / ``eval_random_init.json`` beside the weights, to 3 places."""
    import json
    import re
    from pathlib import Path

    from papershelf_vision.models import CHECKPOINTS

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    keys = ["heldout_linear", "heldout_knn", "digits_linear", "digits_knn", "seg_miou"]
    checked = set()
    for line in readme.splitlines():
        m = re.match(r"\| `([\w-]+)` (pretrained \(shipped|random init) [^|]*\|[^|]*\|(.*)\|\s*$", line)
        if not m or m.group(1) not in SHIPPED:
            continue
        name, which = m.group(1), m.group(2)
        file, label = (
            ("eval.json", "pretrained")
            if which.startswith("pre")
            else ("eval_random_init.json", "random-init")
        )
        scores = json.loads((CHECKPOINTS / name / file).read_text())["results"][label]
        cells = [c.strip().strip("*") for c in m.group(3).split("|")]
        assert cells == [f"{scores[k]:.3f}" for k in keys], (name, which)
        checked.add((name, label))
    assert checked == {(n, lab) for n in SHIPPED for lab in ("pretrained", "random-init")}
