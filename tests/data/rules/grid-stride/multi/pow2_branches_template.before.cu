// test: remove grid-stride@branch_sum:15
// Two loops chosen by a template flag: a power-of-two n is a whole number of pairs of blocks, so
// that instance adds both elements of a pair without a test; the other adds one element a step.
// The block adds its threads' partials in shared memory and thread 0 adds the block's sum.
#include <cuda_runtime.h>

template <unsigned int blockSize, bool nIsPow2>
__global__ void branch_sum(const float* __restrict__ a, float* __restrict__ total, unsigned int n)
{
    __shared__ float part[blockSize];
    const unsigned int tid = threadIdx.x;
    float s = 0.0f;
    if (nIsPow2) {
        unsigned int i = blockIdx.x * blockSize * 2 + tid;
        while (i < n) {
            s += a[i] + a[i + blockSize];
            i += blockSize * 2 * gridDim.x;
        }
    } else {
        unsigned int j = blockIdx.x * blockSize + tid;
        while (j < n) {
            s += a[j];
            j += blockSize * gridDim.x;
        }
    }
    part[tid] = s;
    __syncthreads();
    for (unsigned int h = blockSize / 2; h > 0; h >>= 1) {
        if (tid < h) part[tid] += part[tid + h];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(total, part[0]);
}

static bool pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

extern "C" void launch(const float* a, float* total, int n, cudaStream_t stream)
{
    cudaMemsetAsync(total, 0, sizeof(float), stream);
    const int blocks = 96;
    if (pow2(n) && n >= 512)
        branch_sum<256, true><<<blocks, 256, 0, stream>>>(a, total, (unsigned)n);
    else
        branch_sum<256, false><<<blocks, 256, 0, stream>>>(a, total, (unsigned)n);
}
