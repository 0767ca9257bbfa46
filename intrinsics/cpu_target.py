"""A family's ``cpu:`` section: the CPU target it describes, checked against the family.

The schema (:data:`intrinsics.schema.CPU`) checks each field's type, bounds and grammar; this
module checks what the fields say together and against the rest of the file, each finding at
its YAML line: the register scope is one of the family's, with a capacity that is a whole
number of vectors, at most :data:`~intrinsics.limits.MAX_CPU_REGISTERS` of them and more than
those reserved; sizes and alignments are powers of two; some register tile fits the
registers; every emulator named is one the target runs on, and each such engine says what it
executes; no template asks for more alignment than the runners give every buffer. What only
LLVM can vouch for (the triple, CPU and feature names, the intrinsics the templates call) is
:mod:`intrinsics.llvm_check`'s.
"""

from __future__ import annotations

import difflib
import re

from intrinsics import limits
from intrinsics.model import CpuTarget, Intrinsic, Scope, frozen_mapping
from intrinsics.schema import CPU_NAME
from intrinsics.source import Findings, YNode

# The CPU code generator's template key: every CPU family's templates are LLVM IR.
BACKEND = "llvm"

_ALIGN = re.compile(r"\balign (\d+)")


def build_cpu_target(node: YNode, target: str, scopes: dict[str, Scope],
                     findings: Findings) -> CpuTarget | None:
    """The CPU target of a schema-checked ``cpu:`` section, or None after recording why."""
    before = len(findings)
    values = node.plain()
    where = f"cpu target {target}"
    vector_bytes = values["vector_bytes"]
    registers = _registers(node, scopes, vector_bytes, findings, where)
    for key in ("vector_bytes", "alignment"):
        if values[key] & (values[key] - 1):
            findings.add(node.value[key].loc, f"{where}: {key} requires a power of two, got "
                         f"{values[key]}")
    if vector_bytes < 4:
        findings.add(node.value["vector_bytes"].loc, f"{where}: vector_bytes requires at "
                     f"least 4 (one 32-bit lane), got {vector_bytes}")
    reserved = values.get("reserved_registers", 0)
    if registers is not None and reserved >= registers:
        findings.add(node.value["reserved_registers"].loc, f"{where}: reserved_registers "
                     f"requires fewer than the {registers} registers, got {reserved}")
        registers = None
    tile = values["register_tile"]
    smallest = min(tile["rows"]) * min(tile["vectors"]) + min(tile["vectors"]) + 1
    if registers is not None and smallest > registers - reserved:
        findings.add(node.value["register_tile"].loc, f"{where}: register_tile requires a "
                     f"tile that fits the {registers - reserved} registers left after "
                     f"reserved_registers, got none (the smallest takes {smallest})")
    engines = tuple(values["run"])
    emulators = values.get("emulators", {})
    for name in emulators:
        if name not in engines:
            findings.add(node.value["emulators"].value[name].key_loc, f"{where}: emulator "
                         f"{name} requires '{name}' in run, got run: {', '.join(engines)}")
    for name in engines:
        if name != "native" and name not in emulators:
            findings.add(node.value["run"].loc, f"{where}: run lists {name}, which requires "
                         f"emulators.{name}.executes (the features it runs)")
    detect = values.get("detect", "llvm")
    if "cpuinfo" in values and detect != "cpuinfo":
        findings.add(node.value["cpuinfo"].key_loc, f"{where}: cpuinfo names apply with "
                     f"detect: cpuinfo, got detect: {detect}")
    _check_cpu_names(node, findings, where)
    tune_cpus = tuple(values.get("tune_cpus", [values["cpu"]]))
    if len(findings) > before or registers is None:
        return None
    return CpuTarget(
        target=target, triple=values["triple"], cpu=values["cpu"],
        features=tuple(values["features"]), detect=detect,
        cpuinfo=frozen_mapping(values.get("cpuinfo", {})), vector_bytes=vector_bytes,
        register_scope=values["register_scope"], registers=registers,
        reserved_registers=reserved, alignment=values["alignment"],
        tile_rows=tuple(tile["rows"]), tile_vectors=tuple(tile["vectors"]),
        k_unroll=values.get("k_unroll", 1), engines=engines, tune_cpus=tune_cpus,
        emulated=frozen_mapping({k: frozenset(v["executes"]) for k, v in emulators.items()}),
        macs=frozen_mapping(values.get("macs", {})), epilogue=values.get("epilogue", "pass"),
        loc=node.key_loc or node.loc)


def _check_cpu_names(node: YNode, findings: Findings, where: str) -> None:
    """``cpu`` and each of ``tune_cpus`` is an LLVM CPU name: the tune CPU is written into
    the IR as a quoted string attribute, so nothing that could end the string may pass."""
    cpu = node.value["cpu"]
    if CPU_NAME.fullmatch(cpu.value) is None:
        findings.add(cpu.loc, f"{where}: cpu requires an LLVM CPU name (lower-case letters, "
                     f"digits, '.', '-'), got {cpu.value!r}")
    tune = node.get("tune_cpus")
    for item in tune.value if tune is not None else ():
        if CPU_NAME.fullmatch(item.value) is None:
            findings.add(item.loc, f"{where}: tune_cpus requires LLVM CPU names (lower-case "
                         f"letters, digits, '.', '-'), got {item.value!r}")


def _registers(node: YNode, scopes: dict[str, Scope], vector_bytes: int, findings: Findings,
               where: str) -> int | None:
    """The register count: the register scope's capacity over the vector size."""
    name_node = node.value["register_scope"]
    name = name_node.value
    scope = scopes.get(name)
    if scope is None:
        close = difflib.get_close_matches(name, list(scopes), n=1)
        hint = f"; did you mean {close[0]}?" if close else \
            f"; the family's scopes are {', '.join(scopes)}"
        findings.add(name_node.loc, f"{where}: register_scope requires a scope of this "
                     f"family, got {name}{hint}")
        return None
    if scope.capacity is None or scope.capacity % vector_bytes:
        got = "no capacity" if scope.capacity is None else f"capacity {scope.capacity}"
        findings.add(name_node.loc, f"{where}: register_scope {name} requires a capacity "
                     f"that is a whole number of {vector_bytes}-byte vectors, got {got}")
        return None
    count = scope.capacity // vector_bytes
    if count > limits.MAX_CPU_REGISTERS:
        findings.add(name_node.loc, f"{where}: register_scope {name} requires at most "
                     f"{limits.MAX_CPU_REGISTERS} registers (capacity over vector_bytes), "
                     f"got {count}")
        return None
    return count


def check_template_alignment(cpu: CpuTarget, intrinsics: tuple[Intrinsic, ...] | list[Intrinsic],
                             findings: Findings) -> None:
    """No ``emit.llvm`` template of the family asks for more alignment than the runners give
    every buffer (``cpu.alignment``): the code would fault on a buffer they laid out."""
    for intrinsic in intrinsics:
        template = intrinsic.emit.get(BACKEND)
        if template is None:
            continue
        for match in _ALIGN.finditer(template):
            if int(match.group(1)) > cpu.alignment:
                findings.add(intrinsic.loc, f"intrinsic {intrinsic.name}: emit.{BACKEND}'s "
                             f"align {match.group(1)} requires cpu.alignment of at least "
                             f"that, got {cpu.alignment}")
