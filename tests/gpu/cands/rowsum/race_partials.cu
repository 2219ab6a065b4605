// rowsum, broken (a race): each warp writes its partial sum to shared memory and warp 0 reads
// all of them with no barrier in between. On most runs warp 0 is late enough and the sums are
// right, so the default stages pass it; racecheck sees the read-after-write hazard.
#include <cuda_runtime.h>

#define WARPS 8

__global__ void rowsum_partials(const float *__restrict__ x, float *__restrict__ y, int cols)
{
    __shared__ float partial[WARPS];
    const float *row = x + (size_t)blockIdx.x * cols;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += 32 * WARPS) s += row[c];
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
    if (lane == 0) partial[warp] = s;
    // missing: __syncthreads();
    if (warp == 0) {
        float t = lane < WARPS ? partial[lane] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) t += __shfl_down_sync(0xffffffffu, t, off);
        if (lane == 0) y[blockIdx.x] = t;
    }
}

extern "C" void launch(const float *x, float *y, int rows, int cols, cudaStream_t stream)
{
    rowsum_partials<<<rows, 32 * WARPS, 0, stream>>>(x, y, cols);
}
