/* vectorize's thread-strided form (src/rewrite/rules/vectorize_lane.c): the loops a warp or a block
 * runs over a row it refuses, each with its reason, and what it accepts. The rewrites themselves are
 * goldens (tests/data/rules/vectorize/lane_*, block_*). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "rules_helpers.h"

/* A warp-per-row kernel whose one strided loop (line 9) has `body` (statements, one line) and
 * starts at `start`. */
static char *warp_kernel(const char *start, const char *decls, const char *body)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb,
                   "__global__ void k(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)\n"
                   "{\n"
                   "    const int w = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x & 31;\n"
                   "    if (w >= rows) return;\n"
                   "    const float* row = x + (size_t)w * cols;\n"
                   "    float* out = y + (size_t)w * cols;\n"
                   "    float m = -INFINITY, s = 0.f;\n"
                   "    int n = 0; %s\n"
                   "    for (int c = %s; c < cols; c += 32) { %s }\n"
                   "    y[w] = m + s + n;\n"
                   "}\n"
                   "extern \"C\" void launch(const float* x, float* y, int rows, int cols, cudaStream_t st)\n"
                   "{ k<<<(rows + 7) / 8, 256, 0, st>>>(x, y, rows, cols); }\n",
                   decls, start, body);
    return kl_strbuf_detach(&sb, NULL);
}

/* The vectorize site at line 9 of text: its direction and, when refused, its reason (new strings). */
static void site9(const char *text, char **dir, char **reason)
{
    json_t *sites = sites_of(text, "vectorize");
    size_t i;
    json_t *s;
    *dir = *reason = NULL;
    json_array_foreach(sites, i, s) {
        if (json_integer_value(json_object_get(s, "line")) != 9) continue;
        *dir = kl_strdup(json_string_value(json_object_get(s, "direction")));
        const char *r = json_string_value(json_object_get(s, "reason"));
        *reason = r ? kl_strdup(r) : NULL;
    }
    json_decref(sites);
}

static void expect_refused(const char *start, const char *decls, const char *body, const char *want)
{
    char *text = warp_kernel(start, decls, body), *dir, *reason;
    site9(text, &dir, &reason);
    if (!dir) fail_msg("no vectorize site at line 9 of:\n%s", text);
    if (strcmp(dir, "refused") || !reason || !strstr(reason, want))
        fail_msg("line 9 is %s (%s), expected refused saying '%s':\n%s", dir, reason ? reason : "", want, text);
    free(dir);
    free(reason);
    free(text);
}

static void expect_applicable(const char *start, const char *decls, const char *body)
{
    char *text = warp_kernel(start, decls, body), *dir, *reason;
    site9(text, &dir, &reason);
    if (!dir || strcmp(dir, "applicable")) fail_msg("line 9 is %s (%s), expected applicable:\n%s", dir ? dir : "no site",
                                                    reason ? reason : "", text);
    free(dir);
    free(reason);
    free(text);
}

static void reductions_and_stores_are_accepted(void **state)
{
    (void)state;
    expect_applicable("lane", "", "m = fmaxf(m, row[c]);");
    expect_applicable("lane", "", "s += row[c] * row[c];");
    expect_applicable("lane", "", "m = fmaxf(row[c], m); s = s + row[c]; n++;");
    expect_applicable("lane", "", "const float d = row[c] - 1.f; s += d * d;");
    expect_applicable("lane", "", "out[c] = 2.f * row[c];");
    expect_applicable("threadIdx.x % 32", "", "out[c] = row[c] + (float)c;");
    expect_applicable("lane", "const int base = w * cols;", "s += x[base + c];");
}

static void what_is_refused_says_why(void **state)
{
    (void)state;
    /* not the thread's own index: `1 + lane` leaves elements 0 and … to no vector */
    expect_refused("1 + lane", "", "m = fmaxf(m, row[c]);", "starts at `1 + lane`");
    /* a running value read besides its update (online softmax) */
    expect_refused("lane", "", "const float mn = fmaxf(m, row[c]); s = s * __expf(m - mn) + __expf(row[c] - mn); m = mn;",
                   "other than as a sum, product, min or max");
    expect_refused("lane", "", "s += row[c] - m; m = fmaxf(m, row[c]);", "reads m besides updating it");
    /* a conditional update: which elements a thread sees decides it */
    expect_refused("lane", "", "const float v = row[c]; if (v > 0.f) n++;", "is conditional");
    /* a warp collective inside the loop */
    expect_refused("lane", "", "s += __shfl_xor_sync(0xffffffffu, row[c], 1);", "calls __shfl_xor_sync");
    /* a store off the element */
    expect_refused("lane", "", "out[lane] = row[c];", "an index not contiguous in c");
    expect_refused("lane", "__shared__ float sh[32];", "sh[lane] = row[c];", "writes sh at line 9, not at the loop's element");
    /* an index part the body changes */
    expect_refused("lane", "int off = 0;", "s += x[off + c]; off = 0;", "sets off at line 9 other than");
}

static void a_loop_without_its_own_variable_is_refused(void **state)
{
    (void)state;
    const char *text = "__global__ void k(const float* __restrict__ x, float* __restrict__ y, int cols)\n"
                       "{\n"
                       "    const float* row = x + (size_t)blockIdx.x * cols;\n"
                       "    float s = 0.f;\n"
                       "    int c;\n"
                       "    for (c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];\n"
                       "    atomicAdd(y + blockIdx.x, s);\n"
                       "}\n";
    json_t *sites = sites_of(text, "vectorize");
    const char *site = site_where(sites, "applicable", false);
    assert_non_null(site);
    expect_not_applicable(text, "vectorize", site, false, "does not declare its variable alone");
    json_decref(sites);
}

/* After the rewrite the vector loop is a present site, the scalar loop after it a refused one
 * (its fallback), and the removal gives back the original text. */
static void the_rewrite_reads_back(void **state)
{
    (void)state;
    char *text = warp_kernel("lane", "", "out[c] = row[c] * 0.5f;");
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    if (kl_rules_rewrite("t.cu", text, strlen(text), NULL, "vectorize", "k:9", false, NULL, &out, &note, &err) != KL_OK)
        fail_msg("vectorize@k:9: %s", err.message);
    assert_non_null(strstr(out, "for (int v = lane; v < nv; v += 32) {"));
    assert_non_null(strstr(out, "for (int c = lane + nv * 4; c < cols; c += 32)"));
    assert_non_null(strstr(out, "% 16 == 0 ? cols / 4 : 0;"));
    json_t *sites = sites_of(out, "vectorize");
    const char *present = site_where(sites, "present", true);
    assert_non_null(present);
    size_t i;
    json_t *s;
    bool fallback = false;
    json_array_foreach(sites, i, s) {
        const char *r = json_string_value(json_object_get(s, "reason"));
        fallback |= r && strstr(r, "the scalar fallback of the float4 path at line 11");
    }
    assert_true(fallback);
    char *back = NULL, *note2 = NULL;
    if (kl_rules_rewrite("t.cu", out, strlen(out), NULL, "vectorize", present, true, NULL, &back, &note2, &err) != KL_OK)
        fail_msg("remove vectorize@%s: %s", present, err.message);
    assert_string_equal(back, text);
    json_decref(sites);
    free(back);
    free(note2);
    free(out);
    free(note);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reductions_and_stores_are_accepted),
        cmocka_unit_test(what_is_refused_says_why),
        cmocka_unit_test(a_loop_without_its_own_variable_is_refused),
        cmocka_unit_test(the_rewrite_reads_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
