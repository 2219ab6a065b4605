// Column-wise running scale: every thread walks down its own column with a while loop.
__global__ void col_walk(float *a, int rows, int cols, float f)
{
    // coalesce: threadIdx.x on the contiguous dimension (x and y roles swapped)
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (c >= cols) return;
    while (r < rows) {
        a[(long)r * cols + c] *= f;
        r += gridDim.y * blockDim.y;
    }
}

void go(float *a, int rows, int cols, float f)
{
    col_walk<<<dim3((cols + 31) / 32, 4), dim3(32, 8)>>>(a, rows, cols, f);
}
