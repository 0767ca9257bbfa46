"""Time to auto-tensorize each kernel of the suite (examples/te/suite.py) for each target:
matching, the rewrite to the intrinsic's shape, and the target's schedule. Figures, not
assertions.

    .venv/bin/python bench/bench_tensorize.py
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

from intrinsics import default_registry
from tensorize.engine import auto_tensorize
from tensorize.runners import make_context

_SUITE = Path(__file__).resolve().parents[1] / "examples" / "te" / "suite.py"
TARGETS = ("npu", "arm", "cuda")


def _suite() -> dict:
    spec = importlib.util.spec_from_file_location("suite", _SUITE)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {_SUITE}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kernels()


def main() -> None:
    """Print one row per kernel: the intrinsic chosen and the time per target."""
    registry = default_registry()
    # The edge's settings per target: the NPU's machine is the built-in one.
    machines = {t: make_context(registry, t).machine for t in TARGETS}
    auto_tensorize(_suite()["gemm_int8"], "npu", registry=registry,
                   config=machines["npu"])  # warm caches
    print(f"{'kernel':<24}" + "".join(f"{t:>34}" for t in TARGETS))
    for name, func in _suite().items():
        cells = []
        for target in TARGETS:
            start = time.perf_counter()
            result = auto_tensorize(func, target, registry=registry, config=machines[target])
            elapsed = time.perf_counter() - start
            used = ",".join(sorted({b.intrinsic for b in result.tensorized})) or "-"
            cells.append(f"{used[:24]:>24} {elapsed * 1e3:6.0f} ms")
        print(f"{name:<24}" + "".join(f"{c:>34}" for c in cells))


if __name__ == "__main__":
    main()
