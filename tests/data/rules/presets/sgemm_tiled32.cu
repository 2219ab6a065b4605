// presets: a shared-memory tiled f32 NN product on a 32 x 32 block (1024 threads): 8 x 8 outputs
// per thread would need 64 KiB of tiles, over the 48 KiB of static shared memory (refused).
#include <cuda_runtime.h>

#define TS 32

__global__ void mm32(const float *X, const float *Y, float *Z, int rows, int cols, int inner)
{
    __shared__ float xs[TS][TS];
    __shared__ float ys[TS][TS];
    int r = blockIdx.y * TS + threadIdx.y;
    int c = blockIdx.x * TS + threadIdx.x;
    float v = 0.0f;
    for (int t = 0; t < inner; t += TS) {
        xs[threadIdx.y][threadIdx.x] = (r < rows && t + threadIdx.x < inner) ? X[r * inner + t + threadIdx.x] : 0.0f;
        ys[threadIdx.y][threadIdx.x] = (t + threadIdx.y < inner && c < cols) ? Y[(t + threadIdx.y) * cols + c] : 0.0f;
        __syncthreads();
        for (int u = 0; u < TS; u++) v += xs[threadIdx.y][u] * ys[u][threadIdx.x];
        __syncthreads();
    }
    if (r < rows && c < cols) Z[r * cols + c] = v;
}

extern "C" void launch(const float *X, const float *Y, float *Z, int rows, int cols, int inner, cudaStream_t stream)
{
    dim3 block(TS, TS);
    dim3 grid((cols + TS - 1) / TS, (rows + TS - 1) / TS);
    mm32<<<grid, block, 0, stream>>>(X, Y, Z, rows, cols, inner);
}
