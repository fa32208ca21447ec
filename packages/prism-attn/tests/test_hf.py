"""transformers integration on the testbed model: prefill dense, every decode step through Prism."""

import pytest
import torch

papershelf_lm = pytest.importorskip("papershelf_lm")

from prism_attn import PrismConfig, disable, enable  # noqa: E402
from prism_attn.hf import MODEL_TYPES  # noqa: E402


def test_enable_decodes_through_prism_and_disable_restores():
    from papershelf_lm.tasks import generate

    model, _ = papershelf_lm.load("tiny-s")
    s = generate("passkey", 200, seed=3, split="validation")
    prompt = torch.from_numpy(s.ids[: s.prompt_length])[None]
    previous = model.config._attn_implementation
    dense = papershelf_lm.greedy_generate(model, prompt, 3)
    # full budget: every decode step goes through Prism and reproduces dense decoding exactly
    with enable(model, PrismConfig(kappa=100_000)) as handle:
        assert torch.equal(papershelf_lm.greedy_generate(model, prompt, 3), dense)
        assert handle.calls["decode"] == 2 * 4 and handle.calls["prefill"] == 4
    assert model.config._attn_implementation == previous
    # a real budget: sparse decode steps, fewer KV bytes than dense
    handle = enable(model, PrismConfig(kappa=32, block=4))
    out = papershelf_lm.greedy_generate(model, prompt, 2)
    assert out.shape == (1, 2) and handle.calls["decode"] == 4
    n = prompt.shape[1]
    assert 0 < handle.decoder.bytes_read < 4 * 2 * (n + 1) * 2 * 32 * 4
    # a second, longer prompt through the same handle: the block metadata and selections kept from the first
    # cache are dropped at its prefill, so it decodes exactly as a fresh handle does
    s2 = generate("passkey", 260, seed=4, split="validation")
    prompt2 = torch.from_numpy(s2.ids[: s2.prompt_length])[None]
    again = papershelf_lm.greedy_generate(model, prompt2, 2)
    kept = {layer: b.meta.clone() for layer, b in handle.decoder._bounds.items()}
    assert kept  # the global term kept per-layer metadata
    disable(model)
    with enable(model, PrismConfig(kappa=32, block=4)) as fresh:
        assert torch.equal(papershelf_lm.greedy_generate(model, prompt2, 2), again)
    for layer, meta in kept.items():
        assert torch.equal(meta, fresh.decoder._bounds[layer].meta)
    disable(model)
    disable(model)  # a second disable is a no-op
    assert model.config._attn_implementation == previous
    assert torch.equal(papershelf_lm.greedy_generate(model, prompt, 3), dense)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_every_accepted_model_type_decodes_through_prism(model_type):
    """`eval` accepts exactly ``hf.MODEL_TYPES``: each decodes every step through Prism, and at a full
    budget exactly as dense (a tiny randomly initialised model of each type)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    sizes = dict(vocab_size=50, hidden_size=64, intermediate_size=96, num_hidden_layers=2)
    cfg = AutoConfig.for_model(model_type, **sizes, num_attention_heads=4, num_key_value_heads=2)
    cfg.bos_token_id = cfg.eos_token_id = cfg.pad_token_id = 0
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    ids = torch.randint(1, 50, (1, 40))
    with torch.no_grad():
        dense = model.generate(ids, max_new_tokens=3, do_sample=False, min_new_tokens=3)
        with enable(model, PrismConfig(kappa=100_000)) as handle:
            sparse = model.generate(ids, max_new_tokens=3, do_sample=False, min_new_tokens=3)
    assert torch.equal(dense, sparse)
    assert handle.calls["decode"] == 2 * 2 and handle.calls["dense_fallback"] == 0
    # calibration on the prompt runs in every accepted family's prefill (whatever mask it passes)
    with torch.no_grad(), enable(model, PrismConfig(kappa=8), calibrate_anchors=2) as handle:
        model.generate(ids, max_new_tokens=2, do_sample=False, min_new_tokens=2)
    assert handle.calibration is not None and handle.calibration.anchor_layers[0] == 0


def test_enable_refuses_a_non_model_and_a_rejected_call_leaves_the_model_as_it_was():
    """A bad config used to disable the handle already in place before it was rejected; a non-model
    raised AttributeError."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from papershelf.errors import InputError

    for bad in ("model", None, torch.nn.Linear(2, 2)):
        with pytest.raises(InputError, match="model must be a transformers PreTrainedModel"):
            enable(bad)
    sizes = dict(vocab_size=50, hidden_size=64, intermediate_size=96, num_hidden_layers=2)
    cfg = AutoConfig.for_model("llama", **sizes, num_attention_heads=4, num_key_value_heads=2)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    handle = enable(model, PrismConfig(kappa=8))
    name = model.config._attn_implementation
    for config, backend in (({"kappa": 4}, "auto"), (PrismConfig(), "cuda-magic")):
        with pytest.raises(InputError):
            enable(model, config, backend=backend)
        assert model.config._attn_implementation == name  # still decoding through the first handle
    with torch.no_grad():
        model.generate(torch.randint(1, 50, (1, 20)), max_new_tokens=2, do_sample=False, min_new_tokens=2)
    assert handle.calls["decode"] == 2
    disable(model)
    assert model.config._attn_implementation == "sdpa"


def test_enable_refuses_an_untested_model_family_unless_asked():
    """``enable`` accepted any transformers model although only ``MODEL_TYPES`` are tested."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from papershelf.errors import InputError

    sizes = dict(vocab_size=50, hidden_size=64, intermediate_size=96, num_hidden_layers=2)
    cfg = AutoConfig.for_model("phi3", **sizes, num_attention_heads=4, num_key_value_heads=2)
    cfg.bos_token_id = cfg.eos_token_id = cfg.pad_token_id = 0
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    with pytest.raises(InputError, match=r"'phi3' model.*any_model_type=True"):
        enable(model)
    assert model.config._attn_implementation == "sdpa"
    with enable(model, PrismConfig(kappa=100_000), any_model_type=True) as handle:
        with torch.no_grad():
            model.generate(torch.randint(1, 50, (1, 20)), max_new_tokens=2, do_sample=False, min_new_tokens=2)
    assert handle.calls["decode"] == 2 * 1


def test_enable_calibrates_each_prompts_anchors_in_its_own_prefill():
    from papershelf_lm.tasks import generate
    from prism_attn.calibrate import calibrate_anchors

    model, _ = papershelf_lm.load("tiny-s")
    cfg = PrismConfig(kappa=32, block=4)
    prompts = [
        torch.from_numpy(s.ids[: s.prompt_length])[None]
        for s in (generate("passkey", n, seed=k, split="validation") for n, k in ((300, 5), (400, 6)))
    ]
    handle = enable(model, cfg, calibrate_anchors=3)
    assert handle.calibration is None
    choices = []
    for prompt in prompts:  # one handle, two prompts: each prefill picks its own anchors
        choices.append((prompt, papershelf_lm.greedy_generate(model, prompt, 3), handle.calibration))
        assert handle.decoder.config.anchor_layers == handle.calibration.anchor_layers
    short = prompts[0][:, :20]  # too short to calibrate on: the previous anchors stay
    papershelf_lm.greedy_generate(model, short, 2)
    assert handle.decoder.config.anchor_layers == choices[-1][2].anchor_layers
    disable(model)
    for prompt, got, calibration in choices:
        # the same choice and coverage as a separate calibration pass over the prompt
        alone = calibrate_anchors(model, prompt, cfg, anchors=3)
        assert calibration.anchor_layers == alone.anchor_layers
        assert calibration.coverage[1:] == pytest.approx(alone.coverage[1:], abs=1e-12)
        assert calibration.kappa == alone.kappa == [cfg.budget(prompt.shape[1])]
        # and the same tokens as decoding with those anchors given explicitly
        with enable(model, PrismConfig(kappa=32, block=4, anchor_layers=alone.anchor_layers)):
            assert torch.equal(papershelf_lm.greedy_generate(model, prompt, 3), got)


@pytest.mark.parametrize(
    "config, anchors, word",
    [
        (PrismConfig(), 0, "calibrate_anchors"),
        (PrismConfig(), 5, "calibrate_anchors"),  # tiny-s has 4 layers
        (PrismConfig(method="quest"), 2, "method 'prism' or 'static'"),
        (PrismConfig(anchor_layers=(0, 2)), 2, "leave config.anchor_layers None"),
    ],
)
def test_enable_refuses_bad_calibration_and_leaves_the_model_as_it_was(config, anchors, word):
    from papershelf.errors import InputError

    model, _ = papershelf_lm.load("tiny-s")
    previous = model.config._attn_implementation
    with pytest.raises(InputError, match=word):
        enable(model, config, calibrate_anchors=anchors)
    assert model.config._attn_implementation == previous
