// log_softmax, naive: one thread per row, written against a storage type and an accumulation
// type (template parameters; launch() instantiates float/float); the first two passes walk the
// row with a pointer, the last one with an index.
#include <cuda_runtime.h>
#include <math.h>

template <typename scalar_t, typename accscalar_t>
__global__ void log_softmax_forward(const scalar_t* input, scalar_t* output, int outer, int dim)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= outer) return;
    const scalar_t* in = input + (size_t)row * dim;
    scalar_t* out = output + (size_t)row * dim;

    accscalar_t max_v = -INFINITY;
    for (const scalar_t* p = in; p < in + dim; ++p) max_v = max(max_v, static_cast<accscalar_t>(*p));
    accscalar_t sum = 0;
    for (const scalar_t* p = in; p < in + dim; ++p) sum += exp(static_cast<accscalar_t>(*p) - max_v);
    const accscalar_t lse = max_v + log(sum);
    for (int i = 0; i < dim; ++i) out[i] = static_cast<scalar_t>(static_cast<accscalar_t>(in[i]) - lse);
}

extern "C" void launch(const float* input, float* output, int outer, int dim, cudaStream_t stream)
{
    const int threads = 128;
    const int blocks = (outer + threads - 1) / threads;
    log_softmax_forward<float, float><<<blocks, threads, 0, stream>>>(input, output, outer, dim);
}
