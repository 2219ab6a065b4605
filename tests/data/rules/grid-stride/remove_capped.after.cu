// test: remove grid-stride@square:5 | apply grid-stride@square:5 waves=32
#include <cuda_runtime.h>
__global__ void square(double *x, unsigned n)
{
    unsigned j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < n) x[j] = x[j] * x[j];
}
extern "C" void launch(double *x, int n, cudaStream_t stream)
{
    unsigned blocks = (n + 511) / 512;
    square<<<blocks, 512, 0, stream>>>(x, (unsigned)n);
}
