// test: remove grid-stride@hist:26
// The histogram expert's loops: an unrolled uint4 main loop, its remainder, a scalar tail.
#include <cuda_runtime.h>
#include <stdint.h>

constexpr int THREADS = 256;
constexpr int VEC = 16;
constexpr int UNROLL = 2;

__device__ __forceinline__ void count4(unsigned w, int* bins)
{
    atomicAdd(&bins[w & 0xffu], 1);
    atomicAdd(&bins[(w >> 8) & 0xffu], 1);
    atomicAdd(&bins[(w >> 16) & 0xffu], 1);
    atomicAdd(&bins[(w >> 24) & 0xffu], 1);
}

__global__ void hist(const uint8_t* x, int32_t* bins, int n, bool aligned)
{
    const size_t gtid = (size_t)blockIdx.x * THREADS + threadIdx.x;
    const size_t n16 = aligned ? (size_t)n / VEC : 0;
    const uint4* x16 = reinterpret_cast<const uint4*>(x);
    size_t i = gtid;
    if (i < n16) {
        const uint4 q = x16[i];
        count4(q.x, bins);
        count4(q.y, bins);
        count4(q.z, bins);
        count4(q.w, bins);
    }
    size_t j = n16 * VEC + gtid;
    if (j < (size_t)n) atomicAdd(&bins[x[j]], 1);
}

extern "C" void launch(const uint8_t* x, int32_t* bins, int n, cudaStream_t stream)
{
    cudaMemsetAsync(bins, 0, 256 * sizeof(int32_t), stream);
    if (n <= 0) return;
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const bool aligned = (uintptr_t)x % 16 == 0;
    long long grid = ((long long)n + THREADS * VEC * UNROLL - 1) / (THREADS * VEC * UNROLL);
    if (grid > sms * 4LL) grid = sms * 4LL;
    if (grid < 1) grid = 1;
    hist<<<(n + THREADS - 1) / THREADS, THREADS, 0, stream>>>(x, bins, n, aligned);
}
