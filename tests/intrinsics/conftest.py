"""Fixtures for the intrinsic-description tests: the default registry and a user family."""

import importlib.util
from pathlib import Path

import pytest

from intrinsics import ENV_VAR, Registry, default_registry

# The reference executor, which runs semantics and lowered calls; written beside this work.
needs_host = pytest.mark.skipif(importlib.util.find_spec("targets.host") is None,
                                reason="the reference executor targets.host is not there")

# A family that is not built in: an 8x8x4 int16 -> int32 MAC array with its own register
# scope, written only in YAML.
MAC_FAMILY = """\
target: mac
description: an 8x8x4 int16 MAC array
scopes:
  global: {}
  mac.reg: {capacity: 4096, dtype: [int16, int32], alignment: 16, banks: 4}
intrinsics:
  - name: mac_mma_{ty}
    kind: compute
    variants:
      - {ty: i16, acc: i32}
    iterators:
      - {name: i, extent: 8}
      - {name: j, extent: 8}
      - {name: k, extent: 4, kind: reduce}
    operands:
      - {name: A, role: input, shape: [8, 4], dtype: "{ty}", scope: mac.reg}
      - {name: B, role: input, shape: [4, 8], dtype: "{ty}", scope: mac.reg}
      - {name: C, role: accumulator, shape: [8, 8], dtype: "{acc}", scope: mac.reg}
    semantics: "C[i, j] += {acc}(A[i, k]) * {acc}(B[k, j])"
    loads: {A: mac_load_a, B: mac_load_b}
    stores: {C: mac_store_c}
    emit:
      mac: "mma {C}, {A}, {B}"
    cost: {latency: 6, interval: 2}
    reference: https://example.com/mac16/manual#mma
  - name: mac_load_{x}
    kind: load
    variants:
      - {x: a, rows: 8, cols: 4}
      - {x: b, rows: 4, cols: 8}
    iterators:
      - {name: i, extent: "{rows}"}
      - {name: j, extent: "{cols}"}
    operands:
      - {name: dst, role: output, shape: ["{rows}", "{cols}"], dtype: int16, scope: mac.reg}
      - {name: src, role: input, shape: ["{rows}", "{cols}"], dtype: int16, scope: global,
         strides: {leading_multiple_of: 8}}
    semantics: "dst[i, j] = src[i, j]"
    emit:
      mac: "ld {dst}, [{src}], stride={src.ld}"
    cost: {latency: 20, interval: 4}
    reference: https://example.com/mac16/manual#ld
  - name: mac_store_c
    kind: store
    iterators:
      - {name: i, extent: 8}
      - {name: j, extent: 8}
    operands:
      - {name: dst, role: output, shape: [8, 8], dtype: int32, scope: global}
      - {name: src, role: input, shape: [8, 8], dtype: int32, scope: mac.reg}
    semantics: "dst[i, j] = src[i, j]"
    emit:
      mac: "st [{dst}], {src}"
    cost: {latency: 20, interval: 8}
    reference: https://example.com/mac16/manual#st
"""


@pytest.fixture(scope="session")
def registry() -> Registry:
    """The built-in families (the environment variable cleared)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(ENV_VAR, raising=False)
        return default_registry()


@pytest.fixture(autouse=True)
def _no_user_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see only the families they ask for."""
    monkeypatch.delenv(ENV_VAR, raising=False)


@pytest.fixture
def mac_dir(tmp_path: Path) -> Path:
    """A directory holding the user family ``mac16.yaml``."""
    directory = tmp_path / "families"
    directory.mkdir()
    (directory / "mac16.yaml").write_text(MAC_FAMILY)
    return directory
