/* The LLM answer parser: any bytes as a model's answer; the code it holds, the refusal test,
 * the Transform/Site/Note fields, and the check of the proposed file against a request's source. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "klineage/syntax.h"
#include "rewrite/llm_int.h"

static const char OLD[] =
    "__global__ void k(const float *a, float *c, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) c[i] = a[i]; }\n"
    "extern \"C\" void launch(const float *a, float *c, int n, cudaStream_t s) { k<<<(n + 255) / 256, 256, 0, s>>>(a, c, n); }\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char *old_sig;
    static int ready;
    if (!ready) {
        kl_source *src = NULL;
        kl_error err = {0};
        if (kl_source_parse_text("old.cu", OLD, sizeof OLD - 1, &src, &err) != KL_OK) abort();
        old_sig = kl_llm_launch_signature(src);
        kl_source_free(src);
        ready = 1;
    }
    char *answer = malloc(size + 1);
    if (!answer) return 0;
    memcpy(answer, data, size);
    answer[size] = '\0';
    kl_llm_is_refusal(answer);
    char *transform = NULL, *site = NULL, *note = NULL;
    kl_llm_answer_fields(answer, &transform, &site, &note);
    free(transform), free(site), free(note);
    const char *why = NULL;
    char *code = kl_llm_extract_code(answer, &why);
    if (code) {
        kl_llm_check chk = {OLD, old_sig, KL_SOURCE_MAX};
        char *reason = NULL;
        kl_llm_check_source(&chk, code, &reason);
        free(reason);
        free(code);
    }
    answer = kl_llm_scrub(answer, "sk-secret");
    free(answer);
    return 0;
}
