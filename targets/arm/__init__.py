"""What the AArch64 target needs beyond its description (``intrinsics/arm.yaml``, served by
the CPU code generator, :mod:`targets.cpu`): a loader for the ELF objects LLVM emits for it
(:mod:`.elf`) and the in-process emulator that runs them on any host (:mod:`.unicorn`),
counting the instructions executed.
"""
