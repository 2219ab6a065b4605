/* row-parallel: a thread per row <-> a warp (or a block) per row.
 *
 * applicable: `T row = <blockIdx.x * B + threadIdx.x>;` then `if (row < R) { body }` or
 *   `if (row >= R) return; body`, where every loop of the body at its top level is a row loop
 *   `for (T c = S; c < N; c++)` (or `T c = S; while (c < N) { …; c++; }`) whose carried variables
 *   are reductions (sum, max, min, count) and whose stores move with c. Apply spreads each loop
 *   over the lanes (`c = S + kl_lane; …; c += 32`), combines each reduction across the lanes right
 *   after its loop (shuffles; for a block, a shared stage), lets one lane do the scalar stores
 *   outside loops, and changes the launches (grid × 32 for a warp; block per row for a block).
 * present: lane-strided loops (`for (c = lane [+ S]; c < N; c += G)`, G = 32 or the block) in a
 *   kernel whose row comes from the warp (`(E) / 32` and `lane = threadIdx.x % 32`) or the block
 *   (blockIdx.x), their reductions combined by shuffles, a shared stage, or a block-reduction
 *   __device__ helper (`block_sum(v, part)`). Remove gives every thread one row with plain loops. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/row_parallel.h"
#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "syntax/affine.h"
#include "util/util.h"

static const char *const unit_values[] = {"warp", "block", NULL};
static const char *const threads_values[] = {"64", "128", "256", "512", "1024", NULL};
static const kl_rule_param rp_params[] = {{"unit", unit_values, "warp"}, {"threads", threads_values, "256"}};

/* Forward presets (docs/rules.md, "Forward presets"). The sweep gives a warp per row and a block of
 * 256 per row; a block per row of another size needs both parameters. An SM holds at most 2048
 * threads and 32 blocks. */
static const kl_rule_preset rp_presets[] = {
    {"long-rows", "unit=block threads=1024", NULL,
     "a block of 1024 threads per row for long rows (tens of thousands of elements): four times the loads in "
     "flight per row of 256 threads, and 2 such blocks still fill an SM's 2048 threads"},
    {"short-rows", "unit=block threads=128", NULL,
     "a block of 128 threads per row for rows of a few thousand elements: fewer idle threads at the end of a row "
     "and a shorter combine (4 warps), with 16 blocks, the 2048 threads, resident per SM"},
};
const kl_rule_presets kl_presets_row_parallel = {&kl_rule_row_parallel, rp_presets, sizeof rp_presets / sizeof rp_presets[0]};
/* ---- shared by both sides (row_parallel.h) ------------------------------------------------------ */

/* The first reason wins: fmt into why unless it holds one already. False, so that an analysis can
 * `return row_parallel__why(…)` where it refuses. */
bool row_parallel__why(char *why, size_t size, const char *fmt, ...)
{
    if (why[0]) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, size, fmt, ap);
    va_end(ap);
    return false;
}

/* A condition without its clause and parentheses. */
TSNode row_parallel__cond_expr(TSNode n)
{
    if (rt_is(n, "condition_clause")) n = ts_node_named_child(n, 0);
    return kl_ast_unparen(n);
}

bool row_parallel__op_is(const kl_rule_ctx *ctx, TSNode n, const char *op) { return rt_text_is(ctx, rt_field(n, "operator"), op); }

/* The expression of `X;`, or a null node. */
TSNode row_parallel__stmt_expr(TSNode st)
{
    if (!rt_is(st, "expression_statement") || ts_node_named_child_count(st) != 1) return row_parallel__null;
    return ts_node_named_child(st, 0);
}

/* `v++`, `++v`, `v += 1`, `v = v + 1` (k = 1) or `v += K` (*step = K's node): true when n
 * increments identifier v. */
bool row_parallel__increments(const kl_rule_ctx *ctx, TSNode n, const char *v, TSNode *step)
{
    n = kl_ast_unparen(n);
    *step = row_parallel__null;
    if (rt_is(n, "update_expression"))
        return rt_text_is(ctx, rt_field(n, "argument"), v) && row_parallel__op_is(ctx, n, "++");
    if (rt_is(n, "assignment_expression") && rt_text_is(ctx, rt_field(n, "left"), v)) {
        if (row_parallel__op_is(ctx, n, "+=")) {
            *step = rt_field(n, "right");
            return true;
        }
    }
    return false;
}

/* The range deleting a statement: its whole lines when alone on them. */
kl_status row_parallel__delete_stmt(const kl_rule_ctx *ctx, TSNode st, kl_edits *out)
{
    uint32_t a, b;
    rt_stmt_range(ctx, st, NULL, &a, &b);
    return kl_edits_add(out, a, b, "");
}

/* A simple operand (identifier, number, call, field): no parentheses needed around it. */
bool row_parallel__simple_operand(TSNode n)
{
    return rt_is(n, "identifier") || rt_is(n, "number_literal") || rt_is(n, "call_expression") ||
           rt_is(n, "field_expression") || rt_is(n, "parenthesized_expression") || rt_is(n, "subscript_expression");
}

/* The only declarator of a declaration when it is `T name = value` (qualifiers allowed), else null. */
TSNode row_parallel__single_init(TSNode decl)
{
    if (!rt_is(decl, "declaration")) return row_parallel__null;
    TSNode found = row_parallel__null;
    uint32_t c = ts_node_named_child_count(decl);
    for (uint32_t i = 0; i < c; i++) {
        TSNode k = ts_node_named_child(decl, i);
        if (rt_is(k, "init_declarator") || rt_is(k, "identifier") || rt_is(k, "pointer_declarator") ||
            rt_is(k, "array_declarator")) {
            if (!ts_node_is_null(found)) return row_parallel__null;
            found = k;
        }
    }
    return rt_is(found, "init_declarator") ? found : row_parallel__null;
}

/* A 1-D compile-time block: a constant, `dim3(X)`, or a `dim3 b(X)` of the host function. */
bool row_parallel__block_1d(const kl_rule_ctx *ctx, TSNode host, TSNode block, int64_t *v, char *w, size_t wn)
{
    if (kl_const_eval(ctx->src, host, block, false, v, w, wn)) return true;
    TSNode b = kl_ast_unparen(block);
    TSNode decl = row_parallel__null;
    if (rt_is(b, "identifier")) {
        char name[64];
        rt_text_copy(ctx, b, name, sizeof name);
        decl = rt_find_decl(ctx, host, name, true, NULL);
        b = decl;
    }
    char t[256];
    rt_text_copy(ctx, b, t, sizeof t);
    if (ts_node_is_null(b) || strchr(t, ',') || !strstr(t, "dim3")) return false;
    if (!ts_node_is_null(decl)) {
        /* `dim3 b(X);` (the grammar may read it as a function declarator): X between the parentheses */
        const char *o = strchr(t, '('), *c = strrchr(t, ')');
        if (!o || !c || c <= o + 1) return false;
        char x[128];
        kl_snprintf(x, sizeof x, "%.*s", (int)(c - o - 1), o + 1);
        char *end;
        long long n = strtoll(x, &end, 10);
        if (end != x && !*end) {
            *v = n;
            return true;
        }
        long long cv = 0;
        if (!rt_const_name(ctx, host, x, &cv)) return false;
        *v = cv;
        return true;
    }
    return kl_const_eval(ctx->src, host, block, true, v, w, wn);
}

/* The launches of kernel `name`: the block (1-D compile-time), how many. */
bool row_parallel__launch_block(const kl_rule_ctx *ctx, const char *name, int64_t *bs, unsigned *n, char *why, size_t wn)
{
    kl_launch_sites ls;
    *n = 0;
    if (kl_ast_launches(ctx->src, &ls, NULL) != KL_OK) {
        kl_snprintf(why, wn, "out of memory");
        return false;
    }
    bool ok = true;
    for (unsigned i = 0; i < ls.count && ok; i++) {
        const kl_launch_site *l = &ls.items[i];
        if (strcmp(l->kernel, name)) continue;
        int64_t v;
        char w[200] = "";
        if (ts_node_is_null(l->block) || !row_parallel__block_1d(ctx, l->host_fn, l->block, &v, w, sizeof w)) {
            kl_snprintf(why, wn, "the block size of %s at line %u is not a 1-D compile-time constant", name,
                        kl_ast_line(l->call));
            ok = false;
        } else if ((*n)++ && v != *bs) {
            kl_snprintf(why, wn, "launches of %s use different block sizes (%lld and %lld)", name, (long long)*bs,
                        (long long)v);
            ok = false;
        } else {
            *bs = v;
        }
    }
    kl_launch_sites_release(&ls);
    if (ok && !*n) {
        kl_snprintf(why, wn, "the file never launches %s: its launch could not follow", name);
        ok = false;
    }
    return ok;
}

/* `T c = S;` as the statement before a while loop: the declarator's value. */
TSNode row_parallel__decl_value_of(const kl_rule_ctx *ctx, TSNode st, const char *var)
{
    TSNode d = row_parallel__single_init(st);
    if (ts_node_is_null(d) || !rt_text_is(ctx, kl_ast_declarator_name(d), var)) return row_parallel__null;
    return rt_field(d, "value");
}

/* The inverse of grid_mul: the grid's x extent without its `* M` (*mult receives M's node).
 * False when the grid is not of that form. */
bool row_parallel__grid_unmul(const kl_rule_ctx *ctx, const kl_launch_site *l, TSNode *mult, uint32_t *a, uint32_t *b,
                       char *text, size_t size)
{
    TSNode g = kl_ast_unparen(l->grid), x = g;
    bool d3 = rt_is(g, "call_expression") && rt_text_is(ctx, rt_field(g, "function"), "dim3");
    if (d3) {
        TSNode args = rt_field(g, "arguments");
        if (ts_node_named_child_count(args) < 1) return false;
        x = kl_ast_unparen(ts_node_named_child(args, 0));
    }
    if (!rt_is(x, "binary_expression") || !row_parallel__op_is(ctx, x, "*")) return false;
    *mult = kl_ast_unparen(rt_field(x, "right"));
    TSNode left = kl_ast_unparen(rt_field(x, "left"));
    if (d3) {
        /* dim3(g.x * M, g.y, g.z) -> g */
        char full[300], gx[128];
        rt_text_unblank_to(ctx, g, full, sizeof full);
        rt_text_unblank_to(ctx, left, gx, sizeof gx);
        size_t n = strlen(gx);
        if (n > 2 && !strcmp(gx + n - 2, ".x")) {
            char want[400], m[64];
            rt_text_unblank_to(ctx, *mult, m, sizeof m);
            gx[n - 2] = '\0';
            kl_snprintf(want, sizeof want, "dim3(%s.x*%s,%s.y,%s.z)", gx, m, gx, gx);
            if (!strcmp(full, want)) {
                *a = ts_node_start_byte(l->grid), *b = ts_node_end_byte(l->grid);
                kl_snprintf(text, size, "%s", gx);
                return true;
            }
        }
        TSNode x0 = ts_node_named_child(rt_field(g, "arguments"), 0);
        *a = ts_node_start_byte(x0), *b = ts_node_end_byte(x0);
    } else {
        *a = ts_node_start_byte(l->grid), *b = ts_node_end_byte(l->grid);
    }
    rt_text_copy(ctx, left, text, size);
    return true;
}

/* ---- find ----------------------------------------------------------------------------------------- */

static kl_status visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    kl_sites *out = user;
    rp_row *r = malloc(sizeof *r);
    rp_present *p = malloc(sizeof *p);
    kl_status st = KL_OK;
    if (!r || !p) {
        st = KL_ERR_NOMEM;
        goto cleanup;
    }
    char id[256], note[300];
    if (row_parallel__analyse_row(ctx, ax, fn, name, r)) {
        json_t *f = json_pack("{s:s, s:s, s:i, s:i, s:i}", "row", r->row, "index", "", "loops", (int)r->nloops,
                              "one_lane_stores", (int)r->nstores, "block", (int)r->block);
        if (!f) {
            st = KL_ERR_NOMEM;
            goto cleanup;
        }
        char *it = kl_node_text(ctx->src, r->init);
        json_object_set_new(f, "index", json_string(it ? it : ""));
        free(it);
        json_t *reds = json_array();
        for (unsigned k = 0; k < r->nloops; k++)
            for (unsigned q = 0; q < r->loops[k].nred; q++)
                json_array_append_new(reds, json_pack("{s:s, s:s, s:i}", "var", r->loops[k].reds[q].var, "op",
                                                      r->loops[k].reds[q].op, "loop_line", (int)kl_ast_line(r->loops[k].node)));
        json_object_set_new(f, "reductions", reds);
        json_object_set_new(f, "early_return", json_boolean(r->early));
        if (r->why[0]) json_object_set_new(f, "why_not", json_string(r->why));
        kl_site_id(id, sizeof id, name, r->decl, NULL);
        kl_snprintf(note, sizeof note, "a thread per row (%s), %u loop(s) over the row", r->row, r->nloops);
        st = kl_sites_add(out, id, KL_SITE_APPLICABLE, kl_node_span(r->decl), name, f, NULL, note);
        if (st != KL_OK) goto cleanup;
    }
    if (row_parallel__analyse_present(ctx, fn, name, p)) {
        json_t *f = json_pack("{s:s, s:s, s:I, s:i, s:i, s:i}", "unit", p->warp ? "warp" : "block", "lane", p->lane,
                              "lanes", (json_int_t)p->group, "loops", (int)p->nloops, "combines",
                              (int)(p->ngone + p->ncalls), "one_lane_stores", (int)p->nifs);
        if (!f) {
            st = KL_ERR_NOMEM;
            goto cleanup;
        }
        if (p->helper[0]) json_object_set_new(f, "block_helper", json_string(p->helper));
        if (p->why[0]) json_object_set_new(f, "why_not", json_string(p->why));
        json_t *params = json_pack("{s:s}", "unit", p->warp ? "warp" : "block");
        if (params && !p->warp && p->group > 0) {
            char t[32];
            kl_snprintf(t, sizeof t, "%lld", p->group);
            json_object_set_new(params, "threads", json_string(t));
        }
        TSNode at = !ts_node_is_null(p->lane_decl) ? p->lane_decl : p->loops[0].node;
        kl_site_id(id, sizeof id, name, at, NULL);
        kl_snprintf(note, sizeof note, "a %s per row: %u loop(s) strided over %lld lanes", p->warp ? "warp" : "block",
                    p->nloops, p->group);
        st = kl_sites_add(out, id, KL_SITE_PRESENT, kl_node_span(at), name, f, params, note);
    }
cleanup:
    free(r);
    free(p);
    return st;
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    kl_status st = kl_rules_each_function(ctx, "__global__", visit, out, err);
    return st == KL_ERR_NOMEM ? kl_error_set(err, st, "out of memory") : st;
}

/* ---- running a site ------------------------------------------------------------------------------- */

static kl_status run_visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    rt_run *run = user;
    if (run->done || strcmp(name, run->site->kernel)) return KL_OK;
    if (ts_node_start_byte(fn) > run->site->span.start || ts_node_end_byte(fn) < run->site->span.end) return KL_OK;
    run->done = true;
    if (run->site->dir == KL_SITE_APPLICABLE) {
        rp_row *r = malloc(sizeof *r);
        if (!r) return KL_ERR_NOMEM;
        if (!row_parallel__analyse_row(ctx, ax, fn, name, r))
            run->st = kl_rule_not_applicable(run->err, "no row per thread at %s", run->site->id);
        else
            run->st = row_parallel__apply_row(ctx, run->site, r, run->params, run->out, run->err);
        free(r);
        return KL_OK;
    }
    rp_present *p = malloc(sizeof *p);
    if (!p) return KL_ERR_NOMEM;
    if (!row_parallel__analyse_present(ctx, fn, name, p))
        run->st = kl_rule_not_applicable(run->err, "no loop spread over lanes at %s", run->site->id);
    else
        run->st = row_parallel__remove_present(ctx, run->site, p, run->out, run->err);
    free(p);
    return KL_OK;
}

static kl_status run_site(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out,
                          kl_error *err)
{
    rt_run r = {site, params, out, err, false, KL_OK};
    return kl_rules_run_site(ctx, run_visit, &r, &r, false, "no kernel at %s", site->id);
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    return run_site(ctx, site, NULL, out, err);
}

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    return run_site(ctx, site, params, out, err);
}

const kl_rule kl_rule_row_parallel = {
    "row-parallel",
    "spread a per-thread loop over a row across the lanes of a warp or the threads of a block, combining its reductions",
    rp_params, 2, find, remove_site, apply,
};
