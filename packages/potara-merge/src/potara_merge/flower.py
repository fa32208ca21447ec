"""FedAvg (FedIT) over LoRA adapters on Flower's simulation engine (``flwr[simulation]``, Ray).

The same federated phase as :func:`potara_merge.federated.fedavg` — same clients, same local training
(:func:`potara_merge.federated.train` with the same per-round seeds), same weighting by training-set
size — but the messages travel through Flower: a ``ServerApp`` with Flower's ``FedAvg`` strategy and one
``ClientApp`` per client, run by ``flwr.simulation.run_simulation`` on this machine (no network). It
returns the in-process loop's :class:`~potara_merge.federated.FedAvgResult`, so every method downstream
(FedAvg + FT, Ditto, APFL through ``on_round``, Potara) runs unchanged on top.

Metering: the meter counts the tensor payload of every message exactly as the in-process loop does
(rounds × clients × adapter bytes each way); ``wire_bytes`` adds what Flower actually serialised
(NumPy ``.npy`` buffers, a header per tensor).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Iterable

import numpy as np
import torch
from torch import nn

from papershelf.errors import InputError, MissingDependencyError, check_number
from potara_merge.federated import CommMeter, FedAvgResult, State, check_clients, train


def require_flower() -> None:
    """Raise a one-line install hint when ``flwr[simulation]`` (Flower and Ray) is missing."""
    try:
        import flwr  # noqa: F401
        from flwr.simulation import run_simulation  # noqa: F401  (needs the simulation extra: ray)
    except ImportError:
        raise MissingDependencyError("flwr[simulation]", package="potara-merge", extra="flower") from None


def _to_arrays(state: State, keys: list[str]) -> list[np.ndarray]:
    return [state[k].detach().cpu().numpy() for k in keys]


def _to_state(arrays: list[np.ndarray], keys: list[str], like: State) -> State:
    if len(arrays) != len(keys):
        raise InputError(f"Flower returned {len(arrays)} tensors for an adapter of {len(keys)}")
    return {
        k: torch.from_numpy(np.array(a, copy=True)).to(like[k].dtype)
        for k, a in zip(keys, arrays, strict=True)
    }


def fedavg_flower(
    model: nn.Module,
    clients: list,
    init: State,
    *,
    rounds: int,
    local_steps: int = 5,
    lr: float = 5e-3,
    batch: int = 32,
    seed: int = 0,
    checkpoints: Iterable[int] | None = None,
    on_round: Callable[[int, State, list[State]], None] | None = None,
    cpus_per_client: float = 1.0,
) -> FedAvgResult:
    """:func:`~potara_merge.federated.fedavg` with Flower carrying the messages (see the module doc).

    ``on_round(r, global_before, client_states)`` is called on the server in client order, as in the
    in-process loop. Every client trains every round; a client failure stops the run with its error.
    """
    require_flower()
    if rounds < 1:
        raise InputError(f"rounds must be >= 1 on the Flower engine, got {rounds}")
    check_number("cpus_per_client", cpus_per_client, low=0, low_open=True)
    check_clients(clients)
    from flwr.client import ClientApp, NumPyClient
    from flwr.common import Context, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.simulation import run_simulation

    keys = list(init)
    by_cid = {c.cid: c for c in clients}
    keep = set(range(rounds + 1)) if checkpoints is None else set(checkpoints) | {0, rounds}
    meter = CommMeter()
    record: dict = {"w": {k: v.clone() for k, v in init.items()}, "ck": {}, "bytes": {0: 0}, "wire": 0}
    record["ck"][0] = record["w"]
    errors: list[str] = []

    class AdapterClient(NumPyClient):
        def __init__(self, cid: int) -> None:
            self.cid = cid

        def fit(self, parameters, config):
            torch.set_num_threads(1)  # one core per simulated client, as Flower's resources say
            c = by_cid[self.cid]
            r = int(config["round"])
            state = _to_state(parameters, keys, init)
            s = train(model, state, c.X_train, c.y_train, steps=local_steps, lr=lr, batch=batch,
                      seed=seed * 100003 + r * 1009 + c.cid)  # fmt: skip
            return _to_arrays(s, keys), int(c.n_train), {"cid": int(self.cid)}

    def client_fn(context: Context):
        return AdapterClient(clients[int(context.node_config["partition-id"])].cid).to_client()

    class MeteredFedAvg(FedAvg):
        """Flower's FedAvg; records the global adapter per round and meters every message."""

        def configure_fit(self, server_round, parameters, client_manager):
            instructions = super().configure_fit(server_round, parameters, client_manager)
            for _ in instructions:
                meter.send_down(record["w"])
                record["wire"] += sum(len(t) for t in parameters.tensors)
            return instructions

        def aggregate_fit(self, server_round, results, failures):
            if failures or len(results) != len(clients):
                errors.append(f"round {server_round}: {len(failures)} client failure(s): {failures[:1]}")
                raise RuntimeError(errors[-1])
            ordered = sorted(results, key=lambda cr: int(cr[1].metrics["cid"]))
            states = [_to_state(parameters_to_ndarrays(res.parameters), keys, init) for _, res in ordered]
            for (_, res), s in zip(ordered, states, strict=True):
                meter.send_up(s)
                record["wire"] += sum(len(t) for t in res.parameters.tensors)
            if on_round is not None:
                on_round(server_round, record["w"], states)
            params, metrics = super().aggregate_fit(server_round, results, failures)
            record["w"] = _to_state(parameters_to_ndarrays(params), keys, init)
            meter.end_round()
            record["bytes"][server_round] = meter.total
            if server_round in keep:
                record["ck"][server_round] = record["w"]
            return params, metrics

    def server_fn(context: Context):
        strategy = MeteredFedAvg(
            fraction_fit=1.0,
            fraction_evaluate=0.0,
            min_fit_clients=len(clients),
            min_evaluate_clients=0,
            min_available_clients=len(clients),
            on_fit_config_fn=lambda r: {"round": r},
            accept_failures=False,
            fit_metrics_aggregation_fn=lambda metrics: {},  # the metrics carry only client ids
            initial_parameters=ndarrays_to_parameters(_to_arrays(init, keys)),
        )
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=rounds))

    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # no accelerator on CPU runs
    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    flwr_logger.setLevel(logging.ERROR)  # an INFO line per message, and a deprecation notice per run
    try:
        with warnings.catch_warnings():  # Ray and Flower announce future changes on every start
            warnings.simplefilter("ignore")
            run_simulation(
                server_app=ServerApp(server_fn=server_fn),
                client_app=ClientApp(client_fn=client_fn),
                num_supernodes=len(clients),
                backend_config={"client_resources": {"num_cpus": cpus_per_client, "num_gpus": 0.0}},
            )
    finally:
        flwr_logger.setLevel(level)
    if errors or meter.rounds != rounds:
        why = errors[0] if errors else f"the simulation ended after {meter.rounds} of {rounds} rounds"
        raise InputError(f"Flower simulation failed: {why}")
    return FedAvgResult(record["ck"], record["bytes"], meter, wire_bytes=record["wire"])
