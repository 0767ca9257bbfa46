// Host emulation of <cuda_fp16.h> for tensorize's CUDA backend: half is the compiler's
// IEEE binary16 type, converting to and from float with round-to-nearest-even.
#pragma once
typedef _Float16 half;
typedef _Float16 __half;
