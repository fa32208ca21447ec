"""Search algorithms: exact budgets, the reference, the issue's behavioural checks, and bad input."""

import numpy as np
import pytest
from slg_search import FunctionEnvironment, best_of_n, oracle_search, slg_search, slg_tree_search
from slg_search.baselines import beam_search, max_guided_search, mean_guided_search
from slg_search.envs import Countdown, GaussianTwoStage, legal_moves, random_countdown
from slg_search.reference import slg_reference
from slg_search.search import auto_m

from papershelf.errors import InputError

ALL = {
    "bon": lambda e, n, s: best_of_n(e, e.root, n, seed=s),
    "slg": lambda e, n, s: slg_search(e, e.root, n, width=4, m=12, seed=s),
    "slg-auto": lambda e, n, s: slg_search(e, e.root, n, width=4, seed=s),
    "tree": lambda e, n, s: slg_tree_search(e, e.root, n, width=3, batch=11, seed=s),
    "mean": lambda e, n, s: mean_guided_search(e, e.root, n, width=4, m=12, seed=s),
    "max": lambda e, n, s: max_guided_search(e, e.root, n, width=4, m=12, seed=s),
    "beam": lambda e, n, s: beam_search(e, e.root, n, beam=2, m=9, seed=s),
    "oracle": lambda e, n, s: oracle_search(e, e.root, n, seed=s),
}


class CountingEnv:
    """Wraps an environment and counts every sampled response."""

    def __init__(self, env):
        self.env, self.count, self.root = env, 0, env.root

    def rollout(self, state, n, rng):
        self.count += n
        return self.env.rollout(state, n, rng)

    def first_step(self, state, response):
        return self.env.first_step(state, response)

    def children(self, state):
        return self.env.children(state)

    def expected_best(self, state, n):
        return self.env.expected_best(state, n)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("budget", [100, 457])
def test_rollouts_used_equal_the_budget_exactly(name, budget):
    for env in (GaussianTwoStage.random(6, 0), Countdown((2, 5, 7, 25), 161)):
        counted = CountingEnv(env)
        res = ALL[name](counted, budget, 1)
        assert res.n_rollouts == budget == counted.count
        assert np.isfinite(res.best_reward)


def test_fast_slg_equals_the_step_by_step_reference():
    for seed in range(5):
        env = GaussianTwoStage.random(8, seed)
        fast = slg_search(env, env.root, 1000, width=8, m=40, seed=seed)
        ref = slg_reference(env, env.root, 1000, 8, 40, 0.2, seed)
        assert fast.chosen == ref["chosen"]
        assert fast.best_reward == ref["best_reward"]
        assert [n.value for n in fast.nodes] == pytest.approx(ref["values"], rel=1e-10)


def test_identical_children_slg_not_worse_than_bon_beyond_noise():
    env = GaussianTwoStage(np.zeros(8), np.ones(8))
    reps = 400
    diff = np.array(
        [
            slg_search(env, env.root, 500, width=8, m=20, seed=s).best_reward
            - best_of_n(env, env.root, 500, seed=10_000 + s).best_reward
            for s in range(reps)
        ]
    )
    # every SLG draw comes from the same distribution as BoN's: the difference is pure noise
    assert diff.mean() >= -3 * diff.std(ddof=1) / np.sqrt(reps)


def test_one_dominant_child_slg_matches_the_oracle():
    env = GaussianTwoStage([0.0, 0.0, 3.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0])
    oracle = env.expected_best(2, 1000)
    runs = [slg_search(env, env.root, 1000, width=5, m=40, seed=s) for s in range(60)]
    assert all(r.chosen == 2 for r in runs)
    # 760 of the 1000 draws land at the best child: E[max] = 3 + e_760 ≈ oracle − 0.07
    assert np.mean([r.best_reward for r in runs]) == pytest.approx(oracle, abs=0.15)
    bon = np.mean([best_of_n(env, env.root, 1000, seed=s).best_reward for s in range(60)])
    assert np.mean([r.best_reward for r in runs]) > bon + 0.2


def test_the_root_competes_only_when_asked():
    env = GaussianTwoStage([0.0, 0.0, 3.0, 0.0, 0.0], [1.0] * 5)
    # the root's reward is a bimodal mixture: its Gaussian tail fit overestimates the spread
    picks = [
        slg_search(env, env.root, 1000, width=5, m=40, include_root=True, seed=s).chosen for s in range(30)
    ]
    assert "root" in picks and set(picks) <= {"root", 2}


def test_slg_prefers_the_wide_child_and_mean_guided_does_not():
    env = GaussianTwoStage([0.5, 0.0], [0.2, 1.0])  # at N = 1000: 0.5 + 0.2·3.24 < 0 + 3.24
    assert slg_search(env, env.root, 1000, width=2, m=60, seed=0).chosen == 1
    assert mean_guided_search(env, env.root, 1000, width=2, m=60, seed=0).chosen == 0
    assert oracle_search(env, env.root, 1000, seed=0).chosen == 1


def test_seeded_determinism():
    env = random_countdown(0)
    for fn in (slg_search, slg_tree_search, best_of_n, beam_search):
        a, b = fn(env, env.root, 200, seed=3), fn(env, env.root, 200, seed=3)
        assert a.best_response == b.best_response and a.best_reward == b.best_reward
    rewards = {slg_search(env, env.root, 200, seed=s).best_reward for s in range(4)}
    assert len(rewards) == 4


def test_tree_search_grows_deeper_on_countdown():
    env = Countdown((3, 6, 25, 50, 75), 316)
    res = slg_tree_search(env, env.root, 600, width=3, batch=20, seed=0)
    depths = {n.depth for n in res.nodes}
    assert depths >= {0, 1, 2}
    assert sum(n.n_rollouts for n in res.nodes) == 600
    flat = slg_tree_search(env, env.root, 600, width=3, batch=20, max_depth=0, seed=0)
    assert [n.depth for n in flat.nodes] == [0]


def test_countdown_rules_and_exact_distribution():
    env = Countdown((2, 3, 4), 24)
    assert (4, "/", 2, 2) in legal_moves((2, 3, 4)) and (3, "-", 4, -1) not in legal_moves((2, 3, 4))
    values, probs = env.outcome_distribution(())
    assert probs.sum() == pytest.approx(1.0) and 24.0 in values
    exact_env = Countdown((2, 3, 4), 24, noise=0.0)
    _, rewards = exact_env.rollout((), 20_000, np.random.default_rng(1))
    # the empirical best-of-5 matches the exact E[max of 5] from the enumerated distribution
    # (sd of a best-of-5 is about 0.35: se over 4000 groups 0.0055, tolerance 3.6 se)
    emp = rewards.reshape(-1, 5).max(axis=1).mean()
    assert emp == pytest.approx(exact_env.expected_best((), 5), abs=0.02)
    assert rewards.mean() == pytest.approx(exact_env.expected_best((), 1), abs=0.01)
    assert env.solves(((4, "*", 3, 12), (12, "*", 2, 24)))


def test_function_environment_adapter():
    target = "737"

    def sample(state, n, rng):
        return [state + "".join(str(d) for d in rng.integers(0, 10, 3 - len(state))) for _ in range(n)]

    def score(state, responses):
        return [-abs(int(r) - int(target)) / 100 for r in responses]

    def first(state, response):
        return response[: len(state) + 1] if len(response) > len(state) + 1 else None

    env = FunctionEnvironment(sample, score, first)
    res = slg_search(env, "", 400, width=4, m=40, seed=0)
    assert res.n_rollouts == 400 and res.best_reward > -0.05
    assert res.chosen in ("", "6", "7", "8")


def test_budget_smaller_than_exploration_names_the_minimum():
    env = GaussianTwoStage.random(8, 0)
    with pytest.raises(InputError, match=r"exploration phase needs.*= 720"):
        slg_search(env, env.root, 700, width=8, m=80)
    with pytest.raises(InputError) as info:
        slg_search(env, env.root, 10, width=8, m=2)
    assert "at least 18" in info.value.one_line()


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"width": 0}, "width"),
        ({"width": 3.5}, "width"),
        ({"m": 1}, "m must be"),
        ({"tail_fraction": 1.0}, "tail_fraction"),
        ({"tail_fraction": 0}, "tail_fraction"),
        ({"family": "x"}, "family"),
        ({"rule": "x"}, "rule"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_search_arguments(kwargs, match):
    env = GaussianTwoStage.random(3, 0)
    with pytest.raises(InputError, match=match):
        slg_search(env, env.root, 500, **kwargs)


def test_bad_tree_and_budget_arguments():
    env = GaussianTwoStage.random(3, 0)
    with pytest.raises(InputError, match="ucb_c"):
        slg_tree_search(env, env.root, 500, ucb_c=-1)
    with pytest.raises(InputError, match="one batch"):
        slg_tree_search(env, env.root, 10, batch=20)
    with pytest.raises(InputError, match="budget"):
        best_of_n(env, env.root, 0)
    with pytest.raises(InputError, match="rollout"):
        best_of_n(object(), None, 10)
    with pytest.raises(InputError, match="oracle needs"):
        oracle_search(
            FunctionEnvironment(lambda s, n, r: [0] * n, lambda s, x: [0.0] * len(x), lambda s, x: None),
            "",
            5,
        )


def test_misbehaving_environment_is_reported():
    bad_len = FunctionEnvironment(
        lambda s, n, r: [0] * (n - 1), lambda s, x: [0.0] * len(x), lambda s, x: None
    )
    with pytest.raises(InputError, match="sample returned"):
        best_of_n(bad_len, "", 10)
    nan = FunctionEnvironment(
        lambda s, n, r: [0] * n, lambda s, x: [float("nan")] * len(x), lambda s, x: None
    )
    with pytest.raises(InputError, match="non-finite"):
        best_of_n(nan, "", 10)


def test_bad_environment_definitions():
    with pytest.raises(InputError, match="sds"):
        GaussianTwoStage([0.0, 1.0], [1.0, 0.0])
    with pytest.raises(InputError, match="one entry per child"):
        GaussianTwoStage([0.0, 1.0], [1.0])
    with pytest.raises(InputError, match="numbers"):
        Countdown((0, 3), 5)
    with pytest.raises(InputError, match="illegal step"):
        Countdown((2, 3), 5).pool(((3, "-", 3, 0),))


def test_auto_m_leaves_half_the_budget():
    for budget in (50, 100, 1000, 10_000):
        for width in (1, 4, 8):
            m = auto_m(budget, width)
            assert m >= 2 and ((width + 1) * m <= budget / 2 or m == 2)
