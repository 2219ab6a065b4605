// test: apply block-size@scale:5:THREADS threads=128 | apply block-size@scale:5:THREADS threads=256
// The thread count in a namespace of the file, which the launch opens with 'using namespace'.
#include <cuda_runtime.h>
namespace cfg {
constexpr int THREADS = 256;
}
__global__ void scale(const float* x, float* y, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.f * x[i];
}
extern "C" void launch(const float* x, float* y, int n, cudaStream_t s)
{
    using namespace cfg;
    scale<<<(n + THREADS - 1) / THREADS, THREADS, 0, s>>>(x, y, n);
}
