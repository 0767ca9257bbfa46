"""What this host is, as a CPU target sees it: its architecture and the features it has,
found the way the target's description says (``detect``).

- ``llvm``: LLVM's feature list for the host CPU (llvmlite), whose names are the ones the
  descriptions and ``--features`` use;
- ``cpuinfo``: the ``flags`` (x86) or ``Features`` (AArch64) lines of ``/proc/cpuinfo``,
  each feature looked up under its ``cpuinfo`` name where the kernel's differs from LLVM's
  (``avx512vnni`` is ``avx512_vnni`` there, ``dotprod`` is ``asimddp``).
"""

from __future__ import annotations

import platform
from functools import cache
from pathlib import Path

import llvmlite.binding as llvm

from intrinsics import CpuTarget

__all__ = ["host_arch", "missing_features"]

# platform.machine() spellings of the triples' architectures.
_ARCH = {"arm64": "aarch64", "amd64": "x86_64", "x64": "x86_64"}
CPUINFO = Path("/proc/cpuinfo")


def host_arch() -> str:
    """This host's architecture as a triple spells it (``x86_64``, ``aarch64``)."""
    machine = platform.machine().lower()
    return _ARCH.get(machine, machine)


def missing_features(cpu: CpuTarget, needed: frozenset[str]) -> list[str]:
    """The features of ``needed`` (named as ``cpu``'s description names them) that this
    host, of ``cpu``'s architecture, lacks, sorted."""
    if cpu.detect == "cpuinfo":
        flags = _cpuinfo_flags()
        return sorted(f for f in needed if cpu.cpuinfo.get(f, f) not in flags)
    return sorted(needed - _llvm_features())


@cache
def _llvm_features() -> frozenset[str]:
    llvm.initialize_native_target()
    items = llvm.get_host_cpu_features().flatten().split(",")
    return frozenset(f[1:] for f in items if f.startswith("+"))


@cache
def _cpuinfo_flags() -> frozenset[str]:
    try:
        text = CPUINFO.read_text()
    except OSError:
        return frozenset()
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    return frozenset(flags)
