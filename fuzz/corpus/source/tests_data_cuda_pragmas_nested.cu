// pragmas_nested: pragmas of several kinds: unroll with and without a count, on a loop
// whose body is not braced, nounroll, and a pragma that is not attached to any loop.
#include <cuda_runtime.h>

#pragma nv_diag_suppress 177

__global__ void stencil(const float *__restrict__ in, float *__restrict__ out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < 2 || i >= n - 2) return;
    float acc = 0.0f;
#pragma unroll
    for (int a = -2; a <= 2; ++a)
#pragma unroll 5
        for (int b = 0; b < 5; ++b)
            acc += in[i + a] * (b == a + 2 ? 1.0f : 0.0f);
    /* a comment between the pragma and its loop */
#pragma nounroll
    // another one
    for (int r = 0; r < 3; r++) acc *= 0.5f;
    out[i] = acc;
}

extern "C" void launch(const float *in, float *out, int n, cudaStream_t stream)
{
    stencil<<<(n + 255) / 256, 256, 0, stream>>>(in, out, n);
}
