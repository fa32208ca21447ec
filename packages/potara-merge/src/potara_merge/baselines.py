"""Personalisation baselines run on the same clients and the same FedAvg trajectory as Potara.

* FedAvg (FedIT): the global adapter for everyone;
* FedAvg + FT: the global adapter fine-tuned on each client's own data;
* local-only: an adapter trained on the client's data alone;
* Ditto (Li et al., 2021): a personal adapter trained with a proximal pull ``μ/2 ‖v − w‖²`` towards the
  current global adapter w, alongside FedAvg;
* APFL (Deng et al., 2020): a personal adapter v and a learned mixing weight α, with the personalised
  model ``α v + (1 − α) w`` in parameter space; v and α follow the gradient of the mixed model's loss.

Ditto and APFL send exactly FedAvg's messages (their personal state never leaves the client), so they
hook onto :func:`~potara_merge.federated.fedavg` through ``on_round`` rather than duplicating it.
"""

from __future__ import annotations

import torch
from torch import nn

from papershelf.errors import InputError
from potara_merge.federated import Adam, State, forward_with, train


class Ditto:
    """Per-client personal adapters updated each round with a proximal term towards the global one."""

    def __init__(
        self,
        model: nn.Module,
        clients: list,
        init: State,
        *,
        mu: float = 0.1,
        steps: int = 5,
        lr: float = 5e-3,
        batch: int = 32,
        seed: int = 0,
    ):
        self.model, self.clients, self.mu, self.steps, self.lr, self.batch, self.seed = (
            model,
            clients,
            mu,
            steps,
            lr,
            batch,
            seed,
        )
        self.personal = [{k: v.clone() for k, v in init.items()} for _ in clients]

    def on_round(self, r: int, w: State, _locals: list[State]) -> None:
        for i, c in enumerate(self.clients):
            self.personal[i] = train(
                self.model,
                self.personal[i],
                c.X_train,
                c.y_train,
                steps=self.steps,
                lr=self.lr,
                batch=self.batch,
                seed=self.seed * 7919 + r * 31 + c.cid + 17,
                prox=(self.mu, w),
            )


class APFL:
    """Per-client personal adapter v and mixing weight α ∈ [0, 1]; personalised = α v + (1 − α) w."""

    def __init__(
        self,
        model: nn.Module,
        clients: list,
        init: State,
        *,
        alpha0: float = 0.5,
        steps: int = 5,
        lr: float = 5e-3,
        alpha_lr: float = 0.05,
        batch: int = 32,
        seed: int = 0,
    ):
        self.model, self.clients, self.steps, self.lr, self.alpha_lr, self.batch, self.seed = (
            model,
            clients,
            steps,
            lr,
            alpha_lr,
            batch,
            seed,
        )
        self.personal = [{k: v.clone() for k, v in init.items()} for _ in clients]
        self.alpha = [float(alpha0)] * len(clients)

    def on_round(self, r: int, w: State, _locals: list[State]) -> None:
        for i, c in enumerate(self.clients):
            v = {k: t.clone().requires_grad_(True) for k, t in self.personal[i].items()}
            a = torch.tensor(self.alpha[i], requires_grad=True)
            opt = Adam(list(v.values()), lr=self.lr)
            g = torch.Generator().manual_seed(self.seed * 7919 + r * 31 + c.cid + 29)
            for _ in range(self.steps):
                idx = torch.randint(
                    0, c.X_train.shape[0], (min(self.batch, c.X_train.shape[0]),), generator=g
                )
                mixed = {k: a * v[k] + (1 - a) * w[k] for k in v}
                loss = nn.functional.cross_entropy(
                    forward_with(self.model, mixed, c.X_train[idx]), c.y_train[idx]
                )
                opt.zero_grad()
                if a.grad is not None:
                    a.grad = None
                loss.backward()
                opt.step()
                with torch.no_grad():
                    a -= self.alpha_lr * a.grad
                    a.clamp_(0.0, 1.0)
            self.personal[i] = {k: t.detach() for k, t in v.items()}
            self.alpha[i] = float(a.detach())

    def personalised(self, i: int, w: State) -> State:
        return {k: self.alpha[i] * self.personal[i][k] + (1 - self.alpha[i]) * w[k] for k in w}


def finetune(
    model: nn.Module, w: State, client, *, steps: int, lr: float = 5e-3, batch: int = 32, seed: int = 0
) -> State:
    """FedAvg + FT: the global adapter fine-tuned on one client's training data."""
    if client.n_train == 0:  # train() alone would not say which client
        raise InputError(f"client {client.cid} has no training data to fine-tune on")
    return train(model, w, client.X_train, client.y_train, steps=steps, lr=lr, batch=batch, seed=seed)
