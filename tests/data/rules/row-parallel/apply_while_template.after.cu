// test: apply row-parallel@row_stats:8 unit=block threads=128 | remove row-parallel@row_stats:9
// Per-row minimum and count of positives over a templated element type, with a while loop.
#include <cuda_runtime.h>

template <typename T>
__global__ void row_stats(const T* x, T* lo, int* pos, int rows, int cols)
{
    int r = blockIdx.x;
    const int kl_lane = threadIdx.x;
    if (r < rows) {
        const T* xr = x + (size_t)r * cols;
        T m = xr[0];
        int n = 0;
        int c = kl_lane;
        while (c < cols) {
            T v = xr[c];
            m = min(m, v);
            if (v > T(0)) n++;
            c += 128;
        }
        for (int kl_o = 16; kl_o > 0; kl_o >>= 1) m = min(m, __shfl_xor_sync(0xffffffff, m, kl_o));
        {
            __shared__ T kl_part[4];
            if (kl_lane % 32 == 0) kl_part[kl_lane / 32] = m;
            __syncthreads();
            m = kl_part[0];
            for (int kl_w = 1; kl_w < 4; kl_w++) m = min(m, kl_part[kl_w]);
        }
        for (int kl_o = 16; kl_o > 0; kl_o >>= 1) n += __shfl_xor_sync(0xffffffff, n, kl_o);
        {
            __shared__ int kl_part[4];
            if (kl_lane % 32 == 0) kl_part[kl_lane / 32] = n;
            __syncthreads();
            n = kl_part[0];
            for (int kl_w = 1; kl_w < 4; kl_w++) n += kl_part[kl_w];
        }
        if (kl_lane == 0) lo[r] = m;
        if (kl_lane == 0) pos[r] = n;
    }
}

extern "C" void launch(const float* x, float* lo, int* pos, int rows, int cols, cudaStream_t stream)
{
    row_stats<float><<<((rows + 63) / 64) * 64, 128, 0, stream>>>(x, lo, pos, rows, cols);
}
