"""Building one :class:`~intrinsics.model.Intrinsic` from a schema-checked YAML entry.

Operands become ``ir.Buffer``\\ s, iterators ``ir.IterVar``\\ s, and the semantics is parsed by
the kernel language's statement parser, at its real position in the YAML file. Every problem
is recorded as a finding; :func:`build_intrinsic` returns None when there was one.
"""

from __future__ import annotations

import ast
import difflib
import math
from dataclasses import dataclass
from typing import Any

import ir
from intrinsics import checks, limits
from intrinsics.cpu_target import BACKEND as CPU_BACKEND
from intrinsics.model import (Accepted, Accumulation, Cost, Intrinsic, Operand, Scope, StrideRule,
                             frozen_mapping)
from intrinsics.source import Findings, YNode
from intrinsics.templates import ATTRIBUTES, Placeholder, TemplateError, parse
from ir import IterKind
from ir.script import parse_compute

COMPANION_FIELDS = {"loads": "load", "stores": "store", "fill": "fill"}


@dataclass(frozen=True)
class Context:
    """What an entry is built against: its family's name, target, scopes and file, and
    whether the family describes a CPU target (its templates are then ``emit.llvm``)."""

    family: str
    target: str
    scopes: dict[str, Scope]
    file: str
    cpu: bool = False


@dataclass(frozen=True)
class CompanionRef:
    """A companion named by a compute intrinsic, to resolve once the whole family is built."""

    owner: Intrinsic
    field: str
    operand: str
    name: str
    loc: ir.SourceLoc


def build_intrinsic(node: YNode, params: dict[str, Any], ctx: Context, findings: Findings,
                    where: str) -> tuple[Intrinsic, list[CompanionRef]] | None:
    """The intrinsic described by ``node`` (one variant, already substituted), or None."""
    before = len(findings)
    name = node.value["name"].value
    iter_vars = _iterators(node.value["iterators"], findings, where)
    operands = _operands(node.value["operands"], ctx, findings, where)
    _check_names(iter_vars, operands, params, node, findings, where)
    if len(findings) > before:
        return None
    store = _semantics(node.value["semantics"], iter_vars, operands, findings, where)
    if store is None:
        return None
    resets_node = node.get("resets")
    resets = bool(resets_node.value) if resets_node is not None else False
    parts = checks.Parts(where, node.value["kind"].value, store, operands, iter_vars, resets,
                         _text_loc(node.value["semantics"]), node.at("resets"))
    checks.check_all(parts, findings)
    accumulation = _accumulation(node, store, iter_vars, findings, where)
    emit = {backend: child.value for backend, child in node.value["emit"].value.items()}
    _check_templates(node.value["emit"], operands, ctx, findings, where)
    companions = {field: _companions(node, field, operands, findings, where)
                  for field in COMPANION_FIELDS}
    if len(findings) > before:
        return None
    cost_node = node.value["cost"].value
    intrinsic = Intrinsic(
        name=name, family=ctx.family, target=ctx.target, kind=node.value["kind"].value,
        iter_vars=iter_vars, operands=operands, semantics=store,
        semantics_text=node.value["semantics"].value.strip(), emit=frozen_mapping(emit),
        cost=Cost(cost_node["latency"].value, cost_node["interval"].value),
        reference=node.value["reference"].value,
        loads=frozen_mapping({k: v[0] for k, v in companions["loads"].items()}),
        stores=frozen_mapping({k: v[0] for k, v in companions["stores"].items()}),
        fill=frozen_mapping({k: v[0] for k, v in companions["fill"].items()}),
        resets=resets, params=frozen_mapping(params),
        description=_optional(node, "description", ""), loc=node.value["name"].loc,
        accumulation=accumulation)
    refs = [CompanionRef(intrinsic, field, operand, target, loc)
            for field, by_operand in companions.items()
            for operand, (targets, loc) in by_operand.items() for target in targets]
    return intrinsic, refs


def _optional(node: YNode, key: str, default: Any) -> Any:
    child = node.get(key)
    return default if child is None else child.value


def _iterators(node: YNode, findings: Findings, where: str) -> tuple[ir.IterVar, ...]:
    result = []
    seen: dict[str, ir.SourceLoc] = {}
    for item in node.value:
        name = item.value["name"].value
        if name in seen:
            findings.add(item.value["name"].loc, f"{where}: duplicate iterator {name} (first "
                         f"declared at line {seen[name].line})")
            continue
        seen[name] = item.loc
        kind = IterKind(_optional(item, "kind", "spatial"))
        var = ir.Var(name, loc=item.value["name"].loc)
        result.append(ir.IterVar(var, item.value["extent"].value, kind, item.loc))
    points = math.prod(iv.extent for iv in result)
    if points > limits.MAX_ITERATIONS:
        extents = "x".join(str(iv.extent) for iv in result)
        findings.add(node.loc, f"{where}: an iteration space requires at most "
                     f"{limits.MAX_ITERATIONS} points (validation runs every one), got "
                     f"{points} ({extents})")
    return tuple(result)


def _operands(node: YNode, ctx: Context, findings: Findings, where: str) -> tuple[Operand, ...]:
    result = []
    seen: dict[str, ir.SourceLoc] = {}
    for item in node.value:
        name = item.value["name"].value
        if name in seen:
            findings.add(item.value["name"].loc, f"{where}: duplicate operand {name} (first "
                         f"declared at line {seen[name].line})")
            continue
        seen[name] = item.loc
        result.append(_operand(item, ctx, findings, f"{where}, operand {name}"))
    return tuple(result)


def _operand(item: YNode, ctx: Context, findings: Findings, where: str) -> Operand:
    fields = item.value
    scope_node = fields["scope"]
    scopes = tuple(c.value for c in scope_node.value) if scope_node.is_sequence \
        else (scope_node.value,)
    dtype = ir.dtype(fields["dtype"].value)
    buffer = ir.Buffer(fields["name"].value, tuple(c.value for c in fields["shape"].value),
                       dtype, scopes[0], loc=item.loc)
    if buffer.size > limits.MAX_OPERAND_ELEMENTS:
        findings.add(fields["shape"].loc, f"{where}: a tile requires at most "
                     f"{limits.MAX_OPERAND_ELEMENTS} elements (validation allocates it), "
                     f"got {buffer.size} for shape {list(buffer.shape)}")
    layout = _optional(item, "layout", "row_major")
    if layout == "col_major" and buffer.ndim < 2:
        findings.add(item.at("layout"), f"{where}: layout col_major requires at least 2 "
                     f"dimensions, got shape {list(buffer.shape)}")
    strides = None
    strides_node = item.get("strides")
    if strides_node is not None:
        strides = StrideRule(dense=True) if strides_node.value == "dense" else StrideRule(
            leading_multiple_of=strides_node.value["leading_multiple_of"].value)
    alignment = _optional(item, "alignment", max(dtype.bits // 8, 1))
    if alignment & (alignment - 1):
        findings.add(item.at("alignment"), f"{where}: alignment requires a power of two, "
                     f"got {alignment}")
    value_range = None
    range_node = item.get("range")
    if range_node is not None:
        low, high = (c.value for c in range_node.value)
        if low < dtype.min or high > dtype.max:
            findings.add(range_node.loc, f"{where}: range requires values of {dtype} "
                         f"[{dtype.min}, {dtype.max}], got [{low}, {high}]")
        value_range = (low, high)
    operand = Operand(fields["name"].value, fields["role"].value, buffer, layout, strides,
                      alignment, scopes, value_range, _optional(item, "description", ""),
                      item.loc, _accepted(item, fields["role"].value, dtype, findings, where))
    for scope_name, loc in zip(scopes, _scope_locs(scope_node)):
        _check_scope(operand, scope_name, loc, ctx, findings, where)
    return operand


def _accepted(item: YNode, role: str, dtype: ir.DType, findings: Findings, where: str
              ) -> Accepted | None:
    """The operand's ``accepts`` declaration, or None (absent, or wrong: recorded why)."""
    node = item.get("accepts")
    if node is None:
        return None
    accepted = Accepted(ir.dtype(node.value["dtype"].value), node.value["bias"].value)
    source, bias = accepted.dtype, accepted.bias
    where = f"{where}: accepts"
    if role != "input":
        findings.add(item.at("accepts"), f"{where} requires an input operand, got role {role}")
    elif not (source.is_int and dtype.is_int) or source == dtype:
        findings.add(node.value["dtype"].loc, f"{where} requires an integer dtype other than "
                     f"the operand's {dtype}, got {source}")
    elif source.min + bias < dtype.min or source.max + bias > dtype.max:
        findings.add(node.value["bias"].loc, f"{where} requires {source} + bias within "
                     f"{dtype} [{dtype.min}, {dtype.max}], got [{source.min + bias}, "
                     f"{source.max + bias}] for bias {bias}")
    else:
        return accepted
    return None


def _accumulation(node: YNode, store: ir.BufferStore, iter_vars: tuple[ir.IterVar, ...],
                  findings: Findings, where: str) -> Accumulation | None:
    """The intrinsic's ``accumulation``, or None (absent, or wrong: recorded why). It states
    the order of one reduce iterator's products, so it needs a float product-sum over one."""
    child = node.get("accumulation")
    if child is None:
        return None
    values = child.plain()
    reduces = [iv for iv in iter_vars if iv.kind is IterKind.REDUCE]
    term = checks.accumulated_term(store)
    where = f"{where}: accumulation"
    if not store.buffer.dtype.is_float:
        findings.add(node.at("accumulation"), f"{where} requires a float accumulator, got "
                     f"{store.buffer.dtype}")
    elif len(reduces) != 1 or not isinstance(term, ir.BinOp) or term.op != "mul":
        findings.add(node.at("accumulation"), f"{where} requires semantics C += x * y with "
                     f"one reduce iterator, got {len(reduces)} reduce iterator(s) in "
                     f"{store.buffer.name}[...] = {store.value}")
    elif values["order"] == "pairwise" and reduces[0].extent % 2:
        findings.add(node.at("accumulation"), f"{where} requires a reduce iterator of even "
                     f"extent for order pairwise, got {reduces[0].var.name} of "
                     f"{reduces[0].extent}")
    else:
        return Accumulation(values["order"], values["rounding"], values["denormals"])
    return None


def _scope_locs(node: YNode) -> list[ir.SourceLoc]:
    return [c.loc for c in node.value] if node.is_sequence else [node.loc]


def _check_scope(operand: Operand, name: str, loc: ir.SourceLoc, ctx: Context,
                 findings: Findings, where: str) -> None:
    scope = ctx.scopes.get(name)
    if scope is None:
        close = difflib.get_close_matches(name, list(ctx.scopes), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else \
            f"; declared scopes: {', '.join(ctx.scopes)}"
        findings.add(loc, f"{where}: unknown scope '{name}'{hint}")
        return
    if scope.capacity is not None and operand.nbytes > scope.capacity:
        findings.add(loc, f"{where}: scope {name} requires tiles of at most {scope.capacity} "
                     f"bytes (its capacity), got {operand.nbytes} bytes for shape "
                     f"{list(operand.shape)} of {operand.dtype}")
    if scope.dtypes and operand.dtype not in scope.dtypes:
        held = ", ".join(d.name for d in scope.dtypes)
        findings.add(loc, f"{where}: scope {name} holds {held}, got an operand of "
                     f"{operand.dtype}")


def _check_names(iter_vars: tuple[ir.IterVar, ...], operands: tuple[Operand, ...],
                 params: dict[str, Any], node: YNode, findings: Findings, where: str) -> None:
    """Operands, iterators and parameters share the template and semantics namespaces."""
    iterators = {iv.var.name: iv for iv in iter_vars}
    for operand in operands:
        if operand.name in iterators:
            findings.add(operand.loc, f"{where}: operand {operand.name} has the name of an "
                         "iterator; rename one of them")
        if operand.name in params:
            findings.add(operand.loc, f"{where}: operand {operand.name} has the name of a "
                         f"variant parameter, so {{{operand.name}}} in a template is "
                         "ambiguous; rename one of them")
        if ir.dtypes.is_dtype_name(operand.name) or operand.name in ir.expr.MATH_FUNCTIONS:
            findings.add(operand.loc, f"{where}: operand {operand.name} has the name of a "
                         "function of the semantics language; rename it")


def _text_loc(node: YNode) -> ir.SourceLoc:
    """Where the text of a scalar starts (after an opening quote; next line for blocks)."""
    loc = node.loc
    if node.style in ('"', "'"):
        return ir.SourceLoc(loc.file, loc.line, loc.col + 1)
    if node.style in ("|", ">"):
        line = ir.SourceLoc(loc.file, loc.line + 1).source_line() or ""
        return ir.SourceLoc(loc.file, loc.line + 1, len(line) - len(line.lstrip()) + 1)
    return ir.SourceLoc(loc.file, loc.line, loc.col)


def _semantics(node: YNode, iter_vars: tuple[ir.IterVar, ...], operands: tuple[Operand, ...],
               findings: Findings, where: str) -> ir.BufferStore | None:
    """Parse the semantics statement; scalar operands stand in as variables while parsing."""
    text = node.value.strip()
    loc = _text_loc(node)
    if node.style == "|" and not node.substituted:
        # A literal block keeps its lines: re-indent them so positions are the file's.
        first, *rest = text.split("\n")
        indent = " " * (loc.col - 1)
        text = "\n".join([first, *(indent + line if line else line for line in rest)])
    buffers = {o.name: o.buffer for o in operands if not o.is_scalar}
    scalars = {o.name: ir.Var(o.name, o.dtype) for o in operands if o.is_scalar}
    names = {iv.var.name: iv.var for iv in iter_vars}
    if len(text) > limits.MAX_SEMANTICS_CHARS:
        findings.add(loc, f"{where}: semantics requires at most {limits.MAX_SEMANTICS_CHARS} "
                     f"characters, got {len(text)}; one instruction's meaning is one short "
                     "statement")
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        tree = None  # the statement parser reports it, at its position
    if tree is not None and not (_check_depth(tree, loc, findings, where) and _check_names_used(
            tree, loc, buffers, names, scalars, findings, where)):
        return None
    try:
        store = parse_compute(text, buffers, {**names, **scalars}, loc.file, loc.line, loc.col)
    except ir.TensorizeError as err:
        findings.add(err.loc or loc, f"{where}: semantics: {err.message}",
                     key=f"semantics: {err.message}")
        return None
    loads = {scalars[o.name]: ir.BufferLoad(o.buffer, ()) for o in operands if o.is_scalar}
    return ir.substitute(store, loads)


def _check_depth(tree: ast.Module, loc: ir.SourceLoc, findings: Findings, where: str) -> bool:
    """Report a semantics nested deeper than the IR's recursive walks may go."""
    deepest = 0
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    if deepest <= limits.MAX_SEMANTICS_DEPTH:
        return True
    findings.add(loc, f"{where}: semantics requires expressions nested at most "
                 f"{limits.MAX_SEMANTICS_DEPTH} levels deep, got {deepest}")
    return False


def _check_names_used(tree: ast.Module, loc: ir.SourceLoc, buffers: dict[str, ir.Buffer],
                      iterators: dict[str, ir.Var], scalars: dict[str, ir.Var],
                      findings: Findings, where: str) -> bool:
    """Report a name that is no operand and no iterator, with the lists of both."""
    callees = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    ok = True
    for name in (n for n in ast.walk(tree) if isinstance(n, ast.Name)):
        if id(name) in callees or name.id in buffers or name.id in iterators or \
                name.id in scalars:
            continue
        col = loc.col + name.col_offset if name.lineno == 1 else name.col_offset + 1
        at = ir.SourceLoc(loc.file, loc.line + name.lineno - 1, col, None,
                          col + len(name.id) - 1)
        close = difflib.get_close_matches(name.id, [*buffers, *iterators, *scalars], n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        findings.add(at, f"{where}: semantics uses {name.id}, which is not a declared iterator "
                     f"({', '.join(iterators)}) nor an operand "
                     f"({', '.join([*buffers, *scalars])}){hint}")
        ok = False
    return ok


def _check_templates(node: YNode, operands: tuple[Operand, ...], ctx: Context,
                     findings: Findings, where: str) -> None:
    """Each template is in its backend's grammar, its placeholders name operands, every
    operand appears, and the target has a template: ``emit.llvm`` in a family with a ``cpu:``
    section (the CPU code generator's), else ``emit.<target>`` or ``emit.llvm`` (a family
    adding intrinsics to a CPU target another file describes)."""
    names = [o.name for o in operands]
    wanted = (CPU_BACKEND,) if ctx.cpu else (ctx.target, CPU_BACKEND)
    if not any(key in node.value for key in wanted):
        owner = "the CPU code generator" if ctx.cpu else f"the family's target '{ctx.target}'"
        findings.add(node.loc, f"{where}: emit requires a template for {owner} "
                     f"({' or '.join(wanted)}), got {', '.join(node.value) or 'none'}")
    for backend, child in node.value.items():
        try:
            found = parse(backend, child.value).placeholders
        except TemplateError as err:
            findings.add(template_loc(child, err), f"{where}: emit.{backend}: {err.message}",
                         key=f"emit.{backend}: {err.message}")
            continue
        for placeholder in found:
            if placeholder.operand not in names:
                close = difflib.get_close_matches(placeholder.operand, names, n=1)
                hint = f"; did you mean {{{close[0]}}}?" if close else \
                    f"; operands: {', '.join(names)}"
                findings.add(child.loc, f"{where}: emit.{backend}: placeholder {{{placeholder}}} "
                             f"names no operand{hint}")
            elif placeholder.attribute is not None:
                _check_attribute(placeholder, operands, f"{where}: emit.{backend}", child,
                                 findings)
        used = {p.operand for p in found}
        for name in names:
            if name not in used:
                findings.add(child.loc, f"{where}: emit.{backend}: template requires every "
                             f"operand, got no {{{name}}}")


def template_loc(node: YNode, err: TemplateError) -> ir.SourceLoc:
    """Where in the file a template's problem is: at its character when the template's text
    is in the file as it was read (plain, quoted without escapes, or a literal block, and no
    variant substitution), else at the template."""
    if err.offset is None or node.substituted or node.style not in (None, '"', "'", "|"):
        return node.loc
    start = _text_loc(node)
    *above, current = node.value[:err.offset].split("\n")
    if above and node.style != "|":
        return node.loc
    line = start.line + len(above)
    col = start.col + len(current)
    source = ir.SourceLoc(start.file, line).source_line()
    if source is None or source[start.col - 1:col - 1] != current:
        return node.loc
    return ir.SourceLoc(start.file, line, col, None, col + err.length - 1)


def _check_attribute(placeholder: Placeholder, operands: tuple[Operand, ...], where: str,
                     node: YNode, findings: Findings) -> None:
    """``{A.ld}`` needs a tensor of 2+ dimensions, ``{s.log2}`` a scalar."""
    attribute = placeholder.attribute
    if attribute not in ATTRIBUTES:
        findings.add(node.loc, f"{where}: placeholder {{{placeholder}}} requires an attribute "
                     f"among {', '.join(ATTRIBUTES)}, got '{attribute}'")
        return
    operand = next(o for o in operands if o.name == placeholder.operand)
    if ATTRIBUTES[attribute] and not operand.is_scalar:
        findings.add(node.loc, f"{where}: placeholder {{{placeholder}}} requires a scalar "
                     f"operand, got {operand.name} of shape {list(operand.shape)}")
    elif not ATTRIBUTES[attribute] and operand.buffer.ndim < 2:
        findings.add(node.loc, f"{where}: placeholder {{{placeholder}}} requires an operand "
                     f"of 2 or more dimensions, got {operand.name} of shape "
                     f"{list(operand.shape)}")


def _companions(node: YNode, field: str, operands: tuple[Operand, ...], findings: Findings,
                where: str) -> dict[str, tuple[tuple[str, ...], ir.SourceLoc]]:
    """``operand -> (intrinsic names, location)`` of a loads/stores/fill field."""
    child = node.get(field)
    if child is None:
        return {}
    names = [o.name for o in operands]
    if node.value["kind"].value != "compute":
        findings.add(child.key_loc or child.loc, f"{where}: '{field}' requires a compute "
                     f"intrinsic, got kind {node.value['kind'].value}")
        return {}
    result = {}
    for operand, targets in child.value.items():
        loc = targets.loc
        if operand not in names:
            close = difflib.get_close_matches(operand, names, n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; operands: {', '.join(names)}"
            findings.add(targets.key_loc or loc, f"{where}: {field} names operand {operand}, "
                         f"which it does not have{hint}")
            continue
        values = tuple(c.value for c in targets.value) if targets.is_sequence \
            else (targets.value,)
        result[operand] = (values, loc)
    return result
