"""An NPU family is refused when loaded (by ``intrinsics validate`` and by the registry a run
loads alike) unless it can run: its scopes are its machine's memories, its tiles fit a bank,
and each GEMM the engine tries is one the array executes, with its tiles loaded and stored
and its accumulator started at zero. Each refusal is at the YAML line of what to change, with
the reason the NPU schedule gives for the same family at run time."""

from __future__ import annotations

from pathlib import Path

import pytest

from intrinsics import load_family, load_registry
from intrinsics.registry import BUILTIN_DIR, family_files
from ir.errors import IntrinsicSpecError, ScheduleError
from simulator import MachineConfig
from targets.npu import load_machine
from tensorize.engine.npu_schedule import check_executable
from tests.targets.npu.machines import Npu

# An 8x8 array (256 rows in 2 banks per memory) whose family computes 8x8x8 GEMM tiles.
TOY = Npu("toy", 8, 8, i=8, k=8, inp_rows=256, wgt_rows=256, acc_rows=256)
INTERNAL = ("intrinsics.", "simulator.", "targets.", "tensorize.", ".py")


def _write(tmp_path: Path, *changes: tuple[str, str], npu: Npu = TOY) -> Path:
    path = npu.write(tmp_path)
    text = path.read_text()
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new, 1)
    path.write_text(text)
    return path


def _line(path: Path, fragment: str) -> int:
    text = path.read_text()
    return 1 + text[:text.index(fragment)].count("\n")


def _refusal(path: Path) -> IntrinsicSpecError:
    """The one finding loading ``path`` gives, checked to name no module of ours."""
    with pytest.raises(IntrinsicSpecError) as info:
        load_family(path)
    (finding,) = info.value.findings
    assert finding.loc is not None and finding.loc.file == str(path)
    assert not any(name in finding.message for name in INTERNAL), finding.message
    return finding


def test_a_family_on_its_own_machine_loads(tmp_path):
    family = load_family(_write(tmp_path))
    assert {i.name for i in family.intrinsics} >= {"toy_gemm", "toy_gemm_reset"}


def test_the_builtin_and_example_npus_load():
    examples = Path(__file__).resolve().parents[2] / "examples" / "machines"
    for path in [BUILTIN_DIR / "npu.yaml", *sorted(examples.glob("*.yaml"))]:
        assert load_family(path).machine is not None


def test_a_scope_capacity_must_be_the_bytes_of_its_memory(tmp_path):
    path = _write(tmp_path, ("npu.acc: {capacity: 8192,", "npu.acc: {capacity: 4096,"))
    finding = _refusal(path)
    assert "scope npu.acc requires capacity 8192, the bytes of the machine's accumulator " \
           "memory (machine.acc: 256 rows of 8 int32, 2 banks), got 4096" in finding.message
    assert finding.loc.line == _line(path, "npu.acc:")


def test_a_scope_larger_than_its_memory_is_refused(tmp_path):
    path = _write(tmp_path, ("npu.inp: {capacity: 2048,", "npu.inp: {capacity: 1048576,"))
    finding = _refusal(path)
    assert "scope npu.inp requires capacity 2048" in finding.message
    assert finding.message.endswith("got 1048576")


def test_a_scope_must_have_the_banks_of_its_memory(tmp_path):
    path = _write(tmp_path, ("npu.wgt: {capacity: 2048, dtype: int8, banks: 2}",
                             "npu.wgt: {capacity: 2048, dtype: int8, banks: 4}"))
    finding = _refusal(path)
    assert "scope npu.wgt requires banks: 2, the banks of the machine's weight scratchpad" \
        in finding.message
    assert finding.loc.line == _line(path, "npu.wgt:")


def test_a_scope_must_hold_what_its_memory_holds(tmp_path):
    path = _write(tmp_path, ("npu.acc: {capacity: 8192, dtype: int32,",
                             "npu.acc: {capacity: 8192, dtype: [int32, int16],"))
    finding = _refusal(path)
    assert "scope npu.acc requires dtype int32" in finding.message
    assert finding.message.endswith("got int32, int16")


def test_a_tile_taller_than_a_bank_is_refused_once_at_its_first_operand(tmp_path):
    # 16 accumulator rows in 4 banks: a bank holds 4 rows, an 8x8 int32 tile takes 8.
    path = _write(tmp_path, ("acc: {rows: 256, banks: 2}", "acc: {rows: 16, banks: 4}"),
                  ("npu.acc: {capacity: 8192, dtype: int32, banks: 2}",
                   "npu.acc: {capacity: 512, dtype: int32, banks: 4}"))
    finding = _refusal(path)
    assert "operand C: its 8x8 int32 tile takes 8 rows of npu.acc, which requires at most 4, " \
           "the rows of one bank" in finding.message
    assert finding.loc.line == _line(path, "{name: C, role: accumulator")


def test_a_tile_with_no_layout_in_the_rows_is_refused(tmp_path):
    # 12 int32 a row do not lay out in 8-element accumulator rows.
    wide = """
  - name: toy_wide_load
    kind: load
    iterators: [{name: i, extent: 2}, {name: j, extent: 12}]
    operands:
      - {name: dst, role: output, shape: [2, 12], dtype: int32, scope: npu.acc}
      - {name: src, role: input, shape: [2, 12], dtype: int32, scope: global}
    semantics: "dst[i, j] = src[i, j]"
    emit: {npu: "load acc[{dst}], dram[{src}], rows=2, cols=12, stride=48"}
    cost: {latency: 60, interval: 4}
    reference: docs/simulator.md#load
"""
    path = TOY.write(tmp_path)
    path.write_text(path.read_text() + wide)
    finding = _refusal(path)
    assert "operand dst requires its last dimension to be a multiple of the 8-element rows " \
           "of npu.acc (machine.acc) or at most one row, got a 2x12 tile" in finding.message


def test_a_gemm_deeper_than_the_array_is_refused_at_k_with_the_schedules_reason(tmp_path):
    good = TOY.write(tmp_path)
    (tmp_path / "shallow").mkdir()
    path = _write(tmp_path / "shallow", ("array: {rows: 8,", "array: {rows: 4,"),
                  ("npu.inp: {capacity: 2048,", "npu.inp: {capacity: 1024,"))
    finding = _refusal(path)
    assert "toy_gemm computes 8x8x8 tiles (m x n x k), which requires k = 8 <= the array's " \
           "4 rows (machine.array.rows) of machine toy" in finding.message
    assert finding.loc.line == _line(path, "{name: k, extent: 8, kind: reduce}")
    # The schedule, running the family on an array of 4 rows, refuses with the same words.
    gemm = next(i for i in load_family(good).intrinsics if i.name == "toy_gemm")
    shallow = load_machine(good).to_dict()
    shallow["array"]["rows"] = 4
    with pytest.raises(ScheduleError) as info:
        check_executable(gemm, MachineConfig.from_dict(shallow))
    assert info.value.message.endswith(finding.message)


def test_a_gemm_wider_than_the_array_is_refused_at_n(tmp_path):
    path = _write(tmp_path)
    text = path.read_text().replace("{name: j, extent: 8}", "{name: j, extent: 16}", 1)
    path.write_text(text.replace("shape: [8, 8], dtype: int8, scope: npu.wgt",
                                 "shape: [8, 16], dtype: int8, scope: npu.wgt", 1)
                    .replace("{name: C, role: accumulator, shape: [8, 8]",
                             "{name: C, role: accumulator, shape: [8, 16]", 1))
    with pytest.raises(IntrinsicSpecError) as info:
        load_family(path)
    messages = [f.message for f in info.value.findings]
    assert any("requires n = 16 <= the array's 8 columns (machine.array.cols)" in m
               for m in messages), messages


def test_a_gemm_nothing_zeroes_is_refused_at_its_name(tmp_path):
    path = _write(tmp_path, npu=Npu("toy", 8, 8, i=8, k=8, inp_rows=256, wgt_rows=256,
                                    acc_rows=256, zero="fill"))
    path.write_text(path.read_text().replace("    fill: {C: toy_zero}\n", ""))
    finding = _refusal(path)
    assert finding.message.startswith("toy_gemm accumulates, and its family declares neither "
                                      "a resetting variant (resets: true, same operands) nor "
                                      "a fill intrinsic for C (fill: {C: NAME})")
    assert finding.loc.line == _line(path, "toy_gemm")


def test_a_reduction_that_is_not_a_gemm_is_refused(tmp_path):
    dot = """
  - name: toy_dot
    kind: compute
    iterators: [{name: i, extent: 8}, {name: k, extent: 8, kind: reduce}]
    operands:
      - {name: A, role: input, shape: [8, 8], dtype: int8, scope: npu.inp}
      - {name: B, role: input, shape: [8], dtype: int8, scope: npu.wgt}
      - {name: C, role: accumulator, shape: [8], dtype: int32, scope: npu.acc}
    semantics: "C[i] += i32(A[i, k]) * i32(B[k])"
    emit: {npu: "gemm acc[{C}], inp[{A}], wgt[{B}], rows=8, k=8"}
    cost: {latency: 24, interval: 8}
    reference: docs/simulator.md#gemm
"""
    path = TOY.write(tmp_path)
    path.write_text(path.read_text() + dot)
    finding = _refusal(path)
    assert finding.message.startswith("toy_dot requires the shape of a GEMM, C[i, j] += "
                                      "A[i, k] * B[k, j] with one reduce iterator, got")
    assert finding.loc.line == _line(path, "toy_dot")


def test_a_gemm_with_a_transposed_operand_is_refused(tmp_path):
    path = _write(tmp_path, ("i32(B[k, j])", "i32(B[j, k])"))
    finding = _refusal(path)
    assert "toy_gemm requires operands A[i, k] and B[k, j] (row-major tiles)" \
        in finding.message


def test_a_gemm_without_a_load_for_an_operand_is_refused(tmp_path):
    path = _write(tmp_path, ("loads: {A: toy_load_inp, B: toy_load_wgt}",
                             "loads: {A: toy_load_inp}"))
    finding = _refusal(path)
    assert "toy_gemm requires a data-movement intrinsic for each tile it reads from DRAM and " \
           "writes back, got none declared for loads: {B: NAME}" in finding.message


def test_the_registry_refuses_a_bad_machine_section_at_its_line(tmp_path):
    # A family in an --intrinsics-dir: the registry reads its machine as validate does.
    path = _write(tmp_path, ("latency: 40}", "latency: 1000000000000000000}"))
    with pytest.raises(IntrinsicSpecError) as info:
        load_registry([p for p in family_files([BUILTIN_DIR]) if p.name != "npu.yaml"]
                      + [path])
    (finding,) = info.value.findings
    assert "machine.dram.latency requires an integer in [0, 1048576], got " \
           "1000000000000000000" in finding.message
    assert (finding.loc.file, finding.loc.line) == (str(path), _line(path, "latency: 1000"))


def test_the_registry_refuses_a_gemm_added_to_the_builtin_npu_that_nothing_zeroes(tmp_path):
    # No machine: of its own; the built-in NPU's scopes, and a GEMM with no reset or fill.
    text = _write(tmp_path, npu=Npu("extra", 16, 16, i=16, k=16, zero="fill")).read_text()
    family = text[text.index("target: npu"):].replace("    fill: {C: extra_zero}\n", "")
    for scope, declared in (("inp", "32768, dtype: int8, alignment: 16"),
                            ("wgt", "16384, dtype: int8, alignment: 16"),
                            ("acc", "131072, dtype: [int32, float32, int8], alignment: 64")):
        start = family.index(f"  npu.{scope}: ")
        end = family.index("\n", start)
        family = family[:start] + f"  npu.{scope}: {{capacity: {declared}, banks: 2}}" + \
            family[end:]
    path = tmp_path / "extra.yaml"
    path.write_text(family)
    assert load_family(path).machine is None  # alone, the file is a valid family
    with pytest.raises(IntrinsicSpecError) as info:
        load_registry([*family_files([BUILTIN_DIR]), path])
    (finding,) = info.value.findings
    assert "extra_gemm accumulates, and its family declares neither" in finding.message
    assert (finding.loc.file, finding.loc.line) == (str(path), _line(path, "extra_gemm"))
