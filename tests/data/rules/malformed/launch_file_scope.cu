// unusual: launches outside any named host function (a global initializer, a lambda in a struct)
#include <cuda_runtime.h>

#define THREADS 128

__global__ void fill(float *a, int n)
{
    for (int i = blockIdx.x * THREADS + threadIdx.x; i < n; i += gridDim.x * THREADS) a[i] = 1.0f;
}

static float *g_buf = nullptr;
static int g_started = (fill<<<1, THREADS>>>(g_buf, 0), 0);

struct Runner {
    int n;
    void go(float *a) const
    {
        auto f = [&](int blocks) { fill<<<blocks, THREADS>>>(a, n); };
        f((n + THREADS - 1) / THREADS);
    }
};

extern "C" void launch(float *a, int n, cudaStream_t stream)
{
    (void)stream;
    Runner{n}.go(a);
}
