"""The registry: built-in and user families, lookups, and names unique across files."""

import os
from pathlib import Path

import pytest

from intrinsics import ENV_VAR, Registry, default_registry, load_registry
from intrinsics.registry import BUILTIN_DIR
from ir import IntrinsicSpecError
from tests.intrinsics.conftest import MAC_FAMILY


def test_builtins_are_found(registry: Registry) -> None:
    assert [f.name for f in registry.families] == ["arm", "cuda", "cuda_mma", "cuda_wgmma", "npu",
                                                   "x86"]
    assert set(registry.targets) == {"arm", "cuda", "npu", "x86"}


def test_get_returns_the_named_intrinsic(registry: Registry) -> None:
    assert registry.get("arm_smmla").name == "arm_smmla"
    assert "arm_smmla" in registry


def test_get_unknown_name_lists_close_names(registry: Registry) -> None:
    with pytest.raises(IntrinsicSpecError) as caught:
        registry.get("wmma_m16n16k16_f16_f33")
    assert "no intrinsic is called 'wmma_m16n16k16_f16_f33'" in caught.value.message
    assert "wmma_m16n16k16_f16_f32" in caught.value.message


def test_for_target_and_compute_intrinsics(registry: Registry) -> None:
    arm = registry.for_target("arm")
    assert arm and all(i.target == "arm" for i in arm)
    compute = registry.compute_intrinsics("npu")
    assert {i.name for i in compute} >= {"npu_gemm", "npu_vec_relu", "npu_vec_mulshift"}
    assert all(i.kind == "compute" for i in compute)
    every = registry.compute_intrinsics()
    assert len(every) == sum(len(registry.compute_intrinsics(t)) for t in registry.targets)


def test_user_family_through_extra_dirs(mac_dir: Path) -> None:
    registry = default_registry([mac_dir])
    mma = registry.get("mac_mma_i16")
    assert mma.family == "mac16"
    assert mma.extents == (8, 8, 4)
    assert [o.dtype.name for o in mma.operands] == ["int16", "int16", "int32"]
    assert registry.scope("mac.reg").banks == 4
    assert len(registry.families) == 7


def test_user_family_through_the_environment(mac_dir: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv(ENV_VAR, os.pathsep.join([str(empty), str(mac_dir)]))
    registry = default_registry()
    assert registry.get("mac_store_c").kind == "store"
    assert registry.for_target("mac")


def test_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(IntrinsicSpecError, match="requires to exist"):
        default_registry([tmp_path / "nowhere"])


def test_builtin_directory_named_again_is_loaded_once() -> None:
    assert len(default_registry([BUILTIN_DIR]).families) == 6


def test_duplicate_intrinsic_across_files_names_both_places(mac_dir: Path,
                                                            tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "mac_copy.yaml").write_text(MAC_FAMILY)
    with pytest.raises(IntrinsicSpecError) as caught:
        load_registry([mac_dir / "mac16.yaml", other / "mac_copy.yaml"])
    messages = [f.message for f in caught.value.findings]
    duplicate = [m for m in messages if "duplicate intrinsic name mac_mma_i16" in m]
    assert duplicate and "mac16.yaml:7" in duplicate[0]
    located = next(f for f in caught.value.findings if "mac_mma_i16" in f.message)
    assert located.loc.file.endswith("mac_copy.yaml") and located.loc.line == 7


def test_same_family_name_twice_is_an_error(mac_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "mac16.yaml").write_text(MAC_FAMILY.replace("mac_", "mac2_"))
    with pytest.raises(IntrinsicSpecError, match="family mac16 is already defined"):
        default_registry([mac_dir, other])


def test_scope_declared_differently_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "odd.yaml").write_text(
        MAC_FAMILY.replace("  global: {}", "  global: {alignment: 64}"))
    with pytest.raises(IntrinsicSpecError) as caught:
        default_registry([tmp_path])
    (finding,) = caught.value.findings
    assert "scope global is declared differently" in finding.message
    assert "(alignment 1 there, 64 here)" in finding.message
    assert finding.loc.file.endswith("odd.yaml") and finding.loc.line == 4


def test_every_broken_file_is_reported_at_once(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(MAC_FAMILY.replace("kind: compute", "kind: compte"))
    (tmp_path / "b.yaml").write_text(MAC_FAMILY.replace("mac_", "b_").replace(
        "target: mac", "tagret: mac"))
    with pytest.raises(IntrinsicSpecError) as caught:
        default_registry([tmp_path])
    files = {Path(f.loc.file).name for f in caught.value.findings}
    assert files == {"a.yaml", "b.yaml"}


def test_an_edited_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "mac16.yaml"
    path.write_text(MAC_FAMILY)
    assert default_registry([tmp_path]).get("mac_mma_i16").cost.latency == 6
    path.write_text(MAC_FAMILY.replace("latency: 6", "latency: 7   "))
    assert default_registry([tmp_path]).get("mac_mma_i16").cost.latency == 7
