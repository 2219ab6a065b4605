#include <cstdint>
#include <cuda_bf16.h>

__global__ void gather_kernel(const __nv_bfloat16 *x, const int32_t *idx, const uint8_t *mask, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = mask[i] ? __bfloat162float(x[idx[i]]) : 0.0f;
}

extern "C" void launch(const __nv_bfloat16 *x, const int32_t *idx, const uint8_t *mask, float *y, int n, int m,
                       cudaStream_t stream)
{
    gather_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, idx, mask, y, n);
}
