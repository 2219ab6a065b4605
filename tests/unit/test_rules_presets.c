/* The rules catalog's forward presets (rules.h kl_rule_preset, docs/rules.md "Forward presets"): the
 * tables are well formed and reach points the first-parameter sweep does not; an APPLY request without
 * parameters proposes the presets that fit a site first, then the sweep, without duplicates (by
 * parameters or by result), at most KL_RULES_TRIES_PER_SITE per site, in the same order every time;
 * presets that do not fit the kernel come back as rejections with the transform's reason and the
 * preset's name. The kernels (tests/data/rules/presets/, one .cu each) were written for this test in styles
 * unlike the built-in tasks (NT, batched with pointer locals, macro indexing, compile-time sizes, a
 * TN tiled product, a run-time-radius stencil, a 1-D correlation, a row-wise normalization); every
 * proposal is compiled with nvcc at the end (rules_golden.h's batch and cache). */
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
#include "rules_golden.h"

static golden_batch compiled;

static char *read_kernel(const char *file)
{
    const char *root = getenv("KL_SOURCE_DIR");
    assert_non_null(root);
    char p[1024];
    kl_snprintf(p, sizeof p, "%s/tests/data/rules/presets/%s", root, file);
    char *t = NULL;
    size_t n;
    kl_error err = {0};
    if (kl_file_read(p, 0, &t, &n, &err) != KL_OK) fail_msg("%s: %s", p, err.message);
    return t;
}

/* The proposals of an APPLY request for one transform, without parameters. */
static void propose(const char *file, const char *text, const char *transform, kl_candidates *c)
{
    kl_rewriter *rw = NULL;
    kl_error err = {0};
    assert_int_equal(kl_rewriter_open("rules", NULL, &rw, &err), KL_OK);
    kl_rewrite_request req = {0};
    req.kind = KL_REQ_APPLY;
    req.source = text;
    req.source_name = file;
    req.transform = transform;
    if (kl_rewriter_propose(rw, &req, c, &err) != KL_OK) fail_msg("%s: %s", file, err.message);
    kl_rewriter_free(rw);
}

/* The compact sorted JSON of a preset's parameters (static buffer). */
static const char *preset_text(const kl_rule *r, const char *name)
{
    static char buf[512];
    const kl_rule_presets *ps = kl_rule_presets_of(r);
    assert_non_null(ps);
    for (unsigned i = 0; i < ps->count; i++) {
        if (strcmp(ps->items[i].name, name)) continue;
        kl_error err = {0};
        json_t *p = kl_rule_preset_params(r, &ps->items[i], &err);
        assert_non_null(p);
        char *t = json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(p);
        kl_snprintf(buf, sizeof buf, "%s", t);
        free(t);
        return buf;
    }
    fail_msg("%s has no preset %s", r->name, name);
    return NULL;
}

/* Index of the candidate at site with these parameters (compact sorted JSON), or -1. */
static int find_cand(const kl_candidates *c, const char *site, const char *params)
{
    for (unsigned i = 0; i < c->count; i++)
        if (!strcmp(c->items[i].site, site) && !strcmp(c->items[i].params_json, params)) return (int)i;
    return -1;
}

/* The rejection at site whose reason says both want and the preset's name. */
static void expect_rejected(const kl_candidates *c, const char *site, const char *preset, const char *want)
{
    char tag[96];
    kl_snprintf(tag, sizeof tag, "(preset %s:", preset);
    for (unsigned i = 0; i < c->nrejected; i++) {
        const kl_rejection *r = &c->rejected[i];
        if (strcmp(r->site, site) || !strstr(r->reason, tag)) continue;
        if (!strstr(r->reason, want)) fail_msg("preset %s at %s: the reason '%s' does not say '%s'", preset, site, r->reason, want);
        if (!kl_str_starts(r->reason, "not applicable: "))
            fail_msg("preset %s at %s: '%s' is not a refusal", preset, site, r->reason);
        return;
    }
    fail_msg("no rejection of preset %s at %s", preset, site);
}

/* Every candidate of a site: queued for nvcc, parameters distinct, results distinct, at most
 * KL_RULES_TRIES_PER_SITE of them. */
static unsigned check_site(const kl_candidates *c, const char *file, const char *site)
{
    unsigned n = 0;
    for (unsigned i = 0; i < c->count; i++) {
        if (strcmp(c->items[i].site, site)) continue;
        n++;
        for (unsigned k = 0; k < i; k++) {
            if (strcmp(c->items[k].site, site)) continue;
            if (!strcmp(c->items[k].params_json, c->items[i].params_json))
                fail_msg("%s@%s: %s proposed twice", file, site, c->items[i].params_json);
            if (!strcmp(c->items[k].source, c->items[i].source))
                fail_msg("%s@%s: %s and %s write the same file", file, site, c->items[k].params_json, c->items[i].params_json);
        }
        char tag[256];
        kl_snprintf(tag, sizeof tag, "%s-%s-%s", file, c->items[i].transform, c->items[i].params_json);
        golden_batch_text(&compiled, tag, c->items[i].source);
    }
    if (n > KL_RULES_TRIES_PER_SITE) fail_msg("%s@%s: %u proposals, over %d", file, site, n, KL_RULES_TRIES_PER_SITE);
    return n;
}

/* ---- the tables ---------------------------------------------------------------------------------- */

/* Every preset parses, names only the rule's parameters and values, has a reason and a unique name,
 * and is a point the sweep of the first parameter (the others at their defaults) does not reach. */
static void tables_are_well_formed(void **state)
{
    (void)state;
    unsigned seen = 0;
    for (unsigned i = 0; i < kl_rules_count; i++) {
        const kl_rule *r = kl_rules[i];
        const kl_rule_presets *ps = kl_rule_presets_of(r);
        if (!ps) continue;
        assert_ptr_equal(ps->rule, r);
        assert_true(ps->count > 0);
        for (unsigned k = 0; k < ps->count; k++) {
            const kl_rule_preset *p = &ps->items[k];
            seen++;
            kl_error err = {0};
            json_t *o = kl_rule_preset_params(r, p, &err);
            if (!o) fail_msg("%s: %s", r->name, err.message);
            if (!p->why || strlen(p->why) < 40) fail_msg("%s preset %s: no reason given", r->name, p->name);
            if (p->when && !strchr(p->when, '=')) fail_msg("%s preset %s: when '%s' is not key=value", r->name, p->name, p->when);
            for (unsigned q = 0; q < k; q++)
                if (!strcmp(ps->items[q].name, p->name)) fail_msg("%s: two presets named %s", r->name, p->name);
            /* off the sweep: some parameter other than the first differs from its default */
            bool off = false;
            for (unsigned q = 1; q < r->nparams; q++) {
                const char *v = json_string_value(json_object_get(o, r->params[q].name));
                if (v && (!r->params[q].deflt || strcmp(v, r->params[q].deflt))) off = true;
            }
            if (!off) fail_msg("%s preset %s: the sweep of %s already proposes it", r->name, p->name, r->params[0].name);
            json_decref(o);
        }
    }
    assert_true(seen >= 8);
    /* a malformed entry is an error that names it */
    const kl_rule_preset bad[] = {{"bad-word", "warps_m", NULL, "x"}, {"bad-name", "warps=2", NULL, "x"},
                                  {"bad-value", "warps_m=3", NULL, "x"}};
    const char *want[] = {"is not name=value", "has no parameter 'warps'", "warps_m=3 is not one of"};
    for (unsigned i = 0; i < 3; i++) {
        kl_error err = {0};
        assert_null(kl_rule_preset_params(&kl_rule_tensor_core, &bad[i], &err));
        if (!strstr(err.message, want[i]) || !strstr(err.message, bad[i].name))
            fail_msg("'%s' does not say '%s' and the preset's name", err.message, want[i]);
    }
}

/* ---- tensor-core ---------------------------------------------------------------------------------- */

/* An NN bf16 product with an epilogue: every preset applies, ahead of the sweep, in table order;
 * the sweep's tail past KL_RULES_TRIES_PER_SITE is cut; the same request gives the same answer. */
static void tensor_core_nn_takes_every_preset(void **state)
{
    (void)state;
    const char *file = "hgemm_nn_alpha.cu", *site = "gemm_bf16_ab:13";
    char *text = read_kernel(file);
    kl_candidates c, again;
    propose(file, text, "tensor-core", &c);
    const char *names[] = {"large-pipelined", "medium-pipelined", "small-pipelined", "strided"};
    for (unsigned i = 0; i < 4; i++) {
        int at = find_cand(&c, site, preset_text(&kl_rule_tensor_core, names[i]));
        if (at != (int)i) fail_msg("preset %s is proposal %d, expected %u", names[i], at, i);
    }
    /* then the sweep of warps_m (2, 1, 4): two fit under the cap */
    assert_int_equal(find_cand(&c, site, "{\"warps_m\":\"2\"}"), 4);
    assert_int_equal(find_cand(&c, site, "{\"warps_m\":\"1\"}"), 5);
    assert_int_equal(find_cand(&c, site, "{\"warps_m\":\"4\"}"), -1);
    assert_int_equal(check_site(&c, file, site), KL_RULES_TRIES_PER_SITE);
    assert_non_null(strstr(c.items[0].source, "KL_BM = 128, KL_BN = 128, KL_BK = 32"));
    assert_non_null(strstr(c.items[0].source, "cudaFuncSetAttribute"));
    propose(file, text, "tensor-core", &again);
    assert_int_equal(again.count, c.count);
    for (unsigned i = 0; i < c.count; i++) {
        assert_string_equal(again.items[i].params_json, c.items[i].params_json);
        assert_string_equal(again.items[i].source, c.items[i].source);
    }
    kl_candidates_free(&again);
    kl_candidates_free(&c);
    free(text);
}

/* An NT f16 product through macros: the cp.async presets are refused (B is not contiguous along the
 * columns), `strided` applies on the canonical form, the sweep follows. */
static void tensor_core_nt_keeps_strided(void **state)
{
    (void)state;
    const char *file = "hgemm_nt_macro.cu", *site = "hgemm_nt:17";
    char *text = read_kernel(file);
    kl_candidates c;
    propose(file, text, "tensor-core", &c);
    expect_rejected(&c, site, "large-pipelined", "B's elements are not contiguous along 'j'");
    expect_rejected(&c, site, "medium-pipelined", "B's elements are not contiguous along 'j'");
    expect_rejected(&c, site, "small-pipelined", "B's elements are not contiguous along 'j'");
    assert_int_equal(find_cand(&c, site, preset_text(&kl_rule_tensor_core, "strided")), 0);
    assert_int_equal(find_cand(&c, site, "{\"warps_m\":\"2\"}"), 1);
    assert_true(check_site(&c, file, site) >= 3);
    kl_candidates_free(&c);
    free(text);
}

/* A batched product through per-batch pointer locals (blockIdx.z): the presets apply, the z extent
 * of the grid is kept. */
static void tensor_core_batched_pointer_locals(void **state)
{
    (void)state;
    const char *file = "hgemm_batched_ptr.cu", *site = "bmm_bf16:15";
    char *text = read_kernel(file);
    kl_candidates c;
    propose(file, text, "tensor-core", &c);
    int at = find_cand(&c, site, preset_text(&kl_rule_tensor_core, "large-pipelined"));
    assert_int_equal(at, 0);
    assert_non_null(strstr(c.items[at].source, "batches)"));
    assert_true(find_cand(&c, site, preset_text(&kl_rule_tensor_core, "strided")) >= 0);
    check_site(&c, file, site);
    kl_candidates_free(&c);
    free(text);
}

/* Compile-time sizes of 64 x 512 x 256: the 128-row tile is refused with the size it exceeds; the
 * 64- and 32-row tiles apply. The same refusal by hand, and a k tile over a compile-time K. */
static void tensor_core_tile_over_a_compile_time_size(void **state)
{
    (void)state;
    const char *file = "hgemm_fixed_small.cu", *site = "proj_f16:16";
    char *text = read_kernel(file);
    kl_candidates c;
    propose(file, text, "tensor-core", &c);
    expect_rejected(&c, site, "large-pipelined", "the block tile's rows (128) exceed ROWS = 64, a compile-time size");
    assert_int_equal(find_cand(&c, site, preset_text(&kl_rule_tensor_core, "medium-pipelined")), 0);
    assert_int_equal(find_cand(&c, site, preset_text(&kl_rule_tensor_core, "small-pipelined")), 1);
    assert_int_equal(find_cand(&c, site, preset_text(&kl_rule_tensor_core, "strided")), 2);
    check_site(&c, file, site);
    kl_candidates_free(&c);
    /* K = 16 as a constant: a 32-deep k tile is refused, 16 applies */
    char *small = kl_strdup(text);
    char *at = strstr(small, "DEPTH = 256;");
    assert_non_null(at);
    memcpy(at, "DEPTH =  16;", strlen("DEPTH =  16;"));
    char *out = NULL, *note = NULL;
    kl_error err = {0};
    assert_int_equal(kl_rules_rewrite("k16.cu", small, strlen(small), NULL, "tensor-core", site, false, "{\"bk\":\"32\"}",
                                      &out, &note, &err),
                     KL_ERR_NOT_APPLICABLE);
    assert_non_null(strstr(err.message, "the k tile (32) exceeds DEPTH = 16"));
    assert_int_equal(kl_rules_rewrite("k16.cu", small, strlen(small), NULL, "tensor-core", site, false, "{\"bk\":\"16\"}",
                                      &out, &note, &err),
                     KL_OK);
    free(out);
    free(note);
    free(small);
    free(text);
}

/* ---- register-tile -------------------------------------------------------------------------------- */

/* A TN tiled f32 product on a 16 x 16 block: outer-8x8 first, then the TM sweep; on a 32 x 32 block
 * it is refused for its shared memory (f32) or its registers (half tiles). */
static void register_tile_outer_8x8(void **state)
{
    (void)state;
    const char *file = "sgemm_tiled_tn.cu", *site = "sgemm_tn_tiled:15";
    char *text = read_kernel(file);
    kl_candidates c;
    propose(file, text, "register-tile", &c);
    assert_int_equal(find_cand(&c, site, "{\"TM\":\"8\",\"TN\":\"8\"}"), 0);
    assert_int_equal(find_cand(&c, site, "{\"TM\":\"4\"}"), 1);
    assert_int_equal(check_site(&c, file, site), 4);
    kl_candidates_free(&c);
    free(text);

    text = read_kernel("sgemm_tiled32.cu");
    propose("sgemm_tiled32.cu", text, "register-tile", &c);
    expect_rejected(&c, "mm32:14", "outer-8x8", "the grown tiles need 65536 bytes of shared memory");
    check_site(&c, "sgemm_tiled32.cu", "mm32:14");
    kl_candidates_free(&c);
    free(text);

    text = read_kernel("hgemm_tiled32_half.cu");
    propose("hgemm_tiled32_half.cu", text, "register-tile", &c);
    expect_rejected(&c, "hmm32:16", "outer-8x8",
                    "TM x TN = 8 x 8 needs at least 80 registers per thread (the accumulators and a row of operands each "
                    "way); a block of 1024 threads can have at most 64");
    check_site(&c, "hgemm_tiled32_half.cu", "hmm32:16");
    kl_candidates_free(&c);
    free(text);
}

/* ---- smem-tile ------------------------------------------------------------------------------------ */

/* A run-time-radius 2-D correlation: the three stencil presets apply first (on the canonical form:
 * an index macro), distinct files; a 3 x 3 box with compile-time offsets, where max_radius changes
 * nothing: stencil-x4-wide is dropped as stencil-x4's file; a 1-D correlation: refused with the
 * transform's reason; a GEMM site: no stencil preset at all. */
static void smem_tile_stencil_presets(void **state)
{
    (void)state;
    const char *file = "wstencil_rt.cu", *site = "wcorr:16";
    char *text = read_kernel(file);
    kl_candidates c;
    propose(file, text, "smem-tile", &c);
    assert_int_equal(find_cand(&c, site, "{\"outputs_x\":\"4\"}"), 0);
    assert_int_equal(find_cand(&c, site, "{\"outputs_x\":\"2\"}"), 1);
    assert_int_equal(find_cand(&c, site, "{\"max_radius\":\"8\",\"outputs_x\":\"4\"}"), 2);
    assert_non_null(strstr(c.items[2].source, "2 * 8 + 1"));
    /* the sweep of tile (a GEMM parameter): both values write the one-output stencil, once */
    assert_int_equal(find_cand(&c, site, "{\"tile\":\"16\"}"), 3);
    assert_int_equal(find_cand(&c, site, "{\"tile\":\"32\"}"), -1);
    assert_int_equal(check_site(&c, file, site), 4);
    kl_candidates_free(&c);
    free(text);

    text = read_kernel("box3_fixed.cu");
    propose("box3_fixed.cu", text, "smem-tile", &c);
    assert_int_equal(find_cand(&c, "box3:12", "{\"outputs_x\":\"4\"}"), 0);
    assert_int_equal(find_cand(&c, "box3:12", "{\"outputs_x\":\"2\"}"), 1);
    assert_int_equal(find_cand(&c, "box3:12", "{\"max_radius\":\"8\",\"outputs_x\":\"4\"}"), -1);
    assert_int_equal(check_site(&c, "box3_fixed.cu", "box3:12"), 3);
    kl_candidates_free(&c);
    free(text);

    text = read_kernel("conv1d_taps.cu");
    propose("conv1d_taps.cu", text, "smem-tile", &c);
    expect_rejected(&c, "corr1d:13", "stencil-x4", "outputs_x needs a 2-D stencil whose outer offset loop moves along y");
    expect_rejected(&c, "corr1d:13", "stencil-x2", "outputs_x needs a 2-D stencil");
    assert_int_equal(find_cand(&c, "corr1d:13", "{\"tile\":\"16\"}"), 0);
    check_site(&c, "conv1d_taps.cu", "corr1d:13");
    kl_candidates_free(&c);
    free(text);

    text = read_kernel("sgemm_naive_ld.cu");
    propose("sgemm_naive_ld.cu", text, "smem-tile", &c);
    for (unsigned i = 0; i < c.count; i++)
        if (strstr(c.items[i].params_json, "outputs_x")) fail_msg("a stencil preset at the GEMM site %s", c.items[i].site);
    for (unsigned i = 0; i < c.nrejected; i++)
        if (strstr(c.rejected[i].reason, "(preset ")) fail_msg("a preset tried at the GEMM site: %s", c.rejected[i].reason);
    assert_int_equal(find_cand(&c, "sgemm_ld:11", "{\"tile\":\"16\"}"), 0);
    check_site(&c, "sgemm_naive_ld.cu", "sgemm_ld:11");
    kl_candidates_free(&c);
    free(text);
}

/* ---- row-parallel --------------------------------------------------------------------------------- */

static void row_parallel_block_presets(void **state)
{
    (void)state;
    const char *file = "rms_rows.cu", *site = "rms_scale:9";
    char *text = read_kernel(file);
    kl_candidates c;
    propose(file, text, "row-parallel", &c);
    assert_int_equal(find_cand(&c, site, "{\"threads\":\"1024\",\"unit\":\"block\"}"), 0);
    assert_int_equal(find_cand(&c, site, "{\"threads\":\"128\",\"unit\":\"block\"}"), 1);
    assert_int_equal(find_cand(&c, site, "{\"unit\":\"warp\"}"), 2);
    assert_int_equal(find_cand(&c, site, "{\"unit\":\"block\"}"), 3);
    assert_non_null(strstr(c.items[0].source, "__shared__ float kl_part[32];"));
    assert_non_null(strstr(c.items[0].source, ", 1024, 0, stream>>>"));
    assert_non_null(strstr(c.items[1].source, "__shared__ float kl_part[4];"));
    assert_int_equal(check_site(&c, file, site), 4);
    kl_candidates_free(&c);
    free(text);
}

/* ---- the rest of the backend ---------------------------------------------------------------------- */

/* A card's parameters are tried alone (no presets); max_per_site caps the sweep, not the presets;
 * a transform without presets proposes what it did before (its sweep). */
static void cards_and_caps(void **state)
{
    (void)state;
    char *text = read_kernel("hgemm_nn_alpha.cu");
    kl_rewriter *rw = NULL;
    kl_error err = {0};
    kl_candidates c;
    assert_int_equal(kl_rewriter_open("rules", NULL, &rw, &err), KL_OK);
    kl_rewrite_request req = {0};
    req.kind = KL_REQ_APPLY;
    req.source = text;
    req.source_name = "a.cu";
    req.skill_json = "{\"transform\": \"tensor-core\", \"params\": {\"warps_m\": \"4\", \"frags_m\": \"2\"}}";
    assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_OK);
    assert_int_equal(c.count, 1);
    assert_string_equal(c.items[0].params_json, "{\"frags_m\":\"2\",\"warps_m\":\"4\"}");
    kl_candidates_free(&c);
    kl_rewriter_free(rw);

    assert_int_equal(kl_rewriter_open("rules", "{\"max_per_site\": 1}", &rw, &err), KL_OK);
    req.skill_json = NULL;
    req.transform = "tensor-core";
    assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_OK);
    assert_int_equal(c.count, 5); /* 4 presets and warps_m=2 */
    assert_string_equal(c.items[4].params_json, "{\"warps_m\":\"2\"}");
    kl_candidates_free(&c);

    req.transform = "launch-bounds";
    assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_OK);
    assert_int_equal(c.count, 1);
    assert_string_equal(c.items[0].params_json, "{\"min_blocks\":\"0\"}");
    kl_candidates_free(&c);
    kl_rewriter_free(rw);
    free(text);
}

/* Last: every proposal queued above compiles (nvcc -cubin, sm_90). */
static void every_proposal_compiles(void **state)
{
    (void)state;
    assert_true(compiled.n >= 25);
    golden_batch_compile(&compiled);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tables_are_well_formed),
        cmocka_unit_test(tensor_core_nn_takes_every_preset),
        cmocka_unit_test(tensor_core_nt_keeps_strided),
        cmocka_unit_test(tensor_core_batched_pointer_locals),
        cmocka_unit_test(tensor_core_tile_over_a_compile_time_size),
        cmocka_unit_test(register_tile_outer_8x8),
        cmocka_unit_test(smem_tile_stencil_presets),
        cmocka_unit_test(row_parallel_block_presets),
        cmocka_unit_test(cards_and_caps),
        cmocka_unit_test(every_proposal_compiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
