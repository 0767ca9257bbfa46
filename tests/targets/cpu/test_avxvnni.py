"""The optional AVX-VNNI target (intrinsics/optional/x86_avxvnni.yaml): 256-bit VPDPBUSD in
its VEX encoding, loaded for a run with --intrinsics-dir, compiled here, and run only on a
host that has AVX-VNNI; elsewhere refused with the reason."""

from pathlib import Path

import numpy as np
import pytest

from intrinsics import default_registry
from targets import cpu
from targets.cpu.host import host_arch, missing_features
from tensorize.cli import main
from tensorize.engine import auto_tensorize
from tests.targets.cpu.conftest import builders

OPTIONAL = Path(__file__).resolve().parents[3] / "intrinsics" / "optional"
REGISTRY = default_registry([OPTIONAL])
TARGET = REGISTRY.cpu("x86_avxvnni")
HOST_LACKS = host_arch() != "x86_64" or bool(missing_features(TARGET, frozenset({"avxvnni"})))


def _kernel(m: int, n: int, k: int) -> cpu.CpuKernel:
    result = auto_tensorize(builders()["gemm_u8s8"](m, n, k), "x86_avxvnni",
                            registry=REGISTRY)
    assert [b.intrinsic for b in result.tensorized] == ["x86_avxvnni_vpdpbusd"]
    return cpu.emit(result.func, "x86_avxvnni", registry=REGISTRY)


def test_the_optional_target_is_not_built_in() -> None:
    assert "x86_avxvnni" not in default_registry().targets
    assert (TARGET.vector_bytes, TARGET.registers, TARGET.default_features) == (
        32, 16, "+avx2,+avxvnni")


def test_the_kernel_uses_the_vex_form_on_ymm_registers() -> None:
    kernel = _kernel(33, 17, 40)
    asm = cpu.compile(kernel, "asm")
    assert "{vex}\tvpdpbusd\t%ymm" in asm and "%zmm" not in asm


@pytest.mark.skipif(not HOST_LACKS, reason="this host has AVX-VNNI")
def test_a_host_without_avx_vnni_refuses_the_run_with_the_reason(tmp_path, capsys) -> None:
    kernel = _kernel(16, 16, 16)
    engine, reason = cpu.engine_for(kernel)
    assert engine is None and "lacks avxvnni" in reason
    script = Path(__file__).resolve().parents[3] / "examples" / "script" / "gemm_u8s8.py"
    assert main(["run", str(script), "--target", "x86_avxvnni", "--intrinsics-dir",
                 str(OPTIONAL), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "skip run         not run: native: the host CPU lacks avxvnni" in out
    assert "ok   run" not in out


@pytest.mark.skipif(HOST_LACKS, reason="the host lacks AVX-VNNI")
@pytest.mark.parametrize("shape", [(15, 16, 17), (33, 17, 40)])
def test_on_a_host_with_avx_vnni_it_runs_exactly(shape) -> None:
    kernel = _kernel(*shape)
    m, n, k = shape
    rng = np.random.default_rng(0)
    inputs = {"A": rng.integers(0, 256, (m, k), dtype=np.uint8),
              "B": rng.integers(-128, 128, (k, n), dtype=np.int8)}
    got = cpu.run(kernel, inputs).outputs["C"]
    np.testing.assert_array_equal(got, inputs["A"].astype(np.int32) @
                                  inputs["B"].astype(np.int32))
