/* accumulators (src/rewrite/rules/accumulators.c): what it refuses, with the reason, and what is no
 * site. Its golden cases (tests/data/rules/accumulators/) run in test_rules_golden.c; two-pass's
 * refusals are in test_rules_grid_stride_block_reduce.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/rewrite.h"
#include "util/util.h"

static kl_status run(const char *text, const char *site, char **out, kl_error *err)
{
    char *note = NULL;
    kl_status st = kl_rules_rewrite("t.cu", text, strlen(text), NULL, "accumulators", site, true, NULL, out, &note, err);
    free(note);
    return st;
}

static void expect_refused(const char *text, const char *site, const char *reason)
{
    char *out = NULL;
    kl_error err = {0};
    kl_status st = run(text, site, &out, &err);
    if (st != KL_ERR_NOT_APPLICABLE) fail_msg("accumulators@%s: status %d:\n%s", site, st, out ? out : err.message);
    if (!strstr(err.message, reason)) fail_msg("accumulators@%s: the reason '%s' lacks '%s'", site, err.message, reason);
    free(out);
}

#define HEAD "__global__ void k(const float *x, float *out, int n) {\n" \
             "  float acc[4];\n  for (int u = 0; u < 4; ++u) acc[u] = 0.f;\n" \
             "  for (int i = threadIdx.x; i + 768 < n; i += 1024)\n" \
             "    for (int u = 0; u < 4; ++u) acc[u] += x[i + 256 * u];\n"
#define FOLD "  float s = 0.f;\n  for (int u = 0; u < 4; ++u) s += acc[u];\n"
#define TAIL "  atomicAdd(out, s);\n}\n"

static void refusals(void **state)
{
    (void)state;
    /* one accumulator read on its own: one sum would not hold it */
    expect_refused(HEAD FOLD "  out[1] = acc[2];\n" TAIL, "k:2:acc", "line 8 uses acc otherwise than `acc[e] += x`");
    /* a product into an accumulator */
    expect_refused(HEAD "  acc[0] *= 2.f;\n" FOLD TAIL, "k:2:acc", "line 6 uses acc otherwise");
    /* zeroed in part only */
    const char *partial = "__global__ void k(const float *x, float *out, int n) {\n"
                          "  float acc[2];\n  acc[0] = 0.f;\n"
                          "  for (int i = threadIdx.x; i < n; i += 256) acc[i & 1] += x[i];\n"
                          "  float s = 0.f;\n  for (int u = 0; u < 2; ++u) s += acc[u];\n" TAIL;
    expect_refused(partial, "k:2:acc", "acc is not zeroed element by element");
    /* added to before the zeroing */
    const char *early = "__global__ void k(const float *x, float *out, int n) {\n"
                        "  float acc[2];\n  acc[1] += x[0];\n"
                        "  for (int u = 0; u < 2; ++u) acc[u] = 0.f;\n"
                        "  float s = 0.f;\n  for (int u = 0; u < 2; ++u) s += acc[u];\n" TAIL;
    expect_refused(early, "k:2:acc", "acc is added to before it is zeroed");
}

/* Without a fold over the whole array there are no partial sums: no site. The fold reads the sum. */
static void sites(void **state)
{
    (void)state;
    char *out = NULL;
    kl_error err = {0};
    const char *nofold = HEAD "  atomicAdd(out, acc[0] + acc[1] + acc[2] + acc[3]);\n}\n";
    assert_int_not_equal(run(nofold, "k:2:acc", &out, &err), KL_OK);
    assert_non_null(strstr(err.message, "no site"));
    free(out);
    out = NULL;
    const char *half = HEAD "  float s = 0.f;\n  for (int u = 0; u < 2; ++u) s += acc[u];\n" TAIL;
    assert_int_not_equal(run(half, "k:2:acc", &out, &err), KL_OK);
    free(out);
    out = NULL;
    assert_int_equal(run(HEAD FOLD TAIL, "k:2:acc", &out, &err), KL_OK);
    assert_non_null(strstr(out, "  float acc = 0.f;\n  for (int i = threadIdx.x; i + 768 < n; i += 1024)\n"
                                "    for (int u = 0; u < 4; ++u) acc += x[i + 256 * u];\n  float s = 0.f;\n  s += acc;\n"));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(refusals),
        cmocka_unit_test(sites),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
