// test: remove coarsen@energy_pairs:21:samples
// Signal energy: a block of THREADS threads walks pairs of samples (one float2 gathered from two
// scalar loads, as a hand-written or de-vectorized kernel has it) in one guarded step per thread,
// the pair's energy taken by a helper; thread 0 of block 0 adds the odd last sample, if any; block
// sums meet in shared memory, then one atomicAdd.
#include <cuda_runtime.h>

namespace sig {
__device__ __forceinline__ float energy(const float2& p) { return p.x * p.x + p.y * p.y; }
}  // namespace sig

using sig::energy;

template <int THREADS>
__global__ void energy_pairs(const float* samples, long npairs, const float* last, float* result)
{
    __shared__ float partial[THREADS];
    const long pair = (long)blockIdx.x * THREADS + threadIdx.x;
    float e = 0.0f;
    if (pair < npairs) {
        e += energy(make_float2(samples[2 * pair], samples[2 * pair + 1]));
    }
    if (last && blockIdx.x == 0 && threadIdx.x == 0) e += last[0] * last[0];
    partial[threadIdx.x] = e;
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(result, partial[0]);
}

extern "C" void launch(const float* x, float* out, int n, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(float), stream);
    const long pairs = n / 2;
    const float* last = n % 2 ? x + n - 1 : nullptr;
    energy_pairs<128><<<(unsigned)((pairs + 127) / 128 + 1), 128, 0, stream>>>(x, pairs, last, out);
}
