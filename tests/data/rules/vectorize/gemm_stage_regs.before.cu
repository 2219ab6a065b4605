// test: remove vectorize@gemm_stage:23
// A tiled SGEMM in another style: a pointer macro for the float4 loads, a template flag choosing
// them, the else branch filling the same float4 registers one lane at a time (x, y, z, w), a
// transposed shared tile of a and pointer bumps along k. Remove keeps the element-wise loads.
#include <cuda_runtime.h>

#define LDG4(p) (*reinterpret_cast<const float4*>(p))
#define IDX(r, c, ld) ((r) * (ld) + (c))

template <int TILE, bool WIDE>
__global__ void gemm_stage(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float sa[TILE][TILE + 1];   // sa[k][row]: a, transposed
    __shared__ float sb[TILE][TILE];
    const int tx = threadIdx.x % (TILE / 4), ty = threadIdx.x / (TILE / 4);
    const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
    A += IDX(row0, 0, K);
    B += col0;
    float4 ra, rb;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int k0 = 0; k0 < K; k0 += TILE) {
        const bool in_a = row0 + ty < M, in_b = k0 + ty < K;
        if (WIDE) {
            ra = in_a && k0 + tx * 4 < K ? LDG4(A + IDX(ty, tx * 4, K)) : make_float4(0.f, 0.f, 0.f, 0.f);
            rb = in_b && col0 + tx * 4 < N ? LDG4(B + IDX(ty, tx * 4, N)) : make_float4(0.f, 0.f, 0.f, 0.f);
        } else {
            const float* pa = A + IDX(ty, tx * 4, K);
            const float* pb = B + IDX(ty, tx * 4, N);
            ra.x = in_a && k0 + tx * 4 + 0 < K ? pa[0] : 0.f;
            ra.y = in_a && k0 + tx * 4 + 1 < K ? pa[1] : 0.f;
            ra.z = in_a && k0 + tx * 4 + 2 < K ? pa[2] : 0.f;
            ra.w = in_a && k0 + tx * 4 + 3 < K ? pa[3] : 0.f;
            rb.x = in_b && col0 + tx * 4 + 0 < N ? pb[0] : 0.f;
            rb.y = in_b && col0 + tx * 4 + 1 < N ? pb[1] : 0.f;
            rb.z = in_b && col0 + tx * 4 + 2 < N ? pb[2] : 0.f;
            rb.w = in_b && col0 + tx * 4 + 3 < N ? pb[3] : 0.f;
        }
        sa[tx * 4 + 0][ty] = ra.x;
        sa[tx * 4 + 1][ty] = ra.y;
        sa[tx * 4 + 2][ty] = ra.z;
        sa[tx * 4 + 3][ty] = ra.w;
        sb[ty][tx * 4 + 0] = rb.x;
        sb[ty][tx * 4 + 1] = rb.y;
        sb[ty][tx * 4 + 2] = rb.z;
        sb[ty][tx * 4 + 3] = rb.w;
        __syncthreads();
        for (int kk = 0; kk < TILE; ++kk)
            for (int j = 0; j < 4; ++j) acc[j] += sa[kk][ty] * sb[kk][tx * 4 + j];
        __syncthreads();
        A += TILE;
        B += TILE * N;
    }
    const int r = row0 + ty;
    if (r < M)
        for (int j = 0; j < 4; ++j)
            if (col0 + tx * 4 + j < N) C[IDX(r, col0 + tx * 4 + j, N)] = acc[j];
}

extern "C" void launch(const float* a, const float* b, float* c, int m, int n, int k, cudaStream_t stream)
{
    dim3 grid((n + 31) / 32, (m + 31) / 32);
    if (k % 4 == 0 && n % 4 == 0)
        gemm_stage<32, true><<<grid, 256, 0, stream>>>(a, b, c, m, n, k);
    else
        gemm_stage<32, false><<<grid, 256, 0, stream>>>(a, b, c, m, n, k);
}
