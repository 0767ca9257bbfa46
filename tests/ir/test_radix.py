"""Fused indices (ir.arith.radix): a mixed-radix sum of iterators is read back as its
digits, and the digits' expressions give every iterator back from the fused value; anything
else is no mixed-radix number."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from ir.arith import mixed_radix, unfused
from ir.evaluate import evaluate
from ir.expr import IntImm, Var


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(2, 5), min_size=1, max_size=4))
def test_the_digits_of_a_fused_index_give_each_iterator_back(extents):
    iterators = [Var(f"i{n}") for n in range(len(extents))]
    fused, stride = IntImm(0), 1
    for var, extent in reversed(list(zip(iterators, extents))):
        fused = fused + var * stride
        stride *= extent
    digits = mixed_radix(fused, dict(zip(iterators, extents)))
    assert [(v, e) for _, v, e in digits] == list(zip(iterators, extents))
    index = Var("d")
    parts = unfused(index, [(c, e) for c, _, e in digits])
    for values in itertools.product(*(range(e) for e in extents)):
        value = sum(v * c for v, (c, _, _) in zip(values, digits))
        assert [evaluate(p, {index: value}) for p in parts] == list(values)


def test_other_sums_are_no_mixed_radix_number():
    h, w = Var("h"), Var("w")
    extents = {h: 4, w: 8}
    assert mixed_radix(h * 7 + w, extents) is None      # coefficient not w's extent
    assert mixed_radix(h * 8 + w + 1, extents) is None  # a constant term
    assert mixed_radix(h * 8 + Var("x"), extents) is None  # not an iterator of the copy
    assert [(c, v.name, e) for c, v, e in mixed_radix(h * 8 + w, extents)] == [
        (8, "h", 4), (1, "w", 8)]
