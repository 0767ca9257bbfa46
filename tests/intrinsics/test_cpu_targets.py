"""CPU targets as data: a family's cpu: section, read into a CpuTarget; what kind of target
each name is; one description per CPU target across files."""

import re
from pathlib import Path

import pytest

from intrinsics import Registry, load_registry, schema
from intrinsics.registry import BUILTIN_DIR
from ir import IntrinsicSpecError

BROKEN = Path(__file__).parent / "broken"


def test_the_arm_description_holds_what_the_code_generator_needs(registry: Registry) -> None:
    arm = registry.cpu("arm")
    assert (arm.triple, arm.cpu, arm.default_features) == (
        "aarch64-unknown-linux-gnu", "generic", "+neon,+dotprod")
    # The register scope's capacity (512 bytes) over 16-byte vectors, less 3 left to LLVM.
    assert (arm.registers, arm.usable_registers, arm.vector_bytes) == (32, 29, 16)
    assert arm.engines == ("native", "unicorn", "qemu-user")
    assert arm.emulated["unicorn"] == {"neon", "dotprod", "fp16fml"}
    assert arm.emulated["qemu-user"] == {"neon", "dotprod", "i8mm", "bf16", "fp16fml"}
    assert arm.macs["sdot"] == 16 and arm.macs["smmla"] == 32 and arm.macs["bfdot"] == 8
    assert arm.macs["bfmmla"] == 16 and arm.macs["fmlal"] == 4


def test_targets_have_a_kind(registry: Registry) -> None:
    kinds = {t: registry.target_kind(t) for t in registry.targets}
    assert kinds == {"arm": "cpu", "x86": "cpu", "npu": "npu", "cuda": "cuda"}


def test_a_target_without_a_cpu_section_is_refused_naming_the_cpu_targets(
        registry: Registry) -> None:
    with pytest.raises(IntrinsicSpecError, match="target 'cuda' requires a family with a "
                       "'cpu:' section to be a CPU target; the CPU targets are arm, x86"):
        registry.cpu("cuda")


def test_two_descriptions_of_one_cpu_target_are_refused(tmp_path: Path) -> None:
    text = (BROKEN / "cpu_register_scope_unknown.yaml").read_text()
    fixed = text.replace("register_scope: toy.zm\n", "register_scope: toy.zmm\n")
    first, second = tmp_path / "toy_a.yaml", tmp_path / "toy_b.yaml"
    first.write_text(fixed)
    second.write_text(fixed.replace("toy_store", "toy_store_b").replace("toy.zmm", "toy.ymm"))
    with pytest.raises(IntrinsicSpecError) as caught:
        load_registry([BUILTIN_DIR / "npu.yaml", first, second])
    messages = [f.message for f in caught.value.findings]
    assert any(m.startswith(f"target toy is already described by the cpu: section of {first}")
               for m in messages), messages


def test_every_cpu_field_is_documented() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "cpu_targets.md").read_text()
    rows = set(re.findall(r"^\| `(\w+)` \| (?:yes|no) \|", doc, re.MULTILINE))
    assert rows == set(schema.CPU.fields)


def test_a_bad_register_group_in_a_template_is_refused_at_its_line(tmp_path: Path) -> None:
    # A multi-register load names 2 to 4 registers; six are refused when the file loads, at
    # the template's line, not when a kernel first uses it.
    text = (BUILTIN_DIR / "arm.yaml").read_text()
    good = '"{dst} = call [4 x <16 x i8>] @llvm.aarch64.neon.ld1x4.v16i8.p0(ptr {src})"'
    assert good in text
    broken = tmp_path / "arm.yaml"
    broken.write_text(text.replace(good, good.replace("[4 x", "[6 x")))
    with pytest.raises(IntrinsicSpecError) as caught:
        load_registry([broken])
    line = text[:text.index(good)].count("\n") + 1
    assert any(f"arm.yaml:{line}:" in str(f) and "N of 2, 3 or 4 registers, got 6" in str(f)
               for f in caught.value.findings), [str(f) for f in caught.value.findings]
