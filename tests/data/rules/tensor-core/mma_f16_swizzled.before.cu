// test: remove tensor-core@gemm_f16:68
// A variant of the ldmatrix + mma.sync form in another style: f16, one stage of static shared tiles,
// an XOR-swizzled A tile (the 8-element chunk of row r is chunk ^ ((r >> 2) & 1)), a padded B tile
// read through `&Bs[...]`, `lane = threadIdx.x & 31`, braced loops, f32 C. Two warps, 32 x 16 per block.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define BS_LD 24

__device__ __forceinline__ void ldsm_x4(uint32_t (&d)[4], const __half* src)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(src);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "r"(a));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t (&d)[4], const __half* src)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(src);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "r"(a));
}

__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__global__ void gemm_f16(const __half* A, const __half* B, float* C, int M, int N, int K)
{
    __shared__ __align__(16) __half As[32 * 16];
    __shared__ __align__(16) __half Bs[16 * BS_LD];
    const int lane = threadIdx.x & 31;
    const int wid = threadIdx.x >> 5;
    const int bm = blockIdx.y * 32, bn = blockIdx.x * 16;
    float acc[1][2][4] = {};
    for (int k0 = 0; k0 < K; k0 += 16) {
        for (int e = threadIdx.x; e < 32 * 16; e += 64) {
            const int r = e / 16, k = e % 16;
            As[r * 16 + (((k >> 3) ^ ((r >> 2) & 1)) << 3) + (k & 7)] =
                (bm + r < M && k0 + k < K) ? A[(size_t)(bm + r) * K + k0 + k] : __float2half(0.0f);
        }
        for (int e = threadIdx.x; e < 16 * 16; e += 64) {
            const int k = e / 16, n = e % 16;
            Bs[k * BS_LD + n] = (k0 + k < K && bn + n < N) ? B[(size_t)(k0 + k) * N + bn + n] : __float2half(0.0f);
        }
        __syncthreads();
        {
            uint32_t fa[1][4];
            uint32_t fb[2][2];
            for (int i = 0; i < 1; ++i) {
                const int ar = wid * 16 + i * 16 + lane % 16;
                const int chunk = (lane / 16) ^ ((ar >> 2) & 1);
                ldsm_x4(fa[i], As + ar * 16 + chunk * 8);
            }
            for (int j = 0; j < 2 / 2; ++j) {
                const int br = lane % 16;
                uint32_t q[4];
                ldsm_x4_t(q, &Bs[br * BS_LD + j * 16 + (lane / 16) * 8]);
                fb[2 * j][0] = q[0];
                fb[2 * j][1] = q[1];
                fb[2 * j + 1][0] = q[2];
                fb[2 * j + 1][1] = q[3];
            }
            for (int i = 0; i < 1; ++i) {
                for (int j = 0; j < 2; ++j) {
                    mma_f16(acc[i][j], fa[i], fb[j][0], fb[j][1]);
                }
            }
        }
        __syncthreads();
    }
    // acc[0][j][e]: row lane / 4 + 8 * (e / 2), col j * 8 + 2 * (lane % 4) + e % 2 of the warp's 16 x 16 piece
    for (int j = 0; j < 2; j++) {
        for (int e = 0; e < 4; e++) {
            const int r = bm + wid * 16 + lane / 4 + 8 * (e / 2), c = bn + j * 8 + 2 * (lane % 4) + e % 2;
            if (r < M && c < N) C[(size_t)r * N + c] = acc[0][j][e];
        }
    }
}

extern "C" void launch(const __half* A, const __half* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    if (M <= 0 || N <= 0) return;
    gemm_f16<<<dim3((N + 15) / 16, (M + 31) / 32), 64, 0, stream>>>(A, B, C, M, N, K);
}
