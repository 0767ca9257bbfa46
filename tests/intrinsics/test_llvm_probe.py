"""The child process that asks the installed LLVM (intrinsics.llvm_probe): what it knows of a
triple, and calls that stop LLVM answered without stopping this process."""

from collections.abc import Iterator

import pytest

from intrinsics import llvm_probe
from intrinsics.llvm_probe import Compile, Question, ask

X86 = "x86_64-unknown-linux-gnu"
VNNI = Question("call", name="llvm.x86.avx512.vpdpbusd.512", result="<16 x i32>",
                args=(("<16 x i32>", None),) * 3)
# LLVM's reader upgrades calls of this old SSE4.1 name, and asserts on a declaration without
# the arguments it expects: the process would abort.
STOPS_LLVM = Question("call", name="llvm.x86.sse41.ptestc", result="i32")


@pytest.fixture(autouse=True)
def _fresh_answers() -> Iterator[None]:
    """Each test asks LLVM itself (answers are remembered for the life of the process)."""
    llvm_probe._ask.cache_clear()
    yield
    llvm_probe._ask.cache_clear()


def test_a_triple_is_answered_with_llvms_architecture_and_names() -> None:
    (answer,) = ask([Question("target", triple=X86)])
    assert (answer.status, answer.arch) == ("ok", "x86_64")
    assert {"x86-64", "skylake-avx512", "arrowlake_s"} <= set(answer.cpus)
    assert {"avx512vnni", "amx-int8", "sse4.1"} <= set(answer.features)
    assert answer.llvm.count(".") == 2


def test_a_triple_without_a_backend_is_answered_with_llvms_reason() -> None:
    (answer,) = ask([Question("target", triple="z80-unknown-linux-gnu")])
    assert answer.status == "error"
    assert "No available targets are compatible" in answer.detail


def test_a_question_that_stops_llvm_is_answered_and_the_next_still_asked() -> None:
    stopped, after = ask([STOPS_LLVM, VNNI])
    assert (stopped.status, stopped.phase) == ("aborted", "read")
    assert stopped.detail == "LLVM assertion failed: getParamType() out of range!"
    assert after.status == "ok"


def test_a_call_llvm_cannot_select_stops_it_while_compiling() -> None:
    plan = Compile(X86, "x86-64", "+avx2")
    (answer,) = ask([Question("call", name=VNNI.name, result=VNNI.result, args=VNNI.args,
                              compile=plan)])
    assert (answer.status, answer.phase) == ("aborted", "compile")
    assert answer.detail.startswith("LLVM ERROR: ")


def test_children_are_started_a_bounded_number_of_times(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llvm_probe, "MAX_CHILDREN", 1)
    answers = ask([STOPS_LLVM, VNNI, VNNI])
    assert [a.status for a in answers] == ["aborted", "skipped", "skipped"]


def test_a_child_that_runs_too_long_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llvm_probe, "TIMEOUT_S", 0.001)
    monkeypatch.setattr(llvm_probe, "MAX_CHILDREN", 1)
    (answer,) = ask([VNNI])
    assert answer.status == "aborted"
    assert answer.detail == "LLVM took more than 0.001 s"


def test_no_python_to_ask_with_answers_every_question_unavailable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llvm_probe.sys, "executable", "/nonexistent/python")
    answers = ask([Question("target", triple=X86), VNNI])
    assert [a.status for a in answers] == ["unavailable", "unavailable"]
    assert answers[0].detail.startswith("/nonexistent/python could not be started to ask LLVM")
