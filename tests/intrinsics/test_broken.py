"""Every file in tests/intrinsics/broken/ is rejected with the problem its first line names.

A file starts with ``# expect: LINE:COL: fragment`` (or ``# expect: LINE: fragment``): one of
the findings must sit at that 1-based line (and column) of that file and contain the fragment.
"""

import re
from pathlib import Path

import pytest

from intrinsics import load_family
from ir import IntrinsicSpecError

BROKEN = Path(__file__).parent / "broken"
EXPECT = re.compile(r"# expect: (\d+)(?::(\d+))?: (.+)")
# Internal names must not leak into what a vendor reads.
INTERNAL = re.compile(r"Traceback|\bintrinsics\.\w+|\bir\.\w+|YNode|\bself\b")


def _expectation(path: Path) -> tuple[int, int | None, str]:
    match = EXPECT.match(path.read_text().splitlines()[0])
    assert match is not None, f"{path.name} lacks its '# expect: LINE:COL: fragment' line"
    line, col, fragment = match.groups()
    return int(line), int(col) if col else None, fragment


@pytest.mark.parametrize("path", sorted(BROKEN.glob("*.yaml")), ids=lambda p: p.stem)
def test_broken_file_reports_its_problem(path: Path) -> None:
    line, col, fragment = _expectation(path)
    with pytest.raises(IntrinsicSpecError) as caught:
        load_family(path)
    findings = caught.value.findings
    assert findings, "the error must list its findings"
    hits = [f for f in findings if fragment in f.message]
    assert hits, f"no finding contains {fragment!r}: {[f.message for f in findings]}"
    loc = hits[0].loc
    assert loc is not None and Path(loc.file) == path
    assert loc.line == line
    if col is not None:
        assert loc.col == col
    for finding in findings:
        assert not INTERNAL.search(finding.message), finding.message


def test_the_corpus_covers_many_problems() -> None:
    assert len(list(BROKEN.glob("*.yaml"))) >= 40


def test_rendered_error_shows_file_line_source_and_caret() -> None:
    path = BROKEN / "unknown_field.yaml"
    with pytest.raises(IntrinsicSpecError) as caught:
        load_family(path)
    text = str(caught.value)
    first, source, caret = text.splitlines()[:3]
    assert first.startswith(f"{path}:14:32: ")
    assert "shap: [4, 4]" in source
    assert caret.strip() == "^" * len("shap")
    assert source.index("shap:") == caret.index("^")
