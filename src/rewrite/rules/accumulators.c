/* accumulators: several independent partial sums in registers (`float acc[K];` zeroed, `acc[u] += e`
 * in an unrolled loop so that K additions are in flight, `for (u …) s += acc[u];` at the end) -> one
 * (`float acc = 0;`, `acc += e`, `s += acc;`). The one accumulator holds at every point the sum of
 * the K (they start at zero and are only added to), so whatever reads the fold reads the same sum,
 * reassociated. Remove only: which updates should go to which accumulator is the writer's choice
 * (it follows the loads in flight, a loop the catalog's unroll and vectorize decide). */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "syntax/affine.h"
#include "util/util.h"

/* A zero as written: 0, 0.0, 0.f, 0.0f, 0u, T(0) … */
static bool zero_text(const char *t)
{
    static const char *const z[] = {"0", "0.0", "0.f", "0.0f", "0.F", "0.0F", "0u", "0U", "0.", "0ll", "0LL", NULL};
    for (const char *const *p = z; *p; p++)
        if (!strcmp(t, *p)) return true;
    size_t n = strlen(t);
    return n > 3 && !strcmp(t + n - 3, "(0)");
}

/* The one statement of a loop body (through braces), or a null node. */
static TSNode only_stmt(TSNode b)
{
    if (!rt_is(b, "compound_statement")) return b;
    TSNode only = {{0}, 0, 0};
    for (uint32_t i = 0; i < ts_node_named_child_count(b); i++) {
        TSNode c = ts_node_named_child(b, i);
        if (rt_is(c, "comment")) continue;
        if (!ts_node_is_null(only)) return (TSNode){{0}, 0, 0};
        only = c;
    }
    return only;
}

typedef struct acc_site {
    TSNode decl, zero_loop, fold_loop, fold_stmt;
    TSNode updates[32];
    unsigned nupd;
    TSNode zero_stmts[32];      /* `A[c] = 0;` statements when there is no zeroing loop */
    unsigned nzero;
    char name[64], type[64], extent[64], zero[32], fold_target[64], fold_op[8];
    int64_t k;
    char why[300];
} acc_site;

/* `for (T u = 0; u < K; ++u | u++ | u += 1) BODY` over the whole array: the loop variable, and its body statement. */
static bool full_loop(const kl_rule_ctx *ctx, TSNode loop, const acc_site *a, char *var, size_t vsize, TSNode *body)
{
    if (!rt_is(loop, "for_statement")) return false;
    TSNode init = rt_field(loop, "initializer");
    if (!rt_is(init, "declaration")) return false;
    TSNode id = rt_field(init, "declarator");
    if (!rt_is(id, "init_declarator")) return false;
    char v0[32];
    rt_text_unblank_to(ctx, rt_field(id, "value"), v0, sizeof v0);
    if (strcmp(v0, "0")) return false;
    rt_text_unblank_to(ctx, rt_field(id, "declarator"), var, vsize);
    char c[128], want[128], u[64];
    rt_text_unblank_to(ctx, rt_field(loop, "condition"), c, sizeof c);
    kl_snprintf(want, sizeof want, "%s<%s", var, a->extent);
    if (strcmp(c, want)) return false;
    rt_text_unblank_to(ctx, rt_field(loop, "update"), u, sizeof u);
    char w1[64], w2[64], w3[64];
    kl_snprintf(w1, sizeof w1, "++%s", var);
    kl_snprintf(w2, sizeof w2, "%s++", var);
    kl_snprintf(w3, sizeof w3, "%s+=1", var);
    if (strcmp(u, w1) && strcmp(u, w2) && strcmp(u, w3)) return false;
    *body = only_stmt(rt_field(loop, "body"));
    return rt_is(*body, "expression_statement");
}

typedef struct use_scan {
    const kl_rule_ctx *ctx;
    acc_site *a;
} use_scan;

/* Every use of the array: zeroing, `A[e] += x`, the fold; anything else says why not. */
static bool use_visit(TSNode n, void *user)
{
    use_scan *u = user;
    acc_site *a = u->a;
    if (a->why[0]) return false;
    if (ts_node_eq(n, a->decl) || ts_node_eq(n, a->zero_loop) || ts_node_eq(n, a->fold_loop)) return false;
    if (!rt_is(n, "identifier") || !rt_text_is(u->ctx, n, a->name)) return true;
    TSNode p = ts_node_parent(n);
    TSNode g = ts_node_parent(p);
    if (rt_is(p, "subscript_expression") && rt_is(g, "assignment_expression") && ts_node_eq(rt_field(g, "left"), p)) {
        char op[8];
        rt_text_unblank_to(u->ctx, rt_field(g, "operator"), op, sizeof op);
        if (!strcmp(op, "+=") && a->nupd < 32) {
            a->updates[a->nupd++] = p;
            return true;
        }
        char r[32];
        rt_text_unblank_to(u->ctx, rt_field(g, "right"), r, sizeof r);
        if (!strcmp(op, "=") && zero_text(r) && ts_node_is_null(a->zero_loop) && a->nzero < 32 &&
            rt_is(ts_node_parent(g), "expression_statement")) {
            a->zero_stmts[a->nzero++] = ts_node_parent(g);
            return true;
        }
    }
    kl_snprintf(a->why, sizeof a->why,
                "line %u uses %s otherwise than `%s[e] += x`, its zeroing or its fold `s += %s[u]`: one accumulator "
                "would not hold what it reads",
                kl_ast_line(n), a->name, a->name, a->name);
    return false;
}

/* A declaration `T A[K];` (K a compile-time constant >= 2, T a number) and what it takes part in. */
static bool analyse(const kl_rule_ctx *ctx, TSNode fn, TSNode decl, acc_site *a)
{
    memset(a, 0, sizeof *a);
    if (!rt_is(decl, "declaration") || ts_node_named_child_count(decl) != 2) return false;
    char dt[256];
    rt_text_unblank_to(ctx, decl, dt, sizeof dt);
    if (strstr(dt, "__shared__") || strstr(dt, "static") || strstr(dt, "extern")) return false;
    TSNode d = rt_field(decl, "declarator");
    if (!rt_is(d, "array_declarator")) return false;
    TSNode nm = rt_field(d, "declarator"), sz = rt_field(d, "size");
    if (!rt_is(nm, "identifier") || ts_node_is_null(sz)) return false;
    rt_text_unblank_to(ctx, nm, a->name, sizeof a->name);
    rt_text_unblank_to(ctx, sz, a->extent, sizeof a->extent);
    rt_text_unblank_to(ctx, rt_field(decl, "type"), a->type, sizeof a->type);
    static const char *const num[] = {"float", "double", "int", "unsigned", "unsignedint", "long", "longlong", NULL};
    bool ok = false;
    for (const char *const *t = num; *t && !ok; t++) ok = !strcmp(a->type, *t);
    if (!ok) return false;
    char w[200];
    if (!kl_const_eval(ctx->src, fn, sz, false, &a->k, w, sizeof w) || a->k < 2) return false;
    a->decl = decl;
    /* the zeroing loop and the fold: loops over the whole array, anywhere in the function */
    TSNode body = kl_ast_function_body(fn);
    TSNode stack[512];
    unsigned sp = 0;
    stack[sp++] = body;
    while (sp) {
        TSNode n = stack[--sp];
        char var[64];
        TSNode st;
        if (full_loop(ctx, n, a, var, sizeof var, &st)) {
            TSNode as = ts_node_named_child(st, 0);
            if (rt_is(as, "assignment_expression")) {
                char op[8], l[128], r[128], want[128];
                rt_text_unblank_to(ctx, rt_field(as, "operator"), op, sizeof op);
                rt_text_unblank_to(ctx, rt_field(as, "left"), l, sizeof l);
                rt_text_unblank_to(ctx, rt_field(as, "right"), r, sizeof r);
                kl_snprintf(want, sizeof want, "%s[%s]", a->name, var);
                if (!strcmp(op, "=") && !strcmp(l, want) && zero_text(r) && ts_node_is_null(a->zero_loop)) {
                    a->zero_loop = n;
                    kl_snprintf(a->zero, sizeof a->zero, "%s", r);
                    continue;
                }
                if (!strcmp(op, "+=") && !strcmp(r, want) && rt_is(rt_field(as, "left"), "identifier") &&
                    ts_node_is_null(a->fold_loop)) {
                    a->fold_loop = n;
                    a->fold_stmt = st;
                    kl_snprintf(a->fold_target, sizeof a->fold_target, "%s", l);
                    continue;
                }
            }
        }
        for (uint32_t c = ts_node_named_child_count(n); c-- > 0 && sp < 512;) stack[sp++] = ts_node_named_child(n, c);
    }
    if (ts_node_is_null(a->fold_loop)) return false; /* not a set of partial sums: no site */
    use_scan u = {ctx, a};
    kl_ast_walk(body, use_visit, &u);
    if (a->why[0]) return true;
    if (!a->nupd) {
        kl_snprintf(a->why, sizeof a->why, "nothing adds to %s", a->name);
        return true;
    }
    if (ts_node_is_null(a->zero_loop) && a->nzero != (unsigned)a->k) {
        kl_snprintf(a->why, sizeof a->why, "%s is not zeroed element by element before it is added to", a->name);
        return true;
    }
    if (ts_node_is_null(a->zero_loop) && a->nzero) {
        char r[32];
        rt_text_unblank_to(ctx, rt_field(ts_node_named_child(a->zero_stmts[0], 0), "right"), r, sizeof r);
        kl_snprintf(a->zero, sizeof a->zero, "%s", r);
    }
    /* the zeroing comes before every update and the fold */
    uint32_t z = ts_node_is_null(a->zero_loop) ? ts_node_start_byte(a->zero_stmts[a->nzero - 1])
                                                : ts_node_start_byte(a->zero_loop);
    bool after = ts_node_start_byte(a->fold_loop) > z;
    for (unsigned i = 0; i < a->nupd; i++) after = after && ts_node_start_byte(a->updates[i]) > z;
    if (!after) kl_snprintf(a->why, sizeof a->why, "%s is added to before it is zeroed", a->name);
    return true;
}

/* A loop's whole lines, with its `#pragma unroll` line. */
static void stmt_lines(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode st, uint32_t *a, uint32_t *b)
{
    kl_rules_line_range(ctx, st, NULL, a, b);
    int li = kl_affine_loop_index(ax, st);
    if (li >= 0 && kl_affine_loop(ax, (unsigned)li)->has_pragma_unroll)
        *a = kl_ast_line_start(ctx->text, kl_affine_loop(ax, (unsigned)li)->pragma_start);
}

static kl_status rewrite(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const acc_site *a, kl_edits *out)
{
    /* `T A[K];` -> `T A = 0;` */
    TSNode d = rt_field(a->decl, "declarator");
    kl_status st = kl_edits_addf(out, ts_node_start_byte(d), ts_node_end_byte(d), "%s = %s", a->name,
                                 a->zero[0] ? a->zero : "0");
    uint32_t x, y;
    if (st == KL_OK && !ts_node_is_null(a->zero_loop)) {
        stmt_lines(ctx, ax, a->zero_loop, &x, &y);
        st = kl_edits_add(out, x, y, "");
    }
    for (unsigned i = 0; i < a->nzero && st == KL_OK; i++) {
        kl_rules_line_range(ctx, a->zero_stmts[i], NULL, &x, &y);
        st = kl_edits_add(out, x, y, "");
    }
    for (unsigned i = 0; i < a->nupd && st == KL_OK; i++)
        st = kl_edits_add(out, ts_node_start_byte(a->updates[i]), ts_node_end_byte(a->updates[i]), a->name);
    if (st == KL_OK) {
        /* the fold: `s += A;` in the loop's place (its pragma goes) */
        char ind[64];
        kl_rules_indent(ctx, ts_node_start_byte(a->fold_loop), ind, sizeof ind);
        stmt_lines(ctx, ax, a->fold_loop, &x, &y);
        st = kl_edits_addf(out, x, y, "%s%s += %s;\n", ind, a->fold_target, a->name);
    }
    return st;
}

typedef struct acc_run {
    rt_run run;             /* run.site: the site to rewrite; NULL: find */
    kl_sites *out;          /* find: the sites */
} acc_run;

typedef struct decl_list {
    TSNode n[64];
    unsigned k;
} decl_list;

static bool decl_visit(TSNode n, void *user)
{
    decl_list *l = user;
    if (rt_is(n, "declaration") && rt_is(rt_field(n, "declarator"), "array_declarator") && l->k < 64) l->n[l->k++] = n;
    return !rt_is(n, "declaration");
}

static kl_status visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    acc_run *r = user;
    if (r->run.done) return KL_OK;
    decl_list dl;
    memset(&dl, 0, sizeof dl);
    kl_ast_walk(kl_ast_function_body(fn), decl_visit, &dl);
    for (unsigned i = 0; i < dl.k; i++) {
        acc_site a;
        if (!analyse(ctx, fn, dl.n[i], &a)) continue;
        char id[256];
        kl_site_id(id, sizeof id, name, a.decl, a.name);
        if (r->run.site) {
            if (strcmp(id, r->run.site->id)) continue;
            r->run.done = true;
            if (a.why[0]) r->run.st = kl_rule_not_applicable(r->run.err, "%s", a.why);
            else if (rewrite(ctx, ax, &a, r->run.out) != KL_OK) r->run.st = kl_error_set(r->run.err, KL_ERR_NOMEM, "out of memory");
            return KL_OK;
        }
        json_t *f = json_pack("{s:s, s:s, s:I, s:I}", "array", a.name, "dtype", a.type, "count", (json_int_t)a.k,
                              "updates", (json_int_t)a.nupd);
        if (!f) return KL_ERR_NOMEM;
        if (a.why[0]) json_object_set_new(f, "why_not", json_string(a.why));
        char note[400];
        if (a.why[0]) kl_snprintf(note, sizeof note, "%s", a.why);
        else
            kl_snprintf(note, sizeof note, "%s independent partial sums in %s[%s], folded into %s", a.extent, a.name,
                        a.extent, a.fold_target);
        kl_status st = kl_sites_add(r->out, id, KL_SITE_PRESENT, kl_node_span(a.decl), name, f, NULL, note);
        if (st != KL_OK) return st;
    }
    return KL_OK;
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    acc_run r = {.run = {.err = err, .st = KL_OK}, .out = out};
    return kl_rules_each_gpu_function(ctx, visit, &r, err);
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    acc_run r = {.run = {site, NULL, out, err, false, KL_OK}};
    return kl_rules_run_site(ctx, visit, &r, &r.run, true, "no partial sums at %s", site->id);
}

const kl_rule kl_rule_accumulators = {
    "accumulators",
    "several independent partial sums in registers, folded at the end <- one accumulator",
    NULL, 0, find, remove_site, NULL,
};
