"""An NPU program that does not fit the machine is a layer's reason, never an error: the run
goes on with the layer on the host, named with why, every layer still exact."""

from __future__ import annotations

import pytest

import tensorize.runners.npu as npu_runner
from ir import ExecutionError
from ir.onnx import import_model
from tensorize.model import run_model
from tests.ir.onnx import models


@pytest.mark.slow
def test_a_program_the_machine_cannot_hold_sends_its_layer_to_the_host(tmp_path, context,
                                                                     monkeypatch):
    def refuse(func, config, registry):
        raise ExecutionError("the NPU's acc memory cannot hold matmul_npu_acc; tile smaller")

    monkeypatch.setattr(npu_runner, "plan_npu", refuse)
    graph = import_model(models.save(models.quantize(models.small_cnn(size=8), tmp_path),
                                     tmp_path, "cnn.onnx"))
    run = run_model(graph, context("npu"))
    assert run.ok
    convs = [r for r in run.records if r["op"].startswith("QDQ Conv")]
    assert convs and all(r["placement"] != "tensorized" for r in convs)
    for record in convs:
        assert "tensorized with npu_gemm, but the NPU's acc memory cannot hold " \
               "matmul_npu_acc; tile smaller" in record["why_not"]
        assert record["check"] == "exact"
