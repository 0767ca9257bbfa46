"""Iterator mapping: block iterators grouped by the operands they index and fused onto the
intrinsic's, every valid mapping enumerated with its padding, calls and packing needs."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ir
import intrinsics
from ir import IterKind, te
from ir import script as T
from ir.regions import infer_block_regions
from ir.verify import verify
from tensorize.match import Match, Mismatch, match_block, match_function
from tensorize.schedule import Schedule

REGISTRY = intrinsics.default_registry()
NPU = REGISTRY.get("npu_gemm")


def i32(x: ir.Expr) -> ir.Expr:
    return ir.cast("int32", x)


def i16(x: ir.Expr) -> ir.Expr:
    return ir.cast("int16", x)


def matches(func: ir.PrimFunc, block: str, intrinsic: intrinsics.Intrinsic) -> list[Match]:
    result = match_block(func, block, intrinsic, REGISTRY)
    assert isinstance(result, list), result
    return result


def summary(found: list[Match]) -> list[tuple[object, ...]]:
    """What a match says, independent of iterator declaration order."""
    return [(sorted(m.buffer_map.items()), sorted(m.iter_map.items()), sorted(m.outer),
             m.calls, round(m.waste, 12), sorted(m.needs_pack.items()), sorted(m.layouts.items()))
            for m in found]


def gemm(m: int = 32, n: int = 32, k: int = 16) -> ir.PrimFunc:
    A = te.placeholder((m, k), "int8", "A")
    B = te.placeholder((k, n), "int8", "B")
    rk = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(i32(A[i, rk]) * i32(B[rk, j]), axis=rk), "C")
    return te.create_prim_func([A, B, C], "gemm")


def dense(m: int = 32, n: int = 32, k: int = 32) -> ir.PrimFunc:
    X = te.placeholder((m, k), "int8", "X")
    W = te.placeholder((n, k), "int8", "W")
    rk = te.reduce_axis(k, "k")
    Y = te.compute((m, n), lambda i, j: te.sum(i32(X[i, rk]) * i32(W[j, rk]), axis=rk), "Y")
    return te.create_prim_func([X, W, Y], "dense")


def conv_nhwc(batch: int = 2, size: int = 4, ci: int = 8, co: int = 16,
              window: int = 3) -> ir.PrimFunc:
    """A convolution over an already padded input P."""
    padded = size + window - 1
    P = te.placeholder((batch, padded, padded, ci), "int8", "P")
    W = te.placeholder((window, window, ci, co), "int8", "W")
    rh, rw = te.reduce_axis(window, "rh"), te.reduce_axis(window, "rw")
    rc = te.reduce_axis(ci, "rc")
    O = te.compute((batch, size, size, co), lambda n, h, w, o: te.sum(
        i32(P[n, h + rh, w + rw, rc]) * i32(W[rh, rw, rc, o]), axis=[rh, rw, rc]), "conv")
    return te.create_prim_func([P, W, O], "conv")


# -- the mapping of plain kernels -----------------------------------------------------------------


def test_gemm_maps_each_iterator_onto_its_namesake() -> None:
    best = matches(gemm(), "C", NPU)[0]
    assert best.buffer_map == {"A": "A", "B": "B", "C": "C"}
    assert best.iter_map == {"i": ("vi",), "j": ("vj",), "k": ("vk",)}
    assert (best.outer, best.calls, best.waste) == ((), 4, 0.0)
    assert best.extents == best.padded_extents == {"i": 32, "j": 32, "k": 16}
    assert best.needs_pack == {"A": False, "B": False, "C": False}
    assert best.layouts == {"A": "row_major", "B": "row_major", "C": "row_major"}


def test_swapped_operands_compute_the_transpose_and_need_packing() -> None:
    found = matches(gemm(), "C", NPU)
    assert len(found) == 2
    swapped = found[1]
    assert swapped.buffer_map == {"A": "B", "B": "A", "C": "C"}
    assert swapped.iter_map == {"i": ("vj",), "j": ("vi",), "k": ("vk",)}
    assert swapped.needs_pack == {"A": True, "B": True, "C": True}
    assert swapped.layouts == {"A": "col_major", "B": "col_major", "C": "col_major"}


def test_sizes_no_tile_divides_are_padded() -> None:
    best = matches(gemm(100, 60, 36), "C", NPU)[0]
    assert best.padded_extents == {"i": 112, "j": 64, "k": 48}
    assert best.calls == 7 * 4 * 3
    assert best.waste == pytest.approx(1 - (100 * 60 * 36) / (112 * 64 * 48))


def test_dense_weight_is_transposed_for_npu_but_not_for_a_column_major_load() -> None:
    on_npu = matches(dense(), "Y", NPU)[0]
    assert on_npu.iter_map == {"i": ("vi",), "j": ("vj",), "k": ("vk",)}
    assert on_npu.layouts["B"] == "col_major"
    assert on_npu.needs_pack == {"A": False, "B": True, "C": False}
    on_wmma = matches(dense(), "Y", REGISTRY.get("wmma_m16n16k16_s8_s32"))[0]
    assert on_wmma.needs_pack == {"A": False, "B": False, "C": False}
    on_smmla = matches(dense(), "Y", REGISTRY.get("arm_smmla"))[0]
    assert (on_smmla.layouts["B"], on_smmla.needs_pack["B"]) == ("row_major", False)
    gemm_on_smmla = matches(gemm(), "C", REGISTRY.get("arm_smmla"))[0]
    assert gemm_on_smmla.needs_pack == {"A": False, "B": True, "C": False}


def test_rows_stay_outer_under_a_by_element_dot_product() -> None:
    best = matches(gemm(), "C", REGISTRY.get("arm_sdot_lane"))[0]
    assert best.iter_map == {"i": ("vj",), "k": ("vk",)}
    assert best.outer == ("vi",)
    assert best.calls == 32 * (32 // 4) * (16 // 4)


def test_conv_fuses_pixels_and_window() -> None:
    best = matches(conv_nhwc(), "conv", NPU)[0]
    assert best.buffer_map == {"P": "A", "W": "B", "conv": "C"}
    assert best.iter_map == {"i": ("vn", "vh", "vw"), "j": ("vo",), "k": ("vrh", "vrw", "vrc")}
    assert best.calls == 2 * 1 * 5  # M = 32, N = 16, K = 72 -> 80
    assert best.needs_pack == {"A": True, "B": False, "C": False}


def test_conv_mappings_are_all_enumerated_and_sorted() -> None:
    found = matches(conv_nhwc(), "conv", NPU)
    straight = [m for m in found if m.buffer_map["P"] == "A"]
    subsets = {g: {c for r in (1, 2, 3) for c in itertools.combinations(g, r)}
               for g in (("vn", "vh", "vw"), ("vrh", "vrw", "vrc"))}
    assert {(m.iter_map["i"], m.iter_map["k"]) for m in straight} == set(
        itertools.product(subsets[("vn", "vh", "vw")], subsets[("vrh", "vrw", "vrc")]))
    assert len(straight) == 49 and len(found) == 98
    extent = {"vn": 2, "vh": 4, "vw": 4, "vo": 16, "vrh": 3, "vrw": 3, "vrc": 8}
    tile = {t.var.name: t.extent for t in NPU.iter_vars}
    for m in found:
        fused = {t: math.prod(extent[v] for v in group) for t, group in m.iter_map.items()}
        padded = {t: -(-fused[t] // tile[t]) * tile[t] for t in fused}
        assert m.padded_extents == padded
        assert m.calls == math.prod(extent[v] for v in m.outer) * math.prod(
            padded[t] // tile[t] for t in padded)
        assert m.waste == pytest.approx(1 - math.prod(fused.values()) / math.prod(padded.values()))
    assert [m.cost for m in found] == sorted(m.cost for m in found)


def test_window_slice_is_a_strided_tile_when_only_the_channels_fuse() -> None:
    found = matches(conv_nhwc(), "conv", NPU)
    sliced = next(m for m in found if m.iter_map["i"] == ("vw",) and m.buffer_map["P"] == "A"
                  and m.iter_map["k"] == ("vrw", "vrc"))
    assert sliced.layouts["A"] == "row_major"
    assert sliced.needs_pack["A"] is False
    assert sorted(sliced.outer) == ["vh", "vn", "vrh"]


def test_nchw_output_is_column_major_for_pixels_as_rows() -> None:
    I = te.placeholder((1, 8, 6, 6), "int8", "I")
    W = te.placeholder((16, 8, 3, 3), "int8", "W")
    ci, rh, rw = te.reduce_axis(8, "ci"), te.reduce_axis(3, "rh"), te.reduce_axis(3, "rw")
    O = te.compute((1, 16, 2, 2), lambda n, o, h, w: te.sum(
        i32(I[n, ci, h * 2 + rh, w * 2 + rw]) * i32(W[o, ci, rh, rw]), axis=[ci, rh, rw]), "O")
    found = matches(te.create_prim_func([I, W, O]), "O", NPU)
    pixels_as_rows = next(m for m in found if m.buffer_map["I"] == "A"
                          and m.iter_map == {"i": ("vh", "vw"), "j": ("vo",),
                                             "k": ("vci", "vrh", "vrw")})
    assert pixels_as_rows.layouts["C"] == "col_major"
    assert pixels_as_rows.needs_pack == {"A": True, "B": True, "C": True}
    assert found[0].buffer_map == {"I": "B", "W": "A", "O": "C"}  # weights as rows: one pack
    assert found[0].needs_pack == {"A": False, "B": True, "C": False}


# -- robustness: loop order, unit iterators, index spellings ---------------------------------------


def test_loop_order_and_unit_loops_change_nothing() -> None:
    func = gemm()
    sch = Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(k, j, i)
    sch.split(j, [None, 1])
    for intrinsic in (NPU, REGISTRY.get("arm_sdot_lane"), REGISTRY.get("arm_smmla")):
        assert summary(matches(sch.func, "C", intrinsic)) == summary(matches(func, "C", intrinsic))


def test_unit_batch_and_unit_window_are_ignored() -> None:
    A = te.placeholder((1, 32, 16), "int8", "A")
    B = te.placeholder((1, 16, 32), "int8", "B")
    rk = te.reduce_axis(16, "k")
    C = te.compute((1, 32, 32), lambda b, i, j: te.sum(i32(A[b, i, rk]) * i32(B[b, rk, j]),
                                                       axis=rk), "C")
    batched = matches(te.create_prim_func([A, B, C]), "C", NPU)
    assert summary(batched) == summary(matches(gemm(), "C", NPU))
    window_one = matches(conv_nhwc(window=1), "conv", NPU)[0]
    assert window_one.iter_map == {"i": ("vn", "vh", "vw"), "j": ("vo",), "k": ("vrc",)}
    assert window_one.needs_pack == {"A": False, "B": False, "C": False}


def spelled(index_a: str, index_c: str, iterators: str, a_shape: str = "(64, 16)") -> ir.PrimFunc:
    return T.parse(f'''
@T.prim_func
def f(A: T.Buffer({a_shape}, "int8"), B: T.Buffer((16, 32), "int8"),
      C: T.Buffer((64, 32), "int32")):
{iterators}
''' + f'''
            with T.init():
                C[{index_c}, vj] = 0
            C[{index_c}, vj] += T.cast(A[{index_a}, vk], "int32") * T.cast(B[vk, vj], "int32")
''')


FUSED = spelled("vm", "vm", '''    for m, j, k in T.grid(64, 32, 16):
        with T.block("C"):
            vm, vj, vk = T.axis.remap("SSR", [m, j, k])''')
SPLIT = spelled("vo * 16 + vi", "vo * 16 + vi", '''    for i, o, j, k in T.grid(16, 4, 32, 16):
        with T.block("C"):
            vi, vo, vj, vk = T.axis.remap("SSSR", [i, o, j, k])''')
FOLDED = spelled("vm // 16, vm % 16", "vm", '''    for m, j, k in T.grid(64, 32, 16):
        with T.block("C"):
            vm, vj, vk = T.axis.remap("SSR", [m, j, k])''', "(4, 16, 16)")
STRIDED = spelled("vm % 4, vm // 4", "vm", '''    for m, j, k in T.grid(64, 32, 16):
        with T.block("C"):
            vm, vj, vk = T.axis.remap("SSR", [m, j, k])''', "(4, 16, 16)")


def test_split_index_fuses_outer_part_first() -> None:
    best, fused = matches(SPLIT, "C", NPU)[0], matches(FUSED, "C", NPU)[0]
    assert best.iter_map["i"] == ("vo", "vi")
    assert fused.iter_map["i"] == ("vm",)
    for key in ("calls", "waste", "needs_pack", "layouts", "padded_extents"):
        assert getattr(best, key) == getattr(fused, key), key


def test_floordiv_floormod_spelling_of_a_row_is_still_a_row() -> None:
    folded = matches(FOLDED, "C", NPU)[0]
    assert folded.iter_map["i"] == ("vm",)
    assert folded.needs_pack == {"A": False, "B": False, "C": False}
    strided = matches(STRIDED, "C", NPU)[0]
    assert strided.layouts["A"] is None and strided.needs_pack["A"] is True


def test_non_affine_index_is_refused() -> None:
    A = te.placeholder((32, 16), "int8", "A")
    B = te.placeholder((16, 32), "int8", "B")
    rk = te.reduce_axis(16, "k")
    C = te.compute((32, 32), lambda i, j: te.sum(i32(A[(i * rk) % 32, rk]) * i32(B[rk, j]),
                                                 axis=rk), "C")
    result = match_block(te.create_prim_func([A, B, C]), "C", NPU, REGISTRY)
    assert isinstance(result, Mismatch)
    assert result.reason.startswith("non-affine index A[vi * vk % 32, vk]: the matcher accepts")


def test_missing_operand_dimension_is_named() -> None:
    P = te.placeholder((1, 6, 6, 16), "int8", "P")
    W = te.placeholder((3, 3, 16), "int8", "W")
    rh, rw = te.reduce_axis(3, "rh"), te.reduce_axis(3, "rw")
    O = te.compute((1, 4, 4, 16), lambda n, h, w, c: te.sum(
        i32(P[n, h + rh, w + rw, c]) * i32(W[rh, rw, c]), axis=[rh, rw]), "dw")
    result = match_block(te.create_prim_func([P, W, O]), "dw", NPU, REGISTRY)
    assert isinstance(result, Mismatch)
    assert result.reason == ("no iterator for an operand dimension: npu_gemm's j (spatial) "
                             "indexes B, C, and no spatial iterator of block dw indexes "
                             "exactly W, dw")


def test_too_few_iterators_for_the_intrinsic_is_refused() -> None:
    func = T.parse('''
@T.prim_func
def f(S: T.Buffer((16,), "int32"), C: T.Buffer((16,), "int32")):
    for x in range(16):
        with T.block("C"):
            vx = T.axis.spatial(16, x)
            C[vx] = C[vx] + S[vx]
''')
    result = match_block(func, "C", REGISTRY.get("npu_vec_add"), REGISTRY)
    assert isinstance(result, Mismatch)
    assert result.reason == ("no iterator for an operand dimension: block C has too few "
                             "iterators to span npu_vec_add's i, j at once")


def test_non_affine_intrinsic_index_is_refused() -> None:
    i, k = ir.Var("i"), ir.Var("k")
    A, C = ir.Buffer("A", (4, 4), "int32"), ir.Buffer("C", (4,), "int32")
    odd = intrinsics.Intrinsic(
        "odd", "test", "host", "compute", (ir.IterVar(i, 4), ir.IterVar(k, 4, IterKind.REDUCE)),
        (intrinsics.Operand("A", "input", A), intrinsics.Operand("C", "accumulator", C)),
        ir.BufferStore(C, C[i] + A[i, (i * k) % 4], (i,)), "C[i] += A[i, i * k % 4]", {},
        intrinsics.Cost(1, 1), "")
    func = T.parse('''
@T.prim_func
def f(A: T.Buffer((8, 8), "int32"), C: T.Buffer((8,), "int32")):
    for x, r in T.grid(8, 8):
        with T.block("C"):
            vx, vr = T.axis.remap("SR", [x, r])
            C[vx] = C[vx] + A[vx, vr]
''')
    result = match_block(func, "C", odd, REGISTRY)
    assert isinstance(result, Mismatch)
    assert result.reason.startswith("odd indexes A[i, i * k % 4], which is not affine: ")


def test_unknown_block_is_refused() -> None:
    with pytest.raises(ir.ScheduleError, match="match_block: function gemm has no block named "
                                               "'D'; blocks: C"):
        match_block(gemm(), "D", NPU, REGISTRY)
    with pytest.raises(ir.ScheduleError, match="argument 'intrinsic': expected an Intrinsic"):
        match_block(gemm(), "C", "npu_gemm", REGISTRY)  # type: ignore[arg-type]
    with pytest.raises(ir.ScheduleError, match="match_function: argument 'intrinsics': "
                                               "expected Intrinsics, got 'npu_gemm'"):
        match_function(gemm(), ["npu_gemm"], REGISTRY)  # type: ignore[list-item]


# -- property: spelling a GEMM-like kernel differently does not change its match ----------------


@dataclass(frozen=True)
class Spelling:
    """How one GEMM-like kernel is written: sizes and layouts fixed, the rest free."""

    batch: int
    m: int
    n: int
    k: int
    a_transposed: bool
    b_transposed: bool
    declared: tuple[str, ...] = ("b", "i", "j", "k")
    loops: tuple[str, ...] = ("b", "i", "j", "k")
    commuted: bool = False
    accumulator_last: bool = False
    casts: str = "each"


def build(s: Spelling) -> ir.PrimFunc:
    """C[b, i, j] += int32(A[...]) * int32(B[...]) written as ``s`` says."""
    extents = {"b": s.batch, "i": s.m, "j": s.n, "k": s.k}
    iters = {name: ir.IterVar(ir.Var("v" + name), extents[name],
                              IterKind.REDUCE if name == "k" else IterKind.SPATIAL)
             for name in extents}
    v = {name: iv.var for name, iv in iters.items()}
    A = ir.Buffer("A", (s.batch, s.k, s.m) if s.a_transposed else (s.batch, s.m, s.k), "int8")
    B = ir.Buffer("B", (s.batch, s.n, s.k) if s.b_transposed else (s.batch, s.k, s.n), "int8")
    C = ir.Buffer("C", (s.batch, s.m, s.n), "int32")
    a = A[v["b"], v["k"], v["i"]] if s.a_transposed else A[v["b"], v["i"], v["k"]]
    b = B[v["b"], v["j"], v["k"]] if s.b_transposed else B[v["b"], v["k"], v["j"]]
    x, y = (b, a) if s.commuted else (a, b)
    product = {"each": lambda: i32(x) * i32(y), "int16 each": lambda: i32(i16(x)) * i32(i16(y)),
               "int16 product": lambda: i32(i16(x) * i16(y))}[s.casts]()
    index = (v["b"], v["i"], v["j"])
    acc = C[index]
    store = ir.BufferStore(C, product + acc if s.accumulator_last else acc + product, index)
    init = ir.BufferStore(C, ir.IntImm(0), index)
    declared = tuple(iters[name] for name in s.declared)
    draft = ir.Block("C", declared, (), (), store, init)
    reads, writes = infer_block_regions(draft)
    block = ir.Block("C", declared, tuple(reads), tuple(writes), store, init)
    loop_vars = {name: ir.Var(name) for name in extents}
    body: ir.Stmt = ir.BlockRealize(tuple(loop_vars[n] for n in s.declared), block)
    for name in reversed(s.loops):
        body = ir.For(loop_vars[name], extents[name], body)
    func = ir.PrimFunc("gemm_like", (A, B, C), ir.make_root(body))
    verify(func)
    return func


ORDERS = st.permutations(("b", "i", "j", "k")).map(tuple)
SPELLINGS = st.builds(
    Spelling, batch=st.sampled_from((1, 2, 3)), m=st.sampled_from((4, 16, 20)),
    n=st.sampled_from((2, 8, 17)), k=st.sampled_from((8, 16, 24)), a_transposed=st.booleans(),
    b_transposed=st.booleans())
INTRINSICS = [REGISTRY.get(name) for name in ("npu_gemm", "arm_sdot_lane", "arm_smmla",
                                              "wmma_m32n8k16_s8_s32")]


@settings(max_examples=25, deadline=None)
@given(SPELLINGS, ORDERS, ORDERS, st.booleans(), st.booleans(),
       st.sampled_from(("each", "int16 each", "int16 product")))
def test_spelling_does_not_change_the_match(base: Spelling, declared: tuple[str, ...],
                                            loops: tuple[str, ...], commuted: bool,
                                            accumulator_last: bool, casts: str) -> None:
    plain = build(base)
    other = build(Spelling(base.batch, base.m, base.n, base.k, base.a_transposed,
                           base.b_transposed, declared, loops, commuted, accumulator_last, casts))
    for intrinsic in INTRINSICS:
        assert summary(matches(other, "C", intrinsic)) == summary(matches(plain, "C", intrinsic))
