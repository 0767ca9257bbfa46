"""GPU targets as data: a family's gpu: section, checked at load and read into a GpuTarget
(the architectures kernels compile for and each one's SM limits)."""

import re
from pathlib import Path

import pytest

from intrinsics import Registry, load_family, load_registry, schema
from ir import IntrinsicSpecError
from tests.intrinsics.conftest import MAC_FAMILY

GPU = """\
gpu:
  architectures:
    sm_80:
      part: A100 SXM4
      sm_count: 108
      registers_per_sm: 65536
      max_registers_per_thread: 255
      register_granularity: 256
      shared_per_sm: 167936
      max_shared_per_block: 166912
      shared_reserved_per_block: 1024
      shared_granularity: 128
      max_warps_per_sm: 64
      max_blocks_per_sm: 32
"""


def _write(tmp_path: Path, gpu: str) -> Path:
    path = tmp_path / "mac16.yaml"
    path.write_text(gpu + MAC_FAMILY)
    return path


def test_the_cuda_description_holds_each_architectures_limits(registry: Registry) -> None:
    target = registry.gpu()
    assert list(target.architectures) == ["sm_80", "sm_90"]
    sm_80, sm_90 = target.architecture("sm_80"), target.architecture("sm_90")
    assert (sm_80.part, sm_80.sm_count, sm_90.part, sm_90.sm_count) == (
        "A100 SXM4", 108, "H100 SXM5", 132)
    # 164 KB and 228 KB per SM; a block opts in to 1 KB less (the system's reserve).
    assert (sm_80.shared_per_sm, sm_80.max_shared_per_block) == (164 * 1024, 163 * 1024)
    assert (sm_90.shared_per_sm, sm_90.max_shared_per_block) == (228 * 1024, 227 * 1024)
    assert sm_80.registers_per_sm == sm_90.registers_per_sm == 65536
    assert sm_80.max_warps_per_sm == sm_90.max_warps_per_sm == 64


def test_a_users_family_brings_its_own_architectures(tmp_path: Path) -> None:
    path = _write(tmp_path, GPU.replace("sm_count: 108", "sm_count: 40"))
    registry = load_registry([path])
    assert registry.gpu("mac").architecture("sm_80").sm_count == 40
    with pytest.raises(ValueError, match="target mac: architecture 'sm_86' requires an entry "
                       "under gpu.architectures, got none; the entries are sm_80"):
        registry.gpu("mac").architecture("sm_86")


def test_a_target_without_a_gpu_section_is_refused_naming_its_families(
        registry: Registry) -> None:
    with pytest.raises(IntrinsicSpecError, match=r"target 'npu' requires a family with a "
                       r"'gpu:' section \(its architectures and SM limits\); the families of "
                       r"'npu' are .*npu\.yaml"):
        registry.gpu("npu")


# (what to change in GPU, the 1-based line of the finding, a fragment of its message)
MISTAKES = [
    ("register_granularity: 256", "register_granularity: 200", 8,
     "register_granularity requires a power of two (an allocation unit), got 200"),
    ("shared_granularity: 128", "shared_granularity: 96", 12,
     "shared_granularity requires a power of two"),
    ("registers_per_sm: 65536", "registers_per_sm: 65600", 6,
     "registers_per_sm requires a multiple of register_granularity (256), got 65600"),
    ("max_shared_per_block: 166912", "max_shared_per_block: 167936", 10,
     ("max_shared_per_block plus shared_reserved_per_block requires at most shared_per_sm "
      "(167936 B), got 168960 B")),
    ("max_registers_per_thread: 255", "max_registers_per_thread: 4096", 7,
     ("one warp at max_registers_per_thread requires at most registers_per_sm (65536), "
      "got 131072")),
    ("    sm_80:", "    ampere:", 3,
     "gpu.architectures.ampere: the name requires nvcc's form sm_<compute capability>"),
    ("sm_count: 108", "sm_cout: 108", 5,
     "has an unknown field 'sm_cout'; did you mean 'sm_count'?"),
    ("max_warps_per_sm: 64", "max_warps_per_sm: 0", 13,
     "max_warps_per_sm requires an integer >= 1, got int 0"),
    ("      part: A100 SXM4\n", "", 4, "requires field 'part'"),
]


@pytest.mark.parametrize("before, after, line, fragment", MISTAKES,
                         ids=[m[1].strip() or "no part" for m in MISTAKES])
def test_a_mistake_is_refused_at_its_line(tmp_path: Path, before: str, after: str, line: int,
                                          fragment: str) -> None:
    assert before in GPU
    path = _write(tmp_path, GPU.replace(before, after))
    with pytest.raises(IntrinsicSpecError) as caught:
        load_family(path)
    hits = [f for f in caught.value.findings if fragment in f.message]
    assert hits, [f.message for f in caught.value.findings]
    assert hits[0].loc is not None and Path(hits[0].loc.file) == path
    assert hits[0].loc.line == line


def test_no_architecture_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "gpu:\n  architectures: {}\n")
    with pytest.raises(IntrinsicSpecError) as caught:
        load_family(path)
    (finding,) = caught.value.findings
    assert "gpu.architectures requires at least one architecture to compile for, got none" \
        in finding.message and finding.loc.line == 2


def test_every_gpu_field_is_documented() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "intrinsics.md").read_text()
    rows = set(re.findall(r"^\| `gpu(?:\.architectures\.\*)?\.(\w+)` \|", doc, re.MULTILINE))
    architecture = schema.GPU_ARCHITECTURE.fields
    assert rows == set(architecture) | {"architectures"}
