"""tensorize run --target x86, and a CPU target that exists only as YAML in a directory named
by --intrinsics-dir: tensorized, emitted, run natively, checked exactly; a kernel needing a
feature the host lacks is refused with the reason and never run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from intrinsics import default_registry
from targets.cpu.host import host_arch, missing_features
from tensorize.cli import main

GEMM_U8S8 = '''
import numpy as np
from ir import script as T


@T.prim_func
def gemm(A: T.Buffer((40, 24), "uint8"), B: T.Buffer((24, 20), "int8"),
         C: T.Buffer((40, 20), "int32")):
    for i, j, k in T.grid(40, 20, 24):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")


def reference(A, B):
    return A.astype(np.int32) @ B.astype(np.int32)
'''

# A target no Python knows: x86 with 256-bit VPDPBUSD (YMM registers), in its own family.
# {features} and {feature} choose what it needs: AVX-512 VNNI's 256-bit form (EVEX, with
# avx512vl) or AVX-VNNI's (VEX); /proc/cpuinfo names the latter avx_vnni.
YMM_FAMILY = """\
target: ymm_vnni
description: x86-64 VPDPBUSD on 256-bit registers
cpu:
  triple: x86_64-unknown-linux-gnu
  cpu: x86-64
  features: [{features}]
  detect: cpuinfo
  cpuinfo: {{avx512vnni: avx512_vnni, avxvnni: avx_vnni}}
  vector_bytes: 32
  register_scope: ymm_vnni.ymm
  reserved_registers: 2
  alignment: 32
  register_tile: {{rows: [8, 4, 2, 1], vectors: [2, 1]}}
  run: [native]
  macs: {{vpdpbusd: 32}}
scopes:
  global: {{}}
  ymm_vnni.ymm: {{capacity: 1024, alignment: 32}}
intrinsics:
  - name: ymm_vnni_dpbusd
    kind: compute
    params: {{feature: {feature}}}
    iterators:
      - {{name: i, extent: 8}}
      - {{name: k, extent: 4, kind: reduce}}
    operands:
      - {{name: A, role: input, shape: [4], dtype: u8, scope: global}}
      - {{name: B, role: input, shape: [8, 4], dtype: s8, scope: ymm_vnni.ymm}}
      - {{name: C, role: accumulator, shape: [8], dtype: s32, scope: ymm_vnni.ymm}}
    semantics: "C[i] += i32(A[k]) * i32(B[i, k])"
    loads: {{B: ymm_vnni_load_b}}
    stores: {{C: ymm_vnni_store_c}}
    fill: {{C: ymm_vnni_zero_c}}
    emit:
      llvm: "{{C}} = call <8 x i32> @llvm.x86.avx512.vpdpbusd.256(<8 x i32> {{C}}, <8 x i32> {{A}}, <8 x i32> {{B}})"
    cost: {{latency: 5, interval: 1}}
    reference: https://www.felixcloutier.com/x86/vpdpbusd
  - name: ymm_vnni_load_b
    kind: load
    iterators: [{{name: i, extent: 8}}, {{name: j, extent: 4}}]
    operands:
      - {{name: dst, role: output, shape: [8, 4], dtype: s8, scope: ymm_vnni.ymm}}
      - {{name: src, role: input, shape: [8, 4], dtype: s8, scope: global, strides: dense}}
    semantics: "dst[i, j] = src[i, j]"
    emit:
      llvm: "{{dst}} = load <32 x i8>, ptr {{src}}, align 32"
    cost: {{latency: 7, interval: 1}}
    reference: https://www.felixcloutier.com/x86/movdqa:vmovdqa32:vmovdqa64
  - name: ymm_vnni_store_c
    kind: store
    iterators: [{{name: i, extent: 8}}]
    operands:
      - {{name: dst, role: output, shape: [8], dtype: s32, scope: global, strides: dense}}
      - {{name: src, role: input, shape: [8], dtype: s32, scope: ymm_vnni.ymm}}
    semantics: "dst[i] = src[i]"
    emit:
      llvm: "store <8 x i32> {{src}}, ptr {{dst}}, align 32"
    cost: {{latency: 1, interval: 1}}
    reference: https://www.felixcloutier.com/x86/movdqa:vmovdqa32:vmovdqa64
  - name: ymm_vnni_zero_c
    kind: fill
    iterators: [{{name: i, extent: 8}}]
    operands:
      - {{name: dst, role: output, shape: [8], dtype: s32, scope: ymm_vnni.ymm}}
    semantics: "dst[i] = i32(0)"
    emit:
      llvm: "{{dst}} = bitcast <8 x i32> zeroinitializer to <8 x i32>"
    cost: {{latency: 1, interval: 1}}
    reference: https://www.felixcloutier.com/x86/pxor
"""


@pytest.fixture
def gemm(tmp_path: Path) -> str:
    path = tmp_path / "gemm.py"
    path.write_text(GEMM_U8S8)
    return str(path)


def _family(tmp_path: Path, features: str, feature: str) -> str:
    directory = tmp_path / "families"
    directory.mkdir()
    (directory / "ymm_vnni.yaml").write_text(YMM_FAMILY.format(features=features,
                                                               feature=feature))
    return str(directory)


def _host_lacks(*features: str) -> list[str]:
    if host_arch() != "x86_64":
        return list(features)
    return missing_features(default_registry().cpu("x86"), frozenset(features))


def test_x86_run_tensorizes_runs_natively_and_matches_exactly(gemm, capsys):
    if _host_lacks("avx512f", "avx512bw", "avx512vl", "avx512vnni"):
        pytest.skip("the host lacks AVX-512 VNNI")
    assert main(["run", gemm, "--target", "x86", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["blocks"][0]["intrinsic"] == "x86_vpdpbusd"
    assert report["cpu"]["engine"] == "native"
    assert report["cpu"]["runs"] == 10
    assert 0 < report["cpu"]["best_ms"] <= report["cpu"]["median_ms"]
    run = next(s for s in report["steps"] if s["step"] == "run")
    assert run["ok"] and "all 800 elements equal (exact)" in run["detail"]
    assert "best " in run["detail"] and "median " in run["detail"]


def test_emit_code_writes_the_x86_assembly(gemm, tmp_path):
    out = tmp_path / "gemm.s"
    main(["run", gemm, "--target", "x86", "--quiet", "--emit", "code", "-o", str(out)])
    assert "\tvpdpbusd\t%zmm" in out.read_text()


def test_a_cpu_target_written_only_in_yaml_runs_a_gemm(gemm, tmp_path, capsys):
    if _host_lacks("avx512vnni", "avx512vl"):
        pytest.skip("the host lacks AVX-512 VNNI with 256-bit vectors")
    families = _family(tmp_path, "avx2, avx512vl, avx512vnni", "avx512vnni")
    assert main(["run", gemm, "--target", "ymm_vnni", "--intrinsics-dir", families,
                 "--quiet", "--emit", "code", "-o", str(tmp_path / "k.s")]) == 0
    out = capsys.readouterr().out
    assert "ok   tensorize   C: ymm_vnni_dpbusd" in out
    assert "ok   run         C on native (best" in out
    assert "all 800 elements equal (exact)" in out
    assert "\tvpdpbusd\t%ymm" in (tmp_path / "k.s").read_text()


def test_a_target_needing_a_feature_the_host_lacks_is_refused_and_never_run(gemm, tmp_path,
                                                                           capsys):
    if not _host_lacks("avxvnni"):
        pytest.skip("the host has AVX-VNNI")
    families = _family(tmp_path, "avx2, avxvnni", "avxvnni")
    assert main(["run", gemm, "--target", "ymm_vnni", "--intrinsics-dir", families,
                 "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "ok   tensorize   C: ymm_vnni_dpbusd" in out
    assert "skip run         not run: native: the host CPU lacks avxvnni (found through " \
        "cpuinfo), which the code is compiled for" in out
    assert "ok   run" not in out


def test_s8s8_on_x86_runs_exactly_through_the_shifted_a(gemm, capsys):
    # x86.yaml declares that VPDPBUSD's uint8 A accepts int8 shifted by 128; a family
    # without that refuses (tests/targets/cpu/test_operand_shift.py).
    path = Path(gemm)
    path.write_text(GEMM_U8S8.replace('"uint8"', '"int8"'))
    assert main(["run", gemm, "--target", "x86", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "ok   tensorize   C: x86_vpdpbusd" in out and "A=A_shifted" in out
    assert "ok   run" in out and "(exact)" in out


def test_features_remove_the_dot_product_on_x86(gemm, capsys):
    assert main(["run", gemm, "--target", "x86", "--quiet",
                 "--features=-avx512vnni,-avx512bf16"]) == 1
    assert "no x86 intrinsic to try" in capsys.readouterr().err


def test_without_vnni_an_int8_gemm_is_told_why_the_bf16_dot_does_not_fit(gemm, capsys):
    assert main(["run", gemm, "--target", "x86", "--quiet", "--features=-avx512vnni"]) == 1
    assert "C is int32, x86_vdpbf16ps's C is float32" in capsys.readouterr().err


def test_an_undeclared_target_is_a_usage_error_naming_the_declared_ones(gemm, capsys):
    assert main(["run", gemm, "--target", "x87", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--target requires host or a target a description declares (arm, cuda, npu, x86)" \
        in err
    assert "got 'x87'; did you mean x86?" in err
