/* argmax_rows reference: the first index of each row's maximum (a later element replaces the
 * best only when strictly larger). */
#include <stdint.h>

void reference(const double *data, int32_t *index, int n_rows, int n_cols)
{
    for (int64_t r = 0; r < n_rows; r++) {
        const double *row = data + r * n_cols;
        int32_t best = 0;
        for (int32_t c = 1; c < n_cols; c++)
            if (row[c] > row[best]) best = c;
        index[r] = best;
    }
}
