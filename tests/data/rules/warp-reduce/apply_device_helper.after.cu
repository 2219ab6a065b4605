// test: apply warp-reduce@block_dot:14 | remove warp-reduce@block_dot:16
// The tree inside a __device__ helper with its own shared array; the kernel (a template on the
// element type, double) launches 512 threads through a constexpr.
#include <cuda_runtime.h>

constexpr int THREADS = 512;

__device__ double block_dot(double v)
{
    __shared__ double acc[THREADS];
    const unsigned t = threadIdx.x;
    acc[t] = v;
    __syncthreads();
    {
        double kl_v = acc[t];
        for (int o = 16; o > 0; o >>= 1) kl_v += __shfl_xor_sync(0xffffffff, kl_v, o);
        __shared__ double kl_warp[32];
        if (threadIdx.x % 32 == 0) kl_warp[threadIdx.x / 32] = kl_v;
        __syncthreads();
        if (threadIdx.x < 32) {
            kl_v = kl_warp[threadIdx.x < blockDim.x / 32 ? threadIdx.x : 0];
            for (int o = blockDim.x / 64; o > 0; o >>= 1) kl_v += __shfl_xor_sync(0xffffffff, kl_v, o);
            if (threadIdx.x == 0) acc[0] = kl_v;
        }
        __syncthreads();
    }
    const double r = acc[0];
    __syncthreads();
    return r;
}

template <typename T>
__global__ void dot(const T* a, const T* b, T* out, int n)
{
    double v = 0.0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        v += (double)a[i] * (double)b[i];
    v = block_dot(v);
    if (threadIdx.x == 0) atomicAdd(out, (T)v);
}

extern "C" void launch(const double* a, const double* b, double* out, int n, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(double), stream);
    dot<double><<<64, THREADS, 0, stream>>>(a, b, out, n);
}
