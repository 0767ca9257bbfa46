"""A CPU family checked against the installed LLVM at load (intrinsics.llvm_check): the names
LLVM knows pass, those it does not are refused at their line, all in one error per file,
and LLVM is asked once per description in a child process.

The refusals of each kind are cases of tests/intrinsics/broken/ (cpu_*) and of the corpus
(tests/corpus/intrinsics/cpu_*)."""

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from intrinsics import llvm_probe, load_family, load_registry
from intrinsics.registry import BUILTIN_DIR
from ir import IntrinsicSpecError

INTERNAL = re.compile(r"Traceback|\bintrinsics\.\w+|\bir\.\w+|YNode|\bself\b")

TOY = """\
target: toy
cpu:
  triple: x86_64-unknown-linux-gnu
  cpu: x86-64
  features: [avx2, avx512f, avx512bw, avx512vl, avx512vnni]
  vector_bytes: 64
  register_scope: toy.zmm
  alignment: 64
  register_tile: {rows: [4, 1], vectors: [2, 1]}
  run: [native]
scopes:
  global: {}
  toy.zmm: {capacity: 2048, alignment: 64}
intrinsics:
  - name: toy_vpdpbusd
    kind: compute
    iterators:
      - {name: i, extent: 16}
      - {name: k, extent: 4, kind: reduce}
    operands:
      - {name: A, role: input, shape: [4], dtype: u8, scope: global}
      - {name: B, role: input, shape: [16, 4], dtype: s8, scope: toy.zmm}
      - {name: C, role: accumulator, shape: [16], dtype: s32, scope: toy.zmm}
    semantics: "C[i] += i32(A[k]) * i32(B[i, k])"
    emit:
      llvm: "CALL"
    cost: {latency: 5, interval: 1}
    reference: https://example.com/toy#vpdpbusd
""".replace("CALL", "{C} = call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> {C}, "
            "<16 x i32> {A}, <16 x i32> {B})")


@pytest.fixture(autouse=True)
def _fresh_answers() -> Iterator[None]:
    llvm_probe._ask.cache_clear()
    yield
    llvm_probe._ask.cache_clear()


@pytest.fixture
def children(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The command line of every child process the probe starts."""
    started: list[list[str]] = []
    run = subprocess.run

    def counting(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        started.append(args)
        return run(args, **kwargs)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(llvm_probe.subprocess, "run", counting)
    return started


def _family(tmp_path: Path, text: str, name: str = "toy.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_llvm_names_with_hyphens_are_accepted(tmp_path: Path) -> None:
    text = TOY.replace("avx512vnni]", "avx512vnni, amx-int8, amx-tile]").replace(
        "  run: [native]", "  tune_cpus: [x86-64, skylake-avx512, x86-64-v4]\n  run: [native]")
    cpu = load_family(_family(tmp_path, text)).cpu
    assert cpu is not None
    assert cpu.features[-2:] == ("amx-int8", "amx-tile")
    assert cpu.tune_cpus == ("x86-64", "skylake-avx512", "x86-64-v4")


def test_every_name_llvm_does_not_know_is_reported_in_one_error(tmp_path: Path) -> None:
    text = TOY.replace("cpu: x86-64", "cpu: skylake-avx513").replace(
        "avx512vnni]", "avx512vnnii]").replace("vpdpbusd.512(", "vpdpbusd.513(")
    path = _family(tmp_path, text)
    with pytest.raises(IntrinsicSpecError) as caught:
        load_family(path)
    found = [(f.loc.line, f.loc.col, f.message) for f in caught.value.findings
             if f.loc is not None and Path(f.loc.file) == path]
    assert [(line, col) for line, col, _ in found] == [(4, 8), (5, 49), (26, 36)]
    assert "cpu requires a CPU LLVM" in found[0][2] and "'skylake-avx512'?" in found[0][2]
    assert "features[4] requires a feature LLVM" in found[1][2]
    assert "emit.llvm requires an intrinsic LLVM" in found[2][2]
    assert "@llvm.x86.avx512.vpdpbusd.513(" in found[2][2]
    assert not any(INTERNAL.search(message) for _, _, message in found)


def test_llvm_is_asked_once_per_description(tmp_path: Path,
                                            children: list[list[str]]) -> None:
    load_family(_family(tmp_path, TOY, "a.yaml"))
    load_family(_family(tmp_path, TOY, "b.yaml"))
    assert len(children) == 1
    assert children[0][1:3] == ["-P", str(Path(llvm_probe.__file__).resolve())]


def test_a_family_without_llvm_templates_starts_no_child(children: list[list[str]]) -> None:
    load_family(BUILTIN_DIR / "npu.yaml")
    load_family(BUILTIN_DIR / "cuda.yaml")
    assert children == []


def test_an_older_signature_llvm_upgrades_is_accepted(tmp_path: Path) -> None:
    # LLVM 21 gave VPDPBUSD <64 x i8> sources; the built-in x86 family calls it with the
    # <16 x i32> ones of earlier releases, which LLVM's reader still upgrades.
    assert load_family(_family(tmp_path, TOY)).cpu is not None
    newer = TOY.replace("<16 x i32> {A}, <16 x i32> {B}", "<64 x i8> {A}, <64 x i8> {B}")
    assert load_family(_family(tmp_path, newer, "newer.yaml")).cpu is not None


def test_intrinsics_added_to_a_cpu_target_are_checked_against_its_triple(
        tmp_path: Path) -> None:
    # A file without a cpu: section adds an AArch64 dot product to x86: LLVM would be
    # asked to compile it for x86-64 when a kernel uses it.
    added = TOY[TOY.index("intrinsics:"):].replace("toy_vpdpbusd", "x86_more_sdot").replace(
        "toy.zmm", "x86.zmm").replace(
        "<16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> {C}, <16 x i32> {A}, "
        "<16 x i32> {B})",
        "<4 x i32> @llvm.aarch64.neon.sdot.v4i32.v16i8(<4 x i32> {C}, <16 x i8> {A}, "
        "<16 x i8> {B})")
    path = _family(tmp_path, "target: x86\nscopes:\n  global: {}\n  x86.zmm: {capacity: 2048, "
                   "alignment: 64}\n" + added, "x86_more.yaml")
    assert load_family(path).cpu is None  # alone, it names nothing LLVM refuses
    with pytest.raises(IntrinsicSpecError) as caught:
        load_registry([BUILTIN_DIR / "x86.yaml", path])
    (finding,) = caught.value.findings
    assert finding.loc is not None and (finding.loc.line, finding.loc.col) == (6, 11)
    assert finding.message.startswith(
        "intrinsic x86_more_sdot: emit.llvm calls @llvm.aarch64.neon.sdot.v4i32.v16i8, which "
        "requires a triple of architecture aarch64 or aarch64_be or aarch64_32, got "
        "x86_64-unknown-linux-gnu (x86_64)")
    assert not INTERNAL.search(finding.message)


def test_a_family_llvm_cannot_be_asked_about_is_refused_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llvm_probe.sys, "executable", "/nonexistent/python")
    with pytest.raises(IntrinsicSpecError) as caught:
        load_family(_family(tmp_path, TOY))
    (finding,) = caught.value.findings
    assert finding.loc is not None and (finding.loc.line, finding.loc.col) == (3, 11)
    assert finding.message.startswith("a CPU family requires the installed LLVM to check "
                                      "what it hands LLVM, got no LLVM that could be asked")
