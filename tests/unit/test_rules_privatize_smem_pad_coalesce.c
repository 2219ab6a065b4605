/* privatize, smem-pad and coalesce (src/rewrite/rules/privatize.c, smem_pad.c, coalesce.c): the
 * reasons they give where they do not apply. Their golden cases (tests/data/rules/<transform>/,
 * the operations in NAME.test) run in test_rules_golden.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rewrite/rules/rules_tree.h"
#include "util/util.h"

/* ---- the driver ------------------------------------------------------------------------------ */

/* Find a site of `rule` in text going `way`, whose id contains `want` (or the first). */
static bool pick_site(const kl_rule *rule, const kl_rule_ctx *ctx, kl_site_dir way, const char *want, kl_sites *sites,
                      const kl_site **out)
{
    kl_error err = {0};
    assert_int_equal(rule->find(ctx, sites, &err), KL_OK);
    for (unsigned i = 0; i < sites->count; i++) {
        const kl_site *s = &sites->items[i];
        if (s->dir == way && (!want || strstr(s->id, want))) {
            *out = s;
            return true;
        }
    }
    return false;
}

/* Rewrite `text` one way at one site; returns the new text (free()) or NULL with err set. */
static char *rewrite(const kl_rule *rule, const char *name, const char *text, kl_site_dir way, const char *want,
                     const char *params_json, kl_status *status, kl_error *err)
{
    kl_source *src = NULL;
    char *result = NULL;
    assert_int_equal(kl_source_parse_text(name, text, strlen(text), &src, err), KL_OK);
    kl_rule_ctx ctx = {src, kl_source_text(src, NULL), strlen(text), NULL, NULL};
    kl_sites sites = {0};
    const kl_site *site = NULL;
    kl_edits edits = {0};
    if (!pick_site(rule, &ctx, way, want, &sites, &site)) {
        *status = KL_ERR_NOT_FOUND;
        kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no %s site%s%s of %s", name,
                     way == KL_SITE_APPLICABLE ? "applicable" : "present", want ? " matching " : "", want ? want : "",
                     rule->name);
        goto done;
    }
    json_t *params = json_loads(params_json ? params_json : "{}", 0, NULL);
    assert_non_null(params);
    *status = way == KL_SITE_APPLICABLE ? rule->apply(&ctx, site, params, &edits, err)
                                        : rule->remove(&ctx, site, &edits, err);
    json_decref(params);
    if (*status == KL_OK) *status = kl_edits_apply(&edits, ctx.text, ctx.len, &result, err);
done:
    kl_edits_release(&edits);
    kl_sites_release(&sites);
    kl_source_free(src);
    return result;
}

/* Apply must refuse with KL_ERR_NOT_APPLICABLE and a reason containing `why`. */
static void expect_not_applicable(const kl_rule *rule, const char *text, kl_site_dir way, const char *want,
                                  const char *params, const char *why)
{
    kl_error err = {0};
    kl_status st = KL_OK;
    char *got = rewrite(rule, "case.cu", text, way, want, params, &st, &err);
    if (st != KL_ERR_NOT_APPLICABLE || !strstr(err.message, why)) {
        print_error("expected 'not applicable: …%s…', got status %d: %s\n%s\n", why, st, err.message,
                    got ? got : "");
        fail();
    }
    free(got);
}

/* Count the sites of rule in text going `way`. */
static unsigned count_sites(const kl_rule *rule, const char *text, kl_site_dir way)
{
    kl_source *src = NULL;
    kl_error err = {0};
    assert_int_equal(kl_source_parse_text("case.cu", text, strlen(text), &src, &err), KL_OK);
    kl_rule_ctx ctx = {src, kl_source_text(src, NULL), strlen(text), NULL, NULL};
    kl_sites sites = {0};
    assert_int_equal(rule->find(&ctx, &sites, &err), KL_OK);
    unsigned n = 0;
    for (unsigned i = 0; i < sites.count; i++) n += sites.items[i].dir == way;
    kl_sites_release(&sites);
    kl_source_free(src);
    return n;
}

/* ---- privatize ------------------------------------------------------------------------------- */

static void privatize_refuses(void **state)
{
    (void)state;
    /* the index is a float bucket computed at run time: no bound */
    expect_not_applicable(&kl_rule_privatize,
                          "__global__ void h(const float *x, int *bins, int n, int nb) {\n"
                          "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                          "    if (i < n) atomicAdd(&bins[(int)(x[i] * nb)], 1);\n"
                          "}\n",
                          KL_SITE_APPLICABLE, NULL, NULL, "cannot bound the index");
    /* 32 copies of 1024 ints do not fit in 48 KiB */
    expect_not_applicable(&kl_rule_privatize,
                          "__global__ void h(const unsigned *x, int *bins, int n) {\n"
                          "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                          "    if (i < n) atomicAdd(&bins[x[i] & 1023u], 1);\n"
                          "}\n",
                          KL_SITE_APPLICABLE, NULL, "{\"copies\": \"32\"}", "over the 48 KiB");
    /* the table is also read */
    expect_not_applicable(&kl_rule_privatize,
                          "__global__ void h(const unsigned char *x, int *bins, int n) {\n"
                          "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                          "    if (i < n) atomicAdd(&bins[x[i]], bins[0]);\n"
                          "}\n",
                          KL_SITE_APPLICABLE, NULL, NULL, "used other than");
    /* too large for shared memory */
    expect_not_applicable(&kl_rule_privatize,
                          "__global__ void h(const int *x, int *bins, int n) {\n"
                          "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                          "    if (i < n) atomicAdd(&bins[x[i] & 65535], 1);\n"
                          "}\n",
                          KL_SITE_APPLICABLE, NULL, NULL, "shared memory");
    /* present: the shared table is read besides the atomics */
    expect_not_applicable(&kl_rule_privatize,
                          "__global__ void h(const unsigned char *x, int *bins, int n) {\n"
                          "    __shared__ int s[256];\n"
                          "    for (int i = threadIdx.x; i < 256; i += blockDim.x) s[i] = 0;\n"
                          "    __syncthreads();\n"
                          "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                          "    if (i < n) atomicAdd(&s[x[i]], s[0] + 1);\n"
                          "    __syncthreads();\n"
                          "    for (int i = threadIdx.x; i < 256; i += blockDim.x) atomicAdd(&bins[i], s[i]);\n"
                          "}\n",
                          KL_SITE_PRESENT, NULL, NULL, "used other than");
    /* interleaved copies: a copy read other than by the merge */
    expect_not_applicable(&kl_rule_privatize,
                          "__global__ void h(const unsigned char *x, int *bins, int *peek, int n) {\n"
                          "    __shared__ int s[256 * 32];\n"
                          "    for (int b = threadIdx.x; b < 256 * 32; b += blockDim.x) s[b] = 0;\n"
                          "    __syncthreads();\n"
                          "    int *mine = s + threadIdx.x % 32;\n"
                          "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                          "    if (i < n) atomicAdd(&mine[x[i] * 32], 1);\n"
                          "    if (i < n) peek[i] = mine[0];\n"
                          "    __syncthreads();\n"
                          "    for (int b = threadIdx.x; b < 256; b += blockDim.x) {\n"
                          "        int c = 0;\n"
                          "        for (int l = 0; l < 32; l++) c += s[b * 32 + l];\n"
                          "        atomicAdd(&bins[b], c);\n"
                          "    }\n"
                          "}\n",
                          KL_SITE_PRESENT, NULL, NULL, "8:26: 'mine' is used other than as an atomicAdd target");
    /* interleaved copies: the atomics step by 16, not by the 32 copies */
    expect_not_applicable(&kl_rule_privatize,
                          "__global__ void h(const unsigned char *x, int *bins, int n) {\n"
                          "    __shared__ int s[256 * 32];\n"
                          "    for (int b = threadIdx.x; b < 256 * 32; b += blockDim.x) s[b] = 0;\n"
                          "    __syncthreads();\n"
                          "    int *mine = s + threadIdx.x % 32;\n"
                          "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                          "    if (i < n) atomicAdd(&mine[x[i] * 16], 1);\n"
                          "    __syncthreads();\n"
                          "    for (int b = threadIdx.x; b < 256; b += blockDim.x) {\n"
                          "        int c = 0;\n"
                          "        for (int l = 0; l < 32; l++) c += s[b * 32 + l];\n"
                          "        atomicAdd(&bins[b], c);\n"
                          "    }\n"
                          "}\n",
                          KL_SITE_PRESENT, NULL, NULL, "7:32: 'mine' is used other than");
    /* interleaved copies: the merge reads only the first copy of each entry */
    expect_not_applicable(&kl_rule_privatize,
                          "__global__ void h(const unsigned char *x, int *bins, int n) {\n"
                          "    __shared__ int s[256 * 32];\n"
                          "    for (int b = threadIdx.x; b < 256 * 32; b += blockDim.x) s[b] = 0;\n"
                          "    __syncthreads();\n"
                          "    int *mine = s + threadIdx.x % 32;\n"
                          "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                          "    if (i < n) atomicAdd(&mine[x[i] * 32], 1);\n"
                          "    __syncthreads();\n"
                          "    for (int b = threadIdx.x; b < 256; b += blockDim.x) atomicAdd(&bins[b], s[b * 32]);\n"
                          "}\n",
                          KL_SITE_PRESENT, NULL, NULL, "the merge does not sum the 32 copies");
    /* no atomics: no site at all */
    assert_int_equal(count_sites(&kl_rule_privatize,
                                 "__global__ void k(float *y) { y[threadIdx.x] = 1.0f; }\n", KL_SITE_APPLICABLE),
                     0);
}

/* ---- smem-pad -------------------------------------------------------------------------------- */

static void smem_pad_refuses(void **state)
{
    (void)state;
    /* the tile's address is taken: its row length is visible */
    expect_not_applicable(&kl_rule_smem_pad,
                          "__global__ void k(float *o) {\n"
                          "    __shared__ float t[32][32];\n"
                          "    t[threadIdx.y][threadIdx.x] = 1.0f;\n"
                          "    float *p = &t[0][0];\n"
                          "    __syncthreads();\n"
                          "    o[threadIdx.x] = t[threadIdx.x][0] + p[33];\n"
                          "}\n",
                          KL_SITE_APPLICABLE, NULL, NULL, "full subscript");
    /* float4 reads from an element's address: a row of 30 floats unpadded would misalign them */
    expect_not_applicable(&kl_rule_smem_pad,
                          "__global__ void k(float *o) {\n"
                          "    __shared__ __align__(16) float t[30][30 + 2];\n"
                          "    t[threadIdx.x][threadIdx.y] = 1.0f;\n"
                          "    __syncthreads();\n"
                          "    float4 v = *reinterpret_cast<const float4 *>(&t[threadIdx.y][4 * threadIdx.x]);\n"
                          "    o[threadIdx.x] = v.x + v.w;\n"
                          "}\n",
                          KL_SITE_PRESENT, NULL, NULL, "would not keep those accesses aligned");
    /* and a pad of 1 under float4 reads is refused (rows of 33 floats misalign them) */
    expect_not_applicable(&kl_rule_smem_pad,
                          "__global__ void k(float *o) {\n"
                          "    __shared__ __align__(16) float t[32][32];\n"
                          "    t[threadIdx.x][threadIdx.y] = 1.0f;\n"
                          "    __syncthreads();\n"
                          "    float4 v = *reinterpret_cast<const float4 *>(&t[threadIdx.y][4 * threadIdx.x]);\n"
                          "    o[threadIdx.x] = v.x + v.w;\n"
                          "}\n",
                          KL_SITE_APPLICABLE, NULL, "{\"pad\": 1}", "would misalign");
    /* only rows are read: no bank conflict, no site */
    assert_int_equal(count_sites(&kl_rule_smem_pad,
                                 "__global__ void k(float *o) {\n"
                                 "    __shared__ float t[32][32];\n"
                                 "    t[threadIdx.y][threadIdx.x] = 1.0f;\n"
                                 "    __syncthreads();\n"
                                 "    o[threadIdx.x] = t[threadIdx.y][threadIdx.x];\n"
                                 "}\n",
                                 KL_SITE_APPLICABLE),
                     0);
    /* a row of 33 floats already conflicts with nothing */
    assert_int_equal(count_sites(&kl_rule_smem_pad,
                                 "__global__ void k(float *o) {\n"
                                 "    __shared__ float t[32][33];\n"
                                 "    o[threadIdx.x] = t[threadIdx.x][0];\n"
                                 "}\n",
                                 KL_SITE_APPLICABLE),
                     0);
    /* a stencil halo is not padding */
    assert_int_equal(count_sites(&kl_rule_smem_pad,
                                 "#define B 16\n"
                                 "__global__ void k(float *o) {\n"
                                 "    __shared__ float t[B + 2][B + 2];\n"
                                 "    o[threadIdx.x] = t[threadIdx.y + 1][threadIdx.x + 1];\n"
                                 "}\n",
                                 KL_SITE_PRESENT),
                     0);
}

/* ---- coalesce -------------------------------------------------------------------------------- */

static void coalesce_refuses(void **state)
{
    (void)state;
    /* a transpose (staged): the block must be square, so that a thread's partner is in it */
    expect_not_applicable(&kl_rule_coalesce,
                          "__global__ void t(const float *x, float *y, int R, int C)\n{\n"
                          "    int c = blockIdx.x * 32 + threadIdx.x;\n"
                          "    int r = blockIdx.y * 8 + threadIdx.y;\n"
                          "    if (r < R && c < C) y[c * R + r] = x[r * C + c];\n"
                          "}\n"
                          "void go(const float *x, float *y, int R, int C) { t<<<dim3(C / 32, R / 8), dim3(32, 8)>>>(x, y, R, C); }\n",
                          KL_SITE_APPLICABLE, NULL, NULL, "not square");
    /* … a compile-time block */
    expect_not_applicable(&kl_rule_coalesce,
                          "__global__ void t(const float *x, float *y, int R, int C)\n{\n"
                          "    int c = blockIdx.x * blockDim.x + threadIdx.x;\n"
                          "    int r = blockIdx.y * blockDim.y + threadIdx.y;\n"
                          "    if (r < R && c < C) y[c * R + r] = x[r * C + c];\n"
                          "}\n"
                          "void go(const float *x, float *y, int R, int C, int b) { t<<<dim3(C / b, R / b), dim3(b, b)>>>(x, y, R, C); }\n",
                          KL_SITE_APPLICABLE, NULL, NULL, "compile-time constants");
    /* … one write, not in a loop */
    expect_not_applicable(&kl_rule_coalesce,
                          "__global__ void t(const float *x, float *y, int R, int C)\n{\n"
                          "    int c = blockIdx.x * 16 + threadIdx.x;\n"
                          "    int r = blockIdx.y * 16 + threadIdx.y;\n"
                          "    for (int k = 0; k < 2; k++) y[k * R * C + c * R + r] = x[k * R * C + r * C + c];\n"
                          "}\n"
                          "void go(const float *x, float *y, int R, int C) { t<<<dim3(C / 16, R / 16), dim3(16, 16)>>>(x, y, R, C); }\n",
                          KL_SITE_APPLICABLE, NULL, NULL, "inside a loop");
    /* … several rows per thread: the rows must split evenly, */
    expect_not_applicable(&kl_rule_coalesce,
                          "__global__ void t(const float *x, float *y, int R, int C)\n{\n"
                          "    int c = blockIdx.x * 4 + threadIdx.x;\n"
                          "    int r = blockIdx.y * 4 + threadIdx.y;\n"
                          "    if (r < R && c < C) y[c * R + r] = x[r * C + c];\n"
                          "}\n"
                          "void go(const float *x, float *y, int R, int C) { t<<<dim3(C / 4, R / 4), dim3(3, 3)>>>(x, y, R, C); }\n",
                          KL_SITE_APPLICABLE, NULL, "{\"rows_per_thread\": \"2\"}", "no 2 equal parts");
    /* … the kernel must not read blockDim (it would see the narrower block), */
    expect_not_applicable(&kl_rule_coalesce,
                          "__global__ void t(const float *x, float *y, int R, int C)\n{\n"
                          "    int c = blockIdx.x * blockDim.x + threadIdx.x;\n"
                          "    int r = blockIdx.y * blockDim.y + threadIdx.y;\n"
                          "    if (r < R && c < C) y[c * R + r] = x[r * C + c];\n"
                          "}\n"
                          "void go(const float *x, float *y, int R, int C) { t<<<dim3(C / 16, R / 16), dim3(16, 16)>>>(x, y, R, C); }\n",
                          KL_SITE_APPLICABLE, NULL, "{\"rows_per_thread\": \"4\"}", "reads blockDim");
    /* … nor the host code the block's extents. */
    expect_not_applicable(&kl_rule_coalesce,
                          "__global__ void t(const float *x, float *y, int R, int C)\n{\n"
                          "    int c = blockIdx.x * 16 + threadIdx.x;\n"
                          "    int r = blockIdx.y * 16 + threadIdx.y;\n"
                          "    if (r < R && c < C) y[c * R + r] = x[r * C + c];\n"
                          "}\n"
                          "void go(const float *x, float *y, int R, int C) {\n"
                          "    dim3 b(16, 16);\n"
                          "    dim3 g((C + b.x - 1) / b.x, (R + b.y - 1) / b.y);\n"
                          "    t<<<g, b>>>(x, y, R, C);\n"
                          "}\n",
                          KL_SITE_APPLICABLE, NULL, "{\"rows_per_thread\": \"2\"}", "used besides the launch");
    /* … and no shared memory or barrier of its own (the phases would run them twice) */
    expect_not_applicable(&kl_rule_coalesce,
                          "__global__ void t(const float *x, float *y, int R, int C)\n{\n"
                          "    __shared__ float s[16];\n"
                          "    int c = blockIdx.x * 16 + threadIdx.x;\n"
                          "    int r = blockIdx.y * 16 + threadIdx.y;\n"
                          "    if (r < R && c < C) y[c * R + r] = x[r * C + c] + s[0];\n"
                          "}\n"
                          "void go(const float *x, float *y, int R, int C) { t<<<dim3(C / 16, R / 16), dim3(16, 16)>>>(x, y, R, C); }\n",
                          KL_SITE_APPLICABLE, NULL, NULL, "shared memory already");
    /* remove: the write after the barrier reads a thread index the store's side cannot map */
    expect_not_applicable(&kl_rule_coalesce,
                          "__global__ void t(const float *x, float *y, int R, int C)\n{\n"
                          "    __shared__ float tl[16][16];\n"
                          "    int c = blockIdx.x * 16 + threadIdx.x, r = blockIdx.y * 16 + threadIdx.y;\n"
                          "    if (r < R && c < C) tl[threadIdx.y][threadIdx.x] = x[r * C + c];\n"
                          "    __syncthreads();\n"
                          "    int k = threadIdx.z;\n"
                          "    for (int i = 0; i < 2; i++) y[(blockIdx.x * 16 + i) * R + blockIdx.y * 16 + threadIdx.x] = tl[threadIdx.x][threadIdx.y];\n"
                          "}\n"
                          "void go(const float *x, float *y, int R, int C) { t<<<dim3(C / 16, R / 16), dim3(16, 16)>>>(x, y, R, C); }\n",
                          KL_SITE_PRESENT, NULL, NULL, "depends on 'i'");
    /* remove, rows `threadIdx.y + j` of loops over rows (the blog-style transpose): the write's loop
     * must read its row only as that sum (here `y` alone picks the output column) … */
    expect_not_applicable(&kl_rule_coalesce,
                          "#define T 32\n#define R 8\n"
                          "__global__ void t(float *o, const float *in, int w, int h)\n{\n"
                          "    __shared__ float tile[T][T + 1];\n"
                          "    int x = blockIdx.x * T + threadIdx.x, y = blockIdx.y * T + threadIdx.y;\n"
                          "    for (int j = 0; j < T; j += R) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * w + x];\n"
                          "    __syncthreads();\n"
                          "    x = blockIdx.y * T + threadIdx.x;\n"
                          "    y = blockIdx.x * T + threadIdx.y;\n"
                          "    for (int j = 0; j < T; j += R) o[(y + j) * h + x + y] = tile[threadIdx.x][threadIdx.y + j];\n"
                          "}\n"
                          "void go(const float *in, float *o, int w, int h) { t<<<dim3(w / T, h / T), dim3(T, R)>>>(o, in, w, h); }\n",
                          KL_SITE_PRESENT, NULL, NULL, "reads the thread index other than added to the loop variable (y)");
    /* … and both sides must walk the same rows */
    expect_not_applicable(&kl_rule_coalesce,
                          "#define T 32\n#define R 8\n"
                          "__global__ void t(float *o, const float *in, int w, int h)\n{\n"
                          "    __shared__ float tile[T][T + 1];\n"
                          "    int x = blockIdx.x * T + threadIdx.x, y = blockIdx.y * T + threadIdx.y;\n"
                          "    for (int j = 0; j < T; j += R) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * w + x];\n"
                          "    __syncthreads();\n"
                          "    x = blockIdx.y * T + threadIdx.x;\n"
                          "    y = blockIdx.x * T + threadIdx.y;\n"
                          "    for (int j = 0; j < T / 2; j += R) o[(y + j) * h + x] = tile[threadIdx.x][threadIdx.y + j];\n"
                          "}\n"
                          "void go(const float *in, float *o, int w, int h) { t<<<dim3(w / T, h / T), dim3(T, R)>>>(o, in, w, h); }\n",
                          KL_SITE_PRESENT, NULL, NULL, "the loops over the tile's rows at lines 7 and 11 differ");
    /* warp-synchronous code */
    expect_not_applicable(&kl_rule_coalesce,
                          "__global__ void k(const float *x, float *y, int C) {\n"
                          "    int r = blockIdx.x * 32 + threadIdx.x;\n"
                          "    int c = threadIdx.y;\n"
                          "    float v = x[r * C + c];\n"
                          "    v += __shfl_down_sync(0xffffffffu, v, 1);\n"
                          "    y[r * C + c] = v;\n"
                          "}\n"
                          "void go(const float *x, float *y, int C) { k<<<dim3(4, 1), dim3(32, 8)>>>(x, y, C); }\n",
                          KL_SITE_APPLICABLE, NULL, NULL, "warp-synchronous");
    /* the launch is elsewhere */
    expect_not_applicable(&kl_rule_coalesce,
                          "__global__ void k(const float *x, float *y, int C) {\n"
                          "    int r = blockIdx.x * 32 + threadIdx.x;\n"
                          "    int c = blockIdx.y * 8 + threadIdx.y;\n"
                          "    y[r * C + c] = x[r * C + c];\n"
                          "}\n",
                          KL_SITE_APPLICABLE, NULL, NULL, "not launched in this file");
    /* the block is shared with another launch */
    expect_not_applicable(&kl_rule_coalesce,
                          "__global__ void k(const float *x, float *y, int C) {\n"
                          "    int r = blockIdx.x * 32 + threadIdx.x;\n"
                          "    int c = blockIdx.y * 8 + threadIdx.y;\n"
                          "    y[r * C + c] = x[r * C + c];\n"
                          "}\n"
                          "__global__ void other(float *y) { y[threadIdx.x] = 0; }\n"
                          "void go(const float *x, float *y, int C) {\n"
                          "    dim3 b(32, 8);\n"
                          "    k<<<dim3(4, 4), b>>>(x, y, C);\n"
                          "    other<<<dim3(1, 1), b>>>(y);\n"
                          "}\n",
                          KL_SITE_APPLICABLE, NULL, NULL, "other launches");
    /* already coalesced: no site */
    assert_int_equal(count_sites(&kl_rule_coalesce,
                                 "__global__ void k(const float *x, float *y, int C) {\n"
                                 "    int c = blockIdx.x * 32 + threadIdx.x;\n"
                                 "    int r = blockIdx.y * 8 + threadIdx.y;\n"
                                 "    y[r * C + c] = x[r * C + c];\n"
                                 "}\n",
                                 KL_SITE_APPLICABLE),
                     0);
}

/* ---- nvcc -------------------------------------------------------------------------------------- */


int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(privatize_refuses),
        cmocka_unit_test(smem_pad_refuses),
        cmocka_unit_test(coalesce_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
