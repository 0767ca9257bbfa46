"""Integer intervals: the value range of an index expression."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Interval:
    """The closed integer interval ``[lo, hi]``; ``None`` stands for an unbounded side."""

    lo: int | None
    hi: int | None

    @staticmethod
    def point(value: int) -> Interval:
        """The interval holding one value."""
        return Interval(value, value)

    @staticmethod
    def everything() -> Interval:
        """The unbounded interval."""
        return Interval(None, None)

    @property
    def is_bounded(self) -> bool:
        """True when both sides are known."""
        return self.lo is not None and self.hi is not None

    @property
    def is_point(self) -> bool:
        """True when the interval holds exactly one value."""
        return self.is_bounded and self.lo == self.hi

    @property
    def extent(self) -> int | None:
        """The number of values in the interval, or None when unbounded."""
        return self.hi - self.lo + 1 if self.is_bounded else None

    def within(self, lo: int, hi: int) -> bool:
        """True when every value of the interval lies in ``[lo, hi]``."""
        return self.is_bounded and lo <= self.lo and self.hi <= hi

    def union(self, other: Interval) -> Interval:
        """The smallest interval holding both."""
        return Interval(None if self.lo is None or other.lo is None else min(self.lo, other.lo),
                        None if self.hi is None or other.hi is None else max(self.hi, other.hi))

    def __add__(self, other: Interval) -> Interval:
        return Interval(_sum(self.lo, other.lo), _sum(self.hi, other.hi))

    def __neg__(self) -> Interval:
        return Interval(None if self.hi is None else -self.hi,
                        None if self.lo is None else -self.lo)

    def __sub__(self, other: Interval) -> Interval:
        return self + (-other)

    def scale(self, factor: int) -> Interval:
        """Every value multiplied by the constant ``factor``."""
        if factor == 0:
            return Interval.point(0)
        lo = None if self.lo is None else self.lo * factor
        hi = None if self.hi is None else self.hi * factor
        return Interval(lo, hi) if factor > 0 else Interval(hi, lo)

    def __mul__(self, other: Interval) -> Interval:
        if other.is_point:
            return self.scale(other.lo)
        if self.is_point:
            return other.scale(self.lo)
        if not (self.is_bounded and other.is_bounded):
            return Interval.everything()
        corners = [a * b for a in (self.lo, self.hi) for b in (other.lo, other.hi)]
        return Interval(min(corners), max(corners))

    def floordiv(self, divisor: Interval) -> Interval:
        """Floor division by a divisor range; unbounded unless the divisor is a positive
        constant (the only form index arithmetic needs to be tight on)."""
        if not (divisor.is_point and divisor.lo > 0):
            if divisor.is_bounded and divisor.lo > 0 and self.is_bounded:
                corners = [a // b for a in (self.lo, self.hi) for b in (divisor.lo, divisor.hi)]
                return Interval(min(corners), max(corners))
            return Interval.everything()
        d = divisor.lo
        return Interval(None if self.lo is None else self.lo // d,
                        None if self.hi is None else self.hi // d)

    def floormod(self, divisor: Interval) -> Interval:
        """Floor modulo by a positive constant: ``[0, d-1]``, or tighter when no wrap occurs."""
        if not (divisor.is_point and divisor.lo > 0):
            if divisor.is_bounded and divisor.lo > 0:
                return Interval(0, divisor.hi - 1)
            return Interval.everything()
        d = divisor.lo
        if self.is_bounded and self.lo // d == self.hi // d:
            return Interval(self.lo % d, self.hi % d)
        return Interval(0, d - 1)

    def min(self, other: Interval) -> Interval:
        """The range of ``min(a, b)``."""
        return Interval(None if self.lo is None or other.lo is None else min(self.lo, other.lo),
                        _opt(min, self.hi, other.hi))

    def max(self, other: Interval) -> Interval:
        """The range of ``max(a, b)``."""
        return Interval(_opt(max, self.lo, other.lo),
                        None if self.hi is None or other.hi is None else max(self.hi, other.hi))

    def __str__(self) -> str:
        lo = "-inf" if self.lo is None else str(self.lo)
        hi = "+inf" if self.hi is None else str(self.hi)
        return f"[{lo}, {hi}]"


def _sum(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def _opt(pick, a: int | None, b: int | None) -> int | None:
    """``pick(a, b)`` where a missing (infinite) side loses to a known one: the upper side of a
    min, or the lower side of a max."""
    if a is None:
        return b
    if b is None:
        return a
    return pick(a, b)
