/* The CUDA parser and the source model: parse any bytes; when they parse, build the model,
 * its JSON and every function's features, and describe every parse error. */
#include <jansson.h>
#include <stdlib.h>

#include "fuzz.h"
#include "klineage/syntax.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kl_source *src = NULL;
    kl_error err = {0};
    if (kl_source_parse_text("fuzz.cu", (const char *)data, size, &src, &err) != KL_OK) return 0;
    for (unsigned i = 0; i < kl_source_error_count(src); i++) {
        kl_span where;
        char msg[128];
        if (!kl_source_error(src, i, &where, msg, sizeof msg)) break;
    }
    kl_model *m = NULL;
    if (kl_model_build(src, &m, &err) == KL_OK) {
        json_decref(kl_model_json(m));
        unsigned nf = 0;
        kl_model_functions(m, &nf);
        for (unsigned f = 0; f < nf; f++) {
            json_decref(kl_model_features(m, f));
            for (int w = 0; w < KL_ITEMS_COUNT; w++) {
                unsigned n = 0;
                kl_model_items_of(m, (kl_items)w, f, &n);
            }
        }
        kl_model_free(m);
    }
    kl_source_free(src);
    return 0;
}
