"""The suite (examples/te/suite.py) against every built-in compute intrinsic: which pairs match,
with which mapping, why the others do not, and proof that a match computes the block.

The proof emulates the intrinsic calls a match describes with numpy: each call's operand
tiles are gathered from the kernel's buffers using only the block iterators the mapping puts
on that operand's own intrinsic iterators (the others pinned at their tile start), padding
reads zero, the intrinsic's semantics is evaluated on the tiles, and the results are added
into the kernel's output. It must equal the block run by the reference executor.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import ir
import intrinsics
from targets import host
from tensorize.match import Match, Mismatch, match_block, match_function
from tensorize.schedule import tree

REGISTRY = intrinsics.default_registry()
COMPUTE = REGISTRY.compute_intrinsics()
SUITE = Path(__file__).resolve().parents[3] / "examples" / "te" / "suite.py"


@cache
def suite() -> ModuleType:
    spec = importlib.util.spec_from_file_location("suite", SUITE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def kernels() -> dict[str, ir.PrimFunc]:
    return suite().kernels()


@cache
def results(kernel: str) -> dict[str, dict[str, list[Match] | Mismatch]]:
    return match_function(kernels()[kernel], COMPUTE, REGISTRY)


WMMA_S8 = {f"wmma_{shape}_s8_s32" for shape in ("m16n16k16", "m32n8k16", "m8n32k16")}
WMMA_F16 = {f"wmma_{shape}_f16_f32" for shape in ("m16n16k16", "m32n8k16", "m8n32k16")}
MMA_S8 = {"mma_m16n8k32_s8s8_s32"}
MMA_F16 = {"mma_m16n8k16_f16f16_f32"}
# Hopper's warpgroup tiles, 64 or 128 wide.
WGMMA_S8 = {f"wgmma_m64n{n}k32_s8s8_s32" for n in (64, 128)}
WGMMA_F16 = {f"wgmma_m64n{n}k16_f16f16_f32" for n in (64, 128)}
# FMLAL by element: one k value of A times 4 columns of B a call.
F16_GEMM = WMMA_F16 | MMA_F16 | WGMMA_F16 | {"arm_fmlal_lane"}
INT8_GEMM = {"npu_gemm", "npu_gemm_reset", "arm_sdot_lane", "arm_smmla", *WMMA_S8, *MMA_S8,
             *WGMMA_S8}
# kernel -> block -> the compute intrinsics that must match it; every other pair must not.
EXPECTED: dict[str, dict[str, set[str]]] = {
    "gemm_int8": {"C": INT8_GEMM},
    "gemm_int8_odd": {"C": INT8_GEMM},
    "gemm_u8s8": {"C": {"arm_usmmla", "x86_vpdpbusd", "mma_m16n8k32_u8s8_s32",
                        "mma_m16n8k32_s8u8_s32"}},
    "gemm_fp16": {"C": F16_GEMM},
    "batch_matmul_int8": {"C": INT8_GEMM | {"arm_sdot"}},
    "dense_int8": {"Y": INT8_GEMM},
    "conv2d_nhwc_int8": {"pad": set(), "conv": INT8_GEMM},
    "conv2d_nchw_int8": {"pad": set(), "conv": INT8_GEMM},
    "conv2d_dilated_int8": {"pad": set(), "conv": INT8_GEMM},
    "conv1d_int8": {"pad": set(), "conv": INT8_GEMM},
    "conv1x1_int8": {"conv": INT8_GEMM},
    "matmul_relu_fp16": {"Y": F16_GEMM, "C": set()},
    "matmul_requant_int8": {"acc": INT8_GEMM, "biased": set(), "scaled": set(), "out": set()},
    "depthwise_conv2d_int8": {"pad": set(), "conv": {"arm_sdot_lane", "arm_sdot"}},
    "add": {"C": set()},
}
MATCHED = [(kernel, block, name) for kernel, blocks in EXPECTED.items()
           for block, names in blocks.items() for name in sorted(names)]


def test_every_suite_kernel_is_listed_and_documented() -> None:
    assert set(kernels()) == set(EXPECTED)
    for builder in suite().BUILDERS:
        assert builder.__doc__ and builder.__doc__.strip()
        assert kernels()[builder.__name__].name == builder.__name__


@pytest.mark.parametrize("kernel", sorted(EXPECTED))
def test_exactly_the_fitting_intrinsics_match(kernel: str) -> None:
    found = results(kernel)
    assert set(found) == set(EXPECTED[kernel])
    for block, per_intrinsic in found.items():
        matched = {name for name, r in per_intrinsic.items() if isinstance(r, list)}
        assert matched == EXPECTED[kernel][block], block
        for name, result in per_intrinsic.items():
            assert isinstance(result, Mismatch) or result, (block, name)


def best(kernel: str, block: str, intrinsic: str) -> Match:
    result = results(kernel)[block][intrinsic]
    assert isinstance(result, list), result
    return result[0]


GEMM = {"i": ("vi",), "j": ("vj",), "k": ("vk",)}
NO_PACK = {"A": False, "B": False, "C": False}


@pytest.mark.parametrize("kernel, block, iter_map, outer, calls, needs_pack", [
    ("gemm_int8", "C", GEMM, (), 64, NO_PACK),
    ("batch_matmul_int8", "C", GEMM, ("vb",), 4 * 8, NO_PACK),
    ("dense_int8", "Y", GEMM, (), 4 * 2 * 4, {"A": False, "B": True, "C": False}),
    ("conv2d_nhwc_int8", "conv", {"i": ("vn", "vh", "vw"), "j": ("vco",),
                                  "k": ("vrh", "vrw", "vrc")}, (), 8 * 9,
     {"A": True, "B": False, "C": False}),
    ("conv2d_nchw_int8", "conv", {"i": ("vco",), "j": ("vh", "vw"), "k": ("vci", "vrh", "vrw")},
     (), 2 * 4 * 9, {"A": False, "B": True, "C": False}),
    ("conv1d_int8", "conv", {"i": ("vw",), "j": ("vco",), "k": ("vrw", "vrc")}, (), 4 * 2 * 3,
     NO_PACK),
    ("conv1x1_int8", "conv", {"i": ("vh", "vw"), "j": ("vco",), "k": ("vrc",)}, (), 4 * 2 * 2,
     NO_PACK),
])
def test_npu_mapping_of_gemm_shaped_kernels(kernel, block, iter_map, outer, calls,
                                            needs_pack) -> None:
    match = best(kernel, block, "npu_gemm")
    assert (match.iter_map, match.outer, match.calls, match.waste) == (iter_map, outer, calls, 0)
    assert match.needs_pack == needs_pack


def test_conv_has_many_mappings() -> None:
    found = results("conv2d_nhwc_int8")["conv"]["npu_gemm"]
    assert isinstance(found, list) and len(found) == 98
    assert len({(tuple(m.iter_map.items()), m.outer) for m in found}) == 98


@pytest.mark.parametrize("kernel, block, intrinsic, reason", [
    ("add", "C", "npu_gemm", "not tensorizable by a GEMM intrinsic: no reduce iterator (block "
                             "C is elementwise, npu_gemm reduces)"),
    ("gemm_u8s8", "C", "npu_gemm", "A is uint8, npu_gemm's A is int8"),
    ("gemm_fp16", "C", "wmma_m16n16k16_f16_f16",
     "C is float32, wmma_m16n16k16_f16_f16's C is float16"),
    ("gemm_int8", "C", "arm_sdot", "no iterator for an operand dimension: arm_sdot's i (spatial) "
                                   "indexes A, B, C, and no spatial iterator of block C indexes "
                                   "exactly A, B, C"),
    ("depthwise_conv2d_int8", "conv", "wmma_m16n16k16_s8_s32",
     "no iterator for an operand dimension: wmma_m16n16k16_s8_s32's i (spatial) indexes A, C, "
     "and no spatial iterator of block conv indexes exactly W, conv"),
    ("matmul_requant_int8", "biased", "npu_vec_add_bcast",
     "npu_vec_add_bcast updates D in place (D = D + ...); block biased writes biased without "
     "reading it"),
    ("matmul_relu_fp16", "C", "npu_vec_relu", "C is float32, npu_vec_relu's D is int32"),
])
def test_mismatch_reasons(kernel: str, block: str, intrinsic: str, reason: str) -> None:
    result = results(kernel)[block][intrinsic]
    assert isinstance(result, Mismatch)
    assert result.reason == reason


# -- proof by emulation ---------------------------------------------------------------------------


def block_function(func: ir.PrimFunc, name: str) -> tuple[ir.PrimFunc, ir.Block]:
    """The block's loop nest alone, as a function of the buffers it reads and writes."""
    located = tree.find_block(func, name)
    nest = next(node for node in located.path if isinstance(node, ir.For))
    block = located.node.block
    params: list[ir.Buffer] = []
    for region in (*block.reads, *block.writes):
        if not any(region.buffer is p for p in params):
            params.append(region.buffer)
    return ir.PrimFunc(name, tuple(params), ir.make_root(nest)), block


def random_arrays(func: ir.PrimFunc, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {}
    for param in func.params:
        dt = param.dtype
        if dt.is_int:
            arrays[param.name] = rng.integers(dt.min, dt.max + 1, param.shape).astype(dt.numpy)
        else:
            arrays[param.name] = rng.standard_normal(param.shape).astype(dt.numpy)
    return arrays


def evaluate(expr: ir.Expr, values: dict[str, object], tiles: dict[str, np.ndarray]) -> object:
    """numpy value of an index expression (``values``: iterator arrays) or of semantics over
    operand tiles (``tiles``)."""
    if isinstance(expr, ir.Var):
        return values[expr.name]
    if isinstance(expr, ir.IntImm):
        return expr.value
    if isinstance(expr, ir.BufferLoad):
        return tiles[expr.buffer.name]
    if isinstance(expr, ir.Cast):
        return np.asarray(evaluate(expr.value, values, tiles)).astype(expr.dtype.numpy)
    a, b = evaluate(expr.a, values, tiles), evaluate(expr.b, values, tiles)
    ops = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "floordiv": np.floor_divide,
           "floormod": np.mod}
    return ops[expr.op](a, b)


def kernel_indices(block: ir.Block) -> dict[str, tuple[ir.Expr, ...]]:
    found = {block.body.buffer.name: block.body.indices}
    ir.post_order_visit(block.body.value, lambda node: found.setdefault(
        node.buffer.name, node.indices) if isinstance(node, ir.BufferLoad) else None)
    return found


def emulate(block: ir.Block, match: Match, arrays: dict[str, np.ndarray]) -> np.ndarray:
    """The block's output computed by the intrinsic calls ``match`` describes (see the module
    docstring); the output starts at 0, as the block's init sets it."""
    intrinsic = match.intrinsic
    extent = {iv.var.name: iv.extent for iv in block.iter_vars}
    targets = intrinsic.iter_vars
    axes = len(match.outer) + 2 * len(targets)

    def along(axis: int, values: np.ndarray) -> np.ndarray:
        shape = [1] * axes
        shape[axis] = len(values)
        return values.reshape(shape)

    starts, lanes = {}, {}
    for n, t in enumerate(targets):
        axis = len(match.outer) + 2 * n
        tiles = match.padded_extents[t.var.name] // t.extent
        starts[t.var.name] = along(axis, np.arange(tiles) * t.extent)
        lanes[t.var.name] = along(axis + 1, np.arange(t.extent))

    def iterator_values(own: set[str]) -> tuple[dict[str, object], object]:
        values: dict[str, object] = {name: 0 for name in extent}
        values.update({name: along(axis, np.arange(extent[name]))
                       for axis, name in enumerate(match.outer)})
        valid: object = True
        for t in targets:
            name = t.var.name
            fused = starts[name] + lanes[name] if name in own else starts[name]
            if name in own:
                valid = valid & (fused < match.extents[name])
            for member in reversed(match.iter_map[name]):
                values[member] = fused % extent[member]
                fused = fused // extent[member]
        return values, valid

    operand_of = {o.buffer.name: o for o in intrinsic.operands}
    indices = kernel_indices(block)
    buffer_of = {operand: buffer for buffer, operand in match.buffer_map.items()}

    def gather(operand: str, own_indices: tuple[ir.Expr, ...]):
        own = {i.name for i in own_indices if isinstance(i, ir.Var)}
        values, valid = iterator_values(own)
        where = tuple(np.where(valid, evaluate(i, values, {}), 0)
                      for i in indices[buffer_of[operand]])
        where = np.broadcast_arrays(*where, valid)
        return where[:-1], where[-1]

    store = intrinsic.semantics
    tiles = {}
    for node in _loads(store.value):
        if node.buffer is not store.buffer:
            where, valid = gather(operand_of[node.buffer.name].name, node.indices)
            data = arrays[buffer_of[operand_of[node.buffer.name].name]]
            tiles[node.buffer.name] = np.where(valid, data[where], 0).astype(data.dtype)
    added = next(side for side in (store.value.a, store.value.b)
                 if not (isinstance(side, ir.BufferLoad) and side.buffer is store.buffer))
    out_dtype = store.buffer.dtype.numpy
    value = np.asarray(evaluate(added, {}, tiles)).astype(out_dtype)
    reduce_axes = tuple(len(match.outer) + 2 * n + 1 for n, t in enumerate(targets)
                        if t.kind is ir.IterKind.REDUCE)
    value = value.sum(axis=reduce_axes, keepdims=True, dtype=out_dtype)
    where, valid = gather(intrinsic.output.name, store.indices)
    value, valid, *where = np.broadcast_arrays(value, valid, *where)
    result = np.zeros(arrays[buffer_of[intrinsic.output.name]].shape, out_dtype)
    np.add.at(result, tuple(w[valid] for w in where), value[valid])
    return result


def _loads(expr: ir.Expr) -> list[ir.BufferLoad]:
    found: list[ir.BufferLoad] = []
    ir.post_order_visit(expr, lambda node: found.append(node)
                        if isinstance(node, ir.BufferLoad) else None)
    return found


def reference(func: ir.PrimFunc, block: str) -> tuple[ir.Block, dict[str, np.ndarray],
                                                      np.ndarray]:
    """The block, random inputs, and its output computed by the reference executor."""
    alone, found = block_function(func, block)
    arrays = random_arrays(alone)
    return found, arrays, host.run(alone, arrays)[found.body.buffer.name]


@cache
def suite_reference(kernel: str, block: str) -> tuple[ir.Block, dict[str, np.ndarray],
                                                      np.ndarray]:
    return reference(kernels()[kernel], block)


def assert_emulation(expected: tuple[ir.Block, dict[str, np.ndarray], np.ndarray],
                     match: Match) -> None:
    block, arrays, want = expected
    got = emulate(block, match, arrays)
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kernel, block, intrinsic", MATCHED)
def test_best_match_computes_the_block(kernel: str, block: str, intrinsic: str) -> None:
    assert_emulation(suite_reference(kernel, block), best(kernel, block, intrinsic))


@pytest.mark.parametrize("intrinsic", ["npu_gemm", "arm_sdot_lane"])
def test_every_conv_mapping_computes_the_block(intrinsic: str) -> None:
    func = suite().conv2d_nhwc_int8(batch=2, height=3, width=3, in_channels=4, out_channels=4)
    found = match_block(func, "conv", REGISTRY.get(intrinsic), REGISTRY)
    assert isinstance(found, list) and len(found) > 10
    expected = reference(func, "conv")
    for match in found:
        assert_emulation(expected, match)


def test_emulation_catches_a_wrong_mapping() -> None:
    right = best("gemm_int8", "C", "npu_gemm")
    wrong = Match(right.block, right.intrinsic, right.buffer_map,
                  {"i": ("vj",), "j": ("vi",), "k": ("vk",)}, (), right.extents,
                  right.padded_extents, right.calls, right.waste, right.layouts, right.needs_pack)
    with pytest.raises(AssertionError):
        assert_emulation(suite_reference("gemm_int8", "C"), wrong)
