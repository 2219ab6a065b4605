// A 32-bin histogram with one warp-sized shared table per block.
__global__ void hist32(const unsigned int *keys, int n, unsigned int *out)
{
    __shared__ unsigned int tbl[32];
    const int t = threadIdx.x;
    if (t < 32)
        tbl[t] = 0;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + t;
    if (i < n)
        atomicAdd(&tbl[keys[i] & 31u], 1u);
    __syncthreads();
    if (t < 32)
        atomicAdd(&out[t], tbl[t]);
}
