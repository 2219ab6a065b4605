#define IDX(r, c, ld) ((r) * (ld) + (c))

__device__ inline int at(int r, int c, int ld) { return r * ld + c; }

/* y = x + bias[col]; rows mapped to x, columns to y. */
__global__ void add_bias(const float *x, const float *bias, float *y, int rows, int cols)
{
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    int j = threadIdx.y + blockIdx.y * blockDim.y;
    if (i < rows && j < cols) {
        float v = x[IDX(i, j, cols)];
        y[at(i, j, cols)] = v + bias[j];
    }
}

void run(const float *x, const float *bias, float *y, int rows, int cols)
{
    dim3 threads(8, 32);
    dim3 blocks((rows + 7) / 8, (cols + 31) / 32);
    add_bias<<<blocks, threads>>>(x, bias, y, rows, cols);
}
