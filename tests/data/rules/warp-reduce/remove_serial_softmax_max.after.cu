// idiom (own): a softmax with a block of warps per row. Each warp reduces its share of the row
// with xor shuffles; lane 0 of every warp leaves its partial in shared memory, and thread 0 runs
// over the warps' partials one after another and broadcasts the row's maximum, then its sum,
// through a shared variable.
#include <cuda_runtime.h>
#include <math.h>

#define WARPS 8
#define THREADS (WARPS * 32)

__global__ void softmax_rows(const float *__restrict__ x, float *__restrict__ y, int cols)
{
    __shared__ float warp_sum[WARPS];
    __shared__ float row_max, row_sum;
    const float *in = x + (size_t)blockIdx.x * cols;
    float *out = y + (size_t)blockIdx.x * cols;
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;

    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += THREADS) m = fmaxf(m, in[c]);
    __shared__ float kl_red[256];
    kl_red[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) kl_red[threadIdx.x] = fmaxf(kl_red[threadIdx.x], kl_red[threadIdx.x + s]);
        __syncthreads();
    }
    m = kl_red[0];
    __syncthreads();
    if (threadIdx.x == 0) {
        float best = m;
        row_max = best;
    }
    __syncthreads();
    const float mx = row_max;

    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += THREADS) s += __expf(in[c] - mx);
    for (int o = 16; o >= 1; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) warp_sum[warp] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int w = 0; w < WARPS; ++w) total += warp_sum[w];
        row_sum = total;
    }
    __syncthreads();
    const float inv = 1.0f / row_sum;
    for (int c = threadIdx.x; c < cols; c += THREADS) out[c] = __expf(in[c] - mx) * inv;
}

extern "C" void launch(const float *x, float *y, int rows, int cols, cudaStream_t stream)
{
    softmax_rows<<<rows, THREADS, 0, stream>>>(x, y, cols);
}
