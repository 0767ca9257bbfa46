"""Every command output quoted in README.md and docs/*.md, run and compared with what the
tool prints now: deterministic figures exactly, timings by their place (tests/docs/
doc_samples.py says how). A stale figure fails here, naming its file and line."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.commands import DEFAULT, NOT_OUTPUT, NOT_RUN, SLOW, STATED
from tests.docs.doc_samples import Block, Sample, blocks, check, samples

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# What the documented commands read, by their repository-relative paths.
LINKED = ("examples", "intrinsics", "bench")
TIMEOUT_S = 300


def _key(block: Block) -> tuple[str, str]:
    return block.path.name, block.lines[0]


def _output_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page) if b.is_output()]


def _samples() -> list[Sample]:
    return [s for b in _output_blocks() if _key(b) not in NOT_OUTPUT
            for s in samples(b, STATED.get(_key(b)))]


def _argv(command: str) -> list[str]:
    """The command as the docs write it, run with this interpreter and its package."""
    words = shlex.split(command)
    if words[0] in ("tensorize", ".venv/bin/tensorize"):
        return [sys.executable, "-m", "tensorize", *words[1:]]
    if words[0] in ("python", "python3", ".venv/bin/python"):
        return [sys.executable, *words[1:]]
    raise ValueError(f"the doc tests run tensorize and python commands, got {command!r}")


_OUTPUTS: dict[str, str] = {}


def _output(command: str, scratch: Path) -> str:
    """What ``command`` prints (stdout and stderr), run once per session in a scratch
    directory that links to the repository's inputs, with its own home and tile cache (so
    no earlier run's cache changes what it prints)."""
    if command not in _OUTPUTS:
        for name in LINKED:
            if not (scratch / name).exists():
                (scratch / name).symlink_to(REPO / name)
        env = {**os.environ, "HOME": str(scratch), "TENSORIZE_CACHE_DIR": str(scratch / "cache"),
               "PYTHONPATH": str(REPO)}
        done = subprocess.run(_argv(command), cwd=scratch, env=env, capture_output=True,
                              text=True, timeout=TIMEOUT_S)
        _OUTPUTS[command] = done.stdout + done.stderr
    return _OUTPUTS[command]


@pytest.fixture(scope="session")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory the documented commands run in."""
    return tmp_path_factory.mktemp("doc-commands")


def _param(sample: Sample):
    command = sample.command
    if command in DEFAULT:
        return pytest.param(sample, id=sample.where)
    if command in SLOW:
        missing = [tool for tool in SLOW[command] if shutil.which(tool) is None]
        marks = [pytest.mark.slow]
        if missing:
            marks.append(pytest.mark.skip(reason=f"needs {', '.join(missing)} on PATH"))
        return pytest.param(sample, id=sample.where, marks=marks)
    reason = NOT_RUN.get(command, f"unclassified command {command!r}: add it to "
                                  "tests/docs/commands.py")
    return pytest.param(sample, id=sample.where, marks=pytest.mark.skip(reason=reason))


@pytest.mark.parametrize("sample", [_param(s) for s in _samples()])
def test_the_documented_output_is_what_the_tool_prints(sample: Sample, scratch: Path) -> None:
    findings = check(sample, _output(sample.command, scratch))
    assert not findings, "stale figures (run `" + sample.command + "` and copy its " \
        "output):\n" + "\n".join(map(str, findings))


def test_every_output_block_and_command_is_classified() -> None:
    unclassified = []
    for block in _output_blocks():
        if _key(block) in NOT_OUTPUT:
            continue
        found = samples(block, STATED.get(_key(block)))
        if not found:
            unclassified.append(f"{block.where}: output with no command (add it to STATED "
                                "or NOT_OUTPUT in tests/docs/commands.py)")
        unclassified += [f"{s.where}: command {s.command!r} is in none of DEFAULT, SLOW, "
                         "NOT_RUN" for s in found
                         if s.command not in DEFAULT | SLOW.keys() | NOT_RUN.keys()]
    assert not unclassified, "\n".join(unclassified)


def test_every_table_entry_names_a_block_or_command_of_the_docs() -> None:
    keys = {_key(b) for b in _output_blocks()}
    commands = {s.command for s in _samples()}
    stale = [f"block {key}" for key in (*STATED, *NOT_OUTPUT) if key not in keys]
    stale += [f"command {c!r}" for c in (*DEFAULT, *SLOW, *NOT_RUN) if c not in commands]
    assert not stale, "entries of tests/docs/commands.py that no doc has:\n" + "\n".join(stale)


def test_an_edited_figure_in_a_page_is_reported_at_its_line(tmp_path: Path,
                                                            scratch: Path) -> None:
    page = REPO / "docs" / "intrinsics.md"
    text = page.read_text()
    (sample,) = [s for b in blocks(page) if b.is_output() for s in samples(b)]
    line, documented = next((n, t) for n, t in sample.output if " cycles (" in t)
    cycles = documented.split(" cycles (")[0].split()[-1]
    edited = tmp_path / "intrinsics.md"
    lines = text.splitlines()
    lines[line - 1] = documented.replace(f" {cycles} cycles (", f" {int(cycles) + 1} cycles (")
    edited.write_text("\n".join(lines) + "\n")
    (changed,) = [s for b in blocks(edited) if b.is_output() for s in samples(b)]
    output = _output(sample.command, scratch)
    before = {str(f) for f in check(sample, output)}
    after = {str(f) for f in check(changed, output)}
    (new,) = after - before
    assert new.startswith(f"intrinsics.md:{line}: documented {int(cycles) + 1} ")
