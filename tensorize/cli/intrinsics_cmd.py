"""``tensorize intrinsics``: list, show and validate hardware intrinsic descriptions.

``list`` prints a table of every registered intrinsic, ``show NAME`` everything about one,
``validate FILE...`` checks description files (schema, cross-checks, names against the
registry, an NPU family against its machine, each CPU template against the CPU code generator,
and the semantic self-check) and prints each problem at its YAML line; it exits 2
when a file does not load, 1 when the self-check fails, 0 when all is well. Each accepts
``--intrinsics-dir DIR`` (repeatable) to add the user's families, as does the environment
variable ``TENSORIZE_INTRINSICS_PATH``. ``list`` and ``show`` also accept ``--machine
FILE.yaml``: an NPU file whose family has its own ``machine:`` then stands in for the built-in
NPU family, as it does for ``tensorize run --machine``, and ``show`` prints the capacities of
that machine's memories.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

from intrinsics import (
    CPU_BACKEND,
    CheckResult,
    Family,
    Intrinsic,
    Registry,
    Scope,
    check_family,
    check_registry,
    default_registry,
    search_dirs,
    self_check,
)
from intrinsics.registry import BUILTIN_DIR, SUFFIXES, check_across, family_files
from intrinsics.source import Findings, read_yaml
from ir.errors import IntrinsicSpecError, SourceLoc, render_error
from targets.cpu import templates as cpu_templates
from targets.cpu.errors import EmitError
from targets.host.selfcheck import SemanticsChecker
from targets.npu import load_machine, machine_registry
from targets.npu.selfcheck import SimulatorChecker
from tensorize.cli.registry_args import add_registry_arguments

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

_SHORT = {"int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
          "uint16": "u16", "uint32": "u32", "float16": "f16", "bfloat16": "bf16",
          "float32": "f32", "float64": "f64"}


def register(subparsers: Any) -> None:
    """Add the ``intrinsics`` command and its ``list``/``show``/``validate`` actions."""
    parser = subparsers.add_parser(
        "intrinsics", help="list, show and validate hardware intrinsic descriptions",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    add_registry_arguments(common)
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    viewing = argparse.ArgumentParser(add_help=False)
    viewing.add_argument(
        "--machine", metavar="FILE.yaml",
        help="an NPU file with a machine: section; its family replaces the built-in NPU one")

    listing = actions.add_parser("list", parents=[common, viewing],
                                 help="a table of the intrinsics")
    listing.add_argument("--target", help="only this target's intrinsics (cuda, arm, npu...)")
    listing.set_defaults(handler=_list)

    show = actions.add_parser("show", parents=[common, viewing],
                              help="everything about one intrinsic")
    show.add_argument("name", metavar="NAME")
    show.set_defaults(handler=_show)

    validate = actions.add_parser(
        "validate", parents=[common], help="check description files and self-check them")
    validate.add_argument("files", nargs="+", metavar="FILE", help="YAML description files")
    validate.add_argument("--no-self-check", action="store_true",
                          help="skip running the semantics against the numpy model")
    validate.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    validate.set_defaults(handler=_validate)

    parser.set_defaults(handler=lambda args: _usage(parser))


def registry_from_args(args: argparse.Namespace) -> Registry:
    """The default registry plus the directories named on the command line; with
    ``--machine``, the registry a run on that machine uses (its family, when it declares
    one, in place of the built-in NPU family)."""
    if getattr(args, "machine", None):
        return machine_registry(args.machine, args.intrinsics_dir)
    return default_registry(args.intrinsics_dir)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


# ---- list ------------------------------------------------------------------------------------

def _list(args: argparse.Namespace) -> int:
    registry = registry_from_args(args)
    chosen = [i for i in registry if args.target is None or i.target == args.target]
    if args.target is not None and args.target not in registry.targets:
        raise IntrinsicSpecError(f"--target requires one of {', '.join(registry.targets)}, "
                                 f"got {args.target!r}")
    if args.json:
        print(json.dumps([summary(i) for i in chosen], indent=2))
        return EXIT_OK
    header = ("NAME", "TARGET", "KIND", "SHAPE", "DTYPES", "SCOPES", "LATENCY")
    rows = [(i.name, i.target, i.kind, i.shape_text, dtypes_text(i), scopes_text(i),
             str(i.cost.latency)) for i in chosen]
    print(_table(header, rows))
    return EXIT_OK


def dtypes_text(intrinsic: Intrinsic) -> str:
    """``i8,i8->i32``: the inputs' dtypes, then the output's."""
    inputs = ",".join(_SHORT.get(o.dtype.name, o.dtype.name) for o in intrinsic.inputs)
    out = intrinsic.output.dtype.name
    return f"{inputs}->{_SHORT.get(out, out)}"


def scopes_text(intrinsic: Intrinsic) -> str:
    """The inputs' scopes, then the output's, each once (alternatives joined by '|')."""
    def spelled(scopes: tuple[str, ...]) -> str:
        return "|".join(scopes)

    inputs = list(dict.fromkeys(spelled(o.scopes) for o in intrinsic.inputs))
    return f"{','.join(inputs)}->{spelled(intrinsic.output.scopes)}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    return _columns([header, *rows])


def _columns(rows: Sequence[Sequence[str]]) -> str:
    """Rows of cells, each column padded to its widest cell."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(*rows)]
    lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip()
             for row in rows]
    return "\n".join(lines)


def summary(intrinsic: Intrinsic) -> dict[str, Any]:
    """The ``list --json`` record of an intrinsic."""
    return {
        "name": intrinsic.name, "family": intrinsic.family, "target": intrinsic.target,
        "kind": intrinsic.kind, "shape": list(intrinsic.extents),
        "dtypes": {o.name: o.dtype.name for o in intrinsic.operands},
        "scopes": {o.name: list(o.scopes) for o in intrinsic.operands},
        "latency": intrinsic.cost.latency, "interval": intrinsic.cost.interval,
        "source": str(intrinsic.loc) if intrinsic.loc is not None else None,
    }


# ---- show ------------------------------------------------------------------------------------

def _show(args: argparse.Namespace) -> int:
    registry = registry_from_args(args)
    intrinsic = registry.get(args.name)
    if args.json:
        record = details(intrinsic)
        record["scope_declarations"] = {
            name: _scope_record(registry.scope(name)) for name in _scopes_of(intrinsic)}
        print(json.dumps(record, indent=2))
    else:
        print(describe(intrinsic, registry.scope))
    return EXIT_OK


def _scopes_of(intrinsic: Intrinsic) -> list[str]:
    """Every scope an operand of ``intrinsic`` may live in, each once, in operand order."""
    return list(dict.fromkeys(s for o in intrinsic.operands for s in o.scopes))


def _scope_record(scope: Scope) -> dict[str, Any]:
    return {"capacity": scope.capacity, "dtypes": [d.name for d in scope.dtypes],
            "alignment": scope.alignment, "banks": scope.banks,
            "source": str(scope.loc) if scope.loc is not None else None}


def _scope_text(scope: Scope) -> str:
    """``npu.inp 131072 B, 4 banks``; ``global unbounded``."""
    size = f"{scope.capacity} B" if scope.capacity is not None else "unbounded"
    banks = f", {scope.banks} banks" if scope.banks is not None else ""
    return f"{scope.name} {size}{banks}"


def details(intrinsic: Intrinsic) -> dict[str, Any]:
    """The ``show --json`` record: everything the description says."""
    record = summary(intrinsic)
    record.update({
        "description": intrinsic.description,
        "iterators": [{"name": iv.var.name, "extent": iv.extent, "kind": iv.kind.value}
                      for iv in intrinsic.iter_vars],
        "operands": [{"name": o.name, "role": o.role, "shape": list(o.shape),
                      "dtype": o.dtype.name, "scopes": list(o.scopes), "layout": o.layout,
                      "strides": _strides_text(o), "alignment": o.alignment,
                      "range": list(o.value_range) if o.value_range else None,
                      "description": o.description} for o in intrinsic.operands],
        "semantics": intrinsic.semantics_text, "resets": intrinsic.resets,
        "emit": dict(intrinsic.emit),
        "loads": {k: list(v) for k, v in intrinsic.loads.items()},
        "stores": {k: list(v) for k, v in intrinsic.stores.items()},
        "fill": {k: list(v) for k, v in intrinsic.fill.items()},
        "reference": intrinsic.reference, "params": dict(intrinsic.params),
    })
    return record


def _strides_text(operand: Any) -> str | None:
    rule = operand.strides
    if rule is None:
        return None
    if rule.dense:
        return "dense"
    return f"leading dimension a multiple of {rule.leading_multiple_of}"


def describe(intrinsic: Intrinsic,
             scope: Callable[[str], Scope] | None = None) -> str:
    """The text ``show`` prints; with ``scope`` (a registry's lookup of a scope by name), also
    the capacity and banks of each memory the operands live in."""
    lines = [f"{intrinsic.name}: {intrinsic.kind} intrinsic of family {intrinsic.family} "
             f"(target {intrinsic.target})"]
    if intrinsic.description:
        lines.append(f"  {intrinsic.description}")
    if intrinsic.loc is not None:
        lines.append(f"  defined at {intrinsic.loc.file}:{intrinsic.loc.line}")
    if intrinsic.params:
        lines.append("  variant of: " + ", ".join(f"{k}={v}" for k, v in
                                                  intrinsic.params.items()))
    lines.append("  iterators: " + ", ".join(f"{iv.var.name} ({iv.kind.value}, {iv.extent})"
                                             for iv in intrinsic.iter_vars))
    lines.append("  operands:")
    rows = []
    for o in intrinsic.operands:
        shape = "x".join(str(s) for s in o.shape) or "scalar"
        extras = [o.layout] if o.buffer.ndim >= 2 else []
        if o.strides is not None:
            extras.append(f"strides: {_strides_text(o)}")
        extras.append(f"align {o.alignment}")
        if o.value_range is not None:
            extras.append(f"range [{o.value_range[0]}, {o.value_range[1]}]")
        rows.append(("   ", o.name, o.role, shape, o.dtype.name, "|".join(o.scopes),
                     ", ".join(extras)))
    lines.append(_columns(rows))
    if scope is not None:
        lines.append("  scopes: " + "; ".join(_scope_text(scope(name))
                                             for name in _scopes_of(intrinsic)))
    semantics = intrinsic.semantics_text.replace("\n", "\n" + " " * len("  semantics: "))
    lines.append(f"  semantics: {semantics}")
    if intrinsic.resets:
        lines.append("  resets its accumulator (the block has init = 0)")
    lines.append("  emit:")
    lines.extend(f"    {backend}: {template}" for backend, template in intrinsic.emit.items())
    for field in ("loads", "stores", "fill"):
        companions = getattr(intrinsic, field)
        if companions:
            lines.append(f"  {field}: " + "; ".join(f"{k} <- {', '.join(v)}"
                                                   for k, v in companions.items()))
    lines.append(f"  cost: latency {intrinsic.cost.latency} cycles, issue interval "
                 f"{intrinsic.cost.interval} cycles")
    lines.append(f"  reference: {intrinsic.reference}")
    return "\n".join(lines)


# ---- validate --------------------------------------------------------------------------------

def _checkers(path: Path, family: Family) -> list:
    """The semantics check for every family; for an NPU family with a machine section, also
    each instruction run on the simulator that machine describes."""
    checkers: list = [SemanticsChecker()]
    if family.target == "npu" and family.machine is not None:
        checkers.append(SimulatorChecker(list(family.intrinsics), load_machine(path)))
    return checkers


def _check_cpu_templates(path: Path, family: Family, findings: Findings) -> None:
    """Each ``emit.llvm`` template is one the CPU code generator emits. The template grammar
    admits more of LLVM IR than the code generator emits (a scalar load, a ``void`` call, an
    immediate argument, a float vector), and the code generator refuses the rest only when a
    kernel first calls the intrinsic; its own check (``targets.cpu.templates.parse``) runs
    here, and its reason is reported at the template's line."""
    refused = []
    for intrinsic in family.intrinsics:
        if CPU_BACKEND not in intrinsic.emit:
            continue
        try:
            cpu_templates.parse(intrinsic.name, intrinsic.emit[CPU_BACKEND])
        except EmitError as err:
            refused.append((intrinsic, err.message))
    locs = _template_locs(path) if refused else {}
    for intrinsic, message in refused:
        where = (intrinsic.loc.line, intrinsic.loc.col) if intrinsic.loc is not None else None
        findings.add(locs.get(where, intrinsic.loc), message)


def _template_locs(path: Path) -> dict[tuple[int, int], SourceLoc]:
    """Where each entry's ``emit.llvm`` template is written, by the place of the entry's name
    (an intrinsic's ``loc``; every variant of an entry shares it)."""
    root = read_yaml(path, Findings(str(path)))
    entries = root.get("intrinsics") if root is not None else None
    locs = {}
    for entry in entries.value if entries is not None and entries.is_sequence else ():
        name, emit = entry.get("name"), entry.get("emit")
        template = emit.get(CPU_BACKEND) if emit is not None else None
        if name is not None and template is not None:
            locs[(name.loc.line, name.loc.col)] = template.loc
    return locs


def _validate(args: argparse.Namespace) -> int:
    """Exit 2 when a file does not load (YAML, schema, template grammar, limits, names), 1
    when every file loads but the self-check fails, 0 when all is well."""
    paths = [Path(f) for f in args.files]
    reports = []
    for path in paths:
        if path.suffix not in SUFFIXES:
            findings = Findings(str(path))
            findings.add(None, f"{path}: the registry loads only *.yaml and *.yml files, got "
                         f"'{path.name}'; rename it {path.stem}.yaml")
            reports.append((path, None, findings))
            continue
        family, findings = check_family(path)
        if family is not None:
            _check_cpu_templates(path, family, findings)
        reports.append((path, family, findings))
    _check_against_registry(reports, args.intrinsics_dir)
    results: dict[Path, list[CheckResult]] = {}
    for path, family, findings in reports:
        if family is None or findings or args.no_self_check:
            results[path] = []
        else:
            results[path] = self_check(family.intrinsics, _checkers(path, family),
                                       seed=args.seed)
    malformed = any(findings for _, _, findings in reports)
    failed = any(r.failed for path, _, _ in reports for r in results[path])
    if args.json:
        print(json.dumps({"ok": not (malformed or failed), "files": [
            _file_record(path, family, findings, results[path])
            for path, family, findings in reports]}, indent=2))
    else:
        for path, family, findings in reports:
            _print_report(path, family, findings, results[path])
    if malformed:
        return EXIT_USAGE
    return EXIT_FAILED if failed else EXIT_OK


def _check_against_registry(reports: list[tuple[Path, Family | None, Findings]],
                            extra_dirs: Sequence[str]) -> None:
    """Names in the files must not clash with each other or with the registered families."""
    validated = {p.resolve() for p, _, _ in reports}
    # An NPU family with its own machine stands in for the built-in NPU (as `run --machine`
    # uses it), whose scopes are the built-in machine's memories.
    if any(f is not None and f.target == "npu" and f.machine is not None
           for _, f, _ in reports):
        validated.add((BUILTIN_DIR / "npu.yaml").resolve())
    try:
        registered_files = family_files(search_dirs(extra_dirs))
        others = [f for f in registered_files if f.resolve() not in validated]
    except IntrinsicSpecError as err:
        for _, _, findings in reports:
            findings.add(None, err.message)
        return
    # Problems inside the registered files are theirs, not the validated files': only names.
    registered, _ = check_registry(others)
    loaded = [family for _, family, _ in reports if family is not None]
    across = Findings("registry")
    check_across([*registered, *loaded], across)
    for error in across.items:
        for path, _, findings in reports:
            if error.loc is not None and Path(error.loc.file).resolve() == path.resolve():
                findings.add(error.loc, error.message)


def _print_report(path: Path, family: Family | None, findings: Findings,
                  results: list[CheckResult]) -> None:
    for error in findings.sorted():
        print(render_error(error.message, error.loc))
    for result in results:
        print(f"{_where(family, result)}: self-check: {result}")
    if findings or family is None:
        count = len(findings)
        print(f"{path}: {count} problem{'s' if count != 1 else ''}")
        return
    failed = sum(r.failed for r in results)
    skipped = sum(r.status == "skipped" for r in results)
    checked = ""
    if results:
        ok = len(results) - failed - skipped
        checked = f", self-check: {ok}/{len(results)} compute intrinsics ok"
        checked += f" ({skipped} skipped: {_first_skip(results)})" if skipped else ""
    verdict = "FAILED" if failed else "ok"
    print(f"{path}: {verdict}: family {family.name}, target {family.target}, "
          f"{len(family.intrinsics)} intrinsics{checked}")


def _first_skip(results: list[CheckResult]) -> str:
    return next(r.detail for r in results if r.status == "skipped")


def _where(family: Family | None, result: CheckResult) -> str:
    if family is None:
        return result.intrinsic
    for intrinsic in family.intrinsics:
        if intrinsic.name == result.intrinsic and intrinsic.loc is not None:
            return str(intrinsic.loc)
    return result.intrinsic


def _file_record(path: Path, family: Family | None, findings: Findings,
                 results: list[CheckResult]) -> dict[str, Any]:
    return {
        "path": str(path),
        "family": family.name if family is not None else None,
        "intrinsics": len(family.intrinsics) if family is not None else 0,
        "findings": [_finding(e.loc, e.message) for e in findings.sorted()],
        "self_check": [{"intrinsic": r.intrinsic, "checker": r.checker, "status": r.status,
                        "max_error": r.max_error, "tolerance": r.tolerance,
                        "detail": r.detail} for r in results],
    }


def _finding(loc: SourceLoc | None, message: str) -> dict[str, Any]:
    if loc is None:
        return {"file": None, "line": None, "col": None, "message": message}
    return {"file": loc.file, "line": loc.line, "col": loc.col, "message": message}
