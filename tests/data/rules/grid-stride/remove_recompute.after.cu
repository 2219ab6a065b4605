// test: remove grid-stride@count_pos:8 | apply grid-stride@count_pos:8 waves=8
#include <cuda_runtime.h>

// grid-stride: a grid sized once from the SM count
__global__ void count_pos(const float *x, int *count, int n)
{
    // grid-stride
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int k = 0;
        while (k < 1 && x[i] > 0.0f) {
            atomicAdd(count, 1);
            k++;
        }
    }
}

extern "C" void launch(const float *x, int *count, int n, cudaStream_t stream)
{
    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    cudaMemsetAsync(count, 0, sizeof(int), stream);
    count_pos<<<(n + 256 - 1) / 256, 256, 0, stream>>>(x, count, n);
}
