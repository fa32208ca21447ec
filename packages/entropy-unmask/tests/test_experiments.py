"""The bench helpers: the exact best fixed-k search and the larger-L size rule."""

from entropy_unmask.data import make_family
from entropy_unmask.experiments import best_at_kl, best_fixed_k, scale_size, sweep


def test_best_fixed_k_search_equals_the_full_sweep():
    for target in (make_family("markov", 4, 3), make_family("template", 5, 3, seed=1)):
        best, _ = best_fixed_k(target)
        full = best_at_kl(sweep(target, "fixed-k"))
        assert best["schedule"] == full["schedule"]
        assert best["expected_iterations"] == full["expected_iterations"]


def test_best_fixed_k_stops_at_the_first_iteration_count_that_reaches_the_target():
    # a product target is exact at every k: one iteration (k = L) is best and nothing else is evaluated
    best, rows = best_fixed_k(make_family("product", 4, 3))
    assert best["schedule"] == "fixed-k(k=4)" and len(rows) == 1


def test_scale_size_picks_the_largest_length_within_the_cell_budget():
    big = scale_size("code", 3, 5, 7, 2**11)  # 16 words: 16 * 2^7 = 2^11 fits at L = 7
    assert big.L == 7
    assert scale_size("code", 3, 5, 7, 2**10).L == 6
    assert scale_size("markov", 3, 5, 7, 2**8) is None  # support 48 already at L = 5


def test_scaling_never_asks_for_more_words_than_sequences_exist():
    from entropy_unmask.experiments import scaling

    rows = scaling((0.3,), L=3, V=3, seed=0)  # 27 sequences: codes of 2, 4, 8, 16 words only
    assert [r["size"] for r in rows] == [2, 4, 8, 16]
    assert all(r["expected_iterations"] >= 1 for r in rows)
