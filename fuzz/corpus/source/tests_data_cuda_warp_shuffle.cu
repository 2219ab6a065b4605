// warp_shuffle: butterfly reductions with __shfl_xor_sync, a ballot, the active mask
// and a broadcast, one warp per row.
#include <cuda_runtime.h>

__global__ void row_max(const float *__restrict__ x, float *__restrict__ out, int *__restrict__ nonzero, int rows,
                        int cols)
{
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x & 31;
    if (warp >= rows) return;
    float m = -3.0e38f;
    for (int c = lane; c < cols; c += 32) m = fmaxf(m, x[warp * cols + c]);
    for (int mask = 16; mask > 0; mask /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, mask));
    unsigned active = __activemask();
    unsigned positive = __ballot_sync(active, m > 0.0f);
    m = __shfl_sync(0xffffffff, m, 0);
    if (lane == 0) {
        out[warp] = m;
        nonzero[warp] = __popc(positive);
    }
}

extern "C" void launch(const float *x, float *out, int *nonzero, int rows, int cols, cudaStream_t stream)
{
    int warps_per_block = 4;
    row_max<<<(rows + warps_per_block - 1) / warps_per_block, 32 * warps_per_block, 0, stream>>>(x, out, nonzero,
                                                                                              rows, cols);
}
