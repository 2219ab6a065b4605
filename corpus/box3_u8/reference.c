/* box3_u8 reference: the 3x3 neighbourhood, indices clamped into the image, summed as integers;
 * out = (sum + 4) / 9 (integer division, so the mean is rounded to nearest). */
#include <stdint.h>

static int64_t clamp_rc(int64_t v, int64_t n) { return v < 0 ? 0 : (v >= n ? n - 1 : v); }

void reference(const uint8_t *in, uint8_t *out, int rows, int cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            int sum = 0;
            for (int64_t dr = -1; dr <= 1; dr++)
                for (int64_t dc = -1; dc <= 1; dc++) sum += in[clamp_rc(r + dr, rows) * cols + clamp_rc(c + dc, cols)];
            out[r * cols + c] = (uint8_t)((sum + 4) / 9);
        }
}
