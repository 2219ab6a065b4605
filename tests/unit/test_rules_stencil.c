/* The stencil idioms of issue 16: interior-path (src/rewrite/rules/interior_path.c), register-tile's stencil
 * form (register_tile_stencil.c) and const-mem (const_mem.c). Their golden cases run in test_rules_golden.c
 * (tests/data/rules/{interior-path,register-tile/stencil,const-mem}/); here: the reasons they give where they
 * do not rewrite, the forms that are no site, the fallback guard of interior-path, and the blur expert taken
 * apart by the three of them (what is left, what each leaves behind). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/rewrite.h"
#include "rewrite/rules/rules.h"
#include "util/util.h"

static char *read_source(const char *rel)
{
    const char *root = getenv("KL_SOURCE_DIR");
    assert_non_null(root);
    char p[1024];
    kl_snprintf(p, sizeof p, "%s/%s", root, rel);
    char *t = NULL;
    size_t n;
    kl_error err = {0};
    if (kl_file_read(p, 0, &t, &n, &err) != KL_OK) fail_msg("%s: %s", p, err.message);
    return t;
}

/* The sites of one transform, as a JSON array (owned). */
static json_t *sites_of(const char *text, const char *transform)
{
    char *json = NULL;
    kl_error err = {0};
    if (kl_rules_list("t.cu", text, strlen(text), NULL, transform, &json, &err) != KL_OK) fail_msg("%s", err.message);
    json_t *a = json_loads(json, 0, NULL);
    free(json);
    assert_non_null(a);
    return a;
}

/* The site whose id starts with prefix (NULL when none); its direction into *dir. */
static json_t *site_named(json_t *sites, const char *prefix)
{
    size_t i;
    json_t *s;
    json_array_foreach(sites, i, s) {
        if (kl_str_starts(json_string_value(json_object_get(s, "site")), prefix)) return s;
    }
    return NULL;
}

static char *removed(const char *text, const char *transform, const char *site)
{
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    if (kl_rules_rewrite("t.cu", text, strlen(text), NULL, transform, site, true, NULL, &out, &note, &err) != KL_OK)
        fail_msg("%s@%s: %s", transform, site, err.message);
    free(note);
    return out;
}

static void expect_refused(const char *text, const char *transform, const char *site, const char *want)
{
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    kl_status st = kl_rules_rewrite("t.cu", text, strlen(text), NULL, transform, site, true, NULL, &out, &note, &err);
    if (st != KL_ERR_NOT_APPLICABLE) fail_msg("%s@%s: expected not applicable, got %d (%s)", transform, site, st, err.message);
    if (!strstr(err.message, want)) fail_msg("%s@%s: the reason '%s' does not say '%s'", transform, site, err.message, want);
    assert_null(out);
}

/* ---- interior-path ---------------------------------------------------------------------------------------- */

/* A block extent known only at run time: the interior test cannot be shown to imply `x < w`, so the tested
 * call runs under both (nothing that ran before is skipped); a flag that selects code (VEC) is no site. */
static void interior_path_guard_and_non_sites(void **state)
{
    (void)state;
    static const char *text =
        "template <bool EDGE>\n"
        "__device__ void row3(const float* a, float* b, int w, int x)\n"
        "{\n"
        "    float s = 0.0f;\n"
        "    for (int d = -1; d <= 1; d++)\n"
        "        if (!EDGE || (x + d >= 0 && x + d < w)) s += a[x + d];\n"
        "    b[x] = s;\n"
        "}\n"
        "__global__ void k(const float* a, float* b, int w)\n"
        "{\n"
        "    const int x0 = blockIdx.x * blockDim.x;\n"
        "    const int x = x0 + threadIdx.x;\n"
        "    const bool inside = x0 >= 1 && x0 + (int)blockDim.x + 1 <= w;\n"
        "    if (inside)\n"
        "        row3<false>(a, b, w, x);\n"
        "    else if (x < w)\n"
        "        row3<true>(a, b, w, x);\n"
        "}\n"
        "extern \"C\" void launch(const float* a, float* b, int w, int t, cudaStream_t s)\n"
        "{\n"
        "    k<<<(w + t - 1) / t, t, 0, s>>>(a, b, w);\n"
        "}\n";
    json_t *sites = sites_of(text, "interior-path");
    json_t *s = site_named(sites, "k:14");
    assert_non_null(s);
    assert_string_equal(json_string_value(json_object_get(s, "direction")), "present");
    assert_string_equal(json_string_value(json_object_get(json_object_get(s, "features"), "form")), "flag");
    json_decref(sites);
    char *out = removed(text, "interior-path", "k:14");
    assert_non_null(strstr(out, "    if ((inside) || (x < w))\n        row3<true>(a, b, w, x);\n"));
    assert_null(strstr(out, "row3<false>"));
    free(out);

    /* the same with the block size known at compile time: the guard alone, and `inside` goes */
    char *known = kl_strdup(text);
    char *p = strstr(known, "(int)blockDim.x");
    assert_non_null(p);
    memcpy(p, "            128", strlen("(int)blockDim.x"));
    p = strstr(known, "(w + t - 1) / t, t");
    assert_non_null(p);
    memcpy(p, "(w + 127)/128, 128", strlen("(w + t - 1) / t, t"));
    out = removed(known, "interior-path", "k:14");
    assert_non_null(strstr(out, "    if (x < w)\n        row3<true>(a, b, w, x);\n"));
    assert_null(strstr(out, "inside"));
    free(out);
    free(known);

    /* a flag that chooses code rather than dropping tests, one that drops a test that is no bounds test (an
     * accumulation), and a thread-level choice between two code blocks */
    static const char *none =
        "template <bool VEC>\n"
        "__device__ void put(const float* a, float* b, int x)\n"
        "{\n"
        "    if (VEC) reinterpret_cast<float4*>(b)[x] = reinterpret_cast<const float4*>(a)[x];\n"
        "    else b[x] = a[x];\n"
        "}\n"
        "template <bool ACC>\n"
        "__device__ void acc(float* b, int x, float v, float beta)\n"
        "{\n"
        "    b[x] = v + (ACC && beta != 0.0f ? beta * b[x] : 0.0f);\n"
        "}\n"
        "__global__ void k(const float* a, float* b, int n)\n"
        "{\n"
        "    const int x = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (n % 4 == 0) put<true>(a, b, x);\n"
        "    else put<false>(a, b, x);\n"
        "    if (n > 4) acc<true>(b, x, 2.0f, 0.5f);\n"
        "    else acc<false>(b, x, 2.0f, 0.5f);\n"
        "    if (x > 0 && x < n - 1) {\n"
        "        b[x] += a[x - 1];\n"
        "    } else {\n"
        "        if (x < n) b[x] += x > 0 ? a[x - 1] : 0.0f;\n"
        "    }\n"
        "}\n";
    sites = sites_of(none, "interior-path");
    assert_int_equal(json_array_size(sites), 0);
    json_decref(sites);
}

/* ---- register-tile, stencil form ------------------------------------------------------------------------- */

static void register_tile_stencil_refusals(void **state)
{
    (void)state;
    /* the grid does not follow the constant: fewer outputs per thread would leave rows uncomputed */
    static const char *fixed =
        "#define ROWS 4\n"
        "__global__ void k(const float* a, float* b, int w, int h)\n"
        "{\n"
        "    const int x = blockIdx.x * 32 + threadIdx.x;\n"
        "    const int y0 = (blockIdx.y * 8 + threadIdx.y) * ROWS;\n"
        "    for (int o = 0; o < ROWS; o++)\n"
        "        if (x < w && y0 + o < h) b[(y0 + o) * w + x] = 2.0f * a[(y0 + o) * w + x];\n"
        "}\n"
        "extern \"C\" void launch(const float* a, float* b, int h, int w, cudaStream_t s)\n"
        "{\n"
        "    k<<<dim3((w + 31) / 32, (h + 31) / 32), dim3(32, 8), 0, s>>>(a, b, w, h);\n"
        "}\n";
    expect_refused(fixed, "register-tile", "k:6:ROWS", "does not follow ROWS along y");
    /* the code depends on the value */
    static const char *eq =
        "#define ROWS 4\n"
        "__global__ void k(const float* a, float* b, int w, int h)\n"
        "{\n"
        "    const int x = blockIdx.x * 32 + threadIdx.x;\n"
        "    const int y0 = (blockIdx.y * 8 + threadIdx.y) * ROWS;\n"
        "    for (int o = 0; o < ROWS; o++)\n"
        "        if (x < w && y0 + o < h) b[(y0 + o) * w + x] = (ROWS == 4 ? 2.0f : 1.0f) * a[(y0 + o) * w + x];\n"
        "}\n"
        "extern \"C\" void launch(const float* a, float* b, int h, int w, cudaStream_t s)\n"
        "{\n"
        "    k<<<dim3((w + 31) / 32, (h + 8 * ROWS - 1) / (8 * ROWS)), dim3(32, 8), 0, s>>>(a, b, w, h);\n"
        "}\n";
    expect_refused(eq, "register-tile", "k:6:ROWS", "compares ROWS with a value");
    /* shared memory: not this form's (smem-tile's outputs_x) */
    static const char *smem =
        "#define ROWS 4\n"
        "__global__ void k(const float* a, float* b, int w, int h)\n"
        "{\n"
        "    __shared__ float t[8 * ROWS][32];\n"
        "    const int x = blockIdx.x * 32 + threadIdx.x;\n"
        "    const int y0 = (blockIdx.y * 8 + threadIdx.y) * ROWS;\n"
        "    for (int o = 0; o < ROWS; o++) t[threadIdx.y * ROWS + o][threadIdx.x] = a[(y0 + o) * w + x];\n"
        "    __syncthreads();\n"
        "    for (int o = 0; o < ROWS; o++) b[(y0 + o) * w + x] = t[threadIdx.y * ROWS + o][threadIdx.x];\n"
        "}\n"
        "extern \"C\" void launch(const float* a, float* b, int h, int w, cudaStream_t s)\n"
        "{\n"
        "    k<<<dim3(w / 32, h / (8 * ROWS)), dim3(32, 8), 0, s>>>(a, b, w, h);\n"
        "}\n";
    json_t *sites = sites_of(smem, "register-tile");
    assert_null(site_named(sites, "k:7:ROWS"));
    json_decref(sites);
}

/* ---- const-mem ----------------------------------------------------------------------------------------------- */

static void const_mem_refusals(void **state)
{
    (void)state;
    static const char *host_kind =
        "__constant__ float c_w[9];\n"
        "__global__ void k(const float* a, float* b, int n)\n"
        "{\n"
        "    const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) b[i] = c_w[i % 9] * a[i];\n"
        "}\n"
        "extern \"C\" void launch(const float* a, const float* w, float* b, int n, cudaStream_t s)\n"
        "{\n"
        "    cudaMemcpyToSymbol(c_w, w, 9 * sizeof(float));\n"
        "    k<<<(n + 255) / 256, 256, 0, s>>>(a, b, n);\n"
        "}\n";
    expect_refused(host_kind, "const-mem", "k:5:c_w", "cudaMemcpyHostToDevice (the default kind): w is host memory");
    static const char *elsewhere =
        "__constant__ float c_w[9];\n"
        "__global__ void k(const float* a, float* b, int n)\n"
        "{\n"
        "    const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) b[i] = c_w[i % 9] * a[i];\n"
        "}\n"
        "static void set(const float* w, cudaStream_t s)\n"
        "{\n"
        "    cudaMemcpyToSymbolAsync(c_w, w, 9 * sizeof(float), 0, cudaMemcpyDeviceToDevice, s);\n"
        "}\n"
        "extern \"C\" void launch(const float* a, const float* w, float* b, int n, cudaStream_t s)\n"
        "{\n"
        "    set(w, s);\n"
        "    k<<<(n + 255) / 256, 256, 0, s>>>(a, b, n);\n"
        "}\n";
    expect_refused(elsewhere, "const-mem", "k:5:c_w", "k is launched at line 14, not after the copy to c_w in set");
    /* a table of constants written in the file is not copied from anywhere */
    static const char *table =
        "__constant__ float c_w[3] = {0.25f, 0.5f, 0.25f};\n"
        "__global__ void k(const float* a, float* b, int n)\n"
        "{\n"
        "    const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) b[i] = c_w[i % 3] * a[i];\n"
        "}\n"
        "extern \"C\" void launch(const float* a, float* b, int n, cudaStream_t s)\n"
        "{\n"
        "    k<<<(n + 255) / 256, 256, 0, s>>>(a, b, n);\n"
        "}\n";
    expect_refused(table, "const-mem", "k:5:c_w", "never copied to");
}

/* ---- the blur expert ---------------------------------------------------------------------------------------- */

/* The three find their sites in tasks/blur/expert.cu inside the register kernel; OUT_X is refused while the
 * float4 path is there, and once vectorize is gone it goes with the static_assert's `OUT_X == 4`. After all
 * of them the register kernel reads the filter from `filt`, one output per thread, the tested path for every
 * block: what `specialize` then removes is the dispatch alone. */
static void blur_expert_taken_apart(void **state)
{
    (void)state;
    char *text = read_source("tasks/blur/expert.cu");
    json_t *s, *sites = sites_of(text, "register-tile");
    json_t *ox = site_named(sites, "blur_rows:46:OUT_X"), *oy = site_named(sites, "blur_rows:44:OUT_Y");
    assert_non_null(ox);
    assert_non_null(oy);
    assert_string_equal(json_string_value(json_object_get(oy, "direction")), "present");
    assert_string_equal(json_string_value(json_object_get(ox, "direction")), "refused");
    assert_non_null(strstr(json_string_value(json_object_get(ox, "reason")), "remove vectorize first"));
    json_decref(sites);

    char *t1 = removed(text, "interior-path", "blur_reg:114");
    char *t2 = removed(t1, "const-mem", "blur_rows:79:c_filt");
    sites = sites_of(t2, "register-tile");
    char *t3 = NULL;
    size_t k;
    json_array_foreach(sites, k, s) {
        const char *sid = json_string_value(json_object_get(s, "site"));
        if (strstr(sid, ":OUT_Y")) t3 = removed(t2, "register-tile", sid);
    }
    json_decref(sites);
    assert_non_null(t3);
    sites = sites_of(t3, "vectorize");
    s = site_named(sites, "blur_rows:");
    assert_non_null(s);
    char *t4 = removed(t3, "vectorize", json_string_value(json_object_get(s, "site")));
    json_decref(sites);
    sites = sites_of(t4, "register-tile");
    char *t5 = NULL;
    json_array_foreach(sites, k, s) {
        const char *sid = json_string_value(json_object_get(s, "site"));
        if (strstr(sid, ":OUT_X")) t5 = removed(t4, "register-tile", sid);
    }
    json_decref(sites);
    assert_non_null(t5);
    assert_non_null(strstr(t5, "constexpr int OUT_X = 1;"));
    assert_non_null(strstr(t5, "constexpr int OUT_Y = 1;"));
    assert_non_null(strstr(t5, "static_assert(MAX_CONST_K / 2 < HALO,"));
    assert_null(strstr(t5, "c_filt"));
    assert_null(strstr(t5, "bool inside"));
    assert_null(strstr(t5, "make_float4"));
    assert_non_null(strstr(t5, "const float f = filt[i * K + j];"));
    /* none of the three is left */
    const char *names[] = {"interior-path", "const-mem", "register-tile"};
    for (unsigned i = 0; i < 3; i++) {
        sites = sites_of(t5, names[i]);
        json_t *x;
        json_array_foreach(sites, k, x) {
            if (!strcmp(json_string_value(json_object_get(x, "direction")), "applicable")) continue;
            fail_msg("%s still finds %s in the stripped blur", names[i], json_string_value(json_object_get(x, "site")));
        }
        json_decref(sites);
    }
    /* every step compiles (skipped without nvcc) */
    if (kl_rules_nvcc()) {
        const char *const texts[] = {t1, t2, t3, t4, t5};
        bool ok[5] = {false};
        char *why[5] = {NULL};
        kl_error err = {0};
        if (kl_rules_compile_texts(5, NULL, texts, NULL, 2, 0, ok, why, &err) != KL_OK) fail_msg("%s", err.message);
        for (unsigned i = 0; i < 5; i++) {
            if (!ok[i]) fail_msg("step %u does not compile: %s", i + 1, why[i] ? why[i] : "");
            free(why[i]);
        }
    } else {
        print_message("no nvcc: the steps are not compiled\n");
    }
    free(t1), free(t2), free(t3), free(t4), free(t5), free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(interior_path_guard_and_non_sites),
        cmocka_unit_test(register_tile_stencil_refusals),
        cmocka_unit_test(const_mem_refusals),
        cmocka_unit_test(blur_expert_taken_apart),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
