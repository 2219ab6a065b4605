// test: remove grid-stride@square:5 | apply grid-stride@square:5 waves=32
#include <cuda_runtime.h>
__global__ void square(double *x, unsigned n)
{
    for (unsigned j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += blockDim.x * gridDim.x) x[j] = x[j] * x[j];
}
extern "C" void launch(double *x, int n, cudaStream_t stream)
{
    unsigned blocks = (n + 511) / 512;
    int kl_dev = 0, kl_sms = 0;
    cudaGetDevice(&kl_dev);
    cudaDeviceGetAttribute(&kl_sms, cudaDevAttrMultiProcessorCount, kl_dev);
    square<<<(blocks < kl_sms * 32 ? blocks : kl_sms * 32), 512, 0, stream>>>(x, (unsigned)n);
}
