"""Backends: code that runs a tensor program, or calls the intrinsics it was rewritten to use.

- :mod:`targets.host`: an LLVM JIT for the machine tensorize runs on; the reference executor
  every transform is checked against.
"""
