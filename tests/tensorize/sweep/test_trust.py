"""What a sweep's workers read: only the task they are handed. No file is executed or
simulated because of where it lies (docs/trust.md)."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile

import pytest

from ir import assert_structural_equal
from tensorize.kernel_file import read_kernel_file
from tensorize.sweep import load_sweep, run_point
from tensorize.sweep import task as task_module
from tensorize.sweep.points import expand
from tensorize.sweep.task import machine_file
from tensorize.sweep.workloads import kernel_workload
from tests.tensorize.cli.test_run_cmd import SMALL_GEMM as KERNEL
from tests.tensorize.sweep.conftest import MACHINES

# A kernel file that, if it were ever executed, leaves a marker file behind.
PLANTED_KERNEL = """\
import pathlib
pathlib.Path({marker!r}).write_text("executed")
"""


@pytest.fixture
def private_temp(tmp_path, monkeypatch):
    """The process's temporary directory moved into the test's, with the worker's cached
    machines and private directory forgotten before and after."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "shared-tmp"))
    (tmp_path / "shared-tmp").mkdir()
    task_module._machine.cache_clear()
    task_module._private_directory.cache_clear()
    yield tmp_path / "shared-tmp"
    task_module._machine.cache_clear()
    task_module._private_directory.cache_clear()


def test_a_worker_builds_the_kernel_from_the_task_text_not_from_a_file(tmp_path, private_temp):
    kernel = tmp_path / "gemm.py"
    kernel.write_text(KERNEL)
    workload = kernel_workload(kernel, None)
    expected = read_kernel_file(kernel, None).func
    marker = tmp_path / "marker"
    planted = PLANTED_KERNEL.format(marker=str(marker))
    # The user's file now differs, and a copy waits where earlier releases looked for one.
    kernel.write_text(planted)
    digest = hashlib.sha256(KERNEL.encode()).hexdigest()[:16]
    (private_temp / "tensorize-sweep" / digest).mkdir(parents=True)
    (private_temp / "tensorize-sweep" / digest / "gemm.py").write_text(planted)
    assert_structural_equal(workload.build(), expected)
    assert not marker.exists()


def _small_task(write_sweep):
    sweep = load_sweep(write_sweep(f"""\
base: {MACHINES / "npu32x32.yaml"}
family: generated
vary:
  array.rows: [8]
  array.cols: [8]
workloads:
  - layers: [{{name: g, gemm: {{m: 32, n: 16, k: 24}}}}]
"""))
    return expand(sweep).points[0].task


def test_a_machine_planted_in_the_shared_temp_dir_is_not_simulated(write_sweep, private_temp):
    task = _small_task(write_sweep)
    honest = run_point(task)
    assert honest["error"] is None
    task_module._machine.cache_clear()
    task_module._private_directory.cache_clear()
    # A different machine under the name earlier releases derived from the text's digest.
    other = (MACHINES / "npu32x32.yaml").read_text()
    name = hashlib.sha256(task.machine_text.encode()).hexdigest()[:16]
    planted_dir = private_temp / "tensorize-sweep" / "machines"
    planted_dir.mkdir(parents=True)
    (planted_dir / f"{name}.yaml").write_text(other)
    again = run_point(task)
    assert again["error"] is None
    assert again["cycles"] == honest["cycles"]
    assert (planted_dir / f"{name}.yaml").read_text() == other  # never even rewritten


def test_the_workers_machine_directory_is_private(write_sweep, private_temp):
    run_point(_small_task(write_sweep))
    directory = task_module._private_directory()
    mode = directory.stat()
    assert stat.S_IMODE(mode.st_mode) == 0o700
    assert mode.st_uid == os.getuid()
    assert directory.parent == private_temp
    assert directory.name != "tensorize-sweep"


def test_a_machine_file_that_differs_from_the_text_is_replaced(tmp_path):
    text = "machine: {name: honest}\n"
    name = hashlib.sha256(text.encode()).hexdigest()[:16]
    (tmp_path / f"{name}.yaml").write_text("machine: {name: planted}\n")
    path = machine_file(text, tmp_path)
    assert path.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{name}.yaml"]
