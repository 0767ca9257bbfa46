"""Loading one family description: YAML -> schema check -> variants -> built intrinsics.

:func:`load_family` reads a file with PyYAML's safe composer (keeping line marks), checks it
against :mod:`intrinsics.schema`, expands variant entries, builds each intrinsic
(:mod:`intrinsics.builder`), resolves companion intrinsics, and asks the installed LLVM about
what a CPU family names (:mod:`intrinsics.llvm_check`); a ``machine:`` section is read by the
simulator's own rules, and the family checked to run on that machine
(:mod:`intrinsics.runnable`). Every problem in the file is
collected, each at its YAML line, and raised once as an ``IntrinsicSpecError`` whose
``findings`` lists them.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Callable
from pathlib import Path

import ir
from intrinsics import limits, schema
from intrinsics.builder import CompanionRef, Context, build_intrinsic
from intrinsics.cpu_target import BACKEND as CPU_BACKEND
from intrinsics.cpu_target import build_cpu_target, check_template_alignment
from intrinsics.gpu_target import build_gpu_target
from intrinsics.llvm_check import check_with_llvm
from intrinsics.model import Family, Intrinsic, Operand, Scope, frozen_mapping
from intrinsics.runnable import check_npu_family
from intrinsics.source import Findings, YNode, read_yaml
from intrinsics.variants import Budget, expand
from ir.errors import IntrinsicSpecError
from simulator.config import MachineConfig, machine_from_node


def load_family(path: str | os.PathLike[str]) -> Family:
    """Load and validate the family described by the YAML file at ``path``.

    Raises ``IntrinsicSpecError`` carrying every finding (file, line and field of each).
    """
    family, findings = check_family(path)
    if findings or family is None:
        raise findings.error(str(path))
    return family


def check_family(path: str | os.PathLike[str]) -> tuple[Family | None, Findings]:
    """Load ``path`` without raising: the family (None if it could not be built) and findings."""
    file = Path(path)
    findings = Findings(str(file))
    root = read_yaml(file, findings)
    if root is None:
        return None, findings
    where = f"family {file.stem}"
    schema.check(root, schema.FAMILY, findings, where)
    if not root.is_mapping or any(root.get(k) is None for k in ("target", "scopes",
                                                                 "intrinsics")):
        return None, findings
    target_node, scopes_node, entries = (root.value[k] for k in ("target", "scopes",
                                                                 "intrinsics"))
    if not (isinstance(target_node.value, str) and scopes_node.is_mapping
            and entries.is_sequence):
        return None, findings
    scopes = {name: _scope(name, node) for name, node in scopes_node.value.items()}
    cpu_node = root.get("cpu")
    cpu = None
    checked_cpu = None
    if cpu_node is not None and not _has_errors(cpu_node, schema.CPU):
        checked_cpu = cpu_node
        cpu = build_cpu_target(cpu_node, target_node.value, scopes, findings)
    gpu_node = root.get("gpu")
    gpu = None
    if gpu_node is not None and not _has_errors(gpu_node, schema.GPU):
        gpu = build_gpu_target(gpu_node, target_node.value)
    ctx = Context(file.stem, target_node.value, scopes, str(file), cpu_node is not None)
    templates: dict[str, YNode] = {}
    intrinsics, refs = _intrinsics(entries, ctx, findings, templates)
    if cpu is not None:
        check_template_alignment(cpu, intrinsics, findings)
    check_with_llvm(checked_cpu, target_node.value, intrinsics, templates, findings)
    _check_self_check_size(intrinsics, findings)
    by_name = {i.name: i for i in intrinsics}
    for ref in refs:
        _check_companion(ref, by_name, findings)
    machine = root.get("machine")
    if machine is not None:
        config = _machine(machine, file, findings)
        if config is not None:
            check_npu_family(intrinsics, scopes, config, findings)
    description = root.get("description")
    family = Family(
        name=file.stem, target=target_node.value, scopes=frozen_mapping(scopes),
        intrinsics=tuple(intrinsics), path=file,
        description=description.value if description is not None else "",
        machine=machine.raw if machine is not None and machine.is_mapping else None, cpu=cpu,
        gpu=gpu)
    return (family if not findings else None), findings


def _machine(node: YNode, file: Path, findings: Findings) -> MachineConfig | None:
    """The simulator's machine from the family's ``machine:`` section, validated by the
    simulator's own rules; None, with every problem recorded, when it is not valid."""
    if node.raw is None:
        return None
    try:
        return machine_from_node(node.raw, str(file), node.key_loc)
    except IntrinsicSpecError as err:
        for finding in err.findings or (err,):
            findings.add(finding.loc, finding.message)
        return None


def _scope(name: str, node: YNode) -> Scope:
    """A scope from its (schema-checked) entry; a broken entry still declares the name."""
    if not node.is_mapping or _has_errors(node, schema.SCOPE):
        return Scope(name, loc=node.key_loc)
    values = node.plain()
    kinds = values.get("dtype", ())
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    return Scope(name, values.get("capacity"), tuple(ir.dtype(k) for k in kinds),
                 values.get("alignment", 1), values.get("banks"),
                 values.get("description", ""), node.key_loc)


def _has_errors(node: YNode, record: schema.Type) -> bool:
    """True when ``node`` breaks ``record`` (the findings themselves are reported elsewhere)."""
    scratch = Findings("")
    record.check(node, scratch, "")
    return bool(scratch)


def _intrinsics(entries: YNode, ctx: Context, findings: Findings,
                templates: dict[str, YNode]) -> tuple[list[Intrinsic], list[CompanionRef]]:
    """Build every variant of every entry, reporting duplicate names; record each built
    intrinsic's ``emit.llvm`` template node in ``templates`` (by intrinsic name)."""
    built: list[Intrinsic] = []
    refs: list[CompanionRef] = []
    first_seen: dict[str, tuple[ir.SourceLoc, int]] = {}
    budget = Budget()
    for index, entry in enumerate(entries.value):
        if budget.spent:
            break
        if not entry.is_mapping:
            continue
        name_node = entry.get("name")
        raw = name_node.value if name_node is not None and isinstance(name_node.value, str) \
            else f"#{index + 1}"
        raw_where = f"intrinsic {raw}"
        for params, node in expand(entry, findings, raw_where, budget):
            name_node = node.get("name")
            name = name_node.value if name_node is not None else raw
            where = f"intrinsic {name}"
            local = Findings(ctx.file)
            schema.check(node, schema.INTRINSIC, local, where)
            result = None if local else build_intrinsic(node, params, ctx, local, where)
            findings.merge(local, _rekey(where, raw_where))
            if result is None:
                continue
            intrinsic, companions = result
            previous = first_seen.get(intrinsic.name)
            if previous is not None:
                same_entry = previous[1] == index
                hint = ("; two variants expand to it: put the parameter that tells them "
                        "apart in the name pattern") if same_entry else ""
                findings.add(intrinsic.loc, f"duplicate intrinsic name {intrinsic.name} "
                             f"(first at line {previous[0].line}){hint}")
                continue
            first_seen[intrinsic.name] = (intrinsic.loc or entry.loc, index)
            built.append(intrinsic)
            template = node.value["emit"].get(CPU_BACKEND)
            if template is not None:
                templates[intrinsic.name] = template
            refs.extend(companions)
    return built, refs


def _check_self_check_size(intrinsics: list[Intrinsic], findings: Findings) -> None:
    """The compute intrinsics' iteration spaces together stay within what one self-check may
    run; the finding names the intrinsic that crosses the bound."""
    total = 0
    for intrinsic in intrinsics:
        if intrinsic.kind != "compute":
            continue
        total += math.prod(intrinsic.extents)
        if total > limits.MAX_FAMILY_ITERATIONS:
            findings.add(intrinsic.loc, f"intrinsic {intrinsic.name}: a family requires its "
                         f"compute intrinsics to have at most {limits.MAX_FAMILY_ITERATIONS} "
                         "iteration points in all (validation runs every one), got more "
                         "with this one")
            return


def _rekey(where: str, raw_where: str) -> Callable[[str], str]:
    """Dedup keys name the entry, not the variant, so one slip in an entry reports once."""
    return lambda key: key.replace(where, raw_where)


def _check_companion(ref: CompanionRef, by_name: dict[str, Intrinsic],
                     findings: Findings) -> None:
    """A companion exists, has the right kind, and moves a tile like the operand."""
    owner = ref.owner
    where = f"intrinsic {owner.name}: {ref.field}.{ref.operand}"
    key = f"{ref.field}.{ref.operand} -> {ref.name}"
    companion = by_name.get(ref.name)
    if companion is None:
        close = difflib.get_close_matches(ref.name, list(by_name), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        findings.add(ref.loc, f"{where} names intrinsic {ref.name}, which this family does "
                     f"not define{hint}", key=f"missing {key}")
        return
    wanted = {"loads": "load", "stores": "store", "fill": "fill"}[ref.field]
    if companion.kind != wanted:
        findings.add(ref.loc, f"{where} requires a {wanted} intrinsic, got {ref.name} of "
                     f"kind {companion.kind}", key=f"kind {key}")
        return
    operand = owner.operand(ref.operand)
    moved = companion.output if ref.field != "stores" else _source(companion)
    if moved is None:
        return
    if operand.scope not in moved.scopes or moved.shape != operand.shape or \
            moved.dtype != operand.dtype:
        side = "writes" if ref.field != "stores" else "reads"
        findings.add(ref.loc, f"{where}: {ref.name} requires to move the operand's tile "
                     f"({_tile(operand, operand.scope)}), got one that {side} "
                     f"{_tile(moved, '/'.join(moved.scopes))}", key=f"tile {key}")


def _source(store: Intrinsic) -> Operand | None:
    """The operand a store intrinsic reads."""
    for operand in store.inputs:
        if not operand.is_scalar:
            return operand
    return None


def _tile(operand: Operand, scope: str) -> str:
    shape = "x".join(str(s) for s in operand.shape) or "scalar"
    return f"{shape} {operand.dtype} in {scope}"
