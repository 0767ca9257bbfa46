"""The Python model: desc_func, operand and intrinsic properties, template rendering."""

import pytest

import ir
from intrinsics import Registry


def _expected_desc(mma_name: str, registry: Registry, init: bool) -> ir.PrimFunc:
    """The desc_func written out by hand from the intrinsic's parts."""
    mma = registry.get(mma_name)
    a, b, c = (o.buffer for o in mma.operands)
    ivs = mma.iter_vars
    i, j, _ = (iv.var for iv in ivs)
    start = ir.BufferStore(c, ir.const(0, c.dtype), (i, j)) if init else None
    block = ir.Block(mma.name, ivs, tuple(ir.BufferRegion.full(x) for x in (a, b, c)),
                     (ir.BufferRegion.full(c),), mma.semantics, start)
    loops = [ir.Var(n) for n in "ijk"]
    body: ir.Stmt = ir.BlockRealize(tuple(loops), block)
    for var, iv in reversed(list(zip(loops, ivs))):
        body = ir.For(var, iv.extent, body)
    return ir.PrimFunc(mma.name, (a, b, c), ir.make_root(body))


def test_desc_func_is_loops_around_one_block(registry: Registry) -> None:
    func = registry.get("wmma_m16n16k16_f16_f32").desc_func()
    assert ir.structural_equal(func, _expected_desc("wmma_m16n16k16_f16_f32", registry, False))
    assert func.root.body.body.body.body.block.init is None


def test_desc_func_of_a_resetting_intrinsic_has_a_zero_init(registry: Registry) -> None:
    func = registry.get("npu_gemm_reset").desc_func()
    assert ir.structural_equal(func, _expected_desc("npu_gemm_reset", registry, True))


def test_desc_func_params_are_the_operands_in_order(registry: Registry) -> None:
    clip = registry.get("npu_vec_clip")
    func = clip.desc_func()
    assert [p.name for p in func.params] == ["D", "lo", "hi"]
    assert func.params[1].shape == () and func.params[1].scope == "npu.imm"
    assert all(p is o.buffer for p, o in zip(func.params, clip.operands))


def test_scalar_operands_are_zero_dim_loads(registry: Registry) -> None:
    clip = registry.get("npu_vec_clip")
    d, lo, hi = (o.buffer for o in clip.operands)
    i, j = (iv.var for iv in clip.iter_vars)
    expected = ir.BufferStore(d, ir.min_(ir.max_(d[i, j], ir.BufferLoad(lo, ())),
                                         ir.BufferLoad(hi, ())), (i, j))
    assert ir.structural_equal(clip.semantics, expected)
    assert clip.operand("lo").is_scalar


def test_intrinsic_properties(registry: Registry) -> None:
    mma = registry.get("wmma_m8n32k16_f16_f32")
    assert mma.shape_text == "8x32x16"
    assert mma.output.name == "C" and mma.accumulates
    assert [o.name for o in mma.inputs] == ["A", "B"]
    assert mma.operand("A").nbytes == 8 * 16 * 2
    assert [v.name for v in mma.reduce_vars()] == ["k"]
    assert dict(mma.params) == {"m": 8, "n": 32, "k": 16, "in": "f16", "acc": "f32"}
    assert mma.loc is not None and mma.loc.file.endswith("cuda.yaml")


def test_operand_lookup_names_the_operands(registry: Registry) -> None:
    with pytest.raises(KeyError, match="its operands are A, B, C"):
        registry.get("arm_sdot").operand("D")


def test_render_fills_placeholders_and_attributes(registry: Registry) -> None:
    store = registry.get("wmma_store_col_m16n16k16_f32")
    text = store.render("cuda", {"dst": "out", "src": "acc", "dst.ld": "48"})
    assert text == "nvcuda::wmma::store_matrix_sync(out, acc, 48, nvcuda::wmma::mem_col_major);"


def test_render_requires_every_value_and_a_known_backend(registry: Registry) -> None:
    mma = registry.get("arm_smmla")
    with pytest.raises(KeyError, match=r"placeholder \{A\} has no value"):
        mma.render("llvm", {"C": "%c", "B": "%b"})
    with pytest.raises(KeyError, match="no template for backend 'cuda'"):
        mma.render("cuda", {})


def test_family_keeps_the_raw_machine_section(registry: Registry) -> None:
    npu = registry.family("npu")
    assert npu.machine is not None
    lines = npu.path.read_text().splitlines()
    assert npu.machine.start_mark.line == lines.index("machine:") + 1  # 0-based marks
    assert npu.machine_values()["vector"] == {"lanes": 16, "latency": 3}
    assert registry.family("cuda").machine is None
