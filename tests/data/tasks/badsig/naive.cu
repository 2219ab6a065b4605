// parameter 2 is not const (b is an input) and parameter 3 is a double* (c is f32*)
__global__ void k(const float *a, float *b, double *c, int n) {}
extern "C" void launch(const float *a, float *b, double *c, int n, cudaStream_t stream)
{
    k<<<1, 1, 0, stream>>>(a, b, c, n);
}
