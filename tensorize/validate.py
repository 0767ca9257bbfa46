"""Checking a run's outputs: random inputs over a dtype's whole range, and the comparison of
an output with its reference (exact for integers, a relative tolerance per float dtype; bit
for bit for a float output whose hardware-order reference is known, :class:`Expected`).

Shared by ``tensorize run``, ``tensorize sweep`` and anything else that proves a tensorized
kernel by running it; :class:`HostRuns` are the validate step's runs of the kernel before and
after tensorizing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ir import PrimFunc

# Float outputs are compared to a float64 numpy reference with this relative tolerance per
# dtype (accumulation order differs, so exact equality would be wrong for floats).
_RTOL = {"float16": 2e-2, "bfloat16": 5e-2, "float32": 1e-4, "float64": 1e-10}


def random_array(shape: tuple[int, ...], dtype: Any, rng: np.random.Generator) -> np.ndarray:
    """Random values over an integer dtype's whole range, or standard normal floats."""
    if dtype.is_int:
        return rng.integers(dtype.min, dtype.max + 1, shape).astype(dtype.numpy)
    return rng.standard_normal(shape).astype(dtype.numpy)


def compare(got: np.ndarray, want: np.ndarray, rtol: float | None = None) -> tuple[bool, str]:
    """Exact comparison for integers, relative tolerance for floats; (ok, one-line detail).

    Both sides are compared in a type that holds every value of either, never narrowed to
    ``got``'s dtype: a reference off by 2**32 from an int32 output differs. A float output
    is within tolerance when its largest difference from the reference is at most ``rtol``
    (by default the output dtype's) times the reference's largest magnitude; infinities and
    NaNs must sit where the reference has them."""
    if got.shape != want.shape:
        return False, f"shape {got.shape} but the reference gives {want.shape}"
    if want.dtype.kind in "iub" and got.dtype.kind not in "iub":
        return False, f"dtype {got.dtype} but the reference gives {want.dtype}"
    if got.dtype.kind in "iub":
        common = _exact_common_type(got.dtype, want.dtype)
        wrong = got.astype(common) != want.astype(common)
        mismatched = int(np.count_nonzero(wrong))
        if mismatched:
            where = tuple(int(x) for x in np.argwhere(wrong)[0])
            return False, (f"{mismatched} of {got.size} elements differ, first at {where}: "
                           f"{got[where]} vs {want[where]}")
        return True, f"all {got.size} elements equal (exact)"
    rtol = _RTOL.get(got.dtype.name, 1e-4) if rtol is None else rtol
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(want64)
    if not np.array_equal(np.isfinite(got64), finite):
        return False, "non-finite values where the reference has finite ones, or the reverse"
    scale = max(float(np.max(np.abs(want64[finite]), initial=0.0)), 1e-30)
    error = float(np.max(np.abs(got64 - want64)[finite], initial=0.0)) / scale
    return error <= rtol, f"max error {error:.2e} of the largest value (tolerance {rtol:g})"


def _exact_common_type(got: np.dtype, want: np.dtype) -> np.dtype:
    """A dtype holding every value of an integer ``got`` and of ``want`` exactly: their
    integer promotion, float64 against a float, Python integers where no fixed-width integer
    holds both (uint64 against a signed type)."""
    if want.kind not in "iub":
        return np.dtype(np.float64)
    common = np.result_type(got, want)
    return common if common.kind in "iub" else np.dtype(object)


@dataclass(frozen=True)
class HardwareOrder:
    """A float output as the target computes it: ``values`` bit for bit (by the
    accumulation rule ``rule``, in words, of intrinsic ``intrinsic``), ``exact`` the float64
    result and ``bound`` how far from it, per element, the hardware may lie
    (docs/intrinsics.md, "Float accumulation")."""

    values: np.ndarray
    exact: np.ndarray
    bound: np.ndarray
    rule: str
    intrinsic: str

    def check(self, got: np.ndarray) -> tuple[bool, str]:
        """``got`` equal to ``values`` bit for bit and within ``bound`` of ``exact``;
        (ok, one-line detail)."""
        where = f"the hardware-order reference ({self.rule}) of {self.intrinsic}"
        if got.shape != self.values.shape or got.dtype != self.values.dtype:
            return False, (f"{got.dtype}{list(got.shape)} but {where} is "
                           f"{self.values.dtype}{list(self.values.shape)}")
        uint = np.dtype(f"u{got.dtype.itemsize}")
        wrong = got.view(uint) != self.values.view(uint)
        if wrong.any():
            at = tuple(int(i) for i in np.argwhere(wrong)[0])
            return False, (f"{int(np.count_nonzero(wrong))} of {got.size} elements differ "
                           f"from {where}, first at {at}: {_bits(got[at])} vs "
                           f"{_bits(self.values[at])}")
        with np.errstate(invalid="ignore"):
            error = np.abs(got.astype(np.float64) - self.exact)
        outside = ~(error <= self.bound)
        largest = f"max error {float(np.max(error, initial=0.0)):.1e} of the float64 bound " \
                  f"{float(np.max(self.bound, initial=0.0)):.1e}"
        if outside.any():
            at = tuple(int(i) for i in np.argwhere(outside)[0])
            return False, (f"equal to {where}, yet {int(np.count_nonzero(outside))} elements "
                           f"lie outside the float64 bound, first at {at}: error "
                           f"{error[at]:.2e}, bound {self.bound[at]:.2e} ({largest})")
        return True, f"exact against {where}; {largest}"


class Expected(Mapping[str, np.ndarray]):
    """What a run's outputs are checked against: the reference executor's arrays (as a
    mapping, by output name), and, for the float outputs whose hardware order is known,
    their :class:`HardwareOrder`; for the others, why not (``reasons``)."""

    def __init__(self, outputs: Mapping[str, np.ndarray],
                 hardware: Mapping[str, HardwareOrder] | None = None,
                 reasons: Mapping[str, str] | None = None) -> None:
        self.outputs = dict(outputs)
        self.hardware = dict(hardware or {})
        self.reasons = dict(reasons or {})

    def __getitem__(self, name: str) -> np.ndarray:
        return self.outputs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.outputs)

    def __len__(self) -> int:
        return len(self.outputs)

    def check(self, name: str, got: np.ndarray) -> tuple[bool, str]:
        """Output ``name`` against its hardware-order reference where there is one, else
        against the reference executor's (:func:`compare`); (ok, the words "against ...:
        detail")."""
        order = self.hardware.get(name)
        if order is not None:
            return order.check(got)
        ok, detail = compare(got, self.outputs[name])
        why = self.reasons.get(name)
        tail = f"; not bit for bit: {why}" if why else ""
        return ok, f"against the reference executor: {detail}{tail}"


def _bits(value: np.generic) -> str:
    """A float and its bit pattern: "1.5 (0x3fc00000)"."""
    uint = np.dtype(f"u{value.dtype.itemsize}")
    bits = int(np.asarray(value).view(uint))
    return f"{float(value):.9g} (0x{bits:0{2 * value.dtype.itemsize}x})"


class HostRuns:
    """The validate step's two runs on the host's LLVM JIT: the untouched kernel and the
    tensorized one (each intrinsic run as its semantics, through ``lower_intrinsic``), on
    copies of the same inputs.

    Both are compiled on the calling thread (compiling walks the IR, which may need that
    thread's deep stack) and each runs on a thread of its own, which the compiled code runs
    without the interpreter lock: a runner's own work (the NPU's simulation) goes on beside
    them, so a large kernel waits for the longest of the three rather than their sum, and
    where the runner's work ends first the two runs take a core each rather than one after
    the other. :meth:`outputs` waits for them.
    """

    def __init__(self, original: PrimFunc, tensorized: PrimFunc,
                 inputs: Mapping[str, np.ndarray], lower_intrinsic: Callable[..., Any]) -> None:
        from targets import host
        from targets.host.executable import gather_inputs

        self._runs = [(host.compile(original), gather_inputs(original, inputs)),
                      (host.compile(tensorized, lower_intrinsic),
                       gather_inputs(tensorized, inputs))]
        self._errors: list[BaseException | None] = [None] * len(self._runs)
        # Daemons: a run that fails elsewhere does not wait for them to exit.
        self._threads = [threading.Thread(target=self._run, args=(n,), name=f"validate-{n}",
                                          daemon=True) for n in range(len(self._runs))]
        for thread in self._threads:
            thread.start()

    def _run(self, n: int) -> None:
        compiled, arrays = self._runs[n]
        try:
            compiled(*arrays)
        except BaseException as err:  # handed to the thread that waits in outputs()
            self._errors[n] = err

    def outputs(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Wait for both runs: the arrays each writes, by parameter name (the untouched
        kernel's, then the tensorized one's); what a run raised is raised here (the
        untouched kernel's first)."""
        for thread in self._threads:
            thread.join()
        for error in self._errors:
            if error is not None:
                raise error
        written = []
        for compiled, arrays in self._runs:
            names = {id(p) for p in compiled.written}
            written.append({p.name: a for p, a in zip(compiled.func.params, arrays)
                            if id(p) in names})
        return written[0], written[1]
