"""``tensorize intrinsics list | show | validate``, called through the CLI entry point."""

import json
from pathlib import Path

import pytest

from intrinsics.registry import BUILTIN_DIR
from tensorize.cli import main

BROKEN = Path(__file__).parent / "broken"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["intrinsics", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_list_prints_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "list")
    assert status == 0
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "TARGET", "KIND", "SHAPE", "DTYPES", "SCOPES", "LATENCY"]
    row = next(r for r in rows if r.startswith("wmma_m16n16k16_f16_f32 "))
    assert row.split() == ["wmma_m16n16k16_f16_f32", "cuda", "compute", "16x16x16",
                           "f16,f16->f32", "wmma.matrix_a,wmma.matrix_b->wmma.accumulator",
                           "32"]
    assert any(r.split()[:4] == ["arm_smmla", "arm", "compute", "2x2x8"] for r in rows)


def test_list_filters_by_target(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "list", "--target", "npu")
    assert status == 0
    targets = {line.split()[1] for line in out.splitlines()[1:]}
    assert targets == {"npu"}


def test_list_unknown_target_is_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = _run(capsys, "list", "--target", "tpu")
    assert status == 2
    assert "--target requires one of" in err


def test_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "list", "--target", "arm", "--json")
    assert status == 0
    records = {r["name"]: r for r in json.loads(out)}
    sdot = records["arm_sdot_lane"]
    assert sdot["shape"] == [4, 4]
    assert sdot["dtypes"] == {"A": "int8", "B": "int8", "C": "int32"}
    lines = (BUILTIN_DIR / "arm.yaml").read_text().splitlines()
    line = lines.index("  - name: arm_{op}_lane") + 1
    assert sdot["source"] == f"{BUILTIN_DIR / 'arm.yaml'}:{line}:11"


def test_show_prints_everything(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "show", "wmma_m16n16k16_s8_s32")
    assert status == 0
    assert out.startswith("wmma_m16n16k16_s8_s32: compute intrinsic of family cuda")
    assert f"defined at {BUILTIN_DIR / 'cuda.yaml'}:" in out
    assert "semantics: C[i, j] += s32(A[i, k]) * s32(B[k, j])" in out
    assert "cuda: nvcuda::wmma::mma_sync({C}, {A}, {B}, {C});" in out
    assert "k (reduce, 16)" in out
    assert "fill: C <- wmma_fill_m16n16k16_s32" in out
    assert "cost: latency 32 cycles, issue interval 8 cycles" in out
    assert "reference: https://docs.nvidia.com/" in out


def test_show_json(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "show", "npu_vec_clip", "--json")
    assert status == 0
    record = json.loads(out)
    assert record["semantics"] == "D[i, j] = min(max(D[i, j], lo), hi)"
    assert [o["shape"] for o in record["operands"]] == [[16, 16], [], []]
    assert record["emit"] == {"npu": "vec.clip acc[{D}], rows=16, lo={lo}, hi={hi}"}


def test_show_unknown_name_suggests(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = _run(capsys, "show", "arm_sdott")
    assert status == 2
    assert "did you mean arm_sdot" in err


def test_user_family_with_intrinsics_dir(capsys: pytest.CaptureFixture[str],
                                         mac_dir: Path) -> None:
    status, out, _ = _run(capsys, "list", "--target", "mac", "--intrinsics-dir", str(mac_dir))
    assert status == 0
    assert [line.split()[0] for line in out.splitlines()[1:]] == [
        "mac_mma_i16", "mac_load_a", "mac_load_b", "mac_store_c"]
    status, out, _ = _run(capsys, "show", "mac_mma_i16", "--intrinsics-dir", str(mac_dir))
    assert status == 0 and "i (spatial, 8), j (spatial, 8), k (reduce, 4)" in out


def test_validate_user_family(capsys: pytest.CaptureFixture[str], mac_dir: Path) -> None:
    path = mac_dir / "mac16.yaml"
    status, out, _ = _run(capsys, "validate", str(path), "--no-self-check")
    assert status == 0
    assert out.strip() == f"{path}: ok: family mac16, target mac, 4 intrinsics"


def test_validate_broken_file(capsys: pytest.CaptureFixture[str]) -> None:
    path = BROKEN / "unknown_scope.yaml"
    status, out, _ = _run(capsys, "validate", str(path))
    assert status == 2
    first, source, caret, summary = out.splitlines()
    assert first == (f"{path}:15:67: intrinsic toy_mma, operand B: unknown scope 'toy.regs'; "
                     "did you mean 'toy.reg'?")
    assert source.index("toy.regs") == caret.index("^")
    assert caret.count("^") == len("toy.regs")
    assert summary == f"{path}: 1 problem"


def test_validate_reports_clash_with_registered_names(capsys: pytest.CaptureFixture[str],
                                                      mac_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.yaml"
    copy.write_text((mac_dir / "mac16.yaml").read_text())
    status, out, _ = _run(capsys, "validate", str(copy), "--no-self-check",
                          "--intrinsics-dir", str(mac_dir))
    assert status == 2
    assert f"{copy}:7:11: duplicate intrinsic name mac_mma_i16" in out


def test_validate_json_lists_findings(capsys: pytest.CaptureFixture[str]) -> None:
    path = BROKEN / "capacity.yaml"
    status, out, _ = _run(capsys, "validate", str(path), "--json")
    assert status == 2
    report = json.loads(out)
    assert report["ok"] is False
    (record,) = report["files"]
    (finding,) = record["findings"]
    assert (finding["line"], finding["col"]) == (16, 74)
    assert "requires tiles of at most 32 bytes" in finding["message"]


def test_validate_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, out, _ = _run(capsys, "validate", str(tmp_path / "absent.yaml"))
    assert status == 2
    assert "cannot read the description" in out


def test_intrinsics_without_action_is_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = _run(capsys)
    assert status == 2
    assert "validate" in err


def test_validate_checks_the_machine_section(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    text = (BUILTIN_DIR / "npu.yaml").read_text()
    path = tmp_path / "npu_variant.yaml"
    path.write_text(text.replace("    rows: 16  ", "    rows: -4  ", 1))
    status, out, _ = _run(capsys, "validate", str(path), "--no-self-check")
    assert status == 2
    line = text.splitlines().index(next(x for x in text.splitlines() if "rows: 16  " in x)) + 1
    assert f"{path}:{line}:" in out and "machine.array.rows" in out


def test_validate_refuses_files_the_registry_would_not_load(
        capsys: pytest.CaptureFixture[str], mac_dir: Path) -> None:
    path = mac_dir / "mac16.txt"
    path.write_text((mac_dir / "mac16.yaml").read_text())
    status, out, _ = _run(capsys, "validate", str(path))
    assert status == 2
    assert f"{path}: the registry loads only *.yaml and *.yml files, got 'mac16.txt'" in out


def test_validate_exits_1_when_only_the_self_check_fails(capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    # The NPU family under other names, claiming relu clamps at 1: it loads, and the
    # simulator (running the instruction) disagrees with the semantics.
    text = (BUILTIN_DIR / "npu.yaml").read_text().replace("npu_", "npx_").replace(
        'semantics: "D[i, j] = max(D[i, j], 0)"', 'semantics: "D[i, j] = max(D[i, j], 1)"')
    path = tmp_path / "npx.yaml"
    path.write_text(text)
    status, out, _ = _run(capsys, "validate", str(path))
    assert status == 1
    assert "npx_vec_relu: simulator: mismatch: max error 1" in out
    assert out.splitlines()[-1].startswith(f"{path}: FAILED: family npx")


# Intrinsics added to the arm target whose accumulator store is written as one 128-bit scalar:
# the template grammar admits it (LLVM would store the same 16 bytes), the CPU code generator
# emits vectors only.
CPU_FLOAT_STORE = Path(__file__).resolve().parents[1] / "corpus" / "intrinsics" / \
    "runnable_cpu_template.yaml"
SMALL_GEMM = '''
from ir import script as T


@T.prim_func
def gemm(A: T.Buffer((8, 16), "int8"), B: T.Buffer((16, 8), "int8"),
         C: T.Buffer((8, 8), "int32")):
    for i, j, k in T.grid(8, 8, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")
'''


def test_validate_refuses_a_cpu_template_the_code_generator_refuses_with_its_reason(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from targets.cpu import templates
    from targets.cpu.errors import EmitError

    path = tmp_path / "armx.yaml"
    path.write_text(CPU_FLOAT_STORE.read_text())
    status, out, _ = _run(capsys, "validate", str(path))
    assert status == 2
    template = "store i128 {src}, ptr {dst}, align 4"
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1)
                if template in text)
    with pytest.raises(EmitError) as refusal:
        templates.parse("armx_st_c", template)
    assert f"{path}:{line}:" in out and refusal.value.message in out
    assert "targets." not in out and ".py" not in out
    assert out.splitlines()[-1] == f"{path}: 1 problem"


def test_run_refuses_that_cpu_template_with_the_same_reason(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "armx.yaml").write_text(CPU_FLOAT_STORE.read_text())
    kernel = tmp_path / "gemm.py"
    kernel.write_text(SMALL_GEMM)
    status = main(["run", str(kernel), "--target", "arm", "--intrinsic", "armx_sdot",
                   "--intrinsics-dir", str(tmp_path), "--quiet"])
    _, err = capsys.readouterr()
    assert status == 2
    assert "the CPU code generator requires an emit.llvm template that is a call, load, store " \
           "or zeroing bitcast of vectors (<N x iM>, <N x float>...); armx_st_c's is 'store " \
           "i128 {src}, ptr {dst}, align 4'" in err


MACHINES = Path(__file__).parents[2] / "examples" / "machines"


def test_a_machine_family_clashes_without_machine_naming_the_values(
        capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = _run(capsys, "list", "--intrinsics-dir", str(MACHINES))
    assert status == 2
    built_in = BUILTIN_DIR / "npu.yaml"
    assert f"scope npu.inp is declared differently at {built_in}" in err
    assert "(capacity 32768 there, 131072 here; alignment 16 there, 1 here; banks 2 there, " \
        "4 here)" in err


@pytest.mark.parametrize("extra", [[], ["--intrinsics-dir"]])
def test_list_with_machine_shows_its_family_instead_of_the_built_in(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: list[str]) -> None:
    machine = tmp_path / "npu32x32.yaml"
    machine.write_text((MACHINES / "npu32x32.yaml").read_text())
    dirs = [*extra, str(tmp_path)] if extra else []
    status, out, _ = _run(capsys, "list", "--target", "npu", "--machine", str(machine), *dirs)
    assert status == 0
    names = [line.split()[0] for line in out.splitlines()[1:]]
    assert "os32_gemm" in names and "npu_gemm" not in names


def test_show_with_machine_prints_that_machines_memories(
        capsys: pytest.CaptureFixture[str]) -> None:
    machine = str(MACHINES / "npu32x32.yaml")
    status, out, _ = _run(capsys, "show", "os32_gemm", "--machine", machine)
    assert status == 0
    assert "  scopes: npu.inp 131072 B, 4 banks; npu.wgt 32768 B, 2 banks; " \
        "npu.acc 262144 B, 2 banks" in out.splitlines()
    status, out, _ = _run(capsys, "show", "os32_gemm", "--machine", machine, "--json")
    assert status == 0
    assert json.loads(out)["scope_declarations"]["npu.inp"]["capacity"] == 131072


def test_show_without_machine_prints_the_built_in_memories(
        capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(capsys, "show", "npu_gemm")
    assert status == 0
    assert "  scopes: npu.inp 32768 B, 2 banks; npu.wgt 16384 B, 2 banks; " \
        "npu.acc 131072 B, 2 banks" in out.splitlines()
