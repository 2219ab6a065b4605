/* Loops over the rows (or columns) of a tile that step by a block extent from 0,
 *     for (int j = 0; j < TILE; j += BLOCK_ROWS)  … threadIdx.y + j …
 * (the row-step form; docs/rules.md, block-size, "2-D blocks"). Thread (x, y) runs the rows
 * y, y + E, y + 2E, … of [0, TILE) when the body reads threadIdx.y and j only as their sum: the
 * block then covers [0, TILE) once whatever E is, as long as E divides TILE. This file says
 * whether a loop is of that form; block_size.c checks the bound, coalesce.c reads the staged transpose written this way. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/row_step.h"
#include "rewrite/rules/rules_tree.h"
#include "syntax/affine.h"
#include "util/util.h"


#define ROW_MAX_LOCALS 32

/* The kernel's locals that depend on threadIdx.<dim> (through their definitions), and which of
 * them are a thread row: every definition `P + T` with T threadIdx.<dim> or another thread row
 * (coefficient 1) and P free of the thread index. */
typedef struct row_locals {
    const kl_source *src;
    TSNode body;
    int dim;
    char *name[ROW_MAX_LOCALS];
    bool row[ROW_MAX_LOCALS];
    /* the locals declared in the loop's body (names borrowed from the text as new strings) */
    char *rv[ROW_MAX_LOCALS];
    unsigned nrv;
    unsigned n;
    bool overflow;
    bool grew;
} row_locals;

static int local_index(const row_locals *r, const kl_source *src, TSNode id)
{
    for (unsigned i = 0; i < r->n; i++)
        if (kl_node_text_is(src, id, r->name[i])) return (int)i;
    return -1;
}

static bool is_thread(const kl_source *src, TSNode n, int dim)
{
    static const char *const idx[] = {"threadIdx.x", "threadIdx.y", "threadIdx.z"};
    return rt_is(n, "field_expression") && kl_node_text_is(src, n, idx[dim]);
}

typedef struct mention_scan {
    const row_locals *r;
    bool hit;
} mention_scan;

static bool mention_visit(TSNode n, void *user)
{
    mention_scan *m = user;
    if (m->hit) return false;
    if (is_thread(m->r->src, n, m->r->dim) || (rt_is(n, "identifier") && local_index(m->r, m->r->src, n) >= 0))
        m->hit = true;
    return !m->hit;
}

/* Does e read the thread index (directly or through a dependent local)? */
static bool mentions_thread(const row_locals *r, TSNode e)
{
    mention_scan m = {r, false};
    kl_ast_walk(e, mention_visit, &m);
    return m.hit;
}

/* e is `T`, `(T)` or `P + T` / `T + P` (nested), T the thread index or a thread row, P free of both. */
static bool is_row_expr(const row_locals *r, TSNode e, int depth)
{
    e = kl_ast_unparen(e);
    if (depth > 16) return false;
    if (is_thread(r->src, e, r->dim)) return true;
    if (rt_is(e, "identifier")) {
        int i = local_index(r, r->src, e);
        return i >= 0 && r->row[i];
    }
    if (rt_is(e, "cast_expression")) return is_row_expr(r, ts_node_child_by_field_name(e, "value", 5), depth + 1);
    if (!rt_is(e, "binary_expression") || !kl_node_text_is(r->src, ts_node_child_by_field_name(e, "operator", 8), "+"))
        return false;
    TSNode a = ts_node_child_by_field_name(e, "left", 4), b = ts_node_child_by_field_name(e, "right", 5);
    if (is_row_expr(r, a, depth + 1)) return !mentions_thread(r, b);
    return is_row_expr(r, b, depth + 1) && !mentions_thread(r, a);
}

/* Every definition of local `name` in the body: the declaration's value and `name = v` assignments;
 * other updates (`+=`, `++`) make it no row. */
typedef struct def_scan {
    const kl_source *src;
    const char *name;
    TSNode defs[8];
    unsigned n;
    bool other;          /* updated otherwise, declared without a value, or more than 8 definitions */
    bool declared;       /* an init_declarator of it was seen */
} def_scan;

static bool def_visit(TSNode n, void *user)
{
    def_scan *d = user;
    if (rt_is(n, "init_declarator")) {
        TSNode id = ts_node_child_by_field_name(n, "declarator", 10);
        if (rt_is(id, "identifier") && kl_node_text_is(d->src, id, d->name)) {
            d->declared = true;
            if (d->n < 8) d->defs[d->n++] = ts_node_child_by_field_name(n, "value", 5);
            else d->other = true;
        }
    } else if (rt_is(n, "assignment_expression")) {
        TSNode l = ts_node_child_by_field_name(n, "left", 4);
        if (rt_is(l, "identifier") && kl_node_text_is(d->src, l, d->name)) {
            if (kl_node_text_is(d->src, ts_node_child_by_field_name(n, "operator", 8), "=") && d->n < 8)
                d->defs[d->n++] = ts_node_child_by_field_name(n, "right", 5);
            else d->other = true;
        }
    } else if (rt_is(n, "update_expression")) {
        TSNode a = ts_node_child_by_field_name(n, "argument", 8);
        if (rt_is(a, "identifier") && kl_node_text_is(d->src, a, d->name)) d->other = true;
    }
    return true;
}

typedef struct local_scan {
    row_locals *r;
} local_scan;

/* Collect the locals (declared in the body) whose definitions read the thread index. */
static bool local_visit(TSNode n, void *user)
{
    row_locals *r = ((local_scan *)user)->r;
    if (!rt_is(n, "init_declarator")) return true;
    TSNode id = ts_node_child_by_field_name(n, "declarator", 10);
    if (!rt_is(id, "identifier") || local_index(r, r->src, id) >= 0) return true;
    char *name = kl_node_text(r->src, id);
    if (!name) return true;
    def_scan d = {.src = r->src, .name = name};
    kl_ast_walk(r->body, def_visit, &d);
    bool dep = false;
    for (unsigned i = 0; i < d.n && !dep; i++) dep = !ts_node_is_null(d.defs[i]) && mentions_thread(r, d.defs[i]);
    if (dep) {
        if (r->n < ROW_MAX_LOCALS) {
            r->name[r->n++] = name;
            name = NULL;
            r->grew = true;
        } else r->overflow = true;
    }
    free(name);
    return true;
}

static void rows_of(row_locals *r)
{
    for (int round = 0; round < 8; round++) {
        r->grew = false;
        local_scan s = {r};
        kl_ast_walk(r->body, local_visit, &s);
        if (!r->grew) break;
    }
    /* a row: every definition a row expression (assume all rows, drop until stable) */
    for (unsigned i = 0; i < r->n; i++) r->row[i] = true;
    for (bool changed = true; changed;) {
        changed = false;
        for (unsigned i = 0; i < r->n; i++) {
            if (!r->row[i]) continue;
            def_scan d = {.src = r->src, .name = r->name[i]};
            kl_ast_walk(r->body, def_visit, &d);
            bool ok = !d.other && d.n > 0;
            for (unsigned k = 0; k < d.n && ok; k++) ok = !ts_node_is_null(d.defs[k]) && is_row_expr(r, d.defs[k], 0);
            if (!ok) {
                r->row[i] = false;
                changed = true;
            }
        }
    }
}

/* The uses in the loop's body: the thread index (or a dependent local) only inside `R + v`, and v
 * only as `R + v` / `v + R` with R a row expression. */
typedef struct use_scan {
    const row_locals *r;
    const char *var;
    TSNode bad;
    const char *what;
} use_scan;

static bool is_var(const kl_source *src, TSNode n, const char *var)
{
    return rt_is(kl_ast_unparen(n), "identifier") && kl_node_text_is(src, kl_ast_unparen(n), var);
}

/* n (a thread index or a dependent local) sits in a `+` chain that ends in `… + v`. */
static bool summed_with_var(const row_locals *r, TSNode n, const char *var)
{
    TSNode child = n;
    for (TSNode p = ts_node_parent(n); !ts_node_is_null(p); child = p, p = ts_node_parent(p)) {
        if (rt_is(p, "parenthesized_expression")) continue;
        if (!rt_is(p, "binary_expression") || !kl_node_text_is(r->src, ts_node_child_by_field_name(p, "operator", 8), "+"))
            return false;
        TSNode a = ts_node_child_by_field_name(p, "left", 4), b = ts_node_child_by_field_name(p, "right", 5);
        TSNode other = ts_node_eq(a, child) ? b : a;
        if (is_var(r->src, other, var)) return is_row_expr(r, child, 0);
    }
    return false;
}

static bool use_visit(TSNode n, void *user)
{
    use_scan *u = user;
    if (!ts_node_is_null(u->bad)) return false;
    const row_locals *r = u->r;
    for (unsigned i = 0; rt_is(n, "identifier") && i < r->nrv; i++)
        if (kl_node_text_is(r->src, n, r->rv[i])) return true;
    int li = rt_is(n, "identifier") ? local_index(r, r->src, n) : -1;
    if (is_thread(r->src, n, r->dim) || li >= 0) {
        /* a declaration's own name is not a use */
        TSNode p = ts_node_parent(n);
        if (rt_is(p, "init_declarator") && ts_node_eq(ts_node_child_by_field_name(p, "declarator", 10), n)) return true;
        if (!summed_with_var(r, n, u->var)) {
            u->bad = n;
            u->what = "reads the thread index other than added to the loop variable";
        }
        return false;
    }
    if (rt_is(n, "identifier") && kl_node_text_is(r->src, n, u->var)) {
        TSNode p = ts_node_parent(n);
        while (rt_is(p, "parenthesized_expression")) p = ts_node_parent(p);
        bool ok = false;
        if (rt_is(p, "binary_expression") && kl_node_text_is(r->src, ts_node_child_by_field_name(p, "operator", 8), "+")) {
            TSNode a = ts_node_child_by_field_name(p, "left", 4), b = ts_node_child_by_field_name(p, "right", 5);
            TSNode other = ts_node_start_byte(a) <= ts_node_start_byte(n) && ts_node_end_byte(n) <= ts_node_end_byte(a) ? b : a;
            ok = is_row_expr(r, other, 0);
        }
        if (!ok) {
            u->bad = n;
            u->what = "uses the loop variable other than added to the thread's row";
        }
    }
    return true;
}

typedef struct body_decls {
    const kl_source *src;
    row_locals *r;
} body_decls;

static bool body_decl_visit(TSNode n, void *user)
{
    body_decls *b = user;
    if (!rt_is(n, "init_declarator") && !(rt_is(n, "identifier") && rt_is(ts_node_parent(n), "declaration")))
        return true;
    TSNode id = rt_is(n, "init_declarator") ? ts_node_child_by_field_name(n, "declarator", 10) : n;
    if (!rt_is(id, "identifier")) return true;
    if (b->r->nrv >= ROW_MAX_LOCALS) {
        b->r->overflow = true;
        return false;
    }
    char *t = kl_node_text(b->src, id);
    if (t) b->r->rv[b->r->nrv++] = t;
    return true;
}

typedef struct name_scan {
    const kl_source *src;
    const char *name;
    bool hit;
} name_scan;

static bool name_visit(TSNode n, void *user)
{
    name_scan *s = user;
    if (!s->hit && rt_is(n, "identifier") && kl_node_text_is(s->src, n, s->name)) s->hit = true;
    return !s->hit;
}

static bool mentions_name(const kl_source *src, TSNode n, const char *name)
{
    name_scan s = {src, name, false};
    kl_ast_walk(n, name_visit, &s);
    return s.hit;
}

bool kl_row_step_loop(const kl_source *src, TSNode fn, TSNode loop, const char *var, int dim, char *why,
                         size_t size)
{
    if (dim < 0 || dim > 2) return false;
    TSNode lbody = ts_node_child_by_field_name(loop, "body", 4);
    row_locals r = {.src = src, .body = kl_ast_function_body(fn), .dim = dim};
    rows_of(&r);
    bool form = false;
    /* locals declared in the body: their definitions there are checked where they stand (a thread
     * row in them must be summed with v: `ty = threadIdx.y + j`), so their uses need no check */
    body_decls bd = {src, &r};
    kl_ast_walk(lbody, body_decl_visit, &bd);
    if (!r.overflow) {
        /* the variable is not changed in the body */
        def_scan d = {.src = src, .name = var};
        kl_ast_walk(lbody, def_visit, &d);
        use_scan u = {.r = &r, .var = var};
        if (!d.n && !d.other) kl_ast_walk(lbody, use_visit, &u);
        if (ts_node_is_null(u.bad) && !mentions_name(src, lbody, var)) {
            kl_snprintf(why, size, "the loop at line %u steps %s by the block's %c extent but its body does not read it: "
                        "it runs once per row step, a count that depends on the block", kl_ast_line(loop), var, "xyz"[dim]);
        } else if (d.n || d.other) {
            kl_snprintf(why, size, "the loop at line %u assigns %s in its body", kl_ast_line(loop), var);
        } else if (!ts_node_is_null(u.bad)) {
            char *t = kl_node_text(src, u.bad);
            kl_snprintf(why, size,
                        "the loop at line %u steps %s by the block's %c extent from 0, but line %u %s (%s): the rows "
                        "it covers depend on the block",
                        kl_ast_line(loop), var, "xyz"[dim], kl_ast_line(u.bad), u.what, t ? t : "?");
            free(t);
        } else form = true;
    }
    for (unsigned i = 0; i < r.n; i++) free(r.name[i]);
    for (unsigned i = 0; i < r.nrv; i++) free(r.rv[i]);
    return form;
}

TSNode kl_loop_start(TSNode loop)
{
    TSNode init = ts_node_child_by_field_name(loop, "initializer", 11);
    if (rt_is(init, "declaration")) {
        TSNode d = ts_node_child_by_field_name(init, "declarator", 10);
        if (rt_is(d, "init_declarator")) return ts_node_child_by_field_name(d, "value", 5);
    } else if (rt_is(init, "assignment_expression")) {
        return ts_node_child_by_field_name(init, "right", 5);
    }
    return (TSNode){0};
}

/* A loop's bound when its condition is `v < B` (also as the grammar's template misparse). */
TSNode kl_loop_bound(const kl_source *src, TSNode loop, const char *var)
{
    TSNode c = kl_ast_unparen(ts_node_child_by_field_name(loop, "condition", 9));
    if (rt_is(c, "binary_expression")) {
        char *op = kl_node_text(src, ts_node_child_by_field_name(c, "operator", 8));
        bool lt = op && !strcmp(op, "<");
        free(op);
        if (lt && kl_node_text_is(src, ts_node_child_by_field_name(c, "left", 4), var))
            return ts_node_child_by_field_name(c, "right", 5);
        return (TSNode){0};
    }
    char *lhs = NULL;
    TSNode rhs = {0};
    if (!ts_node_is_null(c) && kl_ast_less_misparse(src, c, &lhs, &rhs)) {
        bool same = lhs && !strcmp(lhs, var);
        free(lhs);
        if (same) return rhs;
    }
    return (TSNode){0};
}

bool kl_row_step_check(const kl_source *src, TSNode fn, TSNode loop, const kl_source *nsrc, TSNode nloop, TSNode nfn,
                       const char *var, const char *step, int sdim, const int64_t ext_old[2], const int64_t ext_new[2],
                       char *why, size_t size)
{
    TSNode start = kl_loop_start(loop);
    int64_t s0 = -1;
    if (ts_node_is_null(start) || !kl_const_eval(src, fn, start, false, &s0, NULL, 0) || s0 != 0) return false;
    /* the dimension: the step's, or (one constant for both extents) whichever row the body reads */
    char rwhy[300] = "";
    int rdim = -1;
    for (int k = sdim < 0 ? 1 : sdim; k >= 0 && rdim < 0 && !rwhy[0]; k--) {
        if (kl_row_step_loop(src, fn, loop, var, k, rwhy, sizeof rwhy)) rdim = k;
        if (sdim >= 0) break;
    }
    if (rwhy[0]) {
        kl_snprintf(why, size, "%s", rwhy);
        return true;
    }
    if (rdim < 0) return false;
    TSNode lb = kl_loop_bound(src, loop, var), nlb = kl_loop_bound(nsrc, nloop, var);
    int64_t bo = 0, bn = 0, so = ext_old[rdim], sn = ext_new[rdim];
    char *bt = ts_node_is_null(lb) ? NULL : kl_node_text(src, lb);
    if (ts_node_is_null(lb) || ts_node_is_null(nlb) || !kl_const_eval(src, fn, lb, false, &bo, NULL, 0) ||
        !kl_const_eval(nsrc, nfn, nlb, false, &bn, NULL, 0) || so <= 0 || bo % so != 0)
        kl_snprintf(why, size,
                    "the loop at line %u steps %s by %s over rows threadIdx.%c + %s up to %s, not a compile-time "
                    "multiple of %s: whether the block still covers its range cannot be checked",
                    kl_ast_line(loop), var, step, "xyz"[rdim], var, bt ? bt : "an unknown bound", step);
    else if (sn <= 0 || bn % sn != 0)
        kl_snprintf(why, size,
                    "the loop at line %u covers rows threadIdx.%c + %s, %s = 0, %s, ... < %s: with a %lldx%lld "
                    "block %lld rows are not a multiple of %lld and the last step would pass the tile",
                    kl_ast_line(loop), "xyz"[rdim], var, var, step, bt ? bt : "its bound", (long long)ext_new[0],
                    (long long)ext_new[1], (long long)bn, (long long)sn);
    free(bt);
    return true;
}
