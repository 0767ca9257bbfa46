"""The annotated example of docs/intrinsics.md is a valid family, as the page says."""

import re
from pathlib import Path

from intrinsics import load_family

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
