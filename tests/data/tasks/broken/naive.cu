__global__ void k(const float *a, float *c, int n) {}
extern "C" void launch(const float *a, float *c, int n, cudaStream_t stream) { k<<<1, 1, 0, stream>>>(a, c, n); }
