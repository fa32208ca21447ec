"""Anchor calibration: the pooled probabilities and the proposal coverage equal direct computations, a
proposal that covers the cache covers all the mass, and the chosen anchors are layer 0 plus the layers of
lowest coverage."""

import pytest
import torch
from prism_attn import PrismConfig, reference
from prism_attn.calibrate import calibrate_anchors, pooled_probabilities, proposal_coverage

from papershelf.errors import InputError


def test_pooled_probabilities_equal_a_loop_over_heads_and_queries():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 6, 8, generator=g)  # the last 6 of 20 positions
    k = torch.randn(1, 2, 20, 8, generator=g)
    p = pooled_probabilities(q, k, 0.3, queries=4)
    assert p.shape == (4, 2, 20)
    for row, t in enumerate(range(2, 6)):  # the last 4 query positions
        pos = 14 + t
        for g_ in range(2):
            want = sum(
                torch.softmax(q[0, h, t].double() @ k[0, g_, : pos + 1].double().T * 0.3, -1)
                for h in (2 * g_, 2 * g_ + 1)
            )
            torch.testing.assert_close(p[row, g_, : pos + 1], want, rtol=0, atol=1e-12)
            assert float(p[row, g_, pos + 1 :].abs().sum()) == 0.0


def test_proposal_coverage_equals_the_reference_proposal():
    g = torch.Generator().manual_seed(1)
    p_prev = torch.rand(3, 2, 300, generator=g, dtype=torch.float64) ** 8
    p = torch.rand(3, 2, 300, generator=g, dtype=torch.float64) ** 8
    cfg = PrismConfig(kappa=24, block=4, min_blocks=0, sink=4, local=16, radius=1, max_candidates=2.0)
    prev = p_prev.topk(24, -1).indices.sort(-1).values
    cand = reference.propose(prev, 300, radius=1, block=4, sink=4, local=16, cap=48)
    inside = sum(float(p[b, h, cand[b, h][cand[b, h] >= 0]].sum()) for b in range(3) for h in range(2))
    assert proposal_coverage(p_prev, p, 24, cfg) == pytest.approx(inside / float(p.sum()), abs=1e-12)
    # a proposal dilated over the whole cache, with no cap, holds all the mass
    wide = PrismConfig(kappa=24, block=4, min_blocks=0, radius=300, max_candidates=None)
    assert proposal_coverage(p_prev, p, 24, wide) == pytest.approx(1.0, abs=1e-12)


def test_calibrated_anchors_are_layer_zero_and_the_least_covered_layers():
    lm = pytest.importorskip("papershelf_lm")
    from papershelf_lm.tasks import generate

    model, _ = lm.load("tiny-s")
    previous = model.config._attn_implementation
    ids = torch.from_numpy(generate("passkey", 300, seed=5, split="validation").ids)[None]
    cal = calibrate_anchors(model, [ids, ids[:, :200]], PrismConfig(kappa=32), anchors=3, queries=8)
    assert model.config._attn_implementation == previous  # restored
    layers = model.config.num_hidden_layers
    assert cal.coverage[0] is None and len(cal.coverage) == layers and cal.kappa == [32, 32]
    assert all(0.0 < c <= 1.0 + 1e-12 for c in cal.coverage[1:])
    worst = sorted(range(1, layers), key=lambda layer: cal.coverage[layer])[:2]
    assert cal.anchor_layers == tuple(sorted({0, *worst}))
    assert calibrate_anchors(model, ids, PrismConfig(kappa=32), anchors=1).anchor_layers == (0,)
    # the anchors plug into the config
    PrismConfig(kappa=32, anchor_layers=cal.anchor_layers)


@pytest.mark.parametrize(
    "kw, word",
    [
        ({"anchors": 0}, "anchors"),
        ({"anchors": 99}, "anchors"),
        ({"texts": []}, "empty"),
        ({"texts": torch.zeros(1, 40)}, "integer token ids"),
        ({"texts": torch.zeros(40, dtype=torch.long)}, "integer token ids"),
        ({"texts": torch.zeros(1, 8, dtype=torch.long)}, "more than queries"),
        ({"queries": 0}, "queries"),
    ],
)
def test_bad_calibration_input(kw, word):
    lm = pytest.importorskip("papershelf_lm")
    model, _ = lm.load("tiny-s")
    args = {"texts": torch.zeros(1, 40, dtype=torch.long), "anchors": 2, "queries": 8, **kw}
    with pytest.raises(InputError, match=word):
        calibrate_anchors(model, args.pop("texts"), **args)
    with pytest.raises(InputError, match="PreTrainedModel"):
        calibrate_anchors(object(), torch.zeros(1, 40, dtype=torch.long))


def test_needle_accuracy_calibrates_each_prism_and_static_config_on_each_prompt(monkeypatch):
    lm = pytest.importorskip("papershelf_lm")
    from papershelf_lm.tasks import generate
    from prism_attn import calibrate
    from prism_attn.experiments import needle_accuracy

    model, _ = lm.load("tiny-s")
    calls, real = [], calibrate.calibrate_anchors

    def spy(model, texts, config, *, anchors):
        calls.append((texts.shape[1], config.method, anchors))
        return real(model, texts, config, anchors=anchors)

    monkeypatch.setattr(calibrate, "calibrate_anchors", spy)
    configs = {m: PrismConfig(method=m, kappa=16) for m in ("dense", "prism", "static", "quest")}
    acc = needle_accuracy(model, 256, configs, samples=2, task="passkey", seed=0, prompt_anchors=2)
    assert set(acc) == set(configs) and all(0.0 <= v <= 1.0 for v in acc.values())
    prompts = [generate("passkey", 256, s, split="validation").prompt_length for s in (0, 1)]
    assert calls == [(p, m, 2) for p in prompts for m in ("prism", "static")]  # per sample, per config
