"""The simulator's part of the self-check: each NPU instruction against its YAML semantics."""

from __future__ import annotations

from pathlib import Path

from intrinsics import default_registry, load_family, self_check
from simulator import load_machine
from targets.npu.selfcheck import SimulatorChecker
from tensorize.cli import main

BUILTIN = Path(__file__).resolve().parents[3] / "intrinsics" / "npu.yaml"


def test_every_npu_compute_intrinsic_matches_its_semantics_on_the_simulator():
    family = [i for i in default_registry() if i.target == "npu"]
    results = self_check(family, [SimulatorChecker(family, load_machine())])
    assert len(results) == len([i for i in family if i.kind == "compute"])
    assert all(r.status == "ok" for r in results), [str(r) for r in results if r.failed]


def test_semantics_the_instruction_does_not_compute_are_caught(tmp_path):
    # The description claims relu clamps at 1, the instruction clamps at 0.
    text = BUILTIN.read_text().replace('semantics: "D[i, j] = max(D[i, j], 0)"',
                                       'semantics: "D[i, j] = max(D[i, j], 1)"')
    path = tmp_path / "npu.yaml"
    path.write_text(text)
    family = list(load_family(path).intrinsics)
    relu = next(i for i in family if i.name == "npu_vec_relu")
    (result,) = self_check([relu], [SimulatorChecker(family, load_machine(path))])
    assert result.status == "mismatch" and result.max_error == 1


def test_validate_runs_the_simulator_check(capsys):
    assert main(["intrinsics", "validate", str(BUILTIN)]) == 0
    out = capsys.readouterr().out
    assert "npu_gemm: simulator: ok" in out
