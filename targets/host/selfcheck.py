"""The semantic self-check of intrinsic descriptions, run by the reference executor.

:class:`SemanticsChecker` is the :class:`intrinsics.selfcheck.Checker` that runs an
intrinsic's ``desc_func()`` (its semantics statement as a function) on random inputs with this
backend and compares the output with the independent numpy model of :mod:`intrinsics.oracle`
and, where the intrinsic states its ``accumulation``, its hardware-order model with float64
(:func:`intrinsics.selfcheck.check_accumulation`).
It lives here, not in ``intrinsics/``, because descriptions never import a backend: the caller
(``tensorize intrinsics validate``, the tests) hands it to :func:`intrinsics.self_check`.
"""

from __future__ import annotations

import numpy as np

import ir
import targets.host as host_backend
from intrinsics.model import Intrinsic
from intrinsics.oracle import UnsupportedSemantics, numpy_model
from intrinsics.selfcheck import (
    ERROR,
    OK,
    SKIPPED,
    CheckResult,
    check_accumulation,
    compare,
    random_inputs,
)


class SemanticsChecker:
    """The semantics run by the reference executor vs. the independent numpy model."""

    name = "semantics"

    def __init__(self, trials: int = 1) -> None:
        self.trials = trials

    def applies(self, intrinsic: Intrinsic) -> bool:
        return intrinsic.kind == "compute"

    def check(self, intrinsic: Intrinsic, rng: np.random.Generator) -> CheckResult:
        worst = CheckResult(intrinsic.name, self.name, OK)
        func = intrinsic.desc_func()
        for _ in range(self.trials):
            inputs = random_inputs(intrinsic, rng)
            try:
                want = numpy_model(intrinsic, inputs)
            except UnsupportedSemantics as err:
                return CheckResult(intrinsic.name, self.name, SKIPPED, detail=str(err))
            try:
                results = host_backend.run(func, inputs)
            except ir.TensorizeError as err:
                return CheckResult(intrinsic.name, self.name, ERROR,
                                   detail=f"the reference executor failed: {err.message}")
            got = np.asarray(results[intrinsic.output.name])
            result = compare(intrinsic, got, want, inputs, self.name)
            if not result.failed and intrinsic.accumulation is not None:
                result = check_accumulation(intrinsic, inputs, self.name)
            if result.failed:
                return result
            if result.max_error >= worst.max_error:
                worst = result
        return worst
