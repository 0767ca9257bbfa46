"""Phase lines: a long phase says so on a terminal's stderr, a short one and any phase off
a terminal or under --json say nothing; the library's long phases (onnxruntime's reference
run, the CUDA emulation's build and launches) go through the hook."""

from __future__ import annotations

import io
import re
import shutil
import time
from contextlib import contextmanager

import pytest

from ir.onnx import import_model
from tensorize.cli.progress import no_phases, phase_printer
from tensorize.model.reference import run_reference
from tensorize.model.runner import random_inputs
from tests.ir.onnx import models


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_a_long_phase_prints_one_line_with_its_time() -> None:
    stream = Terminal()
    with phase_printer(True, stream, after=0.02)("building resnet50"):
        time.sleep(0.2)
    line = re.fullmatch(r"building resnet50 \.\.\. (\d+\.\d) s\n", stream.getvalue())
    assert line is not None and float(line.group(1)) >= 0.2


def test_a_short_phase_prints_nothing() -> None:
    stream = Terminal()
    with phase_printer(True, stream, after=5.0)("building resnet50"):
        pass
    assert stream.getvalue() == ""


def test_no_line_off_a_terminal_or_when_disabled() -> None:
    assert phase_printer(True, io.StringIO(), after=0.0) is no_phases
    assert phase_printer(False, Terminal(), after=0.0) is no_phases


def test_a_failing_long_phase_still_ends_its_line() -> None:
    stream = Terminal()
    with pytest.raises(RuntimeError):
        with phase_printer(True, stream, after=0.02)("emulating gemm"):
            time.sleep(0.1)
            raise RuntimeError("launch failed")
    assert stream.getvalue().endswith(" s\n")


def _recorder(seen: list[str]):
    @contextmanager
    def hook(what: str):
        seen.append(what)
        yield
    return hook


def test_the_reference_run_goes_through_the_hook(tmp_path) -> None:
    graph = import_model(models.save(models.small_cnn(), tmp_path, "cnn.onnx"))
    inputs = random_inputs(graph, 0)
    seen: list[str] = []
    run_reference(graph, inputs, _recorder(seen))
    assert seen == ["onnxruntime's reference run of cnn.onnx"]


# Tensorizing, emitting and building a kernel with g++ takes seconds: the slow pass.
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="no host C++ compiler to build the emulation")
def test_the_cuda_emulation_goes_through_the_hook() -> None:
    from targets import cuda
    from tests.targets.cuda.helpers import emitted
    from tests.targets.cuda.helpers import random_inputs as kernel_inputs
    from tests.tensorize.engine.suite import suite

    kernel = emitted("gemm_int8")
    seen: list[str] = []
    cuda.emulate(kernel, kernel_inputs(suite()["gemm_int8"]), phase=_recorder(seen))
    launches = [f"emulating {launch.kernel}, asynchronous copies landing at wait"
                for launch in kernel.launches]
    assert seen == [f"building the host emulation of {kernel.name}", *launches]
