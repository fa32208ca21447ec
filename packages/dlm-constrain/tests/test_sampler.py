"""The decoding loop: validity by construction, completability after every step, baselines, bad input."""

import numpy as np
import pytest
import torch
from dlm_constrain import ConstrainedSampler, GenerationTrace, TokenDFA, log_partition
from hypothesis import given, settings
from hypothesis import strategies as st

from papershelf.errors import InputError

VOCAB = ["{", "}", "a", "1", ":", ",", '"', "1,", "<eos>"]
DFA = TokenDFA.from_json_schema(
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": 1, "maximum": 11}}}, VOCAB, eos_id=8
)


def _random_model(seed, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return lambda x: torch.randn(len(x), len(VOCAB), generator=g) * scale


def _completable(dfa, tokens):
    """Some accepted completion agrees with every decoded position (uniform elsewhere)."""
    n, V = len(tokens), dfa.vocab_size
    p = np.full((n, V), 1.0 / V)
    for i, t in enumerate(tokens):
        if t >= 0:
            p[i] = np.eye(V)[t]
    return log_partition(p, dfa) > -np.inf


@given(
    seed=st.integers(0, 10_000),
    steps=st.integers(1, 12),
    remasking=st.sampled_from(["confidence", "random"]),
    block=st.sampled_from([None, 3, 5, 12]),
    greedy=st.booleans(),
    method=st.sampled_from(["sequential", "scan", "bisect"]),
)
@settings(max_examples=25, deadline=None)
def test_remasking_never_reaches_a_dead_end(seed, steps, remasking, block, greedy, method):
    trace = GenerationTrace()
    sampler = ConstrainedSampler(
        _random_model(seed), DFA, steps, remasking, block, greedy=greedy, method=method
    )
    out = sampler.generate(12, generator=torch.Generator().manual_seed(seed), trace=trace)
    assert DFA.accepts(out.tolist())
    for state in trace.states:
        assert _completable(DFA, state)
    committed = sorted(i for c in trace.committed for i in c)
    assert committed == list(range(12))  # every position committed exactly once


def test_completability_check_can_fail():
    assert not _completable(DFA, [1] + [-1] * 11)  # a window starting with "}" has no completion


def test_validity_exact_vs_unconstrained_baselines():
    results = {}
    for strategy in ("exact", "unconstrained", "local", "dingo"):
        ok = 0
        for seed in range(25):
            s = ConstrainedSampler(_random_model(seed, 1.0), DFA, steps=4, block_size=6, strategy=strategy)
            ok += DFA.accepts(s.generate(12, generator=torch.Generator().manual_seed(seed)).tolist())
        results[strategy] = ok
    assert results["exact"] == 25
    assert results["unconstrained"] < 5  # random logits almost never produce a valid record
    assert results["unconstrained"] <= results["local"] < 25  # local masking helps but cannot guarantee


def test_dingo_prefix_validity_misses_the_length_but_exact_does_not():
    dfa = TokenDFA.from_regex("a{4}|b{6}", ["a", "b"])  # at length 4 only "aaaa" is accepted

    def likes_b(x):
        return torch.tensor([[0.0, 2.0]] * len(x))

    for strategy, ok in (("dingo", False), ("exact", True), ("unconstrained", False)):
        s = ConstrainedSampler(likes_b, dfa, steps=2, block_size=3, strategy=strategy, greedy=True)
        assert dfa.accepts(s.generate(4).tolist()) == ok, strategy


def test_marginal_confidence_and_temperature():
    s = ConstrainedSampler(_random_model(1), DFA, steps=3, confidence="marginal", temperature=0.5)
    assert DFA.accepts(s.generate(10, generator=torch.Generator().manual_seed(0)).tolist())


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"steps": 0}, "steps must be an integer in"),
        ({"remasking": "lowest"}, "remasking must be one of"),
        ({"block_size": 0}, "block_size"),
        ({"strategy": "magic"}, "strategy must be one of"),
        ({"temperature": 0.0}, "temperature"),
        ({"method": "fast"}, "method must be one of"),
    ],
)
def test_bad_sampler_arguments(kwargs, match):
    args = {"model_fn": _random_model(0), "automaton": DFA, "steps": 3, **kwargs}
    with pytest.raises(InputError, match=match):
        ConstrainedSampler(**args)


def test_model_output_mismatch_and_infeasible_length():
    bad = ConstrainedSampler(lambda x: torch.zeros(len(x), 5), DFA, steps=2)
    with pytest.raises(InputError, match="vocabulary mismatch: model_fn returned 5 logits"):
        bad.generate(8)
    nan = ConstrainedSampler(lambda x: torch.full((len(x), len(VOCAB)), float("nan")), DFA, steps=2)
    with pytest.raises(InputError, match="NaN logits"):
        nan.generate(8)
    with pytest.raises(InputError, match="accepts no sequence of length 3"):
        ConstrainedSampler(_random_model(0), DFA, steps=2).generate(3)


def test_dingo_aims_at_prefix_validity_even_when_the_plan_is_shared():
    # the automaton's cached plan is shared with DINGO's prefix automaton, whose accepting set differs:
    # a block of 2 positions cannot finish "(ab){3}", but "ab" keeps the prefix valid
    from dlm_constrain import inference
    from dlm_constrain.baselines import propose_dingo

    dfa = TokenDFA.from_regex("(ab){3}", ["a", "b", "<e>"], eos_id=2)
    inference._plan(dfa)  # cached, as after any earlier call
    p = torch.full((6, 3), 1 / 3, dtype=torch.float64)
    x, decoded = torch.full((6,), 3), torch.zeros(6, dtype=torch.bool)
    assert propose_dingo(p, dfa, x, decoded, (0, 2), True, None)[:2].tolist() == [0, 1]


def test_prompted_model_fn_plugs_a_tiny_mdm_and_an_hf_style_model():
    from types import SimpleNamespace

    from dlm_constrain.adapters import prompted_model_fn
    from dlm_constrain.model import MDMConfig, TinyMDM

    vocab = ["0", "1", "-", "<eos>", "<mask>"]
    dfa = TokenDFA.from_regex(r"\d{3}-\d", vocab, eos_id=3, special_ids=[4])
    torch.manual_seed(0)
    model = TinyMDM(MDMConfig(vocab=6, length=16, d_model=16, n_layers=1, d_ff=32)).eval()  # V' = 6 + mask
    seen = []

    def hf_style(ids):  # records its inputs, answers like a transformers model
        seen.append(ids.clone())
        return SimpleNamespace(logits=model(ids))

    fn = prompted_model_fn(hf_style, [0, 1, 2], mask_id=4, vocab_size=len(vocab))
    x = torch.full((6,), 4)
    logits = fn(x)
    assert logits.shape == (6, 5) and bool(torch.isinf(logits[:, 4]).all())
    assert seen[0].tolist() == [[0, 1, 2, 4, 4, 4, 4, 4, 4]]  # the prompt, then the masked window
    out = ConstrainedSampler(fn, dfa, steps=3, mask_id=4).generate(
        6, generator=torch.Generator().manual_seed(1)
    )
    assert dfa.accepts(out.tolist()) and 4 not in out.tolist()
    bare = prompted_model_fn(model, [0], mask_id=4, vocab_size=5)  # a plain tensor-returning model
    assert bare(x).shape == (6, 5)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"prompt_ids": [0, -1]}, "non-negative"),
        ({"prompt_ids": "ab"}, "sequence of token ids"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"mask_id": -2}, "mask_id"),
    ],
)
def test_prompted_model_fn_bad_arguments(kwargs, match):
    from dlm_constrain.adapters import prompted_model_fn

    args = {"prompt_ids": [0], "mask_id": 4, "vocab_size": 5, **kwargs}
    with pytest.raises(InputError, match=match):
        prompted_model_fn(lambda ids: torch.zeros(1, ids.shape[1], 5), **args)


def test_prompted_model_fn_rejects_wrong_logits():
    from dlm_constrain.adapters import prompted_model_fn

    narrow = prompted_model_fn(lambda ids: torch.zeros(1, ids.shape[1], 3), [0], mask_id=4, vocab_size=5)
    with pytest.raises(InputError, match="vocabulary mismatch"):
        narrow(torch.zeros(4, dtype=torch.long))
    flat = prompted_model_fn(lambda ids: torch.zeros(ids.shape[1], 5), [0], mask_id=4, vocab_size=5)
    with pytest.raises(InputError, match=r"shape \[1, 5, V\]"):
        flat(torch.zeros(4, dtype=torch.long))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_logits_decode_like_their_float32_values(dtype):
    # a real DLM returns bfloat16 logits; the exact proposal's numpy path raised a raw TypeError on them
    def model(cast):
        g = torch.Generator().manual_seed(4)
        return lambda x: cast((torch.randn(len(x), len(VOCAB), generator=g) * 3).to(dtype))

    outs = []
    for cast in (lambda t: t, lambda t: t.float()):
        s = ConstrainedSampler(model(cast), DFA, steps=4, block_size=6, method="bisect")
        outs.append(s.generate(12, generator=torch.Generator().manual_seed(0)))
    assert torch.equal(outs[0], outs[1])
    assert DFA.accepts(outs[0].tolist())


@pytest.mark.parametrize(
    "output,match",
    [
        (lambda x: None, "real array of logits"),
        (lambda x: "logits", "real array of logits"),
        (lambda x: torch.zeros(len(x), len(VOCAB), dtype=torch.complex64), "real-valued logits"),
        (lambda x: torch.ones(len(x), len(VOCAB), dtype=torch.bool), "real-valued logits"),
    ],
)
def test_model_fn_returning_no_real_logits_is_a_clear_error(output, match):
    with pytest.raises(InputError, match=match):
        ConstrainedSampler(output, DFA, steps=2).generate(8)


def test_generate_checks_its_generator():
    with pytest.raises(InputError, match=r"generator must be a torch\.Generator"):
        ConstrainedSampler(_random_model(0), DFA, steps=2).generate(8, generator=5)
