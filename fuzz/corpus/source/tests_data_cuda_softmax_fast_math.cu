// softmax_fast_math: a row softmax with fast-math intrinsics (__expf, __fdividef,
// rsqrtf), warp shuffles and two kernels launched in sequence.
#include <cuda_runtime.h>

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__global__ void softmax_rows(const float *__restrict__ x, float *__restrict__ y, int rows, int cols)
{
    int row = blockIdx.x;
    if (row >= rows) return;
    const float *xr = x + (size_t)row * cols;
    float *yr = y + (size_t)row * cols;
    float m = -3.0e38f;
    for (int c = threadIdx.x; c < cols; c += 32) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += 32) s += __expf(xr[c] - m);
    s = warp_sum(s);
    for (int c = threadIdx.x; c < cols; c += 32) yr[c] = __fdividef(__expf(xr[c] - m), s);
}

__global__ void rms_scale(float *__restrict__ y, int rows, int cols)
{
    int row = blockIdx.x;
    float *yr = y + (size_t)row * cols;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < cols; c += 32) ss += yr[c] * yr[c];
    ss = warp_sum(ss);
    float inv = rsqrtf(ss / cols + 1e-6f);
    for (int c = threadIdx.x; c < cols; c += 32) yr[c] *= inv;
}

extern "C" void launch(const float *x, float *y, int rows, int cols, cudaStream_t stream)
{
    softmax_rows<<<rows, 32, 0, stream>>>(x, y, rows, cols);
    rms_scale<<<rows, 32, 0, stream>>>(y, rows, cols);
}
