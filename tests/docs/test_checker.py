"""The doc checker on hand-written pages and outputs: what it finds in markdown, and what it
reports for each kind of difference."""

from __future__ import annotations

from pathlib import Path

from tests.docs.doc_samples import blocks, check, samples

PAGE = """\
# A page

```sh
tensorize run k.py --target npu
```

```
$ tensorize run k.py --target npu --quiet
ok   simulate    npu-16x16: 77924 cycles (111.3 us at 700 MHz), 1 NPU program(s)
...
ok   emit        x86_64 through LLVM -O3: 0.03 s, 130 instructions: 16 vpdpbusd
ok   tensorize   C: arm_sdot  N=(vj) ...  (tile 8 x 2 measured best)
```

```
.venv/bin/python bench/bench_x.py
kernel      best ms
GEMM 256^3    0.078
```
"""

OUTPUT = """\
ok   round-trip  print -> parse gives a structurally equal function
ok   simulate    npu-16x16: 77924 cycles (111.3 us at 700 MHz), 1 NPU program(s)
ok   emit        x86_64 through LLVM -O3: 0.41 s, 130 instructions: 16 vpdpbusd
ok   tensorize   C: arm_sdot  N=(vj) K=(vk) outer (vi)   (tile 8 x 2 measured best)
"""


def _page(tmp_path: Path, text: str = PAGE) -> Path:
    path = tmp_path / "page.md"
    path.write_text(text)
    return path


def test_samples_are_found_after_a_prompt_and_under_a_command_line(tmp_path: Path) -> None:
    found = [s for b in blocks(_page(tmp_path)) if b.is_output() for s in samples(b)]
    assert [(s.line, s.command) for s in found] == [
        (8, "tensorize run k.py --target npu --quiet"), (16, ".venv/bin/python bench/bench_x.py")]
    assert [n for n, _ in found[0].output] == [9, 10, 11, 12]


def test_a_block_of_commands_only_is_not_output(tmp_path: Path) -> None:
    (commands, *_) = blocks(_page(tmp_path))
    assert commands.language == "sh" and not commands.is_output()


def test_matching_output_passes_whatever_the_timings_and_the_columns(tmp_path: Path) -> None:
    (sample, _) = [s for b in blocks(_page(tmp_path)) if b.is_output() for s in samples(b)]
    assert check(sample, OUTPUT.replace("npu-16x16: ", "npu-16x16:   ")) == []


def test_a_changed_count_is_reported_with_both_values(tmp_path: Path) -> None:
    (sample, _) = [s for b in blocks(_page(tmp_path)) if b.is_output() for s in samples(b)]
    findings = check(sample, OUTPUT.replace("130 instructions", "117 instructions"))
    assert [str(f) for f in findings] == ["page.md:11: documented 130 (the tool prints 117)"]


def test_a_line_the_tool_no_longer_prints_is_reported(tmp_path: Path) -> None:
    (sample, _) = [s for b in blocks(_page(tmp_path)) if b.is_output() for s in samples(b)]
    findings = check(sample, OUTPUT.replace("measured best", "from cache"))
    assert len(findings) == 1 and str(findings[0]).startswith(
        "page.md:12: the tool prints no line like this one: ok   tensorize")


def test_a_derived_figure_beside_a_count_is_compared_too(tmp_path: Path) -> None:
    (sample, _) = [s for b in blocks(_page(tmp_path)) if b.is_output() for s in samples(b)]
    findings = check(sample, OUTPUT.replace("111.3 us", "111.4 us"))
    assert [str(f) for f in findings] == ["page.md:9: documented 111.3 (the tool prints 111.4)"]
