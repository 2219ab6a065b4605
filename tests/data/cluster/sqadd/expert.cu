// sqadd, tuned: restricted pointers, launch bounds, a grid-stride loop over float4 with a
// scalar tail, unrolled.
#include <cuda_runtime.h>

__global__ void __launch_bounds__(256) sqadd_fast(const float *__restrict__ x, const float *__restrict__ y,
                                                  float *__restrict__ z, int n)
{
    int stride = gridDim.x * blockDim.x;
    int n4 = n / 4;
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    const float4 *y4 = reinterpret_cast<const float4 *>(y);
    float4 *z4 = reinterpret_cast<float4 *>(z);
#pragma unroll 2
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 a = x4[i], b = y4[i];
        z4[i] = make_float4(a.x * a.x + b.x, a.y * a.y + b.y, a.z * a.z + b.z, a.w * a.w + b.w);
    }
    for (int i = 4 * n4 + blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) z[i] = x[i] * x[i] + y[i];
}

extern "C" void launch(const float *x, const float *y, float *z, int n, cudaStream_t stream)
{
    int blocks = (n / 4 + 255) / 256;
    if (blocks > 2048) blocks = 2048;
    if (blocks < 1) blocks = 1;
    sqadd_fast<<<blocks, 256, 0, stream>>>(x, y, z, n);
}
