// test: apply row-parallel@layernorm:9 unit=block threads=256 | remove row-parallel@layernorm:10
// Layernorm, mean then variance around it, one thread per row -> a block of 256 per row.
#include <cuda_runtime.h>

#define EPS 1e-5f

__global__ void layernorm(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols)
{
    int row = blockIdx.x;
    const int kl_lane = threadIdx.x;
    if (row < rows) {
        const float* xr = x + row * cols;
        float* yr = y + row * cols;
        float sum = 0.0f;
        for (int c = kl_lane; c < cols; c += 256) sum += xr[c];
        for (int kl_o = 16; kl_o > 0; kl_o >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, kl_o);
        {
            __shared__ float kl_part[8];
            if (kl_lane % 32 == 0) kl_part[kl_lane / 32] = sum;
            __syncthreads();
            sum = kl_part[0];
            for (int kl_w = 1; kl_w < 8; kl_w++) sum += kl_part[kl_w];
        }
        float mean = sum / cols;
        float sq = 0.0f;
        for (int c = kl_lane; c < cols; c += 256) {
            float d = xr[c] - mean;
            sq += d * d;
        }
        for (int kl_o = 16; kl_o > 0; kl_o >>= 1) sq += __shfl_xor_sync(0xffffffff, sq, kl_o);
        {
            __shared__ float kl_part[8];
            if (kl_lane % 32 == 0) kl_part[kl_lane / 32] = sq;
            __syncthreads();
            sq = kl_part[0];
            for (int kl_w = 1; kl_w < 8; kl_w++) sq += kl_part[kl_w];
        }
        float rstd = 1.0f / sqrtf(sq / cols + EPS);
        for (int c = kl_lane; c < cols; c += 256) yr[c] = (xr[c] - mean) * rstd * gamma[c] + beta[c];
    }
}

extern "C" void launch(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols,
                       cudaStream_t stream)
{
    layernorm<<<((rows + 127) / 128) * 128, 256, 0, stream>>>(x, gamma, beta, y, rows, cols);
}
