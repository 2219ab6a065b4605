/* coarsen: K elements a block apart per thread -> one element per thread, with K times the blocks
 * (issue 17). The samples' reductions add two elements during the load,
 *     unsigned int i = blockIdx.x * blockSize * 2 + threadIdx.x;
 *     if (i < n) { s += x[i]; if (i + blockSize < n) s += x[i + blockSize]; }
 * (what grid-stride leaves of their loop); removed, each thread adds x[i] of
 *     unsigned int i = blockIdx.x * blockSize + threadIdx.x;
 * and the grid (n + 2 * B - 1) / (2 * B) becomes (n + B - 1) / B (another grid G becomes 2 * (G)).
 * Every element is still taken by exactly one thread; what each thread adds up must reach memory by
 * sums only (grid_stride__partials_by_sums), and the grid must matter nowhere else. Remove only. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/coarsen.h"
#include "rewrite/rules/grid_stride.h"
#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "syntax/affine.h"
#include "util/util.h"

#define CO_MAXK 8

/* t with every whole-word var replaced by rep, into out. */
static void replace_word(const char *t, const char *var, const char *rep, char *out, size_t size)
{
    size_t vl = strlen(var), k = 0;
    for (const char *p = t; *p && k + 1 < size;) {
        if (!strncmp(p, var, vl) && (p == t || !kl_ident_char(p[-1])) && !kl_ident_char(p[vl]) && (p == t || p[-1] != '.')) {
            for (const char *r = rep; *r && k + 1 < size; r++) out[k++] = *r;
            p += vl;
        } else {
            out[k++] = *p++;
        }
    }
    out[k] = '\0';
}

bool coarsen__in_list(char list[][64], unsigned n, const char *s)
{
    for (unsigned i = 0; i < n; i++)
        if (!strcmp(list[i], s)) return true;
    return false;
}

typedef struct co_site {
    TSNode decl, init, guard;
    TSNode extra[CO_MAXK];     /* the statements for elements 1 .. K-1 */
    unsigned k;                /* K */
    char var[64], block[128];  /* the index, B as the second element's offset writes it */
    int64_t coef;              /* the index's block coefficient: a constant (0: m * blockDim.x) */
    int64_t mul;
    TSNode factor;             /* `* K` in the index: [factor_a, factor_b) is deleted */
    uint32_t factor_a, factor_b;
    char why[300];
} co_site;

/* The `* K` factor of the index's initializer: a product node with a literal K as one side. */
static bool find_factor(const kl_rule_ctx *ctx, TSNode e, unsigned k, co_site *s)
{
    e = kl_ast_unparen(e);
    if (!rt_is(e, "binary_expression")) return false;
    char op[4];
    rt_text_unblank_to(ctx, rt_field(e, "operator"), op, sizeof op);
    TSNode l = rt_field(e, "left"), r = rt_field(e, "right");
    if (!strcmp(op, "*")) {
        char lt[16], rt_[16], want[16];
        rt_text_unblank_to(ctx, r, rt_, sizeof rt_);
        rt_text_unblank_to(ctx, l, lt, sizeof lt);
        kl_snprintf(want, sizeof want, "%u", k);
        if (!strcmp(rt_, want)) {
            s->factor_a = ts_node_end_byte(l), s->factor_b = ts_node_end_byte(r);
            return true;
        }
        if (!strcmp(lt, want)) {
            s->factor_a = ts_node_start_byte(l), s->factor_b = ts_node_start_byte(r);
            return true;
        }
    }
    return find_factor(ctx, l, k, s) || find_factor(ctx, r, k, s);
}

/* `i + OFF < N` (also as the right of `FLAG || …`): OFF's node. */
static TSNode guard_offset(const kl_rule_ctx *ctx, TSNode c, const char *var, const char *bound)
{
    TSNode none = {{0}, 0, 0};
    c = kl_ast_unparen(c);
    if (rt_is(c, "condition_clause")) c = kl_ast_unparen(ts_node_named_child(c, 0));
    char op[4];
    if (!rt_is(c, "binary_expression")) return none;
    rt_text_unblank_to(ctx, rt_field(c, "operator"), op, sizeof op);
    if (!strcmp(op, "||")) return guard_offset(ctx, rt_field(c, "right"), var, bound);
    char bt[128];
    rt_text_unblank_to(ctx, rt_field(c, "right"), bt, sizeof bt);
    if (strcmp(op, "<") || strcmp(bt, bound)) return none;
    TSNode l = kl_ast_unparen(rt_field(c, "left"));
    if (!rt_is(l, "binary_expression")) return none;
    rt_text_unblank_to(ctx, rt_field(l, "operator"), op, sizeof op);
    if (strcmp(op, "+") || !rt_text_is(ctx, rt_field(l, "left"), var)) return none;
    return rt_field(l, "right");
}

static bool analyse(const kl_rule_ctx *ctx, TSNode fn, kl_affine_ctx *ax, TSNode d, co_site *s)
{
    memset(s, 0, sizeof *s);
    if (!rt_is(d, "declaration") || ts_node_named_child_count(d) > 3) return false;
    TSNode id = rt_field(d, "declarator");
    if (!rt_is(id, "init_declarator") || !rt_is(rt_field(id, "declarator"), "identifier")) return false;
    rt_text_unblank_to(ctx, rt_field(id, "declarator"), s->var, sizeof s->var);
    s->decl = d;
    s->init = rt_field(id, "value");
    /* the index: C*blockIdx.x + threadIdx.x, or m*blockDim.x*blockIdx.x + threadIdx.x (C, m > 1) */
    const kl_poly *p;
    kl_grid_index gi;
    if (kl_affine_poly_of(ax, s->init, &p) != KL_OK || !kl_poly_grid_index(p, &gi) || gi.coef < 2 ||
        (gi.sym && strcmp(gi.sym, "blockDim.x")))
        return false;
    if (gi.sym) s->mul = gi.coef;
    else s->coef = gi.coef;
    /* the guard: the next statement, `if (i < N) { S1; if (i + k*B < N) Sk; … }` */
    TSNode g = rt_next_stmt(d);
    while (rt_is(g, "declaration") && !rt_count_ident(ctx, g, s->var)) g = rt_next_stmt(g); /* `float s = 0;` */
    TSNode cons = rt_field(g, "consequence");
    char c[160], want[160];
    rt_text_unblank_to(ctx, rt_field(g, "condition"), c, sizeof c);
    if (!rt_is(g, "if_statement") || !ts_node_is_null(rt_field(g, "alternative")) || !rt_is(cons, "compound_statement") ||
        strncmp(c, "(", 1) || strncmp(c + 1, s->var, strlen(s->var)) || c[1 + strlen(s->var)] != '<')
        return false;
    char bound[128];
    kl_snprintf(bound, sizeof bound, "%s", c + 2 + strlen(s->var));
    bound[strlen(bound) - 1] = '\0'; /* the closing parenthesis */
    s->guard = g;
    TSNode st[CO_MAXK + 1];
    unsigned ns = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(cons); i++) {
        TSNode x = ts_node_named_child(cons, i);
        if (rt_is(x, "comment")) continue;
        if (ns == CO_MAXK + 1) return false;
        st[ns++] = x;
    }
    if (ns < 2 || !rt_is(st[0], "expression_statement")) return false;
    char s1[512];
    rt_text_unblank_to(ctx, st[0], s1, sizeof s1);
    s->k = ns;
    int64_t bval = 0; /* B: the constant, or the multiple of blockDim.x */
    for (unsigned k = 1; k < ns; k++) {
        TSNode gk = st[k];
        if (!rt_is(gk, "if_statement") || !ts_node_is_null(rt_field(gk, "alternative"))) return false;
        TSNode off = guard_offset(ctx, rt_field(gk, "condition"), s->var, bound);
        TSNode body = rt_field(gk, "consequence");
        if (rt_is(body, "compound_statement") && ts_node_named_child_count(body) == 1) body = ts_node_named_child(body, 0);
        if (ts_node_is_null(off) || !rt_is(body, "expression_statement")) return false;
        char ot[128], rep[160], sk[512];
        rt_text_unblank_to(ctx, off, ot, sizeof ot);
        kl_snprintf(rep, sizeof rep, "%s+%s", s->var, ot);
        replace_word(s1, s->var, rep, want, sizeof want);
        rt_text_unblank_to(ctx, body, sk, sizeof sk);
        if (strcmp(sk, want)) return false;
        /* the offset is k blocks: v, an integer (C*blockIdx.x) or v*blockDim.x */
        const kl_poly *po;
        if (kl_affine_poly_of(ax, off, &po) != KL_OK || po->opaque || po->n != 1 || po->m[0].nf != (s->coef ? 0u : 1u) ||
            (!s->coef && strcmp(po->m[0].f[0], "blockDim.x")))
            return false;
        int64_t v = po->m[0].coef;
        if (v % (int64_t)k) return false;
        if (k == 1) {
            bval = v;
            char *bt = rt_text(ctx, off);
            kl_snprintf(s->block, sizeof s->block, "%s", bt ? bt : "");
            free(bt);
        } else if (v != (int64_t)k * bval) {
            return false;
        }
        s->extra[k - 1] = gk;
    }
    if ((s->coef ? s->coef : s->mul) != (int64_t)ns * (s->coef ? bval : 1) || (!s->coef && bval != 1)) {
        kl_snprintf(s->why, sizeof s->why,
                    "the index steps blocks by %lld elements, not %u times the offset of its second element",
                    (long long)(s->coef ? s->coef : s->mul), ns);
        return true;
    }
    if (!find_factor(ctx, s->init, ns, s)) {
        kl_snprintf(s->why, sizeof s->why, "the index %s has no factor %u written as such to take out", s->var, ns);
        return true;
    }
    /* the index: used only by its declaration and the guard */
    uint32_t ra_[GS_MAXRANGES] = {ts_node_start_byte(g), ts_node_start_byte(d)},
             rb_[GS_MAXRANGES] = {ts_node_end_byte(g), ts_node_end_byte(d)};
    unsigned nr = 2;
    grid_stride__use_scan us = {ctx->src, s->var, ra_, rb_, nr, 0, 0, 0, NULL};
    kl_ast_walk(kl_ast_function_body(fn), grid_stride__use_visit, &us);
    if (us.line) {
        kl_snprintf(s->why, sizeof s->why, "%s is also used outside its guard (line %u)", s->var, us.line);
        return true;
    }
    /* the grid matters nowhere else; the body's partial sums reach memory by sums */
    nr = 1;
    ra_[0] = ts_node_start_byte(d), rb_[0] = ts_node_end_byte(d);
    grid_stride__grid_free(ctx, fn, ra_, rb_, &nr, s->why, sizeof s->why);
    if (s->why[0]) return true;
    char *acc[GS_MAXACCUM];
    unsigned nacc = 0;
    grid_stride__check_body_acc(ctx->src, kl_ast_function_body(fn), g, st[0], st[ns - 1], s->var, acc, &nacc, s->why,
                                sizeof s->why);
    if (!s->why[0] && nacc) {
        uint32_t ga = ts_node_start_byte(g), gb = ts_node_end_byte(g);
        grid_stride__partials_by_sums(ctx, fn, ax, acc, nacc, &ga, &gb, 1, s->why, sizeof s->why);
    }
    for (unsigned a = 0; a < nacc; a++) free(acc[a]);
    return true;
}

typedef struct co_run {
    kl_sites *out;
    const kl_site *site;
    kl_edits *edits;
    kl_error *err;
    bool found;
} co_run;

/* The launches' grids: `(A + K * B - 1) / (K * B)` -> `(A + B - 1) / B`, anything else G -> `K * (G)`. */
kl_status coarsen__grid_edits(const kl_rule_ctx *ctx, const char *kernel, unsigned k, int64_t coef, kl_edits *out,
                               kl_error *err)
{
    kl_launch_sites ls;
    kl_status st = kl_ast_launches(ctx->src, &ls, err);
    if (st != KL_OK) return st;
    unsigned n = 0;
    for (unsigned i = 0; i < ls.count && st == KL_OK; i++) {
        const kl_launch_site *l = &ls.items[i];
        if (strcmp(l->kernel, kernel)) continue;
        n++;
        char bt[128], want_r[160], gt[256];
        rt_text_unblank_to(ctx, l->block, bt, sizeof bt);
        int64_t bv = 0;
        char w[200];
        if (coef && (ts_node_is_null(l->block) || !kl_const_eval(ctx->src, l->host_fn, l->block, false, &bv, w, sizeof w) ||
                        bv * (int64_t)k != coef)) {
            st = kl_rule_not_applicable(err, "the index steps blocks by %lld, which is not %u times the block at line %u",
                                        (long long)coef, k, kl_ast_line(l->call));
            break;
        }
        TSNode g = kl_ast_unparen(l->grid);
        kl_snprintf(want_r, sizeof want_r, "(%u*%s)", k, bt);
        bool ceil_div = false;
        if (rt_is(g, "binary_expression")) {
            char op[4], r[160];
            rt_text_unblank_to(ctx, rt_field(g, "operator"), op, sizeof op);
            rt_text_unblank_to(ctx, rt_field(g, "right"), r, sizeof r);
            TSNode num = kl_ast_unparen(rt_field(g, "left"));
            if (!strcmp(op, "/") && !strcmp(r, want_r) && rt_is(num, "binary_expression")) {
                rt_text_unblank_to(ctx, rt_field(num, "operator"), op, sizeof op);
                rt_text_unblank_to(ctx, rt_field(num, "right"), r, sizeof r);
                TSNode sum = kl_ast_unparen(rt_field(num, "left"));
                if (!strcmp(op, "-") && !strcmp(r, "1") && rt_is(sum, "binary_expression")) {
                    char kb[160];
                    rt_text_unblank_to(ctx, rt_field(sum, "operator"), op, sizeof op);
                    rt_text_unblank_to(ctx, rt_field(sum, "right"), r, sizeof r);
                    kl_snprintf(kb, sizeof kb, "%u*%s", k, bt);
                    if (!strcmp(op, "+") && !strcmp(r, kb)) {
                        char *a = rt_text(ctx, rt_field(sum, "left")), *b = rt_text(ctx, l->block);
                        st = a && b ? kl_edits_addf(out, ts_node_start_byte(l->grid), ts_node_end_byte(l->grid),
                                                    "(%s + %s - 1) / %s", a, b, b)
                                    : KL_ERR_NOMEM;
                        free(a);
                        free(b);
                        ceil_div = true;
                    }
                }
            }
        }
        if (!ceil_div && st == KL_OK) {
            rt_text_unblank_to(ctx, l->grid, gt, sizeof gt);
            char *t = rt_text(ctx, l->grid);
            bool paren = rt_is(l->grid, "parenthesized_expression");
            st = t ? kl_edits_addf(out, ts_node_start_byte(l->grid), ts_node_end_byte(l->grid), paren ? "%u * %s" : "%u * (%s)",
                                   k, t)
                   : KL_ERR_NOMEM;
            free(t);
        }
    }
    if (st == KL_OK && !n) st = kl_rule_not_applicable(err, "the file never launches %s", kernel);
    kl_launch_sites_release(&ls);
    return st;
}

/* The count form (coarsen_count.c): site `kernel:line:K` at the first loop over K. */
static kl_status visit_count(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, co_run *r)
{
    coarsen__count c;
    if (!coarsen__count_analyse(ctx, fn, name, ax, &c)) return KL_OK;
    char id[256];
    kl_site_id(id, sizeof id, name, c.loops[0], c.count);
    if (r->site) {
        if (strcmp(id, r->site->id)) return KL_OK;
        r->found = true;
        if (c.why[0]) return kl_rule_not_applicable(r->err, "%s", c.why);
        kl_status st = coarsen__count_edits(ctx, fn, &c, r->edits);
        if (st != KL_OK) return kl_error_set(r->err, st, "out of memory");
        return coarsen__grid_edits(ctx, name, (unsigned)c.k, 0, r->edits, r->err);
    }
    json_t *feat = json_pack("{s:s, s:I, s:I, s:s}", "count", c.count, "elements", (json_int_t)c.k, "block",
                             (json_int_t)c.block, "form", "count");
    if (!feat) return KL_ERR_NOMEM;
    if (c.why[0]) json_object_set_new(feat, "why_not", json_string(c.why));
    char note[400];
    if (c.why[0]) kl_snprintf(note, sizeof note, "%s", c.why);
    else
        kl_snprintf(note, sizeof note, "%lld elements a block (%lld) apart per thread, counted by %s", (long long)c.k,
                    (long long)c.block, c.count);
    return kl_sites_add(r->out, id, KL_SITE_PRESENT, kl_node_span(c.loops[0]), name, feat, NULL, note);
}

static kl_status visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    co_run *r = user;
    TSNode body = kl_ast_function_body(fn);
    for (uint32_t i = 0; i < ts_node_named_child_count(body); i++) {
        co_site s;
        if (!analyse(ctx, fn, ax, ts_node_named_child(body, i), &s)) continue;
        char id[256];
        kl_site_id(id, sizeof id, name, s.decl, NULL);
        if (r->site) {
            if (strcmp(id, r->site->id)) continue;
            r->found = true;
            if (s.why[0]) return kl_rule_not_applicable(r->err, "%s", s.why);
            kl_status st = kl_edits_add(r->edits, s.factor_a, s.factor_b, "");
            for (unsigned k = 1; k < s.k && st == KL_OK; k++) {
                uint32_t a, b;
                kl_rules_line_range(ctx, s.extra[k - 1], NULL, &a, &b);
                st = kl_edits_add(r->edits, a, b, "");
            }
            if (st != KL_OK) return kl_error_set(r->err, st, "out of memory");
            return coarsen__grid_edits(ctx, name, s.k, s.coef, r->edits, r->err);
        }
        json_t *feat = json_pack("{s:s, s:I, s:s}", "index", s.var, "elements", (json_int_t)s.k, "block", s.block);
        if (!feat) return KL_ERR_NOMEM;
        if (s.why[0]) json_object_set_new(feat, "why_not", json_string(s.why));
        char note[400];
        if (s.why[0]) kl_snprintf(note, sizeof note, "%s", s.why);
        else kl_snprintf(note, sizeof note, "%u elements a block (%s) apart per thread", s.k, s.block);
        kl_status st = kl_sites_add(r->out, id, KL_SITE_PRESENT, kl_node_span(s.decl), name, feat, NULL, note);
        if (st != KL_OK) return st;
    }
    kl_status st = visit_count(ctx, name, fn, ax, r);
    if (st != KL_OK || (r->site && r->found)) return st;
    return coarsen__vector_visit(ctx, name, fn, ax, r->out, r->site, r->edits, r->err, &r->found);
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    co_run r = {out, NULL, NULL, err, false};
    return kl_rules_each_function(ctx, "__global__", visit, &r, err);
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    co_run r = {NULL, site, out, err, false};
    kl_status st = kl_rules_each_function(ctx, "__global__", visit, &r, err);
    if (st == KL_OK && !r.found) return kl_rule_not_applicable(err, "no elements per thread at %s", site->id);
    return st;
}

const kl_rule kl_rule_coarsen = {
    "coarsen",
    "K elements a block apart per thread <- one element per thread with K times the blocks",
    NULL, 0, find, remove_site, NULL,
};
