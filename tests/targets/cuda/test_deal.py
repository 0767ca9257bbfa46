"""targets.cuda.deal: every thread's unrolled steps cover each iteration of the nest exactly
once, in the order the module documents, with the step terms strength-reduced."""

from __future__ import annotations

import itertools
import re

import pytest

from targets.cuda.deal import deal


def _evaluate(text: str, tid: int, step: int) -> int:
    """The C text's value (unsigned arithmetic on non-negative values: Python's // and %)."""
    python = re.sub(r"(\d+)u\b", r"\1", text).replace("/", "//")
    # The text is the module's own arithmetic on tid and s, nothing else.
    return eval(python, {}, {"tid": tid, "s": step})


def _covered(extents: list[int], threads: int, interleave: bool) -> list[tuple[int, ...]]:
    dealt = deal(extents, threads, "tid", "s", interleave)
    total = 1
    for extent in extents:
        total *= extent
    seen = []
    for step, tid in itertools.product(range(dealt.steps), range(threads)):
        if dealt.guarded and tid + step * threads >= total:
            continue
        seen.append(tuple(_evaluate(v, tid, step) for v in dealt.values))
    return seen


@pytest.mark.parametrize(("extents", "threads"), [
    ([64, 4], 128), ([32, 8], 128), ([16, 4], 256), ([3, 16, 2], 32), ([100, 3], 64),
    ([7], 32), ([128, 32], 256)])
def test_every_iteration_is_dealt_exactly_once(extents, threads):
    seen = _covered(extents, threads, False)
    assert sorted(seen) == list(itertools.product(*(range(e) for e in extents)))


@pytest.mark.parametrize(("extents", "threads"), [([64, 4], 128), ([32, 8], 128),
                                                  ([16, 4], 256), ([2, 24, 2], 64)])
def test_interleaved_rows_are_dealt_exactly_once_8_rows_per_piece(extents, threads):
    seen = _covered(extents, threads, True)
    assert sorted(seen) == list(itertools.product(*(range(e) for e in extents)))
    # Threads 0-7 take one piece of rows 0-7.
    assert seen[:8] == [(*[0] * (len(extents) - 2), row, 0) for row in range(8)]


def test_steps_add_constants_where_the_thread_count_allows():
    # 64 rows x 4 pieces over 128 threads, rows interleaved: the piece is the same at every
    # step, the row advances by 32 per step (4 eights), with no remainder left to take.
    dealt = deal([64, 4], 128, "tid", "s", True)
    assert (dealt.steps, dealt.guarded) == (2, False)
    assert dealt.values == ("((tid / 32u) + s * 4u) * 8u + tid % 8u", "(tid / 8u) % 4u")
