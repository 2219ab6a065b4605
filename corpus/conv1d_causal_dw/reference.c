/* conv1d_causal_dw reference: per channel, y[t] = sum_{j < kw} w[j] * x[t - (kw - 1) + j], zero
 * before the start; float64. */
#include <stdint.h>

void reference(const double *x, const double *w, double *y, int channels, int length, int kw)
{
    for (int64_t c = 0; c < channels; c++) {
        const double *xc = x + c * length, *wc = w + c * kw;
        double *yc = y + c * length;
        for (int64_t t = 0; t < length; t++) {
            double s = 0.0;
            for (int64_t j = 0; j < kw; j++) {
                const int64_t src = t - (kw - 1) + j;
                if (src >= 0) s += wc[j] * xc[src];
            }
            yc[t] = s;
        }
    }
}
