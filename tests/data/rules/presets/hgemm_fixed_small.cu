// presets: an f16 product whose sizes are compile-time constants of the file (a projection of
// 64 rows): a 128-row block tile exceeds M and is refused; the 64- and 32-row tiles fit.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

constexpr int ROWS = 64;
constexpr int COLS = 512;
constexpr int DEPTH = 256;

__global__ void proj_f16(const __half *x, const __half *w, float *y)
{
    int row = blockIdx.y * 16 + threadIdx.y;
    int col = blockIdx.x * 16 + threadIdx.x;
    if (row >= ROWS || col >= COLS) return;
    float acc = 0.0f;
    for (int k = 0; k < DEPTH; k++) acc += (float)x[row * DEPTH + k] * (float)w[k * COLS + col];
    y[row * COLS + col] = acc;
}

extern "C" void launch(const __half *x, const __half *w, float *y, cudaStream_t stream)
{
    proj_f16<<<dim3(COLS / 16, ROWS / 16), dim3(16, 16), 0, stream>>>(x, w, y);
}
