"""The figures the docs quote, found in the markdown and checked against the tool's output.

A *sample* is a command and the output the docs show for it:

- in a fenced block, a line ``$ COMMAND`` and the lines after it (up to the next ``$`` line
  or the block's end) are one sample, and so is a block with no language whose first line
  is a command (``.venv/bin/python bench/...``, ``tensorize ...``) and whose others are not;
- an output block without a ``$`` line (a fenced block with no language whose lines are a
  run's steps, ``ok   NAME ...``) takes its command from :data:`tests.docs.commands.STATED`,
  where a page states the command in its prose (README.md: "the main job").

:func:`check` runs nothing: it compares a sample's lines with a command's output. Each
documented line must appear in the output with the same words and the same numbers, in any
column alignment; ``...`` in a documented line stands for any text, and a line that is only
``...`` for lines left out. Numbers that are timings (a number of seconds or milliseconds:
``0.03 s``, ``12.5 ms``) are measured, not determined, so only their place is checked: a
timing figure sits in a sample, beside the command that made it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```(\S*)\s*$")
# A run's step line: status, then the step's name (``ok   tensorize   C: ...``).
STEP_LINE = re.compile(r"^(ok|FAIL|skip) +[\w-]+ ")
# A command as the docs write one, without the ``$`` prompt.
COMMAND = re.compile(r"^(\.venv/bin/|tensorize |python3? |PYTHONPATH=)")
NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")
# A number (``16,777,216``, ``35.13``) and one of seconds or milliseconds: what a run
# measures rather than determines.
TIMING = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?(?= ?(?:s|ms)\b)")


@dataclass(frozen=True)
class Block:
    """A fenced block of a markdown file: its language (``""`` when none), the line of its
    first content line (1-based) and its lines."""

    path: Path
    language: str
    line: int
    lines: tuple[str, ...]

    @property
    def where(self) -> str:
        """``docs/x.md:12``: the block's first content line."""
        return f"{self.path.name}:{self.line}"

    def is_output(self) -> bool:
        """Whether the block shows what a command printed: a ``$`` line, a run's steps, or
        a first line that is a command above lines that are not."""
        if self.language not in ("", "console", "text"):
            return False
        return self.headed() or any(line.startswith("$ ") or STEP_LINE.match(line)
                                    for line in self.lines)

    def headed(self) -> bool:
        """Whether the first line is a command (without ``$``) and some other line is not."""
        return bool(self.lines) and COMMAND.match(self.lines[0]) is not None and any(
            line.strip() and not COMMAND.match(line) for line in self.lines[1:])


@dataclass(frozen=True)
class Sample:
    """A documented command and the output lines shown for it: (line number, text)."""

    path: Path
    line: int
    command: str
    output: tuple[tuple[int, str], ...]

    @property
    def where(self) -> str:
        """``x.md:12``: the line of the command (or of the block it is stated for)."""
        return f"{self.path.name}:{self.line}"


@dataclass(frozen=True)
class Finding:
    """A documented line the output does not bear out, and why."""

    path: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path.name}:{self.line}: {self.message}"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of the markdown file ``path``, in order."""
    found: list[Block] = []
    language: str | None = None
    start, body = 0, []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        fence = FENCE.match(line)
        if language is None and fence:
            language, start, body = fence.group(1), number + 1, []
        elif language is not None and line.strip() == "```":
            found.append(Block(path, language, start, tuple(body)))
            language = None
        elif language is not None:
            body.append(line)
    return found


def samples(block: Block, stated: str | None = None) -> list[Sample]:
    """The samples of an output block: one per ``$`` line, or the whole block as the output
    of ``stated`` (the command its page states) when it has none."""
    numbered = list(enumerate(block.lines, start=block.line))
    if block.headed() and not any(text.startswith("$ ") for _, text in numbered):
        numbered[0] = (block.line, "$ " + block.lines[0])
    if not any(text.startswith("$ ") for _, text in numbered):
        if stated is None:
            return []
        return [Sample(block.path, block.line, stated, tuple(numbered))]
    found: list[Sample] = []
    for index, (number, text) in enumerate(numbered):
        if not text.startswith("$ "):
            continue
        rest = numbered[index + 1:]
        end = next((i for i, (_, t) in enumerate(rest) if t.startswith("$ ")), len(rest))
        found.append(Sample(block.path, number, text[2:].strip(), tuple(rest[:end])))
    return found


def _pattern(line: str) -> re.Pattern[str]:
    """A documented line as a pattern over output lines: its words literal, each number a
    group, runs of spaces any spacing, ``...`` any text."""
    parts = []
    for piece in re.split(r"(\.\.\.|\s+|\d+(?:,\d{3})*(?:\.\d+)?)", line.strip()):
        if not piece:
            continue
        if piece == "...":
            parts.append(".*?")
        elif piece.isspace():
            parts.append(r"\s+")
        elif NUMBER.fullmatch(piece):
            parts.append(r"(\d+(?:,\d{3})*(?:\.\d+)?)")
        else:
            parts.append(re.escape(piece))
    return re.compile("".join(parts))


def _timing_positions(line: str) -> set[int]:
    """Which of the line's numbers (by order) are timings."""
    starts = {m.start() for m in TIMING.finditer(line)}
    return {i for i, m in enumerate(NUMBER.finditer(line)) if m.start() in starts}


def _check_line(number: int, text: str, output: list[str], path: Path) -> Finding | None:
    pattern = _pattern(text)
    documented = NUMBER.findall(text.replace("...", " "))
    timings = _timing_positions(text)
    printed = [m.groups() for m in map(pattern.fullmatch, output) if m is not None]
    if not printed:
        return Finding(path, number, f"the tool prints no line like this one: {text.strip()}")
    for groups in printed:
        if all(i in timings or got == want
               for i, (got, want) in enumerate(zip(groups, documented))):
            return None
    # The printed line nearest the documented one: the most numbers in common.
    groups = max(printed, key=lambda g: sum(a == b for a, b in zip(g, documented)))
    differences = [f"{want} (the tool prints {got})"
                   for i, (got, want) in enumerate(zip(groups, documented))
                   if i not in timings and got != want]
    return Finding(path, number, "documented " + ", ".join(differences))


def check(sample: Sample, output: str) -> list[Finding]:
    """Every documented line of ``sample`` that ``output`` does not bear out."""
    printed = [line.strip() for line in output.splitlines() if line.strip()]
    findings = []
    for number, text in sample.output:
        if not text.strip() or text.strip() == "...":
            continue
        finding = _check_line(number, text, printed, sample.path)
        if finding is not None:
            findings.append(finding)
    return findings
