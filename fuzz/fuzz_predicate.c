/* The precondition predicates of skill cards: parse any bytes; evaluate what parses against an
 * environment holding each kind of value. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "klineage/skills.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    kl_predicate p;
    kl_error err = {0};
    if (kl_predicate_parse(text, &p, &err) == KL_OK) {
        static json_t *env;
        if (!env)
            env = json_pack("{s:i, s:I, s:f, s:s, s:b, s:n, s:[]}", "cols", 1024, "big", (json_int_t)INT64_MIN, "x",
                            1.5, "arch", "sm_90", "flag", 1, "none", "list");
        char why[256];
        kl_predicate_eval(&p, env, why, sizeof why);
        json_t *own = json_object();
        json_object_set_new(own, p.name, json_integer(p.integer));
        kl_predicate_eval(&p, own, NULL, 0);
        json_decref(own);
    }
    free(text);
    return 0;
}
