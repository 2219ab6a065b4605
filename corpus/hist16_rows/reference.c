/* hist16_rows reference: per row, counts of the 16 value ranges (value >> 4). */
#include <stdint.h>

void reference(const uint8_t *img, int32_t *hist, int rows, int cols)
{
    for (int64_t r = 0; r < rows; r++) {
        int32_t *h = hist + r * 16;
        for (int b = 0; b < 16; b++) h[b] = 0;
        for (int64_t c = 0; c < cols; c++) h[img[r * cols + c] >> 4]++;
    }
}
