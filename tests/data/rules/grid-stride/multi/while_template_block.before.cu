// test: remove grid-stride@byte_histogram:10
// A byte histogram in a templated kernel: the index and the stride through the block-size
// template parameter, a `while` loop with a comment and a local inside its body.
#include <cuda_runtime.h>

template <int BLOCK>
__global__ void byte_histogram(const unsigned char* __restrict__ data, unsigned int* __restrict__ bins, unsigned n)
{
    unsigned i = blockIdx.x * BLOCK + threadIdx.x;
    while (i < n) {
        // one byte, one bin
        const unsigned b = data[i];
        atomicAdd(&bins[b], 1u);
        i += BLOCK * gridDim.x;
    }
}

extern "C" void launch(const unsigned char* data, unsigned int* bins, int n, cudaStream_t stream)
{
    cudaMemsetAsync(bins, 0, 256 * sizeof(unsigned int), stream);
    byte_histogram<512><<<1024, 512, 0, stream>>>(data, bins, (unsigned)n);
}
