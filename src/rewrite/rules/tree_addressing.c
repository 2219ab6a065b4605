/* tree-addressing: how a shared-memory tree pairs its elements. Sequential addressing
 *     for (s = B / 2; s > 0; s >>= 1) { if (tid < s) sh[tid] OP= sh[tid + s]; __syncthreads(); }
 * keeps the active threads contiguous (whole warps retire together, consecutive threads read
 * consecutive words); interleaved addressing
 *     for (s = 1; s < B; s <<= 1) { if (tid % (2 * s) == 0) sh[tid] OP= sh[tid + s]; __syncthreads(); }
 * leaves every warp active with most of its threads idle, and strides its reads by 2s words (bank
 * conflicts). Both leave the reduction of sh[0 .. B) in sh[0] when B, the block size, is a power of
 * two; what they leave in the other elements differs, so nothing may read those after the tree.
 * Present: the sequential form (remove writes the interleaved one); applicable: the interleaved. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "rewrite/rules/tree_step.h"
#include "syntax/affine.h"
#include "util/util.h"

/* Text with the blanks removed, into buf. */
/* The one statement of a branch (through braces), or a null node. */
static TSNode single(TSNode n)
{
    if (!rt_is(n, "compound_statement")) return n;
    TSNode only = {{0}, 0, 0};
    for (uint32_t i = 0; i < ts_node_named_child_count(n); i++) {
        TSNode c = ts_node_named_child(n, i);
        if (rt_is(c, "comment")) continue;
        if (!ts_node_is_null(only)) return (TSNode){{0}, 0, 0};
        only = c;
    }
    return only;
}

/* A tree found in a function. */
typedef struct ta_tree {
    TSNode loop, ifs, cond;     /* the for, its if, the if's condition expression */
    TSNode init;                /* the node holding the start value (replaced) */
    TSNode loop_cond, update;   /* the for's condition and update (replaced) */
    bool sequential;
    char var[64], tid[64], sh[64], op[64];
    char extent[128];           /* B as written: `blockDim.x`, `BLOCK_SIZE` */
    TSNode extent_node;         /* null when B is known only as twice a constant start */
    int64_t extent_value;
    bool shift;                 /* the step is a shift (>>= 1 / <<= 1), else a division / multiplication */
    int64_t block;              /* the block size (rt_block_size) */
    char why[300];              /* not empty: the shape, but not rewritable */
} ta_tree;

/* The tree's combining step, a statement `sh[tid] += sh[tid + s];` or another form kl_tree_step
 * reads: the array and the operation. */
static bool tree_step(const kl_rule_ctx *ctx, TSNode st, ta_tree *t)
{
    return rt_is(st, "expression_statement") &&
           kl_tree_step(ctx, ts_node_named_child(st, 0), t->tid, t->var, t->sh, sizeof t->sh, t->op, sizeof t->op);
}

/* Is n threadIdx.x (a local holding it is seen through)? */
static bool thread_index(kl_affine_ctx *ax, TSNode n)
{
    kl_affine af = {0};
    if (kl_affine_of(ax, n, &af) != KL_OK) return false;
    int64_t k = 0;
    bool ok = af.ok && af.nterms == 1 && kl_affine_coef_int(&af, "threadIdx.x", &k) && k == 1 && af.const_is_int &&
              af.const_int == 0;
    kl_affine_release(&af);
    return ok;
}

/* The extent B of `B / 2` (or `B >> 1`), into buf. */
static bool half_of(const kl_rule_ctx *ctx, TSNode e, char *buf, size_t size, TSNode *node)
{
    e = kl_ast_unparen(e);
    if (!rt_is(e, "binary_expression")) return false;
    char op[8], r[16];
    rt_text_unblank_to(ctx, rt_field(e, "operator"), op, sizeof op);
    rt_text_unblank_to(ctx, rt_field(e, "right"), r, sizeof r);
    if (!((!strcmp(op, "/") && !strcmp(r, "2")) || (!strcmp(op, ">>") && !strcmp(r, "1")))) return false;
    *node = rt_field(e, "left");
    char *t = rt_text(ctx, *node);
    if (!t) return false;
    kl_snprintf(buf, size, "%s", t);
    free(t);
    return true;
}

typedef struct sh_use {
    const kl_rule_ctx *ctx;
    const char *sh;
    TSNode loop;
    bool nested;                /* the tree sits in another loop: every use outside it counts */
    unsigned line;              /* the first read of an element other than [0] */
} sh_use;

static bool sh_visit(TSNode n, void *user)
{
    sh_use *u = user;
    if (u->line) return false;
    if (ts_node_eq(n, u->loop)) return false;
    if (!rt_is(n, "identifier") || !rt_text_is(u->ctx, n, u->sh)) return true;
    if (!u->nested && ts_node_start_byte(n) < ts_node_start_byte(u->loop)) return true;
    TSNode p = ts_node_parent(n);
    if (!rt_is(p, "subscript_expression")) {
        /* the array itself (passed on, its address taken): not followed */
        if (!rt_is(p, "init_declarator") && !rt_is(p, "array_declarator") && !rt_is(p, "pointer_declarator") &&
            !rt_is(p, "declaration"))
            u->line = kl_ast_line(n);
        return true;
    }
    TSNode idx = kl_ast_subscript_index(p);
    char it[64];
    rt_text_unblank_to(u->ctx, idx, it, sizeof it);
    if (!strcmp(it, "0")) return true;
    TSNode g = ts_node_parent(p);
    if (rt_is(g, "assignment_expression") && ts_node_eq(rt_field(g, "left"), p)) {
        char op[8];
        rt_text_unblank_to(u->ctx, rt_field(g, "operator"), op, sizeof op);
        if (!strcmp(op, "=")) return true; /* overwritten, not read */
    }
    u->line = kl_ast_line(n);
    return true;
}

/* The tree loop L of fn, when it is one of the two forms. */
static bool find_tree(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *name, const kl_ax_loop *L,
                      ta_tree *t)
{
    memset(t, 0, sizeof *t);
    if (L->kind != KL_LOOP_FOR || !L->var || !L->step || !L->cmp || !L->bound || !L->start) return false;
    TSNode loop = L->node;
    TSNode body = rt_field(loop, "body");
    if (!rt_is(body, "compound_statement")) return false;
    TSNode ifs = ts_node_named_child(body, 0);
    while (rt_is(ifs, "comment")) ifs = ts_node_next_named_sibling(ifs);
    TSNode sync = rt_next_stmt(ifs);
    if (!rt_is(ifs, "if_statement") || !ts_node_is_null(rt_field(ifs, "alternative")) || !rt_is_syncthreads(ctx, sync) ||
        !ts_node_is_null(rt_next_stmt(sync)))
        return false;
    kl_snprintf(t->var, sizeof t->var, "%s", L->var);
    TSNode c = kl_ast_unparen(rt_field(ifs, "condition"));
    if (rt_is(c, "condition_clause")) c = kl_ast_unparen(ts_node_named_child(c, 0));
    TSNode init = rt_field(loop, "initializer");
    if (rt_is(init, "declaration")) init = rt_field(rt_field(init, "declarator"), "value");
    else if (rt_is(init, "assignment_expression")) init = rt_field(init, "right");
    else return false;
    if (ts_node_is_null(init)) return false;
    char st[16];
    kl_snprintf(st, sizeof st, "%s", L->step);
    if (!strcmp(st, ">>1") || !strcmp(st, "/2")) {
        /* sequential: s = B / 2; s > 0; halving; if (tid < s) */
        if (!((!strcmp(L->cmp, ">") && !strcmp(L->bound, "0")) || (!strcmp(L->cmp, ">=") && !strcmp(L->bound, "1"))))
            return false;
        int64_t hv;
        char w[200];
        if (!half_of(ctx, init, t->extent, sizeof t->extent, &t->extent_node)) {
            /* a constant start: half the extent (`s = 128` over 256 elements) */
            if (!kl_const_eval(ctx->src, fn, init, false, &hv, w, sizeof w) || hv < 1) return false;
            kl_snprintf(t->extent, sizeof t->extent, "%lld", (long long)(2 * hv));
            t->extent_node = (TSNode){{0}, 0, 0};
            t->extent_value = 2 * hv;
        }
        if (!rt_is(c, "binary_expression")) return false;
        char op[8];
        rt_text_unblank_to(ctx, rt_field(c, "operator"), op, sizeof op);
        if (strcmp(op, "<") || !rt_text_is(ctx, rt_field(c, "right"), t->var)) return false;
        rt_text_unblank_to(ctx, rt_field(c, "left"), t->tid, sizeof t->tid);
        if (!thread_index(ax, rt_field(c, "left"))) return false;
        t->sequential = true;
        t->shift = !strcmp(st, ">>1");
    } else if (!strcmp(st, "*2") || !strcmp(st, "<<1")) {
        /* interleaved: s = 1; s < B; doubling; if (tid % (2 * s) == 0) */
        char it[32];
        rt_text_unblank_to(ctx, init, it, sizeof it);
        if (strcmp(it, "1") && strcmp(it, "1u") && strcmp(it, "1U")) return false;
        if (strcmp(L->cmp, "<")) return false;
        TSNode lc = kl_ast_unparen(rt_field(loop, "condition"));
        TSNode bn = rt_field(lc, "right");
        char *bt = rt_text(ctx, bn);
        if (!bt) return false;
        kl_snprintf(t->extent, sizeof t->extent, "%s", bt);
        free(bt);
        t->extent_node = bn;
        /* tid % (2 * s) == 0 */
        if (!rt_is(c, "binary_expression")) return false;
        TSNode m = kl_ast_unparen(rt_field(c, "left"));
        char rz[16], op[8];
        rt_text_unblank_to(ctx, rt_field(c, "operator"), op, sizeof op);
        rt_text_unblank_to(ctx, rt_field(c, "right"), rz, sizeof rz);
        if (strcmp(op, "==") || strcmp(rz, "0") || !rt_is(m, "binary_expression")) return false;
        rt_text_unblank_to(ctx, rt_field(m, "operator"), op, sizeof op);
        if (strcmp(op, "%")) return false;
        rt_text_unblank_to(ctx, rt_field(m, "left"), t->tid, sizeof t->tid);
        if (!thread_index(ax, rt_field(m, "left"))) return false;
        char mod[64], w1[64], w2[64];
        rt_text_unblank_to(ctx, rt_field(m, "right"), mod, sizeof mod);
        kl_snprintf(w1, sizeof w1, "(2*%s)", t->var);
        kl_snprintf(w2, sizeof w2, "(%s*2)", t->var);
        if (strcmp(mod, w1) && strcmp(mod, w2)) return false;
        t->sequential = false;
        t->shift = !strcmp(st, "<<1");
    } else {
        return false;
    }
    if (!tree_step(ctx, single(rt_field(ifs, "consequence")), t)) return false;
    t->loop = loop;
    t->ifs = ifs;
    t->cond = c;
    t->init = init;
    t->loop_cond = rt_field(loop, "condition");
    t->update = rt_field(loop, "update");
    /* the block: a power of two, and B is it */
    if (!rt_block_size(ctx, fn, name, &t->block, t->why, sizeof t->why)) return true;
    if (strcmp(t->extent, "blockDim.x")) {
        int64_t v = 0;
        char w[200];
        bool known = ts_node_is_null(t->extent_node) ? (v = t->extent_value, true)
                                                      : kl_const_eval(ctx->src, fn, t->extent_node, false, &v, w, sizeof w);
        if (!known || v != t->block) {
            kl_snprintf(t->why, sizeof t->why,
                        "the tree runs over %s elements, not the block of %lld threads: the other addressing would "
                        "pair other elements",
                        t->extent, (long long)t->block);
            return true;
        }
    }
    /* nothing reads the other elements after the tree: the two addressings leave different partials there */
    sh_use u = {ctx, t->sh, loop, kl_affine_loop_enclosing(ax, loop) >= 0, 0};
    kl_ast_walk(kl_ast_function_body(fn), sh_visit, &u);
    if (u.line)
        kl_snprintf(t->why, sizeof t->why,
                    "line %u reads %s other than %s[0] after the tree (or around it): the two addressings leave "
                    "different partial results in the other elements",
                    u.line, t->sh, t->sh);
    return true;
}

/* ---- find -------------------------------------------------------------------------------------- */

typedef struct ta_find {
    rt_run run;             /* run.site: the site to rewrite; NULL: find */
    bool remove;
    kl_sites *out;          /* find: the sites */
} ta_find;

static kl_status rewrite(const kl_rule_ctx *ctx, const ta_tree *t, kl_edits *out)
{
    kl_status st;
    if (t->sequential) {
        /* -> interleaved */
        st = kl_edits_add(out, ts_node_start_byte(t->init), ts_node_end_byte(t->init), "1");
        if (st == KL_OK)
            st = kl_edits_addf(out, ts_node_start_byte(t->loop_cond), ts_node_end_byte(t->loop_cond), "%s < %s", t->var,
                               t->extent);
        if (st == KL_OK)
            st = kl_edits_addf(out, ts_node_start_byte(t->update), ts_node_end_byte(t->update), "%s %s", t->var,
                               t->shift ? "<<= 1" : "*= 2");
        if (st == KL_OK)
            st = kl_edits_addf(out, ts_node_start_byte(t->cond), ts_node_end_byte(t->cond), "%s %% (2 * %s) == 0",
                               t->tid, t->var);
    } else {
        /* -> sequential */
        st = kl_edits_addf(out, ts_node_start_byte(t->init), ts_node_end_byte(t->init), "%s / 2", t->extent);
        if (st == KL_OK)
            st = kl_edits_addf(out, ts_node_start_byte(t->loop_cond), ts_node_end_byte(t->loop_cond), "%s > 0", t->var);
        if (st == KL_OK)
            st = kl_edits_addf(out, ts_node_start_byte(t->update), ts_node_end_byte(t->update), "%s %s", t->var,
                               t->shift ? ">>= 1" : "/= 2");
        if (st == KL_OK)
            st = kl_edits_addf(out, ts_node_start_byte(t->cond), ts_node_end_byte(t->cond), "%s < %s", t->tid, t->var);
    }
    (void)ctx;
    return st;
}

static kl_status visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    ta_find *f = user;
    if (f->run.done) return KL_OK;
    unsigned n = kl_affine_loop_count(ax);
    for (unsigned i = 0; i < n; i++) {
        const kl_ax_loop *L = kl_affine_loop(ax, i);
        ta_tree t;
        if (!find_tree(ctx, ax, fn, name, L, &t)) continue;
        char id[256];
        kl_site_id(id, sizeof id, name, t.loop, NULL);
        kl_site_dir dir = t.sequential ? KL_SITE_PRESENT : KL_SITE_APPLICABLE;
        if (f->run.site) {
            if (strcmp(id, f->run.site->id) || (dir == KL_SITE_PRESENT) != f->remove) continue;
            f->run.done = true;
            if (t.why[0]) {
                f->run.st = kl_rule_not_applicable(f->run.err, "%s", t.why);
            } else {
                kl_status st = rewrite(ctx, &t, f->run.out);
                f->run.st = st == KL_OK ? KL_OK : kl_error_set(f->run.err, st, "out of memory");
            }
            return KL_OK;
        }
        json_t *feat = json_pack("{s:s, s:s, s:s, s:s, s:I}", "addressing", t.sequential ? "sequential" : "interleaved",
                                 "op", t.op, "shared", t.sh, "extent", t.extent, "block", (json_int_t)t.block);
        if (!feat) return KL_ERR_NOMEM;
        if (t.why[0]) json_object_set_new(feat, "why_not", json_string(t.why));
        char note[400];
        if (t.why[0]) kl_snprintf(note, sizeof note, "%s", t.why);
        else if (t.sequential)
            kl_snprintf(note, sizeof note, "a shared-memory tree (%s) over %s with sequential addressing (tid < %s)", t.op,
                        t.sh, t.var);
        else
            kl_snprintf(note, sizeof note,
                        "a shared-memory tree (%s) over %s with interleaved addressing (tid %% (2 * %s) == 0)", t.op,
                        t.sh, t.var);
        kl_status st = kl_sites_add(f->out, id, dir, kl_node_span(t.loop), name, feat, NULL, note);
        if (st != KL_OK) return st;
    }
    return KL_OK;
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    ta_find f = {.run = {.err = err, .st = KL_OK}, .out = out};
    return kl_rules_each_gpu_function(ctx, visit, &f, err);
}

static kl_status run(const kl_rule_ctx *ctx, const kl_site *site, bool remove, kl_edits *out, kl_error *err)
{
    ta_find f = {.run = {site, NULL, out, err, false, KL_OK}, .remove = remove};
    return kl_rules_run_site(ctx, visit, &f, &f.run, true, "no %s tree at %s", remove ? "sequential" : "interleaved", site->id);
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    return run(ctx, site, true, out, err);
}

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    (void)params;
    return run(ctx, site, false, out, err);
}

const kl_rule kl_rule_tree_addressing = {
    "tree-addressing",
    "a shared-memory tree's addressing: interleaved (tid % (2*s) == 0, s doubling) <-> sequential (tid < s, s halving)",
    NULL, 0, find, remove_site, apply,
};
