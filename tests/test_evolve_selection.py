"""Parent selection: tournament among the best K passing, weight on untried parents, fixes."""

import random
from collections import Counter

from harness.evolve.selection import FIX_PROBABILITY, PoolMember, choose_parent

PASSING = [
    PoolMember(revision_id, "pass", score) for revision_id, score in [(1, 5.0), (2, 1.0), (3, 3.0), (4, 2.0)]
]


def choices(pool, *, population=4, tried=None, fix_attempts=None, max_fix=2, draws=2000, seed=0):
    rng = random.Random(seed)
    counts = Counter()
    for _ in range(draws):
        choice = choose_parent(
            pool,
            population=population,
            tried=tried or Counter(),
            fix_attempts=fix_attempts or Counter(),
            max_fix_attempts=max_fix,
            rng=rng,
        )
        counts[None if choice is None else (choice.revision_id, choice.template)] += 1
    return counts


def test_only_the_best_k_passing_are_parents_and_better_ones_win_more():
    for population in (2, 3):
        counts = choices(PASSING, population=population)
        best = [(2, "improve"), (4, "improve"), (3, "improve")][:population]  # 1 (5.0 ms) is 4th
        assert set(counts) == set(best)
        assert [counts[key] for key in best] == sorted(counts.values(), reverse=True)
    assert choices(PASSING, population=1) == {(2, "improve"): 2000}


def test_untried_parents_get_more_weight():
    fresh = choices(PASSING, population=4)
    best_tried = choices(PASSING, population=4, tried=Counter({2: 1}))
    assert best_tried[(2, "improve")] < fresh[(2, "improve")]
    assert best_tried[(4, "improve")] > fresh[(4, "improve")]


def test_failing_revisions_are_fixed_sometimes_and_only_a_few_times():
    pool = [*PASSING, PoolMember(9, "wrong_answer", None), PoolMember(8, "unsupported", None)]
    counts = choices(pool)
    fixes = counts[(9, "fix")]
    assert abs(fixes / 2000 - FIX_PROBABILITY) < 0.05
    assert not any(key and key[0] == 8 for key in counts)  # unsupported: no edit fixes a missing GPU
    assert choices(pool, fix_attempts=Counter({9: 2}))[(9, "fix")] == 0


def test_with_no_passing_parent_a_failing_one_is_fixed_or_nothing_is_left():
    failing = [PoolMember(9, "compile_error", None), PoolMember(7, "not_run", None)]
    assert set(choices(failing)) == {(9, "fix")}
    assert set(choices(failing, fix_attempts=Counter({9: 2}))) == {None}


def test_same_seed_same_choices():
    assert choices(PASSING, draws=50, seed=3) == choices(PASSING, draws=50, seed=3)
