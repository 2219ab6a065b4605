// test: remove vectorize@dot4:7:a4
// A dot product whose launch hands the kernel each array twice: as floats, and as float4s through
// reinterpret_cast (the arrays are 16-byte aligned); the kernel reads the whole float4s, then the
// last n % 4 elements one by one, and adds its sum with one atomic per thread.
#include <cuda_runtime.h>

__global__ void dot4(const float* a, const float* b, const float4* __restrict__ a4, const float4* __restrict__ b4,
                     int n4, int n, float* out)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float s = 0.0f;
    if (i < n4) {
        const float4 p = make_float4(a[4 * i], a[4 * i + 1], a[4 * i + 2], a[4 * i + 3]), q = b4[i];
        s = p.x * q.x + p.y * q.y + p.z * q.z + p.w * q.w;
    }
    const int t = 4 * n4 + i;
    if (t < n && i < 4) s += a[t] * b[t];
    atomicAdd(out, s);
}

extern "C" void launch(const float* a, const float* b, float* out, int n, cudaStream_t stream)
{
    const int n4 = n / 4;
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    dot4<<<(n4 + 255) / 256 + 1, 256, 0, stream>>>(a, b, reinterpret_cast<const float4*>(a),
                                                  reinterpret_cast<const float4*>(b), n4, n, out);
}
