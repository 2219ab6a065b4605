/* The rules catalog: tensor-core (src/rewrite/rules/tensor_core.c). Golden cases (run by test_rules_golden.c) in
 * tests/data/rules/tensor-core/<case>.before.cu, whose first line says what to do
 * (`// test: apply tensor-core@gemm:12 | remove tensor-core@gemm:23`): the result must equal
 * <case>.after.cu byte for byte (KL_UPDATE_GOLDEN=1 rewrites them), the reverse must give back the
 * original or at least bring the site back the other way, and every .after.cu must compile with
 * `nvcc -arch=sm_90 -c` (skipped with a note without nvcc). Also: the hgemm naive kernel is a site
 * to apply and its result compiles; the hgemm expert's ldmatrix + mma.sync warp tile is removed to
 * scalar FMAs (golden cases mma_*: the expert, the expert stripped of unroll/launch-bounds/restrict,
 * an f16 variant with a swizzled tile; remove only: there is no mma.sync writer); and the reasons
 * given where the transform does not apply. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/rewrite.h"
#include "gate/gate_int.h"
#include "rewrite/rules/rules.h"
#include "util/util.h"
#include "rules_golden.h"

#define TC "tensor-core"



/* The sites of the transform in text, as a JSON array (owned). */
static json_t *sites_of(const char *text)
{
    char *json = NULL;
    kl_error err = {0};
    if (kl_rules_list("t.cu", text, strlen(text), NULL, TC, &json, &err) != KL_OK) fail_msg("%s", err.message);
    json_t *a = json_loads(json, 0, NULL);
    free(json);
    assert_non_null(a);
    return a;
}

/* The first site in the given direction, with (why != NULL: *why receives it) or without a why_not. */
/* The first site found in direction dir ("present" / "applicable"), rewriting or refused; its
 * reason (the refusal's, or its features' why_not) into *why. */
static const char *site_in(json_t *sites, const char *dir, const char **why)
{
    size_t i;
    json_t *s;
    const char *refusal = !strcmp(dir, "present") ? "remove" : "apply";
    json_array_foreach(sites, i, s) {
        const char *d = json_string_value(json_object_get(s, "direction"));
        bool refused = !strcmp(d, "refused") && !strcmp(json_string_value(json_object_get(s, "refused")), refusal);
        if (strcmp(d, dir) && !refused) continue;
        json_t *w = json_object_get(json_object_get(s, "features"), "why_not");
        if (why) *why = w ? json_string_value(w) : refused ? json_string_value(json_object_get(s, "reason")) : NULL;
        return json_string_value(json_object_get(s, "site"));
    }
    return NULL;
}

/* ---- golden files ------------------------------------------------------------------------------- */

/* ---- the hgemm task ------------------------------------------------------------------------------ */

/* the mma.sync hgemm expert (tasks/hgemm/expert.cu until 2026-12-01): the input of the golden case
 * mma_hgemm_expert, and what the mma.sync form's tests read */
#define MMA_EXPERT "rules/tensor-core/mma_hgemm_expert.before.cu"

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

static char *rewrite(const char *text, const char *site, bool remove, const char *params, kl_error *err)
{
    char *out = NULL, *note = NULL;
    kl_status st = kl_rules_rewrite("t.cu", text, strlen(text), NULL, TC, site, remove, params, &out, &note, err);
    free(note);
    return st == KL_OK ? out : NULL;
}

/* The naive hgemm goes to wmma with every parameter choice the search may make; the default
 * result compiles, is a present site, and comes back to a scalar kernel that is a site again. */
static void hgemm_naive_both_ways(void **state)
{
    (void)state;
    char *text = read_task_file("hgemm", "naive.cu");
    json_t *s = sites_of(text);
    const char *why = NULL;
    const char *id = site_in(s, "applicable", &why);
    if (!id || why) fail_msg("hgemm/naive.cu: no applicable tensor-core site (%s)", why ? why : "none");
    kl_error err = {0};
    static const char *const params[] = {"{}", "{\"warps_m\":\"4\",\"warps_n\":\"1\"}", "{\"frags_m\":\"2\",\"frags_n\":\"2\"}",
                                         "{\"warps_m\":\"4\",\"warps_n\":\"4\",\"frags_m\":\"1\",\"frags_n\":\"2\"}"};
    char *first = NULL;
    for (unsigned i = 0; i < sizeof params / sizeof params[0]; i++) {
        char *got = rewrite(text, id, false, params[i], &err);
        if (!got) fail_msg("hgemm naive %s: %s", params[i], err.message);
        assert_non_null(strstr(got, "nvcuda::wmma::mma_sync"));
        assert_non_null(strstr(got, "#include <mma.h>"));
        assert_non_null(strstr(got, "C[row * N + col] = __float2bfloat16(acc);"));
        if (i == 0) {
            assert_non_null(strstr(got, "dim3 block(128);"));
            assert_non_null(strstr(got, "dim3 grid((N + 31) / 32, (M + 31) / 32);"));
            first = got;
        } else {
            free(got);
        }
    }
    /* 2 x 2 fragments on 4 x 4 warps: a 128 x 128 staging tile is over 48 KiB */
    char *big = rewrite(text, id, false, "{\"warps_m\":\"4\",\"warps_n\":\"4\",\"frags_m\":\"2\",\"frags_n\":\"2\"}", &err);
    assert_null(big);
    assert_non_null(strstr(err.message, "over 48 KiB"));
    /* an api the transform does not write */
    char *out = NULL, *note = NULL;
    assert_int_equal(kl_rules_rewrite("t.cu", text, strlen(text), NULL, TC, id, false, "{\"api\":\"mma\"}", &out, &note, &err),
                     KL_ERR_INVALID);
    json_t *back = sites_of(first);
    const char *pid = site_in(back, "present", &why);
    assert_non_null(pid);
    assert_null(why);
    char *scalar = rewrite(first, pid, true, NULL, &err);
    if (!scalar) fail_msg("remove: %s", err.message);
    assert_null(strstr(scalar, "wmma"));
    assert_null(strstr(scalar, "<mma.h>"));
    assert_non_null(strstr(scalar, "acc += __bfloat162float(A[row * K + k]) * __bfloat162float(B[k * N + col]);"));
    assert_non_null(strstr(scalar, "dim3 block(16, 16);"));
    json_t *again = sites_of(scalar);
    assert_non_null(site_in(again, "applicable", &why));
    assert_null(why);
    char *dir = NULL;
    assert_int_equal(kl_tempdir("rules-tc-hgemm", &dir, &err), KL_OK);
    char *paths[2] = {kl_path_join(dir, "wmma.cu"), kl_path_join(dir, "scalar.cu")};
    assert_int_equal(kl_file_write(paths[0], first, strlen(first), &err), KL_OK);
    assert_int_equal(kl_file_write(paths[1], scalar, strlen(scalar), &err), KL_OK);
    golden_nvcc_compile_all(paths, 2);
    kl_remove_tree(dir, NULL);
    free(dir);
    free(paths[0]), free(paths[1]);
    json_decref(again);
    json_decref(back);
    free(scalar);
    free(first);
    json_decref(s);
    free(text);
}

/* The mma.sync expert's warp tile (PTX, fed by ldmatrix from a cp.async pipeline) is a removable
 * site: it becomes scalar FMAs over the same shared tiles, each lane computing the accumulator
 * elements it held, and the epilogue is left as it was. */
static void hgemm_expert_removed(void **state)
{
    (void)state;
    char *text = read_data_file(MMA_EXPERT);
    json_t *s = sites_of(text);
    const char *why = NULL;
    const char *id = site_in(s, "present", &why);
    assert_non_null(id);
    if (why) fail_msg("the expert's mma.sync is not removable: %s", why);
    assert_null(site_in(s, "applicable", NULL));
    kl_error err = {0};
    char *got = rewrite(text, id, true, NULL, &err);
    if (!got) fail_msg("remove %s: %s", id, err.message);
    assert_null(strstr(got, "mma.sync.aligned"));
    assert_null(strstr(got, "ldmatrix.sync"));
    assert_null(strstr(got, "ldmatrix_x4("));
    assert_null(strstr(got, "mma_bf16"));
    assert_non_null(strstr(got, "const int kl_r = lane / 4 + 8 * (kl_e / 2), kl_c = 2 * (lane % 4) + kl_e % 2;"));
    assert_non_null(strstr(got, "acc[mi][ni][kl_e] += __bfloat162float(as[(warp_m * WM + mi * MMA_M + kl_r) * A_LD + "
                                "(kk * MMA_K + (kl_x / 8) * 8) + kl_x % 8]) *"));
    assert_non_null(strstr(got, "__bfloat162float(bs[(kk * MMA_K + kl_x) * B_LD + (warp_n * WN + (ni / 2) * 2 * MMA_N + "
                                "(ni % 2) * 8) + kl_c]);"));
    /* what the step does not own stays: the pipeline, the epilogue's layout and its bf16x2 stores */
    assert_non_null(strstr(got, "cp_async_wait<STAGES - 2>();"));
    assert_non_null(strstr(got, "const float v0 = acc[mi][ni][2 * half], v1 = acc[mi][ni][2 * half + 1];"));
    assert_non_null(strstr(got, "__floats2bfloat162_rn(v0, v1)"));
    json_t *after = sites_of(got);
    assert_null(site_in(after, "present", NULL));
    json_decref(after);
    free(got);
    json_decref(s);
    free(text);
}

/* text with the first occurrence of from replaced by to (new string) */
static char *replaced(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    if (!at) fail_msg("'%s' is not in the text", from);
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_add(&sb, text, (size_t)(at - text));
    kl_strbuf_adds(&sb, to);
    kl_strbuf_adds(&sb, at + strlen(from));
    char *out = kl_strdup(kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    return out;
}

static void expect_ptx_reason(const char *text, const char *want)
{
    json_t *s = sites_of(text);
    const char *why = NULL;
    const char *id = site_in(s, "present", &why);
    assert_non_null(id);
    if (!why || !strstr(why, want)) fail_msg("the reason '%s' does not say '%s'", why ? why : "(none)", want);
    kl_error err = {0};
    char *got = rewrite(text, id, true, NULL, &err);
    assert_null(got);
    assert_int_equal(err.status, KL_ERR_NOT_APPLICABLE);
    if (!strstr(err.message, want)) fail_msg("the error '%s' does not say '%s'", err.message, want);
    json_decref(s);
}

/* Where the expert's form is changed so that the fragments' sources no longer follow from it, remove
 * says what differs. */
static void hgemm_expert_reasons(void **state)
{
    (void)state;
    char *text = read_data_file(MMA_EXPERT);
    static const char *const cases[][3] = {
        /* the .trans registers in another order: b1 of n-tile 2j is not r[1] any more */
        {"bf[2 * nj][1] = r[1];", "bf[2 * nj][1] = r[2];", "registers of ldmatrix.x4.trans"},
        /* an address reading the thread index directly */
        {"const int row = warp_m * WM + mi * MMA_M + lane % 16;", "const int row = warp_m * WM + mi * MMA_M + threadIdx.x % 16;",
         "threadIdx other than through the lane"},
        /* the mma's B operands swapped in the asm: not the instruction's operand order */
        {"\"r\"(b0), \"r\"(b1)", "\"r\"(b1), \"r\"(b0)", "is not one mma.sync"},
        /* half the B pairs loaded */
        {"nj < FRAG_N / 2;", "nj < FRAG_N / 4;", "does not load FRAG_N / 2 pairs"},
        /* a lane that is not threadIdx.x % 32 */
        {"lane = threadIdx.x % 32;", "lane = threadIdx.x % 16;", "no `lane = threadIdx.x % 32`"},
        /* a fragment read elsewhere than by the mma (here: in an address) */
        {"ldmatrix_x4(af[mi], as + row * A_LD + col);", "ldmatrix_x4(af[mi], as + row * A_LD + col + 0 * af[0][0]);",
         "used other than"},
    };
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *t = replaced(text, cases[i][0], cases[i][1]);
        expect_ptx_reason(t, cases[i][2]);
        free(t);
    }
    free(text);
}

/* ---- wgmma (wgmma.c) ----------------------------------------------------------------------------- */

static json_t *wgmma_sites(const char *text)
{
    char *json = NULL;
    kl_error err = {0};
    if (kl_rules_list("t.cu", text, strlen(text), NULL, "wgmma", &json, &err) != KL_OK) fail_msg("%s", err.message);
    json_t *a = json_loads(json, 0, NULL);
    free(json);
    assert_non_null(a);
    return a;
}

static char *remove_at(const char *text, const char *transform, const char *id, kl_error *err)
{
    char *out = NULL, *note = NULL;
    kl_status st = kl_rules_rewrite("t.cu", text, strlen(text), NULL, transform, id, true, NULL, &out, &note, err);
    free(note);
    return st == KL_OK ? out : NULL;
}

/* The expert's warpgroup tile: no tensor-core site (wgmma is its own transform), one removable
 * wgmma site; removing it leaves the per-warp ldmatrix + mma.sync form over the same swizzled tiles
 * and accumulators (fences, commits, waits and their helpers gone, the pipeline and the epilogue
 * untouched), which tensor-core then takes to scalar FMAs; both results compile for sm_90. */
static void hgemm_expert_wgmma(void **state)
{
    (void)state;
    char *text = read_task_file("hgemm", "expert.cu");
    json_t *tc = sites_of(text);
    assert_null(site_in(tc, "present", NULL));
    json_decref(tc);
    json_t *s = wgmma_sites(text);
    assert_int_equal(json_array_size(s), 1);
    json_t *site = json_array_get(s, 0);
    json_t *f = json_object_get(site, "features");
    if (json_object_get(f, "why_not")) fail_msg("the expert's wgmma is not removable: %s", json_string_value(json_object_get(f, "why_not")));
    assert_string_equal(json_string_value(json_object_get(f, "shape")), "m64n256k16");
    assert_string_equal(json_string_value(json_object_get(f, "dtype")), "bf16");
    kl_error err = {0};
    char *got = remove_at(text, "wgmma", json_string_value(json_object_get(site, "site")), &err);
    if (!got) fail_msg("remove: %s", err.message);
    static const char *const gone[] = {"wgmma.mma_async.sync", "wgmma.fence.sync", "wgmma.commit_group", "wgmma.wait_group",
                                       "fence.proxy.async", "wgmma_desc(", "wgmma_fence", "wgmma_wait", "fence_async_shared",
                                       NULL};
    for (int i = 0; gone[i]; i++)
        if (strstr(got, gone[i])) fail_msg("'%s' is left after removing wgmma", gone[i]);
    static const char *const want[] = {
        "kl_ldmatrix_x4(kl_af[mi], kl_sw128(as + mi * MMA_M * ROW_BYTES + kk * MMA_K * 2, kl_ar / 8 * (ATOM) + kl_ar % 8 * 128 + kl_ak * 2));",
        "kl_ldmatrix_x4_trans(kl_b, kl_sw128(bs + kk * MMA_K * ROW_BYTES, kl_bn / 64 * (BK * ROW_BYTES) + kl_bk / 8 * (ATOM) + kl_bk % 8 * 128 + kl_bn % 64 * 2));",
        "for (int kl_ni = 0; kl_ni < FRAG_N; kl_ni++) kl_mma_bf16(acc[mi][kl_ni], kl_af[mi], kl_bf[kl_ni][0], kl_bf[kl_ni][1]);",
        "const int kl_ar = 16 * (threadIdx.x / 32 % 4) + lane % 16;",
        "return reinterpret_cast<const __nv_bfloat16*>(__cvta_shared_to_generic(a ^ (a >> 3 & 0x70)));",
        "cp_async_wait<AHEAD - 1>();",            /* the pipeline stays */
        "__floats2bfloat162_rn(v0, v1)",          /* and the epilogue */
        NULL};
    for (int i = 0; want[i]; i++)
        if (!strstr(got, want[i])) fail_msg("'%s' is missing after removing wgmma", want[i]);
    /* nothing left that needs the arch-specific target: the gate compiles it for sm_90 */
    char *arch = kl_source_arch("sm_90", got);
    assert_string_equal(arch, "sm_90");
    free(arch);
    json_t *after = wgmma_sites(got);
    assert_int_equal(json_array_size(after), 0);
    json_decref(after);
    /* the mma.sync form it leaves is tensor-core's removable warp tile */
    tc = sites_of(got);
    const char *why = NULL;
    const char *id = site_in(tc, "present", &why);
    assert_non_null(id);
    if (why) fail_msg("the mma.sync form wgmma leaves is not removable: %s", why);
    char *scalar = remove_at(got, "tensor-core", id, &err);
    if (!scalar) fail_msg("remove tensor-core: %s", err.message);
    assert_null(strstr(scalar, "mma.sync.aligned"));
    assert_non_null(strstr(scalar, "acc[mi][kl_ni][kl_e] += __bfloat162float((kl_sw128(as + mi * MMA_M * ROW_BYTES"));
    json_decref(tc);
    char *dir = NULL;
    assert_int_equal(kl_tempdir("rules-wgmma", &dir, &err), KL_OK);
    char *paths[2] = {kl_path_join(dir, "mma.cu"), kl_path_join(dir, "scalar.cu")};
    assert_int_equal(kl_file_write(paths[0], got, strlen(got), &err), KL_OK);
    assert_int_equal(kl_file_write(paths[1], scalar, strlen(scalar), &err), KL_OK);
    golden_nvcc_compile_all(paths, 2);
    free(paths[0]);
    free(paths[1]);
    kl_remove_tree(dir, NULL);
    free(dir);
    free(scalar);
    free(got);
    json_decref(s);
    free(text);
}

static void expect_wgmma_reason(const char *text, const char *want)
{
    json_t *s = wgmma_sites(text);
    assert_int_equal(json_array_size(s), 1);
    json_t *site = json_array_get(s, 0);
    const char *why = json_string_value(json_object_get(json_object_get(site, "features"), "why_not"));
    if (!why || !strstr(why, want)) fail_msg("the reason '%s' does not say '%s'", why ? why : "(none)", want);
    kl_error err = {0};
    char *got = remove_at(text, "wgmma", json_string_value(json_object_get(site, "site")), &err);
    assert_null(got);
    assert_int_equal(err.status, KL_ERR_NOT_APPLICABLE);
    if (!strstr(err.message, want)) fail_msg("the error '%s' does not say '%s'", err.message, want);
    json_decref(s);
}

/* Where the expert's form is changed so that the tiles' layout no longer follows from it, remove
 * says what differs. */
static void hgemm_expert_wgmma_reasons(void **state)
{
    (void)state;
    char *text = read_task_file("hgemm", "expert.cu");
    static const char *const cases[][3] = {
        /* B K-major: not the layout the ldmatrix.trans loads read */
        {"p, 1, 1, 0, 1;", "p, 1, 1, 0, 0;", "reads B K-major"},
        /* a 64-byte swizzle in the descriptor */
        {"(uint64_t)1 << 62;", "(uint64_t)2 << 62;", "128-byte-swizzle descriptor"},
        /* the B descriptor read twice */
        {"kk * MMA_K * 2, 16, ATOM), db);", "kk * MMA_K * 2 + 0 * (uint32_t)db, 16, ATOM), db);", "used other than by the wgmma call"},
        /* no lane */
        {"lane = threadIdx.x % 32;", "lane = threadIdx.x % 16;", "no `lane = threadIdx.x % 32`"},
        /* accumulators of another shape */
        {"float acc[FRAG_M][FRAG_N][4];", "float acc[FRAG_M][FRAG_N * 2][4];", "are not declared once as"},
        /* an operand not in the instruction's order */
        {"\"l\"(desc_a), \"l\"(desc_b), \"r\"(1)", "\"l\"(desc_b), \"l\"(desc_a), \"r\"(1)", "is not the wgmma form read"},
    };
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *t = replaced(text, cases[i][0], cases[i][1]);
        expect_wgmma_reason(t, cases[i][2]);
        free(t);
    }
    free(text);
}

/* ---- reasons -------------------------------------------------------------------------------------- */

#define KERNEL_FMT \
    "#include <cuda_bf16.h>\n" \
    "__global__ void g(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K) {\n" \
    "    int row = blockIdx.y * blockDim.y + threadIdx.y;\n" \
    "    int col = blockIdx.x * blockDim.x + threadIdx.x;\n" \
    "    %s\n" \
    "    if (row < M && col < N) {\n" \
    "        %s acc = 0.0f;\n" \
    "        for (int k = 0; k < K; k++) acc += __bfloat162float(A[%s]) * __bfloat162float(B[k * N + col]);\n" \
    "        C[row * N + col] = __float2bfloat16(acc);\n" \
    "    }\n" \
    "}\n" \
    "%s"

static const char *launch_text =
    "extern \"C\" void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,\n"
    "                       cudaStream_t s) {\n"
    "    g<<<dim3((N + 15) / 16, (M + 15) / 16), dim3(16, 16), 0, s>>>(A, B, C, M, N, K);\n"
    "}\n";

static void expect_reason(const char *pre, const char *acc_type, const char *aidx, const char *launch, const char *want)
{
    char text[4096];
    kl_snprintf(text, sizeof text, KERNEL_FMT, pre, acc_type, aidx, launch);
    json_t *s = sites_of(text);
    const char *why = NULL;
    const char *id = site_in(s, "applicable", &why);
    if (!id) fail_msg("no applicable site in:\n%s", text);
    if (!why || !strstr(why, want)) fail_msg("the reason '%s' does not say '%s'", why ? why : "(none)", want);
    kl_error err = {0};
    char *got = rewrite(text, id, false, NULL, &err);
    assert_null(got);
    assert_int_equal(err.status, KL_ERR_NOT_APPLICABLE);
    if (!strstr(err.message, want)) fail_msg("the error '%s' does not say '%s'", err.message, want);
    json_decref(s);
}

static void reasons(void **state)
{
    (void)state;
    /* the same kernel, applicable: the control */
    char text[4096];
    kl_snprintf(text, sizeof text, KERNEL_FMT, "", "float", "row * K + k", launch_text);
    json_t *s = sites_of(text);
    const char *why = NULL;
    assert_non_null(site_in(s, "applicable", &why));
    assert_null(why);
    json_decref(s);
    /* a double accumulator: the fragments accumulate in f32 */
    expect_reason("", "double", "row * K + k", launch_text, "not a float");
    /* A read at a column of the thread */
    expect_reason("", "float", "row * K + k + col", launch_text, "do not split");
    /* A indexed by the thread directly */
    expect_reason("", "float", "row * K + k + threadIdx.x * 0", launch_text, "threadIdx.x");
    /* a local that depends on the thread */
    expect_reason("int off = threadIdx.x;", "float", "row * K + k + off", launch_text, "threadIdx.x");
    /* never launched: the grid could not follow */
    expect_reason("", "float", "row * K + k", "", "not launched");
    /* 16-byte tile loads need rows of A contiguous along k … */
    kl_snprintf(text, sizeof text, KERNEL_FMT, "", "float", "k * M + row", launch_text);
    s = sites_of(text);
    const char *id = site_in(s, "applicable", &why);
    assert_non_null(id);
    kl_error err = {0};
    char *got = rewrite(text, id, false, "{\"vector_loads\": \"1\"}", &err);
    assert_null(got);
    assert_int_equal(err.status, KL_ERR_NOT_APPLICABLE);
    assert_non_null(strstr(err.message, "A's elements are not contiguous along 'k'"));
    /* … which the plain loads do not */
    got = rewrite(text, id, false, "{\"bk\": \"32\"}", &err);
    assert_non_null(got);
    assert_non_null(strstr(got, "for (int kl_kk = 0; kl_kk < KL_BK; kl_kk += 16)"));
    free(got);
    json_decref(s);
    /* … and B's rows contiguous along col */
    kl_snprintf(text, sizeof text, KERNEL_FMT, "", "float", "row * K + k", launch_text);
    char colmajor[4096];
    const char *at = strstr(text, "B[k * N + col]");
    assert_non_null(at);
    kl_snprintf(colmajor, sizeof colmajor, "%.*sB[col * K + k]%s", (int)(at - text), text, at + strlen("B[k * N + col]"));
    s = sites_of(colmajor);
    id = site_in(s, "applicable", &why);
    assert_non_null(id);
    got = rewrite(colmajor, id, false, "{\"vector_loads\": \"1\", \"bk\": \"64\"}", &err);
    assert_null(got);
    assert_non_null(strstr(err.message, "B's elements are not contiguous along 'col'"));
    json_decref(s);
    /* an f32 GEMM is no site at all */
    const char *f32 = "__global__ void f(const float* A, const float* B, float* C, int M, int N, int K) {\n"
                      "    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;\n"
                      "    if (row < M && col < N) {\n"
                      "        float acc = 0.0f;\n"
                      "        for (int k = 0; k < K; k++) acc += A[row * K + k] * B[k * N + col];\n"
                      "        C[row * N + col] = acc;\n"
                      "    }\n"
                      "}\n";
    s = sites_of(f32);
    assert_int_equal(json_array_size(s), 0);
    json_decref(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reasons),
        cmocka_unit_test(hgemm_expert_removed),
        cmocka_unit_test(hgemm_expert_wgmma),
        cmocka_unit_test(hgemm_expert_wgmma_reasons),
        cmocka_unit_test(hgemm_expert_reasons),
        cmocka_unit_test(hgemm_naive_both_ways),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
