// test: remove grid-stride@tile_sum:16
// A sum of n floats plus a bias, three loads a block apart per step of a grid-stride loop over
// whole tiles (no bounds test per load), each into its own accumulator; the thread's last, partial
// tile after it; block 0 adds the bias once; warp shuffles and one atomic per warp.
#include <cuda_runtime.h>

#define BT 128
#define PER 3

__global__ void tile_sum(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out, int n)
{
    float a[PER];
    for (int r = 0; r < PER; r++) a[r] = 0.0f;
    int i = blockIdx.x * (BT * PER) + threadIdx.x;
    const int jump = gridDim.x * (BT * PER);
    if (i + (PER - 1) * BT < n) {
        for (int r = 0; r < PER; r++) a[r] += x[i + r * BT];
        i += jump;
    }
    for (int r = 0; r < PER; r++) {
        const int j = i + r * BT;
        if (j < n) a[r] += x[j];
    }
    float t = a[0] + a[1] + a[2];
    if (blockIdx.x == 0 && threadIdx.x == 0) t += bias[0];
    for (int o = 16; o > 0; o >>= 1) t += __shfl_down_sync(0xffffffffu, t, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, t);
}

extern "C" void launch(const float* x, const float* bias, float* out, int n, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    tile_sum<<<(n > 0 ? (n + 3 * BT - 1) / (3 * BT) : 1), BT, 0, stream>>>(x, bias, out, n);
}
