"""targets.cuda.writer: C++ text with the indentation and braces kept by the writer."""

from __future__ import annotations

import doctest
import importlib

import pytest

from targets.cuda.writer import CppWriter


def test_docstring_example_runs():
    module = importlib.import_module("targets.cuda.writer")
    assert doctest.testmod(module).failed == 0


def test_blocks_nest_two_spaces_a_level_and_close_at_their_own():
    out = CppWriter()
    with out.block('extern "C" __global__ void k(int* A)'):
        with out.block(comment="block C"):
            out.line("const int i = threadIdx.x;")
        with out.block("struct S", close="};"):
            out.line("int x;")
    assert out.text() == ('extern "C" __global__ void k(int* A) {\n'
                          "  {  // block C\n"
                          "    const int i = threadIdx.x;\n"
                          "  }\n"
                          "  struct S {\n"
                          "    int x;\n"
                          "  };\n"
                          "}")
    assert out.depth == 0


def test_a_scope_keeps_its_body_at_its_own_depth():
    out = CppWriter(depth=1)
    with out.scope("const int by = blockIdx.y;"):
        with out.scope("const int ty = threadIdx.y;"):
            out.line("f(by, ty);")
    assert out.lines == ["  { const int by = blockIdx.y;", "  { const int ty = threadIdx.y;",
                         "  f(by, ty);", "  }", "  }"]


def test_else_and_else_if_continue_the_closed_if():
    out = CppWriter()
    with out.block("if (a)"):
        out.line("x();")
    with out.else_block("if (b)"):
        out.line("y();")
    with out.else_block():
        out.line("z();")
    assert out.text() == "if (a) {\n  x();\n} else if (b) {\n  y();\n} else {\n  z();\n}"


def test_every_line_of_a_multi_line_text_is_indented_and_blank_lines_stay_empty():
    out = CppWriter(depth=2)
    out.line("a();\n\nb();")
    assert out.lines == ["    a();", "", "    b();"]


@pytest.mark.parametrize("before", [[], ["x();"], ["  }"]], ids=["empty", "statement", "deeper"])
def test_an_else_needs_the_block_just_closed(before):
    out = CppWriter()
    for text in before:
        out.line(text)
    with pytest.raises(ValueError, match="else_block: requires the line before to close a "
                                         "block at depth 0"):
        with out.else_block():
            pass
