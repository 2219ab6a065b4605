// wmma_gemm: tensor cores through nvcuda::wmma: fragments, load, mma, store; one warp
// computes one 16x16 tile of C.
#include <cuda_fp16.h>
#include <mma.h>
using namespace nvcuda;

constexpr int WM = 16, WN = 16, WK = 16;

__global__ void wmma_gemm(const half *A, const half *B, float *C, int M, int N, int K)
{
    int warp_m = (blockIdx.x * blockDim.x + threadIdx.x) / 32 / (N / WN);
    int warp_n = (blockIdx.x * blockDim.x + threadIdx.x) / 32 % (N / WN);
    if (warp_m * WM >= M) return;
    wmma::fragment<wmma::matrix_a, WM, WN, WK, half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, WM, WN, WK, half, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, WM, WN, WK, float> c;
    wmma::fill_fragment(c, 0.0f);
    for (int k = 0; k < K; k += WK) {
        wmma::load_matrix_sync(a, A + warp_m * WM * K + k, K);
        wmma::load_matrix_sync(b, B + warp_n * WN * K + k, K);
        wmma::mma_sync(c, a, b, c);
    }
    wmma::store_matrix_sync(C + warp_m * WM * N + warp_n * WN, c, N, wmma::mem_row_major);
}

extern "C" void launch(const half *A, const half *B, float *C, int M, int N, int K, cudaStream_t stream)
{
    int warps = (M / WM) * (N / WN);
    wmma_gemm<<<(warps + 3) / 4, 128, 0, stream>>>(A, B, C, M, N, K);
}
