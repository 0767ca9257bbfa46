"""Every malformed input in tests/corpus/ gets one clear error: exit status, message, no traceback.

See tests/corpus/README.md for the header each case carries.
"""

from __future__ import annotations

import os
import re
import resource
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tensorize.cli import main

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).parent
AREAS = ("intrinsics", "kernels", "cli")
HEADER = re.compile(rb"#\s*(corpus|args|expect|exit|isolate|env|slow):\s?(.*)")
# What must never reach a user: a traceback, or a frame of our own code.
LEAKS = re.compile(r"Traceback \(most recent call last\)|File \"[^\"]+\.py\", line \d+")
TIME_LIMIT_S = 120
MEMORY_LIMIT = 2 << 30


@dataclass
class Case:
    """One corpus file and what its header expects."""

    path: Path
    about: str = ""
    args: str = ""
    expect: list[str] = field(default_factory=list)
    exit: int = 2
    isolate: bool = False
    env: list[str] = field(default_factory=list)
    slow: bool = False


def _read_case(path: Path) -> Case:
    case = Case(path)
    for raw in path.read_bytes().splitlines():
        match = HEADER.match(raw)
        if match is None:
            break
        key, value = match.group(1).decode(), match.group(2).decode("utf-8").rstrip()
        if key == "corpus":
            case.about = value
        elif key == "args":
            case.args = value
        elif key == "expect":
            case.expect.append(value)
        elif key == "exit":
            case.exit = int(value)
        elif key == "isolate":
            case.isolate = value.lower() in ("yes", "true", "1")
        elif key == "env":
            case.env.append(value)
        elif key == "slow":
            case.slow = value.lower() in ("yes", "true", "1")
    return case


def _cases() -> list[Path]:
    return sorted(p for area in AREAS for p in (CORPUS / area).glob("*") if p.is_file())


def _params() -> list[object]:
    """Every case, those with ``slow: yes`` marked slow (left to CI's second run)."""
    return [pytest.param(p, marks=pytest.mark.slow) if _read_case(p).slow else p
            for p in _cases()]


def _fill(text: str, case: Case, tmp: Path) -> str:
    rel = case.path.relative_to(ROOT)
    return (text.replace("{file}", str(rel)).replace("{dir}", str(rel.parent))
            .replace("{tmp}", str(tmp)))


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _run_isolated(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "tensorize", *argv], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, **env},
                          timeout=TIME_LIMIT_S, preexec_fn=_limit_memory)
    return done.returncode, done.stdout + done.stderr


def _run_in_process(argv: list[str], env: dict[str, str], capsys: pytest.CaptureFixture[str],
                    monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.chdir(ROOT)
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    def too_slow(signum: int, frame: object) -> None:
        raise TimeoutError(f"tensorize {' '.join(argv)} ran past {TIME_LIMIT_S} s")

    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(TIME_LIMIT_S)
    try:
        status = main(argv)
    except SystemExit as stop:  # argparse's usage errors
        status = stop.code if isinstance(stop.code, int) else 2
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    out = capsys.readouterr()
    return status, out.out + out.err


@pytest.mark.parametrize("path", _params(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_malformed_input_gets_one_clear_error(path: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    case = _read_case(path)
    assert case.about and case.args and case.expect, \
        f"{path.name} needs '# corpus:', '# args:' and '# expect:' header lines"
    argv = shlex.split(_fill(case.args, case, tmp_path))
    env = dict(_fill(e, case, tmp_path).split("=", 1) for e in case.env)
    if case.isolate:
        status, printed = _run_isolated(argv, env)
    else:
        status, printed = _run_in_process(argv, env, capsys, monkeypatch)
    assert not LEAKS.search(printed), f"a traceback reached the user:\n{printed}"
    for fragment in case.expect:
        assert _fill(fragment, case, tmp_path) in printed, \
            f"expected {fragment!r} in what tensorize printed:\n{printed}"
    assert status == case.exit, f"exit status {status}, expected {case.exit}:\n{printed}"


def test_the_corpus_covers_every_area() -> None:
    counts = {area: len(list((CORPUS / area).glob("*"))) for area in AREAS}
    assert all(n >= 5 for n in counts.values()), counts
