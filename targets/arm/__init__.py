"""What the AArch64 target needs beyond its description (``intrinsics/arm.yaml``, served by
the CPU code generator, :mod:`targets.cpu`): a loader for the ELF objects LLVM emits for it
(:mod:`.elf`), the in-process emulator that runs them on any host (:mod:`.unicorn`),
counting the instructions executed, and the static executable qemu-user runs for the
instructions that emulator lacks (i8mm; :mod:`.qemu`).
"""
