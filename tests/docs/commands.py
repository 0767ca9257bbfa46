"""What the doc tests need to know beyond the markdown: the command a page states in prose
for an output block, how long each documented command takes (the default run, the slow
pass, or not run, with the reason), the tools it needs, and the output blocks that are
not a command's output.

Keys of blocks are (file name, first line of the block), so that they survive edits above
them; a test fails when a key matches no block (a stale entry) and when an output block or
a command is in none of these tables (a new sample nobody classified).
"""

from __future__ import annotations

MAIN_JOB = "tensorize run examples/script/gemm_int8.py --target npu"

# Output blocks whose command is stated in the page's prose, not in the block.
STATED = {
    ("README.md", "ok   round-trip  print -> parse gives a structurally equal function"):
        MAIN_JOB,
}

# Commands cheap enough for the default run (about 1.5 s each).
DEFAULT = {
    MAIN_JOB,
    "tensorize run examples/script/gemm_int8.py --target npu --machine "
    "examples/machines/npu32x32.yaml --quiet",
}

# Commands for the slow pass, each with the programs it needs on PATH.
SLOW = {
    "tensorize run examples/script/gemm_u8s8.py --target x86_avxvnni --intrinsics-dir "
    "intrinsics/optional --quiet": (),
    "tensorize run examples/script/gemm_int8.py --target arm --tune --quiet": (),
    "tensorize run examples/script/gemm_int8.py --target cuda --quiet": ("nvcc", "g++"),
    "tensorize run examples/script/gemm_int8.py --target cuda --arch sm_90a --quiet":
        ("nvcc", "g++"),
    "tensorize run examples/script/matmul_relu.py --target cuda --arch sm_90a --quiet":
        ("nvcc", "g++"),
    "tensorize run examples/script/gemm_requant_int8.py --target cuda --arch sm_90a --quiet":
        ("nvcc", "g++"),
    "tensorize run examples/script/gemm_int8.py --target x86 --quiet": (),
}

# Commands not run, and why.
NOT_RUN = {
    ".venv/bin/python bench/bench_sweep.py":
        "a bench of minutes (384 points on three executors); its figures are timings, "
        "stated beside the command that made them",
    ".venv/bin/python bench/bench_sweep.py --resnet":
        "a bench of minutes (256 ResNet-50 points on three executors); timings",
    ".venv/bin/python bench/bench_sweep.py --resnet-model":
        "a bench of minutes (the generated ResNet-50, 256 points on three executors); "
        "timings, and the model totals its own tests check",
    ".venv/bin/python bench/bench_scalesim.py --model resnet50_int8.onnx":
        "needs SCALE-Sim (the scalesim extra, not installed for the tests) and the full-size "
        "ResNet-50; tens of seconds per machine",
}

# Blocks that look like output and are not a command's, or that no machine here can check.
NOT_OUTPUT = {
    ("architecture.md", "tensorize run KERNEL.py --target T          (tensorize/cli/run_cmd.py: "
                        "options, kernel file,"):
        "a diagram of the route a kernel takes, not a command's output",
    ("cuda_backend.md", "ok   sass        gemm_fp16_k0 sm_80: 192 SASS MMA and 172 other SASS "
                        "instructions in its k loop: 0.9 other per SASS MMA instruction; no "
                        "drain at its 3 barrier(s)"):
        "needs cuobjdump (the sass extra), absent from the machines the suite runs on",
    ("cuda_backend.md", "ok   sass        gemm_int8_gemm sm_90a: 8 SASS MMA and 273 other SASS "
                        "instructions in the kernel (no loop holds an MMA): ..."):
        "needs cuobjdump (the sass extra); tests/tensorize/cli/test_run_hopper.py checks it "
        "where cuobjdump is found",
    ("intrinsics.md", "ok   run         C on native (...) exact against the hardware-order "
                      "reference (descending, round to nearest even, flush) of x86_vdpbf16ps; "
                      "max error 3.0e-05 of the float64 bound 3.2e-03"):
        "a run line with its timing left out: tests/tensorize/test_hardware_order.py checks "
        "it against the tool's",
    ("intrinsics.md", "ok   run         D on unicorn (...) against the reference executor: "
                      "max error 0.00e+00 of the largest value (tolerance 0.0001); not bit for "
                      "bit: block 'C' (arm_fmlal_lane): block 'D' after it reads its output (an "
                      "epilogue the reference does not compute in order)"):
        "a run line with its timing left out: tests/tensorize/test_hardware_order.py checks "
        "it against the tool's",
}
