"""Reading sweep descriptions: what they describe, and every kind of mistake reported at
its file, line and field."""

from __future__ import annotations

import pytest

from tensorize.sweep import SweepSpecError, load_sweep
from tests.tensorize.sweep.conftest import MACHINES, SMALL


def test_a_sweep_reads_its_base_grid_constraints_and_workloads(write_sweep):
    sweep = load_sweep(write_sweep(f"""\
base: {MACHINES / "npu8x64.yaml"}
family: base
vary:
  array.rows: [8, 16]
  dram.bytes_per_cycle: {{from: 8, to: 20, step: 4}}
  inp.rows: {{from: 1024, to: 8192, times: 2}}
constraints: ["npu.inp bytes <= 64 KiB"]
workloads:
  - kernel: {MACHINES.parent / "script" / "gemm_odd.py"}
  - layers: [{{gemm: {{m: 8, n: 8, k: 8}}}}]
"""))
    assert sweep.base == MACHINES / "npu8x64.yaml" and sweep.family == "base"
    assert sweep.base_machine["array"]["cols"] == 64
    assert "intrinsics" in sweep.base_extra
    assert sweep.vary == {"array.rows": (8, 16), "dram.bytes_per_cycle": (8, 12, 16, 20),
                          "inp.rows": (1024, 2048, 4096, 8192)}
    assert [w.name for w in sweep.workloads] == ["gemm_odd", "gemm_8x8x8"]
    assert sweep.heatmap == ("array.rows", "dram.bytes_per_cycle")
    assert sweep.name == "sweep" and sweep.target == "npu"


def _error(write_sweep, text: str) -> SweepSpecError:
    path = write_sweep(text)
    with pytest.raises(SweepSpecError) as info:
        load_sweep(path)
    message = str(info.value)
    assert "Traceback" not in message and "tensorize.sweep" not in message
    assert all(f.loc is not None for f in info.value.findings)
    return info.value


# Each mistake: the sweep text, the message fragment, and its line and column.
MISTAKES = [
    (SMALL + "varry: {}\n", "unknown field 'varry'; a sweep has", 11, 1),
    (SMALL.replace("array.cols: [8]", "array.col: [8]"),
     "vary.array.col requires a field of the machine: section", 6, 3),
    (SMALL.replace("array.cols: [8]", "array.cols: [8, fast]"),
     "vary.array.cols requires values like the base machine's 32, got 'fast'", 6, 19),
    (SMALL.replace("array.cols: [8]", "array.cols: {from: 16, to: 8, step: 4}"),
     "requires from <= to", 6, 15),
    (SMALL.replace("array.cols: [8]", "array.cols: {from: 8, to: 16, step: 0.5}"),
     "vary.array.cols.step requires a whole number", 6, 33),
    (SMALL.replace("array.cols: [8]", "array.cols: {from: 8, upto: 16}"),
     "requires a grid of from, to and step (or times)", 6, 15),
    (SMALL.replace("array.cols: [8]", "array.dataflow: {from: 1, to: 2, step: 1}"),
     "vary.array.dataflow requires a list", 6, 19),
    (SMALL + "constraints: ['pes <= 1 KiB', 'npu.sram bytes <= flops']\n",
     "requires a machine field or a derived quantity", 11, 50),
    (SMALL + "constraints: [pes <=]\n", "requires a value here, got the end", 11, 21),
    (SMALL.replace("target: npu", "target: cuda"), "target requires npu", 2, 1),
    (SMALL.replace("name: g, gemm: {m: 32", "name: g, gemm: {m: -1"),
     "layers[].gemm.m requires an integer from 1 to 65536, got -1", 9, 26),
    (SMALL.replace("kernel: 3", "kernel: 9"), "requires at most the input's height", 10, 79),
    (SMALL.replace("  - layers:", "  - model: resnet50.onnx\n  - layers:"),
     "workloads[].model: ", 8, 12),
    (SMALL.replace("  - layers:", "  - model: resnet50.onnx\n    layers:"),
     "a model's layers are chosen with select: (op, window, name)", 8, 5),
    (SMALL.replace("  - layers:", "  - kernel: missing.py\n  - layers:"),
     "workloads[].kernel", 8, 13),
    (SMALL.replace("name: c,", "name: g,"), "workloads require distinct names, got 'g'", 8, 5),
    (SMALL.split("workloads:")[0], "workloads requires a list of entries", 1, 1),
    (SMALL + "plots: {heatmap: [array.rows, array.rows]}\n",
     "plots.heatmap requires two different varied fields", 11, 18),
    (SMALL + "family: borrowed\n", "family requires one of generated, base", 11, 1),
    (SMALL.replace("array.cols: [8]", "array.cols: [8]\n  array.rows: [4"),
     "invalid YAML", 8, 10),
    ("", "the sweep description is empty", 1, 1),
    (SMALL.replace("name: small", "name: ../up"), "name requires letters, digits", 1, 1),
]


@pytest.mark.parametrize(("text", "fragment", "line", "col"), MISTAKES,
                         ids=[m[1][:40] for m in MISTAKES])
def test_a_mistake_is_reported_at_its_file_line_and_field(write_sweep, text, fragment, line,
                                                          col):
    error = _error(write_sweep, text)
    found = [f for f in error.findings if fragment in f.message]
    assert found, str(error)
    assert (found[0].loc.line, found[0].loc.col) == (line, col), str(error)


def test_a_bad_base_machine_is_reported_in_its_own_file(write_sweep, tmp_path):
    base = tmp_path / "machine.yaml"
    base.write_text((MACHINES / "npu32x32.yaml").read_text().replace(
        "dataflow: output_stationary", "dataflow: diagonal"))
    error = _error(write_sweep, SMALL.replace(str(MACHINES / "npu32x32.yaml"), str(base)))
    assert "base requires a valid machine file" in error.findings[-1].message
    assert error.findings[-1].loc.file.endswith("sweep.yaml")
    (problem,) = [f for f in error.findings if f.loc.file == str(base)]
    assert "machine.array.dataflow requires one of" in problem.message
    assert (problem.loc.line, problem.loc.col) == (11, 15)


def test_every_finding_of_a_file_is_reported_at_once(write_sweep):
    error = _error(write_sweep, SMALL.replace("array.cols: [8]", "array.col: [8]")
                   + "colour: red\n")
    assert len(error.findings) == 2
    assert str(error).count("sweep.yaml:") == 2


def _mm_file(directory, name: str, m: int):
    """A kernel file in its own directory whose function is ``mm``, an m x 8 x 8 GEMM."""
    directory.mkdir()
    path = directory / name
    path.write_text(f'''\
from ir import script as T


@T.prim_func
def mm(A: T.Buffer(({m}, 8), "int8"), B: T.Buffer((8, 8), "int8"),
       C: T.Buffer(({m}, 8), "int32")):
    for i, j, k in T.grid({m}, 8, 8):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] += T.cast(A[vi, vk], "int32") * T.cast(B[vk, vj], "int32")
''')
    return path


def _two_mm_sweep(tmp_path, names: tuple[str, str] | None) -> str:
    first = _mm_file(tmp_path / "a", "mm.py", 16)
    second = _mm_file(tmp_path / "b", "mm.py", 32)
    lines = [f"  - kernel: {first}", f"  - kernel: {second}"]
    if names is not None:
        lines = [f"{line}\n    name: {name}" for line, name in zip(lines, names)]
    return SMALL.split("workloads:")[0] + "workloads:\n" + "\n".join(lines) + "\n"


def test_two_kernel_files_defining_one_function_are_told_apart_by_name(write_sweep,
                                                                       tmp_path):
    sweep = load_sweep(write_sweep(_two_mm_sweep(tmp_path, ("mm_small", "mm_tall"))))
    assert [w.name for w in sweep.workloads] == ["mm_small", "mm_tall"]
    small, tall = (w.build() for w in sweep.workloads)
    assert small.name == tall.name == "mm"
    assert [tuple(b.shape) for b in small.params] == [(16, 8), (8, 8), (16, 8)]
    assert [tuple(b.shape) for b in tall.params] == [(32, 8), (8, 8), (32, 8)]
    assert sweep.workloads[0].identity() != sweep.workloads[1].identity()


def test_two_unnamed_kernels_of_one_name_clash_at_the_second_entry(write_sweep, tmp_path):
    path = write_sweep(_two_mm_sweep(tmp_path, None))
    error = _error(write_sweep, path.read_text())
    (clash,) = [f for f in error.findings if "distinct names" in f.message]
    assert (clash.loc.line, clash.loc.col) == (9, 5)
    assert f"got 'mm' here and at {path}:8:5" in clash.message
    assert "give the kernel entry a name:" in clash.message


def test_a_kernel_name_must_be_a_plain_word(write_sweep, tmp_path):
    text = _two_mm_sweep(tmp_path, ("mm_small", "'two words'"))
    error = _error(write_sweep, text)
    (bad,) = [f for f in error.findings if "workloads[].name" in f.message]
    assert "requires letters, digits, '.', '-' or '_', got 'two words'" in bad.message
    assert (bad.loc.line, bad.loc.col) == (11, 11)
