// test: remove block-size@block_max:5:THREADS | apply block-size@block_max:5:THREADS threads=512
#include <cuda_runtime.h>

// block-size
constexpr int THREADS = 256;   // threads per block
constexpr int WARPS = THREADS / 32;

// the maximum of each block's slice, through shared memory
__global__ void __launch_bounds__(THREADS) block_max(const float *x, float *m, int n)
{
    __shared__ float s[THREADS];
    __shared__ float w[WARPS];
    int i = blockIdx.x * THREADS + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : -INFINITY;
    __syncthreads();
    if (threadIdx.x < WARPS) {
        float v = -INFINITY;
        for (int k = 0; k < 32; k++) v = fmaxf(v, s[threadIdx.x * 32 + k]);
        w[threadIdx.x] = v;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float v = w[0];
        for (int k = 1; k < WARPS; k++) v = fmaxf(v, w[k]);
        m[blockIdx.x] = v;
    }
}

extern "C" void launch(const float *x, float *m, int n, cudaStream_t stream)
{
    block_max<<<(n + THREADS - 1) / THREADS, THREADS, 0, stream>>>(x, m, n);
}
