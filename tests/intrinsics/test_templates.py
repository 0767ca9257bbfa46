"""Emit templates: placeholders, each backend's grammar, and the values render admits."""

import re

import pytest
from llvmlite import binding as llvm

from intrinsics.templates import Placeholder, TemplateError, parse, placeholders
from simulator import assemble
from simulator.isa import Gemm

MMA = "nvcuda::wmma::mma_sync({C}, {A}, {B}, {C});"
STORE = "nvcuda::wmma::store_matrix_sync({dst}, {src}, {dst.ld}, nvcuda::wmma::mem_col_major);"


def test_placeholders_in_order_with_attributes() -> None:
    assert placeholders("ld({dst}, {src}, {src.ld})") == [
        Placeholder("dst", None), Placeholder("src", None), Placeholder("src", "ld")]


@pytest.mark.parametrize("template, fragment, offset", [
    ("mma({C)", "a lone '{'", 4),
    ("mma({C:x})", "requires an operand name or name.attribute", 4),
    ("mma({})", "names no operand", 4),
])
def test_malformed_placeholders(template: str, fragment: str, offset: int) -> None:
    with pytest.raises(TemplateError, match=re.escape(fragment)) as caught:
        placeholders(template)
    assert caught.value.offset == offset


def test_cuda_template_renders_its_one_call() -> None:
    assert parse("cuda", STORE).render({"dst": "out", "src": "acc", "dst.ld": "48"}) == \
        "nvcuda::wmma::store_matrix_sync(out, acc, 48, nvcuda::wmma::mem_col_major);"
    assert parse("cuda", "nvcuda::wmma::fill_fragment({dst}, -0.5f);").placeholders == [
        Placeholder("dst", None)]


@pytest.mark.parametrize("template, fragment, at", [
    ('system("id");', "requires a call of nvcuda::wmma::mma_sync", "system"),
    (MMA + " system(0);", "requires one statement, ending at its ';', got 'system'",
     "system"),
    ("#include <cstdlib>", "got '#'", "#"),
    (MMA + "\nabort();", "requires one line of printable ASCII text, got '\\n'", "\n"),
    ("nvcuda::wmma::mma_sync({C}, {A}, {B}, {C}) // x", "requires ';' ending the call", "//"),
    ("nvcuda::wmma::fill_fragment({dst}, std::exit);", "got 'std::exit'", "std"),
    ('nvcuda::wmma::fill_fragment({dst}, "x");', "requires an argument", '"x'),
    ("nvcuda::wmma::mma_sync({C}, {A}, {B}, {C}) {{ abort(); }}", "a lone '{'", "{{ abort"),
])
def test_cuda_grammar_refuses(template: str, fragment: str, at: str) -> None:
    with pytest.raises(TemplateError, match=re.escape(fragment)) as caught:
        parse("cuda", template)
    assert caught.value.offset == template.rindex(at)


@pytest.mark.parametrize("template, declare, params", [
    ("{D} = call <4 x i32> @llvm.aarch64.neon.sdot.v4i32.v16i8(<4 x i32> {C}, <16 x i8> {B}, "
     "<16 x i8> {A})",
     "declare <4 x i32> @llvm.aarch64.neon.sdot.v4i32.v16i8(<4 x i32>, <16 x i8>, <16 x i8>)",
     "<4 x i32> %C, <16 x i8> %A, <16 x i8> %B"),
    ("{D} = call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> {C}, <16 x i32> {A}, "
     "<16 x i32> {B})",
     "declare <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32>, <16 x i32>, <16 x i32>)",
     "<16 x i32> %C, <16 x i32> %A, <16 x i32> %B"),
    ("call void @llvm.aarch64.hint(i32 {A})", "declare void @llvm.aarch64.hint(i32)",
     "i32 %A"),
    ("{D} = load <16 x i8>, ptr {A}, align 1", "", "ptr %A"),
    ("store <4 x i32> {C}, ptr {A}, align 4", "", "<4 x i32> %C, ptr %A"),
    ("{D} = bitcast <4 x i32> zeroinitializer to <4 x i32>", "", ""),
])
def test_llvm_templates_are_llvm_ir(template: str, declare: str, params: str) -> None:
    # LLVM's own parser is the reference: what the grammar admits, filled with value names,
    # must be valid IR.
    line = parse("llvm", template).render({"A": "%A", "B": "%B", "C": "%C", "D": "%D"})
    llvm.parse_assembly(f"{declare}\ndefine void @f({params}) {{\n  {line}\n  ret void\n}}\n"
                        ).verify()


@pytest.mark.parametrize("template, fragment, at", [
    ("{C} = call <4 x i32> @system(<4 x i32> {C})", "requires an LLVM intrinsic @llvm.<arch>",
     "@system"),
    ("{C} = call <4 x i32> @llvm.nvvm.foo(<4 x i32> {C})", "arch one of aarch64, arm, x86",
     "@llvm"),
    ("store <4 x i32> {src}, ptr {dst}, align 3", "align requires a power of two, got 3", "3"),
    ("load <4 x i32>, ptr {src}", "load requires a result", "load"),
    ("{dst} = load <4 x i32>, ptr @g", "a placeholder standing for the address", "@g"),
    ("{dst} = load <4 x i32>, ptr {src}; call void @exit()", "got ';'", ";"),
    ("{dst} = add <4 x i32> {src}, {src}", "an instruction: call, load, store or bitcast",
     "add"),
    ("{dst} = load <4 x f32>, ptr {src}", "a lane type", "f32"),
    # Numbers a register's value cannot have: the code generator would build them.
    ("{dst} = load <100000000 x i8>, ptr {src}", "<N x T> requires N lanes, 1 to 8192 bits "
     "in all (the widest register a CPU target describes), got <100000000 x i8>", "<"),
    ("{dst} = load <0x10 x i8>, ptr {src}", "got <0x10 x i8>", "<"),
    ("{dst} = load <0 x i8>, ptr {src}", "got <0 x i8>", "<"),
    ("store <4 x i32> {src}, ptr {dst}, align 1099511627776",
     "align requires at most 4096 (a page), got 1099511627776", "1099511627776"),
])
def test_llvm_grammar_refuses(template: str, fragment: str, at: str) -> None:
    with pytest.raises(TemplateError, match=re.escape(fragment)) as caught:
        parse("llvm", template)
    assert caught.value.offset == template.rindex(at)


def test_a_multi_register_result_is_the_intrinsics_struct() -> None:
    # [N x <M x T>] names the N registers an ld1x4-like intrinsic returns; what a code
    # generator calls is the literal struct of them, which LLVM's parser accepts as IR.
    template = "{D} = call [4 x <16 x i8>] @llvm.aarch64.neon.ld1x4.v16i8.p0(ptr {A})"
    assert parse("llvm", template).render({"A": "%A", "D": "%D"}) == template.replace(
        "{A}", "%A").replace("{D}", "%D")
    struct = "{ <16 x i8>, <16 x i8>, <16 x i8>, <16 x i8> }"
    llvm.parse_assembly(
        f"declare {struct} @llvm.aarch64.neon.ld1x4.v16i8.p0(ptr)\n"
        f"define void @f(ptr %A) {{\n  %D = call {struct} @llvm.aarch64.neon.ld1x4.v16i8.p0("
        "ptr %A)\n  ret void\n}\n").verify()


@pytest.mark.parametrize("template, fragment, at", [
    ("{D} = call [5 x <16 x i8>] @llvm.aarch64.neon.ld1x4.v16i8.p0(ptr {A})",
     "N of 2, 3 or 4 registers, got 5", "5"),
    ("{D} = call [4 x i8] @llvm.aarch64.neon.ld1x4.v16i8.p0(ptr {A})",
     "a vector type <M x T> in [N x <M x T>]", "i8"),
    ("{D} = call [4 x <16 x i8> @llvm.aarch64.neon.ld1x4.v16i8.p0(ptr {A})",
     "']' closing [N x <M x T>]", "@llvm"),
    ("call [4 x <16 x i8>] @llvm.aarch64.neon.ld1x4.v16i8.p0(ptr {A})", "a type", "["),
    ("{D} = load [4 x <16 x i8>], ptr {A}", "a type", "["),
])
def test_llvm_grammar_refuses_a_bad_register_group(template: str, fragment: str,
                                                   at: str) -> None:
    with pytest.raises(TemplateError, match=re.escape(fragment)) as caught:
        parse("llvm", template)
    assert caught.value.offset == template.index(at)


def test_npu_template_is_read_by_the_assembler() -> None:
    template = parse("npu", "gemm acc[{C}], inp[{A}], wgt[{B}], rows=16, k=16, reset")
    (insn,) = assemble(template.render({"C": "32", "A": "0", "B": "16"}))
    assert insn == Gemm(acc=32, inp=0, wgt=16, rows=16, k=16, reset=True)


@pytest.mark.parametrize("template, fragment, at", [
    ("matmul acc[{C}], inp[{A}]", "unknown mnemonic 'matmul'", "matmul"),
    ("gemm acc[{C}], inp[{A}], wgt[{B}], rows=16, k=16 | pop_prev", "got '|'", "|"),
    ("gemm acc[{C}], inp[{A}], wgt[{B}], rows=16, k=16 # {D}", "got '#'", "#"),
    ("gemm acc[{C}], inp[{A}], wgt[{B}], rows=16", "gemm requires 'k=...'", "gemm"),
    ("gemm acc[{C}], inp[{A}], wgt[{B}], rows=16, k=16, bogus", "no flag 'bogus'", "bogus"),
])
def test_npu_grammar_refuses(template: str, fragment: str, at: str) -> None:
    with pytest.raises(TemplateError, match=re.escape(fragment)) as caught:
        parse("npu", template)
    assert caught.value.offset == template.rindex(at)


def test_other_backends_get_an_assembly_grammar() -> None:
    template = parse("mac", "ld {dst}, [{src}], stride={src.ld}")
    assert template.render({"dst": "r0", "src": "a0", "src.ld": "8"}) == "ld r0, [a0], stride=8"
    with pytest.raises(TemplateError, match="',' between operands, got ';'"):
        parse("mac", "mma {C}; rm -rf")


@pytest.mark.parametrize("backend, template, value", [
    ("cuda", MMA, "c); system(0"),
    ("cuda", MMA, "a, b"),
    ("cuda", MMA, "exit(0)"),
    ("cuda", MMA, "c /* x */"),
    ("cuda", MMA, "c\n#include <x>"),
    ("llvm", "store <4 x i32> {C}, ptr {A}, align 4", "%c, ptr %p\n  call void @exit()"),
    ("npu", "vec.relu acc[{C}], rows=16", "0], rows=16\nfinish"),
])
def test_render_refuses_values_outside_the_grammar(backend: str, template: str,
                                                   value: str) -> None:
    with pytest.raises(TemplateError, match="requires"):
        parse(backend, template).render({"A": "a", "B": "b", "C": value})


@pytest.mark.parametrize("value", [
    "(&A_shared[tz_warp * 256 + ((ty * 16) + k)])",
    "frag_a[(x) / 16][tz_floordiv<int>(i, 16)]",
    "tz_min<long long>(a, (b < c))",
    "((int)(0x1.8p+3f))",
])
def test_render_admits_the_cuda_backends_expressions(value: str) -> None:
    assert parse("cuda", MMA).render({"A": "a", "B": "b", "C": value}) == \
        f"nvcuda::wmma::mma_sync({value}, a, b, {value});"
