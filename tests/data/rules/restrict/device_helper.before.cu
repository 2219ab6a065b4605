// test: apply restrict@gather:11 ldg=1 | remove restrict@gather:11
#include <cuda_runtime.h>
#include <stdint.h>

#define IDX(r, c, ld) ((size_t)(r) * (ld) + (c))

__device__ __forceinline__ float load_scaled(const float *p, size_t i, float a) { return a * p[i]; }
__device__ __forceinline__ void store(float *p, size_t i, float v) { p[i] = v; }

// one output per element of a rows x cols matrix, 2-D grid
__global__ void gather(const float *x, const int32_t *idx, float *y, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) {
        int j = idx[r];
        store(y, IDX(r, c, cols), load_scaled(x, IDX(j, c, cols), 2.0f));
    }
}

extern "C" void launch(const float *x, const int32_t *idx, float *y, int rows, int cols, cudaStream_t stream)
{
    dim3 block(32, 8);
    dim3 grid((cols + 31) / 32, (rows + 7) / 8);
    gather<<<grid, block, 0, stream>>>(x, idx, y, rows, cols);
}
