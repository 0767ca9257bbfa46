"""Write the example networks as ONNX files: float and int8 QDQ, random weights, no download.

    python examples/models/build_models.py OUT_DIR [--small] [--seed N] [--samples N]

writes OUT_DIR/resnet50.onnx, resnet50_int8.onnx, mobilenetv2.onnx, mobilenetv2_int8.onnx,
bert_layer.onnx and bert_layer_int8.onnx (ResNet-50 v1 224x224, MobileNet-v2 224x224, one
BERT-base encoder layer at sequence length 128), printing each file with its size. ``--small``
builds the small versions the tests use (seconds instead of tens of seconds). On a terminal,
a phase that takes over two seconds (building or quantizing one network) says so on stderr.
The int8 files are what ``tensorize model`` takes:

    tensorize model OUT_DIR/resnet50_int8.onnx --target npu --report report/
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import onnx

from tensorize.cli.progress import phase_printer
from tensorize.model.networks import NETWORKS, build, quantize


def main(argv: list[str] | None = None) -> int:
    """Build every network, quantize it and save both versions; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory to write the .onnx files into")
    parser.add_argument("--small", action="store_true",
                        help="the small versions the tests build (few channels, small inputs)")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and calibration")
    parser.add_argument("--samples", type=int, default=8,
                        help="random calibration inputs for quantization (default 8)")
    args = parser.parse_args(argv)
    try:
        args.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        print(f"error: cannot create {args.out_dir}: {err.strerror}", file=sys.stderr)
        return 2
    phase = phase_printer(True)
    for name in NETWORKS:
        start = time.perf_counter()
        with phase(f"building {name}"):
            model = build(name, args.seed, small=args.small)
        with phase(f"quantizing {name} on {args.samples} random calibration inputs"):
            quantized = quantize(model, args.seed, args.samples)
        for path, proto in ((args.out_dir / f"{name}.onnx", model),
                            (args.out_dir / f"{name}_int8.onnx", quantized)):
            onnx.save(proto, path)
            print(f"wrote {path}  {path.stat().st_size / 2**20:.1f} MiB, "
                  f"{len(proto.graph.node)} nodes")
        print(f"      {name}: built and quantized in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
