// test: apply vectorize@dot:6 width=2 | remove vectorize@dot:8
// A dot product reading two arrays at the same index: each gets its own float2 load.
__global__ void dot(const float* a, const float* b, float* out, int n)
{
    float s = 0.0f;
    // vectorize: 2 elements per load of 'a' (float2), 'b' (float2); the loop below does the last n % 2, or all when an address is not aligned
    const int nv = (reinterpret_cast<unsigned long long>(a) % 8 == 0 && reinterpret_cast<unsigned long long>(b) % 8 == 0) ? n / 2 : 0;
    for (int v = threadIdx.x + blockIdx.x * blockDim.x; v < nv; v += gridDim.x * blockDim.x) {
        const float2 a_v = reinterpret_cast<const float2*>(a)[v];
        const float2 b_v = reinterpret_cast<const float2*>(b)[v];
        s += a_v.x * b_v.x;
        s += a_v.y * b_v.y;
    }
    for (int k = threadIdx.x + blockIdx.x * blockDim.x + nv * 2; k < n; k += gridDim.x * blockDim.x) {
        s += a[k] * b[k];
    }
    atomicAdd(out, s);
}
