/* row-parallel's present side (row_parallel.c has the rule): rows spread over the lanes of a warp
 * or a block, analysed (row_parallel__analyse_present), and given back to one thread each
 * (row_parallel__remove_present). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/row_parallel.h"
#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "syntax/affine.h"
#include "util/util.h"

static bool is_inside(TSNode n, TSNode outer)
{
    return !ts_node_is_null(outer) && ts_node_start_byte(n) >= ts_node_start_byte(outer) &&
           ts_node_end_byte(n) <= ts_node_end_byte(outer);
}

/* Is n the lane: the lane's name or threadIdx.x itself? */
static bool is_lane(const kl_rule_ctx *ctx, const rp_present *p, TSNode n)
{
    n = kl_ast_unparen(n);
    return rt_text_is(ctx, n, p->lane) || rt_is_builtin(ctx, n, "threadIdx", 'x');
}

/* `c = lane`, `c = lane + S`, `c = S + lane`: *rest = S (null for the lane alone). */
static bool lane_start(const kl_rule_ctx *ctx, const rp_present *p, TSNode v, TSNode *rest)
{
    v = kl_ast_unparen(v);
    *rest = row_parallel__null;
    if (is_lane(ctx, p, v)) return true;
    if (rt_is(v, "binary_expression") && row_parallel__op_is(ctx, v, "+")) {
        if (is_lane(ctx, p, rt_field(v, "right"))) {
            *rest = rt_field(v, "left");
            return true;
        }
        if (is_lane(ctx, p, rt_field(v, "left"))) {
            *rest = rt_field(v, "right");
            return true;
        }
    }
    return false;
}

/* The step equals the group: 32 for a warp, blockDim.x or the launches' block for a block. */
static bool group_step(const kl_rule_ctx *ctx, const rp_present *p, TSNode step)
{
    if (ts_node_is_null(step)) return false;
    if (!p->warp && rt_is_builtin(ctx, kl_ast_unparen(step), "blockDim", 'x')) return true;
    int64_t v = 0;
    return kl_const_eval(ctx->src, p->fn, step, false, &v, NULL, 0) && v == p->group;
}

/* A lane-strided loop: `for (T c = <lane start>; c < N; c += G)` or the while form. */
static bool strided_loop(const kl_rule_ctx *ctx, const rp_present *p, TSNode st, rp_sloop *L)
{
    memset(L, 0, sizeof *L);
    char var[64] = "";
    TSNode upd, step;
    if (rt_is(st, "for_statement")) {
        TSNode init = rt_field(st, "initializer");
        TSNode d = row_parallel__single_init(init);
        if (ts_node_is_null(d)) return false;
        rt_text_copy(ctx, kl_ast_declarator_name(d), var, sizeof var);
        L->start = rt_field(d, "value");
        upd = rt_field(st, "update");
        L->update = upd;
    } else if (rt_is(st, "while_statement")) {
        TSNode cond = row_parallel__cond_expr(rt_field(st, "condition"));
        if (!rt_is(cond, "binary_expression")) return false;
        rt_text_copy(ctx, rt_field(cond, "left"), var, sizeof var);
        L->while_decl = rt_prev_stmt(st);
        L->start = row_parallel__decl_value_of(ctx, L->while_decl, var);
        TSNode body = rt_field(st, "body");
        if (!rt_is(body, "compound_statement") || ts_node_is_null(L->start)) return false;
        L->update = rt_last_stmt(body);
        upd = row_parallel__stmt_expr(L->update);
        L->is_while = true;
    } else {
        return false;
    }
    if (!var[0] || ts_node_is_null(upd) || !row_parallel__increments(ctx, upd, var, &step) || !group_step(ctx, p, step)) return false;
    if (!lane_start(ctx, p, L->start, &L->start_rest)) return false;
    L->node = st;
    return true;
}

/* `for (int o = 16; o > 0; o >>= 1) v … __shfl_*_sync(…)` (or starting at 16 with /= 2). */
static bool shuffle_loop(const kl_rule_ctx *ctx, TSNode st)
{
    if (!rt_is(st, "for_statement")) return false;
    char t[400];
    rt_text_unblank_to(ctx, rt_field(st, "initializer"), t, sizeof t);
    if (!strstr(t, "=16")) return false;
    rt_text_unblank_to(ctx, rt_field(st, "body"), t, sizeof t);
    return strstr(t, "__shfl_xor_sync(") || strstr(t, "__shfl_down_sync(");
}

/* A block-reduction helper: a __device__ function that synchronises the block and reads
 * threadIdx.x, returning a value (block_sum, block_reduce). */
static bool block_helper(const kl_rule_ctx *ctx, const char *name)
{
    TSNode fn = rt_device_fn_named(ctx, name);
    if (ts_node_is_null(fn)) return false;
    char *t = kl_node_text(ctx->src, kl_ast_function_body(fn));
    bool ok = t && strstr(t, "__syncthreads") && strstr(t, "threadIdx.x") && strstr(t, "return");
    free(t);
    return ok;
}

/* `{ __shared__ T P[n]; if (lane % 32 == 0) P[lane / 32] = v; __syncthreads(); v = P[0]; for … }` */
static bool shared_stage(const kl_rule_ctx *ctx, TSNode st)
{
    if (!rt_is(st, "compound_statement")) return false;
    TSNode first = ts_node_named_child(st, 0);
    char t[200];
    rt_text_copy(ctx, first, t, sizeof t);
    if (!rt_is(first, "declaration") || !strstr(t, "__shared__")) return false;
    char *all = kl_node_text(ctx->src, st);
    bool ok = all && strstr(all, "__syncthreads()");
    free(all);
    return ok;
}

/* The state of the walks over the kernel's body (present_visit, left_visit). */
typedef struct pscan {
    const kl_rule_ctx *ctx;
    rp_present *p;
} pscan;

static bool present_visit(TSNode n, void *user)
{
    pscan *s = user;
    rp_present *p = s->p;
    const kl_rule_ctx *ctx = s->ctx;
    if (rt_is(n, "for_statement") || rt_is(n, "while_statement")) {
        if (shuffle_loop(ctx, n)) {
            if (p->ngone < 32) p->gone[p->ngone++] = n;
            TSNode nx = rt_next_stmt(n);
            if (!p->warp && shared_stage(ctx, nx) && p->ngone < 32) p->gone[p->ngone++] = nx;
            return false;
        }
        rp_sloop L;
        if (strided_loop(ctx, p, n, &L) && p->nloops < RP_MAXLOOP) p->loops[p->nloops++] = L;
        return true;
    }
    if (rt_is(n, "call_expression")) {
        char f[64];
        /* `block_sum(v, part)`, or a member of a helper struct: `BlockSumT(temp).Sum(v)` */
        if (!rt_callee_name(ctx, n, f, sizeof f)) return true;
        if (ts_node_named_child_count(rt_field(n, "arguments")) >= 1 && block_helper(ctx, f) && p->ncalls < 16) {
            p->calls[p->ncalls++] = n;
            kl_snprintf(p->helper, sizeof p->helper, "%s", f);
            return false;
        }
        return true;
    }
    if (rt_is(n, "if_statement") && ts_node_is_null(rt_field(n, "alternative"))) {
        TSNode c = row_parallel__cond_expr(rt_field(n, "condition"));
        if (rt_is(c, "binary_expression") && row_parallel__op_is(ctx, c, "==") && is_lane(ctx, p, rt_field(c, "left")) &&
            rt_text_is(ctx, rt_field(c, "right"), "0") && p->nifs < 16) {
            p->ifs[p->nifs++] = n;
            return true;
        }
    }
    return true;
}

/* Is n inside one of the nodes? */
static bool in_any(TSNode n, const TSNode *v, unsigned k)
{
    for (unsigned i = 0; i < k; i++)
        if (is_inside(n, v[i])) return true;
    return false;
}

typedef struct coop_scan {
    const kl_rule_ctx *ctx;
    int depth;
    bool found;
} coop_scan;

static bool cooperates(const kl_rule_ctx *ctx, const char *name, int depth);

static bool coop_visit(TSNode n, void *user)
{
    coop_scan *c = user;
    if (c->found) return false;
    if (rt_is(n, "field_expression") && rt_is_builtin(c->ctx, n, "threadIdx", 0)) c->found = true;
    if (rt_is(n, "call_expression")) {
        char f[128];
        if (rt_callee_name(c->ctx, n, f, sizeof f) &&
            (!strcmp(f, "__syncthreads") || !strncmp(f, "__shfl", 6) || !strcmp(f, "__syncwarp") ||
             cooperates(c->ctx, f, c->depth + 1)))
            c->found = true;
    }
    return !c->found;
}

/* Does a __device__ function of the file named `name` (any of them), or one it calls, synchronise,
 * shuffle or read threadIdx? (Past a depth of 4 calls: assumed so.) */
static bool cooperates(const kl_rule_ctx *ctx, const char *name, int depth)
{
    if (depth > 4) return true;
    TSNode fs[256];
    unsigned n = kl_ast_functions(ctx->src, "__device__", fs, 256);
    for (unsigned i = 0; i < n && i < 256; i++) {
        char *fname = kl_ast_function_name(ctx->src, fs[i]);
        bool same = fname && !strcmp(fname, name);
        free(fname);
        if (!same) continue;
        coop_scan c = {ctx, depth, false};
        kl_ast_walk(kl_ast_function_body(fs[i]), coop_visit, &c);
        if (c.found) return true;
    }
    return false;
}

/* What stays after the removal must not cooperate: no lane, threadIdx.x, barrier or shuffle
 * outside what is rewritten. */
static bool left_visit(TSNode n, void *user)
{
    pscan *s = user;
    rp_present *p = s->p;
    const kl_rule_ctx *ctx = s->ctx;
    if (p->why[0]) return false;
    if (in_any(n, p->gone, p->ngone) || in_any(n, p->calls, p->ncalls) || in_any(n, p->shared, p->nshared)) return false;
    if (!ts_node_is_null(p->lane_decl) && is_inside(n, p->lane_decl)) return false;
    if (!ts_node_is_null(p->row_init) && is_inside(n, p->row_init)) return false;
    for (unsigned i = 0; i < p->nloops; i++) {
        if (is_inside(n, p->loops[i].start) || is_inside(n, p->loops[i].update)) return false;
    }
    for (unsigned i = 0; i < p->nifs; i++)
        if (is_inside(n, rt_field(p->ifs[i], "condition"))) return false;
    if (rt_is(n, "call_expression")) {
        char f[64];
        rt_text_copy(ctx, rt_field(n, "function"), f, sizeof f);
        if (!strcmp(f, "__syncthreads") || !strncmp(f, "__shfl", 6) || !strcmp(f, "__syncwarp"))
            return row_parallel__why(p->why, sizeof p->why, "line %u: %s is not part of a reduction this transform recognises", kl_ast_line(n), f);
        char callee[128];
        if (rt_callee_name(ctx, n, callee, sizeof callee) && cooperates(ctx, callee, 0))
            return row_parallel__why(p->why, sizeof p->why,
                        "line %u calls %s, a __device__ function of the file that synchronises, shuffles or reads "
                        "threadIdx, and is not a block reduction this transform recognises",
                        kl_ast_line(n), callee);
    }
    if (rt_is(n, "field_expression") && rt_is_builtin(ctx, n, "threadIdx", 0))
        return row_parallel__why(p->why, sizeof p->why, "line %u uses threadIdx other than as the lane of a loop over the row: the threads share the row "
                       "in another way",
                    kl_ast_line(n));
    if (rt_is(n, "identifier") && p->lane[0] && strcmp(p->lane, "threadIdx.x") && rt_text_is(ctx, n, p->lane))
        return row_parallel__why(p->why, sizeof p->why, "line %u uses the lane %s other than as the start of a loop over the row", kl_ast_line(n), p->lane);
    return true;
}

/* A __shared__ declaration of the kernel used only inside removed code (partials). */
static void unused_shared(const kl_rule_ctx *ctx, rp_present *p)
{
    uint32_t c = ts_node_named_child_count(p->body);
    for (uint32_t i = 0; i < c; i++) {
        TSNode st = ts_node_named_child(p->body, i);
        if (!rt_is(st, "declaration")) continue;
        char t[200];
        rt_text_copy(ctx, st, t, sizeof t);
        if (!strstr(t, "__shared__") || ts_node_named_child_count(st) < 2) continue;
        TSNode nm = kl_ast_declarator_name(ts_node_named_child(st, ts_node_named_child_count(st) - 1));
        char v[64];
        rt_text_copy(ctx, nm, v, sizeof v);
        unsigned all = rt_count_ident(ctx, p->body, v) - 1, in = 0;
        for (unsigned k = 0; k < p->ncalls; k++) in += rt_count_ident(ctx, p->calls[k], v);
        for (unsigned k = 0; k < p->ngone; k++) in += rt_count_ident(ctx, p->gone[k], v);
        if (all == in && p->nshared < 16) p->shared[p->nshared++] = st;
    }
}

/* Analyse a kernel for the present side; true when it is a site (lane-strided loops). */
bool row_parallel__analyse_present(const kl_rule_ctx *ctx, TSNode fn, const char *name, rp_present *p)
{
    memset(p, 0, sizeof *p);
    p->fn = fn;
    p->body = kl_ast_function_body(fn);
    if (ts_node_is_null(p->body)) return false;
    kl_snprintf(p->lane, sizeof p->lane, "threadIdx.x");
    /* the lane: a declaration `lane = threadIdx.x % 32` / `& 31` (a warp) or `= threadIdx.x` */
    uint32_t c = ts_node_named_child_count(p->body);
    for (uint32_t i = 0; i < c; i++) {
        TSNode st = ts_node_named_child(p->body, i);
        TSNode d = row_parallel__single_init(st);
        if (ts_node_is_null(d)) continue;
        char v[128];
        rt_text_unblank_to(ctx, rt_field(d, "value"), v, sizeof v);
        if (!strcmp(v, "threadIdx.x%32") || !strcmp(v, "threadIdx.x&31")) p->warp = true;
        else if (strcmp(v, "threadIdx.x")) continue;
        p->lane_decl = st;
        rt_text_copy(ctx, kl_ast_declarator_name(d), p->lane, sizeof p->lane);
        /* the row of a warp: `T row = (E) / 32;` declared before it */
        TSNode prev = rt_prev_stmt(st);
        if (p->warp && !ts_node_is_null(row_parallel__single_init(prev))) {
            TSNode pv = rt_field(row_parallel__single_init(prev), "value");
            if (rt_is(pv, "binary_expression") && row_parallel__op_is(ctx, pv, "/") && rt_text_is(ctx, rt_field(pv, "right"), "32") &&
                rt_is(rt_field(pv, "left"), "parenthesized_expression")) {
                p->row_decl = prev;
                p->row_init = pv;
                p->row_e = kl_ast_unparen(rt_field(pv, "left"));
            }
        }
        break;
    }
    int64_t bs = 0;
    unsigned nl = 0;
    char why[300] = "";
    bool bs_ok = row_parallel__launch_block(ctx, name, &bs, &nl, why, sizeof why);
    p->group = p->warp ? 32 : bs;
    if (!p->warp && !bs_ok) {
        /* blockDim.x steps still show the site */
        p->group = -1;
    }
    pscan s = {ctx, p};
    kl_ast_walk(p->body, present_visit, &s);
    if (!p->nloops) return false;
    if (!p->warp && !bs_ok) row_parallel__why(p->why, sizeof p->why, "%s", why);
    if (p->warp && ts_node_is_null(p->row_decl))
        row_parallel__why(p->why, sizeof p->why, "the lanes of a warp share a row, but no `T row = (E) / 32;` declaration precedes the lane");
    /* the row of a block */
    if (!p->warp) {
        for (uint32_t i = 0; i < c && ts_node_is_null(p->row_decl); i++) {
            TSNode st = ts_node_named_child(p->body, i);
            TSNode d = row_parallel__single_init(st);
            if (!ts_node_is_null(d) && rt_is_builtin(ctx, kl_ast_unparen(rt_field(d, "value")), "blockIdx", 'x')) {
                p->row_decl = st;
                p->row_init = rt_field(d, "value");
            }
        }
    }
    unused_shared(ctx, p);
    kl_ast_walk(p->body, left_visit, &s);
    return true;
}

/* ---- remove --------------------------------------------------------------------------------------- */

static kl_status remove_launches(const kl_rule_ctx *ctx, const rp_present *p, const char *name, kl_edits *out,
                                 bool *added_rows, kl_error *err)
{
    kl_launch_sites ls;
    kl_status st = kl_ast_launches(ctx->src, &ls, err);
    if (st != KL_OK) return st;
    *added_rows = false;
    for (unsigned i = 0; i < ls.count && st == KL_OK; i++) {
        const kl_launch_site *l = &ls.items[i];
        if (strcmp(l->kernel, name)) continue;
        char bt[256], lt[256];
        rt_text_copy(ctx, l->block, bt, sizeof bt);
        TSNode mult;
        uint32_t ga, gb;
        bool mul = row_parallel__grid_unmul(ctx, l, &mult, &ga, &gb, lt, sizeof lt);
        if (p->warp) {
            if (!mul || !rt_text_is(ctx, mult, "32")) {
                st = kl_rule_not_applicable(err, "the grid of the launch at line %u is not `G * 32` (rows -> warps)",
                                            kl_ast_line(l->call));
                break;
            }
            st = kl_edits_add(out, ga, gb, lt);
            continue;
        }
        /* a block per row: `G * B` (apply's form) back to G blocks of B, or R blocks (a block
         * per row) to (R + B - 1) / B threads of B, R passed as the row count */
        if (!ts_node_is_null(p->row_decl) && mul && kl_const_eval(ctx->src, l->host_fn, mult, false, &(int64_t){0}, NULL, 0)) {
            char rt[256];
            rt_text_copy(ctx, mult, rt, sizeof rt);
            st = kl_edits_add(out, ga, gb, lt);
            if (st == KL_OK) st = kl_edits_add(out, ts_node_start_byte(l->block), ts_node_end_byte(l->block), rt);
            continue;
        }
        if (rt_is(kl_ast_unparen(l->grid), "call_expression")) {
            st = kl_rule_not_applicable(err, "the grid of the launch at line %u is a dim3 not of the form dim3(G * B, …)",
                                        kl_ast_line(l->call));
            break;
        }
        char gt[256];
        rt_text_copy(ctx, l->grid, gt, sizeof gt);
        bool bsim = row_parallel__simple_operand(l->block);
        st = kl_edits_addf(out, ts_node_start_byte(l->grid), ts_node_end_byte(l->grid), "(%s + %s%s%s - 1) / %s%s%s", gt,
                           bsim ? "" : "(", bt, bsim ? "" : ")", bsim ? "" : "(", bt, bsim ? "" : ")");
        uint32_t close = ts_node_end_byte(l->args) - 1;
        if (st == KL_OK)
            st = kl_edits_addf(out, close, close, "%s%s", ts_node_named_child_count(l->args) ? ", " : "", gt);
        *added_rows = true;
    }
    kl_launch_sites_release(&ls);
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

typedef struct bx_scan {
    const kl_rule_ctx *ctx;
    kl_edits *out;
    const char *with;
    TSNode skip;
    kl_status st;
} bx_scan;

static bool bx_visit(TSNode n, void *user)
{
    bx_scan *s = user;
    if (s->st != KL_OK) return false;
    if (!ts_node_is_null(s->skip) && is_inside(n, s->skip)) return false;
    if (rt_is(n, "field_expression") && rt_is_builtin(s->ctx, n, "blockIdx", 'x')) {
        s->st = kl_edits_add(s->out, ts_node_start_byte(n), ts_node_end_byte(n), s->with);
        return false;
    }
    return true;
}

kl_status row_parallel__remove_present(const kl_rule_ctx *ctx, const kl_site *site, const rp_present *p, kl_edits *out,
                                kl_error *err)
{
    if (p->why[0]) return kl_rule_not_applicable(err, "%s", p->why);
    kl_status st = KL_OK;
    /* the loops: the lane out of the start, the step back to 1 */
    for (unsigned k = 0; k < p->nloops && st == KL_OK; k++) {
        const rp_sloop *L = &p->loops[k];
        char rest[200] = "0";
        if (!ts_node_is_null(L->start_rest)) rt_text_copy(ctx, L->start_rest, rest, sizeof rest);
        st = kl_edits_add(out, ts_node_start_byte(L->start), ts_node_end_byte(L->start), rest);
        TSNode upd = L->is_while ? row_parallel__stmt_expr(L->update) : L->update;
        TSNode var = rt_is(upd, "assignment_expression") ? rt_field(upd, "left") : rt_field(upd, "argument");
        char v[64];
        rt_text_copy(ctx, var, v, sizeof v);
        if (st == KL_OK) st = kl_edits_addf(out, ts_node_start_byte(upd), ts_node_end_byte(upd), "%s++", v);
    }
    for (unsigned k = 0; k < p->ngone && st == KL_OK; k++) st = row_parallel__delete_stmt(ctx, p->gone[k], out);
    for (unsigned k = 0; k < p->nshared && st == KL_OK; k++) st = row_parallel__delete_stmt(ctx, p->shared[k], out);
    for (unsigned k = 0; k < p->ncalls && st == KL_OK; k++) {
        TSNode a0 = ts_node_named_child(rt_field(p->calls[k], "arguments"), 0);
        char *t = kl_node_text(ctx->src, a0);
        st = t ? kl_edits_add(out, ts_node_start_byte(p->calls[k]), ts_node_end_byte(p->calls[k]), t) : KL_ERR_NOMEM;
        free(t);
    }
    for (unsigned k = 0; k < p->nifs && st == KL_OK; k++) {
        TSNode cons = rt_field(p->ifs[k], "consequence");
        st = kl_edits_add(out, ts_node_start_byte(p->ifs[k]), ts_node_start_byte(cons), "");
    }
    if (st == KL_OK && !ts_node_is_null(p->lane_decl)) st = row_parallel__delete_stmt(ctx, p->lane_decl, out);
    if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    /* the row */
    bool added_rows = false;
    st = remove_launches(ctx, p, site->kernel, out, &added_rows, err);
    if (st != KL_OK) return st;
    if (p->warp) {
        char *e = kl_node_text(ctx->src, p->row_e);
        st = e ? kl_edits_add(out, ts_node_start_byte(p->row_init), ts_node_end_byte(p->row_init), e) : KL_ERR_NOMEM;
        free(e);
        return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
    }
    if (!added_rows) {
        /* apply's form: the launches gave back B; the row is blockIdx.x * B + threadIdx.x */
        kl_launch_sites ls;
        st = kl_ast_launches(ctx->src, &ls, err);
        if (st != KL_OK) return st;
        char bt[256] = "blockDim.x";
        for (unsigned i = 0; i < ls.count; i++) {
            if (strcmp(ls.items[i].kernel, site->kernel)) continue;
            TSNode b;
            uint32_t ga, gb;
            char lt[256];
            if (!row_parallel__grid_unmul(ctx, &ls.items[i], &b, &ga, &gb, lt, sizeof lt)) continue;
            if (kl_const_eval(ctx->src, (TSNode){{0}, 0, 0}, b, false, &(int64_t){0}, NULL, 0)) rt_text_copy(ctx, b, bt, sizeof bt);
            break;
        }
        kl_launch_sites_release(&ls);
        st = kl_edits_addf(out, ts_node_start_byte(p->row_init), ts_node_end_byte(p->row_init), "blockIdx.x * %s + threadIdx.x",
                           bt);
        return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
    }
    /* a block per row launched with R blocks: a row count parameter, a thread per row, a guard */
    char rows[32], row[32], ind[64];
    rt_fresh_name(ctx, p->fn, "kl_rows", rows, sizeof rows);
    TSNode ps = kl_ast_function_params(p->fn);
    uint32_t close = ts_node_end_byte(ps) - 1;
    st = kl_edits_addf(out, close, close, "%sint %s", ts_node_named_child_count(ps) ? ", " : "", rows);
    TSNode first = ts_node_named_child(p->body, 0);
    while (rt_is(first, "comment")) first = ts_node_next_named_sibling(first);
    kl_rules_indent(ctx, ts_node_start_byte(first), ind, sizeof ind);
    if (st == KL_OK && !ts_node_is_null(p->row_decl)) {
        char name[64];
        rt_text_copy(ctx, kl_ast_declarator_name(row_parallel__single_init(p->row_decl)), name, sizeof name);
        st = kl_edits_add(out, ts_node_start_byte(p->row_init), ts_node_end_byte(p->row_init),
                          "blockIdx.x * blockDim.x + threadIdx.x");
        uint32_t le = rt_line_end(ctx, ts_node_end_byte(p->row_decl));
        if (st == KL_OK) st = kl_edits_addf(out, le, le, "%sif (%s >= %s) return;\n", ind, name, rows);
        bx_scan bs = {ctx, out, name, p->row_decl, KL_OK};
        if (st == KL_OK) kl_ast_walk(p->body, bx_visit, &bs), st = bs.st;
    } else if (st == KL_OK) {
        rt_fresh_name(ctx, p->fn, "kl_row", row, sizeof row);
        uint32_t at = rt_line_start(ctx, ts_node_start_byte(first));
        st = kl_edits_addf(out, at, at, "%sconst int %s = blockIdx.x * blockDim.x + threadIdx.x;\n%sif (%s >= %s) return;\n",
                           ind, row, ind, row, rows);
        bx_scan bs = {ctx, out, row, row_parallel__null, KL_OK};
        if (st == KL_OK) kl_ast_walk(p->body, bx_visit, &bs), st = bs.st;
    }
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}
