// test: remove interior-path@jacobi5:32
// 5-point Jacobi step on an nx x ny grid, fixed (zero) outside; two helpers: one that tests every
// neighbour, one for the threads whose four neighbours are all inside.
#include <cuda_runtime.h>

__device__ __forceinline__ float at_or_zero(const float* u, int nx, int ny, int i, int j)
{
    return (i >= 0 && i < nx && j >= 0 && j < ny) ? u[j * nx + i] : 0.0f;
}

__device__ void step_edge(const float* __restrict__ u, float* __restrict__ v, int nx, int ny, int i, int j)
{
    if (i >= nx || j >= ny) return;
    v[j * nx + i] = 0.25f * (at_or_zero(u, nx, ny, i - 1, j) + at_or_zero(u, nx, ny, i + 1, j) +
                             at_or_zero(u, nx, ny, i, j - 1) + at_or_zero(u, nx, ny, i, j + 1));
}

// every neighbour inside: no test
__device__ void step_inner(const float* __restrict__ u, float* __restrict__ v, int nx, int ny, int i, int j)
{
    const int c = j * nx + i;
    v[c] = 0.25f * (u[c - 1] + u[c + 1] + u[c - nx] + u[c + nx]);
}

__global__ void jacobi5(const float* __restrict__ u, float* __restrict__ v, int nx, int ny)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int bi = blockIdx.x * blockDim.x, bj = blockIdx.y * blockDim.y;
    const bool inner = bi >= 1 && bj >= 1 && bi + (int)blockDim.x + 1 <= nx && bj + (int)blockDim.y + 1 <= ny;
    // the block and a ring of one around it lie inside the grid
    if (inner)
        step_inner(u, v, nx, ny, i, j);
    else
        step_edge(u, v, nx, ny, i, j);
}

extern "C" void launch(const float* u, float* v, int ny, int nx, cudaStream_t stream)
{
    const dim3 block(16, 16);
    const dim3 grid((nx + 15) / 16, (ny + 15) / 16);
    jacobi5<<<grid, block, 0, stream>>>(u, v, nx, ny);
}
