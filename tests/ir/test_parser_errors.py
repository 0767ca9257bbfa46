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


def check_error(tmp_path: Path, source: str | bytes, fragment: str, line: int,
                col: int) -> KernelError:
    """Parse ``source`` (text, dedented, or raw bytes) from a file; expect a KernelError with
    ``fragment`` at (line, col)."""
    path = tmp_path / "kernel.py"
    if isinstance(source, bytes):
        path.write_bytes(source)
    else:
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


# -- reading the file ------------------------------------------------------------------------


def test_bytes_that_are_not_utf8(tmp_path):
    source = kernel('vi, vj = T.axis.remap("SS", [i, j])', "C[vi, vj] = 0  # caf\xe9")
    data = source.encode("latin-1")
    err = check_error(tmp_path, data, "requires UTF-8 text, got byte e9 at byte offset "
                      f"{data.index(bytes([0xE9]))}", 8, 33)
    assert "\ufffd" in str(err)  # the line still renders, the bad byte replaced


def test_a_coding_declaration_names_the_encoding(tmp_path):
    path = tmp_path / "kernel.py"
    source = "# -*- coding: latin-1 -*-\n" + kernel('vi, vj = T.axis.remap("SS", [i, j])',
                                                     "C[vi, vj] = 0  # caf\xe9")
    path.write_bytes(source.encode("latin-1"))
    assert list(T.load_file(path)) == ["k"]


def test_an_unknown_coding_declaration(tmp_path):
    check_error(tmp_path, b"# coding: klingon\n" + HEADER.encode(),
                "requires UTF-8 text or a valid coding declaration, got unknown encoding", 1, 1)


def test_a_nul_byte(tmp_path):
    source = kernel('vi, vj = T.axis.remap("SS", [i, j])', "C[vi, vj] = 0")
    check_error(tmp_path, source.replace("= 0", "= \0 0").encode(),
                "Python source requires no NUL bytes", 8, 25)


def test_a_syntax_error_after_a_form_feed_keeps_its_line(tmp_path):
    # str.splitlines() would count the form feed as a line break; Python does not.
    source = kernel('vi, vj = T.axis.remap("SS", [i, j])', "C[vi, vj] = 0 \f", "C[vi, vj] = = 0")
    check_error(tmp_path, source, "invalid Python syntax", 9, 25)


# -- values the IR cannot hold ---------------------------------------------------------------


def test_integer_division_by_a_literal_zero(tmp_path):
    check_error(tmp_path, kernel('vi, vj = T.axis.remap("SS", [i, j])',
                                 "C[vi, vj] = T.cast(A[vi // 0, vj], \"int32\")"),
                "'//' requires a nonzero divisor, got 0", 8, 34)


def test_modulo_by_zero_in_a_constant_extent(tmp_path):
    source = HEADER.replace("T.grid(16, 16, 16)", "T.grid(16, 16, 16 % 0)")
    check_error(tmp_path, source + "            C[0, 0] = 0\n",
                "T.grid requires a nonzero divisor, got 0", 5, 35)


def test_a_loop_extent_past_int32(tmp_path):
    source = HEADER.replace("T.grid(16, 16, 16)", "T.grid(16, 16, 10000000000)")
    check_error(tmp_path, source + "            C[0, 0] = 0\n",
                "loop k requires an extent of at most 2147483647 (its variable is int32), got "
                "10000000000", 5, 5)


def test_an_iterator_extent_past_int32(tmp_path):
    check_error(tmp_path, kernel("vi = T.axis.spatial(1 << 40, i)", "C[vi, 0] = 0"),
                "T.axis.spatial requires a constant integer, got 1 << 40", 7, 33)
    check_error(tmp_path, kernel("vi = T.axis.spatial(4294967296, i)", "C[vi, 0] = 0"),
                "iterator vi requires an extent of at most 2147483647", 7, 18)


def test_a_buffer_dimension_past_int32(tmp_path):
    check_error(tmp_path, HEADER.replace("(16, 16), \"int8\"", "(16, 4294967296), \"int8\"")
                + "            C[0, 0] = 0\n",
                "buffer A requires extents of at most 2147483647 (indices are int32)", 4, 10)


@pytest.mark.parametrize("extent", ["0", "-4"])
def test_a_loop_extent_that_is_not_positive(tmp_path, extent):
    source = HEADER.replace("T.grid(16, 16, 16)", f"T.grid(16, 16, {extent})")
    check_error(tmp_path, source + "            C[0, 0] = 0\n",
                f"loop k requires a positive constant extent, got {extent}", 5, 5)


def test_a_float_loop_extent(tmp_path):
    source = HEADER.replace("T.grid(16, 16, 16)", "T.grid(16, 16, 1e9)")
    check_error(tmp_path, source + "            C[0, 0] = 0\n",
                "T.grid requires a constant integer, got 1e9", 5, 35)


def test_a_float_from_a_string_that_is_not_inf_or_nan(tmp_path):
    check_error(tmp_path, kernel('vi, vj = T.axis.remap("SS", [i, j])',
                                 "C[vi, vj] = T.cast(T.float32(\"lots\"), \"int32\")"),
                "T.float32 takes a string only for \"inf\", \"-inf\" or \"nan\", got 'lots'",
                8, 42)


def test_an_empty_region_slice(tmp_path):
    check_error(tmp_path, kernel('vi, vj = T.axis.remap("SS", [i, j])', "T.reads(A[vi, 5:2])",
                                 "T.writes(C[vi, vj])", "C[vi, vj] = T.cast(A[vi, 5], \"int32\")"),
                "a region slice requires at least one element, got 5:2 (-3 elements)", 8, 27)


def test_an_annotation_that_is_not_hashable(tmp_path):
    check_error(tmp_path, kernel('T.block_attr({"key": {[1]: 2}})',
                                 'vi, vj = T.axis.remap("SS", [i, j])', "C[vi, vj] = 0"),
                "T.block_attr requires string or number values, got {[1]: 2}", 7, 34)
