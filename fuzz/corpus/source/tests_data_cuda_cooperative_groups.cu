// cooperative_groups: a thread block and 32-wide tiles from cooperative_groups, a tile
// shuffle reduction, cg::reduce, and group synchronisation.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cuda_runtime.h>

namespace cg = cooperative_groups;

__global__ void group_sum(const float *__restrict__ x, float *__restrict__ out, int n)
{
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
    __shared__ float warp_sums[32];
    int i = block.group_index().x * block.size() + block.thread_rank();
    float v = i < n ? x[i] : 0.0f;
    for (int off = tile.size() / 2; off > 0; off /= 2) v += tile.shfl_down(v, off);
    if (tile.thread_rank() == 0) warp_sums[tile.meta_group_rank()] = v;
    block.sync();
    if (tile.meta_group_rank() == 0) {
        float w = tile.thread_rank() < tile.meta_group_size() ? warp_sums[tile.thread_rank()] : 0.0f;
        w = cg::reduce(tile, w, cg::plus<float>());
        if (tile.thread_rank() == 0) atomicAdd(out, w);
    }
    cg::sync(block);
}

extern "C" void launch(const float *x, float *out, int n, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    group_sum<<<(n + 255) / 256, 256, 0, stream>>>(x, out, n);
}
