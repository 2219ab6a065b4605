// test: apply row-cache@row_softmax:17
#include <cuda_runtime.h>
#include <float.h>

constexpr int kThreads = 256;

template <typename T>
__device__ T block_max(T v, T* scratch);
__device__ float block_sum(float v, float* scratch);

__global__ void __launch_bounds__(kThreads) row_softmax(const float* src, float* dst, int width)
{
    __shared__ float scratch[kThreads / 32];
    const float* row_in = src + (size_t)blockIdx.x * width;
    float* row_out = dst + (size_t)blockIdx.x * width;
    float m = -FLT_MAX;
    // row-cache: row_in[j] read once into registers (32 per thread) while width <= 32 * 256
    float kl_rc[32];
    const bool kl_rc_on = (long long)(threadIdx.x) >= 0 && (width) <= 32 * 256;
    if (kl_rc_on) {
        #pragma unroll
        for (int kl_k = 0; kl_k < 32; kl_k++) {
            const int j = (threadIdx.x) + kl_k * 256;
            if (j < (width)) {
                kl_rc[kl_k] = row_in[j];
            }
        }
    }
    if (kl_rc_on) {
        #pragma unroll
        for (int kl_k = 0; kl_k < 32; kl_k++) {
            const int j = (threadIdx.x) + kl_k * 256;
            if (j < (width)) m = fmaxf(m, kl_rc[kl_k]);
        }
    } else {
        for (int j = threadIdx.x; j < width; j += kThreads)
            m = fmaxf(m, row_in[j]);
    }
    m = block_max(m, scratch);
    float z = 0.0f;
    if (kl_rc_on) {
        #pragma unroll
        for (int kl_k = 0; kl_k < 32; kl_k++) {
            const int j = (threadIdx.x) + kl_k * 256;
            if (j < (width)) {
                z += __expf(kl_rc[kl_k] - m);
            }
        }
    } else {
    #pragma unroll 4
        for (int j = threadIdx.x; j < width; j += kThreads) {
            z += __expf(row_in[j] - m);
        }
    }
    z = block_sum(z, scratch);
    const float inv = 1.0f / z;
    if (kl_rc_on) {
        #pragma unroll
        for (int kl_k = 0; kl_k < 32; kl_k++) {
            const int j = (threadIdx.x) + kl_k * 256;
            if (j < (width)) {
                row_out[j] = __expf(kl_rc[kl_k] - m) * inv;
            }
        }
    } else {
        for (int j = threadIdx.x; j < width; j += kThreads) {
            row_out[j] = __expf(row_in[j] - m) * inv;
        }
    }
}

template <typename T>
__device__ T block_max(T v, T* scratch)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    v = scratch[0];
    for (int w = 1; w < kThreads / 32; w++) v = fmaxf(v, scratch[w]);
    __syncthreads();
    return v;
}

__device__ float block_sum(float v, float* scratch)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    v = scratch[0];
    for (int w = 1; w < kThreads / 32; w++) v += scratch[w];
    __syncthreads();
    return v;
}

extern "C" void launch(const float* src, float* dst, int height, int width, cudaStream_t stream)
{
    row_softmax<<<height, kThreads, 0, stream>>>(src, dst, width);
}
