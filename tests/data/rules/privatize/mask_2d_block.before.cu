// 64-bucket histogram of an image's low bits, 2-D grid of 16x16 blocks.
__global__ void low_bits_hist(const int *img, int width, int height, int *buckets)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) {
        int b = img[y * width + x] & 63;
        atomicAdd(buckets + b, 1);
    }
}
