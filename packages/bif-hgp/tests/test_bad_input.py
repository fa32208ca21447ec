"""Hostile inputs: one clear InputError naming the argument, before any work is done."""

import math

import numpy as np
import pytest
from bif_hgp import BIF, ChildGP, RandomSearch, VanillaGPUCB
from bif_hgp.data import make_problem

from papershelf.errors import InputError

P = make_problem("additive2d", seed=0, grid=6)


def bif(**kw):
    return BIF(P.composition, P.bounds, **{"grid": 6, **kw})


@pytest.mark.parametrize(
    ("bounds", "message"),
    [
        ([[0.0, 1.0], [2.0, 1.0]], "dimension 1: lower 2 must be < upper 1"),
        ([[0.0, 1.0], [1.0, 1.0]], "lower 1 must be < upper 1"),
        ([[0.0, 1.0], [0.0, float("nan")]], "bounds must be finite"),
        ([0.0, 1.0], "shape (D, 2)"),
        ("ab", "bounds must"),
    ],
)
def test_bad_bounds(bounds, message):
    with pytest.raises(InputError, match="bounds") as err:
        BIF(P.composition, bounds, grid=6).run(P.objective, 5)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("composition", "message"),
    [
        ({"a": [0], "b": [0]}, "belongs to both 'a' and 'b'"),
        ({"a": [0]}, "leaves parent dimension(s) [1]"),
        ({"a": [0], "b": [2]}, "composition['b'] must be an integer in [0, 1]"),
        ({"a": [0], "b": []}, "non-empty list"),
        ({}, "non-empty mapping"),
        ([0, 1], "mapping"),
    ],
)
def test_bad_composition(composition, message):
    with pytest.raises(InputError, match="composition") as err:
        BIF(composition, P.bounds, grid=6).run(P.objective, 5)
    assert message in str(err.value)


def test_references_to_unknown_children():
    with pytest.raises(InputError, match=r"child_objectives refers to unknown child 'z'"):
        bif().run(P.objective, 5, child_objectives={"z": lambda x: 0.0})
    child = ChildGP("z", [0], 6)
    with pytest.raises(InputError, match=r"pretrained refers to unknown child 'z'"):
        bif().run(P.objective, 5, pretrained={"z": child})
    with pytest.raises(InputError, match=r"pretrained\['a'\] has 1 dimension\(s\) on a 9-point grid"):
        bif().run(P.objective, 5, pretrained={"a": ChildGP("a", [0], 9)})
    with pytest.raises(InputError, match=r"pretrained\['a'\] must be a ChildGP"):
        bif().run(P.objective, 5, pretrained={"a": "model.pt"})


@pytest.mark.parametrize(
    "opt",
    [
        bif(n_init=5),
        VanillaGPUCB(P.composition, P.bounds, grid=6, n_init=5),
        RandomSearch(P.composition, P.bounds, grid=6, n_init=5),
    ],
)
def test_budget_below_initial_design(opt):
    with pytest.raises(InputError, match=r"budget \(4\) must be at least the initial design n_init \(5\)"):
        opt.run(P.objective, 4)
    with pytest.raises(InputError, match="budget must be an integer"):
        opt.run(P.objective, 2.5)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -math.inf])
def test_nonfinite_objective_raises_by_default(bad):
    def make():
        calls = []

        def objective(x):
            calls.append(1)
            return bad if len(calls) == 2 else 1.0

        return objective

    with pytest.raises(InputError, match=r"objective returned (nan|inf|-inf) at x=\[.*\] \(query 2\)"):
        bif().run(make(), 5)
    with pytest.raises(InputError, match=r"objective returned .* \(query 2\)"):
        VanillaGPUCB(P.composition, P.bounds, grid=6).run(make(), 5)


def test_objective_must_be_callable_and_return_a_number():
    with pytest.raises(InputError, match="objective must be callable"):
        bif().run("f.py", 5)
    with pytest.raises(InputError, match="objective must return one number"):
        bif().run(lambda x: [1.0, 2.0], 5)
    with pytest.raises(InputError, match="objective must return one number"):
        bif().run(lambda x: "high", 5)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"kappa": -1}, "kappa must be in [0, inf]"),
        ({"acquisition": "lcb"}, "acquisition must be one of ucb, ei, pi"),
        ({"child_acquisition": "x"}, "child_acquisition must be one of"),
        ({"child_nu": 1.0}, "child_nu must be one of"),
        ({"grid": 1}, "grid must be an integer in [2, 1024]"),
        ({"lr": 0}, "lr must be in (0, inf]"),
        ({"prior": "median"}, "prior must be one of acquisition, scaled, constant, mean"),
        ({"normalization": "minmax"}, "normalization must be one of shared, paper"),
        ({"decomposition": "linear"}, "decomposition must be one of residual, softmax"),
        ({"decomposition": "residual", "normalization": "paper"}, 'decomposition="residual" needs'),
        ({"sweeps": 0}, "sweeps must be an integer in [1, 100]"),
        ({"on_nonfinite": "ignore"}, "on_nonfinite must be one of raise, skip"),
        ({"n_init": -1}, "n_init must be an integer in [0, inf]"),
    ],
)
def test_bad_parameters_name_the_argument(kw, message):
    with pytest.raises(InputError) as err:
        bif(**kw).run(P.objective, 5)
    assert message in str(err.value)


def test_too_large_a_grid_is_refused_before_allocation():
    with pytest.raises(InputError, match=r"grid 100\^3 = 1000000 parent points is too many"):
        BIF({"a": [0], "b": [1], "c": [2]}, np.array([[0, 1]] * 3), grid=100).run(P.objective, 5)


def test_problem_names_are_checked():
    with pytest.raises(InputError, match="problem must be one of"):
        make_problem("branin")
    with pytest.raises(InputError, match="noise must be in"):
        make_problem("additive2d", noise=-0.1)
