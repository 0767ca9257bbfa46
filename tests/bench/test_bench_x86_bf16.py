"""``bench/bench_x86_bf16.py`` end to end at a small size: it checks our bf16 kernel bit for
bit against the hardware order before timing, and prints one line per contender. Native
only: skips, with the reason, where this host cannot run VDPBF16PS."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from intrinsics import default_registry
from targets import cpu
from tensorize.engine import auto_tensorize

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_x86_bf16.py"


@pytest.mark.slow
def test_the_bench_checks_and_times_a_small_gemm() -> None:
    engine, reason = cpu.engine_for(_small_kernel())
    if engine != "native":
        pytest.skip(reason)
    done = subprocess.run([sys.executable, str(BENCH), "--size", "64", "--rounds", "1"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "bit for bit against the hardware order" in out
    for label in ("packing included", "B packed once", "numpy f32 (BLAS, 1 thread)"):
        assert label in out


def _small_kernel() -> cpu.CpuKernel:
    """A bf16 kernel, to ask whether this host runs the bench's code natively."""
    spec = importlib.util.spec_from_file_location("bench_x86_bf16", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    registry = default_registry()
    func = auto_tensorize(bench.gemm_bf16(32), "x86", registry=registry).func
    return cpu.emit(func, "x86", registry=registry)
