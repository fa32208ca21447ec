"""Block-union tables equal the explicit union, are minimal, and reject bad input."""

import pytest
import torch
from compact_attn import block_union_tables, own_blocks, tables_from_lists
from compact_attn.reference import union_tables_reference
from hypothesis import given, settings
from hypothesis import strategies as st

from papershelf.errors import InputError


@st.composite
def mask_cases(draw):
    kv = draw(st.integers(1, 3))
    group = draw(st.integers(1, 4))
    qb = draw(st.integers(1, 4))
    kb = draw(st.integers(1, 12))
    bits = draw(st.lists(st.booleans(), min_size=kv * group * qb * kb, max_size=kv * group * qb * kb))
    masks = torch.tensor(bits, dtype=torch.bool).view(kv * group, qb, kb)
    own = sorted(draw(st.sets(st.integers(0, kb - 1), max_size=3)))
    return masks, group, own


@settings(max_examples=100, deadline=None)
@given(mask_cases())
def test_tables_equal_the_explicit_union(case):
    masks, group, own = case
    assert block_union_tables(masks, group, own=own).as_lists() == union_tables_reference(masks, group, own)


@settings(max_examples=100, deadline=None)
@given(mask_cases(), st.data())
def test_tables_are_minimal(case, data):
    masks, group, own = case
    tables = block_union_tables(masks, group, own=own).as_lists()
    _, _, Kb = masks.shape
    for g, row in enumerate(tables):
        heads = masks[g * group : (g + 1) * group]
        # every entry is needed: removing it drops a selected (head, Q-block) block or an own block
        for j in row:
            assert j in own or bool(heads[:, :, j].any())
        # any valid table (one containing every selected block and the own blocks) contains this one
        extra = data.draw(st.sets(st.integers(0, Kb - 1), max_size=Kb))
        needed = {j for j in range(Kb) if bool(heads[:, :, j].any())} | set(own)
        valid = needed | extra
        assert set(row) <= valid and len(row) <= len(valid)
        assert set(row) == needed


def test_gqa_heads_with_disjoint_masks_give_the_union():
    masks = torch.zeros(4, 3, 10, dtype=torch.bool)
    masks[0, 0, [1, 2]] = True
    masks[1, 2, [5]] = True
    masks[2, 1, [0, 9]] = True
    masks[3, 0, [4]] = True
    t = block_union_tables(masks, 2, own=range(9, 10))
    assert t.as_lists() == [[1, 2, 5, 9], [0, 4, 9]]
    assert t.blocks_read() == 7


def test_physical_ids_follow_the_page_table():
    masks = torch.zeros(2, 1, 4, dtype=torch.bool)
    masks[0, 0, 1] = masks[1, 0, 2] = True
    t = block_union_tables(masks, 1, own=[3], page_table=torch.tensor([7, 4, 0, 2]), num_pages=8)
    assert t.row(0, physical=True).tolist() == [4, 2] and t.row(1, physical=True).tolist() == [0, 2]


def test_own_blocks_of_an_unaligned_chunk():
    assert list(own_blocks(0, 64, 16)) == [0, 1, 2, 3]
    assert list(own_blocks(40, 30, 16)) == [2, 3, 4]  # tokens 40..69 touch blocks 2, 3, 4


@pytest.mark.parametrize(
    "call, word",
    [
        (lambda: block_union_tables(torch.zeros(3, 1, 4, dtype=torch.bool), 2), "group_size"),
        (lambda: block_union_tables(torch.zeros(2, 1, 4), 1), "dtype"),
        (lambda: block_union_tables(torch.zeros(2, 4, dtype=torch.bool), 1), "shape"),
        (lambda: block_union_tables(torch.zeros(2, 1, 4, dtype=torch.bool), 1, own=[4]), "own"),
        (
            lambda: block_union_tables(
                torch.ones(1, 1, 4, dtype=torch.bool), 1, page_table=torch.arange(4) + 5, num_pages=6
            ),
            "outside the cache",
        ),
        (lambda: tables_from_lists([[3, 1]]), "sorted"),
        (lambda: own_blocks(0, 0, 16), "chunk"),
    ],
)
def test_bad_input(call, word):
    with pytest.raises(InputError, match=word):
        call()
