// vadd, correct: a grid-stride loop with float4 accesses when all three pointers are 16-byte
// aligned (scalar otherwise), and a scalar tail.
#include <cuda_runtime.h>

__global__ void vadd_good(const float *a, const float *b, float *c, int n)
{
    int stride = gridDim.x * blockDim.x;
    bool aligned = (((unsigned long long)a | (unsigned long long)b | (unsigned long long)c) & 15) == 0;
    int n4 = aligned ? n / 4 : 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 x = reinterpret_cast<const float4 *>(a)[i], y = reinterpret_cast<const float4 *>(b)[i];
        reinterpret_cast<float4 *>(c)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
    for (int i = 4 * n4 + blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) c[i] = a[i] + b[i];
}

extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)
{
    int blocks = (n / 4 + 255) / 256;
    if (blocks < 1) blocks = 1;
    if (blocks > 4096) blocks = 4096;
    vadd_good<<<blocks, 256, 0, stream>>>(a, b, c, n);
}
