// The f16 type of the CUDA emulation: declared so that kernels including cuda_fp16.h compile;
// conversions are not emulated (no corpus task uses f16 arithmetic).
#ifndef KL_CUDA_EMU_FP16_H
#define KL_CUDA_EMU_FP16_H
#include "cuda_runtime.h"
struct __half {
    unsigned short x;
};
typedef __half half;
#endif
