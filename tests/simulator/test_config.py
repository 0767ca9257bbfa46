"""Machine descriptions: the built-in one loads; every bad field is reported at its line."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from ir.errors import IntrinsicSpecError
from simulator import MachineConfig, default_machine_path, load_machine
from tests.simulator.helpers import SMALL

GOOD = """\
machine:
  name: test
  clock_mhz: 250.5
  array:
    rows: 8
    cols: 8
    dataflow: weight_stationary
    double_buffered_weights: true
    latency: 2
  inp: {rows: 256, banks: 2}
  wgt: {rows: 256, banks: 2}
  acc: {rows: 256, banks: 2}
  vector: {lanes: 8, latency: 1}
  dram: {bytes_per_cycle: 12.5, latency: 80}
  dma: {max_outstanding: 2, issue_cycles: 1}
  queues: {instruction_depth: 16, token_depth: 4, fetch_cycles: 1}
intrinsics: []
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "machine.yaml"
    path.write_text(text)
    return path


def test_builtin_machine_loads_from_the_intrinsics_package(npu):
    assert default_machine_path().name == "npu.yaml"
    assert default_machine_path().parent.name == "intrinsics"
    assert (npu.array.rows, npu.array.cols) == (16, 16)
    assert npu.array.dataflow == "weight_stationary"
    assert npu.source == str(default_machine_path())


def test_dict_round_trip(npu):
    again = MachineConfig.from_dict(npu.to_dict())
    assert again == npu
    assert again.source == "<dict>"


def test_yaml_with_other_sections_loads(tmp_path):
    config = load_machine(write(tmp_path, GOOD))
    assert config.clock_mhz == 250.5
    assert config.dram.bytes_per_cycle == 12.5
    assert config.acc.bank_rows == 128


# (text in GOOD, its replacement, the line reported, a fragment of the message)
BAD_FIELDS = [
    ("    rows: 8\n", "    rows: -4\n", 5,
     "machine.array.rows requires an integer in [1, 65535], got -4"),
    ("    cols: 8\n", "    cols: true\n", 6, "machine.array.cols requires an integer"),
    ("dataflow: weight_stationary", "dataflow: diagonal", 7,
     ("machine.array.dataflow requires one of weight_stationary, output_stationary, got "
      "'diagonal'")),
    ("double_buffered_weights: true", "double_buffered_weights: 1", 8,
     "machine.array.double_buffered_weights requires true or false, got 1"),
    ("inp: {rows: 256, banks: 2}", "inp: {rows: 256, banks: 3}", 10,
     "machine.inp.banks requires a divisor of rows (256), got 3"),
    ("acc: {rows: 256, banks: 2}", "acc: {rows: 70000, banks: 2}", 12,
     "machine.acc.rows requires an integer in [1, 65536], got 70000"),
    ("bytes_per_cycle: 12.5", "bytes_per_cycle: 0", 14,
     "machine.dram.bytes_per_cycle requires a number in [0.001, 1000000], got 0"),
    ("  vector: {lanes: 8, latency: 1}\n", "  vector: 4\n", 13,
     "machine.vector requires a mapping, got int"),
    ("  vector: {lanes: 8, latency: 1}\n", "", 1, "machine.vector requires a mapping, got nothing"),
    ("dma: {max_outstanding: 2, issue_cycles: 1}", "dma: {max_outstanding: 2}", 15,
     "machine.dma.issue_cycles is required: an integer in [1, 1048576]"),
    ("    latency: 2\n", "    latency: 2\n    speed: 3\n", 10,
     "machine.array has no field 'speed' (fields: rows, cols, dataflow"),
    ("  name: test\n", "  name: test\n  colour: blue\n", 3, "machine has no field 'colour'"),
    # Bounds that keep a run's cycle counts and memories within what the simulator holds.
    ("latency: 80}", "latency: 1000000000000000000}", 14,
     "machine.dram.latency requires an integer in [0, 1048576], got 1000000000000000000"),
    ("latency: 80}", "latency: 1.0e+18}", 14,
     "machine.dram.latency requires an integer in [0, 1048576], got 1e+18"),
    ("bytes_per_cycle: 12.5", "bytes_per_cycle: 1.0e-300", 14,
     "machine.dram.bytes_per_cycle requires a number in [0.001, 1000000], got 1e-300"),
    ("clock_mhz: 250.5", "clock_mhz: .inf", 3,
     "machine.clock_mhz requires a number in [0.001, 1000000], got inf"),
    ("token_depth: 4", "token_depth: 100000000", 16,
     "machine.queues.token_depth requires an integer in [1, 65536], got 100000000"),
    ("vector: {lanes: 8,", "vector: {lanes: 3,", 13,
     "machine.vector.lanes requires a divisor of machine.array.cols (8), the int32 elements "
     "of an accumulator row (or a multiple of it, for a unit wider than a row), got 3"),
]


@pytest.mark.parametrize(("old", "new", "line", "fragment"), BAD_FIELDS)
def test_bad_field_is_reported_at_its_line(tmp_path, old, new, line, fragment):
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(IntrinsicSpecError) as info:
        load_machine(path)
    err = info.value
    (finding,) = err.findings
    assert fragment in finding.message
    assert finding.loc.file == str(path)
    assert finding.loc.line == line
    assert str(err).startswith(f"{path}:{line}:")
    assert "simulator." not in str(err)


def test_vector_lanes_may_be_a_multiple_of_the_columns(tmp_path):
    config = load_machine(write(tmp_path, GOOD.replace("lanes: 8,", "lanes: 32,")))
    assert (config.vector.lanes, config.array.cols) == (32, 8)


def test_the_on_chip_memories_are_bounded_together(tmp_path):
    # 65536 rows of 4096 int8: 256 MiB of input scratchpad, four times the bound.
    text = GOOD.replace("    rows: 8\n", "    rows: 4096\n", 1).replace(
        "inp: {rows: 256, banks: 2}", "inp: {rows: 65536, banks: 2}")
    path = write(tmp_path, text)
    with pytest.raises(IntrinsicSpecError) as info:
        load_machine(path)
    (finding,) = info.value.findings
    assert finding.message.startswith(
        "the on-chip memories (machine.inp, .wgt and .acc) require at most 64 MiB together "
        "(the simulator holds them all), got 256 MiB (inp 256 MiB, wgt 2 KiB, acc 8 KiB); "
        "shrink machine.inp.rows or the array")
    assert (finding.loc.line, finding.loc.col) == (10, 15)
    assert "simulator." not in finding.message


def test_every_finding_is_collected(tmp_path):
    text = GOOD.replace("rows: 8", "rows: 0").replace("lanes: 8", "lanes: x")
    with pytest.raises(IntrinsicSpecError) as info:
        load_machine(write(tmp_path, text))
    err = info.value
    assert err.message.startswith("2 problems in machine description")
    assert [f.loc.line for f in err.findings] == [5, 13]
    assert "machine.vector.lanes requires an integer in [1, 65535], got 'x'" in str(err)


def test_mark_spans_the_bad_value(tmp_path):
    path = write(tmp_path, GOOD.replace("dataflow: weight_stationary", "dataflow: diagonal"))
    with pytest.raises(IntrinsicSpecError) as info:
        load_machine(path)
    loc = info.value.loc
    assert (loc.line, loc.col, loc.end_col) == (7, 15, 22)
    assert str(info.value).splitlines()[-1].strip() == "^" * len("diagonal")


def test_file_problems(tmp_path):
    with pytest.raises(IntrinsicSpecError, match="cannot read machine description"):
        load_machine(tmp_path / "missing.yaml")
    with pytest.raises(IntrinsicSpecError, match="requires a top-level 'machine:' mapping"):
        load_machine(write(tmp_path, "scopes: {}\n"))
    with pytest.raises(IntrinsicSpecError) as info:
        load_machine(write(tmp_path, "machine:\n  name: [unclosed\n"))
    assert "invalid YAML" in info.value.message
    assert info.value.loc.line == 3
    with pytest.raises(IntrinsicSpecError, match="machine requires a mapping, got list"):
        load_machine(write(tmp_path, "machine: [1, 2]\n"))


def test_dict_errors_name_the_source_and_field():
    data = copy.deepcopy(SMALL)
    data["queues"]["token_depth"] = 0
    with pytest.raises(IntrinsicSpecError) as info:
        MachineConfig.from_dict(data, source="sweep.py")
    assert info.value.message == (
        "sweep.py: machine.queues.token_depth requires an integer in [1, 65536], got 0")
    assert info.value.loc is None
