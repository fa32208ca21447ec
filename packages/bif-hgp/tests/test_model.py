"""BIF's invariants: exact sums, the bottom-up copies, the one-child reduction, transfer, statistics."""

import numpy as np
import pytest
import torch
from bif_hgp import BIF, SingleGPUCB, decompose, normalize_groups, reference
from bif_hgp.data import make_problem
from bif_hgp.experiments import run_method
from hypothesis import given, settings
from hypothesis import strategies as st

torch.set_num_threads(1)
finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=100, deadline=None)
@given(
    y=finite,
    acq=st.lists(
        st.tuples(st.floats(-10, 10), st.floats(0.1, 10) | st.floats(-10, -0.1) | st.just(0.0)),
        min_size=1,
        max_size=6,
    ),
)
def test_sub_responses_sum_to_the_observation(y, acq):
    at, mx = [a for a, _ in acq], [m for _, m in acq]
    sub = decompose(y, at, mx)
    assert abs(sum(sub) - y) <= 4 * np.spacing(abs(y)) * len(sub) + 1e-300
    assert np.all(np.sign(sub) * np.sign(y) >= 0)  # every share has the observation's sign
    maps = [np.array([a, m]) for a, m in acq]  # reference takes maps; its max is max(a, m)
    ref = reference.decompose(y, maps, [0] * len(acq))
    np.testing.assert_allclose(decompose(y, at, [max(a, m) for a, m in acq]), ref, rtol=1e-12, atol=1e-300)


@settings(max_examples=50, deadline=None)
@given(
    data=st.lists(
        st.tuples(st.floats(-100, 100, allow_nan=False), st.sampled_from(["env", "bif"])), max_size=12
    )
)
def test_group_normalisation_matches_reference(data):
    y = [v for v, _ in data]
    src = [s for _, s in data]
    np.testing.assert_allclose(
        normalize_groups(np.array(y), src), reference.normalize_groups(y, src), atol=1e-15
    )


def test_decomposition_follows_the_childrens_maps():
    # the child at its own acquisition maximum takes the larger share; equal contributions split evenly
    sub = decompose(1.0, [2.0, 0.5], [2.0, 2.0])
    assert sub[0] > sub[1] and sub[0] == pytest.approx(np.e / (np.e + np.exp(0.25)))
    assert decompose(6.0, [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]).tolist() == [2.0, 2.0, 2.0]  # NaN → 0


@pytest.fixture(scope="module")
def run():
    problem = make_problem("additive2d", seed=1, grid=8)
    copies = []

    def check(model, t):
        for sub, name in zip(model.parent.sub_kernels, model.composition_):
            hp = model.children[name].hyperparameters()
            copies.append(
                torch.equal(sub.base_kernel.lengthscale.detach(), hp["lengthscale"])
                and torch.equal(sub.outputscale.detach(), hp["outputscale"])
            )

    opt = BIF(problem.composition, problem.bounds, grid=8)
    res = opt.run(
        problem.objective,
        9,
        seed=1,
        child_objectives=problem.child_objectives,
        callback=check,
        truth=problem.truth,
        child_truth=problem.child_truth,
    )
    return res, copies


def test_parent_kernel_equals_children_after_every_update(run):
    _, copies = run
    assert len(copies) == 2 * 9 and all(copies)


def test_children_receive_sub_responses_that_sum_to_each_observation(run):
    res, _ = run
    model = res.model
    per_child = [[y for y, s in zip(c.y_raw, c.source) if s == "bif"] for c in model.children.values()]
    assert all(len(v) == 9 for v in per_child)
    totals = np.sum(per_child, axis=0)
    np.testing.assert_allclose(totals, model.parent_y, rtol=0, atol=1e-12)
    # each child also kept its 3 direct observations
    assert all(c.source.count("env") == 3 for c in model.children.values())
    # and the children's trained hyperparameters moved away from GPyTorch's initial values
    assert all(
        float(c.gp.covar_module.outputscale.detach()) != pytest.approx(0.6931, abs=1e-3)
        for c in model.children.values()
    )


def test_curves_cover_every_query_after_the_initial_design(run):
    res, _ = run
    assert res.n_queries == list(range(3, 10))
    assert len(res.parent_r2) == len(res.exploration) == 7
    assert all(0.0 <= e <= 1.0 for e in res.exploration)
    assert res.queries.shape == (9, 2) and np.all((res.queries >= 0) & (res.queries <= 1))


def test_one_child_identity_composition_reduces_to_single_gp_bo():
    problem = make_problem("additive2d", seed=4, grid=8)
    kw = dict(grid=8, n_init=2)
    bif = BIF(
        {"whole": [0, 1]},
        problem.bounds,
        prior="constant",
        train_iters=0,
        n_child_init=0,
        acquisition="ucb",
        **kw,
    ).run(problem.objective, 10, seed=4)
    problem = make_problem("additive2d", seed=4, grid=8)  # same noise stream
    single = SingleGPUCB({"whole": [0, 1]}, problem.bounds, train_iters=0, **kw).run(
        problem.objective, 10, seed=4
    )
    np.testing.assert_array_equal(bif.queries, single.queries)
    np.testing.assert_array_equal(bif.y, single.y)
    # one child: its sub-response is the observation itself
    child = bif.children["whole"]
    np.testing.assert_array_equal(child.y_raw, bif.y)


def test_same_seed_same_run_and_different_seed_differs():
    a = run_method(make_problem("additive2d", seed=2, grid=6), "bif", 4, seed=2)
    b = run_method(make_problem("additive2d", seed=2, grid=6), "bif", 4, seed=2)
    c = run_method(make_problem("additive2d", seed=5, grid=6), "bif", 4, seed=5)
    np.testing.assert_array_equal(a.queries, b.queries)
    np.testing.assert_array_equal(a.y, b.y)
    assert not np.array_equal(a.y, c.y)


def test_transfer_reuses_a_trained_child_without_modifying_it():
    src = run_method(make_problem("additive2d", seed=0, grid=8), "bif", 6, seed=0)
    trained = src.children["a"]
    n_before = trained.n_data
    problem = make_problem("transfer2d", seed=0, grid=8)
    reused = run_method(problem, "bif", 4, seed=0, pretrained={"a": trained})
    scratch = run_method(make_problem("transfer2d", seed=0, grid=8), "bif", 4, seed=0)
    assert trained.n_data == n_before  # copied, not mutated
    child = reused.children["a"]
    assert child.n_data == n_before + 1 + 4  # its old data, one direct observation, four sub-responses
    # it starts from the trained hyperparameters, not GPyTorch's initial ones, and keeps its old data first
    np.testing.assert_array_equal(child.y_raw[:n_before], trained.y_raw)
    assert child.source[n_before] == "env"
    fresh = scratch.children["a"]
    assert child.gp.covar_module.raw_outputscale.item() != fresh.gp.covar_module.raw_outputscale.item()


def test_nonfinite_objective_can_be_skipped():
    problem = make_problem("additive2d", seed=0, grid=6)
    calls = []

    def objective(x):
        calls.append(x)
        return float("nan") if len(calls) == 4 else problem.objective(x)

    res = BIF(problem.composition, problem.bounds, grid=6, on_nonfinite="skip").run(
        objective, 6, seed=0, child_objectives=problem.child_objectives
    )
    assert res.skipped == [3] and np.isnan(res.y[3]) and len(res.model.parent_y) == 5


def test_scaled_prior_learns_an_affine_map_of_the_same_prior():
    problem = make_problem("additive2d", seed=2, grid=8)
    res = run_method(problem, "bif-scaled", 6, seed=2)
    model = res.model
    mean = model.parent.mean_module
    assert float(mean.alpha.detach()) != 1.0 and float(mean.beta.detach()) != 0.0
    maps = [model.children[n].acq.numpy() for n in model.composition_]
    expected = reference.prior_map(maps, [idx.numpy() for idx in model.child_index])
    np.testing.assert_allclose(mean.values.numpy(), expected, atol=1e-14)
    x = model.points[:5]
    np.testing.assert_allclose(
        mean(x).detach().numpy(),
        float(mean.alpha.detach()) * expected[:5] + float(mean.beta.detach()),
        atol=1e-14,
    )


def _noiseless_children(method):
    res = run_method(make_problem("additive2d", seed=11, noise=0.0, grid=16), method, 60, seed=11)
    return {k: v[-1] for k, v in res.child_r2_offset.items()}, res


def test_noiseless_additive_children_recover_their_sub_functions():
    # The issue's check: on a noiseless additive function every child's R² exceeds 0.95 after 60 queries.
    # Measured strictly: the child's mean in the objective's units against its true sub-function, up to
    # the one constant an additive composite leaves unidentified (g_a + c, g_b − c). A 16-point grid per
    # child keeps it to a few seconds; `bif-hgp bench` runs the 32-point version over 10 seeds.
    bif, res = _noiseless_children("bif")
    assert min(bif.values()) > 0.95, bif
    assert min(v[-1] for v in res.child_r2.values()) > 0.95  # the scale-free score is never lower
    # on noiseless data the children learn (almost) no noise
    assert all(float(c.gp.likelihood.noise.detach()) < 0.01 for c in res.model.children.values())


@pytest.mark.parametrize("method, ceiling", [("bif-softmax", 0.9), ("bottomup", 0.8)])
def test_noiseless_ablations_do_not_recover_the_sub_functions(method, ceiling):
    # the authors' softmax split keeps in each child a share of the other's sub-function; without the
    # top-down path the children have only their 3 direct observations (separate tests: they run in
    # parallel under xdist)
    scores, _ = _noiseless_children(method)
    assert max(scores.values()) < ceiling, scores


@pytest.mark.parametrize("prior", ["mean", "acquisition"])
def test_authors_start_queries_the_argmax_of_the_initial_prior(prior):
    # The authors' loop has no random parent queries: the first query is the argmax of the prior built
    # from the children's three direct observations each — their acquisition map (the authors' prior,
    # used raw before any parent observation) or the sum of their posterior means (our default).
    seen = []

    class Spy(BIF):
        def propose(self):
            if prior == "acquisition":
                maps = [self.children[n].acq.numpy().copy() for n in self.composition_]
                index = [i.numpy() for i in self.child_index]
                expected = reference.prior_map(maps, index)
            else:
                means = [c.predict()[0].numpy() for c in self.children.values()]
                expected = sum(m[i.numpy()] for m, i in zip(means, self.child_index))
            seen.append((expected, len(self.parent_y)))
            return super().propose()

    problem = make_problem("additive2d", seed=3, grid=8)
    spy = Spy(problem.composition, problem.bounds, grid=8, n_init=0, prior=prior)
    res = spy.run(problem.objective, 2, seed=3, child_objectives=problem.child_objectives)
    first_map, n_observed = seen[0]
    assert n_observed == 0 and len(seen) == 2 and first_map.std() > 1e-6
    first = int(np.argmax(first_map))
    np.testing.assert_array_equal(res.queries[0], spy._to_real(spy.points[first].numpy()))
    assert res.n_queries == [0, 1, 2]  # scored from the empty state on
    if prior == "mean":  # the method registered for the bench is this protocol
        again = run_method(make_problem("additive2d", seed=3, grid=8), "bif-paper-init", 2, seed=3)
        np.testing.assert_array_equal(again.queries, res.queries)


def test_areas_cover_the_same_queries_for_every_method():
    from bif_hgp.experiments import summarise

    res = run_method(make_problem("additive2d", seed=1, grid=6), "bif-paper-init", 5, seed=1)
    full, common = summarise(res), summarise(res, start=3)
    keep = np.asarray(res.n_queries) >= 3
    expected = 100 * np.mean(
        np.asarray(res.exploration)[keep] + np.asarray(res.parent_r2)[keep] + res.mean_child_r2()[keep]
    )
    assert common["auc"] == pytest.approx(expected)
    assert full["auc"] != pytest.approx(common["auc"])
    assert full["parent_r2"] == common["parent_r2"]  # final scores do not depend on the range
