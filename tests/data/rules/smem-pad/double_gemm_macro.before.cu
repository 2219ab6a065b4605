#define BS 16

/* C = A * B in double precision; B's tile is read along its columns by lane. */
__global__ void dgemm_tile(const double *A, const double *B, double *C, int n)
{
    __shared__ double As[BS][BS];
    __shared__ double Bt[BS][BS];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * BS + ty, col = blockIdx.x * BS + tx;
    double acc = 0.0;
    for (int t = 0; t < n; t += BS) {
        As[ty][tx] = (row < n && t + tx < n) ? A[row * n + t + tx] : 0.0;
        Bt[tx][ty] = (t + ty < n && col < n) ? B[(t + ty) * n + col] : 0.0;
        __syncthreads();
        for (int k = 0; k < BS; ++k)
            acc += As[ty][k] * Bt[tx][k];
        __syncthreads();
    }
    if (row < n && col < n)
        C[row * n + col] = acc;
}
