"""The merge-path accuracy barrier (a linear-mode-connectivity diagnostic)."""

import pytest
from potara_merge.experiments import accuracy_barrier

from papershelf.errors import InputError


def test_no_barrier_on_or_above_the_chord():
    assert accuracy_barrier({0.0: 40.0, 0.5: 45.0, 1.0: 50.0}) == 0.0
    assert accuracy_barrier({0.0: 40.0, 0.5: 70.0, 1.0: 50.0}) == 0.0  # a merge better than both


def test_barrier_is_the_largest_drop_below_the_chord():
    # chord at 0.5 is 45, at 0.2 is 42; drops 45 − 20 = 25 and 42 − 30 = 12
    acc = {0.0: 40.0, 0.2: 30.0, 0.5: 20.0, 1.0: 50.0}
    assert accuracy_barrier(acc) == pytest.approx(25.0)


def test_barrier_needs_both_endpoints():
    with pytest.raises(InputError, match="λ = 0 and λ = 1"):
        accuracy_barrier({0.0: 1.0, 0.5: 1.0})
