"""A user's machine file goes through the bounded reader of the intrinsic descriptions: the
same findings at the same lines as the simulator's own loader, the reader's limits on top,
and, when the file declares intrinsics, its family in place of the built-in NPU family."""

from __future__ import annotations

import pytest

from ir.errors import IntrinsicSpecError
from simulator import load_machine as load_builtin
from targets import npu
from tests.simulator.test_config import BAD_FIELDS, GOOD
from tests.targets.npu.machines import Npu


def test_the_bounded_reader_gives_the_simulators_config(tmp_path):
    path = tmp_path / "machine.yaml"
    path.write_text(GOOD)
    assert npu.load_machine(path) == load_builtin(path)
    assert npu.load_machine() == load_builtin()


@pytest.mark.parametrize(("old", "new", "line", "fragment"), BAD_FIELDS)
def test_bad_field_is_reported_at_its_line(tmp_path, old, new, line, fragment):
    path = tmp_path / "machine.yaml"
    path.write_text(GOOD.replace(old, new))
    with pytest.raises(IntrinsicSpecError) as info:
        npu.load_machine(path)
    (finding,) = info.value.findings
    assert fragment in finding.message
    assert (finding.loc.file, finding.loc.line) == (str(path), line)
    assert str(info.value).startswith(f"{path}:{line}:")


def test_a_file_past_the_readers_limits_is_refused_at_its_line(tmp_path):
    # Nine levels of nine aliases: 9^9 nodes once expanded, from a few hundred bytes.
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 10):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 9) + "]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n" + GOOD)
    with pytest.raises(IntrinsicSpecError) as info:
        npu.load_machine(path)
    (finding,) = info.value.findings
    assert "nodes once its aliases are expanded" in finding.message
    assert finding.loc.file == str(path) and 2 <= finding.loc.line <= 10


def test_a_file_without_a_machine_section_is_refused(tmp_path):
    path = tmp_path / "family.yaml"
    path.write_text("target: npu\nscopes: {}\nintrinsics: []\n")
    with pytest.raises(IntrinsicSpecError, match="requires a top-level 'machine:' mapping"):
        npu.load_machine(path)


def test_the_files_family_replaces_the_builtin_npu_family(tmp_path):
    path = Npu("vendor", 8, 8, i=8, k=8).write(tmp_path)
    names = {i.name for i in npu.machine_registry(path).for_target("npu")}
    assert "vendor_gemm" in names and "npu_gemm" not in names


def test_a_machine_only_file_keeps_the_builtin_family(tmp_path):
    path = tmp_path / "machine.yaml"
    path.write_text(GOOD.replace("intrinsics: []\n", ""))
    assert "npu_gemm" in {i.name for i in npu.machine_registry(path).for_target("npu")}
