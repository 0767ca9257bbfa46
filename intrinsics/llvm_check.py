"""A CPU family checked against the installed LLVM when it loads.

The schema gives what a ``cpu:`` section hands LLVM a closed grammar (no quote, comma or
line break can reach the IR text or a feature string); this module asks the LLVM that will
compile the code (:mod:`intrinsics.llvm_probe`, in a child process) whether it knows each
name, and records a finding at the name's YAML line for each it does not:

- ``triple``: LLVM has a backend for it;
- ``cpu`` and every ``tune_cpus`` entry: CPUs that backend knows (LLVM would otherwise print
  a warning, ignore the name, and the tuner report a core it never scheduled for);
- ``features``, each emulator's ``executes``, the ``cpuinfo`` names and each intrinsic's
  ``feature`` parameter: features that backend knows;
- each ``emit.llvm`` template's ``call @llvm.*``: an intrinsic LLVM defines with the
  template's types (a name it does not define would be called as an external function, and
  the kernel would jump to address 0), called the way the code generator calls it, of the
  triple's architecture, and compiled for the triple, CPU and features (the family's, plus
  the intrinsic's ``feature``) without LLVM stopping the process ("Cannot select").

A family without a ``cpu:`` section that has ``emit.llvm`` templates (intrinsics added to a
CPU target another file describes) gets the call checks that need no triple when it loads,
and the others once the registry knows the target (:func:`check_added_intrinsics`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from intrinsics.builder import template_loc
from intrinsics.cpu_target import BACKEND
from intrinsics.grammars import TemplateError
from intrinsics.llvm_probe import ARCH_PREFIXES, Answer, Compile, Question, ask
from intrinsics.model import CpuTarget, Intrinsic
from intrinsics.schema import CPU_NAME, FEATURE_NAME
from intrinsics.source import Findings, YNode
from ir.errors import SourceLoc

# A template the grammar admitted (intrinsics.grammars): ``[{r} =] call TYPE @llvm.x.y(ARGS)``.
_CALL = re.compile(r"\s*(?:\{\w+\}\s*=\s*)?call\s+(?P<result>.+?)\s*"
                   r"(?P<name>@llvm\.[A-Za-z0-9_.]+)\s*\((?P<args>.*)\)\s*", re.ASCII)
_ARG = re.compile(r"\s*(?P<type><[^<>]*>|[^\s<>]+)\s+(?P<value>\S+)\s*", re.ASCII)
_REGISTERS = re.compile(r"\[\s*(?P<count>\d+)\s+x\s+(?P<type><[^<>]*>)\s*\]", re.ASCII)


@dataclass(frozen=True)
class _Name:
    """A name from the ``cpu:`` section to look up in one of LLVM's lists: the field it is
    in (``tune_cpus[1]``), the name and where it is written."""

    field: str
    name: str
    loc: SourceLoc | None


@dataclass(frozen=True)
class _Call:
    """A template's call of an LLVM intrinsic, as the code generator declares it: the
    intrinsic it belongs to, where the callee is written, and the question for LLVM."""

    intrinsic: Intrinsic
    loc: SourceLoc | None
    question: Question


def check_with_llvm(cpu_node: YNode | None, target: str, intrinsics: Sequence[Intrinsic],
                    templates: Mapping[str, YNode], findings: Findings) -> None:
    """Record a finding for each name of the family the installed LLVM does not know (see
    the module docstring). ``cpu_node`` is the schema-checked ``cpu:`` section (None when
    the family has none, or it broke the schema); ``templates`` maps an intrinsic's name to
    its ``emit.llvm`` template node."""
    machine = None
    anchor = None
    if cpu_node is not None:
        values = cpu_node.plain()
        machine = (values["triple"], values["cpu"], tuple(values["features"]))
        anchor = cpu_node.value["triple"].loc
    answers, llvm = _ask_about(machine, intrinsics, templates, findings, anchor)
    if answers is None:
        return
    target_answer, feature_params, calls, call_answers = answers
    if cpu_node is not None and target_answer is not None:
        known = _check_target(cpu_node, target_answer, llvm, f"cpu target {target}", findings)
        if known is not None:
            _check_feature_params(intrinsics, feature_params, known, llvm, findings)
    _report_calls(calls, call_answers, llvm, machine[0] if machine else None, findings)


def check_added_intrinsics(cpu: CpuTarget, intrinsics: Sequence[Intrinsic],
                           findings: Findings) -> None:
    """The calls and ``feature`` parameters of intrinsics a file adds to the CPU target
    ``cpu`` that another file describes, checked against it: each call compiled for its
    triple, CPU and features, each feature one LLVM knows for its triple (findings at each
    intrinsic's line)."""
    if not any(BACKEND in i.emit for i in intrinsics):
        return
    machine = (cpu.triple, cpu.cpu, cpu.features)
    answers, llvm = _ask_about(machine, intrinsics, {}, findings)
    if answers is None:
        return
    target_answer, feature_params, calls, call_answers = answers
    if target_answer is not None and target_answer.status == "ok":
        _check_feature_params(intrinsics, feature_params, target_answer, llvm, findings)
    _report_calls(calls, call_answers, llvm, cpu.triple, findings)


_Asked = tuple[Answer | None, dict[str, str], list["_Call"], list[Answer]]


def _ask_about(machine: tuple[str, str, tuple[str, ...]] | None,
               intrinsics: Sequence[Intrinsic], templates: Mapping[str, YNode],
               findings: Findings, anchor: SourceLoc | None = None
               ) -> tuple[_Asked | None, str]:
    """Ask LLVM about the triple of ``machine`` (triple, CPU, features) when given, and about
    each template's call (compiled for ``machine`` when given): the answer about the
    triple, the valid ``feature`` parameters, the calls and their answers, and how to name
    the LLVM that answered. None for the answers when there was nothing to ask, or no LLVM
    could be asked (a finding at ``anchor``, else at the first call)."""
    feature_params = _feature_params(intrinsics, findings)
    calls = _calls(machine, intrinsics, templates, feature_params)
    questions = [c.question for c in calls]
    if machine is not None:
        questions.insert(0, Question("target", triple=machine[0]))
    if not questions:
        return None, ""
    answers = list(ask(questions))
    missing = next((a for a in answers if a.status == "unavailable"), None)
    if missing is not None:
        # Nothing was checked: one finding, at the triple or the first call.
        findings.add(anchor or _first_loc(calls, intrinsics), "a CPU family requires the "
                     "installed LLVM to check what it hands LLVM, got no LLVM that could be "
                     f"asked: {missing.detail}")
        return None, ""
    version = next((a.llvm for a in answers if a.llvm), "")
    llvm = f"LLVM {version}" if version else "the installed LLVM"
    target_answer = answers.pop(0) if machine is not None else None
    return (target_answer, feature_params, calls, answers), llvm


def _first_loc(calls: Sequence[_Call], intrinsics: Sequence[Intrinsic]) -> SourceLoc | None:
    """Where to report what concerns the whole family: its first call, else its first
    intrinsic."""
    if calls:
        return calls[0].loc
    return intrinsics[0].loc if intrinsics else None


def _report_calls(calls: Sequence[_Call], answers: Sequence[Answer], llvm: str,
                  triple: str | None, findings: Findings) -> None:
    for call, answer in zip(calls, answers):
        message = _call_finding(call, answer, llvm, triple)
        if message is not None:
            findings.add(call.loc, f"intrinsic {call.intrinsic.name}: emit.{BACKEND}{message}")


# ---- the cpu: section ---------------------------------------------------------------------

def _check_target(node: YNode, answer: Answer, llvm: str, where: str,
                  findings: Findings) -> Answer | None:
    """The triple, CPU names and feature names against LLVM's answer about the triple; the
    answer when LLVM has a backend for the triple (its lists then apply), else None."""
    triple_node = node.value["triple"]
    if answer.status != "ok":
        why = "which stops LLVM" if answer.status == "aborted" else "no backend"
        findings.add(triple_node.loc, f"{where}: triple requires a target {llvm} has a "
                     f"backend for, got {triple_node.value!r} ({why}: {answer.detail})")
        return None
    checks = ((_cpu_names(node), answer.cpus, "a CPU"),
              (_feature_names(node), answer.features, "a feature"))
    for names, known, what in checks:
        if not known:  # a backend that lists nothing: nothing to check against
            continue
        for entry in names:
            # A CPU name outside its grammar is reported by the cpu: section's checks.
            if entry.name not in known and (what != "a CPU" or CPU_NAME.fullmatch(entry.name)):
                findings.add(entry.loc, f"{where}: {entry.field} requires {what} {llvm} "
                             f"knows for {answer.arch}, got {entry.name!r}"
                             f"{_did_you_mean(entry.name, known)}")
    return answer


def _cpu_names(node: YNode) -> list[_Name]:
    names = [_Name("cpu", node.value["cpu"].value, node.value["cpu"].loc)]
    tune = node.get("tune_cpus")
    if tune is not None:
        names += [_Name(f"tune_cpus[{n}]", item.value, item.loc)
                  for n, item in enumerate(tune.value)]
    return names


def _feature_names(node: YNode) -> list[_Name]:
    names = [_Name(f"features[{n}]", item.value, item.loc)
             for n, item in enumerate(node.value["features"].value)]
    emulators = node.get("emulators")
    for engine, emulator in (emulators.value.items() if emulators is not None else ()):
        names += [_Name(f"emulators.{engine}.executes[{n}]", item.value, item.loc)
                  for n, item in enumerate(emulator.value["executes"].value)]
    cpuinfo = node.get("cpuinfo")
    for feature, child in (cpuinfo.value.items() if cpuinfo is not None else ()):
        names.append(_Name(f"cpuinfo.{feature}", feature, child.key_loc or child.loc))
    return names


def _did_you_mean(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


# ---- the intrinsics' feature parameters ---------------------------------------------------

def _feature_params(intrinsics: Sequence[Intrinsic], findings: Findings) -> dict[str, str]:
    """Intrinsic name -> its ``feature`` parameter, for those that have one in LLVM's
    grammar of feature names (it joins the feature string ``+a,+b`` LLVM compiles with);
    a finding for each that does not."""
    params = {}
    for intrinsic in intrinsics:
        if BACKEND not in intrinsic.emit or intrinsic.feature is None:
            continue
        if FEATURE_NAME.fullmatch(intrinsic.feature) is None:
            findings.add(intrinsic.loc, f"intrinsic {intrinsic.name}: parameter 'feature' "
                         "requires an LLVM feature name without '+' (letters, digits, '_', "
                         f"'.', '-'), got {intrinsic.feature!r}")
            continue
        params[intrinsic.name] = intrinsic.feature
    return params


def _check_feature_params(intrinsics: Sequence[Intrinsic], params: Mapping[str, str],
                          target: Answer, llvm: str, findings: Findings) -> None:
    if not target.features:
        return
    for intrinsic in intrinsics:
        feature = params.get(intrinsic.name)
        if feature is not None and feature not in target.features:
            findings.add(intrinsic.loc, f"intrinsic {intrinsic.name}: parameter 'feature' "
                         f"requires a feature {llvm} knows for {target.arch}, got "
                         f"{feature!r}{_did_you_mean(feature, target.features)}",
                         key=f"feature {feature}")


# ---- the templates' calls -----------------------------------------------------------------

def _calls(machine: tuple[str, str, tuple[str, ...]] | None, intrinsics: Sequence[Intrinsic],
           templates: Mapping[str, YNode], feature_params: Mapping[str, str]) -> list[_Call]:
    """The call of each ``emit.llvm`` template that calls an LLVM intrinsic with types
    written out (a type left to a placeholder cannot be declared without a kernel), to be
    compiled for ``machine`` (triple, CPU, features) with the intrinsic's feature when
    given."""
    calls = []
    for intrinsic in intrinsics:
        match = _CALL.fullmatch(intrinsic.emit.get(BACKEND, ""))
        parsed = _signature(match) if match is not None else None
        if match is None or parsed is None:
            continue
        result, args = parsed
        plan = None
        if machine is not None:
            triple, cpu, features = machine
            wanted = dict.fromkeys((*features, feature_params.get(intrinsic.name, "")))
            plan = Compile(triple, cpu, ",".join(f"+{f}" for f in wanted if f))
        question = Question("call", name=match.group("name")[1:], result=result,
                            args=args, compile=plan)
        node = templates.get(intrinsic.name)
        calls.append(_Call(intrinsic, _callee_loc(node, match) if node is not None else
                           intrinsic.loc, question))
    return calls


def _signature(match: re.Match[str]) -> tuple[str, tuple[tuple[str, str | None], ...]] | None:
    """The result type (a register group ``[N x T]`` as the literal struct the code
    generator declares) and (type, literal or None for a placeholder) of each argument;
    None when a type is a placeholder."""
    result = " ".join(match.group("result").split())
    if "{" in result:
        return None
    registers = _REGISTERS.fullmatch(result)
    if registers is not None:
        lane = " ".join(registers.group("type").split())
        result = "{" + ", ".join([lane] * int(registers.group("count"))) + "}"
    args: list[tuple[str, str | None]] = []
    text = match.group("args").strip()
    for part in text.split(",") if text else ():
        arg = _ARG.fullmatch(part)
        if arg is None or "{" in arg.group("type"):
            return None
        value = arg.group("value")
        args.append((" ".join(arg.group("type").split()),
                     None if value.startswith("{") else value))
    return result, tuple(args)


def _callee_loc(node: YNode, match: re.Match[str]) -> SourceLoc | None:
    """Where the callee (``@llvm....``) is written in the file (the template's own location
    when its text is not there as written)."""
    start = match.start("name")
    return template_loc(node, TemplateError("", start, match.end("name") - start))


def _call_finding(call: _Call, answer: Answer, llvm: str, triple: str | None) -> str | None:
    """The finding about a call, after ``emit.llvm``; None when LLVM took it."""
    question = call.question
    name = f"@{question.name}"
    types = ", ".join(kind for kind, _ in question.args)
    if answer.status == "unknown":
        return (f" requires an intrinsic {llvm} defines, got {name}({types}) returning "
                f"{question.result}, which it does not (it would be called as an external "
                "function, and the kernel would crash)")
    if answer.status == "renamed" and answer.detail:
        return (f" requires the name {llvm} gives this intrinsic for its types, got {name}; "
                f"write @{answer.detail}")
    if answer.status == "renamed":
        return (f" requires an intrinsic {llvm} defines, got {name}, an older name it "
                "rewrites into other IR; call what it becomes")
    if answer.status == "refused":
        return f" requires a call {llvm} accepts, got one it refuses: {answer.detail}"
    if answer.status == "foreign":
        prefix = question.name.split(".")[1]
        return (f" calls {name}, which requires a triple of architecture "
                f"{' or '.join(ARCH_PREFIXES[prefix])}, got {triple} ({answer.detail})")
    plan = question.compile
    if answer.status == "aborted" and answer.phase == "compile" and plan is not None:
        return (f" requires a call {llvm} can compile for {plan.triple} (cpu {plan.cpu}, "
                f"{plan.features or 'no features'}), got one that stops it: {answer.detail}; "
                "an instruction needs its target features in cpu.features or in the "
                "intrinsic's 'feature' parameter")
    if answer.status == "aborted":
        return (f" requires a call {llvm} can read, got {name}({types}) returning "
                f"{question.result}, which stops it: {answer.detail}")
    return None
