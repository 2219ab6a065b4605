/* rgb_threshold reference: integer luma (weights 77, 150, 29 out of 256, rounded), then a
 * threshold at 128: 255 or 0. */
#include <stdint.h>

void reference(const uint8_t *rgb, uint8_t *mask, int height, int width)
{
    for (int64_t i = 0; i < (int64_t)height * width; i++) {
        const uint8_t *p = rgb + 3 * i;
        const int gray = (77 * p[0] + 150 * p[1] + 29 * p[2] + 128) >> 8;
        mask[i] = gray >= 128 ? 255 : 0;
    }
}
