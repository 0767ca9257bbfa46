"""Whole models: ONNX networks imported, tensorized layer by layer, run and reported.

:func:`run_model` runs an imported graph (:func:`ir.onnx.import_model`) on a target, layer
by layer, checking each layer against onnxruntime (:mod:`.runner`, :mod:`.executors`,
:mod:`.reference`, :mod:`.check`). :mod:`tensorize.model.networks` builds example networks
(ResNet-50, MobileNet-v2, a BERT encoder layer) with random weights;
:mod:`tensorize.model.report` writes the per-layer report.
"""

from tensorize.model.runner import ModelRun, random_inputs, run_model

__all__ = ["ModelRun", "random_inputs", "run_model"]
