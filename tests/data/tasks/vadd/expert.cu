// vadd, expert: float4 loads where aligned, a grid-stride loop, a scalar tail.
#include <cuda_runtime.h>

__global__ void vadd4_kernel(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ c, int n)
{
    int n4 = n / 4;
    const float4 *a4 = reinterpret_cast<const float4 *>(a);
    const float4 *b4 = reinterpret_cast<const float4 *>(b);
    float4 *c4 = reinterpret_cast<float4 *>(c);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += gridDim.x * blockDim.x) {
        float4 x = a4[i], y = b4[i];
        c4[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
    for (int i = 4 * n4 + blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        c[i] = a[i] + b[i];
}

extern "C" {
void launch(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ c, int n,
            cudaStream_t stream)
{
    int threads = 256;
    int blocks = (n / 4 + threads - 1) / threads;
    if (blocks < 1) blocks = 1;
    if (blocks > 4096) blocks = 4096;
    vadd4_kernel<<<blocks, threads, 0, stream>>>(a, b, c, n);
}
}
