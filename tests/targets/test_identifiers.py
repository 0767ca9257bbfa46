"""targets.identifiers: one rule maps any IR name to an identifier every backend accepts.

Properties (hypothesis): any string becomes an ASCII identifier that is no reserved word and
not in the generated code's own ``tz_`` namespace; distinct names stay distinct (demangle
gives each name back); plain names stay as they are. Then the rule against the real tools:
every object-like macro of the headers the CUDA source includes (g++ with the emulation's
headers, nvcc with CUDA's) is mangled, so no identifier can be one; a translation unit
declaring mangled hostile names as parameters and locals compiles with g++ against the
emulation's headers (and with nvcc); and LLVM reads them as ASCII names."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llvmlite import binding as llvm
from llvmlite import ir as ll

from targets.cuda import nvcc_path
from targets.identifiers import RESERVED, RESERVED_PATTERNS, Namer, demangle, is_plain, mangle

IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
EMULATION = Path(__file__).resolve().parents[2] / "targets" / "cuda" / "emulation"
INCLUDES = "#include <mma.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
# Names a user could give that generated code cannot hold as they are: C++ keywords, CUDA's
# built-ins and types, macros of the headers, the emitters' own names, names that clash
# once sanitised, and non-ASCII names.
HOSTILE = ["asm", "int", "class", "register", "new", "delete", "this", "and", "not",
           "threadIdx", "blockIdx", "blockDim", "warpSize", "half", "wmma", "nvcuda", "tz",
           "NULL", "EOF", "NAN", "INFINITY", "stdin", "errno", "INT_MAX", "M_PI", "linux",
           "cudaStreamLegacy", "TZ_EMULATION", "tz_tid", "tz_warp", "tz_floordiv", "expf",
           "a b", "a_b", "a-b", "a__b", "a_", "_a", "1a", "", "größe", "gr_e", "Ärger",
           "\U0001f600", "x\ny", "*/", "??/", "status", "entry", "lane", "B_global"]


def test_plain_names_stay_and_others_are_escaped():
    assert [mangle(n) for n in ["C", "A_shared", "ax0_1", "gemm_int8", "i"]] == \
        ["C", "A_shared", "ax0_1", "gemm_int8", "i"]
    assert mangle("asm") == "asm_"
    assert mangle("threadIdx") == "threadIdx_"
    assert mangle("größe") == "gr_xf6_xdfe_"
    assert mangle("a b") == "a_x20b_"
    assert mangle("a_b") == "a_b"
    assert mangle("1x") == "v_01x_"
    assert mangle("") == "v_0_"
    assert mangle("tz_tid") == "tz__tid_"
    assert mangle("INT_MAX") == "INT__MAX_"
    assert mangle("\U0001f600") == "v_0_U0001f600_"


def test_hostile_names_become_distinct_identifiers_outside_the_reserved_words():
    mangled = [mangle(n) for n in HOSTILE]
    assert len(set(mangled)) == len(HOSTILE)
    for name, identifier in zip(HOSTILE, mangled):
        _check_identifier(identifier)
        assert demangle(identifier) == name


def _check_identifier(identifier: str) -> None:
    assert IDENTIFIER.fullmatch(identifier), identifier
    # Plain (no reserved word, checked), or escaped: ending with "_", as no reserved word,
    # no macro (checked below against the real headers) and no plain name does.
    assert is_plain(identifier) or identifier.endswith("_"), identifier
    assert identifier not in RESERVED
    # The generated code's own names are tz_ and a letter or digit.
    assert not re.match(r"tz_[A-Za-z0-9]", identifier), identifier


def test_no_reserved_word_ends_with_an_underscore():
    assert not [w for w in RESERVED if w.endswith("_") or not IDENTIFIER.fullmatch(w)]


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_any_string_maps_to_a_valid_identifier_that_gives_the_name_back(name):
    identifier = mangle(name)
    _check_identifier(identifier)
    assert identifier.isascii()
    assert demangle(identifier) == name
    assert mangle(name) == identifier  # deterministic


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=6), st.text(max_size=6))
def test_distinct_names_stay_distinct(a, b):
    assert (mangle(a) == mangle(b)) == (a == b)


@settings(max_examples=200, deadline=None)
@given(st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,5}(_[A-Za-z0-9]{1,4}){0,3}", fullmatch=True))
def test_plain_names_are_kept(name):
    if name in RESERVED or any(p.fullmatch(name) for p in RESERVED_PATTERNS):
        assert mangle(name) == name.replace("_", "__") + "_"
    else:
        assert is_plain(name) and mangle(name) == name


@pytest.mark.parametrize("identifier", ["x_", "asm", "a_x2_", "a_x2g_", "v_0a_", "v_0a__", "_"])
def test_demangle_refuses_what_mangle_never_makes(identifier):
    with pytest.raises(ValueError, match="no identifier mangle makes|no escape"):
        demangle(identifier)


def test_namer_gives_repeated_names_a_suffix_and_keeps_internal_names_apart():
    namer = Namer(["B"])
    assert [namer.user(n) for n in ["i", "i", "i_1", "B", "asm", "asm"]] == \
        ["i", "i_1", "i_1_1", "B_1", "asm_", "asm__1"]
    assert [namer.internal("tz_i"), namer.internal("tz_i")] == ["tz_i", "tz_i_1"]
    assert namer.user("tz_i") == "tz__i_"
    with pytest.raises(ValueError, match="requires a name tz_WORD"):
        namer.internal("i")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=4), max_size=12))
def test_a_namer_never_repeats_an_identifier(names):
    namer = Namer()
    given_out = [namer.user(n) for n in names] + [namer.internal("tz_i") for _ in names]
    assert len(set(given_out)) == len(given_out)
    for identifier in given_out:
        assert IDENTIFIER.fullmatch(identifier)


def _object_macros(command: list[str]) -> set[str]:
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    found = set()
    for line in done.stdout.splitlines():
        match = re.match(r"#define (\w+)(\(?)", line)
        if match and not match.group(2) and not match.group(1).startswith("_"):
            found.add(match.group(1))
    return found


def _check_macros(macros: set[str]) -> None:
    assert len(macros) > 100  # the headers were read
    kept = sorted(m for m in macros if mangle(m) == m)
    assert kept == [], f"macros a user's name would stand for as it is: {kept}"
    assert not [m for m in macros if m.endswith("_")], "a macro could be an escaped name"


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++")
def test_no_macro_of_the_emulation_headers_is_a_plain_name(tmp_path):
    source = tmp_path / "includes.cpp"
    source.write_text(INCLUDES)
    _check_macros(_object_macros(["g++", "-std=c++17", "-dM", "-E", f"-I{EMULATION}",
                                  str(source)]))


@pytest.mark.skipif(nvcc_path() is None, reason="no nvcc")
def test_no_macro_of_the_cuda_headers_is_a_plain_name(tmp_path):
    source = tmp_path / "includes.cu"
    source.write_text(INCLUDES)
    _check_macros(_object_macros([nvcc_path(), "-std=c++17", "-arch=sm_80", "-E",
                                  "-Xcompiler", "-dM", str(source)]))


def _translation_unit(names: list[str]) -> str:
    """A kernel-shaped function taking each mangled name as a parameter and declaring each
    again as a local in an inner scope, using the names the emitted code uses there."""
    params = ", ".join(f"int* {mangle(n)}" for n in names)
    locals_ = "\n".join(f"    const int {mangle(n)} = threadIdx.x + {k};"
                        for k, n in enumerate(names))
    uses = " + ".join(mangle(n) for n in names)
    return (f'{INCLUDES}using namespace nvcuda;\n'
            f'extern "C" __global__ void {mangle("asm")}_k0({params}) {{\n'
            f"  int tz_sum = *{mangle(names[-1])};\n"
            f"  {{\n{locals_}\n    half h = (half)expf(1.0f);\n"
            f"    tz_sum += {uses} + (int)(float)h + blockIdx.x + blockDim.x;\n  }}\n"
            f"  *{mangle(names[0])} = tz_sum;\n}}\n")


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++")
def test_mangled_hostile_names_compile_against_the_emulation_headers(tmp_path):
    source = tmp_path / "names.cpp"
    source.write_text(_translation_unit(HOSTILE))
    done = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", f"-I{EMULATION}", str(source)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.skipif(nvcc_path() is None, reason="no nvcc")
def test_nvcc_compiles_the_mangled_hostile_names(tmp_path):
    source = tmp_path / "names.cu"
    source.write_text(_translation_unit(HOSTILE))
    done = subprocess.run([nvcc_path(), "-std=c++17", "-arch=sm_80", "--ptx", "-o",
                           str(tmp_path / "names.ptx"), str(source)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def test_llvm_reads_the_mangled_names_and_finds_the_symbol():
    symbol = "tensorize_" + mangle("größe\n")
    module = ll.Module(name=mangle("größe\n"))
    function = ll.Function(module, ll.FunctionType(ll.VoidType(), [ll.PointerType()] *
                                                   len(HOSTILE)), symbol)
    for arg, name in zip(function.args, HOSTILE):
        arg.name = mangle(name)
    ll.IRBuilder(function.append_basic_block(mangle("Ä") + ".body")).ret_void()
    text = str(module)
    assert text.isascii()
    parsed = llvm.parse_assembly(text)
    parsed.verify()
    assert parsed.get_function(symbol).name == symbol
    assert [a.name for a in parsed.get_function(symbol).arguments] == \
        [mangle(n) for n in HOSTILE]
