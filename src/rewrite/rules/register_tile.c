/*
 * register-tile — the shared-memory tiled GEMM with one output per thread ↔ TM×TN outputs per
 * thread held in registers (an outer-product update per k).
 *
 * The form chosen: the threads stay (the block keeps its TILE_Y × TILE_X shape) and the block's
 * tile of C grows to (TM·TILE) × (TN·TILE). Thread (ty, tx) computes the outputs of the
 * "virtual" threads (ty + i·TILE, tx + j·TILE), i < TM, j < TN — the original statements run
 * for each, with the indices substituted:
 *  - blockIdx.p → (blockIdx.p * TM), blockIdx.q → (blockIdx.q * TN) everywhere in the kernel
 *    (p is the thread index of the A tile's row dimension, q the B tile's column one);
 *  - the loads of the A tile run for i < TM with threadIdx.p → (threadIdx.p + kl_i * TILE) and
 *    every local that is threadIdx.p plus a thread-independent value (row, ty) moved the same
 *    way; the B tile's loads for j < TN on the q side; their k offsets stay;
 *  - the A tile's row dimension grows to TM * TILE, the B tile's column dimension to TN * TILE;
 *  - the accumulator becomes `acc[TM][TN]`; the update `acc += e1 * e2` reads TM values e1 and
 *    TN values e2 into registers kl_a / kl_b and updates the TM×TN outer product;
 *  - the statements after the tile loop that use the accumulator (the guarded store) run for
 *    every (i, j) — each output keeps its own guard, so the tails are exact;
 *  - every launch's grid shrinks: its p extent g becomes (g + TM - 1) / TM, its q extent
 *    (g + TN - 1) / TN.
 * Remove is the inverse on that form (recognised by its kl_i / kl_j loops).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/register_tile.h"

#define NAME "register-tile"


static const char *const tm_values[] = {"4", "2", "8", NULL};
static const kl_rule_param rt_params[] = {{"TM", tm_values, "4"}, {"TN", tm_values, "4"}};

/* Forward presets (docs/rules.md, "Forward presets"). The sweep moves TM with TN = 4 (2x4, 4x4,
 * 8x4); the square 8 x 8 needs both. */
static const kl_rule_preset rt_presets[] = {
    {"outer-8x8", "TM=8 TN=8", NULL,
     "each k step reads 8 + 8 operands from shared memory for 64 FMAs, 4 per load: an SM issues 128 FP32 FMAs "
     "but reads 32 words of shared memory per clock, so 4 is where the FMAs, not the shared reads, bound the loop "
     "(4 x 4 gives 2); 64 accumulators and 16 operands stay under 255 registers, and a 16 x 16 block (256 threads) "
     "at up to 128 registers still fits 2 blocks per SM; a 32 x 32 block is refused (shared memory, registers)"},
};
const kl_rule_presets kl_presets_register_tile = {&kl_rule_register_tile, rt_presets, sizeof rt_presets / sizeof rt_presets[0]};

/* ---- the rule ---------------------------------------------------------------------------------------- */

static kl_status rt_find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    for (unsigned i = 0; i < nf && i < 64; i++) {
        register_tile__rt *a = malloc(sizeof *a);
        if (!a) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        char why[256], id[256];
        int r = register_tile__analyse(ctx, &fs[i], a, why, sizeof why);
        kl_status st = KL_OK;
        if (r != 0) {
            kl_site_id(id, sizeof id, fs[i].name, a->kloop, NULL);
            json_t *feat = json_object();
            if (r > 0) {
                json_object_set_new(feat, "accumulator", json_string(a->locals[a->acc].name));
                json_object_set_new(feat, "a_tile", json_string(a->tiles[0].side == 1 ? a->tiles[0].name : a->tiles[1].name));
                json_object_set_new(feat, "b_tile", json_string(a->tiles[0].side == 2 ? a->tiles[0].name : a->tiles[1].name));
                json_object_set_new(feat, "tile", json_integer(a->tiles[0].grow_val));
                char rows[16];
                kl_snprintf(rows, sizeof rows, "threadIdx.%c", a->p);
                json_object_set_new(feat, "rows_with", json_string(rows));
            } else {
                json_object_set_new(feat, "why_not", json_string(why));
            }
            st = kl_sites_add(out, id, KL_SITE_APPLICABLE, kl_node_span(a->kloop), fs[i].name, feat, NULL,
                              r > 0 ? "one output per thread: compute a TM x TN register tile per thread"
                                    : "one output per thread (the register tile cannot be applied as is)");
        }
        register_tile__rt_present pr;
        if (st == KL_OK && register_tile__find_present(ctx, &fs[i], &pr)) {
            kl_site_id(id, sizeof id, fs[i].name, pr.decl, NULL);
            json_t *feat = json_pack("{s:s, s:I, s:I}", "accumulator", pr.acc, "TM", (json_int_t)pr.tm, "TN",
                                     (json_int_t)pr.tn);
            char tm[32], tn[32];
            kl_snprintf(tm, sizeof tm, "%lld", pr.tm);
            kl_snprintf(tn, sizeof tn, "%lld", pr.tn);
            json_t *params = json_pack("{s:s, s:s}", "TM", tm, "TN", tn);
            st = kl_sites_add(out, id, KL_SITE_PRESENT, kl_node_span(pr.decl), fs[i].name, feat, params,
                              "a TM x TN register tile per thread (kl_i / kl_j loops)");
        } else if (st == KL_OK) {
            register_tile__rg *g = malloc(sizeof *g);
            if (!g) {
                free(a);
                return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            }
            register_tile__rf *fr = malloc(sizeof *fr);
            if (!fr) {
                free(g);
                free(a);
                return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            }
            if (register_tile__rf_detect(ctx, &fs[i], fr)) {
                kl_site_id(id, sizeof id, fs[i].name, fr->acc_decl, NULL);
                json_t *feat = json_pack("{s:s, s:s}", "accumulator", fr->acc, "form", "fragment");
                if (!register_tile__rf_analyse(ctx, &fs[i], fs, nf < 64 ? nf : 64, fr, why, sizeof why))
                    json_object_set_new(feat, "why_not", json_string(why));
                st = kl_sites_add(out, id, KL_SITE_PRESENT, kl_node_span(fr->acc_decl), fs[i].name, feat, NULL,
                                  "a warp's mma fragment tile held per lane (acc[FM][FN][4])");
            } else if (register_tile__rg_detect(ctx, &fs[i], g)) {
                kl_site_id(id, sizeof id, fs[i].name, g->acc_decl, NULL);
                json_t *feat = json_pack("{s:s, s:I, s:I, s:s}", "accumulator", g->acc, "TM", (json_int_t)g->tm, "TN",
                                         (json_int_t)g->tn, "form", "general");
                if (!register_tile__rg_analyse(ctx, &fs[i], g, why, sizeof why)) json_object_set_new(feat, "why_not", json_string(why));
                char tm[32], tn[32];
                kl_snprintf(tm, sizeof tm, "%lld", g->tm);
                kl_snprintf(tn, sizeof tn, "%lld", g->tn);
                json_t *params = json_pack("{s:s, s:s}", "TM", tm, "TN", tn);
                st = kl_sites_add(out, id, KL_SITE_PRESENT, kl_node_span(g->acc_decl), fs[i].name, feat, params,
                                  "a TM x TN register tile per thread (an outer product into a 2-D accumulator)");
            } else {
                char acc[64], w2[400];
                TSNode decl;
                if (register_tile__sp_detect(ctx, &fs[i], acc, sizeof acc, &decl, w2, sizeof w2)) {
                    kl_site_id(id, sizeof id, fs[i].name, decl, NULL);
                    json_t *feat = json_pack("{s:s, s:s}", "accumulator", acc, "form", "split");
                    if (w2[0]) json_object_set_new(feat, "why_not", json_string(w2));
                    st = kl_sites_add(out, id, KL_SITE_PRESENT, kl_node_span(decl), fs[i].name, feat, NULL,
                                      "a register tile per thread (acc[D0][D1]...): its outputs go to more blocks, one per thread");
                }
            }
            free(fr);
            free(g);
        }
        free(a);
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    }
    return register_tile__rs_find(ctx, out, err);
}

static const rt_func *site_function(const kl_rule_ctx *ctx, const kl_site *site, rt_func *fs, unsigned *nf)
{
    *nf = rt_functions(ctx, fs, 64);
    return rt_function_named(fs, *nf < 64 ? *nf : 64, site->kernel);
}

static kl_status rt_apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out,
                          kl_error *err)
{
    int64_t tm = 4, tn = 4;
    kl_rule_param_int(&kl_rule_register_tile, params, "TM", &tm);
    kl_rule_param_int(&kl_rule_register_tile, params, "TN", &tn);
    rt_func fs[64];
    unsigned nf;
    const rt_func *f = site_function(ctx, site, fs, &nf);
    if (!f) return kl_rule_not_applicable(err, "no kernel %s", site->kernel);
    register_tile__rt *a = malloc(sizeof *a);
    if (!a) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    char why[256];
    kl_status st = KL_OK;
    if (register_tile__analyse(ctx, f, a, why, sizeof why) != 1) {
        st = kl_rule_not_applicable(err, "%s", why[0] ? why : "not a tiled product with one output per thread");
        goto cleanup;
    }
    /* the shared memory it needs */
    long long bytes = 0;
    for (unsigned k = 0; k < 2; k++) {
        long long d0, d1;
        unsigned es = rt_type_size(a->tiles[k].elem);
        if (!rt_const_eval(ctx, f->def, a->tiles[k].dims[0], &d0) || !rt_const_eval(ctx, f->def, a->tiles[k].dims[1], &d1)) {
            st = kl_rule_not_applicable(err, "the shape of %s is not a compile-time constant", a->tiles[k].name);
            goto cleanup;
        }
        bytes += d0 * d1 * (es ? es : 8) * (a->tiles[k].side == 1 ? tm : tn);
    }
    if (bytes > 48 * 1024) {
        st = kl_rule_not_applicable(err, "the grown tiles need %lld bytes of shared memory (at most 49152 static)", bytes);
        goto cleanup;
    }
    /* the registers it needs at the least: the accumulators and one row of operands per side; a
     * block whose threads cannot all have them (65536 32-bit registers per SM) does not launch */
    {
        long long tp = a->tiles[0].side == 1 ? a->tiles[0].grow_val : a->tiles[1].grow_val;
        long long tq = a->tiles[0].side == 2 ? a->tiles[0].grow_val : a->tiles[1].grow_val;
        long long words = rt_type_size(a->acc_type) == 8 ? 2 : 1;
        long long regs = tm * tn * words + tm + tn, threads = tp * tq;
        if (threads > 0 && regs * threads > 65536) {
            st = kl_rule_not_applicable(err, "TM x TN = %lld x %lld needs at least %lld registers per thread (the accumulators "
                                        "and a row of operands each way); a block of %lld threads can have at most %lld "
                                        "(65536 per SM)", (long long)tm, (long long)tn, regs, threads, 65536 / threads);
            goto cleanup;
        }
    }
    st = register_tile__launch_edits(a, true, tm, tn, out, err, why, sizeof why);
    if (st == KL_ERR_NOT_APPLICABLE) st = kl_rule_not_applicable(err, "%s", why);
    if (st != KL_OK) goto cleanup;
    st = register_tile__rt_apply_edits(a, tm, tn, out, err);
cleanup:
    free(a);
    return st;
}

static kl_status rt_remove(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    const char *form = json_string_value(json_object_get(site->features, "form"));
    if (form && !strcmp(form, "stencil")) return register_tile__rs_remove(ctx, site, out, err);
    rt_func fs[64];
    unsigned nf;
    const rt_func *f = site_function(ctx, site, fs, &nf);
    register_tile__rt_present pr;
    if (!f) return kl_rule_not_applicable(err, "no kernel %s", site->kernel);
    if (!register_tile__find_present(ctx, f, &pr)) {
        register_tile__rf *fr = malloc(sizeof *fr);
        if (!fr) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        if (register_tile__rf_detect(ctx, f, fr)) {
            kl_status st = register_tile__rf_remove_edits(ctx, f, fs, nf < 64 ? nf : 64, fr, out, err);
            free(fr);
            return st;
        }
        free(fr);
        register_tile__rg *g = malloc(sizeof *g);
        if (!g) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        char acc[64], w2[400];
        TSNode decl;
        kl_status st = register_tile__rg_detect(ctx, f, g) ? register_tile__rg_remove_edits(ctx, f, g, out, err)
                       : register_tile__sp_detect(ctx, f, acc, sizeof acc, &decl, w2, sizeof w2)
                           ? register_tile__sp_remove_edits(ctx, f, out, err)
                           : kl_rule_not_applicable(err, "no register tile in %s", site->kernel);
        free(g);
        return st;
    }
    RT_TRY(register_tile__rt_remove_edits(ctx, f, &pr, out, err));
    /* the launches: the grid back to one output per thread */
    register_tile__rt *a = calloc(1, sizeof *a);
    if (!a) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    a->ctx = ctx;
    a->f = *f;
    a->p = pr.p;
    a->q = pr.p == 'y' ? 'x' : 'y';
    char why[256];
    kl_status st = register_tile__launch_edits(a, false, pr.tm, pr.tn, out, err, why, sizeof why);
    if (st == KL_ERR_NOT_APPLICABLE) st = kl_rule_not_applicable(err, "%s", why);
    free(a);
    return st;
}

const kl_rule kl_rule_register_tile = {
    NAME,
    "compute a TM x TN block of outputs per thread in registers (outer-product update) instead of one",
    rt_params,
    2,
    rt_find,
    rt_remove,
    rt_apply,
};

