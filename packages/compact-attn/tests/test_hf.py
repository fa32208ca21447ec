"""transformers integration on the testbed model: chunked prefill over the paged cache."""

import pytest
import torch

papershelf_lm = pytest.importorskip("papershelf_lm")

from compact_attn import (  # noqa: E402
    AntidiagonalSelector,
    ChunkedPrefill,
    CompactAttention,
    DenseAttention,
    MeanPoolSelector,
    QuokaAttention,
)

from papershelf.errors import InputError  # noqa: E402


@pytest.fixture(scope="module")
def model_and_ids():
    from papershelf_lm.tasks import generate

    model, _ = papershelf_lm.load("tiny-s")
    s = generate("passkey", 300, seed=3, split="validation")
    return model, torch.from_numpy(s.ids)[None], s


def test_chunked_dense_and_full_budget_compact_equal_the_model(model_and_ids):
    model, ids, _ = model_and_ids
    previous = model.config._attn_implementation
    with torch.no_grad():
        full = model(input_ids=ids).logits
    for method in (DenseAttention(), CompactAttention(MeanPoolSelector(budget=1.0))):
        runner = ChunkedPrefill(model, method, chunk=96, page_size=32, allocation="shuffled")
        logits = runner.prefill(ids)
        assert (logits - full).abs().max().item() < 1e-3
        assert runner.calls == 4 * 4  # 4 chunks × 4 layers
    assert model.config._attn_implementation == previous


def test_sparse_prefill_reads_less_and_generates(model_and_ids):
    model, ids, s = model_and_ids
    prompt = ids[:, : s.prompt_length]
    for method in (CompactAttention(AntidiagonalSelector(budget=0.25, stride=4)), QuokaAttention(0.25)):
        runner = ChunkedPrefill(model, method, chunk=64, page_size=16)
        out = runner.generate(prompt, 3)
        assert out.shape == (1, 3)
        assert min(runner.fractions) < 0.6


def test_batch_of_two_is_refused(model_and_ids):
    model, ids, _ = model_and_ids
    with pytest.raises(InputError, match="batch size 1"):
        ChunkedPrefill(model, DenseAttention(), chunk=64).prefill(ids.expand(2, -1))


def test_teacher_forced_decoding_equals_the_whole_prefill_for_dense(model_and_ids):
    """prefill(prompt) + one token per step over the same cache = prefill(everything), per position."""
    model, ids, s = model_and_ids
    p = s.prompt_length
    whole = ChunkedPrefill(model, DenseAttention(), chunk=64, page_size=16).prefill(ids)
    runner = ChunkedPrefill(model, DenseAttention(), chunk=64, page_size=16)
    head = runner.prefill(ids[:, :p], extra_tokens=ids.shape[1] - p)
    tail = runner.continue_logits(ids[:, p:], p)
    torch.testing.assert_close(torch.cat([head, tail], 1), whole, atol=2e-4, rtol=1e-4)


def test_decode_steps_are_dense_by_default_and_through_the_method_on_request(model_and_ids):
    model, ids, s = model_and_ids
    prompt = ids[:, : s.prompt_length]
    method = CompactAttention(AntidiagonalSelector(budget=0.25, stride=4))
    runner = ChunkedPrefill(model, method, chunk=64, page_size=16)
    runner.generate(prompt, 3)
    n_prefill = len(runner.fractions) - 2 * len(model.model.layers)  # 2 decode steps × layers
    assert min(runner.fractions[:n_prefill]) < 0.6 and runner.fractions[n_prefill:] == [1.0] * (
        len(runner.fractions) - n_prefill
    )
    assert runner.method is method  # restored after the dense decode steps
    runner.generate(prompt, 3, decode="method")
    assert min(runner.fractions[n_prefill:]) < 1.0
    with pytest.raises(InputError, match="decode"):
        runner.generate(prompt, 3, decode="sparse")
    with pytest.raises(InputError, match="needs a prefill"):
        ChunkedPrefill(model, method).continue_logits(prompt, 0)


def test_hostile_ids_and_positions_are_refused_before_the_model_runs(model_and_ids):
    model, ids, _ = model_and_ids
    runner = ChunkedPrefill(model, DenseAttention(), chunk=64, page_size=16)
    vocab = model.config.vocab_size
    for bad, word in ((ids + vocab, "vocabulary"), (ids - vocab, "vocabulary"), (ids.float(), "integer")):
        with pytest.raises(InputError, match=word):  # was an IndexError / RuntimeError from the embedding
            runner.prefill(bad)
    runner.prefill(ids[:, :40], extra_tokens=8)
    with pytest.raises(InputError, match="start must be the 40 tokens"):  # was silently wrong positions
        runner.continue_logits(ids[:, 40:42], 30)
    with pytest.raises(InputError, match="vocabulary"):
        runner.continue_logits(ids[:, 40:42] + vocab, 40)
    with pytest.raises(InputError, match="attend"):  # was an AttributeError inside the model's forward
        ChunkedPrefill(model, None)


class FailsAtLayer(DenseAttention):
    """Dense attention that raises in one layer once armed (a user's method failing mid-forward)."""

    def __init__(self, layer):
        super().__init__()
        self.layer, self.armed = layer, False

    def attend(self, q, cache, layer, scaling):
        if self.armed and layer == self.layer:
            raise InputError("user method failed")
        return super().attend(q, cache, layer, scaling)


def test_a_forward_that_fails_part_way_leaves_no_layer_ahead_of_the_others(model_and_ids):
    """The cache append happens per layer: a failure in layer 2 left layers 0-1 one chunk ahead, and a
    later continue_logits read a cache whose layers disagreed."""
    model, ids, _ = model_and_ids
    method = FailsAtLayer(2)
    runner = ChunkedPrefill(model, DenseAttention(), chunk=64, page_size=16)
    want = runner.prefill(ids[:, :40], extra_tokens=8)
    want_tail = runner.continue_logits(ids[:, 40:43], 40)
    runner = ChunkedPrefill(model, method, chunk=64, page_size=16)
    runner.prefill(ids[:, :40], extra_tokens=8)
    method.armed = True
    with pytest.raises(InputError, match="user method failed"):
        runner.continue_logits(ids[:, 40:43], 40, decode="method")
    assert runner.cache.lengths == [40] * 4 and len(runner.cache.page_table) == 3  # back to the prefill
    method.armed = False
    torch.testing.assert_close(runner.continue_logits(ids[:, 40:43], 40, decode="method"), want_tail)
    method.armed = True
    with pytest.raises(InputError, match="user method failed"):
        runner.prefill(ids[:, :40])
    assert runner.cache is None and runner.fractions == []  # all or nothing
    with pytest.raises(InputError, match="needs a prefill"):
        runner.continue_logits(ids[:, 40:43], 40)
    method.armed = False
    torch.testing.assert_close(runner.prefill(ids[:, :40]), want)
