"""int8 x int8 on x86's VPDPBUSD (uint8 x int8) through the operand shift its YAML declares
(``accepts: {dtype: s8, bias: 128}``): the engine feeds A + 128 to the instruction and
subtracts 128 * colsum(B), exact against numpy; a family without the declaration refuses;
a bad declaration is refused at load with its line."""

from pathlib import Path

import numpy as np
import pytest

import ir
from intrinsics.registry import BUILTIN_DIR, load_registry
from ir import IntrinsicSpecError, ScheduleError, structural_equal, te
from targets import cpu, host
from tensorize.engine import auto_tensorize
from tensorize.schedule import Schedule
from tests.targets.cpu.conftest import run_here

X86 = BUILTIN_DIR / "x86.yaml"
DECLARATION = "         accepts: {dtype: s8, bias: 128},\n"


def gemm(m: int, n: int, k: int, a_type: str = "int8", b_type: str = "int8") -> ir.PrimFunc:
    """C = A @ B accumulated in int32."""
    a = te.placeholder((m, k), a_type, "A")
    b = te.placeholder((k, n), b_type, "B")
    rk = te.reduce_axis(k, "k")
    c = te.compute((m, n), lambda i, j: te.sum(
        ir.cast("int32", a[i, rk]) * ir.cast("int32", b[rk, j]), axis=rk), "C")
    return te.create_prim_func([a, b, c], "gemm")


def s8_inputs(m: int, n: int, k: int, seed: int) -> dict[str, np.ndarray]:
    """Random int8 operands with both ends of the range in each."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    a.flat[:2] = (-128, 127)
    b.flat[:2] = (127, -128)
    return {"A": a, "B": b}


def expected(inputs: dict[str, np.ndarray]) -> np.ndarray:
    """A @ B in int64, wrapped to int32 as the kernel's accumulator wraps."""
    return (inputs["A"].astype(np.int64) @ inputs["B"].astype(np.int64)).astype(np.int32)


def family_without_declaration(tmp_path: Path) -> Path:
    """x86.yaml with its ``accepts`` line removed, in a directory of its own."""
    text = X86.read_text()
    assert DECLARATION in text
    path = tmp_path / "x86.yaml"
    path.write_text(text.replace(DECLARATION, ""))
    return path


@pytest.mark.parametrize("shape", [(15, 16, 17), (17, 33, 31), *(
    pytest.param(shape, marks=pytest.mark.slow)
    for shape in ((16, 31, 33), (31, 17, 16), (33, 15, 15), (1, 16, 5)))])
def test_s8s8_runs_on_vpdpbusd_through_the_shift_exactly(shape, registry) -> None:
    m, n, k = shape
    func = gemm(m, n, k)
    result = auto_tensorize(func, "x86", registry=registry)
    (outcome,) = result.tensorized
    # A is the shifted operand: the output keeps its layout (no repacking of C).
    assert outcome.intrinsic == "x86_vpdpbusd" and "A=A_shifted B=B" in outcome.mapping
    inputs = s8_inputs(m, n, k, seed=m * n * k)
    run = run_here(cpu.emit(result.func, "x86", registry=registry), inputs)
    np.testing.assert_array_equal(run.outputs["C"], expected(inputs))


def test_the_shift_is_a_replayable_schedule_step(registry) -> None:
    result = auto_tensorize(gemm(17, 33, 15), "x86", registry=registry)
    trace = result.schedule.replay_trace()
    assert "shift_operand" in trace
    replayed = Schedule.replay(gemm(17, 33, 15), trace, registry)
    assert structural_equal(replayed.func, result.func)


@pytest.mark.parametrize("shifted, bias, dtype", [("A", 128, "uint8"), ("B", 128, "uint8"),
                                                   ("A", -100, "int16")])
def test_shift_operand_alone_preserves_the_result(shifted, bias, dtype) -> None:
    # The primitive by itself, on the host's reference executor: three blocks are added and
    # the numbers stay the same, whichever factor is shifted and by what.
    func = gemm(15, 17, 33)
    sch = Schedule(func)
    handles = sch.shift_operand(sch.get_block("C"), shifted, bias, dtype)
    assert [h.name for h in handles] == [f"{shifted}_shift", f"C_{'BA'[shifted == 'B']}_sum",
                                         "C_compensate"]
    inputs = s8_inputs(15, 17, 33, seed=4)
    np.testing.assert_array_equal(host.run(sch.func, inputs)["C"], expected(inputs))


def test_the_extremes_accumulate_exactly(registry) -> None:
    func = gemm(16, 16, 64)
    kernel = cpu.emit(auto_tensorize(func, "x86", registry=registry).func, "x86",
                      registry=registry)
    for a, b in ((-128, -128), (-128, 127), (127, -128), (127, 127)):
        inputs = {"A": np.full((16, 64), a, np.int8), "B": np.full((64, 16), b, np.int8)}
        run = run_here(kernel, inputs)
        np.testing.assert_array_equal(run.outputs["C"], np.full((16, 16), 64 * a * b))


@pytest.mark.parametrize("a_type", ["uint8", "int8"])
def test_vpdpbusd_wraps_in_int32_rather_than_saturating(a_type, registry) -> None:
    # 255 * -128 * k and 127 * -128 * k (shifted: 255 * -128 * k, less 128 * -128 * k) leave
    # the int32 range: the result wraps as the kernel's int32 accumulator does, where
    # VPDPBUSDS would saturate at -2**31.
    k = 140000
    func = gemm(1, 16, k, a_type=a_type)
    kernel = cpu.emit(auto_tensorize(func, "x86", registry=registry).func, "x86",
                      registry=registry)
    a = np.full((1, k), np.iinfo(a_type).max, a_type)
    inputs = {"A": a, "B": np.full((k, 16), -128, np.int8)}
    run = run_here(kernel, inputs)
    want = expected(inputs)
    assert int(np.iinfo(a_type).max) * -128 * k < -2 ** 31
    np.testing.assert_array_equal(run.outputs["C"], want)


def test_a_family_without_the_declaration_still_refuses_s8s8(tmp_path) -> None:
    registry = load_registry([family_without_declaration(tmp_path)])
    (outcome,) = auto_tensorize(gemm(16, 16, 16), "x86", registry=registry).blocks
    assert outcome.intrinsic is None
    assert outcome.reason == "A is int8, x86_vpdpbusd's A is uint8"


def test_s8u8_keeps_the_swapped_mapping(registry) -> None:
    # int8 x uint8 matches as it is (B the broadcast uint8 operand), so nothing is shifted.
    result = auto_tensorize(gemm(17, 16, 8, b_type="uint8"), "x86", registry=registry)
    assert "shift_operand" not in str(result.schedule.trace)
    assert [b.intrinsic for b in result.tensorized] == ["x86_vpdpbusd"]


@pytest.mark.parametrize("replacement, line_text, message", [
    ("accepts: {dtype: s8, bias: 100},", "bias: 100",
     "accepts requires int8 + bias within uint8 [0, 255], got [-28, 227] for bias 100"),
    ("accepts: {dtype: u8, bias: 0},", "dtype: u8",
     "accepts requires an integer dtype other than the operand's uint8, got uint8"),
    ("accepts: {dtype: s8},", "accepts",
     "accepts"),
])
def test_a_bad_declaration_is_refused_at_load_with_its_line(tmp_path, replacement, line_text,
                                                            message) -> None:
    path = tmp_path / "x86.yaml"
    text = X86.read_text().replace(DECLARATION.strip(), replacement)
    path.write_text(text)
    with pytest.raises(IntrinsicSpecError) as caught:
        load_registry([path])
    line = next(n for n, row in enumerate(text.splitlines(), 1)
                if replacement in row)
    rendered = str(caught.value)
    assert f"x86.yaml:{line}:" in rendered and message in rendered
    assert line_text in rendered


def test_shift_operand_refuses_a_bias_that_leaves_the_dtype() -> None:
    sch = Schedule(gemm(4, 4, 4))
    with pytest.raises(ScheduleError, match=r"A \+ 200 requires values in uint8 \[0, 255\], "
                                            r"got \[72, 327\]"):
        sch.shift_operand(sch.get_block("C"), "A", 200, "uint8")


def test_shift_operand_refuses_a_buffer_that_is_no_factor() -> None:
    sch = Schedule(gemm(4, 4, 4))
    with pytest.raises(ScheduleError, match="block 'C' requires one factor loading C, got 0"):
        sch.shift_operand(sch.get_block("C"), "C", 128, "uint8")


def test_shift_operand_refuses_a_float_accumulation() -> None:
    a = te.placeholder((4, 4), "float32", "A")
    b = te.placeholder((4, 4), "float32", "B")
    rk = te.reduce_axis(4, "k")
    c = te.compute((4, 4), lambda i, j: te.sum(a[i, rk] * b[rk, j], axis=rk), "C")
    sch = Schedule(te.create_prim_func([a, b, c], "gemm_f32"))
    with pytest.raises(ScheduleError, match="block 'C' requires each factor to be a load "
                                            "converted to float32"):
        sch.shift_operand(sch.get_block("C"), "A", 1, "float32")
