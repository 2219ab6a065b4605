// test: remove vectorize@range_sum:7:pairs
// The sum of a range of doubles [first, first + count): the launch passes the 16-byte-aligned part
// of it as double2s through a C-style cast of &x[first], the kernel adds pairs in a grid-stride
// loop; an odd last element is added by thread 0 of block 0.
#include <cuda_runtime.h>

__global__ void range_sum(const double* x, const double2* pairs, long long first, long long count,
                          unsigned long long* total_bits, double* out)
{
    double s = 0.0;
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < count / 2;
         k += (long long)gridDim.x * blockDim.x) {
        const double2 v = make_double2(x[first + 2 * k], x[first + 2 * k + 1]);
        s += v.x + v.y;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0 && (count & 1)) s += x[first + count - 1];
    atomicAdd(out, s);
    (void)total_bits;
}

extern "C" void launch(const double* x, double* out, long long first, long long count, cudaStream_t stream)
{
    cudaMemsetAsync(out, 0, sizeof(double), stream);
    range_sum<<<120, 128, 0, stream>>>(x, (const double2*)(&x[first]), first, count, nullptr, out);
}
