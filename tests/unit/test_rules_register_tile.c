/* The rules catalog: register-tile (src/rewrite/rules/register_tile.c). Golden cases (run by test_rules_golden.c) in
 * tests/data/rules/register-tile/<case>.before.cu (first line: `// test: apply …@… | remove …@…`):
 * the result must equal <case>.after.cu byte for byte (KL_UPDATE_GOLDEN=1 rewrites them), the
 * reverse must give back the original exactly, and every .after.cu must compile with nvcc. Also:
 * the reasons where it does not apply, and the built-in sgemm kernels. */
#include "rules_tile_test.h"

/* The one-output tiled GEMM the reasons are shown on: %s pieces replace parts of it. */
#define TILED_FMT \
    "#define TILE %d\n" \
    "%s" \
    "__global__ void mm(const float* A, const float* B, float* C, int M, int N, int K) {\n" \
    "    __shared__ float As[TILE][TILE];\n" \
    "    __shared__ float Bs[TILE][TILE];\n" \
    "    int row = blockIdx.y * TILE + threadIdx.y;\n" \
    "    int col = blockIdx.x * TILE + %s;\n" \
    "    float acc = 0.0f;\n" \
    "%s" \
    "    for (int k0 = 0; k0 < K; k0 += TILE) {\n" \
    "        As[threadIdx.y][threadIdx.x] = (row < M && k0 + threadIdx.x < K) ? A[row * K + k0 + threadIdx.x] : 0.0f;\n" \
    "        Bs[threadIdx.y][threadIdx.x] = (k0 + threadIdx.y < K && col < N) ? B[(k0 + threadIdx.y) * N + col] : 0.0f;\n" \
    "        __syncthreads();\n" \
    "        for (int kk = 0; kk < TILE; kk++) {\n" \
    "            acc += As[threadIdx.y][kk] * Bs[kk][threadIdx.x];\n" \
    "        }\n" \
    "        __syncthreads();\n" \
    "    }\n" \
    "    if (row < M && col < N) C[row * N + col] = acc;\n" \
    "}\n" \
    "extern \"C\" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t s) {\n" \
    "    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);\n" \
    "    mm<<<grid, %s, 0, s>>>(A, B, C, M, N, K);\n" \
    "}\n"

static void register_tile_says_why_not(void **state)
{
    (void)state;
    char text[4096];
    /* the plain form applies (the base of the variations below) */
    kl_snprintf(text, sizeof text, TILED_FMT, 16, "", "threadIdx.x", "", "dim3(TILE, TILE)");
    json_t *s = tile_sites(text, "register-tile");
    const char *why = NULL;
    assert_non_null(tile_site(s, "applicable", &why));
    assert_null(why);
    json_decref(s);
    /* an early return: threads would skip the barriers of the outputs they now hold */
    kl_snprintf(text, sizeof text, TILED_FMT, 16, "", "threadIdx.x", "    if (row >= M) return;\n", "dim3(TILE, TILE)");
    tile_expect_not_applicable(text, "register-tile", false, NULL, "uses return");
    /* the column through a macro reading threadIdx.x: a substitution would miss it */
    kl_snprintf(text, sizeof text, TILED_FMT, 16, "#define TX threadIdx.x\n", "TX", "", "dim3(TILE, TILE)");
    tile_expect_not_applicable(text, "register-tile", false, NULL, "the macro TX");
    /* a linear thread index mixes both thread indices */
    kl_snprintf(text, sizeof text, TILED_FMT, 16, "", "threadIdx.x", "    int tid = threadIdx.y * TILE + threadIdx.x;\n",
                "dim3(TILE, TILE)");
    tile_expect_not_applicable(text, "register-tile", false, NULL, "the local tid");
    /* a 1-D block at the launch */
    kl_snprintf(text, sizeof text, TILED_FMT, 16, "", "threadIdx.x", "", "TILE * TILE");
    tile_expect_not_applicable(text, "register-tile", false, NULL, "no 2-D dim3 grid and block");
    /* a block that is not the tile's shape */
    kl_snprintf(text, sizeof text, TILED_FMT, 16, "", "threadIdx.x", "", "dim3(TILE, 8)");
    tile_expect_not_applicable(text, "register-tile", false, NULL, "is not the tile's shape");
    /* 32 x 32 tiles grown 8 x 8 do not fit in 48 KiB */
    kl_snprintf(text, sizeof text, TILED_FMT, 32, "", "threadIdx.x", "", "dim3(TILE, TILE)");
    tile_expect_not_applicable(text, "register-tile", false, "{\"TM\":\"8\",\"TN\":\"8\"}", "65536 bytes of shared memory");
    /* but 4 x 4 does, and a parameter outside 2, 4, 8 is refused before anything runs */
    kl_error err = {0};
    s = tile_sites(text, "register-tile");
    const char *id = tile_site(s, "applicable", NULL);
    char *out = tile_rewrite(text, "register-tile", id, false, "{\"TM\":\"4\",\"TN\":\"4\"}", &err);
    if (!out) fail_msg("%s", err.message);
    assert_non_null(strstr(out, "__shared__ float As[4 * TILE][TILE];"));
    assert_non_null(strstr(out, "dim3 grid(((N + TILE - 1) / TILE + 3) / 4, ((M + TILE - 1) / TILE + 3) / 4);"));
    free(out);
    assert_null(tile_rewrite(text, "register-tile", id, false, "{\"TM\":\"3\"}", &err));
    assert_int_equal(err.status, KL_ERR_INVALID);
    json_decref(s);
}

/* tasks/sgemm: the naive kernel has no shared tiles (smem-tile first), so no site; the expert's
 * 8x8 float4-quadrant tile is a present site of the general form, refused while its operands are
 * read as float4 (vectorize comes first; then double-buffer, whose stage dimension it refuses too). */
static void register_tile_on_sgemm(void **state)
{
    (void)state;
    char *text = tile_read_task("sgemm", "naive.cu");
    json_t *s = tile_sites(text, "register-tile");
    assert_int_equal(json_array_size(s), 0);
    json_decref(s);
    free(text);
    text = tile_read_task("sgemm", "expert.cu");
    s = tile_sites(text, "register-tile");
    const char *why = NULL;
    assert_non_null(tile_site(s, "present", &why));
    assert_non_null(why);
    assert_non_null(strstr(why, "remove vectorize first"));
    json_decref(s);
    free(text);
}

/* The general form's reasons: a scaled store, an unguarded operand, a vector load, a batch. */
#define GENERAL_FMT \
    "#define R 4\n" \
    "__global__ void g(const float* A, const float* B, float* C, int M, int N, int K, float alpha) {\n" \
    "    float c[R][R];\n" \
    "    __shared__ float sa[64][16];\n" \
    "    __shared__ float sb[16][64];\n" \
    "    for (int i = 0; i < R; i++)\n" \
    "        for (int j = 0; j < R; j++) c[i][j] = 0.0f;\n" \
    "    const int bm = blockIdx.y * 64, bn = blockIdx.x * 64, t = threadIdx.y * 16 + threadIdx.x;\n" \
    "    for (int k0 = 0; k0 < K; k0 += 16) {\n" \
    "        for (int l = t; l < 1024; l += 256) {\n" \
    "            const int r = l / 16, kk = l %% 16, kb = l / 64, cc = l %% 64;\n" \
    "            sa[r][kk] = %s;\n" \
    "            sb[kb][cc] = (k0 + kb < K && bn + cc < N) ? B[(k0 + kb) * N + bn + cc] : 0.0f;\n" \
    "        }\n" \
    "        __syncthreads();\n" \
    "        for (int k = 0; k < 16; k++)\n" \
    "            for (int i = 0; i < R; i++)\n" \
    "                for (int j = 0; j < R; j++) c[i][j] += sa[threadIdx.y * R + i][k] * sb[k][threadIdx.x * R + j];\n" \
    "        __syncthreads();\n" \
    "    }\n" \
    "    for (int i = 0; i < R; i++)\n" \
    "        for (int j = 0; j < R; j++) {\n" \
    "            const int row = bm + threadIdx.y * R + i, col = bn + threadIdx.x * R + j;\n" \
    "            if (row < M && col < N) C[row * N + col] = %s;\n" \
    "        }\n" \
    "}\n" \
    "extern \"C\" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t s) {\n" \
    "    g<<<dim3((N + 63) / 64, (M + 63) / 64), dim3(16, 16), 0, s>>>(A, B, C, M, N, K, 1.0f);\n" \
    "}\n"
#define GOOD_A "(bm + r < M && k0 + kk < K) ? A[(bm + r) * K + k0 + kk] : 0.0f"

static void register_tile_general_says_why_not(void **state)
{
    (void)state;
    char text[8192];
    /* the base form removes, and the result compiles as one output per thread */
    kl_snprintf(text, sizeof text, GENERAL_FMT, GOOD_A, "c[i][j]");
    json_t *s = tile_sites(text, "register-tile");
    const char *id = tile_site(s, "present", NULL);
    assert_non_null(id);
    kl_error err = {0};
    char *out = tile_rewrite(text, "register-tile", id, true, NULL, &err);
    if (!out) fail_msg("%s", err.message);
    assert_non_null(strstr(out, "A[row * K + (k0 + threadIdx.x)]"));
    assert_non_null(strstr(out, "g<<<dim3((N + 15) / 16, (M + 15) / 16), dim3(16, 16), 0, s>>>"));
    free(out);
    json_decref(s);
    /* a scaled store is not the product alone */
    kl_snprintf(text, sizeof text, GENERAL_FMT, GOOD_A, "alpha * c[i][j]");
    tile_expect_not_applicable(text, "register-tile", true, NULL, "is not an element of c");
    /* an operand read without a guard on its row: the edges are not handled */
    kl_snprintf(text, sizeof text, GENERAL_FMT, "(k0 + kk < K) ? A[(bm + r) * K + k0 + kk] : 0.0f", "c[i][j]");
    tile_expect_not_applicable(text, "register-tile", true, NULL, "has no guard `bm+r < bound`");
    /* a float4 read of an operand: vectorize comes first */
    kl_snprintf(text, sizeof text, GENERAL_FMT,
                "(bm + r < M && k0 + kk < K) ? reinterpret_cast<const float4*>(A)[0].x + A[(bm + r) * K + k0 + kk] : 0.0f",
                "c[i][j]");
    tile_expect_not_applicable(text, "register-tile", true, NULL, "remove vectorize first");
    /* the bounds do not pair into M x K, K x N, M x N (A's row bounded by N) */
    kl_snprintf(text, sizeof text, GENERAL_FMT, "(bm + r < N && k0 + kk < K) ? A[(bm + r) * K + k0 + kk] : 0.0f",
                "c[i][j]");
    tile_expect_not_applicable(text, "register-tile", true, NULL, "are not those of one product");
}

/* tasks/sgemm/expert.cu walked down greedily (the first present site that removes, every
 * transform of the catalog): every step compiles, register-tile and smem-tile are among the
 * steps, no present site is left, and the last kernel is the naive loop. */
static void register_tile_sgemm_expert_walk(void **state)
{
    (void)state;
    char *text = tile_read_task("sgemm", "expert.cu");
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("rules-rt-walk", &dir, &err), KL_OK);
    char *paths[40] = {0};
    unsigned np = 0;
    bool saw_rt = false, saw_st = false, saw_pad = false;
    for (unsigned step = 0; step < 40; step++) {
        json_t *s = tile_sites(text, NULL);
        size_t i;
        json_t *site;
        char *next = NULL;
        json_array_foreach(s, i, site) {
            if (strcmp(json_string_value(json_object_get(site, "direction")), "present")) continue;
            const char *tr = json_string_value(json_object_get(site, "transform"));
            next = tile_rewrite(text, tr, json_string_value(json_object_get(site, "site")), true, NULL, &err);
            if (!next) continue;
            /* the stray vector "tail" (the k-tile loop then the store loop) is never a site */
            if (!strcmp(tr, "vectorize"))
                assert_null(strstr(json_string_value(json_object_get(site, "site")), ":88"));
            saw_rt |= !strcmp(tr, "register-tile");
            saw_st |= !strcmp(tr, "smem-tile");
            saw_pad |= !strcmp(tr, "smem-pad");
            break;
        }
        json_decref(s);
        if (!next) break;
        free(text);
        text = next;
        char name[32];
        kl_snprintf(name, sizeof name, "step%02u.cu", step);
        paths[np++] = tile_write_temp(dir, name, text);
    }
    assert_true(saw_rt && saw_st && saw_pad);
    json_t *s = tile_sites(text, NULL);
    assert_null(tile_site(s, "present", NULL));
    json_decref(s);
    assert_non_null(strstr(text, "acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];"));
    assert_null(strstr(text, "__shared__"));
    golden_nvcc_compile_all(paths, np);
    for (unsigned i = 0; i < np; i++) free(paths[i]);
    kl_remove_tree(dir, NULL);
    free(dir);
    free(text);
}

/* tasks/hgemm/expert.cu walked down greedily (first present site that removes): wgmma leaves the
 * per-warp mma.sync warp tile, tensor-core its scalar FMAs; the fragment tile is refused until
 * double-buffer has taken the cp.async ring (AHEAD = STAGES - 2 tiles ahead) down to one stage;
 * then register-tile writes the one-output-per-thread tiled kernel (bf16 loads, f32 products, the
 * bf16 store) and smem-tile leaves naive.cu's loop. The steps from wgmma on compile. */
static void register_tile_hgemm_expert_walk(void **state)
{
    (void)state;
    char *text = tile_read_task("hgemm", "expert.cu");
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("rules-rt-hgemm", &dir, &err), KL_OK);
    char *paths[60] = {0};
    unsigned np = 0;
    const char *order[5] = {"wgmma", "tensor-core", "double-buffer", "register-tile", "smem-tile"};
    unsigned seen = 0;
    bool refused = false;
    for (unsigned step = 0; step < 60; step++) {
        json_t *s = tile_sites(text, NULL);
        size_t i;
        json_t *site;
        char *next = NULL;
        json_array_foreach(s, i, site) {
            const char *sdir = json_string_value(json_object_get(site, "direction"));
            bool refused_here = !strcmp(sdir, "refused") && !strcmp(json_string_value(json_object_get(site, "refused")), "remove");
            if (strcmp(sdir, "present") && !refused_here) continue;
            const char *tr = json_string_value(json_object_get(site, "transform"));
            json_t *why = json_object_get(json_object_get(site, "features"), "why_not");
            if (!why && refused_here) why = json_object_get(site, "reason");
            if (!strcmp(tr, "register-tile") && json_is_string(why) && strstr(json_string_value(why), "remove double-buffer first"))
                refused = true;
            next = tile_rewrite(text, tr, json_string_value(json_object_get(site, "site")), true, NULL, &err);
            if (!next) continue;
            if (seen < 5 && !strcmp(tr, order[seen])) seen++;
            break;
        }
        json_decref(s);
        if (!next) break;
        free(text);
        text = next;
        if (seen) {
            char name[32];
            kl_snprintf(name, sizeof name, "step%02u.cu", step);
            paths[np++] = tile_write_temp(dir, name, text);
        }
    }
    assert_int_equal(seen, 5);
    assert_true(refused);
    json_t *s = tile_sites(text, NULL);
    assert_null(tile_site(s, "present", NULL));
    json_decref(s);
    assert_non_null(
        strstr(text, "acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)k * N + col]);"));
    assert_non_null(strstr(text, "C[(size_t)row * N + col] = __float2bfloat16(acc);"));
    assert_non_null(strstr(text, "<<<grid, dim3(16, 16), 0, stream>>>"));
    assert_null(strstr(text, "__shared__"));
    golden_nvcc_compile_all(paths, np);
    for (unsigned i = 0; i < np; i++) free(paths[i]);
    kl_remove_tree(dir, NULL);
    free(dir);
    free(text);
}

/* Applied at every TM x TN, the result is again a site to remove, whose removal gives the
 * original back, and compiles. */
static void register_tile_all_params(void **state)
{
    (void)state;
    char text[4096];
    kl_snprintf(text, sizeof text, TILED_FMT, 16, "", "threadIdx.x", "", "dim3(TILE, TILE)");
    static const char *const v[] = {"2", "4", "8"};
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("rules-rt", &dir, &err), KL_OK);
    char *paths[9];
    unsigned np = 0;
    json_t *s = tile_sites(text, "register-tile");
    const char *id = tile_site(s, "applicable", NULL);
    for (unsigned a = 0; a < 3; a++)
        for (unsigned b = 0; b < 3; b++) {
            char params[64], name[32];
            kl_snprintf(params, sizeof params, "{\"TM\":\"%s\",\"TN\":\"%s\"}", v[a], v[b]);
            char *out = tile_rewrite(text, "register-tile", id, false, params, &err);
            if (!out) fail_msg("%s: %s", params, err.message);
            json_t *back = tile_sites(out, "register-tile");
            const char *pid = tile_site(back, "present", NULL);
            assert_non_null(pid);
            char *again = tile_rewrite(out, "register-tile", pid, true, NULL, &err);
            if (!again) fail_msg("%s remove: %s", params, err.message);
            assert_string_equal(again, text);
            kl_snprintf(name, sizeof name, "rt_%s%s.cu", v[a], v[b]);
            paths[np++] = tile_write_temp(dir, name, out);
            free(again);
            free(out);
            json_decref(back);
        }
    json_decref(s);
    golden_nvcc_compile_all(paths, np);
    for (unsigned i = 0; i < np; i++) free(paths[i]);
    kl_remove_tree(dir, NULL);
    free(dir);
}

/* An unbraced product loop comes back braced, on lines of its own (docs/rules.md). */
static void register_tile_braces_the_product(void **state)
{
    (void)state;
    char text[4096], want[4096];
    kl_snprintf(text, sizeof text, TILED_FMT, 16, "", "threadIdx.x", "", "dim3(TILE, TILE)");
    kl_snprintf(want, sizeof want, "%s", text);
    static const char braced[] = "for (int kk = 0; kk < TILE; kk++) {\n"
                                 "            acc += As[threadIdx.y][kk] * Bs[kk][threadIdx.x];\n"
                                 "        }";
    char *at = strstr(text, braced);
    assert_non_null(at);
    static const char flat[] = "for (int kk = 0; kk < TILE; kk++) acc += As[threadIdx.y][kk]*Bs[kk][threadIdx.x];";
    memmove(at + strlen(flat), at + strlen(braced), strlen(at + strlen(braced)) + 1);
    memcpy(at, flat, strlen(flat));
    kl_error err = {0};
    json_t *s = tile_sites(text, "register-tile");
    char *out = tile_rewrite(text, "register-tile", tile_site(s, "applicable", NULL), false, NULL, &err);
    if (!out) fail_msg("%s", err.message);
    json_t *back = tile_sites(out, "register-tile");
    char *again = tile_rewrite(out, "register-tile", tile_site(back, "present", NULL), true, NULL, &err);
    if (!again) fail_msg("%s", err.message);
    /* the product loses its spacing: `a*b` comes back as `a * b` */
    assert_string_equal(again, want);
    free(again);
    free(out);
    json_decref(back);
    json_decref(s);
}

/* An accumulator starting at a per-output value (a bias by column) starts each output at its own. */
static void register_tile_moves_the_initial_value(void **state)
{
    (void)state;
    char text[4096];
    kl_snprintf(text, sizeof text, TILED_FMT, 16, "", "threadIdx.x", "", "dim3(TILE, TILE)");
    static const char from[] = "float acc = 0.0f;";
    static const char to[] = "float acc = C[col];";
    char *at = strstr(text, from);
    assert_non_null(at);
    memmove(at + strlen(to), at + strlen(from), strlen(at + strlen(from)) + 1);
    memcpy(at, to, strlen(to));
    kl_error err = {0};
    json_t *s = tile_sites(text, "register-tile");
    char *out = tile_rewrite(text, "register-tile", tile_site(s, "applicable", NULL), false, NULL, &err);
    if (!out) fail_msg("%s", err.message);
    assert_non_null(strstr(out, "acc[kl_i][kl_j] = C[(col + kl_j * TILE)];"));
    json_t *back = tile_sites(out, "register-tile");
    char *again = tile_rewrite(out, "register-tile", tile_site(back, "present", NULL), true, NULL, &err);
    if (!again) fail_msg("%s", err.message);
    assert_string_equal(again, text);
    free(again);
    free(out);
    json_decref(back);
    json_decref(s);
}

/* tasks/sgemm/naive.cu through smem-tile (another transform of the catalog) is this
 * transform's form: register-tile and then double-buffer apply to it and the result compiles.
 * Skipped with a note when smem-tile is absent or does not apply. */
static void register_tile_after_smem_tile(void **state)
{
    (void)state;
    char *text = tile_read_task("sgemm", "naive.cu");
    kl_error err = {0};
    json_t *s0 = kl_rule_find("smem-tile") ? tile_sites(text, "smem-tile") : NULL;
    const char *id0 = s0 ? tile_site(s0, "applicable", NULL) : NULL;
    char *tiled = id0 ? tile_rewrite(text, "smem-tile", id0, false, NULL, &err) : NULL;
    if (!tiled) {
        fprintf(stderr, "note: smem-tile does not give the tiled sgemm here: skipped\n");
        json_decref(s0);
        free(text);
        return;
    }
    json_t *s1 = tile_sites(tiled, "register-tile");
    const char *why = NULL;
    const char *id1 = tile_site(s1, "applicable", &why);
    if (!id1 || why) fail_msg("no register-tile site on smem-tile's result (%s):\n%s", why ? why : "none", tiled);
    char *r1 = tile_rewrite(tiled, "register-tile", id1, false, "{\"TM\":\"8\",\"TN\":\"8\"}", &err);
    if (!r1) fail_msg("%s", err.message);
    json_t *s2 = tile_sites(r1, "double-buffer");
    char *r2 = tile_rewrite(r1, "double-buffer", tile_site(s2, "applicable", NULL), false, NULL, &err);
    if (!r2) fail_msg("%s", err.message);
    char *dir = NULL;
    assert_int_equal(kl_tempdir("rules-rt-chain", &dir, &err), KL_OK);
    char *paths[2] = {tile_write_temp(dir, "naive_rt.cu", r1), tile_write_temp(dir, "naive_rt_db.cu", r2)};
    golden_nvcc_compile_all(paths, 2);
    free(paths[0]), free(paths[1]);
    kl_remove_tree(dir, NULL);
    free(dir);
    free(r1), free(r2), free(tiled), free(text);
    json_decref(s0), json_decref(s1), json_decref(s2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(register_tile_says_why_not),
        cmocka_unit_test(register_tile_on_sgemm),
        cmocka_unit_test(register_tile_general_says_why_not),
        cmocka_unit_test(register_tile_sgemm_expert_walk),
        cmocka_unit_test(register_tile_hgemm_expert_walk),
        cmocka_unit_test(register_tile_all_params),
        cmocka_unit_test(register_tile_braces_the_product),
        cmocka_unit_test(register_tile_moves_the_initial_value),
        cmocka_unit_test(register_tile_after_smem_tile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
