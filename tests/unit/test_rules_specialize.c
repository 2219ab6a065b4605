/* The rules catalog: specialize (src/rewrite/rules/specialize.c). Golden cases (run by test_rules_golden.c) in
 * tests/data/rules/specialize/<case>.before.cu, whose first line says what to do
 * (`// test: remove specialize@launch:143 | apply specialize@softmax_rows_long:22:cols values=1024`):
 * the result must equal <case>.after.cu byte for byte (KL_UPDATE_GOLDEN=1 rewrites them), the
 * reverse must give back the original or at least bring the site back the other way, and every
 * .after.cu must compile with `nvcc -arch=sm_90 -c` (skipped with a note without nvcc). Also: the
 * softmax, layernorm and blur experts lose their specialized path (only the general kernel is left),
 * the features of their sites, and the reasons given where the transform does not apply. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/rewrite.h"
#include "klineage/task.h"
#include "rewrite/rules/rules.h"
#include "util/util.h"
#include "rules_golden.h"

static char *read_task_file(const char *task, const char *file)
{
    const char *root = getenv("KL_SOURCE_DIR");
    assert_non_null(root);
    char p[1024];
    kl_snprintf(p, sizeof p, "%s/tasks/%s/%s", root, task, file);
    char *t = NULL;
    size_t n;
    kl_error err = {0};
    if (kl_file_read(p, 0, &t, &n, &err) != KL_OK) fail_msg("%s: %s", p, err.message);
    return t;
}

/* The specialize sites of text, as a JSON array (owned). */
static json_t *sites_of(const char *text)
{
    char *json = NULL;
    kl_error err = {0};
    if (kl_rules_list("t.cu", text, strlen(text), NULL, "specialize", &json, &err) != KL_OK)
        fail_msg("%s", err.message);
    json_t *a = json_loads(json, 0, NULL);
    free(json);
    assert_non_null(a);
    return a;
}

/* The first site in the given direction (NULL when none); its features into *features. */
/* The first site found in direction dir ("present" / "applicable"), rewriting or refused. */
static const char *first_site(json_t *sites, const char *dir, json_t **features)
{
    size_t i;
    json_t *s;
    const char *refusal = !strcmp(dir, "present") ? "remove" : "apply";
    json_array_foreach(sites, i, s) {
        const char *d = json_string_value(json_object_get(s, "direction"));
        if (strcmp(d, dir) &&
            (strcmp(d, "refused") || strcmp(json_string_value(json_object_get(s, "refused")), refusal)))
            continue;
        if (features) *features = json_object_get(s, "features");
        return json_string_value(json_object_get(s, "site"));
    }
    return NULL;
}

static char *run_op(const char *text, bool remove, const char *site, const char *params)
{
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    if (kl_rules_rewrite("t.cu", text, strlen(text), NULL, "specialize", site, remove, params, &out, &note, &err) !=
        KL_OK)
        fail_msg("specialize %s@%s: %s", remove ? "remove" : "apply", site, err.message);
    free(note);
    return out;
}

static void expect_not_applicable(const char *text, const char *site, bool remove, const char *params,
                                  const char *want)
{
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    kl_status st = kl_rules_rewrite("t.cu", text, strlen(text), NULL, "specialize", site, remove, params, &out, &note,
                                    &err);
    if (st != KL_ERR_NOT_APPLICABLE)
        fail_msg("specialize@%s: expected not applicable, got status %d (%s)", site, st, err.message);
    if (!strstr(err.message, want)) fail_msg("specialize@%s: the reason '%s' does not say '%s'", site, err.message, want);
    assert_null(out);
}

/* The experts: one present site in launch(); removing it leaves only the general kernel, no
 * helper of the specialized path, and compiles. */
static void specialize_experts(void **state)
{
    (void)state;
    static const struct {
        const char *task, *general, *gone[6], *kept[4];
    } cases[] = {
        {"softmax",
         "softmax_rows_long",
         {"softmax_rows<", "launch_rows", "MAX_ITEMS", "constexpr int VEC", "into registers", NULL},
         {"block_reduce", "merge", "WARPS", NULL}},
        {"layernorm",
         "layernorm_rows_long",
         {"layernorm_rows<", "launch_rows", "MAX_ITEMS", "constexpr int VEC", "vectorize:", NULL},
         {"block_sum", "EPS", "fast-math: rsqrtf", NULL}},
        {"blur",
         "blur_generic",
         {"blur_reg", "launch_reg", "c_filt", "blur_rows", "static_assert", "register-tile:"},
         {"constexpr int GX = 32, GY = 8;", "const dim3 grid((w + GX - 1) / GX", NULL, NULL}},
    };
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("rules-spec-expert", &dir, &err), KL_OK);
    char *paths[3];
    for (int t = 0; t < 3; t++) {
        char *text = read_task_file(cases[t].task, "expert.cu");
        json_t *sites = sites_of(text), *f = NULL;
        const char *id = first_site(sites, "present", &f);
        if (!id) fail_msg("%s/expert.cu: no present specialize site", cases[t].task);
        assert_true(kl_str_starts(id, "launch:"));
        assert_null(json_object_get(f, "why_not"));
        assert_string_equal(json_string_value(json_object_get(f, "general")), cases[t].general);
        assert_true(json_is_true(json_object_get(f, "template_size")));
        char *got = run_op(text, true, id, NULL);
        assert_non_null(strstr(got, cases[t].general));
        for (int g = 0; g < 6 && cases[t].gone[g]; g++)
            if (strstr(got, cases[t].gone[g])) fail_msg("%s: '%s' is left:\n%s", cases[t].task, cases[t].gone[g], got);
        for (int k = 0; k < 4 && cases[t].kept[k]; k++)
            if (!strstr(got, cases[t].kept[k])) fail_msg("%s: '%s' is gone:\n%s", cases[t].task, cases[t].kept[k], got);
        /* the general launch is the only one left, and no early return dangles after it */
        json_t *back = sites_of(got);
        assert_null(first_site(back, "present", NULL));
        json_decref(back);
        assert_null(strstr(got, "return;\n}"));
        char name[64];
        kl_snprintf(name, sizeof name, "%s.cu", cases[t].task);
        paths[t] = kl_path_join(dir, name);
        assert_int_equal(kl_file_write(paths[t], got, strlen(got), &err), KL_OK);
        free(got);
        json_decref(sites);
        free(text);
    }
    golden_nvcc_compile_all(paths, 3);
    for (int t = 0; t < 3; t++) free(paths[t]);
    kl_remove_tree(dir, NULL);
    free(dir);
}

/* The features of the sites: the condition, the kernels, the form. */
static void specialize_features(void **state)
{
    (void)state;
    char *text = read_task_file("softmax", "expert.cu");
    json_t *sites = sites_of(text), *f = NULL;
    assert_non_null(first_site(sites, "present", &f));
    assert_string_equal(json_string_value(json_object_get(f, "condition")), "cols > THREADS * MAX_ITEMS");
    assert_string_equal(json_string_value(json_object_get(f, "form")), "if-return");
    json_t *spec = json_object_get(f, "specialized");
    assert_int_equal(json_array_size(spec), 1);
    assert_string_equal(json_string_value(json_array_get(spec, 0)), "softmax_rows");
    /* the long-row kernel's loops are bounded by cols: a site to apply */
    json_t *af = NULL;
    const char *aid = first_site(sites, "applicable", &af);
    assert_non_null(aid);
    assert_string_equal(json_string_value(json_object_get(af, "param")), "cols");
    json_decref(sites);
    free(text);

    char *blur = read_task_file("blur", "expert.cu");
    sites = sites_of(blur);
    assert_non_null(first_site(sites, "present", &f));
    assert_string_equal(json_string_value(json_object_get(f, "form")), "switch");
    assert_string_equal(json_string_value(json_object_get(f, "condition")), "k == 1 || k == 3 || k == 5 || k == 7");
    spec = json_object_get(f, "specialized");
    assert_int_equal(json_array_size(spec), 1);
    assert_string_equal(json_string_value(json_array_get(spec, 0)), "blur_reg");
    json_decref(sites);
    free(blur);
}

#define TWO_KERNELS \
    "__global__ void ka(float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 1.0f; }\n" \
    "__global__ void kb(float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 1.0f; }\n"

#define CONV \
    "__global__ void conv(const float* x, float* y, int n, int k)\n" \
    "{\n" \
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n" \
    "    if (i >= n) return;\n" \
    "    float s = 0.0f;\n" \
    "    for (int j = 0; j < k; j++) s += x[(i + j) %% n];\n" \
    "    y[i] = s;\n" \
    "}\n" \
    "extern \"C\" void launch(const float* x, float* y, int n, int k, bool odd, cudaStream_t st)\n" \
    "{\n" \
    "%s" \
    "}\n"

static void specialize_says_why_not(void **state)
{
    (void)state;
    /* a condition that says nothing about sizes: neither branch is known to be general */
    const char *flag = TWO_KERNELS
        "extern \"C\" void launch(float* y, int n, bool fast, cudaStream_t s)\n"
        "{\n"
        "    if (fast)\n"
        "        ka<<<(n + 255) / 256, 256, 0, s>>>(y, n);\n"
        "    else\n"
        "        kb<<<(n + 255) / 256, 256, 0, s>>>(y, n);\n"
        "}\n";
    json_t *s = sites_of(flag), *f = NULL;
    const char *id = first_site(s, "present", &f);
    assert_non_null(id);
    assert_string_equal(id, "launch:5");
    assert_non_null(json_object_get(f, "why_not"));
    expect_not_applicable(flag, id, true, NULL, "cannot tell which branch is general at line 5");
    json_decref(s);

    /* a switch without a default: no branch handles every value */
    const char *nodefault = TWO_KERNELS
        "extern \"C\" void launch(float* y, int n, int k, cudaStream_t s)\n"
        "{\n"
        "    switch (k) {\n"
        "    case 1: ka<<<(n + 255) / 256, 256, 0, s>>>(y, n); break;\n"
        "    case 2: kb<<<(n + 255) / 256, 256, 0, s>>>(y, n); break;\n"
        "    }\n"
        "}\n";
    expect_not_applicable(nodefault, "launch:5", true, NULL, "has no default");

    /* the same kernel on both sides is no specialization (vectorize's VECTOR dispatch) */
    const char *same = TWO_KERNELS
        "extern \"C\" void launch(float* y, int n, cudaStream_t s)\n"
        "{\n"
        "    if (n > 4096)\n"
        "        ka<<<(n + 255) / 256, 256, 0, s>>>(y, n);\n"
        "    else\n"
        "        ka<<<(n + 127) / 128, 128, 0, s>>>(y, n);\n"
        "}\n";
    s = sites_of(same);
    assert_null(first_site(s, "present", NULL));
    json_decref(s);

    /* apply: values are required, and must be integers */
    char conv[2048];
    kl_snprintf(conv, sizeof conv, CONV, "    conv<<<(n + 127) / 128, 128, 0, st>>>(x, y, n, k);\n");
    s = sites_of(conv);
    id = first_site(s, "applicable", &f);
    assert_non_null(id);
    assert_string_equal(id, "conv:1:k");
    expect_not_applicable(conv, id, false, NULL, "needs values=");
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    assert_int_equal(kl_rules_rewrite("t.cu", conv, strlen(conv), NULL, "specialize", id, false, "{\"values\":\"5,x\"}",
                                      &out, &note, &err),
                     KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "values=5,x"));
    /* applied once: the copy exists, so not again */
    char *got = run_op(conv, false, id, "{\"values\":\"3\"}");
    assert_non_null(strstr(got, "template <int K>\n__global__ void conv_K("));
    assert_non_null(strstr(got, "    if (k == 3)\n        conv_K<3><<<(n + 127) / 128, 128, 0, st>>>(x, y, n, k);\n"
                                "    else\n        conv<<<"));
    expect_not_applicable(got, id, false, "{\"values\":\"5\"}", "already specialized");
    /* and the dispatch it wrote removes back to the input */
    json_t *back = sites_of(got);
    const char *pid = first_site(back, "present", NULL);
    assert_non_null(pid);
    char *again = run_op(got, true, pid, NULL);
    assert_string_equal(again, conv);
    free(again);
    json_decref(back);
    free(got);
    json_decref(s);

    /* a launch that is the body of an if without braces cannot take a dispatch */
    kl_snprintf(conv, sizeof conv, CONV, "    if (odd) conv<<<(n + 127) / 128, 128, 0, st>>>(x, y, n, k);\n");
    expect_not_applicable(conv, "conv:1:k", false, "{\"values\":\"3\"}", "not a statement of its own in a block");
    /* a launch that passes the size through a call */
    kl_snprintf(conv, sizeof conv, CONV, "    conv<<<(n + 127) / 128, 128, 0, st>>>(x, y, n, min(k, 9));\n");
    expect_not_applicable(conv, "conv:1:k", false, "{\"values\":\"3\"}", "with a call or a side effect");
}

/* Without values=, the value the task measures at: where launch() passes a size of the task,
 * and the value is one to unroll loops for. */
static void specialize_takes_the_bench_value_from_the_task(void **state)
{
    (void)state;
    const char *src = getenv("KL_SOURCE_DIR");
    assert_non_null(src);
    struct { const char *task, *site, *want; } cases[] = {
        {"blur", "blur_naive:7:k", "if (k == 7)"}, /* k = 7 at the bench shape */
        {"sgemm", "sgemm_naive:6:K", "the task's bench value, 4096, is not one to unroll loops for"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[600];
        kl_snprintf(dir, sizeof dir, "%s/tasks/%s", src, cases[i].task);
        kl_task *task = NULL;
        kl_error err = {0};
        assert_int_equal(kl_task_load(dir, &task, &err), KL_OK);
        char path[700];
        kl_snprintf(path, sizeof path, "%s/naive.cu", dir);
        char *text = NULL;
        assert_int_equal(kl_file_read(path, 0, &text, NULL, &err), KL_OK);
        char *out = NULL, *note = NULL;
        kl_status st = kl_rules_rewrite("naive.cu", text, strlen(text), task, "specialize", cases[i].site, false, "{}",
                                        &out, &note, &err);
        if (i == 0) {
            if (st != KL_OK) fail_msg("%s: %s", cases[i].site, err.message);
            assert_non_null(strstr(out, cases[i].want));
            assert_non_null(strstr(out, "(launched for k = 7)"));
        } else {
            assert_int_equal(st, KL_ERR_NOT_APPLICABLE);
            assert_non_null(strstr(err.message, cases[i].want));
        }
        /* without the task, values= is asked for */
        kl_error e2 = {0};
        char *o2 = NULL, *n2 = NULL;
        assert_int_equal(kl_rules_rewrite("naive.cu", text, strlen(text), NULL, "specialize", cases[i].site, false, "{}",
                                          &o2, &n2, &e2),
                         KL_ERR_NOT_APPLICABLE);
        assert_non_null(strstr(e2.message, "needs values="));
        free(o2), free(n2), free(out), free(note), free(text);
        kl_task_free(task);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(specialize_says_why_not),
        cmocka_unit_test(specialize_features),
        cmocka_unit_test(specialize_experts),
        cmocka_unit_test(specialize_takes_the_bench_value_from_the_task),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
