"""Kernels tuned per kernel for a scheduling model (the description's ``tune_cpus``): the
``tune-cpu`` attribute in the emitted IR, the tuner's choice by executed instructions, and
the tuned kernels exact against numpy; a name outside the list, or not an LLVM CPU name, is
refused with the reason."""

from pathlib import Path

import numpy as np
import pytest

from intrinsics import load_registry
from intrinsics.registry import BUILTIN_DIR
from ir import IntrinsicSpecError
from targets import cpu
from tensorize.engine import auto_tensorize
from tensorize.engine.cpu_tune import choose_tune_cpu
from tests.tensorize.schedule.kernels import gemm_int8


def test_the_tuning_cpu_is_a_string_attribute_and_the_default_adds_none(registry) -> None:
    func = auto_tensorize(gemm_int8(16, 16, 32), "arm", registry=registry).func
    default = cpu.emit(func, "arm", registry=registry).llvm_ir
    tuned = cpu.emit(func, "arm", tune_cpu="cortex-a55", registry=registry).llvm_ir
    assert default.endswith('attributes #0 = { "no-builtins" }\n')
    assert tuned.endswith('attributes #0 = { "no-builtins" "tune-cpu"="cortex-a55" }\n')


def test_a_tuning_cpu_outside_the_description_is_refused(registry) -> None:
    func = auto_tensorize(gemm_int8(16, 16, 32), "arm", registry=registry).func
    with pytest.raises(cpu.EmitError, match=r"cpu target arm: tune_cpu 'cortex-a53' is not "
                       r"one of its tune_cpus \(generic, cortex-a55, neoverse-v1\)"):
        cpu.emit(func, "arm", tune_cpu="cortex-a53", registry=registry)


# 64^3 runs fewer instructions tuned for cortex-a55; 100x37x50's edge tiles fewer with
# generic (docs/arm_backend.md, Figures): the choice follows the counts, not the shape.
# In CI's slow pass: the default run checks the tuner's choice by counted instructions on
# the i8mm kernels (test_step_loads) and on the host CPU (tests/targets/cpu/test_tune.py).
@pytest.mark.slow
@pytest.mark.parametrize("shape", [(64, 64, 64), (100, 37, 50)])
def test_the_tuner_keeps_the_cpu_that_runs_fewest_instructions_and_it_is_exact(
        shape: tuple[int, int, int], registry) -> None:
    m, n, k = shape
    func = gemm_int8(m, n, k)
    kernel, counts = choose_tune_cpu(auto_tensorize(func, "arm", registry=registry).func, "arm",
                                     registry=registry)
    assert set(counts) == {"generic", "cortex-a55", "neoverse-v1"}
    assert all(isinstance(c, int) and c > 0 for c in counts.values())
    best = min(counts, key=lambda name: counts[name])
    assert ('"tune-cpu"="cortex-a55"' in kernel.llvm_ir) == (best == "cortex-a55")
    assert ('"tune-cpu"="neoverse-v1"' in kernel.llvm_ir) == (best == "neoverse-v1")
    rng = np.random.default_rng(m)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    result = cpu.run(kernel, {"A": a, "B": b})
    assert result.instructions == counts[best]
    np.testing.assert_array_equal(result.outputs["C"],
                                  a.astype(np.int32) @ b.astype(np.int32))


def test_a_tuning_cpu_that_is_not_an_llvm_name_is_refused_at_its_line(tmp_path: Path) -> None:
    text = (BUILTIN_DIR / "arm.yaml").read_text()
    broken = tmp_path / "arm.yaml"
    broken.write_text(text.replace("tune_cpus: [generic, cortex-a55, neoverse-v1]",
                                   'tune_cpus: [generic, "a55\\" \\"x"]'))
    with pytest.raises(IntrinsicSpecError) as caught:
        load_registry([broken])
    messages = [str(f) for f in caught.value.findings]
    assert any("cpu target arm: tune_cpus requires LLVM CPU names (lower-case letters, "
               "digits, '.', '-'), got 'a55\" \"x'" in m and "arm.yaml" in m
               for m in messages), messages
