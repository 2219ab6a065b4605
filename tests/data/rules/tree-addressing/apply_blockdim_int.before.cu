// test: apply tree-addressing@interleaved_sum:13 | remove tree-addressing@interleaved_sum:13 exact
// The textbook first reduction: one element per thread, the interleaved tree over blockDim.x with
// a signed stride, each block's sum added to the output by thread 0.
#include <cuda_runtime.h>

__global__ void interleaved_sum(const int* __restrict__ in, int* __restrict__ out, int n)
{
    extern __shared__ int part[];
    const int t = threadIdx.x;
    const int g = blockIdx.x * blockDim.x + t;
    part[t] = g < n ? in[g] : 0;
    __syncthreads();
    for (int s = 1; s < blockDim.x; s *= 2) {
        if (t % (2 * s) == 0) part[t] += part[t + s];
        __syncthreads();
    }
    if (t == 0) atomicAdd(out, part[0]);
}

extern "C" void launch(const int* in, int* out, int n, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(int), stream);
    interleaved_sum<<<(n + 255) / 256, 256, 256 * sizeof(int), stream>>>(in, out, n);
}
