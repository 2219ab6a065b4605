__device__ __noinline__ float helper(float *p, int i) { float r[64]; for (int k = 0; k < 64; k++) r[(k * i) & 63] = p[k]; return r[i & 63]; }
__global__ void heavy(float *y, const float *x, int n) {
  float a[40];
#pragma unroll
  for (int i = 0; i < 40; i++) a[i] = x[threadIdx.x + i * n];
  float s = 0;
#pragma unroll
  for (int i = 0; i < 40; i++) for (int j = 0; j < 40; j++) s += a[i] * a[j] * (i ^ j);
  y[threadIdx.x] = s + helper(y, n);
}
template <typename T> __global__ void tile(T *y, const T *x) { __shared__ T t[32][33]; t[threadIdx.y][threadIdx.x] = x[threadIdx.x]; __syncthreads(); y[threadIdx.x] = t[threadIdx.x][threadIdx.y]; }
template __global__ void tile<float>(float *, const float *);
template __global__ void tile<double>(double *, const double *);
