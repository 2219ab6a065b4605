// Column-wise running scale: every thread walks down its own column with a while loop.
__global__ void col_walk(float *a, int rows, int cols, float f)
{
    int c = blockIdx.y * blockDim.y + threadIdx.y;
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    while (r < rows) {
        a[(long)r * cols + c] *= f;
        r += gridDim.x * blockDim.x;
    }
}

void go(float *a, int rows, int cols, float f)
{
    col_walk<<<dim3(4, (cols + 31) / 32), dim3(8, 32)>>>(a, rows, cols, f);
}
