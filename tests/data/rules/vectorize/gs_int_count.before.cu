// test: apply vectorize@over:6 width=4 | remove vectorize@over:8
// A loop whose body is one statement without braces, int elements (int4 loads), a template.
template <int BLOCK>
__global__ void over(const int* keys, int* hits, int n, int threshold)
{
    for (int i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += BLOCK * gridDim.x)
        if (keys[i] > threshold) atomicAdd(hits, 1);
}

template __global__ void over<256>(const int*, int*, int, int);
