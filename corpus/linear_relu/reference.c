/* linear_relu reference: y[t][o] = max(bias[o] + sum_i x[t][i] * w[i][o], 0) in float64
 * (w is d_in x d_out, row-major). */
#include <stdint.h>

void reference(const double *x, const double *w, const double *bias, double *y, int tokens, int d_in, int d_out)
{
    for (int64_t t = 0; t < tokens; t++) {
        double *yt = y + t * d_out;
        for (int64_t o = 0; o < d_out; o++) yt[o] = bias[o];
        for (int64_t i = 0; i < d_in; i++) {
            const double xv = x[t * d_in + i];
            const double *wi = w + i * d_out;
            for (int64_t o = 0; o < d_out; o++) yt[o] += xv * wi[o];
        }
        for (int64_t o = 0; o < d_out; o++) yt[o] = yt[o] > 0.0 ? yt[o] : 0.0;
    }
}
