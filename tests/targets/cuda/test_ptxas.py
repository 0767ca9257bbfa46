"""targets.cuda.compile.parse_ptxas, parse_sass and targets.cuda.occupancy: what ptxas says
of each kernel, the occupancy that allows, and the SASS instruction mix, against
hand-computed values."""

from __future__ import annotations

import pytest

from targets import cuda
from targets.cuda.compile import (
    KernelResources,
    SassMix,
    cuobjdump_path,
    parse_ptxas,
    parse_sass,
    resource_usage,
    sass_mix,
)
from targets.cuda.occupancy import Occupancy, architecture, architectures, occupancy
from tests.targets.cuda.helpers import WMMA_INT8, emitted

# CUDA 13's ptxas -v on the double-buffered int8 GEMM, and a kernel without the "Function
# properties" block, barriers or shared memory, after one that spills.
PTXAS_GEMM = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'gemm_int8_k0' for 'sm_80'
ptxas info    : Function properties for gemm_int8_k0
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 57 registers, used 1 barriers, 4608 bytes smem, 376 bytes cmem[0]
ptxas info    : Compile time = 20.923 ms
"""
PTXAS_TWO = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'big_k1' for 'sm_90'
ptxas info    : Function properties for big_k1
    48 bytes stack frame, 40 bytes spill stores, 36 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 49152 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function 'pack_k0' for 'sm_90'
ptxas info    : Used 10 registers, 368 bytes cmem[0]
"""


def test_parse_one_kernel():
    assert parse_ptxas(PTXAS_GEMM) == (
        KernelResources("gemm_int8_k0", "sm_80", registers=57, shared_bytes=4608,
                        spill_stores=0, spill_loads=0, stack_frame=0),)


def test_parse_spills_and_a_kernel_without_properties():
    assert parse_ptxas(PTXAS_TWO) == (
        KernelResources("big_k1", "sm_90", 255, 49152, 40, 36, 48),
        KernelResources("pack_k0", "sm_90", 10, 0, 0, 0, 0),
    )


def test_an_entry_without_a_register_count_is_an_error():
    text = "ptxas info    : Compiling entry function 'k' for 'sm_80'\n"
    with pytest.raises(cuda.CompileError, match="ptxas reported no register count for k"):
        parse_ptxas(text)


@pytest.mark.parametrize(("arch", "registers", "shared", "threads", "expected"), [
    # 128 registers x 32 lanes = 4096 per warp: 65536 / 4096 = 16 warps, 4 blocks of 4.
    ("sm_80", 128, 16384, 128, Occupancy(4, 16, 64, "registers")),
    # 57 registers: 1824 per warp rounds up to 2048 (8 x 256): 32 warps, 8 blocks of 4.
    ("sm_80", 57, 4608, 128, Occupancy(8, 32, 64, "registers")),
    # 56 registers: 1792 = 7 x 256 exactly: 36 warps, 9 blocks of 4.
    ("sm_90", 56, 4608, 128, Occupancy(9, 36, 64, "registers")),
    # 48 KB + 1 KB reserved per block: sm_80's 164 KB hold 3 blocks, sm_90's 228 KB 4.
    ("sm_80", 32, 49152, 256, Occupancy(3, 24, 64, "shared memory")),
    ("sm_90", 32, 49152, 256, Occupancy(4, 32, 64, "shared memory")),
    # 32 registers, 256 threads: 8 warps a block, the SM's 64 warp slots hold 8 blocks
    # (registers would allow 8 too: the first in order, registers, is named).
    ("sm_90", 32, 0, 256, Occupancy(8, 64, 64, "registers")),
    # 16 registers, 256 threads: registers allow 16 blocks, warp slots 8.
    ("sm_80", 16, 0, 256, Occupancy(8, 64, 64, "warps")),
    # One warp a block: at most 32 blocks, half the warp slots.
    ("sm_90", 55, 3584, 32, Occupancy(32, 32, 64, "blocks")),
    # 72 threads are three warps: 64 slots hold 21 blocks; 100 B of shared memory round up
    # to 1152 with the reserve (145 blocks), 8 registers to 256 a warp (85 blocks).
    ("sm_80", 8, 100, 72, Occupancy(21, 63, 64, "warps")),
    # More registers than a thread may have, more shared memory than an SM has.
    ("sm_80", 256, 0, 32, Occupancy(0, 0, 64, "registers")),
    ("sm_80", 32, 200 * 1024, 32, Occupancy(0, 0, 64, "shared memory")),
])
def test_occupancy_against_hand_computed_values(arch, registers, shared, threads, expected,
                                                registry):
    assert occupancy(architecture(arch, registry), registers, shared, threads) == expected


def test_occupancy_fraction_and_arguments(registry):
    sm_80 = architecture("sm_80", registry)
    assert occupancy(sm_80, 128, 16384, 128).fraction == 0.25
    assert list(architectures(registry)) == ["sm_80", "sm_90"]
    with pytest.raises(ValueError, match="architecture 'sm_70' requires an entry under "
                                         "gpu.architectures, got none; the entries are sm_80, "
                                         "sm_90"):
        architecture("sm_70", registry)
    with pytest.raises(ValueError, match="occupancy requires positive threads"):
        occupancy(sm_80, 32, 0, 0)


@pytest.mark.slow  # in CI's slow pass, for the default run's time
@pytest.mark.skipif(cuda.nvcc_path() is None, reason="nvcc not installed")
def test_resource_usage_of_the_double_buffered_gemm():
    # Three stages of A and B tiles, 2 x 1024 bytes each (16-byte rows need no padding to be
    # free of bank conflicts); no spills on either architecture. The B transpose before it
    # stages one 64 x 64-byte tile, its rows padded to 80 bytes.
    for arch in ("sm_80", "sm_90"):
        transpose, gemm = sorted(resource_usage(emitted("gemm_int8", intrinsic=WMMA_INT8), arch),
                                 key=lambda r: r.kernel)
        assert (transpose.kernel, transpose.shared_bytes) == ("gemm_int8_k0", 64 * 80)
        assert (gemm.kernel, gemm.arch, gemm.shared_bytes) == ("gemm_int8_k1", arch, 6144)
        assert 0 < gemm.registers <= 255
        assert (gemm.spill_stores, gemm.spill_loads, gemm.stack_frame) == (0, 0, 0)
        # Cached with the PTX it comes from: asking again runs neither nvcc nor ptxas.
        kernel = emitted("gemm_int8", intrinsic=WMMA_INT8)
        assert resource_usage(kernel, arch) is resource_usage(kernel, arch)


# cuobjdump -sass, shortened and without the encodings: a copy loop (0x0030-0x0050, no MMA)
# inside a k loop (0x0010-0x00b0) holding two HMMAs, then the exit and the branch-to-self
# padding; and a kernel without loops whose two IMMAs are counted over the whole function.
SASS = """\
\tcode for sm_80
\t\tFunction : looped_k0
\t.headerflags\t@"EF_CUDA_SM80 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM80)"
        /*0000*/                   IMAD.MOV.U32 R1, RZ, RZ, c[0x0][0x28] ;

        /*0010*/                   LDGSTS.E.BYPASS.128 [R2], [R4.64] ;
        /*0020*/                   IADD3 R6, R6, 0x1, RZ ;
        /*0030*/                   ISETP.GE.AND P1, PT, R6, 0x4, PT ;
        /*0040*/                   LDS.128 R8, [R3] ;
        /*0050*/              @!P1 BRA 0x30 ;
        /*0060*/                   HMMA.16816.F32 R12, R8.reuse, R10, R12 ;
        /*0070*/                   HMMA.16816.F32 R16, R8, R11, R16 ;
        /*0080*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0090*/                   ISETP.NE.AND P0, PT, R7, RZ, PT ;
        /*00a0*/                   NOP ;
        /*00b0*/               @P0 BRA 0x10 ;
        /*00c0*/                   EXIT ;
        /*00d0*/                   BRA 0xd0;
        /*00e0*/                   NOP;
\t\t..........


\t\tFunction : unrolled_k1
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0010*/                   IMMA.16816.S8.S8 R24, R12.ROW, R10.COL, RZ ;
        /*0020*/                   IMMA.16816.S8.S8 R28, R12.ROW, R11.COL, RZ ;
        /*0030*/               @P0 BRA 0x50 ;
        /*0040*/                   STG.E [R2.64], R24 ;
        /*0050*/                   EXIT ;
        /*0060*/                   BRA 0x60;
"""


def test_parse_sass_counts_the_innermost_loop_holding_an_mma():
    # k loop 0x0010-0x00b0: 11 instructions, one a NOP, two HMMAs: 8 others.
    assert parse_sass(SASS) == (SassMix("looped_k0", mma=2, other=8, scope="k loop"),
                                SassMix("unrolled_k1", mma=2, other=5, scope="kernel"))
    assert parse_sass(SASS)[0].other_per_mma == 4.0


@pytest.mark.skipif(cuobjdump_path() is None, reason="cuobjdump (and nvdisasm) not installed")
def test_sass_mix_of_the_int8_gemm():
    # 64^3 in 4 k steps of one slice over 3 stages: the fragments' copy alternates with the
    # step, so the k loop is unrolled 6 times, which nvcc does whole: 2 x 2 fragments of
    # m16n16k16 per warp, each mma_sync two IMMA.16816, over 4 steps: 32 in the kernel.
    transpose, mix = sorted(sass_mix(emitted("gemm_int8", intrinsic=WMMA_INT8), "sm_80"),
                            key=lambda m: m.kernel)
    assert (transpose.kernel, transpose.mma) == ("gemm_int8_k0", 0)
    assert (mix.kernel, mix.mma, mix.scope) == ("gemm_int8_k1", 32, "kernel")
    assert mix.other > 0
