// The bf16 type of the CUDA emulation (tests/corpus/emu/cuda_runtime.h): the 16 high bits of an
// f32, converted with round-to-nearest-even as cuda_bf16.h does.
#ifndef KL_CUDA_EMU_BF16_H
#define KL_CUDA_EMU_BF16_H
#include "cuda_runtime.h"

struct __nv_bfloat16 {
    unsigned short x;
};
typedef __nv_bfloat16 nv_bfloat16;
struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
typedef __nv_bfloat162 nv_bfloat162;

inline float __bfloat162float(__nv_bfloat16 h)
{
    unsigned u = (unsigned)h.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline __nv_bfloat16 __float2bfloat16(float f)
{
    unsigned u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{(unsigned short)((u >> 16) | 0x40)};  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return __nv_bfloat16{(unsigned short)(u >> 16)};
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline float2 __bfloat1622float2(__nv_bfloat162 v) { return make_float2(__bfloat162float(v.x), __bfloat162float(v.y)); }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16(a), __float2bfloat16(b)}; }
#endif
