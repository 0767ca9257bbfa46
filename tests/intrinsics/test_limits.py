"""The bounds on a description's size (intrinsics.limits): each refused at its line, quickly."""

import time
from pathlib import Path

import numpy as np
import pytest

from intrinsics import default_registry, limits, load_family
from intrinsics.selfcheck import random_inputs
from ir import IntrinsicSpecError
from tests.intrinsics.conftest import MAC_FAMILY

BROKEN = Path(__file__).parent / "broken"


def _findings(path: Path) -> list[tuple[int | None, str]]:
    with pytest.raises(IntrinsicSpecError) as caught:
        load_family(path)
    return [(f.loc.line if f.loc is not None else None, f.message)
            for f in caught.value.findings]


def test_a_document_past_the_byte_limit_is_not_parsed(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    padding = "#" + "x" * 99 + "\n"
    path.write_text(MAC_FAMILY + padding * (limits.MAX_DOCUMENT_BYTES // len(padding)))
    assert path.stat().st_size > limits.MAX_DOCUMENT_BYTES
    assert _findings(path) == [(1, f"a description requires at most "
                                   f"{limits.MAX_DOCUMENT_BYTES} bytes, got more; split the "
                                   "family")]


def test_bytes_that_are_not_utf8_are_found_at_their_line(tmp_path: Path) -> None:
    path = tmp_path / "latin.yaml"
    path.write_bytes(MAC_FAMILY.replace("an 8x8x4", "an \xe9 8x8x4").encode("latin-1"))
    assert _findings(path) == [(2, "cannot read the description: it requires UTF-8 text, "
                                   "got byte 0xe9")]


def test_an_alias_bomb_in_the_search_path_fails_fast(tmp_path: Path) -> None:
    # What every command that loads the registry does with a user directory holding one.
    (tmp_path / "bomb.yaml").write_text((BROKEN / "alias_bomb.yaml").read_text())
    start = time.perf_counter()
    with pytest.raises(IntrinsicSpecError, match="at most 50000 nodes once its aliases"):
        default_registry([tmp_path])
    assert time.perf_counter() - start < 5


def _entry_with(variants: int, params: int) -> str:
    """The MAC family whose load entry has ``variants`` parameter sets and ``params`` shared
    parameters."""
    sets = "".join(f"      - {{x: v{n}, rows: 8, cols: 4}}\n" for n in range(variants))
    shared = ", ".join(f"p{n}: {n}" for n in range(params))
    return MAC_FAMILY.replace(
        "    variants:\n      - {x: a, rows: 8, cols: 4}\n      - {x: b, rows: 4, cols: 8}\n",
        f"    params: {{{shared}}}\n    variants:\n{sets}")


def test_too_many_variants_are_refused_at_the_entry(tmp_path: Path) -> None:
    path = tmp_path / "many.yaml"
    path.write_text(_entry_with(limits.MAX_INTRINSICS, 1))  # mac_mma_i16 comes first
    line = path.read_text().splitlines().index("    variants:", 20) + 1
    assert (line, f"intrinsic mac_load_{{x}}: a family requires at most "
                  f"{limits.MAX_INTRINSICS} intrinsics, got more with this entry's "
                  f"{limits.MAX_INTRINSICS} variants") in _findings(path)


def test_variants_of_a_big_entry_are_refused_before_they_are_copied(tmp_path: Path) -> None:
    path = tmp_path / "wide.yaml"
    path.write_text(_entry_with(300, 500))
    line = path.read_text().splitlines().index("    variants:", 20) + 1
    wanted = (f"intrinsic mac_load_{{x}}: a family requires at most {limits.MAX_VARIANT_NODES} "
              "nodes once its variants are expanded, got more with this entry's 300 copies of ")
    assert any(at == line and message.startswith(wanted) for at, message in _findings(path))


def test_a_family_whose_self_check_would_run_too_long_is_refused(tmp_path: Path) -> None:
    # 128 x 128 x 64 is exactly MAX_ITERATIONS points; 17 of them exceed the family bound.
    count = limits.MAX_FAMILY_ITERATIONS // limits.MAX_ITERATIONS + 1
    sets = "".join(f"      - {{n: {n}}}\n" for n in range(count))
    path = tmp_path / "long.yaml"
    path.write_text(f"""\
target: mac
scopes:
  mac.reg: {{}}
intrinsics:
  - name: mac_big_{{n}}
    kind: compute
    variants:
{sets}    iterators:
      - {{name: i, extent: 128}}
      - {{name: j, extent: 128}}
      - {{name: k, extent: 64, kind: reduce}}
    operands:
      - {{name: A, role: input, shape: [128, 64], dtype: int8, scope: mac.reg}}
      - {{name: B, role: input, shape: [64, 128], dtype: int8, scope: mac.reg}}
      - {{name: C, role: accumulator, shape: [128, 128], dtype: int32, scope: mac.reg}}
    semantics: "C[i, j] += i32(A[i, k]) * i32(B[k, j])"
    emit:
      mac: "mma {{C}}, {{A}}, {{B}}"
    cost: {{latency: 6, interval: 2}}
    reference: https://example.com/mac/manual#mma
""")
    assert 128 * 128 * 64 == limits.MAX_ITERATIONS
    ((_, message),) = _findings(path)
    assert message.startswith(f"intrinsic mac_big_{count - 1}: a family requires its compute "
                              f"intrinsics to have at most {limits.MAX_FAMILY_ITERATIONS} "
                              "iteration points in all")


def test_inputs_span_a_float_range_as_wide_as_float64(tmp_path: Path) -> None:
    path = tmp_path / "wide_range.yaml"
    path.write_text("""\
target: mac
scopes:
  mac.reg: {}
intrinsics:
  - name: mac_move_f64
    kind: compute
    iterators: [{name: i, extent: 64}]
    operands:
      - {name: A, role: input, shape: [64], dtype: f64, scope: mac.reg,
         range: [-1.0e+308, 1.0e+308]}
      - {name: C, role: output, shape: [64], dtype: f64, scope: mac.reg}
    semantics: "C[i] = A[i]"
    emit: {mac: "mov {C}, {A}"}
    cost: {latency: 1, interval: 1}
    reference: https://example.com/mac/manual#mov
""")
    values = random_inputs(load_family(path).intrinsics[0], np.random.default_rng(0))["A"]
    assert np.isfinite(values).all() and np.abs(values).max() <= 1.0e308
    assert values.min() < -1.0e306 and values.max() > 1.0e306
