"""The annotated example of docs/intrinsics.md is a valid family, as the page says."""

import re
from pathlib import Path

from intrinsics import limits, load_family

DOC = Path(__file__).parents[2] / "docs" / "intrinsics.md"


def test_the_documented_example_loads(tmp_path: Path) -> None:
    example = re.search(r"```yaml\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert example is not None
    path = tmp_path / "mac16.yaml"
    path.write_text(example.group(1))
    family = load_family(path)
    assert [i.name for i in family.intrinsics] == [
        "mac_mma_i16", "mac_load_a", "mac_load_b", "mac_store_c", "mac_zero_c"]
    mma = family.intrinsics[0]
    assert mma.extents == (8, 8, 4)
    assert mma.render("mac", {"A": "r0", "B": "r1", "C": "r2"}) == "mma r2, r0, r1"


def test_the_documented_limits_are_the_codes() -> None:
    table = r"^  \| ([a-z ]+) \| ([\d,]+)(?: KiB| levels)? \|"
    rows = dict(re.findall(table, DOC.read_text(), re.M))
    assert {name: int(value.replace(",", "")) for name, value in rows.items()} == {
        "document size": limits.MAX_DOCUMENT_BYTES // 1024,
        "nodes once aliases are expanded": limits.MAX_NODES,
        "nesting depth": limits.MAX_DEPTH,
        "nodes once variants are expanded": limits.MAX_VARIANT_NODES,
        "intrinsics per family": limits.MAX_INTRINSICS,
        "characters of a semantics statement": limits.MAX_SEMANTICS_CHARS,
        "nesting of a semantics statement": limits.MAX_SEMANTICS_DEPTH,
        "elements per operand tile": limits.MAX_OPERAND_ELEMENTS,
        "iteration points per intrinsic": limits.MAX_ITERATIONS,
        "iteration points per family": limits.MAX_FAMILY_ITERATIONS,
    }
