// 64-bucket histogram of an image's low bits, 2-D grid of 16x16 blocks.
__global__ void low_bits_hist(const int *img, int width, int height, int *buckets)
{
    // privatize: a per-block copy of 'buckets' in shared memory, merged once per entry
    __shared__ int buckets_priv[64];
    for (int kl_i = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); kl_i < 64; kl_i += blockDim.x * blockDim.y * blockDim.z) buckets_priv[kl_i] = 0;
    __syncthreads();
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) {
        int b = img[y * width + x] & 63;
        atomicAdd(buckets_priv + b, 1);
    }
    __syncthreads();
    for (int kl_i = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); kl_i < 64; kl_i += blockDim.x * blockDim.y * blockDim.z)
        if (buckets_priv[kl_i] != 0) atomicAdd(&buckets[kl_i], buckets_priv[kl_i]);
}
