// A 32-bin histogram with one warp-sized shared table per block.
__global__ void hist32(const unsigned int *keys, int n, unsigned int *out)
{
    const int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    if (i < n)
        atomicAdd(&out[keys[i] & 31u], 1u);
}
