"""Asking the installed LLVM about a CPU description, in a child process.

A ``cpu:`` section and its ``emit.llvm`` templates name things only LLVM can vouch for: a
target triple, CPU and feature names, and ``@llvm.<arch>.*`` intrinsics. LLVM cannot be
asked safely in this process: the llvmlite build runs with LLVM's assertions on, and a
declaration of a known intrinsic with an unexpected signature, or a call LLVM cannot select
an instruction for, stops the process (``abort``) with no Python exception to catch. So
:func:`ask` runs this file as a script in a child Python (``python -P llvm_probe.py``: it
imports llvmlite, never this package), hands it the questions as JSON, and reads one JSON
answer per question as the child finishes it. A question that kills the child is answered
``aborted``, with the last line LLVM printed; the child is started again for the questions
after it, a bounded number of times.

The questions (:class:`Question`):

- ``target``: is there an LLVM backend for the triple, what architecture does LLVM read in
  it, and which CPU and feature names does that backend know (the lists ``llc -mcpu=help``
  prints: LLVM prints them once per process, hence one target per child);
- ``call``: does LLVM define the intrinsic a template calls, with the template's types, and
  take the call the CPU code generator would emit; with a ``compile`` part, can it select
  instructions for it on the triple, CPU and features given.

Answers are remembered for the life of the process (the built-in families are asked about
once per command, however many registries load them).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

# The architectures (as LLVM names them once it has read a triple) whose intrinsics each
# ``@llvm.<prefix>.*`` family is: LLVM's Triple::getArchTypePrefix.
ARCH_PREFIXES = {
    "x86": ("i386", "x86_64"),
    "aarch64": ("aarch64", "aarch64_be", "aarch64_32"),
    "arm": ("arm", "armeb", "thumb", "thumbeb"),
}

# A child is started at most this many times for one set of questions: each restart follows
# a question that stopped LLVM, which is already a finding; the questions after the last
# restart go unanswered (``skipped``).
MAX_CHILDREN = 6
# Seconds one child may take for all its questions (each takes milliseconds).
TIMEOUT_S = 60


@dataclass(frozen=True)
class Compile:
    """Compile a call for ``triple`` with LLVM CPU ``cpu`` and ``features`` (``+a,+b``)."""

    triple: str
    cpu: str
    features: str


@dataclass(frozen=True)
class Question:
    """One question for LLVM. ``kind`` ``target``: about ``triple``. ``kind`` ``call``: about
    a call of ``@name`` returning ``result`` (an LLVM type, ``void``) with ``args``, each a
    (type, literal) pair whose literal is None where the template has a placeholder (the
    probe passes a parameter of that type); ``compile``, when given, also compiles it."""

    kind: str
    triple: str = ""
    name: str = ""
    result: str = ""
    args: tuple[tuple[str, str | None], ...] = ()
    compile: Compile | None = None


@dataclass(frozen=True)
class Answer:
    """What LLVM said. ``status``: ``ok``; for a target ``error`` (no backend: ``detail``);
    for a call ``unknown`` (LLVM defines no such intrinsic with these types), ``renamed``
    (LLVM reads the declaration as another intrinsic, ``detail`` its name, or an older name
    it rewrites away, ``detail`` empty), ``refused`` (LLVM's reader or verifier refuses it:
    ``detail``), ``foreign`` (an intrinsic of another architecture than the triple's,
    ``detail`` that architecture); for either ``aborted`` (LLVM stopped the process:
    ``detail`` is what it printed last, ``phase`` ``read`` or ``compile`` what it was
    doing), ``unavailable`` (no child process could be started: ``detail``) or ``skipped``
    (not asked: earlier questions stopped LLVM too often, or took too long). A
    target's answer carries ``arch`` (LLVM's name for the triple's architecture) and the
    CPU and feature names the backend knows (empty when it lists none); every answer
    LLVM gave names its version (``llvm``)."""

    status: str
    detail: str = ""
    arch: str = ""
    cpus: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    llvm: str = ""
    phase: str = ""


def ask(questions: Sequence[Question]) -> tuple[Answer, ...]:
    """One answer per question, in order (see the module docstring). At most one ``target``
    question, first."""
    return _ask(tuple(questions))


@lru_cache(maxsize=256)
def _ask(questions: tuple[Question, ...]) -> tuple[Answer, ...]:
    answers: list[Answer] = []
    children = 0
    while len(answers) < len(questions):
        if children == MAX_CHILDREN:
            answers.extend(Answer("skipped") for _ in questions[len(answers):])
            break
        children += 1
        rest = questions[len(answers):]
        got, stopped = _run_child(rest)
        answers.extend(got)
        if len(got) == len(rest):
            break
        answers.append(stopped)
        if stopped.status == "unavailable":
            answers.extend(stopped for _ in questions[len(answers):])
        elif stopped.detail.startswith("LLVM took more than"):
            # Time, unlike a crash, is not spent on one question: start no other child.
            answers.extend(Answer("skipped") for _ in questions[len(answers):])
    return tuple(answers)


def _run_child(questions: Sequence[Question]) -> tuple[list[Answer], Answer]:
    """The answers a child gave before it ended, and the answer for the question it was on
    when it ended early (``aborted``, with why and in which phase; ``unavailable`` when no
    child could be started)."""
    request = json.dumps([_encode(q) for q in questions])
    try:
        done = subprocess.run([sys.executable, "-P", os.path.abspath(__file__)],
                              input=request, capture_output=True, text=True,
                              timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return [], Answer("aborted", f"LLVM took more than {TIMEOUT_S} s")
    except OSError as err:
        return [], Answer("unavailable", f"{sys.executable} could not be started to ask "
                          f"LLVM ({err.strerror})")
    answers = []
    phase = "read"
    for line in done.stdout.splitlines():
        try:
            data = json.loads(line)
            if "phase" in data:  # the question being answered moved on to compiling
                phase = str(data["phase"])
                continue
            answers.append(_decode(data))
            phase = "read"
        except (ValueError, TypeError, KeyError):
            break
    return answers[:len(questions)], Answer("aborted", _last_words(done.stderr,
                                                                   done.returncode),
                                            phase=phase)


def _last_words(stderr: str, status: int) -> str:
    """What says why LLVM stopped: its fatal error, or the message of the assertion that
    failed (without the build's paths and function signatures), else the last line it
    printed, else the exit status."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if "LLVM ERROR" in line:
            return _short(line[line.index("LLVM ERROR"):])
        assertion = _ASSERTION.search(line)
        if assertion is not None:
            said = re.findall(r'"([^"]+)"', assertion.group(1))
            return _short(f"LLVM assertion failed: {said[-1] if said else assertion.group(1)}")
    if lines:
        return _short(lines[-1])
    return f"exit status {status}"


_ASSERTION = re.compile(r"Assertion `(.*)' failed")


def _short(text: str, limit: int = 300) -> str:
    """One line of at most ``limit`` characters (LLVM's messages can be long)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _encode(question: Question) -> dict[str, Any]:
    data: dict[str, Any] = {"kind": question.kind, "triple": question.triple,
                            "name": question.name, "result": question.result,
                            "args": [list(a) for a in question.args]}
    if question.compile is not None:
        data["compile"] = {"triple": question.compile.triple, "cpu": question.compile.cpu,
                           "features": question.compile.features}
    return data


def _decode(data: dict[str, Any]) -> Answer:
    return Answer(str(data["status"]), str(data.get("detail", "")), str(data.get("arch", "")),
                  tuple(data.get("cpus", ())), tuple(data.get("features", ())),
                  str(data.get("llvm", "")))


# ---- the child ---------------------------------------------------------------------------
# Everything below runs in the child process, which imports llvmlite and nothing of
# tensorize. Each answer is printed (one JSON line) and flushed before the next question, so
# the parent knows which question stopped LLVM.


def _serve() -> None:
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    version = ".".join(str(n) for n in llvm.llvm_version_info)
    for data in json.load(sys.stdin):
        answer = _ANSWER[data["kind"]](llvm, data)
        answer["llvm"] = version
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


def _answer_target(llvm: Any, data: dict[str, Any]) -> dict[str, Any]:
    return _target_facts(llvm, data["triple"])


_TARGETS: dict[str, dict[str, Any]] = {}


def _target_facts(llvm: Any, triple: str) -> dict[str, Any]:
    """The answer about ``triple``, worked out once per child (LLVM prints its help lists
    once per process, and a child is asked about one triple)."""
    if triple in _TARGETS:
        return _TARGETS[triple]
    try:
        target = llvm.Target.from_triple(triple)
    except RuntimeError as err:
        facts = {"status": "error", "detail": _short(str(err))}
    else:
        # LLVM prints its lists for CPU "help", on the process's standard error.
        text = _stderr_of(lambda: target.create_target_machine(cpu="help", features="", opt=0))
        cpus, features = _help_lists(text)
        facts = {"status": "ok", "arch": llvm.get_triple_parts(triple).Arch, "cpus": cpus,
                 "features": features}
    _TARGETS[triple] = facts
    return facts


def _help_lists(text: str) -> tuple[list[str], list[str]]:
    """The CPU and feature names of LLVM's help text: the first word of each indented line
    under "Available CPUs ..." and "Available features ..."."""
    lists: dict[str, list[str]] = {"cpus": [], "features": []}
    current = None
    for line in text.splitlines():
        if line.startswith("Available CPUs"):
            current = "cpus"
        elif line.startswith("Available features"):
            current = "features"
        elif line.startswith("  ") and current is not None and line.split():
            lists[current].append(line.split()[0])
        elif line.strip():
            current = None
    return lists["cpus"], lists["features"]


def _stderr_of(action: Callable[[], object]) -> str:
    """What ``action`` wrote to file descriptor 2 (where LLVM writes)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            action()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        return sink.read().decode("utf-8", "replace")


def _answer_call(llvm: Any, data: dict[str, Any]) -> dict[str, Any]:
    name, result = data["name"], data["result"]
    args = [(kind, literal) for kind, literal in data["args"]]
    # The declaration alone first: LLVM renames an overloaded intrinsic declared with
    # another mangling, rewrites an old name away, and gives a known intrinsic its
    # attributes (an unknown llvm.* name, or a known one with types it does not take, has
    # none: it would be called as an external function, and the kernel would jump to 0).
    declaration = f"declare {result} @{name}({', '.join(kind for kind, _ in args)})\n"
    try:
        module = llvm.parse_assembly(declaration)
    except RuntimeError as err:
        return {"status": "refused", "detail": _short(str(err))}
    names = [f.name for f in module.functions]
    if name not in names:
        return {"status": "renamed", "detail": names[0] if len(names) == 1 else ""}
    if not list(module.get_function(name).attributes):
        return {"status": "unknown"}
    # The call the code generator emits (LLVM upgrades a call of an older signature here,
    # and stops the process on one it cannot upgrade).
    params = ", ".join(f"{kind} %a{n}" for n, (kind, literal) in enumerate(args)
                       if literal is None)
    values = ", ".join(f"{kind} {literal if literal is not None else f'%a{n}'}"
                       for n, (kind, literal) in enumerate(args))
    returns = f"  ret {result} %r\n" if result != "void" else "  ret void\n"
    call = f"%r = call {result}" if result != "void" else f"call {result}"
    text = (declaration + f"define {result} @tensorize_probe({params}) {{\n"
            f"  {call} @{name}({values})\n{returns}}}\n")
    try:
        module = llvm.parse_assembly(text)
        module.verify()
    except RuntimeError as err:
        return {"status": "refused", "detail": _short(str(err))}
    plan = data.get("compile")
    if plan is None:
        return {"status": "ok"}
    facts = _target_facts(llvm, plan["triple"])
    if facts["status"] != "ok":
        return {"status": "ok"}  # no backend: the answer about the triple says so
    arch = facts["arch"]
    if arch not in ARCH_PREFIXES.get(name.split(".")[1], (arch,)):
        return {"status": "foreign", "detail": arch}
    features = [f[1:] for f in plan["features"].split(",") if f]
    if (facts["cpus"] and plan["cpu"] not in facts["cpus"]) or \
            (facts["features"] and not set(features) <= set(facts["features"])):
        return {"status": "ok"}  # a name LLVM ignores: the answer about the target says so
    sys.stdout.write(json.dumps({"phase": "compile"}) + "\n")
    sys.stdout.flush()
    machine = llvm.Target.from_triple(plan["triple"]).create_target_machine(
        cpu=plan["cpu"], features=plan["features"], opt=3, reloc="static", codemodel="small")
    module.triple = plan["triple"]
    module.data_layout = str(machine.target_data)
    machine.emit_object(module)
    return {"status": "ok"}


_ANSWER = {"target": _answer_target, "call": _answer_call}


if __name__ == "__main__":
    _serve()
