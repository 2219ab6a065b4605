/* conv1d reference: result[i] = sum_{t < ntaps} taps[t] * signal[i + t - ntaps/2], zero outside
 * the signal; float64. */
#include <stdint.h>

void reference(const double *signal, const double *taps, double *result, int len, int ntaps)
{
    const int64_t half = ntaps / 2;
    for (int64_t i = 0; i < len; i++) {
        double s = 0.0;
        for (int64_t t = 0; t < ntaps; t++) {
            const int64_t j = i + t - half;
            if (j >= 0 && j < len) s += taps[t] * signal[j];
        }
        result[i] = s;
    }
}
