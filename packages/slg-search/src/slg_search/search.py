"""Search over an :class:`Environment`: best-of-N, one-layer SLG, the tree variant, the oracle.

Every algorithm spends exactly ``budget`` rollouts (one rollout = one sampled response and its reward)
and returns the highest-reward response it saw anywhere.

>>> from slg_search.envs import GaussianTwoStage
>>> env = GaussianTwoStage([0.0, 0.5, -1.0], [1.0, 0.2, 2.0])
>>> res = slg_search(env, env.root, budget=300, width=3, m=30, seed=0)
>>> res.n_rollouts, res.chosen
(300, 2)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from papershelf.errors import InputError, check_choice, check_int, check_number
from slg_search.tail import FAMILIES, RULES, check_tail_fraction, tail_fit


@runtime_checkable
class Environment(Protocol):
    """What a search needs from a generator and its reward model.

    * ``rollout(state, n, rng)`` samples ``n`` complete responses continuing ``state`` and scores them:
      returns ``(responses, rewards)``, a length-``n`` sequence and ``n`` finite floats.
    * ``first_step(state, response)`` is the child state reached by taking the first step of
      ``response`` beyond ``state``, or ``None`` when the response has no further intermediate step.

    Child states must be hashable (they are de-duplicated). Optional: ``expected_best(state, n)``
    (exact E[max reward of n rollouts]) and ``children(state)`` (all child states) for the oracle.
    """

    def rollout(self, state: Any, n: int, rng: np.random.Generator) -> tuple[Sequence[Any], Any]: ...

    def first_step(self, state: Any, response: Any) -> Hashable | None: ...


@dataclass
class NodeStats:
    """One state the search sampled from: how many rollouts, and its predicted best-of-N value."""

    state: Any
    n_rollouts: int
    value: float  # V̂ (tail prediction), or the selection score a baseline used
    depth: int = 0


@dataclass
class SearchResult:
    """Outcome of one search. ``n_rollouts`` always equals the budget."""

    method: str
    best_response: Any
    best_reward: float
    n_rollouts: int
    chosen: Any = None  # the state the remaining budget was committed to (SLG)
    nodes: list[NodeStats] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "best_response": _jsonable(self.best_response),
            "best_reward": self.best_reward,
            "n_rollouts": self.n_rollouts,
            "chosen": _jsonable(self.chosen),
            "nodes": [
                {"state": _jsonable(s.state), "n_rollouts": s.n_rollouts, "value": s.value, "depth": s.depth}
                for s in self.nodes
            ],
        }


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, tuple | list):
        return [_jsonable(v) for v in x]
    if x is None or isinstance(x, str | int | float | bool):
        return x
    return repr(x)


def make_rng(seed: Any) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is not None:
        check_int("seed", seed, low=0)
    return np.random.default_rng(seed)


class Budget:
    """Counts rollouts exactly, refuses to overspend, validates what the environment returns, and
    remembers the best response seen."""

    def __init__(self, env: Any, total: int, rng: np.random.Generator) -> None:
        if not (callable(getattr(env, "rollout", None)) and callable(getattr(env, "first_step", None))):
            raise InputError("env must have rollout(state, n, rng) and first_step(state, response) methods")
        self.env = env
        self.total = total
        self.used = 0
        self.rng = rng
        self.best_reward = -math.inf
        self.best_response: Any = None

    @property
    def remaining(self) -> int:
        return self.total - self.used

    def rollout(self, state: Any, n: int) -> tuple[Sequence[Any], np.ndarray]:
        if n < 1 or n > self.remaining:
            raise RuntimeError(f"internal budget error: asked for {n}, {self.remaining} left")
        responses, rewards = self.env.rollout(state, n, self.rng)
        rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
        if len(responses) != n or rewards.size != n:
            raise InputError(
                f"env.rollout returned {len(responses)} responses and {rewards.size} rewards for n = {n}"
            )
        if not np.all(np.isfinite(rewards)):
            raise InputError("env.rollout returned a non-finite reward")
        self.used += n
        i = int(np.argmax(rewards))
        if rewards[i] > self.best_reward:
            self.best_reward = float(rewards[i])
            self.best_response = responses[i]
        return responses, rewards

    def result(self, method: str, **kwargs: Any) -> SearchResult:
        assert self.used == self.total, (self.used, self.total)
        return SearchResult(method, self.best_response, self.best_reward, self.used, **kwargs)


def _children(
    env: Any,
    state: Any,
    responses: Sequence[Any],
    rewards: np.ndarray,
    width: int,
    exclude: set | None = None,
) -> list[Any]:
    """The first steps of the highest-reward responses: up to ``width`` distinct child states."""
    out: list[Any] = []
    seen: set = set() if exclude is None else set(exclude)
    for i in np.argsort(-rewards, kind="stable"):
        child = env.first_step(state, responses[int(i)])
        if child is None:
            continue
        try:
            if child in seen:
                continue
            seen.add(child)
        except TypeError:
            raise InputError("env.first_step must return hashable states (or None)") from None
        out.append(child)
        if len(out) == width:
            break
    return out


def _check_common(budget: Any, width: Any, tail_fraction: Any, family: str, rule: str) -> tuple[int, int]:
    budget = check_int("budget", budget, low=1)
    width = check_int("width", width, low=1, high=10_000)
    check_tail_fraction(tail_fraction)
    check_choice("family", family, FAMILIES)
    check_choice("rule", rule, RULES)
    return budget, width


def auto_m(budget: int, width: int) -> int:
    """The default exploration size m per state: ≈ 1.5·√budget, at least 10, and at most what leaves
    half the budget for exploitation ((width + 1)·m ≤ budget / 2), never below 2."""
    m = max(10, round(1.5 * math.sqrt(budget)))
    m = min(m, budget // (2 * (width + 1)))
    return max(m, 2)


def min_budget(width: int, m: int) -> int:
    """Rollouts the exploration phase of one-layer SLG needs: the root and ``width`` children, m each."""
    return (width + 1) * m


# ---- best-of-N ---------------------------------------------------------------------------------------
def best_of_n(env: Environment, root: Any, budget: int, *, seed: Any = None) -> SearchResult:
    """Sample ``budget`` responses from ``root`` and keep the best (the standard baseline)."""
    budget = check_int("budget", budget, low=1)
    b = Budget(env, budget, make_rng(seed))
    b.rollout(root, budget)
    return b.result("best-of-n", nodes=[NodeStats(root, budget, b.best_reward)])


# ---- one-layer SLG -----------------------------------------------------------------------------------
def slg_search(
    env: Environment,
    root: Any,
    budget: int,
    *,
    width: int = 8,
    m: int | None = None,
    tail_fraction: float = 0.2,
    family: str = "gaussian",
    rule: str = "quantile",
    include_root: bool = False,
    seed: Any = None,
) -> SearchResult:
    """One-layer Scaling-Law Guided search.

    1. Sample ``m`` responses at ``root``; the first steps of the highest-reward ones give up to
       ``width`` distinct child states.
    2. Sample ``m`` responses at each child; fit each state's reward tail (root included) and predict
       its best-of-``budget`` value V̂.
    3. Commit every remaining rollout to the child with the largest V̂; return the best response seen.

    ``include_root=True`` also lets the root compete (as the authors' code does); its reward is a
    mixture over children, whose tail the Gaussian fit overestimates, so it is off by default.
    ``m=None`` picks :func:`auto_m`. The budget must cover the exploration, (width + 1)·m rollouts.
    """
    return _one_layer(
        env,
        root,
        budget,
        width,
        m,
        tail_fraction,
        family,
        rule,
        seed,
        select="tail",
        include_root=include_root,
    )


def _one_layer(
    env, root, budget, width, m, tail_fraction, family, rule, seed, *, select: str, include_root: bool = False
):
    budget, width = _check_common(budget, width, tail_fraction, family, rule)
    if m is None:
        m = auto_m(budget, width)
    m = check_int("m", m, low=2)
    need = min_budget(width, m)
    if budget < need:
        raise InputError(
            f"budget {budget} is smaller than the exploration phase needs: (width + 1) * m = "
            f"({width} + 1) * {m} = {need}",
            hint=f"raise budget to at least {need}, or lower width or m",
        )
    b = Budget(env, budget, make_rng(seed))
    responses, rewards = b.rollout(root, m)
    states = [root]
    samples = [rewards]
    for child in _children(env, root, responses, rewards, width):
        samples.append(b.rollout(child, m)[1])
        states.append(child)
    if select == "tail":
        values = [float(tail_fit(s, tail_fraction, family).predict(budget, rule)) for s in samples]
    elif select == "mean":
        values = [float(np.mean(s)) for s in samples]
    else:  # "max"
        values = [float(np.max(s)) for s in samples]
    if include_root or len(states) == 1:
        k = int(np.argmax(values))
    else:
        k = 1 + int(np.argmax(values[1:]))
    counts = [m] * len(states)
    if b.remaining:
        counts[k] += b.remaining
        b.rollout(states[k], b.remaining)
    nodes = [
        NodeStats(s, c, v, 0 if i == 0 else 1) for i, (s, c, v) in enumerate(zip(states, counts, values))
    ]
    name = {"tail": "slg", "mean": "mean-guided", "max": "max-guided"}[select]
    return b.result(name, chosen=states[k], nodes=nodes)


# ---- tree variant ------------------------------------------------------------------------------------
@dataclass
class _Node:
    state: Any
    depth: int
    rewards: list[np.ndarray] = field(default_factory=list)
    responses: list[Any] = field(default_factory=list)
    n: int = 0
    expanded: bool = False
    children: list[int] = field(default_factory=list)


def slg_tree_search(
    env: Environment,
    root: Any,
    budget: int,
    *,
    width: int = 8,
    batch: int | None = None,
    ucb_c: float = 0.5,
    max_depth: int | None = None,
    tail_fraction: float = 0.2,
    family: str = "gaussian",
    rule: str = "quantile",
    seed: Any = None,
) -> SearchResult:
    """The tree variant of SLG: grow a tree of intermediate states, always sampling where the predicted
    best-of-N value plus a UCB bonus is largest.

    Each iteration picks a *frontier* node (one without children yet): any node not yet sampled first (in
    creation order); otherwise the one maximising  V̂_budget(node) + ucb_c · s · √(ln T / n_node),
    with T the rollouts so far and s the
    standard deviation of all rewards seen (so ``ucb_c`` is scale-free). A picked node that was sampled
    but never expanded is expanded: the first steps of its best responses become up to ``width``
    children (none beyond ``max_depth``). Otherwise it receives ``batch`` more rollouts (fewer at the end).
    """
    budget, width = _check_common(budget, width, tail_fraction, family, rule)
    if batch is None:
        batch = auto_m(budget, width)
    batch = check_int("batch", batch, low=2)
    ucb_c = check_number("ucb_c", ucb_c, low=0.0)
    if max_depth is not None:
        max_depth = check_int("max_depth", max_depth, low=0)
    if budget < batch:
        raise InputError(f"budget {budget} is smaller than one batch ({batch}) of rollouts")
    b = Budget(env, budget, make_rng(seed))
    nodes = [_Node(root, 0)]
    known: set = {root} if isinstance(root, Hashable) else set()
    all_rewards: list[np.ndarray] = []
    while b.remaining:
        fresh = next((i for i, nd in enumerate(nodes) if nd.n == 0), None)
        if fresh is not None:
            pick = fresh
        else:
            pooled = np.concatenate(all_rewards)
            scale = float(np.std(pooled))
            log_t = math.log(b.used)
            scores = [
                float(tail_fit(np.concatenate(nd.rewards), tail_fraction, family).predict(budget, rule))
                + ucb_c * scale * math.sqrt(log_t / nd.n)
                if not nd.children
                else -math.inf
                for nd in nodes
            ]
            pick = int(np.argmax(scores))
        nd = nodes[pick]
        can_expand = not nd.expanded and (max_depth is None or nd.depth < max_depth)
        if nd.n > 0 and can_expand:
            nd.expanded = True
            rewards = np.concatenate(nd.rewards)
            for child in _children(env, nd.state, nd.responses, rewards, width, exclude=known):
                known.add(child)
                nd.children.append(len(nodes))
                nodes.append(_Node(child, nd.depth + 1))
            if nd.children:
                continue
        k = min(batch, b.remaining)
        responses, rewards = b.rollout(nd.state, k)
        nd.rewards.append(rewards)
        nd.responses.extend(responses)
        nd.n += k
        all_rewards.append(rewards)
    stats = [
        NodeStats(
            nd.state,
            nd.n,
            float(tail_fit(np.concatenate(nd.rewards), tail_fraction, family).predict(budget, rule))
            if nd.n
            else math.nan,
            nd.depth,
        )
        for nd in nodes
    ]
    most = max(range(len(nodes)), key=lambda i: nodes[i].n)
    return b.result("slg-tree", chosen=nodes[most].state, nodes=stats)


# ---- full-information oracle ------------------------------------------------------------------------
def oracle_search(env: Any, root: Any, budget: int, *, seed: Any = None) -> SearchResult:
    """Spend the whole budget at the child of ``root`` (or ``root`` itself) with the largest exact
    E[max of ``budget`` rewards] — the full-information oracle. Needs ``env.children(state)`` and
    ``env.expected_best(state, n)``, which simulated environments provide."""
    budget = check_int("budget", budget, low=1)
    if not (callable(getattr(env, "children", None)) and callable(getattr(env, "expected_best", None))):
        raise InputError("the oracle needs an environment with children(state) and expected_best(state, n)")
    candidates = [root, *env.children(root)]
    values = [float(env.expected_best(s, budget)) for s in candidates]
    k = int(np.argmax(values))
    b = Budget(env, budget, make_rng(seed))
    b.rollout(candidates[k], budget)
    nodes = [NodeStats(s, budget if i == k else 0, v) for i, (s, v) in enumerate(zip(candidates, values))]
    return b.result("oracle", chosen=candidates[k], nodes=nodes)


SearchFn = Callable[..., SearchResult]
