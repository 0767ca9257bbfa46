"""A fused epilogue's stores paired (targets/cuda/hopper_epilogue.py): where N is even, each
register pair of a row (two adjacent columns, the store intrinsic's `pair` helper) is
written by one store of twice the element's width, bounded once a pair; an odd N stores
element by element. Exact under the emulation on ragged edges against the host reference
executor; a pair off its alignment reported by name; fewer, wider STG in the SASS."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from intrinsics import default_registry, load_registry
from intrinsics.registry import BUILTIN_DIR
from targets import cuda, host
from targets.cuda.compile import cuobjdump_path, nvcc_path, sass_opcodes
from targets.cuda.emulate import COPY_MODES
from tensorize.engine import auto_tensorize
from tensorize.engine.cuda_hopper import HOPPER_ARCH, hopper_kernel
from tests.targets.cuda.test_hopper_epilogue import (_check, _float_gemm, _inputs, _requantised,
                                                     _taken)

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                               reason="no host C++ compiler to build the emulation")
PAIR = "tz_wgmma_store_pair(&narrowed[static_cast<long long>(tz_row) * 130 + tz_first], "


def _epilogue(kernel: cuda.CudaKernel) -> str:
    return kernel.source[kernel.source.index("tz_wgmma_wait_group<0>();"):]


def test_an_even_n_stores_each_register_pair_once_bounded_by_its_first_column():
    _, kernel = _taken(_float_gemm(65, 130, 40, "float16", "float16"))
    epilogue = _epilogue(kernel)
    for line in ("for (int tz_p = 0; tz_p < 32; tz_p += 2)",
                 "if (tz_row < 65 && tz_first < 130)",
                 "const int tz_r = tz_p + tz_e, tz_col = tz_first + tz_e;",
                 PAIR + "tz_pair[0], tz_pair[1]);"):
        assert line in epilogue, line
    assert epilogue.count("narrowed[") == 1


def test_an_odd_n_stores_element_by_element():
    _, kernel = _taken(_float_gemm(65, 131, 40, "float16", "float16"))
    epilogue = _epilogue(kernel)
    assert "tz_wgmma_store_pair" not in epilogue
    assert "narrowed[static_cast<long long>(tz_row) * 131 + tz_col] = " in epilogue


def test_a_store_intrinsic_naming_another_pair_helper_is_refused_at_its_yaml_line(tmp_path):
    text = (BUILTIN_DIR / "cuda_wgmma.yaml").read_text()
    (tmp_path / "cuda_wgmma.yaml").write_text(text.replace("pair: tz_wgmma_store_pair",
                                                           "pair: tz_store_two"))
    registry = load_registry([BUILTIN_DIR / "cuda.yaml", tmp_path / "cuda_wgmma.yaml"])
    func = _requantised(70, 130, 40)
    result = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH)
    assert result.hopper.gemm is None
    assert ("parameter 'pair' requires the helper tz_wgmma_store_pair, got 'tz_store_two'"
            in result.hopper.reason)


# ---- exact under the emulation on ragged edges --------------------------------------------------

RAGGED = [
    # N = 130: two 64-wide tiles and a third holding two columns, one pair.
    ("float16 pairs, N = 130", lambda: _float_gemm(65, 130, 40, "float16", "float16")),
    # N = 66 on 64-wide tiles: int8 pairs (2-byte stores), the last tile one pair wide.
    ("int8 pairs, N = 66", lambda: _requantised(70, 66, 40)),
    ("bfloat16 alone, N = 131", lambda: _float_gemm(100, 131, 64, "bfloat16", "bfloat16")),
]


@pytest.mark.slow
@needs_gxx
@pytest.mark.parametrize("copies", COPY_MODES)
@pytest.mark.parametrize("name, build", RAGGED, ids=[c[0] for c in RAGGED])
def test_paired_stores_are_exact_on_ragged_edges(name, build, copies):
    func = build()
    _, kernel = _taken(func)
    inputs = _inputs(func, seed=9)
    output = func.params[-1]
    got = cuda.emulate(kernel, inputs, copies=copies)[output.name]
    _check(output.dtype, got, host.run(func, inputs)[output.name])


@pytest.mark.slow
@needs_gxx
def test_a_pair_off_its_alignment_is_reported_by_name():
    func = _float_gemm(65, 130, 40, "float16", "float16")
    _, kernel = _taken(func)
    assert kernel.source.count(PAIR) == 1
    broken = dataclasses.replace(kernel, source=kernel.source.replace(
        PAIR, PAIR.replace("tz_first]", "tz_first + 1]")))
    with pytest.raises(cuda.EmulationError,
                       match=r"4-byte store to 0x[0-9a-f]+: the address is not 4-byte aligned"):
        cuda.emulate(broken, _inputs(func, seed=9))


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found")
@pytest.mark.skipif(cuobjdump_path() is None, reason="cuobjdump not found (the sass extra)")
@pytest.mark.parametrize("build, stores", [
    (lambda: _requantised(4096, 4096, 4096), {"STG.E.U16": 32}),
    (lambda: _float_gemm(4096, 4096, 4096, "float16", "float16"), {"STG.E": 32}),
    # An odd N: one store an element (64 of the narrow type).
    (lambda: _float_gemm(4095, 4095, 4096, "float16", "float16"), {"STG.E.U16": 64}),
])
def test_paired_stores_halve_the_epilogues_stg(build, stores):
    func = build()
    registry = default_registry()
    gemm = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH).hopper.gemm
    kernel = hopper_kernel(gemm, registry, func.name)
    (counts,) = [c for name, c in sass_opcodes(kernel, HOPPER_ARCH, modifiers=True).items()
                 if name.endswith("_gemm")]
    assert {o: c for o, c in counts.items() if o.startswith("STG")} == stores
