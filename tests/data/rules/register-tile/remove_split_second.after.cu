// test: remove register-tile@sgemm_tiles:27
// a tile split once already, acc[1][4] (its first split): the grid z extent 4 becomes 4 * 4, the share blockIdx.z / 4 % 4
// float4 staging of our own: load() fills float4 registers element by element (zeros outside),
// put() writes A transposed lane by lane (As[kq + 0..3][r]) and B with a float4 store macro; the
// compute reads four rows of A and four columns of B with a float4 read macro; one stage, a
// padded A tile, template tile sizes, #pragma unroll
#include <cuda_runtime.h>

#define LD4(x) (*reinterpret_cast<const float4*>(&(x)))
#define ST4(x, v) (*reinterpret_cast<float4*>(&(x)) = (v))

template <int BM, int BN, int BK, int NT>
__global__ void sgemm_tiles(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N,
                            int K)
{
    constexpr int AV = BM * BK / 4 / NT, BV = BK * BN / 4 / NT;
    // register-tile: this thread's share of acc's dimension 2 (extent 4)
    const int kl_s2 = (int)(threadIdx.x % 4);
    // register-tile: the thread that held this thread's outputs before the split (it stands for threadIdx.x below): consecutive threads store consecutive outputs
    const unsigned kl_t = threadIdx.x / 4 + (int)(blockIdx.z / 4 % 4) * 64;
    // register-tile: this block's share of acc's dimension 1 (extent 4)
    const int kl_s = (int)(blockIdx.z / 1 % 4);
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tid = kl_t;
    const int ty = tid / (BN / 4), tx = tid % (BN / 4);

    // smem-tile: the tiles' elements read from global memory where the compute uses them
    auto As = [&](int k0, int kl_p, int kl_q) -> float { return (m0 + kl_q < M) && k0 + kl_p + 0 < K ? A[(size_t)(m0 + kl_q) * K + k0 + kl_p + 0] : 0.0f; };
    auto Bs = [&](int k0, int kl_p, int kl_q) -> float { return (k0 + kl_p < K) && n0 + kl_q + 0 < N ? B[(size_t)(k0 + kl_p) * N + n0 + kl_q + 0] : 0.0f; };

    float acc[1][1] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            const float4 a = make_float4(As(k0, kk, ty * 4), As(k0, kk, ty * 4 + 1), As(k0, kk, ty * 4 + 2), As(k0, kk, ty * 4 + 3));
            const float4 b = make_float4(Bs(k0, kk, tx * 4), Bs(k0, kk, tx * 4 + 1), Bs(k0, kk, tx * 4 + 2), Bs(k0, kk, tx * 4 + 3));
            const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
            for (int i = kl_s; i < kl_s + 1; ++i)
                for (int j = kl_s2; j < kl_s2 + 1; ++j) acc[0][0] += av[i] * bv[j];
        }
    }
    for (int i = kl_s; i < kl_s + 1; ++i)
        for (int j = kl_s2; j < kl_s2 + 1; ++j)
            if (m0 + ty * 4 + i < M && n0 + tx * 4 + j < N) C[(size_t)(m0 + ty * 4 + i) * N + n0 + tx * 4 + j] = acc[0][0];
}

extern "C" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)
{
    const dim3 grid((N + 63) / 64, (M + 63) / 64, 4 * 4);
    sgemm_tiles<64, 64, 16, 256><<<grid, 256, 0, stream>>>(A, B, C, M, N, K);
}
