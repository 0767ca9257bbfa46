"""The script front end builds the IR a kernel describes, with the user's source positions."""

from __future__ import annotations

import inspect
import textwrap

import pytest

import ir
from ir import (
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferRegion,
    BufferStore,
    Call,
    Cast,
    FloatImm,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    IntrinsicCall,
    IRModule,
    IterKind,
    IterVar,
    KernelError,
    PrimFunc,
    Range,
    Select,
    Var,
    dtypes,
    make_root,
)
from ir import script as T


def parse(source: str) -> PrimFunc:
    func = T.parse(textwrap.dedent(source))
    assert isinstance(func, PrimFunc)
    return func


def inner_block(func: PrimFunc, index: int = 0) -> BlockRealize:
    """The ``index``-th non-root BlockRealize in pre-order."""
    found: list[BlockRealize] = []
    ir.post_order_visit(func.body.block.body,
                        lambda n: found.append(n) if isinstance(n, BlockRealize) else None)
    return found[index]


def test_matmul_equals_hand_built_ir():
    func = parse("""
        @T.prim_func
        def mm(A: T.Buffer((4, 3), "float32"), B: T.Buffer((3, 5), "float32"),
               C: T.Buffer((4, 5), "float32")):
            for i, j, k in T.grid(4, 5, 3):
                with T.block("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    T.reads(A[vi, vk], B[vk, vj])
                    T.writes(C[vi, vj])
                    with T.init():
                        C[vi, vj] = T.float32(0)
                    C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
    """)
    A, B, C = (Buffer("A", (4, 3), "float32"), Buffer("B", (3, 5), "float32"),
               Buffer("C", (4, 5), "float32"))
    i, j, k, vi, vj, vk = (Var(n) for n in ("i", "j", "k", "vi", "vj", "vk"))

    def point(buffer: Buffer, *idx: Var) -> BufferRegion:
        return BufferRegion(buffer, tuple(Range(x, IntImm(1)) for x in idx))

    block = Block("C", (IterVar(vi, 4), IterVar(vj, 5), IterVar(vk, 3, IterKind.REDUCE)),
                  (point(A, vi, vk), point(B, vk, vj)), (point(C, vi, vj),),
                  BufferStore(C, C[vi, vj] + A[vi, vk] * B[vk, vj], (vi, vj)),
                  BufferStore(C, FloatImm(0.0), (vi, vj)))
    nest = For(i, 4, For(j, 5, For(k, 3, BlockRealize((i, j, k), block))))
    expected = PrimFunc("mm", (A, B, C), make_root(nest))
    ir.assert_structural_equal(func, expected)


def test_locations_are_real_file_positions():
    source = textwrap.dedent("""\
        @T.prim_func
        def copy(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32")):
            for i in range(8):
                with T.block("B"):
                    vi = T.axis.spatial(8, i)
                    B[vi] = A[vi]
    """)
    func = T.parse(source, filename="kernels.py", first_line=20)
    store = inner_block(func).block.body
    assert isinstance(store, BufferStore)
    assert (store.loc.file, store.loc.line, store.loc.col) == ("kernels.py", 25, 13)
    assert (store.loc.end_line, store.loc.end_col) == (25, 25)
    assert isinstance(store.value, BufferLoad)
    assert (store.value.loc.line, store.value.loc.col) == (25, 21)


def test_decorator_locates_nodes_in_this_file():
    decorator_line = inspect.currentframe().f_lineno + 2  # type: ignore[union-attr]

    @T.prim_func
    def scale(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                B[vi] = A[vi] * 2.0

    store = inner_block(scale).block.body
    assert store.loc.file == __file__
    assert (store.loc.line, store.loc.col) == (decorator_line + 5, 17)
    assert scale.name == "scale"


def test_int_literal_adopts_operand_dtype():
    func = parse("""
        @T.prim_func
        def inc(A: T.Buffer((8,), "int8"), B: T.Buffer((8,), "float16")):
            for i in range(8):
                with T.block("B"):
                    vi = T.axis.spatial(8, i)
                    A[vi] = A[vi] + 1
                    B[vi] = 2
    """)
    add_store, const_store = inner_block(func).block.body.stmts
    assert add_store.value.b == IntImm(1, dtypes.int8)
    assert const_store.value == FloatImm(2.0, dtypes.float16)


def test_augmented_assignment_is_load_op_value():
    source = """
        @T.prim_func
        def acc(A: T.Buffer((8,), "int32")):
            for i in range(8):
                with T.block("A"):
                    vi = T.axis.spatial(8, i)
                    A[vi] {op} 3
    """
    ir.assert_structural_equal(parse(source.replace("{op}", "+=")),
                               parse(source.replace("{op}", "= A[vi] +")))
    ir.assert_structural_equal(parse(source.replace("{op}", "*=")),
                               parse(source.replace("{op}", "= A[vi] *")))


def test_loop_kinds_and_thread_binding():
    func = parse("""
        @T.prim_func
        def kinds(A: T.Buffer((2, 3, 4, 5, 6), "float32")):
            for a in T.parallel(2):
                for b in T.vectorized(3):
                    for c in T.unroll(4):
                        for d in T.thread_binding(5, thread="threadIdx.x"):
                            for e in T.serial(0, 6):
                                with T.block("A"):
                                    va, vb, vc, vd, ve = T.axis.remap("SSSSS", [a, b, c, d, e])
                                    A[va, vb, vc, vd, ve] = 1.0
    """)
    loops = []
    node = func.body.block.body
    while isinstance(node, For):
        loops.append((node.kind, node.extent, node.thread))
        node = node.body
    assert loops == [(ForKind.PARALLEL, 2, None), (ForKind.VECTORIZED, 3, None),
                     (ForKind.UNROLLED, 4, None), (ForKind.THREAD_BINDING, 5, "threadIdx.x"),
                     (ForKind.SERIAL, 6, None)]


def test_explicit_axes_where_and_block_alloc():
    func = parse("""
        @T.prim_func
        def split(A: T.Buffer((10,), "float32"), B: T.Buffer((10,), "float32")):
            for io, ii in T.grid(3, 4):
                with T.block("B"):
                    v = T.axis.spatial(10, io * 4 + ii)
                    T.where(io * 4 + ii < 10)
                    tmp = T.alloc_buffer((1,), "float32", scope="local")
                    tmp[0] = A[v]
                    B[v] = tmp[0]
    """)
    realize = inner_block(func)
    io, ii = func.body.block.body.var, func.body.block.body.body.var
    ir.assert_structural_equal(realize.bindings, (io * 4 + ii,))
    ir.assert_structural_equal(realize.predicate, (io * 4 + ii) < 10)
    (tmp,) = realize.block.alloc_buffers
    assert (tmp.name, tmp.shape, tmp.scope) == ("tmp", (1,), "local")
    assert func.allocs == ()


def test_region_slices():
    func = parse("""
        @T.prim_func
        def tile(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32")):
            for i in range(4):
                with T.block("B"):
                    vi = T.axis.spatial(4, i)
                    T.reads(A[vi * 16:vi * 16 + 16, 0:64])
                    T.writes(B[vi * 16:vi * 16 + 16, :])
                    T.call_intrinsic("copy16", B[vi * 16:vi * 16 + 16, 0:64],
                                     A[vi * 16:vi * 16 + 16, 0:64])
    """)
    block = inner_block(func).block
    (vi,) = (iv.var for iv in block.iter_vars)
    expected = (Range(vi * 16, IntImm(16)), Range(IntImm(0), IntImm(64)))
    assert block.reads[0].ranges == expected
    assert block.writes[0].ranges == expected
    call = block.body
    assert isinstance(call, IntrinsicCall) and call.intrinsic == "copy16"
    assert [arg.buffer.name for arg in call.args] == ["B", "A"]
    assert call.args[1].ranges == expected


def test_if_elif_else_nest():
    func = parse("""
        @T.prim_func
        def sign(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32")):
            for i in range(8):
                with T.block("B"):
                    vi = T.axis.spatial(8, i)
                    if A[vi] > 0:
                        B[vi] = 1
                    elif A[vi] < 0:
                        B[vi] = -1
                    else:
                        B[vi] = 0
    """)
    stmt = inner_block(func).block.body
    assert isinstance(stmt, IfThenElse) and isinstance(stmt.else_case, IfThenElse)
    assert stmt.else_case.then_case.value == IntImm(-1)
    assert stmt.else_case.else_case.value == IntImm(0)


def test_calls_build_select_cast_immediates_and_math():
    func = parse("""
        @T.prim_func
        def calls(A: T.Buffer((8,), "int8"), B: T.Buffer((8,), "float32")):
            for i in range(8):
                with T.block("B"):
                    vi = T.axis.spatial(8, i)
                    B[vi] = T.if_then_else(vi < 4, T.exp(T.cast(A[vi], "float32")),
                                           T.float32(T.int8(3)))
    """)
    value = inner_block(func).block.body.value
    assert isinstance(value, Select)
    assert isinstance(value.true_value, Call) and value.true_value.name == "exp"
    assert value.true_value.args[0].type == dtypes.float32
    assert value.false_value == Cast(dtypes.float32, IntImm(3, dtypes.int8))


def test_min_max_floordiv_floormod_and_logic():
    func = parse("""
        @T.prim_func
        def ops(A: T.Buffer((8,), "int32")):
            for i in range(8):
                with T.block("A"):
                    vi = T.axis.spatial(8, i)
                    A[vi] = T.max(T.min(vi // 3, vi % 3), T.floordiv(vi, 2) + T.floormod(vi, 5))
                    if not (vi < 2 or vi >= 6) and vi != 4:
                        A[vi] = 0
    """)
    store, branch = inner_block(func).block.body.stmts
    vi = inner_block(func).block.iter_vars[0].var
    expected = ir.max_(ir.min_(vi // 3, vi % 3), vi // 2 + vi % 5)
    ir.assert_structural_equal(store.value, expected)
    ir.assert_structural_equal(branch.cond, ir.and_(ir.Not(ir.or_(vi < 2, vi >= 6)),
                                                    ir.ne(vi, 4)))


def test_block_attr_and_ir_module():
    module = T.parse(textwrap.dedent("""
        @T.ir_module
        class Mod:
            @T.prim_func
            def one(A: T.Buffer((4,), "int32")):
                for i in range(4):
                    with T.block("A"):
                        vi = T.axis.spatial(4, i)
                        T.block_attr({"tile": 16, "note": "x"})
                        A[vi] = 1

            @T.prim_func
            def two(A: T.Buffer((4,), "int32")):
                T.block_attr({"global_symbol": "two"})
                for i in range(4):
                    with T.block("A"):
                        vi = T.axis.spatial(4, i)
                        A[vi] = 2
    """))
    assert isinstance(module, IRModule)
    assert [f.name for f in module.functions] == ["one", "two"]
    assert inner_block(module["one"]).block.annotations == (("tile", 16), ("note", "x"))
    assert module["two"].root.annotations == (("global_symbol", "two"),)


def test_named_constants_from_the_source_module():
    func = parse("""
        N = 4 * 2

        @T.prim_func
        def fill(A: T.Buffer((N,), "int32")):
            for i in range(N):
                with T.block("A"):
                    vi = T.axis.spatial(N, i)
                    A[vi] = 7
    """)
    assert func.params[0].shape == (8,)
    assert func.body.block.body.extent == 8


def test_decorator_reads_closure_constants():
    size = 6

    @T.prim_func
    def fill(A: T.Buffer((size,), "int32")):
        for i in range(size):
            with T.block("A"):
                vi = T.axis.spatial(size, i)
                A[vi] = 0

    assert fill.params[0].shape == (6,)


def test_missing_regions_are_inferred():
    from ir.regions import infer_block_regions

    func = parse("""
        @T.prim_func
        def add(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32")):
            for i in range(8):
                with T.block("B"):
                    vi = T.axis.spatial(8, i)
                    B[vi] = A[vi] + 1
    """)
    block = inner_block(func).block
    reads, writes = infer_block_regions(block)
    assert block.reads == tuple(reads) and block.writes == tuple(writes)
    assert [r.buffer.name for r in block.reads] == ["A"]
    assert [w.buffer.name for w in block.writes] == ["B"]


def test_load_file_parses_without_running(tmp_path):
    path = tmp_path / "kern.py"
    path.write_text(textwrap.dedent("""
        import this_module_does_not_exist
        from ir import script as T

        @T.prim_func
        def k(A: T.Buffer((4,), "int32")):
            for i in range(4):
                with T.block("A"):
                    vi = T.axis.spatial(4, i)
                    A[vi] = 1

        def helper():
            return 1
    """))
    kernels = T.load_file(path)
    assert list(kernels) == ["k"]
    assert kernels["k"].params[0].loc.file == str(path)


def test_script_functions_fail_outside_a_kernel():
    with pytest.raises(KernelError, match="only inside a @T.prim_func"):
        T.grid(4, 4)


def test_parse_compute_matmul_semantics():
    A, B, C = (Buffer("A", (16, 16), "float16"), Buffer("B", (16, 16), "float16"),
               Buffer("C", (16, 16), "float32"))
    i, j, k = Var("i"), Var("j"), Var("k")
    store = T.parse_compute("C[i, j] += f32(A[i, k]) * f32(B[k, j])", {"A": A, "B": B, "C": C},
                            {"i": i, "j": j, "k": k})
    expected = BufferStore(C, C[i, j] + Cast(dtypes.float32, A[i, k])
                           * Cast(dtypes.float32, B[k, j]), (i, j))
    ir.assert_structural_equal(store, expected)
    assert store == expected


def test_parse_compute_vector_dot():
    A, B, C = (Buffer("A", (4, 4), "int8"), Buffer("B", (4,), "int8"),
               Buffer("C", (4,), "int32"))
    i, k = Var("i"), Var("k")
    store = T.parse_compute("C[i] = C[i] + i32(A[i, k]) * i32(B[k])", {"A": A, "B": B, "C": C},
                            {"i": i, "k": k})
    assert store == BufferStore(C, C[i] + Cast(dtypes.int32, A[i, k]) * Cast(dtypes.int32, B[k]),
                                (i,))


def test_ir_module_decorator_on_a_class():
    @T.ir_module
    class Kernels:
        @T.prim_func
        def zero(A: T.Buffer((4,), "float32")):
            for i in range(4):
                with T.block("A"):
                    vi = T.axis.spatial(4, i)
                    A[vi] = 0.0

    assert isinstance(Kernels, IRModule)
    assert [f.name for f in Kernels.functions] == ["zero"]
    assert Kernels["zero"].params[0].loc.file == __file__


def test_columns_count_characters_not_bytes():
    source = textwrap.dedent("""\
        @T.prim_func
        def k(A: T.Buffer((4,), "int32")):
            for i in range(4):
                with T.block("é"):
                    vi = T.axis.spatial(4, i)
                    A[vi] = 1; T.block_attr({"ü": 1}); A[vi] = ZZ
    """)
    with pytest.raises(KernelError) as info:
        T.parse(source)
    assert info.value.loc.col == source.splitlines()[5].index("ZZ") + 1
