// test: apply row-parallel@layernorm:9 unit=block threads=256 | remove row-parallel@layernorm:10
// Layernorm, mean then variance around it, one thread per row -> a block of 256 per row.
#include <cuda_runtime.h>

#define EPS 1e-5f

__global__ void layernorm(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < rows) {
        const float* xr = x + row * cols;
        float* yr = y + row * cols;
        float sum = 0.0f;
        for (int c = 0; c < cols; c++) sum += xr[c];
        float mean = sum / cols;
        float sq = 0.0f;
        for (int c = 0; c < cols; c++) {
            float d = xr[c] - mean;
            sq += d * d;
        }
        float rstd = 1.0f / sqrtf(sq / cols + EPS);
        for (int c = 0; c < cols; c++) yr[c] = (xr[c] - mean) * rstd * gamma[c] + beta[c];
    }
}

extern "C" void launch(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols,
                       cudaStream_t stream)
{
    layernorm<<<(rows + 127) / 128, 128, 0, stream>>>(x, gamma, beta, y, rows, cols);
}
