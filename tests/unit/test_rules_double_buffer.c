/* The rules catalog: double-buffer (src/rewrite/rules/double_buffer.c). Golden cases (run by test_rules_golden.c) in
 * tests/data/rules/double-buffer/<case>.before.cu (first line: `// test: apply …@… | remove …@…`):
 * the result must equal <case>.after.cu byte for byte (KL_UPDATE_GOLDEN=1 rewrites them), the
 * reverse must give back the original exactly, and every .after.cu must compile with nvcc. Also:
 * the expert sgemm's two stages removed, the hgemm expert's ring held while wgmma reads it, the
 * composition with register-tile, and the reasons where it does not apply. */
#include "rules_tile_test.h"

/* tasks/sgemm/expert.cu: its stages (cur = kt & 1, load_tiles / store_tiles lambdas) come out;
 * the result is one stage, loads this tile, stores it, one barrier before and after the
 * product, and compiles. */
static void double_buffer_removes_from_sgemm_expert(void **state)
{
    (void)state;
    char *text = tile_read_task("sgemm", "expert.cu");
    json_t *s = tile_sites(text, "double-buffer");
    const char *id = tile_site(s, "present", NULL);
    assert_non_null(id);
    assert_null(tile_site(s, "applicable", NULL));
    kl_error err = {0};
    char *out = tile_rewrite(text, "double-buffer", id, true, NULL, &err);
    if (!out) fail_msg("%s", err.message);
    assert_null(strstr(out, "cur ^ 1"));
    assert_null(strstr(out, "kt + 1"));
    assert_null(strstr(out, "As[2]"));
    assert_null(strstr(out, "Bs[2]"));
    assert_null(strstr(out, "// double-buffer"));
    assert_non_null(strstr(out, "__shared__ __align__(16) float As[BK][BM + PAD_A];"));
    assert_non_null(strstr(out, "        load_tiles(kt);\n        store_tiles(0);\n        __syncthreads();\n"));
    assert_non_null(strstr(out, "As[a_k + e][a_row] = ra[e];"));
    assert_non_null(strstr(out, "&As[kk][BM / 2 + ty * VEC]"));
    /* one stage now: no site to remove, and the register tile is still there */
    json_t *back = tile_sites(out, "double-buffer");
    assert_null(tile_site(back, "present", NULL));
    assert_non_null(strstr(out, "acc[i][j] += a[i] * b[j];"));
    char *dir = NULL;
    assert_int_equal(kl_tempdir("rules-db", &dir, &err), KL_OK);
    char *p = tile_write_temp(dir, "expert_one_stage.cu", out);
    golden_nvcc_compile_all(&p, 1);
    free(p);
    kl_remove_tree(dir, NULL);
    free(dir);
    json_decref(back);
    json_decref(s);
    free(out);
    free(text);
}

/* tasks/hgemm/expert.cu: its ring (four stages, two tiles ahead, a proxy fence before the barrier)
 * is recognized while wgmma reads it, and not removable then: a wgmma group still in flight after the
 * compute would read the one stage while the next tile is copied into it. With the fence gone and no
 * wgmma call in the compute (what `wgmma` leaves, golden remove_ring_ahead) it comes out. */
static void double_buffer_waits_for_wgmma(void **state)
{
    (void)state;
    char *text = tile_read_task("hgemm", "expert.cu");
    json_t *s = tile_sites(text, "double-buffer");
    const char *why = NULL;
    const char *id = tile_site(s, "present", &why);
    assert_non_null(id);
    if (!why || !strstr(why, "remove wgmma first")) fail_msg("the ring's reason is '%s'", why ? why : "(none)");
    json_decref(s);
    tile_expect_not_applicable(text, "double-buffer", true, NULL, "read by wgmma, asynchronously across the barrier");
    free(text);
}

static const char *tiled =
    "#define TILE 16\n"
    "__global__ void mm(const float* A, const float* B, float* C, int M, int N, int K) {\n"
    "    __shared__ float As[TILE][TILE];\n"
    "    __shared__ float Bs[TILE][TILE];\n"
    "    int row = blockIdx.y * TILE + threadIdx.y;\n"
    "    int col = blockIdx.x * TILE + threadIdx.x;\n"
    "    float acc = 0.0f;\n"
    "    for (int k0 = 0; k0 < K; k0 += TILE) {\n"
    "        As[threadIdx.y][threadIdx.x] = (row < M && k0 + threadIdx.x < K) ? A[row * K + k0 + threadIdx.x] : 0.0f;\n"
    "        Bs[threadIdx.y][threadIdx.x] = (k0 + threadIdx.y < K && col < N) ? B[(k0 + threadIdx.y) * N + col] : 0.0f;\n"
    "        __syncthreads();\n"
    "        for (int kk = 0; kk < TILE; kk++) {\n"
    "            acc += As[threadIdx.y][kk] * Bs[kk][threadIdx.x];\n"
    "        }\n"
    "        __syncthreads();\n"
    "    }\n"
    "    if (row < M && col < N) C[row * N + col] = acc;\n"
    "}\n"
    "extern \"C\" void launch(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t s) {\n"
    "    dim3 block(TILE, TILE);\n"
    "    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);\n"
    "    mm<<<grid, block, 0, s>>>(A, B, C, M, N, K);\n"
    "}\n";

/* A copy of `tiled` with `from` replaced by `to` (owned). */
static char *variant(const char *from, const char *to)
{
    const char *at = strstr(tiled, from);
    assert_non_null(at);
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_add(&sb, tiled, (size_t)(at - tiled));
    kl_strbuf_adds(&sb, to);
    kl_strbuf_adds(&sb, at + strlen(from));
    return kl_strbuf_detach(&sb, NULL);
}

/* register-tile then double-buffer, then removed in the reverse order: the original comes back. */
static void double_buffer_composes_with_register_tile(void **state)
{
    (void)state;
    static const char *const vias[] = {"{\"via\":\"regs\"}", "{\"via\":\"cp.async\"}"};
    for (unsigned v = 0; v < 2; v++) {
        kl_error err = {0};
        json_t *s1 = tile_sites(tiled, "register-tile");
        char *r1 = tile_rewrite(tiled, "register-tile", tile_site(s1, "applicable", NULL), false, NULL, &err);
        if (!r1) fail_msg("%s", err.message);
        json_t *s2 = tile_sites(r1, "double-buffer");
        const char *why = NULL;
        const char *id2 = tile_site(s2, "applicable", &why);
        assert_non_null(id2);
        assert_null(why);
        char *r2 = tile_rewrite(r1, "double-buffer", id2, false, vias[v], &err);
        if (!r2) fail_msg("%s", err.message);
        /* the register tile's loads now go to registers (regs) or straight to the other stage */
        assert_non_null(strstr(r2, v == 0 ? "kl_r0[kl_i] = " : "__pipeline_memcpy_async(&As[kl_cur ^ 1]"));
        /* register-tile still finds its form under the stages */
        json_t *s3 = tile_sites(r2, "double-buffer");
        char *r3 = tile_rewrite(r2, "double-buffer", tile_site(s3, "present", NULL), true, NULL, &err);
        if (!r3) fail_msg("%s", err.message);
        assert_string_equal(r3, r1);
        json_t *s4 = tile_sites(r3, "register-tile");
        char *r4 = tile_rewrite(r3, "register-tile", tile_site(s4, "present", NULL), true, NULL, &err);
        if (!r4) fail_msg("%s", err.message);
        assert_string_equal(r4, tiled);
        free(r1), free(r2), free(r3), free(r4);
        json_decref(s1), json_decref(s2), json_decref(s3), json_decref(s4);
    }
}

static void double_buffer_says_why_not(void **state)
{
    (void)state;
    /* cp.async copies f32 elements: a __half tile is not one */
    char *t = variant("__shared__ float As[TILE][TILE];", "__shared__ __half As[TILE][TILE];");
    tile_expect_not_applicable(t, "double-buffer", false, "{\"via\":\"cp.async\"}", "cp.async: As holds __half, not f32");
    free(t);
    /* cp.async zero-fills: a load falling back to another value cannot be one */
    t = variant(": 0.0f;\n        Bs", ": 1.0f;\n        Bs");
    tile_expect_not_applicable(t, "double-buffer", false, "{\"via\":\"cp.async\"}", "does not fall back to zero");
    free(t);
    /* the compute writes a tile: the other stage would not hold what it reads */
    t = variant("            acc += As[threadIdx.y][kk] * Bs[kk][threadIdx.x];\n",
                "            acc += As[threadIdx.y][kk] * Bs[kk][threadIdx.x];\n            As[threadIdx.y][kk] = 0.0f;\n");
    tile_expect_not_applicable(t, "double-buffer", false, NULL, "writes As");
    free(t);
    /* a tile used after the loop */
    t = variant("    if (row < M && col < N) C[row * N + col] = acc;\n",
                "    if (row < M && col < N) C[row * N + col] = acc + As[0][0];\n");
    tile_expect_not_applicable(t, "double-buffer", false, NULL, "As is used outside the tile loop");
    free(t);
    /* a loop that does not start at 0 */
    t = variant("for (int k0 = 0; k0 < K", "for (int k0 = 16; k0 < K");
    tile_expect_not_applicable(t, "double-buffer", false, NULL, "starting at 0");
    free(t);
    /* two stages of 64 x 64 f32 tiles need 64 KiB */
    t = variant("#define TILE 16", "#define TILE 64");
    tile_expect_not_applicable(t, "double-buffer", false, NULL, "65536 bytes of shared memory");
    free(t);
    /* an unknown `via` is refused before anything runs */
    json_t *s = tile_sites(tiled, "double-buffer");
    kl_error err = {0};
    assert_null(tile_rewrite(tiled, "double-buffer", tile_site(s, "applicable", NULL), false, "{\"via\":\"tma\"}", &err));
    assert_int_equal(err.status, KL_ERR_INVALID);
    json_decref(s);
}

/* The register staging of tests/data/rules/double-buffer/staged_bumps (corpus/matmul's idiom): the pointer
 * bumps in the prefetch move after the compute; where that would change what something reads, or the
 * prefetch is not bumps then loads, it is refused with the reason. */
static char *staged_variant(const char *from, const char *to)
{
    char *t = read_data_file("rules/double-buffer/staged_bumps.before.cu");
    size_t off = 0, n = strlen(from);
    while (t[off] && strncmp(t + off, from, n)) off++;
    if (!t[off]) fail_msg("no '%s' in staged_bumps", from);
    kl_strbuf b = KL_STRBUF_INIT;
    kl_strbuf_add(&b, t, off);
    kl_strbuf_adds(&b, to);
    kl_strbuf_adds(&b, t + off + strlen(from));
    char *r = kl_strbuf_detach(&b, NULL);
    free(t);
    return r;
}

static void double_buffer_staged_says_why_not(void **state)
{
    (void)state;
    /* the compute reads a bumped pointer: after the move it would see this slice's pointer */
    char *t = staged_variant("        if (more) stash(cur ^ 1);\n",
                             "        acc[0][0][0][0] += pa[0];\n        if (more) stash(cur ^ 1);\n");
    tile_expect_not_applicable(t, "double-buffer", true, NULL, "pa, bumped in the prefetch at line 62, is read by the compute");
    free(t);
    /* the store lambda reads a bumped pointer */
    t = staged_variant("sb[buf][f / BN][f % BN] = rb[e];", "sb[buf][f / BN][f % BN] = rb[e] + pb[0];");
    tile_expect_not_applicable(t, "double-buffer", true, NULL, "pb, bumped in the prefetch at line 62, is read by the compute or the store");
    free(t);
    /* a bump after the load: the load of the next slice saw the pointer before it */
    t = staged_variant("            pb += (size_t)BK * N;\n            fetch((s + 1) * BK);\n",
                       "            fetch((s + 1) * BK);\n            pb += (size_t)BK * N;\n");
    tile_expect_not_applicable(t, "double-buffer", true, NULL, "is not pointer bumps followed by calls (line 65)");
    free(t);
    /* the stage index used before the prefetch */
    t = staged_variant("const bool more = s + 1 < slices;", "const bool more = s + 1 < slices && cur >= 0;");
    tile_expect_not_applicable(t, "double-buffer", true, NULL, "uses the stage index cur before the prefetch");
    free(t);
    /* a store of more than one call */
    t = staged_variant("        if (more) stash(cur ^ 1);\n", "        if (more) { stash(cur ^ 1); stash(cur ^ 1); }\n");
    tile_expect_not_applicable(t, "double-buffer", true, NULL, "is not a single call");
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(double_buffer_removes_from_sgemm_expert),
        cmocka_unit_test(double_buffer_waits_for_wgmma),
        cmocka_unit_test(double_buffer_composes_with_register_tile),
        cmocka_unit_test(double_buffer_says_why_not),
        cmocka_unit_test(double_buffer_staged_says_why_not),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
