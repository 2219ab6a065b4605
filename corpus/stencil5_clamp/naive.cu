// stencil5_clamp, naive: one thread per cell on a 2-D grid of 32 x 8 blocks; the neighbours'
// indices are clamped into the grid by a helper, the cells addressed through a macro.
#include <cuda_runtime.h>

#define IDX(i, j) ((i) * nx + (j))

__device__ __forceinline__ int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

__global__ void smooth5(const float* u, float* out, int ny, int nx)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < ny && j < nx) {
        const int im = clampi(i - 1, 0, ny - 1), ip = clampi(i + 1, 0, ny - 1);
        const int jm = clampi(j - 1, 0, nx - 1), jp = clampi(j + 1, 0, nx - 1);
        out[IDX(i, j)] = 0.5f * u[IDX(i, j)] + 0.125f * (u[IDX(im, j)] + u[IDX(ip, j)] + u[IDX(i, jm)] + u[IDX(i, jp)]);
    }
}

extern "C" void launch(const float* u, float* out, int ny, int nx, cudaStream_t stream)
{
    dim3 block(32, 8);
    dim3 grid((nx + 31) / 32, (ny + 7) / 8);
    smooth5<<<grid, block, 0, stream>>>(u, out, ny, nx);
}
