#define IDX(r, c, ld) ((r) * (ld) + (c))

__device__ inline int at(int r, int c, int ld) { return r * ld + c; }

/* y = x + bias[col]; rows mapped to x, columns to y. */
__global__ void add_bias(const float *x, const float *bias, float *y, int rows, int cols)
{
    // coalesce: threadIdx.x on the contiguous dimension (x and y roles swapped)
    int i = threadIdx.y + blockIdx.y * blockDim.y;
    int j = threadIdx.x + blockIdx.x * blockDim.x;
    if (i < rows && j < cols) {
        float v = x[IDX(i, j, cols)];
        y[at(i, j, cols)] = v + bias[j];
    }
}

void run(const float *x, const float *bias, float *y, int rows, int cols)
{
    dim3 threads(32, 8);
    dim3 blocks((cols + 31) / 32, (rows + 7) / 8);
    add_bias<<<blocks, threads>>>(x, bias, y, rows, cols);
}
