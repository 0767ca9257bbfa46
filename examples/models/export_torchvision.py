"""Write torchvision's ResNet-18 and MobileNet-v3-small as PyTorch exports them, int8 QDQ.

Networks another tool wrote: exported by PyTorch and quantized by onnxruntime, as a user
following their documentation would. Two steps, in two environments, because only the
export needs PyTorch:

    # 1. export, with torch and torchvision (not dependencies of tensorize: below)
    python3.11 -m venv /tmp/torchvenv
    /tmp/torchvenv/bin/pip install torch torchvision onnx onnxruntime onnxscript numpy
    /tmp/torchvenv/bin/python examples/models/export_torchvision.py export DIR

    # 2. quantize, with the project's own onnxruntime (the ``models`` extra)
    .venv/bin/python examples/models/export_torchvision.py quantize DIR

    .venv/bin/tensorize model DIR/resnet18_tv_int8.onnx --target npu

``export`` writes ``DIR/resnet18_tv.onnx`` and ``DIR/mobilenet_v3_small_tv.onnx``, the float
networks; with ``--exporter torchscript``, ``DIR/resnet18_tvts.onnx`` and
``DIR/mobilenet_v3_small_tvts.onnx``. ``quantize`` writes ``NAME_int8.onnx`` beside each
export it finds. (``pip install 'tensorize[export]'`` puts torch and torchvision into the
project's environment, where both steps run.)

Why torch is not a dependency: tensorize reads ONNX files, whoever wrote them, and these
files matter because a tool other than ours wrote them. PyTorch is gigabytes that no test
and no command of tensorize needs, so it stays in the optional ``export`` extra, and the
tests rebuild each pattern these exports hold with ``onnx.helper`` in a few nodes.

The weights are torchvision's random initialisation from a fixed seed (``weights=None``:
nothing downloads), with random BatchNorm statistics and affine parameters: fresh BatchNorm
layers are the identity (mean 0, variance 1, weight 1, bias 0), which would export every
convolution with a zero bias; a trained network's are not. BatchNorm runs in eval mode, so
the exporter folds it into the convolutions.

The exporter is ``torch.onnx.export``'s default since PyTorch 2.9, built on
``torch.export`` (``dynamo=True``), at opset 20 (onnxruntime's quantizer takes opsets 10 and
up): it is what a user gets today. Its graphs differ from the ones
``examples/models/build_models.py`` writes: node names such as ``node_Conv_292``,
``ReduceMean`` over the spatial axes for the global average pool, ``Reshape`` before the
classifier's ``Gemm`` (``transB = 1``), and, for MobileNet-v3, HardSwish (which the
quantizer's pre-processing expands into HardSigmoid and Mul), HardSigmoid and the
squeeze-and-excitation ``Mul``. The deprecated TorchScript exporter (opset 17) writes
``GlobalAveragePool`` and ``Flatten`` there, node names such as ``/layer1/layer1.0/conv1/Conv``,
and an Identity node per use of a constant it shares.

The quantization follows onnxruntime's documentation for CNNs: ``quant_pre_process`` (onnx's
shape inference and onnxruntime's graph optimisation), then ``quantize_static`` in the QDQ
format with int8 activations and weights, weights per channel (symmetric), calibrated with
MinMax on a few random inputs from a fixed seed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

NETWORKS = ("resnet18", "mobilenet_v3_small")
INPUT_SHAPE = (1, 3, 224, 224)
# The default exporter's opset in PyTorch 2.9 and later, named so a later default does not
# change the files.
OPSET = 20
# The TorchScript exporter's default opset in PyTorch 2.x.
TORCHSCRIPT_OPSET = 17
# Each exporter's file name suffix.
EXPORTERS = {"dynamo": "tv", "torchscript": "tvts"}


def export(out_dir: Path, seed: int, exporter: str) -> None:
    """Export each network as PyTorch does, float, to ``out_dir/NAME_SUFFIX.onnx``."""
    import torch
    import torchvision

    for name in NETWORKS:
        torch.manual_seed(seed)
        model = getattr(torchvision.models, name)(weights=None)
        _randomise_batch_norm(model, torch)
        model.eval()
        path = out_dir / f"{name}_{EXPORTERS[exporter]}.onnx"
        example = (torch.randn(*INPUT_SHAPE),)
        if exporter == "dynamo":
            # One file: the default (external_data=True) writes the weights beside it.
            torch.onnx.export(model, example, str(path), dynamo=True, opset_version=OPSET,
                              input_names=["input"], output_names=["logits"],
                              external_data=False)
        else:
            torch.onnx.export(model, example, str(path), dynamo=False,
                              opset_version=TORCHSCRIPT_OPSET, input_names=["input"],
                              output_names=["logits"])
        print(f"wrote {path}  {path.stat().st_size / 2**20:.1f} MiB")


def _randomise_batch_norm(model, torch) -> None:
    """Give every BatchNorm random statistics and affine parameters (module docs)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                channels = module.num_features
                module.running_mean.copy_(torch.randn(channels) * 0.1)
                module.running_var.copy_(torch.rand(channels) + 0.5)
                module.weight.copy_(torch.rand(channels) + 0.5)
                module.bias.copy_(torch.randn(channels) * 0.1)


def quantize(out_dir: Path, seed: int, samples: int) -> None:
    """Quantize each exported network in ``out_dir`` to int8 QDQ, to ``NAME_int8.onnx``
    beside it."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class RandomReader(CalibrationDataReader):
        """Random calibration inputs, the same for every network."""

        def __init__(self) -> None:
            rng = np.random.default_rng(seed)
            self.batches = iter([{"input": rng.standard_normal(INPUT_SHAPE, np.float32)}
                                 for _ in range(samples)])

        def get_next(self):
            """The next calibration batch, or None after the last."""
            return next(self.batches, None)

    sources = [out_dir / f"{name}_{suffix}.onnx" for suffix in EXPORTERS.values()
               for name in NETWORKS]
    if not any(source.exists() for source in sources):
        raise SystemExit(f"error: no exported network in {out_dir}; run the export step "
                         "first (this script's docstring)")
    for source in sources:
        if not source.exists():
            continue
        path = source.with_name(f"{source.stem}_int8.onnx")
        with tempfile.TemporaryDirectory(prefix="tensorize-tv-") as tmp:
            prepared = Path(tmp) / "prepared.onnx"
            # Symbolic shape inference (which needs sympy) is for dynamic shapes; these
            # networks' shapes are static, and onnx's own shape inference finds them all.
            quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
            quantize_static(str(prepared), str(path), RandomReader(),
                            quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                            weight_type=QuantType.QInt8, per_channel=True)
        print(f"wrote {path}  {path.stat().st_size / 2**20:.1f} MiB")


def main(argv: list[str] | None = None) -> int:
    """Run the step the command line names; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("export", "quantize"),
                        help="export (needs torch) or quantize (needs onnxruntime)")
    parser.add_argument("out_dir", type=Path, help="directory of the .onnx files")
    parser.add_argument("--exporter", choices=tuple(EXPORTERS), default="dynamo",
                        help="export: PyTorch's default exporter (dynamo, files NAME_tv) or "
                             "its deprecated TorchScript one (files NAME_tvts)")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and calibration")
    parser.add_argument("--samples", type=int, default=8,
                        help="random calibration inputs for quantization (default 8)")
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.step == "export":
        export(args.out_dir, args.seed, args.exporter)
    else:
        quantize(args.out_dir, args.seed, args.samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
