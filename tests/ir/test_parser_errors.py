"""Every malformed kernel gets a KernelError at the user's line and column, saying what is
wrong, with none of the front end's internals in the message."""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

import pytest

from ir import Buffer, KernelError, Var
from ir import script as T

_INTERNALS = ("ir/script", "func_parser", "exprs.py", "Traceback", "IRError", "site-packages")


def check_error(tmp_path: Path, source: str, fragment: str, line: int, col: int) -> KernelError:
    """Parse ``source`` from a file; expect a KernelError with ``fragment`` at (line, col)."""
    path = tmp_path / "kernel.py"
    path.write_text(textwrap.dedent(source).lstrip("\n"))
    with pytest.raises(KernelError) as info:
        T.load_file(path)
    err = info.value
    assert fragment in err.message
    assert (err.loc.file, err.loc.line, err.loc.col) == (str(path), line, col)
    rendered = str(err)
    assert rendered.startswith(f"{path}:{line}:{col}: ")
    assert not any(name in rendered for name in _INTERNALS)
    assert err.__suppress_context__ or err.__cause__ is None
    return err


HEADER = textwrap.dedent("""
    from ir import script as T

    @T.prim_func
    def k(A: T.Buffer((16, 16), "int8"), C: T.Buffer((16, 16), "int32")):
        for i, j, k in T.grid(16, 16, 16):
            with T.block("C"):
""").lstrip("\n")
# The first body line of a kernel built from HEADER is file line 7, indented 12.


def kernel(*lines: str) -> str:
    return HEADER + "".join(f"            {line}\n" for line in lines)


def test_unknown_buffer(tmp_path):
    err = check_error(tmp_path, kernel('vi, vj = T.axis.remap("SS", [i, j])',
                                       "C[vi, vj] = T.cast(B[vi, vj], \"int32\")"),
                      "unknown buffer B", 8, 32)
    assert "A, C" in err.message


def test_load_with_wrong_number_of_indices(tmp_path):
    check_error(tmp_path, kernel('vi, vj = T.axis.remap("SS", [i, j])',
                                 'C[vi, vj] = T.cast(A[vi], "int32")'),
                "buffer A has 2 dimensions but is indexed with 1", 8, 32)


def test_store_with_wrong_number_of_indices(tmp_path):
    check_error(tmp_path, kernel('vi, vj = T.axis.remap("SS", [i, j])', "C[vi, vj, vi] = 0"),
                "buffer C has 2 dimensions but is indexed with 3", 8, 13)


def test_non_affine_binding(tmp_path):
    check_error(tmp_path, kernel("vi = T.axis.spatial(16, i * i)", "vj = T.axis.spatial(16, j)",
                                 "C[vi, vj] = 0"),
                "requires an affine expression", 7, 37)


def test_reduce_iterator_in_output_index(tmp_path):
    check_error(tmp_path, kernel('vi, vj, vk = T.axis.remap("SSR", [i, j, k])',
                                 "with T.init():",
                                 "    C[vi, vj] = 0",
                                 "C[vi, vk] = C[vi, vk] + 1"),
                "got reduce iterator vk", 10, 13)


def test_store_of_wrong_dtype(tmp_path):
    err = check_error(tmp_path, kernel('vi, vj = T.axis.remap("SS", [i, j])',
                                       "C[vi, vj] = A[vi, vj]"),
                      "store to C requires a int32 value, got int8", 8, 25)
    assert 'T.cast(value, "int32")' in err.message


def test_adding_int8_to_int32(tmp_path):
    err = check_error(tmp_path, kernel('vi, vj = T.axis.remap("SS", [i, j])',
                                       "C[vi, vj] = C[vi, vj] + A[vi, vj]"),
                      "'+' requires operands of one dtype, got int32 and int8", 8, 25)
    assert 'T.cast(x, "int32")' in err.message


def test_unknown_script_function_suggests_the_right_one(tmp_path):
    source = HEADER.replace("T.grid(16, 16, 16)", "T.gird(16, 16, 16)")
    source += "            C[0, 0] = 0\n"
    err = check_error(tmp_path, source, "unknown function T.gird", 5, 20)
    assert "did you mean T.grid?" in err.message


def test_unknown_function_in_an_expression(tmp_path):
    check_error(tmp_path, kernel('vi, vj = T.axis.remap("SS", [i, j])',
                                 "C[vi, vj] = T.maxx(0, 1)"),
                "unknown function T.maxx", 8, 25)


def test_remap_kinds_length_mismatch(tmp_path):
    check_error(tmp_path, kernel('vi, vj = T.axis.remap("SSR", [i, j])', "C[vi, vj] = 0"),
                "'SSR' has 3 but 2 bindings are given", 7, 35)


def test_remap_names_count_mismatch(tmp_path):
    check_error(tmp_path, kernel('vi, vj = T.axis.remap("SSR", [i, j, k])', "C[vi, vj] = 0"),
                "declares 3 iterators ('SSR') but assigns 2 names", 7, 13)


def test_binding_outside_the_extent(tmp_path):
    source = HEADER.replace("T.grid(16, 16, 16)", "T.grid(32, 16, 16)")
    source += "            vi = T.axis.spatial(16, i)\n"
    source += "            vj = T.axis.spatial(16, j)\n"
    source += "            C[vi, vj] = 0\n"
    check_error(tmp_path, source, "requires its binding to stay in [0, 15], got i ranging over "
                                  "[0, 31]", 7, 18)


def test_block_uses_a_loop_variable(tmp_path):
    err = check_error(tmp_path, kernel('vi, vj = T.axis.remap("SS", [i, j])', "C[vi, j] = 0"),
                      "block 'C' requires only its own iterators, got j", 8, 13)
    assert "T.axis.spatial(extent, j)" in err.message


def test_init_without_reduce_iterator(tmp_path):
    check_error(tmp_path, kernel('vi, vj = T.axis.remap("SS", [i, j])', "with T.init():",
                                 "    C[vi, vj] = 0", "C[vi, vj] = 1"),
                "block 'C' has an init but no reduce iterator", 6, 9)


def test_unknown_name(tmp_path):
    err = check_error(tmp_path, kernel('vi, vj = T.axis.remap("SS", [i, j])', "C[vi, vk] = 0"),
                      "unknown name vk", 8, 19)
    assert "did you mean" in err.message


def test_non_constant_loop_extent(tmp_path):
    source = HEADER.replace("T.grid(16, 16, 16)", "T.grid(16, 16, n)") + "            C[0, 0] = 0\n"
    check_error(tmp_path, source, "T.grid requires a constant integer, got n", 5, 35)


def test_block_header_outside_a_block(tmp_path):
    check_error(tmp_path, """
        from ir import script as T

        @T.prim_func
        def k(A: T.Buffer((16,), "int8")):
            T.reads(A[0])
            for i in range(16):
                A[i] = 0
    """, "T.reads describes a block", 5, 5)


def test_parameter_without_buffer_annotation(tmp_path):
    check_error(tmp_path, """
        from ir import script as T

        @T.prim_func
        def k(A, B: T.Buffer((4,), "int8")):
            B[0] = 0
    """, "parameter A requires a buffer annotation", 4, 7)


def test_empty_block(tmp_path):
    check_error(tmp_path, kernel('vi, vj = T.axis.remap("SS", [i, j])'),
                "block 'C' requires at least one statement", 6, 9)


def test_float_literal_in_integer_dtype_call(tmp_path):
    check_error(tmp_path, kernel('vi, vj = T.axis.remap("SS", [i, j])', "C[vi, vj] = T.int32(2.5)"),
                "T.int32 requires an integer literal, got 2.5", 8, 25)


def test_constant_out_of_range(tmp_path):
    check_error(tmp_path, kernel('vi, vj = T.axis.remap("SS", [i, j])',
                                 "C[vi, vj] = T.cast(T.int8(300), \"int32\")"),
                "constant 300 does not fit in int8", 8, 32)


def test_python_statement_not_in_the_language(tmp_path):
    check_error(tmp_path, kernel('vi, vj = T.axis.remap("SS", [i, j])', "while True:",
                                 "    C[vi, vj] = 0"),
                "kernels cannot use a Python While statement", 8, 13)


def test_syntax_error(tmp_path):
    check_error(tmp_path, kernel('vi, vj = T.axis.remap("SS", [i, j])', "C[vi, vj] = = 0"),
                "invalid Python syntax", 8, 25)


def test_decorator_error_points_into_this_file():
    with pytest.raises(KernelError) as info:
        decorator_line = inspect.currentframe().f_lineno + 2  # type: ignore[union-attr]

        @T.prim_func
        def bad(A: T.Buffer((8,), "int32")):
            for i in range(8):
                with T.block("A"):
                    vi = T.axis.spatial(8, i)
                    A[vi] = Z[vi]  # noqa: F821

    assert "unknown buffer Z" in info.value.message
    assert (info.value.loc.file, info.value.loc.line) == (__file__, decorator_line + 5)
    assert info.value.loc.col == 29


def test_parse_compute_error_column_is_offset():
    A, C = Buffer("A", (4, 4), "int8"), Buffer("C", (4,), "int32")
    with pytest.raises(KernelError) as info:
        T.parse_compute("C[i] += i32(A[i, q])", {"A": A, "C": C}, {"i": Var("i")},
                        filename="family.yaml", line=12, col=15)
    assert "unknown name q" in info.value.message
    loc = info.value.loc
    assert (loc.file, loc.line, loc.col) == ("family.yaml", 12, 15 + 17)


def test_parse_compute_type_error():
    A, C = Buffer("A", (4, 4), "int8"), Buffer("C", (4,), "int32")
    with pytest.raises(KernelError) as info:
        T.parse_compute("C[i] += A[i, k]", {"A": A, "C": C}, {"i": Var("i"), "k": Var("k")},
                        filename="family.yaml", line=3, col=9)
    assert "'+' requires operands of one dtype, got int32 and int8" in info.value.message
    assert 'cast(x, "int32")' in info.value.message
    assert (info.value.loc.line, info.value.loc.col) == (3, 9)
