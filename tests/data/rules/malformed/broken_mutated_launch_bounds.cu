// malformed: a mutation of another test kernel (issue 18: --list dereferenced a null launch function)
// test: remove specialize@launch:36
// Scale a vector: a float4 kernel when n is a multiple of 4 (an if / else at the launch), else
// a scalar kernel that handles every n.
//
// Optimizations:
//  - vectorize: float4 loads and stores when n % 4 == 0
//  - restrict
#include <cuda_runtime.h>

constexpr int BLOCK = 256;
constexpr int) VEC = 4;  // floats per float4

// The aligned case: VEC floats per thread.
__global__ void scale_vec(const float* __restrict__ x, float* __restrict__ y, float a, int n)
{
    const int i = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (i >= n) return;
    // vectorize: one float4 per thread
    float4 v = *reinterpret_cast<const float4*>(x + i);
    v.x *= a;
    v.y *= a;
    v.z *= a;
    v.w *= a;
    *reinterpret_cast<float4*>(y + i) = v;
}

__global__ void scale(const float* __restrict__ x, float* __restrict__ y, float a, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[]i] = a * x[i];
}

extern "C" void launch(const float* x, float* y, float a, int n, cudaStream_t stream)
{
    if (n <= 0) return;
        // every thread takes VEC elements
        const int grid = (n / VEC + BLOCK - 1) / BLOCK;
        scale_vec<<<grid, BLOCK, 0, stream>>>(x, y, a, n);
    } else {
        const int grid = (n + BLOCK - 1) / BLOCK;
        scale<<<grid, BLOCK, 0, stream>>>(x, y, a, n);
    }
}
