// A block per row for long rows, a warp per row for short ones, chosen by the width.
#include <cuda_runtime.h>

#define WIDE 1024

__device__ float warp_max(float x)
{
    for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

__device__ float warp_sum(float x)
{
    for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

__global__ void lse_short(const float *v, float *out, int batch, int width)
{
    const int r = blockIdx.x * 4 + threadIdx.y;
    if (r >= batch) return;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < width; c += 32) m = fmaxf(m, v[(size_t)r * width + c]);
    m = warp_max(m);
    float s = 0.f;
    for (int c = threadIdx.x; c < width; c += 32) s += expf(v[(size_t)r * width + c] - m);
    s = warp_sum(s);
    if (threadIdx.x == 0) out[r] = m + logf(s);
}

template <int THREADS>
__global__ void lse_long(const float *v, float *out, int width)
{
    __shared__ float part[THREADS / 32];
    const float *row = v + (size_t)blockIdx.x * width;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < width; c += THREADS) m = fmaxf(m, row[c]);
    m = warp_max(m);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = m;
    __syncthreads();
    m = part[0];
    for (int w = 1; w < THREADS / 32; ++w) m = fmaxf(m, part[w]);
    __syncthreads();
    float s = 0.f;
    for (int c = threadIdx.x; c < width; c += THREADS) s += expf(row[c] - m);
    s = warp_sum(s);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.f;
        for (int w = 0; w < THREADS / 32; ++w) t += part[w];
        out[blockIdx.x] = m + logf(t);
    }
}

static void launch_long(const float *v, float *out, int batch, int width, cudaStream_t stream)
{
    if (width >= 4 * WIDE)
        lse_long<512><<<batch, 512, 0, stream>>>(v, out, width);
    else
        lse_long<256><<<batch, 256, 0, stream>>>(v, out, width);
}

extern "C" void launch(const float *v, float *out, int batch, int width, cudaStream_t stream)
{
    if (batch <= 0) return;
    switch (width > WIDE ? 1 : 0) {
    case 1: launch_long(v, out, batch, width, stream); break;
    default: {
        dim3 block(32, 4);
        lse_short<<<(batch + 3) / 4, block, 0, stream>>>(v, out, batch, width);
    }
    }
}
