"""The self-check: does each intrinsic compute what its description says?

A :class:`Checker` runs one kind of evidence for one intrinsic and returns a
:class:`CheckResult`; :func:`self_check` runs the checkers it is given. The checkers that need a
backend live with their backend and are passed in from above, so this package never imports
``targets``: ``targets.host.selfcheck.SemanticsChecker`` runs the intrinsic's ``desc_func()``
on random inputs with the reference executor and compares the output with the independent
numpy model of :mod:`intrinsics.oracle` (exactly for integers, within a tolerance scaled by the
dtype's epsilon and the reduction length for floats), and, for an intrinsic that states its
``accumulation``, the hardware-order model against float64 within :func:`accumulation_bound`
(:func:`check_accumulation`); ``targets.npu.selfcheck`` runs NPU instructions on the
simulator. :func:`random_inputs` and :func:`compare` are shared by them.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import ml_dtypes
import numpy as np

from intrinsics.checks import accumulated_term
from intrinsics.model import Intrinsic, Operand
from intrinsics.oracle import (
    UnsupportedSemantics,
    einsum_subscripts,
    hardware_model,
    numpy_model,
)

OK = "ok"
MISMATCH = "mismatch"
ERROR = "error"
SKIPPED = "skipped"


@dataclass(frozen=True)
class CheckResult:
    """One checker's verdict on one intrinsic.

    ``status`` is ``ok``, ``mismatch`` (the numbers disagree: ``max_error`` exceeds
    ``tolerance``), ``error`` (the check could not run: ``detail`` says why) or ``skipped``
    (the checker does not apply). ``where`` is the first disagreeing element's index.
    """

    intrinsic: str
    checker: str
    status: str
    max_error: float = 0.0
    tolerance: float = 0.0
    detail: str = ""
    where: tuple[int, ...] | None = None

    @property
    def failed(self) -> bool:
        """True for a mismatch or an error."""
        return self.status in (MISMATCH, ERROR)

    def __str__(self) -> str:
        if self.status == OK:
            return f"{self.intrinsic}: {self.checker}: ok (max error {self.max_error:g})"
        if self.status == MISMATCH:
            at = f" at {list(self.where)}" if self.where is not None else ""
            return (f"{self.intrinsic}: {self.checker}: mismatch: max error {self.max_error:g}"
                    f"{at} exceeds tolerance {self.tolerance:g}")
        return f"{self.intrinsic}: {self.checker}: {self.status}: {self.detail}"


class Checker(Protocol):
    """One kind of evidence that an intrinsic does what its description says."""

    name: str

    def applies(self, intrinsic: Intrinsic) -> bool:
        """Whether this checker has anything to say about ``intrinsic``."""
        ...

    def check(self, intrinsic: Intrinsic, rng: np.random.Generator) -> CheckResult:
        """Run the check with random inputs drawn from ``rng``."""
        ...


def self_check(intrinsics: Iterable[Intrinsic], checkers: Sequence[Checker],
               seed: int = 0) -> list[CheckResult]:
    """Every applicable checker's result for every intrinsic, in order.

    Inputs are random but reproducible: each intrinsic draws from a generator seeded by
    ``seed`` and its name.
    """
    results = []
    for intrinsic in intrinsics:
        for checker in checkers:
            if not checker.applies(intrinsic):
                continue
            rng = np.random.default_rng([seed, zlib.crc32(intrinsic.name.encode())])
            results.append(checker.check(intrinsic, rng))
    return results


def random_inputs(intrinsic: Intrinsic, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A random array per operand (0-d for scalars), within each operand's declared range.

    Integers span their whole range (or the declared one), with its two ends placed first so
    that extreme values (-128, long int32 wraparounds) are always exercised.
    """
    return {operand.name: _random_array(operand, rng) for operand in intrinsic.operands}


def _random_array(operand: Operand, rng: np.random.Generator) -> np.ndarray:
    dtype = operand.dtype
    if dtype.is_bool:
        return rng.integers(0, 2, size=operand.shape).astype(np.bool_)
    if dtype.is_int:
        low, high = operand.value_range or (dtype.min, dtype.max)
        values = rng.integers(int(low), int(high), size=operand.shape, endpoint=True,
                              dtype=np.int64 if dtype.kind == "int" else np.uint64)
        flat = values.reshape(-1)
        flat[:2] = (int(low), int(high))[:flat.size]
        return flat.reshape(operand.shape).astype(dtype.numpy)
    low, high = operand.value_range or (-1.0, 1.0)
    # Interpolate rather than rng.uniform(low, high), whose high - low overflows for a range
    # spanning most of float64.
    weight = rng.random(size=operand.shape)
    return np.asarray(float(low) * (1.0 - weight) + float(high) * weight, dtype.numpy)


def compare(intrinsic: Intrinsic, got: np.ndarray, want: np.ndarray,
            inputs: Mapping[str, np.ndarray], checker: str) -> CheckResult:
    """Exact for integers; for floats, within :func:`tolerance`."""
    name = intrinsic.name
    if got.shape != want.shape:
        return CheckResult(name, checker, ERROR, detail=f"the executor returned shape "
                           f"{list(got.shape)}, expected {list(want.shape)}")
    dtype = intrinsic.output.dtype
    if dtype.is_float:
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        diff = np.where(np.isnan(diff), np.inf, diff)
        limit = tolerance(intrinsic, want, inputs)
    else:
        diff = np.abs(got.astype(object) - want.astype(object)).astype(np.float64)
        limit = 0.0
    worst = float(diff.max()) if diff.size else 0.0
    if worst <= limit:
        return CheckResult(name, checker, OK, worst, limit)
    where = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))
    return CheckResult(name, checker, MISMATCH, worst, limit, where=where)


def tolerance(intrinsic: Intrinsic, want: np.ndarray,
              inputs: Mapping[str, np.ndarray]) -> float:
    """Rounding allowance for a float result: (terms + 2) ulps of its largest magnitude.

    For a product-sum, the magnitude is the sum of the terms' absolute values (the model run
    on absolute inputs); otherwise the largest result.
    """
    dtype = intrinsic.output.dtype
    eps = float(ml_dtypes.finfo(dtype.numpy).eps)
    terms = math.prod(iv.extent for iv in intrinsic.iter_vars
                      if iv.var in intrinsic.reduce_vars())
    magnitude = float(np.max(np.abs(want.astype(np.float64)), initial=0.0))
    term = accumulated_term(intrinsic.semantics)
    if term is not None and einsum_subscripts(intrinsic, term) is not None:
        absolute = {o.name: np.abs(inputs[o.name]) if o.dtype.is_float else inputs[o.name]
                    for o in intrinsic.operands}
        magnitude = max(magnitude, float(np.max(np.abs(
            numpy_model(intrinsic, absolute).astype(np.float64)), initial=0.0)))
    return (terms + 2) * eps * magnitude


def check_accumulation(intrinsic: Intrinsic, inputs: Mapping[str, np.ndarray],
                       checker: str) -> CheckResult:
    """The hardware-order model (:func:`intrinsics.oracle.hardware_model`) against the exact
    product-sum in float64, within :func:`accumulation_bound`: the stated order, rounding
    and denormals may not stray further from the mathematics than the bound says."""
    try:
        got = hardware_model(intrinsic, inputs)
    except UnsupportedSemantics as err:
        return CheckResult(intrinsic.name, checker, ERROR, detail=f"its accumulation is "
                           f"stated for semantics the hardware-order model cannot run: {err}")
    exact, magnitude = _float64_sum(intrinsic, inputs)
    diff = np.abs(got.astype(np.float64) - exact)
    diff = np.where(np.isnan(diff), np.inf, diff)
    limit = accumulation_bound(intrinsic, magnitude)
    excess = diff - limit
    worst = float(diff.max()) if diff.size else 0.0
    if not diff.size or float(excess.max()) <= 0:
        return CheckResult(intrinsic.name, checker, OK, worst, float(np.max(limit, initial=0)))
    at = int(np.argmax(excess))
    where = tuple(int(i) for i in np.unravel_index(at, diff.shape))
    return CheckResult(intrinsic.name, checker, MISMATCH, float(diff.flat[at]),
                       float(limit.flat[at]), detail="hardware order against float64",
                       where=where)


def accumulation_bound(intrinsic: Intrinsic, magnitude: np.ndarray) -> np.ndarray:
    """How far, per element, the hardware's result may be from the exact float64 sum:
    ``gamma_K * magnitude + (K + 1) * tiny``. ``magnitude`` is ``|C| + sum |x * y|`` per
    element and K the products added, each sum rounded once with unit roundoff u
    (``gamma_K = K u / (1 - K u)``, the bound of a recursive sum, Higham's Accuracy and
    Stability, section 4.2); ``tiny`` (the smallest normal) covers each denormal the
    hardware flushes, K results and the starting accumulator. Round to odd errs by up to
    a whole unit in the last place, so u is then the machine epsilon; and the ``pairwise``
    order's products are no more often rounded (once in their pair's sum, then in each
    accumulation), but each product and each pair's sum may flush too: 2K + 1 flushes."""
    dtype = intrinsic.output.dtype
    info = ml_dtypes.finfo(dtype.numpy)
    rule = intrinsic.accumulation
    terms = math.prod(iv.extent for iv in intrinsic.iter_vars
                      if iv.var in intrinsic.reduce_vars())
    unit = float(info.eps) / (1 if rule is not None and rule.rounding == "odd" else 2)
    gamma = terms * unit / (1 - terms * unit)
    if rule is None or rule.denormals != "flush":
        return gamma * magnitude
    results = 2 * terms if rule.order == "pairwise" else terms
    return gamma * magnitude + (results + 1) * float(info.smallest_normal)


def _float64_sum(intrinsic: Intrinsic, inputs: Mapping[str, np.ndarray]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The product-sum in float64 (no rounding but float64's, no flushing) and, per
    element, ``|C| + sum |x * y|``."""
    term = accumulated_term(intrinsic.semantics)
    pattern = None if term is None else einsum_subscripts(intrinsic, term)
    if pattern is None:
        raise UnsupportedSemantics("no product of loads indexed by plain iterators")
    subscripts, loads, _ = pattern
    names = {o.buffer: o.name for o in intrinsic.operands}
    x, y = (np.asarray(inputs[names[load.buffer]]).astype(np.float64) for load in loads)
    out = intrinsic.output
    start = np.zeros(out.shape) if intrinsic.resets \
        else np.asarray(inputs[out.name]).astype(np.float64)
    exact = start + np.einsum(subscripts, x, y)
    magnitude = np.abs(start) + np.einsum(subscripts, np.abs(x), np.abs(y))
    return exact, magnitude
