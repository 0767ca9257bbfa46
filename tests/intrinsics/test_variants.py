"""Variant expansion: parameters substituted into every string of an entry."""

from pathlib import Path

from intrinsics import load_family
from intrinsics.source import Findings, YNode, read_yaml
from intrinsics.variants import expand, substitute_text
from tests.intrinsics.conftest import MAC_FAMILY


def test_a_lone_placeholder_takes_the_parameter_type() -> None:
    assert substitute_text("{m}", {"m": 16}) == 16
    assert substitute_text("{reset}", {"reset": True}) is True


def test_placeholders_inside_text_are_replaced() -> None:
    assert substitute_text("wmma_m{m}n{n}_{in}", {"m": 16, "n": 8, "in": "f16"}) == \
        "wmma_m16n8_f16"


def test_unknown_placeholders_stay_for_the_templates() -> None:
    assert substitute_text("mma_sync({C}, {A}) k={k}", {"k": 8}) == "mma_sync({C}, {A}) k=8"


def _entry(tmp_path: Path, text: str) -> tuple[YNode | None, Findings]:
    path = tmp_path / "f.yaml"
    path.write_text(text)
    findings = Findings(str(path))
    return read_yaml(path, findings), findings


def test_shared_params_may_refer_to_a_variants_own(tmp_path: Path) -> None:
    node, findings = _entry(tmp_path, 'name: x_{in}\nparams: {elem: "{in}"}\n'
                            'variants: [{in: f16}, {in: tf32, elem: f32}]\n'
                            'dtype: "{elem}"\n')
    expanded = expand(node, findings, "intrinsic x")
    assert [(p["elem"], n.get("name").value, n.get("dtype").value) for p, n in expanded] == [
        ("f16", "x_f16", "f16"), ("f32", "x_tf32", "f32")]
    assert expanded[0][1].get("dtype").substituted
    assert not findings


def test_an_entry_without_variants_is_itself(tmp_path: Path) -> None:
    node, findings = _entry(tmp_path, "name: plain\n")
    ((params, entry),) = expand(node, findings, "intrinsic plain")
    assert params == {} and entry is node


def test_variants_become_separate_intrinsics(tmp_path: Path) -> None:
    path = tmp_path / "mac16.yaml"
    # Without companions: the int16 loads and int32 store do not fit the int8 variant.
    text = MAC_FAMILY.replace("    loads: {A: mac_load_a, B: mac_load_b}\n", "").replace(
        "    stores: {C: mac_store_c}\n", "")
    path.write_text(text.replace("dtype: [int16, int32], ", "").replace(
        "      - {ty: i16, acc: i32}\n",
                                       "      - {ty: i16, acc: i32}\n"
                                       "      - {ty: i8, acc: i16}\n"))
    family = load_family(path)
    names = [i.name for i in family.intrinsics if i.kind == "compute"]
    assert names == ["mac_mma_i16", "mac_mma_i8"]
    small = family.intrinsics[1]
    assert [o.dtype.name for o in small.operands] == ["int8", "int8", "int16"]
    assert small.semantics_text == "C[i, j] += i16(A[i, k]) * i16(B[k, j])"
