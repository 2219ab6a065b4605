// test: apply vectorize@over:6 width=4 | remove vectorize@over:8
// A loop whose body is one statement without braces, int elements (int4 loads), a template.
template <int BLOCK>
__global__ void over(const int* keys, int* hits, int n, int threshold)
{
    // vectorize: 4 elements per load of 'keys' (int4); the loop below does the last n % 4, or all when an address is not aligned
    const int nv = (reinterpret_cast<unsigned long long>(keys) % 16 == 0) ? n / 4 : 0;
    for (int v = blockIdx.x * BLOCK + threadIdx.x; v < nv; v += BLOCK * gridDim.x) {
        const int4 keys_v = reinterpret_cast<const int4*>(keys)[v];
        if (keys_v.x > threshold) atomicAdd(hits, 1);
        if (keys_v.y > threshold) atomicAdd(hits, 1);
        if (keys_v.z > threshold) atomicAdd(hits, 1);
        if (keys_v.w > threshold) atomicAdd(hits, 1);
    }
    for (int i = blockIdx.x * BLOCK + threadIdx.x + nv * 4; i < n; i += BLOCK * gridDim.x)
        if (keys[i] > threshold) atomicAdd(hits, 1);
}

template __global__ void over<256>(const int*, int*, int, int);
