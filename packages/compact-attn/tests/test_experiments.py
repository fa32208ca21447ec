"""The evaluation's scorer: attention-mass recall and output error per method, against the float64
reference (the README's recall/error tables are built from these numbers)."""

import pytest
import torch
from compact_attn.data import planted_chunk
from compact_attn.experiments import methods_for, recall_and_error
from compact_attn.reference import attention_mass, row_block_token_mask, table_token_mask


def test_recall_equals_the_reference_attention_mass_of_what_each_method_reads():
    N, T, B = 256, 32, 16
    q, k, v, _ = planted_chunk(N, T, block=B, needles=2, seed=6)
    methods = methods_for(0.25, block=B, stride=4, n_queries=8)
    res = recall_and_error(q, k, v, methods, block=B)
    for name in ("compact-antidiag", "compact-meanpool"):
        mask = table_token_mask(methods[name].last_tables.as_lists(), 8, T, N, N - T, B)
        assert res[name]["recall"] == pytest.approx(attention_mass(q, k, mask), abs=1e-5)
    idx = methods["quoka"].last_index
    mask = torch.zeros(8, T, N, dtype=torch.bool)
    for h in range(8):
        mask[h, :, idx[h // 4]] = True
    assert res["quoka"]["recall"] == pytest.approx(attention_mass(q, k, mask), abs=1e-5)
    sel = methods["per-head-antidiag"].selector
    rows = row_block_token_mask(sel(q, k, offset=N - T, block=B), T, N, N - T, B)
    assert res["per-head-antidiag"]["recall"] == pytest.approx(attention_mass(q, k, rows), abs=1e-5)
    assert all(0 < r["recall"] < 1 and r["rel_error"] > 1e-4 for r in res.values())  # 25%: truly sparse


def test_full_budget_recalls_everything_with_no_error():
    q, k, v, _ = planted_chunk(256, 32, block=16, seed=7)
    res = recall_and_error(q, k, v, methods_for(1.0, block=16, stride=4, n_queries=8), block=16)
    # (not per-head: its rows keep only the blocks at or above the group's threshold, so even a 100%
    # budget union leaves each row sparse; only the union tables and QUOKA read everything)
    for name in ("compact-antidiag", "compact-meanpool", "quoka"):
        r = res[name]
        assert r["recall"] == pytest.approx(1.0, abs=1e-5), name
        assert r["rel_error"] < 1e-5, name
