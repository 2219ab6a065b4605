// presets: a shared-memory tiled product of half tiles with f32 accumulation on a 32 x 32 block:
// 8 x 8 outputs per thread fit in 32 KiB of tiles but need at least 80 registers per thread, and
// 1024 threads can have 64 each (refused).
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define TS 32

__global__ void hmm32(const __half *X, const __half *Y, float *Z, int rows, int cols, int inner)
{
    __shared__ __half xs[TS][TS];
    __shared__ __half ys[TS][TS];
    int r = blockIdx.y * TS + threadIdx.y;
    int c = blockIdx.x * TS + threadIdx.x;
    float v = 0.0f;
    for (int t = 0; t < inner; t += TS) {
        xs[threadIdx.y][threadIdx.x] = (r < rows && t + threadIdx.x < inner) ? X[r * inner + t + threadIdx.x] : __float2half(0.0f);
        ys[threadIdx.y][threadIdx.x] = (t + threadIdx.y < inner && c < cols) ? Y[(t + threadIdx.y) * cols + c] : __float2half(0.0f);
        __syncthreads();
        for (int u = 0; u < TS; u++) v += __half2float(xs[threadIdx.y][u]) * __half2float(ys[u][threadIdx.x]);
        __syncthreads();
    }
    if (r < rows && c < cols) Z[r * cols + c] = v;
}

extern "C" void launch(const __half *X, const __half *Y, float *Z, int rows, int cols, int inner, cudaStream_t stream)
{
    dim3 block(TS, TS);
    dim3 grid((cols + TS - 1) / TS, (rows + TS - 1) / TS);
    hmm32<<<grid, block, 0, stream>>>(X, Y, Z, rows, cols, inner);
}
