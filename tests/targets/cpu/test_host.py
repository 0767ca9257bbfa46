"""The host as CPU targets see it: its architecture and features, found as each description
says (LLVM's host feature list, or /proc/cpuinfo flags under their own names)."""

import dataclasses

import pytest

from intrinsics import default_registry
from intrinsics.model import frozen_mapping
from targets.cpu.host import CPUINFO, host_arch, missing_features


def test_llvm_and_cpuinfo_agree_on_the_x86_features() -> None:
    x86 = default_registry().cpu("x86")
    if host_arch() != "x86_64" or not CPUINFO.exists():
        pytest.skip("needs an x86-64 host with /proc/cpuinfo")
    names = {"avx512vnni": "avx512_vnni", "avx512bf16": "avx512_bf16"}
    by_cpuinfo = dataclasses.replace(x86, detect="cpuinfo", cpuinfo=frozen_mapping(names))
    needed = frozenset({*x86.features, "amx-int8"})
    assert missing_features(by_cpuinfo, needed) == missing_features(x86, needed)


def test_a_feature_no_cpu_has_is_missing() -> None:
    arm = default_registry().cpu("arm")
    assert missing_features(arm, frozenset({"no-such-feature"})) == ["no-such-feature"]
