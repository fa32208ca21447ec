"""Instances: validation with clear errors, JSON/NPZ round trips, generators."""

import json

import numpy as np
import pytest
from fair_class_matching import Instance, load
from fair_class_matching.data import (
    FAMILIES,
    PARTITIONS,
    block_classes,
    family,
    random_gnp,
    ride_sharing,
    upper_triangular,
)

from papershelf.errors import InputError


def test_validation_errors():
    with pytest.raises(InputError, match="unknown agent 5"):
        Instance.from_lists([0, 1], [[0], [1, 5]])
    with pytest.raises(InputError, match="unknown agent -1"):
        Instance.from_lists([0, 1], [[-1]])
    with pytest.raises(InputError, match="positive"):
        Instance.from_lists([0, 1], [[0], [1]], values=[1.0, -2.0])
    with pytest.raises(InputError, match="positive"):
        Instance.from_lists([0, 1], [[0]], values=[0.0])
    with pytest.raises(InputError, match="finite"):
        Instance.from_lists([0, 1], [[0]], values=[float("nan")])
    with pytest.raises(InputError, match="one entry per item"):
        Instance.from_lists([0, 1], [[0]], values=[1.0, 2.0])
    with pytest.raises(InputError, match=r"class\(es\) \[1\] have no agents"):
        Instance.from_lists([0, 2, 2], [[0]])
    with pytest.raises(InputError, match="no agents"):
        Instance.from_lists([0, 0], [], n_classes=2)
    with pytest.raises(InputError, match="non-empty"):
        Instance.from_lists([], [])
    with pytest.raises(InputError, match="negative label"):
        Instance.from_lists([0, -1], [])
    with pytest.raises(InputError, match="twice"):
        Instance.from_lists([0, 1], [[1, 1]])
    with pytest.raises(InputError, match="integers"):
        Instance.from_lists([0, 1], [[0.5]])
    with pytest.raises(InputError, match="integers"):
        Instance.from_lists(["a", "b"], [])
    with pytest.raises(InputError, match="class_names"):
        Instance.from_lists([0, 1], [], class_names=["x"], n_classes=2)
    for bad in (-1, 2.5, "ab"):  # from a hand-edited instance file: one error, not a TypeError
        with pytest.raises(InputError, match="class_names must be a list"):
            Instance.from_lists([0, 1], [], class_names=bad)


@pytest.mark.parametrize("suffix", [".json", ".npz"])
def test_round_trip(tmp_path, suffix):
    inst = Instance.from_lists([0, 1, 1, 2], [[0, 3], [], [1, 2, 3]], values=[1.0, 2.5, 1.0])
    path = tmp_path / f"inst{suffix}"
    inst.save(path)
    back = load(path)
    assert back.agent_class.tolist() == inst.agent_class.tolist()
    assert [a.tolist() for a in back.items] == [a.tolist() for a in inst.items]
    assert back.values.tolist() == inst.values.tolist()


def test_malformed_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(InputError, match="JSON object"):
        load(bad)
    bad.write_text(json.dumps({"agent_class": [0, 1]}))
    with pytest.raises(InputError, match="lacks 'items'"):
        load(bad)
    bad.write_text(json.dumps({"agent_class": [0, 1], "items": [[0], 3]}))
    with pytest.raises(InputError, match="item 1 must be a list"):
        load(bad)
    bad.write_text(json.dumps({"format": "something-else", "agent_class": [0], "items": []}))
    with pytest.raises(InputError, match="not a fair-class-matching instance"):
        load(bad)
    npz = tmp_path / "bad.npz"
    npz.write_bytes(b"garbage")
    with pytest.raises(InputError, match=r"not a valid \.npz"):
        load(npz)
    np.savez(npz, agent_class=np.array([0, 1]), indptr=np.array([0, 3]), indices=np.array([0]))
    with pytest.raises(InputError, match="indptr"):
        load(npz)
    np.savez(npz, agent_class=np.array([0, 1]))
    with pytest.raises(InputError, match="lacks"):
        load(npz)
    with pytest.raises(InputError, match="does not exist"):
        load(tmp_path / "missing.json")
    txt = tmp_path / "inst.txt"
    txt.write_text("0 1")
    with pytest.raises(InputError, match="file type"):
        load(txt)


def test_upper_triangular_and_partitions():
    for part in PARTITIONS:
        inst = upper_triangular(12, 3, partition=part, seed=1)
        assert inst.n_items == 12 and inst.items[5].tolist() == list(range(5, 12))
        assert sorted(inst.class_sizes.tolist()) == [4, 4, 4]
    assert upper_triangular(6, 2, partition="blocks").agent_class.tolist() == [0, 0, 0, 1, 1, 1]
    assert upper_triangular(6, 2, partition="reversed").agent_class.tolist() == [1, 1, 1, 0, 0, 0]


def test_generators_seeded_and_imbalanced():
    a, b = (
        random_gnp(40, 30, 0.1, k=3, imbalance=0.3, seed=4),
        random_gnp(40, 30, 0.1, k=3, imbalance=0.3, seed=4),
    )
    assert [x.tolist() for x in a.items] == [x.tolist() for x in b.items]
    sizes = a.class_sizes
    assert sizes[0] > sizes[1] > sizes[2] >= 1
    blk = block_classes(3, 5, 20, seed=0)
    assert blk.n_agents == 15 and blk.n_items == 20
    ride = ride_sharing(30, 25, k=3, fares=True, seed=2)
    assert ride.n_items == 25 and not ride.unit_values and ride.values.min() >= 1.0
    for fam in FAMILIES:
        inst = family(fam, 16, seed=3)
        assert inst.n_agents >= 2 and inst.n_classes >= 2
    with pytest.raises(InputError, match="family"):
        family("nope", 10)
    with pytest.raises(InputError, match="p must be"):
        random_gnp(10, 10, 1.5)
    with pytest.raises(InputError, match="partition"):
        upper_triangular(10, 2, partition="zigzag")
