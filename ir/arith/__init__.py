"""Affine index arithmetic: intervals, canonical linear forms, range inference and
simplification of floordiv/floormod under known iterator ranges.

Every transform and the matcher reason about indices through this package only.
"""

from ir.arith.bound import bound, bound_form, exact_bound
from ir.arith.interval import Interval
from ir.arith.linear import LinearForm, is_affine, linearize, to_expr
from ir.arith.radix import mixed_radix, unfused
from ir.arith.simplify import const_int, equal, prove, simplify

__all__ = ["Interval", "LinearForm", "bound", "bound_form", "const_int", "equal", "exact_bound",
           "is_affine", "linearize", "mixed_radix", "prove", "simplify", "to_expr", "unfused"]
