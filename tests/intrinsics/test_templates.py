"""Emit templates: placeholders parsed, checked and filled."""

import pytest

from intrinsics.templates import Placeholder, TemplateError, placeholders, render


def test_placeholders_in_order_with_attributes() -> None:
    assert placeholders("ld({dst}, {src}, {src.ld})") == [
        Placeholder("dst", None), Placeholder("src", None), Placeholder("src", "ld")]


def test_doubled_braces_are_literal() -> None:
    assert placeholders("{{ {A} }}") == [Placeholder("A", None)]
    assert render("{{ {A} }}", {"A": "x"}) == "{ x }"


@pytest.mark.parametrize("template, fragment", [
    ("mma({C)", "expected '}' before end of string"),
    ("mma({C:x})", "may not carry a format"),
    ("mma({})", "names no operand"),
])
def test_malformed_templates(template: str, fragment: str) -> None:
    with pytest.raises(TemplateError, match=fragment.replace("(", r"\(")):
        placeholders(template)
