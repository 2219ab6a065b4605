/* The archive reader: any bytes as archive/verdicts.jsonl, imported into a fresh store and,
 * when it imports, exported again and imported a second time (the same documents). */
#include <stdlib.h>

#include "fuzz.h"
#include "klineage/store.h"
#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kl_store *s = NULL;
    kl_error err = {0};
    if (kl_store_open(":memory:", &s, &err) != KL_OK) abort();
    const char *path = kl_fuzz_write("verdicts.jsonl", data, size);
    unsigned n = 0;
    if (kl_store_import(s, path, &n, &err) == KL_OK) {
        char *out = kl_path_join(kl_fuzz_scratch(), "again.jsonl");
        unsigned m = 0;
        if (out && kl_store_export(s, NULL, out, &err) == KL_OK) {
            kl_store *t = NULL;
            if (kl_store_open(":memory:", &t, &err) != KL_OK) abort();
            if (kl_store_import(t, out, &m, &err) != KL_OK || m > n) abort(); /* what was exported reads back */
            kl_store_close(t);
        }
        free(out);
    }
    kl_store_close(s);
    return 0;
}
