"""A CPU kernel split by output rows over threads (tensorize.engine.cpu_threads,
targets.cpu.parallel): the plan, the sliced kernel, and the threaded native run, exact
against numpy for any thread count."""

import numpy as np
import pytest

import ir
from ir import te
from targets import host
from tensorize.engine.cpu_threads import GRANULE, RowSplit, plan_rows, slice_rows
from tensorize.runners.context import ContextError, make_context
from tensorize.runners.cpu import run_threaded
from tests.targets.cpu.test_operand_shift import expected, gemm, s8_inputs


def test_the_plan_gives_each_thread_whole_granules_of_rows() -> None:
    split = plan_rows(gemm(1024, 1024, 1024), 3)
    assert isinstance(split, RowSplit) and split.sliced == ("A", "C")
    assert split.parts == ((0, 352), (352, 352), (704, 320))
    assert all(start % GRANULE == 0 for start, _ in split.parts)
    assert plan_rows(gemm(1024, 1024, 1024), 2).parts == ((0, 512), (512, 512))


def test_a_small_kernel_stays_on_one_thread() -> None:
    reason = plan_rows(gemm(256, 256, 256), 2)
    assert reason == ("16,777,216 iterations over 256 rows make one part (a thread takes "
                      f"at least {GRANULE} rows and 16,777,216 iterations)")


def test_rows_that_index_more_than_a_first_dimension_are_not_split() -> None:
    # C[i, j] += A[i, k] * A[j, k] reads row i and row j of A: rows are not independent.
    a = te.placeholder((64, 64), "int8", "A")
    rk = te.reduce_axis(64, "k")
    c = te.compute((64, 64), lambda i, j: te.sum(
        ir.cast("int32", a[i, rk]) * ir.cast("int32", a[j, rk]), axis=rk), "C")
    func = te.create_prim_func([a, c], "gram")
    assert plan_rows(func, 2, min_work=1) == ("the kernel's rows index more than the first "
                                              "dimension of its parameters")


def test_a_sliced_kernel_computes_its_rows() -> None:
    func = gemm(40, 33, 17)
    split = plan_rows(func, 3, min_work=1)
    assert split.parts == ((0, 16), (16, 16), (32, 8))
    inputs = s8_inputs(40, 33, 17, seed=5)
    want = expected(inputs)
    for start, rows in split.parts:
        part = slice_rows(func, split, rows)
        assert [p.shape for p in part.params] == [(rows, 17), (17, 33), (rows, 33)]
        got = host.run(part, {"A": inputs["A"][start:start + rows], "B": inputs["B"]})["C"]
        np.testing.assert_array_equal(got, want[start:start + rows])


@pytest.mark.parametrize("threads, a_type", [
    (3, "int8"), pytest.param(2, "uint8", marks=pytest.mark.slow)])
def test_threads_run_natively_and_exactly(threads, a_type, registry) -> None:
    # 47 rows: parts of 16, 16 and 15 rows, or 32 and 15; A's rows of 17 bytes start off
    # the 64-byte alignment (copied), C's of 33 int32s too.
    ctx = make_context(registry, "x86", threads=threads)
    inputs = s8_inputs(47, 33, 17, seed=threads)
    if a_type == "uint8":
        inputs["A"] = inputs["A"].view(np.uint8)
    run, how = run_threaded(ctx, gemm(47, 33, 17, a_type=a_type), inputs, threads, runs=2,
                            min_work=1)
    if run is None:
        pytest.skip(how)
    assert how.startswith(f"{threads} threads over the rows of A, C")
    assert len(run.seconds) == len(run.cpu_seconds) == 2
    np.testing.assert_array_equal(run.outputs["C"], expected(inputs))


def test_the_context_refuses_a_thread_count_below_one(registry) -> None:
    with pytest.raises(ContextError, match="--threads requires a positive integer, got 0"):
        make_context(registry, "x86", threads=0)


@pytest.mark.parametrize("target, step", [
    ("x86", "skip threads     one thread: 19,200 iterations over 40 rows make one part"),
    ("arm", "skip threads     2 threads asked; the run on unicorn (emulated) uses one"),
])
def test_the_run_command_says_why_a_run_stays_on_one_thread(tmp_path, capsys, target, step):
    from tests.tensorize.cli.test_run_x86 import GEMM_U8S8
    from tensorize.cli import main

    path = tmp_path / "gemm.py"
    path.write_text(GEMM_U8S8)
    status = main(["run", str(path), "--target", target, "--threads", "2", "--quiet"])
    out = capsys.readouterr().out
    if "ok   run" not in out:
        pytest.skip(f"{target} does not run here")
    assert status == 0 and step in out


def test_an_emulated_run_without_threads_asked_says_nothing_of_threads(tmp_path, capsys):
    from tests.tensorize.cli.test_run_x86 import GEMM_U8S8
    from tensorize.cli import main

    path = tmp_path / "gemm.py"
    path.write_text(GEMM_U8S8.replace('"uint8"', '"int8"'))
    status = main(["run", str(path), "--target", "arm", "--quiet"])
    out = capsys.readouterr().out
    assert status == 0 and "ok   run         C on unicorn" in out
    assert "threads" not in out


def test_the_run_command_refuses_zero_threads(tmp_path, capsys) -> None:
    from tensorize.cli import main

    with pytest.raises(SystemExit):
        main(["run", str(tmp_path / "gemm.py"), "--target", "x86", "--threads", "0"])
    assert "--threads: requires a positive integer, got '0'" in capsys.readouterr().err
