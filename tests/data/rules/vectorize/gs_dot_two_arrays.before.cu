// test: apply vectorize@dot:6 width=2 | remove vectorize@dot:8
// A dot product reading two arrays at the same index: each gets its own float2 load.
__global__ void dot(const float* a, const float* b, float* out, int n)
{
    float s = 0.0f;
    for (int k = threadIdx.x + blockIdx.x * blockDim.x; k < n; k += gridDim.x * blockDim.x) {
        s += a[k] * b[k];
    }
    atomicAdd(out, s);
}
