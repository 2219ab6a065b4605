// test: apply row-cache@rms_norm:13 items=16
#include <cuda_runtime.h>

// RMS norm, one block of 128 threads per row; rows indexed in place, strided by blockDim.x.
__global__ void rms_norm(const float* __restrict__ in, const float* __restrict__ w, float* __restrict__ out,
                         int nrows, int ncols, float eps)
{
    const int r = blockIdx.x;
    if (r >= nrows) return;
    __shared__ float partial[128];
    float acc = 0.f;
    // sum of squares
    // row-cache: in[(size_t)r * ncols + i] read once into registers (16 per thread) while ncols <= 16 * 128
    float kl_rc[16];
    const bool kl_rc_on = (long long)(threadIdx.x) >= 0 && (ncols) <= 16 * 128;
    if (kl_rc_on) {
        #pragma unroll
        for (int kl_k = 0; kl_k < 16; kl_k++) {
            const int i = (threadIdx.x) + kl_k * 128;
            if (i < (ncols)) {
                kl_rc[kl_k] = in[(size_t)r * ncols + i];
            }
        }
    }
    if (kl_rc_on) {
        #pragma unroll
        for (int kl_k = 0; kl_k < 16; kl_k++) {
            const int i = (threadIdx.x) + kl_k * 128;
            if (i < (ncols)) {
                const float v = kl_rc[kl_k];
                acc += v * v;
            }
        }
    } else {
        for (int i = threadIdx.x; i < ncols; i += blockDim.x) {
            const float v = in[(size_t)r * ncols + i];
            acc += v * v;
        }
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int s = 64; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const float scale = rsqrtf(partial[0] / ncols + eps);
    if (kl_rc_on) {
        #pragma unroll
        for (int kl_k = 0; kl_k < 16; kl_k++) {
            const int i = (threadIdx.x) + kl_k * 128;
            if (i < (ncols)) out[(size_t)r * ncols + i] = kl_rc[kl_k] * scale * w[i];
        }
    } else {
        for (int i = threadIdx.x; i < ncols; i += blockDim.x)
            out[(size_t)r * ncols + i] = in[(size_t)r * ncols + i] * scale * w[i];
    }
}

extern "C" void launch(const float* in, const float* w, float* out, int nrows, int ncols, cudaStream_t s)
{
    rms_norm<<<nrows, 128, 0, s>>>(in, w, out, nrows, ncols, 1e-6f);
}
