"""The simulation: exact byte metering, partitions, Potara per client, bad input naming the client."""

import numpy as np
import pytest
import torch
from potara_merge.baselines import APFL, Ditto
from potara_merge.data import ClientData, digits_federation, parse_skew
from potara_merge.federated import CommMeter, base_mlp, fedavg, get_state, lora_model, state_bytes
from potara_merge.potara import personalise

from papershelf.errors import InputError
from papershelf.testing import assert_close


def _client(cid, n, task=0, seed=0):
    g = torch.Generator().manual_seed(seed + cid)
    X = torch.rand(n, 64, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    return ClientData(cid, task, X, y, X[:5], y[:5], X, y)


def test_byte_meter_equals_rounds_times_clients_times_adapter_size():
    model = lora_model(base_mlp(64, 16, 10), rank=2, alpha=4.0)
    init = get_state(model)
    clients = [_client(i, 20) for i in range(3)]
    R = 4
    run = fedavg(model, clients, init, rounds=R, local_steps=1)
    size = state_bytes(init)
    assert size == 4 * (2 * 64 + 16 * 2 + 2 * 16 + 16 * 2 + 2 * 16 + 10 * 2)
    assert run.meter.up_bytes == R * len(clients) * size
    assert run.meter.down_bytes == R * len(clients) * size
    assert run.meter.up_messages == run.meter.down_messages == R * len(clients)
    assert run.bytes_at == {r: 2 * r * len(clients) * size for r in range(R + 1)}


def test_ditto_and_apfl_ride_on_fedavg_without_extra_traffic():
    model = lora_model(base_mlp(64, 16, 10), rank=2, alpha=4.0)
    init = get_state(model)
    clients = [_client(i, 20) for i in range(2)]
    ditto, apfl = Ditto(model, clients, init, steps=2), APFL(model, clients, init, steps=2)

    def hook(r, w, locs):
        ditto.on_round(r, w, locs)
        apfl.on_round(r, w, locs)

    plain = fedavg(model, clients, init, rounds=2, local_steps=1)
    run = fedavg(model, clients, init, rounds=2, local_steps=1, on_round=hook)
    assert run.meter.total == plain.meter.total
    for k in init:  # the global trajectory is FedAvg's
        assert_close(run.checkpoints[2][k], plain.checkpoints[2][k])
    assert all(0.0 <= a <= 1.0 for a in apfl.alpha)
    assert not torch.equal(ditto.personal[0]["0.lora_B.weight"], init["0.lora_B.weight"])


def test_meter_counts_what_it_is_given():
    m = CommMeter()
    s = {"x": torch.zeros(3, 4)}
    m.send_down(s, 5)
    m.send_up(s)
    m.end_round()
    assert (m.down_bytes, m.up_bytes, m.total, m.log) == (240, 48, 288, [(1, 288)])


def test_client_without_data_is_named():
    model = lora_model(base_mlp(64, 16, 10), rank=2, alpha=4.0)
    clients = [_client(0, 10), _client(1, 0)]
    with pytest.raises(InputError, match="client 1 has no training data"):
        fedavg(model, clients, get_state(model), rounds=1)
    from potara_merge.baselines import finetune

    with pytest.raises(InputError, match="client 1 has no training data"):  # it said "the client"
        finetune(model, get_state(model), clients[1], steps=1)


def test_partitions():
    fed = digits_federation(6, "task:3", seed=0, augment=False)
    assert [c.task for c in fed.clients] == [0, 1, 2, 0, 1, 2]
    c = fed.clients[1]
    assert c.X_fisher.shape[0] <= 30 and c.X_test.shape[0] > 0
    lab = digits_federation(6, "dirichlet:0.1", seed=0, augment=False)
    counts = torch.stack([torch.bincount(c.y_train, minlength=10) for c in lab.clients]).float()
    share = counts.max(1).values / counts.sum(1)
    assert share.mean() > 0.4  # strongly label-skewed (iid would give ~0.1–0.2)
    assert parse_skew("iid") == ("iid", 0.0)
    for bad in ("dirichlet:-1", "task:0", "task:1.5", "zipf:2"):
        with pytest.raises(InputError, match="--skew"):
            parse_skew(bad)


def test_personalise_picks_a_weight_in_range_and_rejects_bad_fisher_data():
    model = lora_model(base_mlp(64, 16, 10), rank=2, alpha=4.0)
    init = get_state(model)
    c = _client(0, 30)
    from potara_merge.federated import train

    fed = train(model, init, c.X_train, torch.randint(0, 10, (30,)), steps=20)
    loc = train(model, init, c.X_train, c.y_train, steps=20)
    _merged, info = personalise(model, fed, loc, c.X_fisher, c.y_fisher, per_module=True)
    assert set(info.weights) == {"0", "2", "4"}
    assert all(0.0 <= w <= 1.0 for w in info.weights.values())
    assert info.total.bound <= min(info.total.a, info.total.b) + 1e-9
    with pytest.raises(InputError, match="client 7: no samples"):
        personalise(model, fed, loc, c.X_fisher[:0], c.y_fisher[:0], client=7)
    nan = {k: v.clone() for k, v in fed.items()}
    nan["2.lora_A.weight"][0, 0] = float("nan")
    with pytest.raises(InputError, match="client 3: NaN"):
        personalise(model, nan, loc, c.X_fisher, c.y_fisher, client=3)
    with pytest.raises(InputError, match="5 inputs but 2 labels"):
        personalise(model, fed, loc, c.X_fisher, c.y_fisher[:2])
    with pytest.raises(InputError, match="fisher"):
        personalise(model, fed, loc, c.X_fisher, c.y_fisher, fisher="foo")
    with pytest.raises(InputError, match="different entries"):
        personalise(
            model, fed, {k: v for k, v in loc.items() if not k.startswith("4.")}, c.X_fisher, c.y_fisher
        )


def test_bytes_to_reach_and_targets_from_curves():
    import math

    from potara_merge.experiments import bytes_to_reach, summarise, targets

    bytes_at = {0: 0, 1: 10, 2: 20, 3: 30, 4: 40}
    assert bytes_to_reach({0: 50.0, 2: 70.0, 4: 80.0}, bytes_at, 70.0) == 20.0
    assert bytes_to_reach({0: 50.0}, bytes_at, 70.0) == math.inf
    accs = {"potara": 80.0, "best_fixed": 80.6, "fedavg_ft": 79.0}
    run = {
        "seed": 0,
        "accs": accs,
        "potara_curve": {0: 60.0, 1: 79.5, 2: 80.0, 4: 81.0},
        "ft_curve": {2: 70.0, 4: 79.0},
        "bytes_at": bytes_at,
        "adapter_bytes": 5,
        "potara_lambdas": [0.5],
    }
    s = summarise([run])
    assert (
        s["ft_bytes_to_final"] == 40.0 and s["potara_bytes_to_ft_final"] == 10.0 and s["bytes_ratio"] == 0.25
    )
    t = {x["name"].rsplit("-", 1)[0]: x for x in targets(s, "task:4")}
    assert t["potara-vs-best-fixed"]["met"] is False  # 80.0 < 80.6 - 0.5
    assert t["potara-vs-fedavg-ft"]["met"] is True
    assert t["bytes-to-ft-final"]["met"] is True


def test_digits_arrays_are_scikit_learns_digits():
    from potara_merge.data import load_digits_arrays

    X, y = load_digits_arrays()
    assert X.shape == (1797, 64) and X.dtype == np.float32
    assert np.bincount(y).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    assert X.min() == 0.0 and X.max() == 1.0
    assert (np.round(X * 16) == X * 16).all()  # 17 grey levels


def test_personalise_ignores_a_layer_the_two_adapters_share_exactly():
    model = lora_model(base_mlp(64, 16, 10), rank=2, alpha=4.0)
    init = get_state(model)
    c = _client(0, 30)
    from potara_merge.federated import train
    from potara_merge.potara import estimate_traces

    fed = train(model, init, c.X_train, torch.randint(0, 10, (30,)), steps=20)
    loc = train(model, init, c.X_train, c.y_train, steps=20)
    for k in ("2.lora_A.weight", "2.lora_B.weight"):
        loc[k] = fed[k].clone()  # layer "2" identical in both: it cannot inform the mixing weight
    tr = estimate_traces(model, fed, loc, c.X_fisher, c.y_fisher)
    assert tr["2"].a == tr["2"].b == tr["2"].c == 0.0
    assert tr["0"].a > 0 and tr["4"].b > 0
    old = estimate_traces(model, fed, loc, c.X_fisher, c.y_fisher, skip_identical=False)
    assert old["2"].a > 0


def test_task_cue_partition_carries_a_distinct_one_hot_task_code_and_relabels():
    T = 4
    cue = digits_federation(8, f"task-cue:{T}", seed=1, augment=True)
    plain = digits_federation(8, "iid", seed=1, augment=True)  # same split and images, true digits
    assert parse_skew(f"task-cue:{T}") == ("task-cue", T) and parse_skew(" Task-Cue:10 ") == ("task-cue", 10)
    assert cue.n_features == 64 + T and plain.n_features == 64
    assert [c.task for c in cue.clients] == [i % T for i in range(8)]
    eye = torch.eye(T)
    codes = {}
    for c, p in zip(cue.clients, plain.clients, strict=True):
        for X, y, Xp, yp in (
            (c.X_train, c.y_train, p.X_train, p.y_train),
            (c.X_fisher, c.y_fisher, p.X_fisher, p.y_fisher),
            (c.X_test, c.y_test, p.X_test, p.y_test),
        ):
            assert X.shape[1] == 64 + T
            assert torch.equal(X[:, :64], Xp)  # the image itself is untouched
            assert torch.equal(X[:, 64:], eye[c.task].expand(len(X), T))  # every row carries its task's code
            assert torch.equal(y, (yp + c.task) % 10)  # labels as in task:T
        codes[c.task] = c.X_test[0, 64:]
    assert len({tuple(v.tolist()) for v in codes.values()}) == T  # distinct per task
    assert torch.equal(cue.public_X[:, 64:], eye[0].expand(len(cue.public_X), T))  # public split is task 0
    assert torch.equal(cue.public_y, plain.public_y)
    no_cue = digits_federation(8, f"task:{T}", seed=1, augment=True)  # the stress case: same labels, no cue
    assert no_cue.n_features == 64
    for c, n in zip(cue.clients, no_cue.clients, strict=True):
        assert torch.equal(c.y_test, n.y_test) and torch.equal(c.X_test[:, :64], n.X_test)


def test_task_cue_runs_end_to_end_on_the_wider_inputs():
    from potara_merge.experiments import SimConfig, experiment

    cfg = SimConfig(n_clients=4, rounds=2, skew="task-cue:2", local_model_steps=5, pretrain_steps=10)
    cfg.ft_curve_points = 1
    res = experiment(cfg, [0], log=lambda *_: None)
    assert all(0.0 <= res["summary"]["mean"][m] <= 100.0 for m in ("potara", "pooled", "best_fixed"))
    assert all(0.0 <= lam <= 1.0 for lam in res["runs"][0]["potara_lambdas"])


def test_expected_fisher_fast_path_equals_the_per_class_reference():
    from potara_merge.federated import set_state, train
    from potara_merge.fisher import correlation, diag_fisher, per_sample_grads
    from potara_merge.lora import lora_modules
    from potara_merge.potara import estimate_traces
    from potara_merge.weights import module_traces

    model = lora_model(base_mlp(64, 16, 10), rank=2, alpha=4.0)
    init = get_state(model)
    c = _client(0, 30)
    fed = train(model, init, c.X_train, torch.randint(0, 10, (30,)), steps=20)
    loc = train(model, init, c.X_train, c.y_train, steps=20)
    fast = estimate_traces(model, fed, loc, c.X_fisher, c.y_fisher)  # default: expected Fisher, batched
    names = list(fed)
    fishers, grads = [], []
    for state in (fed, loc):
        set_state(model, state)
        fishers.append(diag_fisher(model, c.X_fisher, names=names, kind="expected"))
        grads.append(per_sample_grads(model, c.X_fisher, c.y_fisher, names))
    corr = {n: correlation(grads[0][n], grads[1][n]) for n in names}
    groups = {m: [a, b] for m, (a, b) in lora_modules(fed).items()}
    same = {n: fed[n] == loc[n] for n in names}
    ref = module_traces(fishers[0], fishers[1], groups, corr=corr, same=same)
    for m in groups:
        # float32 sums over ~100 coordinates of 1/(F + δ): relative 1e-4 covers the rounding
        assert_close([fast[m].a, fast[m].b, fast[m].c], [ref[m].a, ref[m].b, ref[m].c], rtol=1e-4, atol=1e-6)


def test_local_adapters_from_the_federated_one_are_charged_its_rounds():
    """Regression: with --local-init federated the local adapters are trained from the Rp-round federated
    adapter, so every Potara curve point costs at least Rp rounds of traffic (it was charged 0 bytes at
    round 0, and `reproduce --local-init federated` reported a byte ratio of 0 under label skew)."""
    from potara_merge.experiments import potara_bytes_at, summarise

    bytes_at = {0: 0, 1: 10, 2: 20, 3: 30, 4: 40}
    run = {
        "seed": 0,
        "accs": {"potara": 80.0},
        "potara_curve": {0: 80.0, 1: 80.0, 2: 80.0, 3: 80.0, 4: 80.0},
        "ft_curve": {2: 70.0, 4: 79.0},
        "bytes_at": bytes_at,
        "adapter_bytes": 5,
        "potara_lambdas": [0.5],
    }
    assert summarise([run])["potara_bytes_to_ft_final"] == 0.0  # local adapters from the base: free
    s = summarise([{**run, "local_rounds": 2}])
    assert s["potara_bytes_to_ft_final"] == 20.0 and s["bytes_ratio"] == 0.5
    assert s["bytes_ratio_per_seed"] == [0.5]
    assert potara_bytes_at(bytes_at, 2) == {0: 20, 1: 20, 2: 20, 3: 30, 4: 40}
