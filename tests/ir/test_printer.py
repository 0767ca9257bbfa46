"""The printer writes readable script source that parses back to the same function."""

from __future__ import annotations

import textwrap

import ir
from ir import (
    BinOp,
    Block,
    BlockRealize,
    Buffer,
    BufferRegion,
    BufferStore,
    Cast,
    FloatImm,
    For,
    ForKind,
    IntImm,
    IterKind,
    IterVar,
    PrimFunc,
    Range,
    Var,
    dtypes,
    make_root,
    seq,
)
from ir import script as T
from ir.printer import print_node
from ir.regions import infer_block_regions


def realize(name: str, iters: list[tuple[Var, int, IterKind]], bindings: list[ir.Expr],
            body: ir.Stmt, init: ir.Stmt | None = None,
            predicate: ir.Expr = ir.TRUE) -> BlockRealize:
    """A block with inferred regions, placed with the given bindings."""
    iter_vars = tuple(IterVar(v, n, kind) for v, n, kind in iters)
    draft = Block(name, iter_vars, (), (), body, init)
    reads, writes = infer_block_regions(draft)
    return BlockRealize(tuple(bindings),
                        Block(name, iter_vars, tuple(reads), tuple(writes), body, init),
                        predicate)


def matmul(infer_regions: bool = False) -> PrimFunc:
    """A 16 x 16 x 8 int8 GEMM; its regions are explicit points, or inferred."""
    A, B, C = (Buffer("A", (16, 8), "int8"), Buffer("B", (8, 16), "int8"),
               Buffer("C", (16, 16), "int32"))
    i, j, k, vi, vj, vk = (Var(n) for n in ("i", "j", "k", "vi", "vj", "vk"))
    update = C[vi, vj] + Cast(dtypes.int32, A[vi, vk]) * Cast(dtypes.int32, B[vk, vj])
    iters = [(vi, 16, IterKind.SPATIAL), (vj, 16, IterKind.SPATIAL), (vk, 8, IterKind.REDUCE)]
    body, init = BufferStore(C, update, (vi, vj)), BufferStore(C, IntImm(0), (vi, vj))
    if infer_regions:
        block = realize("C", iters, [i, j, k], body, init)
    else:
        def point(buffer: Buffer, *index: Var) -> BufferRegion:
            return BufferRegion(buffer, tuple(Range(x, IntImm(1)) for x in index))

        block = BlockRealize((i, j, k), Block(
            "C", tuple(IterVar(v, n, kind) for v, n, kind in iters),
            (point(A, vi, vk), point(B, vk, vj)), (point(C, vi, vj),), body, init))
    return PrimFunc("mm", (A, B, C), make_root(For(i, 16, For(j, 16, For(k, 8, block)))))


def test_matmul_prints_as_expected_source():
    signature = ('def mm(A: T.Buffer((16, 8), "int8"), B: T.Buffer((8, 16), "int8"), '
                 'C: T.Buffer((16, 16), "int32")):')
    expected = "@T.prim_func\n" + signature + "\n" + textwrap.indent(textwrap.dedent("""\
            for i, j, k in T.grid(16, 16, 8):
                with T.block("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    T.reads(A[vi, vk], B[vk, vj])
                    T.writes(C[vi, vj])
                    with T.init():
                        C[vi, vj] = 0
                    C[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")"""), "    ")
    assert print_node(matmul()) == expected
    assert str(matmul()) == expected


def test_pretty_form_hides_inferred_regions():
    func = matmul(infer_regions=True)
    text = print_node(func, show_regions=False)
    assert "T.reads" not in text and "T.writes" not in text
    ir.assert_structural_equal(T.parse(text), func)
    assert "T.reads(A[vi, vk], B[vk, vj])" in print_node(matmul(), show_regions=False)


def test_non_serial_loops_and_split_bindings():
    A = Buffer("A", (10,), "float32")
    io, ii, v = Var("io"), Var("ii"), Var("v")
    binding = io * 4 + ii
    block = realize("A", [(v, 10, IterKind.SPATIAL)], [binding],
                    BufferStore(A, FloatImm(1.0), (v,)), predicate=binding < 10)
    nest = For(io, 3, For(ii, 4, block, ForKind.VECTORIZED), ForKind.PARALLEL)
    text = print_node(PrimFunc("f", (A,), make_root(nest)))
    assert "for io in T.parallel(3):" in text
    assert "for ii in T.vectorized(4):" in text
    assert "v = T.axis.spatial(10, io * 4 + ii)" in text
    assert "T.where(io * 4 + ii < 10)" in text
    assert "A[v] = 1.0" in text


def test_clashing_and_reserved_names_are_made_unique():
    A = Buffer("A", (4, 4), "int32")
    outer, inner = Var("i"), Var("i")
    keyword_var, t_var = Var("for"), Var("T")
    body = realize("A", [(keyword_var, 4, IterKind.SPATIAL), (t_var, 4, IterKind.SPATIAL)],
                   [outer, inner], BufferStore(A, IntImm(0), (keyword_var, t_var)))
    func = PrimFunc("f", (A,), make_root(For(outer, 4, For(inner, 4, body))))
    text = print_node(func)
    assert "for i, i_1 in T.grid(4, 4):" in text
    assert 'for_, T_ = T.axis.remap("SS", [i, i_1])' in text
    ir.assert_structural_equal(T.parse(text), func)


def test_sibling_scopes_reuse_names():
    A = Buffer("A", (4,), "int32")
    loops = []
    for value in (1, 2):
        i, vi = Var("i"), Var("vi")
        loops.append(For(i, 4, realize("A", [(vi, 4, IterKind.SPATIAL)], [i],
                                       BufferStore(A, IntImm(value), (vi,)))))
    text = print_node(PrimFunc("f", (A,), make_root(seq(*loops))))
    assert text.count("for i in range(4):") == 2
    assert "i_1" not in text


def test_immediates_are_explicit_only_where_dtype_is_not_inferred():
    x = Var("x", dtypes.int8)
    assert print_node(x + IntImm(3, dtypes.int8)) == "x + 3"
    assert print_node(Cast(dtypes.int32, IntImm(3, dtypes.int8))) == 'T.cast(T.int8(3), "int32")'
    assert print_node(IntImm(3, dtypes.int8) + IntImm(4, dtypes.int8)) == "T.int8(3) + 4"
    assert print_node(FloatImm(0.5, dtypes.float16)) == "T.float16(0.5)"
    assert print_node(FloatImm(0.5)) == "0.5"
    assert print_node(IntImm(1, dtypes.bool_)) == "True"


def test_parentheses_follow_python_precedence():
    a, b, c = Var("a"), Var("b"), Var("c")
    assert print_node(BinOp("sub", a, BinOp("sub", b, c))) == "a - (b - c)"
    assert print_node(BinOp("sub", BinOp("sub", a, b), c)) == "a - b - c"
    assert print_node((a + b) * c) == "(a + b) * c"
    assert print_node(a * IntImm(-3)) == "a * -3"
    assert print_node(ir.Not(ir.and_(a < b, b < c))) == "not (a < b and b < c)"
    assert print_node(ir.or_(ir.and_(a < b, b < c), a > c)) == "a < b and b < c or a > c"


def test_regions_print_as_points_and_slices():
    A = Buffer("A", (64, 64), "float32")
    v = Var("v")
    region = BufferRegion(A, (Range(v * 16, IntImm(16)), Range(IntImm(0), IntImm(64))))
    assert print_node(region) == "A[v * 16:v * 16 + 16, 0:64]"
    assert print_node(BufferRegion(A, (Range(v, IntImm(1)), Range(IntImm(2), IntImm(3))))) \
        == "A[v, 2:5]"


def test_buffer_and_module_printing():
    shared = Buffer("S", (16, 16), "float16", scope="shared", strides=(32, 1))
    assert print_node(shared) == 'S: T.Buffer((16, 16), "float16", scope="shared", strides=(32, 1))'
    module = ir.IRModule((matmul(infer_regions=True),))
    text = print_node(module)
    assert text.startswith("@T.ir_module\nclass Module:\n    @T.prim_func\n    def mm(")
    ir.assert_structural_equal(T.parse(text), module)


def test_a_nan_constant_parses_back_equal():
    source = textwrap.dedent("""
        @T.prim_func
        def fill(A: T.Buffer((4,), "float32")):
            for i in range(4):
                A[i] = T.float32("nan")
    """)
    func = T.parse(source)
    text = print_node(func)
    assert 'T.float32("nan")' in text
    assert ir.structural_equal(T.parse(text), func)
    assert not ir.structural_equal(T.parse(text.replace('"nan"', '"inf"')), func)
