"""``bench/bench_x86.py``'s "B packed once" contenders, at a size that splits over 2 threads
(512 x 256 x 256, 2**24 MACs a part): the pack run once, then the per-call kernel on one
thread and the parts on two, sharing the one packed B, exact against numpy. Native only:
they skip, with the reason, where this host cannot run the x86 target's code."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from targets import cpu
from tensorize.engine import auto_tensorize

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str, as_name: str):
    spec = importlib.util.spec_from_file_location(as_name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[as_name] = module
    spec.loader.exec_module(module)
    return module


# The bench imports its neighbour as a script does (``import suite_kernels``).
_load("suite_kernels", "suite_kernels")
bench = _load("bench_x86", "bench_bench_x86")


def _gemm(name: str, a_low: int):
    """The bench's kernel ``name`` at 512 x 256 x 256 and its inputs (A from ``a_low``)."""
    func = bench.suite_kernels.builders()[name](512, 256, 256)
    rng = np.random.default_rng(0)
    inputs = {"A": rng.integers(a_low, a_low + 256, (512, 256),
                                dtype=func.params[0].dtype.numpy),
              "B": rng.integers(-128, 128, (256, 256), dtype=np.int8)}
    return func, inputs, inputs["A"].astype(np.int64) @ inputs["B"].astype(np.int64)


@pytest.mark.parametrize("name, a_low", [("gemm_u8s8", 0), ("gemm_int8", -128)])
def test_b_packed_once_gives_numpys_product_on_one_and_two_threads(registry, name, a_low):
    func, inputs, expected = _gemm(name, a_low)
    kernel, packed = bench.pack_once(auto_tensorize(func, "x86", registry=registry).func,
                                     "B", inputs, registry)
    reason = cpu.native_refusal(kernel)
    if reason is not None:
        pytest.skip(reason)
    assert "B_reindex" in packed and "B_reindex" in [p.name for p in kernel.func.params]
    np.testing.assert_array_equal(cpu.run(kernel, packed).outputs["C"], expected)
    parts = bench.PackedParts(func, inputs, 2, registry)
    assert [(p.start, p.rows) for p in parts.parts] == [(0, 256), (256, 256)]
    np.testing.assert_array_equal(parts.run(1).outputs["C"], expected)
