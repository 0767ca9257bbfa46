"""The built-in families load, validate, and say what the hardware manuals say."""

import pytest

import ir
from intrinsics import Registry, load_family
from intrinsics.registry import BUILTIN_DIR
from simulator.assembler import assemble
from simulator.config import load_machine
from simulator.isa import Gemm, Load, QAdd, Requant, Store, Vec

WMMA_SHAPES = ("m16n16k16", "m32n8k16", "m8n32k16")


@pytest.mark.parametrize("name", ["cuda", "arm", "npu", "x86"])
def test_builtin_family_loads(name: str) -> None:
    family = load_family(BUILTIN_DIR / f"{name}.yaml")
    assert family.name == name
    assert family.target == name
    assert family.intrinsics


def test_wmma_compute_variants_are_listed_as_data(registry: Registry) -> None:
    names = {i.name for i in registry.family("cuda").intrinsics if i.kind == "compute"}
    expected = {f"wmma_{shape}_{types}" for shape in WMMA_SHAPES
                for types in ("f16_f32", "f16_f16", "bf16_f32", "s8_s32", "u8_s32")}
    expected.add("wmma_m16n16k8_tf32_f32")
    assert names == expected


def test_wmma_f16_semantics_is_the_widening_product_sum(registry: Registry) -> None:
    mma = registry.get("wmma_m16n16k16_f16_f32")
    a, b, c = (mma.operand(n).buffer for n in "ABC")
    i, j, k = (iv.var for iv in mma.iter_vars)
    expected = ir.BufferStore(
        c, c[i, j] + ir.Cast(ir.dtypes.float32, a[i, k]) * ir.Cast(ir.dtypes.float32, b[k, j]),
        (i, j))
    assert ir.structural_equal(mma.semantics, expected)
    assert [o.scope for o in mma.operands] == ["wmma.matrix_a", "wmma.matrix_b",
                                               "wmma.accumulator"]
    assert mma.render("cuda", {"A": "a", "B": "b", "C": "c"}) == \
        "nvcuda::wmma::mma_sync(c, a, b, c);"


@pytest.mark.parametrize("name, shape, dtypes", [
    ("wmma_m32n8k16_u8_s32", (32, 8, 16), ("uint8", "uint8", "int32")),
    ("wmma_m8n32k16_bf16_f32", (8, 32, 16), ("bfloat16", "bfloat16", "float32")),
    ("wmma_m16n16k8_tf32_f32", (16, 16, 8), ("float32", "float32", "float32")),
    ("wmma_m16n16k16_f16_f16", (16, 16, 16), ("float16", "float16", "float16")),
])
def test_wmma_variant_shapes_and_dtypes(registry: Registry, name: str, shape: tuple[int, ...],
                                        dtypes: tuple[str, ...]) -> None:
    mma = registry.get(name)
    assert mma.extents == shape
    m, n, k = shape
    assert [o.shape for o in mma.operands] == [(m, k), (k, n), (m, n)]
    assert tuple(o.dtype.name for o in mma.operands) == dtypes


def test_wmma_companions_cover_both_layouts(registry: Registry) -> None:
    mma = registry.get("wmma_m16n16k8_tf32_f32")
    assert mma.loads["A"] == ("wmma_load_a_row_m16n16k8_tf32", "wmma_load_a_col_m16n16k8_tf32")
    assert mma.stores["C"] == ("wmma_store_row_m16n16k8_f32", "wmma_store_col_m16n16k8_f32")
    assert mma.fill["C"] == ("wmma_fill_m16n16k8_f32",)
    col = registry.get("wmma_load_a_col_m16n16k8_tf32")
    assert col.operand("src").layout == "col_major"
    assert col.operand("src").strides.leading_multiple_of == 4  # 16 bytes of float
    assert col.render("cuda", {"dst": "fa", "src": "p", "src.ld": "64"}) == \
        "nvcuda::wmma::load_matrix_sync(fa, p, 64);"


def test_every_companion_exists_with_its_kind(registry: Registry) -> None:
    kinds = {"loads": "load", "stores": "store", "fill": "fill"}
    for intrinsic in registry.compute_intrinsics():
        for field, kind in kinds.items():
            for names in getattr(intrinsic, field).values():
                assert all(registry.get(n).kind == kind for n in names), intrinsic.name


def test_arm_dot_products(registry: Registry) -> None:
    sdot = registry.get("arm_sdot_lane")
    assert sdot.extents == (4, 4)
    assert [o.shape for o in sdot.operands] == [(4,), (4, 4), (4,)]
    assert "@llvm.aarch64.neon.sdot.v4i32.v16i8(" in sdot.emit["llvm"]
    assert registry.get("arm_udot").operand("A").dtype == ir.dtypes.uint8
    usdot = registry.get("arm_usdot")
    assert (usdot.operand("A").dtype, usdot.operand("B").dtype) == (ir.dtypes.uint8,
                                                                      ir.dtypes.int8)


@pytest.mark.parametrize("name, a, b", [("arm_smmla", "int8", "int8"),
                                        ("arm_ummla", "uint8", "uint8"),
                                        ("arm_usmmla", "uint8", "int8")])
def test_arm_matrix_multiplies(registry: Registry, name: str, a: str, b: str) -> None:
    mmla = registry.get(name)
    assert mmla.extents == (2, 2, 8)
    assert [o.shape for o in mmla.operands] == [(2, 8), (2, 8), (2, 2)]
    assert (mmla.operand("A").dtype.name, mmla.operand("B").dtype.name) == (a, b)
    op = name.removeprefix("arm_")
    assert f"@llvm.aarch64.neon.{op}.v4i32.v16i8(" in mmla.emit["llvm"]


def test_npu_scopes_agree_with_the_machine_section(registry: Registry) -> None:
    machine = load_machine(BUILTIN_DIR / "npu.yaml")
    family = registry.family("npu")
    # An inp row holds R int8, a wgt row C int8, an acc row C int32 (R x C array).
    rows, cols = machine.array.rows, machine.array.cols
    for memory, row_bytes in (("inp", rows), ("wgt", cols), ("acc", cols * 4)):
        scope = family.scopes[f"npu.{memory}"]
        config = getattr(machine, memory)
        assert scope.capacity == config.rows * row_bytes
        assert scope.banks == config.banks
        assert scope.alignment == row_bytes
    assert family.machine_values()["array"] == {
        "rows": 16, "cols": 16, "dataflow": "weight_stationary",
        "double_buffered_weights": True, "latency": 4}


def test_npu_gemm_tile_comes_from_the_array(registry: Registry) -> None:
    machine = load_machine(BUILTIN_DIR / "npu.yaml")
    gemm = registry.get("npu_gemm")
    _, cols, depth = gemm.extents
    assert (cols, depth) == (machine.array.cols, machine.array.rows)
    assert registry.get("npu_gemm_reset").resets
    assert not gemm.resets


# Values standing in for addresses and immediates when rendering NPU templates.
_NPU_VALUES = {"A": "0", "B": "16", "C": "32", "D": "48", "S": "64", "R": "80", "dst": "0",
               "src": "0x100", "src.ld_bytes": "64", "dst.ld_bytes": "64", "imm": "-3",
               "lo": "-5", "hi": "5", "mult": "1073741824", "scale.log2": "30",
               "scale": "0x3f000000", "zp": "3", "P": "96"}


def test_every_npu_template_assembles(registry: Registry) -> None:
    kinds = {"compute": (Gemm, Vec, Requant, QAdd), "load": (Load,), "store": (Store,)}
    for intrinsic in registry.for_target("npu"):
        values = {k: v for k, v in _NPU_VALUES.items() if k.split(".")[0] in
                  {o.name for o in intrinsic.operands}}
        (instruction,) = assemble(intrinsic.render("npu", values))
        assert isinstance(instruction, kinds[intrinsic.kind]), intrinsic.name
        if isinstance(instruction, (Gemm, Vec, Requant, QAdd, Load, Store)):
            # A tile moves its 16 rows; a one-dimensional operand (a bias row) one row.
            rows = max((o.shape[0] for o in intrinsic.operands if len(o.shape) == 2), default=1)
            assert instruction.rows == rows, intrinsic.name


def test_npu_narrowing_store_and_reset_flags(registry: Registry) -> None:
    (narrow,) = assemble(registry.get("npu_store_acc_i8").render("npu", _NPU_VALUES))
    (wide,) = assemble(registry.get("npu_store_acc").render("npu", _NPU_VALUES))
    assert narrow.narrow and not wide.narrow
    (reset,) = assemble(registry.get("npu_gemm_reset").render("npu", _NPU_VALUES))
    assert reset.reset


def test_global_scope_is_one_memory_in_every_family(registry: Registry) -> None:
    scopes = [f.scopes["global"] for f in registry.families]
    assert len(scopes) == 6
    assert all(s.same_memory(scopes[0]) for s in scopes)
    assert scopes[0].capacity is None
