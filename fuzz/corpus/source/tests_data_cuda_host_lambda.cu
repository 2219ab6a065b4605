// host_lambda: launches made from inside host lambdas, with dim3 configurations
// built inline and a kernel taking a template parameter.
#include <cuda_runtime.h>

template <int WIDTH>
__global__ void fill(float *y, float v, int n)
{
    int i = blockIdx.x * WIDTH + threadIdx.x;
    if (i < n) y[i] = v;
}

extern "C" void launch(float *y, int n, cudaStream_t stream)
{
    auto go = [&](float v) {
        fill<128><<<dim3((n + 127) / 128), dim3(128), 0, stream>>>(y, v, n);
    };
    auto twice = [=](int k) {
        for (int r = 0; r < k; ++r) fill<64><<<(n + 63) / 64, 64, 0, stream>>>(y, 1.0f * r, n);
    };
    go(0.0f);
    twice(2);
}
