"""Choosing the parent of the next generation.

The pool is what the experiment may build on: with `--lineage`, every revision of the lineage;
with `--from ID`, that revision and the children the experiment has made. Each member has its
standing on the leaderboard of the experiment's environment (status, score).

- With probability FIX_PROBABILITY, when some member failed in a way its code can cause (a wrong
  answer, a compile or runtime error, a timeout, a crash) and has had fewer than the allowed fix
  attempts in this experiment, one of those is chosen, to be rendered with the `fix` template.
- Otherwise a stochastic tournament among the best `population` passing members (by score;
  passing but untimed ones after the timed): TOURNAMENT_SIZE members are drawn without
  replacement, a member not yet used as a parent in this experiment UNTRIED_WEIGHT times as
  likely as one that was; the best of the draw wins with probability WIN_PROBABILITY, else the
  next best, and so on. That keeps pressure towards the best while every one of the top
  `population` keeps a chance (a deterministic tournament never picks the worst of them).
- With no passing member, a fixable failing one is chosen if there is one; otherwise None.

Every draw comes from the `random.Random` the caller passes (seeded per experiment and
generation), so a resumed experiment chooses as the uninterrupted one would have.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

FIXABLE_STATUSES = frozenset({"wrong_answer", "compile_error", "runtime_error", "timeout", "crashed"})
FIX_PROBABILITY = 0.25
TOURNAMENT_SIZE = 3
WIN_PROBABILITY = 0.7
UNTRIED_WEIGHT = 3.0


@dataclass(frozen=True)
class PoolMember:
    revision_id: int
    status: str  # the leaderboard's: pass, a failure status, or not_run
    score_ms: float | None


@dataclass(frozen=True)
class ParentChoice:
    revision_id: int
    template: str  # improve | fix


def choose_parent(
    pool: list[PoolMember],
    *,
    population: int,
    tried: Counter[int],
    fix_attempts: Counter[int],
    max_fix_attempts: int,
    rng: random.Random,
) -> ParentChoice | None:
    """The next parent and its template, or None when the pool has nothing left to try."""
    passing = sorted(
        (member for member in pool if member.status == "pass"),
        key=lambda member: (member.score_ms is None, member.score_ms or 0.0, member.revision_id),
    )[:population]
    fixable = [
        member
        for member in sorted(pool, key=lambda member: member.revision_id)
        if member.status in FIXABLE_STATUSES and fix_attempts[member.revision_id] < max_fix_attempts
    ]
    wants_fix = rng.random() < FIX_PROBABILITY
    if fixable and (wants_fix or not passing):
        chosen = _weighted_draw(fixable, 1, tried, rng)[0]
        return ParentChoice(chosen.revision_id, "fix")
    if not passing:
        return None
    drawn = sorted(_weighted_draw(passing, min(TOURNAMENT_SIZE, len(passing)), tried, rng), key=passing.index)
    winner = next((member for member in drawn[:-1] if rng.random() < WIN_PROBABILITY), drawn[-1])
    return ParentChoice(winner.revision_id, "improve")


def _weighted_draw(
    members: list[PoolMember], count: int, tried: Counter[int], rng: random.Random
) -> list[PoolMember]:
    remaining = list(members)
    drawn: list[PoolMember] = []
    for _ in range(count):
        weights = [1.0 if tried[member.revision_id] else UNTRIED_WEIGHT for member in remaining]
        pick = rng.choices(range(len(remaining)), weights=weights)[0]
        drawn.append(remaining.pop(pick))
    return drawn
