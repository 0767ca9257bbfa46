"""tensorize sweep: its exit statuses, reports, progress line and plots."""

from __future__ import annotations

import json
import sys

import pytest

from tensorize.cli import main

SWEEP = """\
family: base
vary:
  array.rows: [8, 16]
workloads:
  - layers: [{name: g, gemm: {m: 32, n: 16, k: 32}}]
"""


@pytest.fixture
def sweep_file(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP)
    return path


@pytest.mark.slow
def test_a_sweep_with_a_failed_point_exits_1_and_reports_it(sweep_file, tmp_path, capsys,
                                                            monkeypatch):
    out = tmp_path / "out"
    assert main(["sweep", str(sweep_file), "-j", "1", "--out", str(out)]) == 1
    captured = capsys.readouterr()
    assert "2 points: 2 machines; 2 ran now" in captured.out and "1 failed" in captured.out
    assert "failed points (1):" in captured.out
    assert "g on array.rows=8: not tensorized" in captured.out
    assert "sweep: 2/2 points done, 1 failed" in captured.err
    assert "Pareto front" in captured.out and "array.rows=16" in captured.out
    assert (out / "pareto.png").stat().st_size > 0
    assert "ok   plot" in captured.out
    # The rerun runs the failed point again (and only it), reported as JSON.
    monkeypatch.setattr("tensorize.sweep.executors.LocalExecutor.run", _in_process)
    assert main(["sweep", str(sweep_file), "-j", "1", "--out", str(out), "--json",
                 "--no-plots"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert (report["ok"], report["executed"], report["resumed"], report["failed"]) == \
        (False, 1, 1, 1)
    assert report["summary"]["best"]["g"]["fields"] == {"array.rows": 16}


def test_plots_are_skipped_with_the_reason_without_matplotlib(sweep_file, tmp_path, capsys,
                                                              monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr("tensorize.sweep.executors.LocalExecutor.run", _in_process)
    main(["sweep", str(sweep_file), "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert "skip plots  matplotlib is not installed" in out
    assert not (tmp_path / "out" / "pareto.png").exists()


def _in_process(self, tasks):
    from tensorize.sweep import run_point

    for task in tasks:
        yield task, run_point(task)


def test_a_bad_sweep_file_exits_2_naming_file_line_and_field(sweep_file, capsys):
    sweep_file.write_text(SWEEP.replace("array.rows", "array.rowz"))
    assert main(["sweep", str(sweep_file), "--json"]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out)["ok"] is False
    assert f"{sweep_file}:3:3: vary.array.rowz requires a field of the machine: section" \
        in captured.err
    assert "did you mean 'array.rows'?" in captured.err and "Traceback" not in captured.err


@pytest.mark.parametrize(("argv", "fragment"), [
    (["--address", "tcp://127.0.0.1:1"], "--address requires --executor dask"),
    (["--executor", "dask", "--address", "tcp://127.0.0.1:1", "-j", "2"],
     "with --address the cluster's own workers run the points"),
    (["--executor", "dask", "--address", "foo://bar"],
     "--address foo://bar: cannot reach a Dask scheduler there (unknown address scheme"),
])
def test_bad_options_exit_2(sweep_file, tmp_path, capsys, argv, fragment):
    assert main(["sweep", str(sweep_file), "--out", str(tmp_path / "out"), *argv]) == 2
    assert fragment in capsys.readouterr().err


def test_dask_without_the_extra_is_refused_with_how_to_install_it(sweep_file, tmp_path,
                                                                  capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "dask.distributed", None)
    assert main(["sweep", str(sweep_file), "--executor", "dask", "--out",
                 str(tmp_path / "out")]) == 2
    assert "--executor dask requires Dask" in capsys.readouterr().err
