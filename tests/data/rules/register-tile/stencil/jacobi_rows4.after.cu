// test: remove register-tile@jacobi5_rows:16:ROWS
// 5-point Jacobi step, zero outside; each thread walks ROWS outputs down its column, keeping the rows
// above, at and below in registers (a rolling window, no array)
#include <cuda_runtime.h>

#define ROWS 1
#define BLK_X 32
#define BLK_Y 8

__global__ void jacobi5_rows(const float* __restrict__ u, float* __restrict__ v, int nx, int ny)
{
    const int i = blockIdx.x * BLK_X + threadIdx.x;
    const int j0 = (blockIdx.y * BLK_Y + threadIdx.y) * ROWS;
    if (i >= nx) return;
    float up = j0 > 0 ? u[(j0 - 1) * nx + i] : 0.0f, mid = j0 < ny ? u[j0 * nx + i] : 0.0f;
    for (int r = 0; r < ROWS; r++) {
        const int j = j0 + r;
        if (j >= ny) break;
        const float down = j + 1 < ny ? u[(j + 1) * nx + i] : 0.0f;
        const float left = i > 0 ? u[j * nx + i - 1] : 0.0f, right = i + 1 < nx ? u[j * nx + i + 1] : 0.0f;
        v[j * nx + i] = 0.25f * (up + down + left + right);
        up = mid;
        mid = down;
    }
}

extern "C" void launch(const float* u, float* v, int ny, int nx, cudaStream_t stream)
{
    const dim3 grid((nx + BLK_X - 1) / BLK_X, (ny + BLK_Y * ROWS - 1) / (BLK_Y * ROWS));
    jacobi5_rows<<<grid, dim3(BLK_X, BLK_Y), 0, stream>>>(u, v, nx, ny);
}
