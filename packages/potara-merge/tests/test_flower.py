"""FedAvg on Flower's simulation engine equals the in-process loop: same adapters, same metered bytes."""

import pytest
import torch
from potara_merge.data import ClientData
from potara_merge.federated import base_mlp, fedavg, get_state, lora_model, state_bytes

from papershelf.testing import assert_close

pytest.importorskip("flwr.simulation", reason="the flower extra (flwr[simulation]) is not installed")


def _client(cid, n, seed=0):
    g = torch.Generator().manual_seed(seed + cid)
    X = torch.rand(n, 64, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    return ClientData(cid, 0, X, y, X[:5], y[:5], X, y)


def test_flower_fedavg_equals_the_in_process_loop_and_meters_the_same_bytes():
    from potara_merge.flower import fedavg_flower

    model = lora_model(base_mlp(64, 16, 10), rank=2, alpha=4.0)
    init = get_state(model)
    clients = [_client(0, 20), _client(1, 35), _client(2, 12)]  # unequal sizes: the weighting matters
    kw = dict(rounds=2, local_steps=3, lr=1e-2, batch=8, seed=5)
    seen: dict[str, list] = {"loop": [], "flower": []}

    def hook(engine):
        return lambda r, w, locs: seen[engine].append((r, w, locs))

    loop = fedavg(model, clients, init, on_round=hook("loop"), **kw)
    flower = fedavg_flower(model, clients, init, on_round=hook("flower"), **kw)
    assert sorted(flower.checkpoints) == sorted(loop.checkpoints) == [0, 1, 2]
    for r in (1, 2):
        for k in init:  # Flower's weighted average sums in another order: float rounding only
            assert_close(flower.checkpoints[r][k], loop.checkpoints[r][k], rtol=1e-5, atol=1e-6)
    assert not torch.equal(flower.checkpoints[2]["0.lora_B.weight"], init["0.lora_B.weight"])
    size = state_bytes(init)
    assert flower.bytes_at == loop.bytes_at == {r: 2 * r * len(clients) * size for r in range(3)}
    assert flower.meter.up_messages == flower.meter.down_messages == 2 * len(clients)
    assert loop.wire_bytes is None  # the loop serialises nothing
    assert flower.wire_bytes > flower.meter.total  # Flower's .npy buffers carry a header per tensor
    # on_round (Ditto's and APFL's hook) saw the same rounds, globals and client states, in client order
    assert [r for r, _, _ in seen["flower"]] == [r for r, _, _ in seen["loop"]] == [1, 2]
    for (_, w_f, locs_f), (_, w_l, locs_l) in zip(seen["flower"], seen["loop"], strict=True):
        for s_f, s_l in zip([w_f, *locs_f], [w_l, *locs_l], strict=True):
            for k in init:
                assert_close(s_f[k], s_l[k], rtol=1e-5, atol=1e-6)


def test_flower_engine_refuses_bad_arguments_before_starting_ray():
    from potara_merge.flower import fedavg_flower

    from papershelf.errors import InputError

    model = lora_model(base_mlp(64, 16, 10), rank=2, alpha=4.0)
    init = get_state(model)
    clients = [_client(0, 20), _client(1, 0)]
    with pytest.raises(InputError, match="rounds"):
        fedavg_flower(model, clients[:1], init, rounds=0)
    with pytest.raises(InputError, match="cpus_per_client"):
        fedavg_flower(model, clients[:1], init, rounds=1, cpus_per_client=0)
    with pytest.raises(InputError, match="client 1 has no training data"):
        fedavg_flower(model, clients, init, rounds=1)
