// Two staged 32x32 float tiles, padded to 33 floats a row.
__global__ void staged(const float *a, float *b, int n)
{
    __shared__ float buf[2][32][32];
    int s = blockIdx.x & 1;
    for (int k = 0; k < 32; k++)
        buf[s][k][threadIdx.x] = a[(blockIdx.x * 32 + k) * 32 + threadIdx.x];
    __syncthreads();
    float acc = 0.0f;
    for (int k = 0; k < 32; k++)
        acc += buf[s][threadIdx.x][k];
    if (blockIdx.x * 32 + threadIdx.x < n)
        b[blockIdx.x * 32 + threadIdx.x] = acc;
}
