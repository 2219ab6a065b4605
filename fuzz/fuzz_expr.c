/* Size expressions (task.json's shapes, counts and values): any bytes as an expression over
 * three names. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "task/task_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    static const char *const names[] = {"N", "M", "K"};
    static const int64_t values[] = {1024, -7, INT64_MAX};
    int64_t out;
    kl_error err = {0};
    kl_expr_eval(text, names, values, 3, &out, &err);
    free(text);
    return 0;
}
