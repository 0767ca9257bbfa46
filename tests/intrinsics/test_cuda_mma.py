"""The mma.sync + ldmatrix family (intrinsics/cuda_mma.yaml) as data: it loads beside WMMA
for target cuda, its register shapes agree with its tiles, and its templates call only the
allowlisted helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

from intrinsics import load_registry
from intrinsics.grammars import CUDA_FUNCTIONS
from intrinsics.registry import BUILTIN_DIR
from intrinsics.templates import parse
from ir.errors import IntrinsicSpecError

FAMILY = BUILTIN_DIR / "cuda_mma.yaml"


@pytest.fixture(scope="module")
def family():
    return load_registry([BUILTIN_DIR / "cuda.yaml", FAMILY]).family("cuda_mma")


def test_the_family_is_a_second_cuda_family_with_every_input_pair(family) -> None:
    assert family.target == "cuda"
    compute = {i.name: i for i in family.intrinsics if i.kind == "compute"}
    assert set(compute) == {
        "mma_m16n8k16_f16f16_f32", "mma_m16n8k16_bf16bf16_f32", "mma_m16n8k32_s8s8_s32",
        "mma_m16n8k32_u8u8_s32", "mma_m16n8k32_u8s8_s32", "mma_m16n8k32_s8u8_s32",
        "mma_m16n8k32_e4m3e4m3_f32", "mma_m16n8k32_e5m2e5m2_f32", "mma_m16n8k32_e4m3e5m2_f32",
        "mma_m16n8k32_e5m2e4m3_f32", "mma_m16n8k64_s4s4_s32", "mma_m16n8k64_u4u4_s32",
        "mma_m16n8k64_s4u4_s32", "mma_m16n8k64_u4s4_s32"}
    mixed = compute["mma_m16n8k32_u8s8_s32"]
    assert [o.dtype.name for o in mixed.operands] == ["uint8", "int8", "int32"]
    assert mixed.semantics_text == "C[i, j] += s32(A[i, k]) * s32(B[k, j])"
    assert {i.feature for i in compute.values()} == {"sm_75", "sm_80", "sm_89"}
    assert compute["mma_m16n8k32_e4m3e5m2_f32"].feature == "sm_89"
    assert compute["mma_m16n8k16_f16f16_f32"].feature == "sm_75"
    # One scale with WMMA's, the input type's rate on sm_80: 16 cycles per 4096 16-bit
    # multiply-accumulates, 8 per 4096 8-bit ones, 4 per 4096 4-bit ones (A100: 312 TFLOPS
    # f16, 624 TOPS int8, 1248 TOPS int4; Ada's fp8 runs at its int8 rate).
    registry = load_registry([BUILTIN_DIR / "cuda.yaml", FAMILY])
    wmma = {i.name: i for i in registry.family("cuda").intrinsics if i.kind == "compute"}
    for intrinsic in [*compute.values(), *wmma.values()]:
        macs = 1
        for extent in intrinsic.extents:
            macs *= extent
        per_4096 = {4: 4, 8: 8}.get(intrinsic.operands[0].dtype.bits, 16)
        per_4096 *= 2 if intrinsic.operands[0].dtype.bits == 32 else 1
        assert intrinsic.cost.interval * 4096 == per_4096 * macs, intrinsic.name


def test_each_lane_holds_one_thirty_second_of_each_tile(family) -> None:
    # A fragment is spread over the 32 lanes: lane_registers 32-bit words each.
    movers = [i for i in family.intrinsics if i.kind != "compute"]
    assert len(movers) == 20
    for intrinsic in movers:
        fragment = next(o for o in intrinsic.operands if o.scope.startswith("mma."))
        words = intrinsic.params["lane_registers"]
        # Registers hold values packed (two 4-bit values a byte), whatever memory holds.
        assert words * 32 * 32 == fragment.buffer.size * fragment.dtype.bits, intrinsic.name
        assert intrinsic.params["register_dtype"] in ("u32", "f32", "s32")


def test_templates_call_only_the_allowlisted_helpers(family) -> None:
    for intrinsic in family.intrinsics:
        name = parse("cuda", intrinsic.emit["cuda"]).pieces[0].text.split("(")[0].strip()
        assert name in CUDA_FUNCTIONS and name.startswith("tz_"), intrinsic.name


def test_raw_ptx_in_a_template_is_refused_at_its_line(tmp_path: Path) -> None:
    text = FAMILY.read_text()
    right = 'cuda: "tz_ldmatrix_x4({dst}, {src}, {src.ld_bytes});"'
    assert text.count(right) == 1
    line = text[:text.index(right)].count("\n") + 1
    broken = tmp_path / "cuda_mma.yaml"
    broken.write_text(text.replace(
        right, "cuda: 'asm(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {dst}, [{src}];\");'"))
    with pytest.raises(IntrinsicSpecError, match="requires a call of") as caught:
        load_registry([BUILTIN_DIR / "cuda.yaml", broken])
    assert f"cuda_mma.yaml:{line}:" in str(caught.value)
