// multi_stream: several kernels and launches on a stream argument and on the default
// stream, a kernel of a namespace, and a templated host helper that launches.
#include <cuda_runtime.h>

namespace ops {
__global__ void zero(float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 0.0f;
}
} // namespace ops

template <typename T>
__global__ void axpy(T a, const T *x, T *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}

template <typename T>
static void run_axpy(T a, const T *x, T *y, int n, cudaStream_t s)
{
    axpy<T><<<(n + 255) / 256, 256, 0, s>>>(a, x, y, n);
}

extern "C" void launch(const float *x, float *y, int n, cudaStream_t stream)
{
    ops::zero<<<(n + 255) / 256, 256>>>(y, n);
    run_axpy<float>(2.0f, x, y, n, stream);
    axpy<float><<<(n + 255) / 256, 256, 0, stream>>>(1.0f, x, y, n);
}
