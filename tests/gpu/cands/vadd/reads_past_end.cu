// vadd, broken (quietly): every thread loads a whole float4 of each input, also the last
// thread, whose float4 runs up to three elements past the end of a and b when n is not a
// multiple of 4. It stores only the elements that exist, so the sums are right: the stray
// loads land in padding the default run does not watch. Under the sanitizer each tensor ends
// where its allocation ends, and memcheck reports the read.
#include <cuda_runtime.h>

__global__ void vadd_quad(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ c, int n)
{
    const int quad = blockIdx.x * blockDim.x + threadIdx.x;
    const int first = 4 * quad;
    if (first >= n) return;
    const float4 x = *reinterpret_cast<const float4 *>(a + first);
    const float4 y = *reinterpret_cast<const float4 *>(b + first);
    const float s[4] = {x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w};
    for (int k = 0; k < 4 && first + k < n; k++) c[first + k] = s[k];
}

extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)
{
    const int quads = (n + 3) / 4;
    vadd_quad<<<(quads + 127) / 128, 128, 0, stream>>>(a, b, c, n);
}
