// test: remove restrict@axpby:5 | apply restrict@axpby:5 ldg=1
#include <cuda_runtime.h>

// restrict
__global__ void __launch_bounds__(256)
axpby(const float* x, const float *y, float* z, float a, float b, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float xv = x[i];
        const float yv = y[i];
        z[i] = a * xv + b * yv;
    }
}

extern "C" void launch(const float *x, const float *y, float *z, float a, float b, int n, cudaStream_t stream)
{
    axpby<<<(n + 255) / 256, 256, 0, stream>>>(x, y, z, a, b, (size_t)n);
}
