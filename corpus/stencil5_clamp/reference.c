/* stencil5_clamp reference: out = u/2 + (north + south + west + east)/8, a neighbour outside the
 * grid replaced by the nearest cell inside it (clamped index); float64. */
#include <stdint.h>

static int64_t clamp_index(int64_t v, int64_t n) { return v < 0 ? 0 : (v >= n ? n - 1 : v); }

void reference(const double *u, double *out, int ny, int nx)
{
    for (int64_t i = 0; i < ny; i++)
        for (int64_t j = 0; j < nx; j++) {
            const double north = u[clamp_index(i - 1, ny) * nx + j], south = u[clamp_index(i + 1, ny) * nx + j];
            const double west = u[i * nx + clamp_index(j - 1, nx)], east = u[i * nx + clamp_index(j + 1, nx)];
            out[i * nx + j] = 0.5 * u[i * nx + j] + 0.125 * (north + south + west + east);
        }
}
