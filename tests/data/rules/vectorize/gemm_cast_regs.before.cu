// test: remove vectorize@mm_rows:23
// An SGEMM row kernel in a C style: constants in a namespace, C casts to float4 pointers on the
// vector path (two guarded paths on the same flag: the loads of b and the stores of c), the else
// paths reading and writing a float4 register array lane by lane. One site takes both paths.
#include <cuda_runtime.h>

namespace cfg {
constexpr int COLS = 8;                  // columns of c per thread: two float4
}

template <bool ALIGNED>
__global__ void mm_rows(int m, int n, int k, const float* __restrict__ a, const float* __restrict__ b,
                        float* __restrict__ c)
{
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const int col = (blockIdx.x * blockDim.x + threadIdx.x) * cfg::COLS;
    if (row >= m || col >= n) return;
    float4 acc[2] = {make_float4(0.f, 0.f, 0.f, 0.f), make_float4(0.f, 0.f, 0.f, 0.f)};
    const float* brow = b + col;
    for (int kk = 0; kk < k; ++kk, brow += n) {
        const float av = a[(size_t)row * k + kk];
        float4 bv[2];
        if (ALIGNED) {
            bv[0] = *(const float4*)(brow);
            bv[1] = col + 4 < n ? *(const float4*)(brow + 4) : make_float4(0.f, 0.f, 0.f, 0.f);
        } else {
            for (int h = 0; h < 2; ++h) {
                bv[h].x = col + 4 * h + 0 < n ? brow[4 * h + 0] : 0.f;
                bv[h].y = col + 4 * h + 1 < n ? brow[4 * h + 1] : 0.f;
                bv[h].z = col + 4 * h + 2 < n ? brow[4 * h + 2] : 0.f;
                bv[h].w = col + 4 * h + 3 < n ? brow[4 * h + 3] : 0.f;
            }
        }
        for (int h = 0; h < 2; ++h) {
            acc[h].x += av * bv[h].x;
            acc[h].y += av * bv[h].y;
            acc[h].z += av * bv[h].z;
            acc[h].w += av * bv[h].w;
        }
    }
    float* crow = c + (size_t)row * n + col;
    if (ALIGNED) {
        *(float4*)(crow) = acc[0];
        if (col + 4 < n) *(float4*)(crow + 4) = acc[1];
    } else {
        for (int h = 0; h < 2; ++h) {
            if (col + 4 * h + 0 < n) crow[4 * h + 0] = acc[h].x;
            if (col + 4 * h + 1 < n) crow[4 * h + 1] = acc[h].y;
            if (col + 4 * h + 2 < n) crow[4 * h + 2] = acc[h].z;
            if (col + 4 * h + 3 < n) crow[4 * h + 3] = acc[h].w;
        }
    }
}

extern "C" void launch(const float* a, const float* b, float* c, int m, int n, int k, cudaStream_t stream)
{
    dim3 block(16, 16), grid((n + 16 * cfg::COLS - 1) / (16 * cfg::COLS), (m + 15) / 16);
    if (n % 4 == 0 && ((unsigned long long)b | (unsigned long long)c) % 16 == 0)
        mm_rows<true><<<grid, block, 0, stream>>>(m, n, k, a, b, c);
    else
        mm_rows<false><<<grid, block, 0, stream>>>(m, n, k, a, b, c);
}
