/* row-parallel's applicable side (row_parallel.c has the rule): a kernel that gives every thread a
 * row, analysed (row_parallel__analyse_row), and spread over the lanes of a warp or a block
 * (row_parallel__apply_row). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/row_parallel.h"
#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "syntax/affine.h"
#include "util/util.h"

/* ---- reductions ----------------------------------------------------------------------------------- */

static bool minmax_fn(const char *f)
{
    static const char *const fs[] = {"fmaxf", "fminf", "fmax", "fmin", "max", "min", NULL};
    for (unsigned i = 0; fs[i]; i++)
        if (!strcmp(f, fs[i])) return true;
    return false;
}

/* Is the update node n (assignment or ++) a reduction of identifier v? op receives "+" (sums,
 * counts, `-=`), or the min/max function. uses: how many times v appears in n. */
static bool reduction_of(const kl_rule_ctx *ctx, TSNode n, const char *v, char *op, size_t opsize)
{
    unsigned uses = rt_count_ident(ctx, n, v);
    if (rt_is(n, "update_expression")) {
        kl_snprintf(op, opsize, "+");
        return row_parallel__op_is(ctx, n, "++") && uses == 1;
    }
    if (!rt_is(n, "assignment_expression") || !rt_text_is(ctx, rt_field(n, "left"), v)) return false;
    TSNode r = kl_ast_unparen(rt_field(n, "right"));
    if (row_parallel__op_is(ctx, n, "+=") || row_parallel__op_is(ctx, n, "-=")) {
        kl_snprintf(op, opsize, "+");
        return uses == 1;
    }
    if (!row_parallel__op_is(ctx, n, "=") || uses != 2) return false;
    if (rt_is(r, "binary_expression") && row_parallel__op_is(ctx, r, "+") &&
        (rt_text_is(ctx, rt_field(r, "left"), v) || rt_text_is(ctx, rt_field(r, "right"), v))) {
        kl_snprintf(op, opsize, "+");
        return true;
    }
    if (rt_is(r, "call_expression") && ts_node_named_child_count(rt_field(r, "arguments")) == 2) {
        char f[32];
        rt_text_copy(ctx, rt_field(r, "function"), f, sizeof f);
        TSNode a0 = ts_node_named_child(rt_field(r, "arguments"), 0), a1 = ts_node_named_child(rt_field(r, "arguments"), 1);
        if (minmax_fn(f) && (rt_text_is(ctx, a0, v) || rt_text_is(ctx, a1, v))) {
            kl_snprintf(op, opsize, "%s", f);
            return true;
        }
    }
    return false;
}

/* A row loop: `for (T c = S; c < N; c++)` or `T c = S; while (c < N) { …; c++; }`. */
static bool plain_loop(const kl_rule_ctx *ctx, TSNode st, rp_loop *L, rp_row *r)
{
    memset(L, 0, sizeof *L);
    L->node = st;
    TSNode cond;
    if (rt_is(st, "for_statement")) {
        TSNode init = rt_field(st, "initializer");
        TSNode d = row_parallel__single_init(init);
        if (ts_node_is_null(d))
            return row_parallel__why(r->why, sizeof r->why, "the loop at line %u does not declare its variable with a start value in its initializer",
                           kl_ast_line(st));
        rt_text_copy(ctx, kl_ast_declarator_name(d), L->var, sizeof L->var);
        L->start = rt_field(d, "value");
        L->update = rt_field(st, "update");
        cond = kl_ast_unparen(rt_field(st, "condition"));
    } else if (rt_is(st, "while_statement")) {
        L->is_while = true;
        cond = row_parallel__cond_expr(rt_field(st, "condition"));
        if (rt_is(cond, "binary_expression")) rt_text_copy(ctx, rt_field(cond, "left"), L->var, sizeof L->var);
        L->start = row_parallel__decl_value_of(ctx, rt_prev_stmt(st), L->var);
        TSNode body = rt_field(st, "body");
        L->update = rt_is(body, "compound_statement") ? rt_last_stmt(body) : row_parallel__null;
        if (ts_node_is_null(L->start))
            return row_parallel__why(r->why, sizeof r->why, "the while loop at line %u is not preceded by the declaration of its variable", kl_ast_line(st));
    } else {
        return row_parallel__why(r->why, sizeof r->why, "line %u: a do-while loop over the row is not supported", kl_ast_line(st));
    }
    if (!rt_is(cond, "binary_expression") || !rt_text_is(ctx, rt_field(cond, "left"), L->var) ||
        (!row_parallel__op_is(ctx, cond, "<") && !row_parallel__op_is(ctx, cond, "<=")))
        return row_parallel__why(r->why, sizeof r->why, "the loop at line %u is not `%s < bound`", kl_ast_line(st), L->var[0] ? L->var : "c");
    TSNode step;
    TSNode upd = L->is_while ? row_parallel__stmt_expr(L->update) : L->update;
    if (ts_node_is_null(upd) || !row_parallel__increments(ctx, upd, L->var, &step) || (!ts_node_is_null(step) && !rt_text_is(ctx, step, "1")))
        return row_parallel__why(r->why, sizeof r->why, "the loop at line %u does not step %s by 1", kl_ast_line(st), L->var);
    rt_text_copy(ctx, L->start, L->start_text, sizeof L->start_text);
    return true;
}

typedef struct scan {
    const kl_rule_ctx *ctx;
    kl_affine_ctx *ax;
    rp_row *r;
    int loop;             /* the row loop being scanned, -1 outside */
} scan;

static bool is_atomic(const kl_rule_ctx *ctx, TSNode call)
{
    char f[64];
    rt_text_copy(ctx, rt_field(call, "function"), f, sizeof f);
    return !strncmp(f, "atomic", 6);
}

/* The array (pointer) an lvalue or an atomic's address names: `p[i]` (index set), `*(p + i)`,
 * `&p[i]`, `p + i`. False when it is a plain identifier or unknown. */
static bool lvalue_array(const kl_rule_ctx *ctx, TSNode n, char *arr, size_t size, TSNode *index)
{
    n = kl_ast_unparen(n);
    *index = row_parallel__null;
    if (rt_is(n, "pointer_expression")) n = kl_ast_unparen(rt_field(n, "argument"));
    if (rt_is(n, "field_expression")) n = kl_ast_unparen(rt_field(n, "argument"));
    if (rt_is(n, "subscript_expression")) {
        TSNode a = kl_ast_unparen(rt_field(n, "argument"));
        if (!rt_is(a, "identifier")) return false;
        rt_text_copy(ctx, a, arr, size);
        *index = rt_field(n, "index");
        if (ts_node_is_null(*index) && ts_node_named_child_count(n) >= 2) *index = ts_node_named_child(n, 1);
        if (rt_is(*index, "subscript_argument_list") && ts_node_named_child_count(*index) == 1)
            *index = ts_node_named_child(*index, 0);
        return true;
    }
    if (rt_is(n, "binary_expression") && row_parallel__op_is(ctx, n, "+")) {
        TSNode a = kl_ast_unparen(rt_field(n, "left"));
        if (!rt_is(a, "identifier")) return false;
        rt_text_copy(ctx, a, arr, size);
        *index = rt_field(n, "right");
        return true;
    }
    if (rt_is(n, "identifier")) {
        rt_text_copy(ctx, n, arr, size);
        return true;
    }
    return false;
}

static void add_acc(scan *s, TSNode node, const char *arr, TSNode index, bool write)
{
    rp_row *r = s->r;
    if (r->nacc >= RP_MAXACC) {
        row_parallel__why(r->why, sizeof r->why, "more than %d array accesses in the row", RP_MAXACC);
        return;
    }
    rp_acc *a = &r->acc[r->nacc++];
    kl_snprintf(a->array, sizeof a->array, "%s", arr);
    rt_text_unblank_to(s->ctx, index, a->index, sizeof a->index);
    a->loop = s->loop;
    a->write = write;
    a->node = node;
}

/* A write to memory (pointer element) at n: inside a row loop its index must move with the loop
 * variable; outside, the statement is done by one lane. */
static void memory_write(scan *s, TSNode n, TSNode target)
{
    rp_row *r = s->r;
    const kl_rule_ctx *ctx = s->ctx;
    char arr[64] = "";
    TSNode index;
    /* a field of a local struct (`m.s = …`): a scalar of the thread, not memory */
    TSNode ft = kl_ast_unparen(target);
    if (rt_is(ft, "field_expression") && rt_is(kl_ast_unparen(rt_field(ft, "argument")), "identifier") &&
        !rt_text_is(ctx, rt_field(ft, "operator"), "->")) {
        char v[64];
        TSNode dd;
        rt_text_copy(ctx, kl_ast_unparen(rt_field(ft, "argument")), v, sizeof v);
        TSNode decl = rt_find_decl(ctx, r->fn, v, true, &dd);
        if (rt_is(decl, "declaration") && (rt_is(dd, "identifier") || rt_is(dd, "init_declarator")) &&
            !rt_is(rt_field(dd, "declarator"), "pointer_declarator")) {
            if (s->loop >= 0 && ts_node_is_null(rt_find_decl(ctx, r->loops[s->loop].node, v, true, NULL)))
                row_parallel__why(r->why, sizeof r->why, "the loop at line %u carries the local %s with an update at line %u that is not a reduction "
                           "(sum, max, min, count)",
                        kl_ast_line(r->loops[s->loop].node), v, kl_ast_line(n));
            return;
        }
    }
    if (!lvalue_array(ctx, target, arr, sizeof arr, &index)) {
        row_parallel__why(r->why, sizeof r->why, "line %u writes through an expression that is not an array element", kl_ast_line(n));
        return;
    }
    /* a local array (not a pointer) */
    TSNode decl_d;
    TSNode decl = rt_find_decl(ctx, r->fn, arr, true, &decl_d);
    if (!ts_node_is_null(decl) && rt_is(decl_d, "array_declarator")) {
        row_parallel__why(r->why, sizeof r->why, "line %u writes the local array %s: its elements would be spread over the lanes", kl_ast_line(n), arr);
        return;
    }
    if (s->loop >= 0) {
        const rp_loop *L = &r->loops[s->loop];
        if (ts_node_is_null(index)) {
            row_parallel__why(r->why, sizeof r->why, "the store at line %u does not move with %s: the lanes would race", kl_ast_line(n), L->var);
            return;
        }
        kl_affine a = {0};
        if (kl_affine_of(s->ax, index, &a) != KL_OK) {
            row_parallel__why(r->why, sizeof r->why, "out of memory");
            return;
        }
        int64_t k = 0;
        bool moves = a.ok && kl_affine_coef_int(&a, L->var, &k) && k != 0;
        if (!a.ok && !L->is_while)
            row_parallel__why(r->why, sizeof r->why, "the store at line %u has an index that is not affine in %s (%s)", kl_ast_line(n), L->var,
                    a.why ? a.why : "?");
        else if (!moves && !L->is_while)
            row_parallel__why(r->why, sizeof r->why, "the store at line %u does not move with %s: the lanes would race", kl_ast_line(n), L->var);
        else if (L->is_while) {
            /* a while loop's variable is not a loop variable of the analysis: the index must name it */
            if (!rt_count_ident(ctx, index, L->var))
                row_parallel__why(r->why, sizeof r->why, "the store at line %u does not move with %s: the lanes would race", kl_ast_line(n), L->var);
        }
        kl_affine_release(&a);
    } else {
        /* one lane: the statement holding it, a statement of a block */
        TSNode st = n;
        while (!ts_node_is_null(st) && !rt_is(st, "expression_statement")) st = ts_node_parent(st);
        if (ts_node_is_null(st) || !rt_is(ts_node_parent(st), "compound_statement")) {
            row_parallel__why(r->why, sizeof r->why, "the store at line %u is not a statement of its own in a block", kl_ast_line(n));
            return;
        }
        bool seen = false;
        for (unsigned i = 0; i < r->nstores; i++) seen |= ts_node_eq(r->stores[i], st);
        if (!seen) {
            if (r->nstores >= RP_MAXLOOP) {
                row_parallel__why(r->why, sizeof r->why, "too many stores outside the row loops");
                return;
            }
            r->stores[r->nstores++] = st;
        }
    }
    add_acc(s, n, arr, index, true);
}

/* An assignment or ++/-- to an identifier inside a row loop: a local of the loop, the loop's own
 * step, or a reduction. */
static void scalar_update(scan *s, TSNode n, TSNode target)
{
    rp_row *r = s->r;
    const kl_rule_ctx *ctx = s->ctx;
    if (s->loop < 0) return;
    rp_loop *L = &r->loops[s->loop];
    char v[64];
    rt_text_copy(ctx, target, v, sizeof v);
    if (L->is_while && ts_node_eq(row_parallel__stmt_expr(L->update), n)) return;
    if (!strcmp(v, L->var)) {
        row_parallel__why(r->why, sizeof r->why, "line %u assigns the loop variable %s inside the loop", kl_ast_line(n), v);
        return;
    }
    if (!ts_node_is_null(rt_find_decl(ctx, L->node, v, true, NULL))) return; /* a local of the loop */
    char op[16];
    if (!reduction_of(ctx, n, v, op, sizeof op)) {
        row_parallel__why(r->why, sizeof r->why, "the loop at line %u carries %s with an update at line %u that is not a reduction (sum, max, min, count)",
                kl_ast_line(L->node), v, kl_ast_line(n));
        return;
    }
    for (unsigned i = 0; i < L->nred; i++)
        if (!strcmp(L->reds[i].var, v)) {
            if (strcmp(L->reds[i].op, op))
                row_parallel__why(r->why, sizeof r->why, "the loop at line %u updates %s by two different operations", kl_ast_line(L->node), v);
            return;
        }
    if (L->nred >= RP_MAXRED) {
        row_parallel__why(r->why, sizeof r->why, "the loop at line %u carries more than %d reductions", kl_ast_line(L->node), RP_MAXRED);
        return;
    }
    kl_snprintf(L->reds[L->nred].var, sizeof L->reds[L->nred].var, "%s", v);
    kl_snprintf(L->reds[L->nred].op, sizeof L->reds[L->nred].op, "%s", op);
    L->nred++;
}

static bool scan_visit(TSNode n, void *user);

/* Is n inside the row body only through blocks (no if, switch, loop between)? */
static bool top_level(const scan *s, TSNode n)
{
    for (TSNode p = ts_node_parent(n); !ts_node_is_null(p); p = ts_node_parent(p)) {
        if (ts_node_eq(p, s->r->rbody)) return true;
        if (!rt_is(p, "compound_statement")) return false;
    }
    return false;
}

static bool scan_visit(TSNode n, void *user)
{
    scan *s = user;
    rp_row *r = s->r;
    const kl_rule_ctx *ctx = s->ctx;
    if (r->why[0]) return false;
    if (ts_node_end_byte(n) <= r->from && !ts_node_eq(n, r->rbody)) return false;
    const char *t = ts_node_type(n);
    if (s->loop < 0 && (!strcmp(t, "for_statement") || !strcmp(t, "while_statement") || !strcmp(t, "do_statement") ||
                        !strcmp(t, "for_range_loop"))) {
        if (!top_level(s, n))
            return row_parallel__why(r->why, sizeof r->why, "the loop at line %u is inside a condition: the lanes' exchange needs every lane",
                           kl_ast_line(n));
        if (r->nloops >= RP_MAXLOOP) return row_parallel__why(r->why, sizeof r->why, "more than %d loops over the row", RP_MAXLOOP);
        rp_loop *L = &r->loops[r->nloops];
        if (!plain_loop(ctx, n, L, r)) return false;
        r->nloops++;
        scan inner = *s;
        inner.loop = (int)(r->nloops - 1);
        kl_ast_walk(rt_field(n, "body"), scan_visit, &inner);
        if (!L->is_while) {
            /* reads in the condition and the start */
            kl_ast_walk(rt_field(n, "condition"), scan_visit, &inner);
        }
        return false;
    }
    if (!strcmp(t, "break_statement") && s->loop >= 0)
        return row_parallel__why(r->why, sizeof r->why, "line %u: a break leaves the loop over the row early", kl_ast_line(n));
    if (!strcmp(t, "goto_statement")) return row_parallel__why(r->why, sizeof r->why, "line %u: goto", kl_ast_line(n));
    if (!strcmp(t, "return_statement") && s->loop >= 0)
        return row_parallel__why(r->why, sizeof r->why, "line %u: a return inside the loop over the row", kl_ast_line(n));
    if (!strcmp(t, "call_expression")) {
        char f[64];
        rt_text_copy(ctx, rt_field(n, "function"), f, sizeof f);
        if (!strcmp(f, "__syncthreads") || !strncmp(f, "__shfl", 6) || !strcmp(f, "__syncwarp"))
            return row_parallel__why(r->why, sizeof r->why, "line %u: %s: the threads already cooperate", kl_ast_line(n), f);
        if (is_atomic(ctx, n) && ts_node_named_child_count(rt_field(n, "arguments")) >= 1) {
            memory_write(s, n, ts_node_named_child(rt_field(n, "arguments"), 0));
            return true;
        }
        return true;
    }
    if (!strcmp(t, "assignment_expression") || !strcmp(t, "update_expression")) {
        TSNode target = kl_ast_unparen(rt_field(n, !strcmp(t, "assignment_expression") ? "left" : "argument"));
        if (rt_is(target, "identifier")) {
            scalar_update(s, n, target);
        } else {
            memory_write(s, n, target);
            /* the right side's reads */
            if (!strcmp(t, "assignment_expression")) kl_ast_walk(rt_field(n, "right"), scan_visit, s);
            return false;
        }
        return true;
    }
    if (!strcmp(t, "subscript_expression")) {
        char arr[64];
        TSNode index;
        if (lvalue_array(ctx, n, arr, sizeof arr, &index)) add_acc(s, n, arr, index, false);
        return true;
    }
    return true;
}

/* The statement before loop L that gives reduction var v its value: `T v = X;` or `v = X;` with
 * nothing between mentioning v. The value node, or null. */
static TSNode reduction_init(const kl_rule_ctx *ctx, TSNode loop, const char *v)
{
    TSNode st = loop;
    for (st = rt_prev_stmt(st); !ts_node_is_null(st); st = rt_prev_stmt(st)) {
        if (!rt_count_ident(ctx, st, v)) continue;
        if (rt_is(st, "declaration")) {
            uint32_t c = ts_node_named_child_count(st);
            for (uint32_t i = 0; i < c; i++) {
                TSNode d = ts_node_named_child(st, i);
                if (rt_is(d, "init_declarator") && rt_text_is(ctx, kl_ast_declarator_name(d), v)) return rt_field(d, "value");
            }
            return row_parallel__null;
        }
        TSNode a = row_parallel__stmt_expr(st);
        if (rt_is(a, "assignment_expression") && row_parallel__op_is(ctx, a, "=") && rt_text_is(ctx, rt_field(a, "left"), v))
            return rt_field(a, "right");
        return row_parallel__null;
    }
    return row_parallel__null;
}

static bool zero_literal(const kl_rule_ctx *ctx, TSNode n)
{
    char t[32];
    rt_text_unblank_to(ctx, kl_ast_unparen(n), t, sizeof t);
    static const char *const z[] = {"0", "0.0f", "0.f", "0.0", "0.", "0u", "0U", "0ull", "0ll", "0.0F", "0l", "0ul", NULL};
    for (unsigned i = 0; z[i]; i++)
        if (!strcmp(t, z[i])) return true;
    return false;
}

/* Analyse the kernel for the applicable side; true when it has a row per thread at all (a site). */
bool row_parallel__analyse_row(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *name, rp_row *r)
{
    memset(r, 0, sizeof *r);
    r->fn = fn;
    r->body = kl_ast_function_body(fn);
    if (ts_node_is_null(r->body)) return false;
    /* the row declaration: the first top-level declaration whose value has threadIdx.x with
     * coefficient 1 and blockIdx.x */
    uint32_t c = ts_node_named_child_count(r->body);
    uint32_t i = 0;
    for (; i < c && ts_node_is_null(r->decl); i++) {
        TSNode st = ts_node_named_child(r->body, i);
        TSNode d = row_parallel__single_init(st);
        if (ts_node_is_null(d)) continue;
        kl_affine a = {0};
        if (kl_affine_of(ax, rt_field(d, "value"), &a) != KL_OK) return false;
        int64_t tx = 0;
        bool ok = a.ok && kl_affine_coef_int(&a, "threadIdx.x", &tx) && tx == 1 && kl_affine_coef(&a, "blockIdx.x");
        if (ok) {
            const char *bc = kl_affine_coef(&a, "blockIdx.x");
            int64_t bci = 0;
            bool other = a.nterms != 2 || !a.const_is_int || a.const_int != 0;
            if (other) row_parallel__why(r->why, sizeof r->why, "the row index at line %u is not blockIdx.x * B + threadIdx.x", kl_ast_line(st));
            else if (!kl_affine_coef_int(&a, "blockIdx.x", &bci) && strcmp(bc, "blockDim.x"))
                row_parallel__why(r->why, sizeof r->why, "the row index at line %u multiplies blockIdx.x by %s, not the block size", kl_ast_line(st), bc);
            r->decl = st;
            r->init = rt_field(d, "value");
            rt_text_copy(ctx, kl_ast_declarator_name(d), r->row, sizeof r->row);
            if (kl_affine_coef_int(&a, "blockIdx.x", &bci)) r->block = bci;
        }
        kl_affine_release(&a);
    }
    if (ts_node_is_null(r->decl) || !r->row[0]) return false;
    /* the guard: the next statements that use the row */
    TSNode st = rt_next_stmt(r->decl);
    while (rt_is(st, "declaration") && !rt_count_ident(ctx, st, r->row)) st = rt_next_stmt(st);
    if (!rt_is(st, "if_statement")) return false;
    TSNode cond = row_parallel__cond_expr(rt_field(st, "condition"));
    TSNode cons = rt_field(st, "consequence");
    if (!rt_is(cond, "binary_expression") || !rt_text_is(ctx, rt_field(cond, "left"), r->row)) return false;
    r->guard = st;
    if (row_parallel__op_is(ctx, cond, "<") && rt_is(cons, "compound_statement") && ts_node_is_null(rt_field(st, "alternative"))) {
        r->rbody = cons;
        r->from = ts_node_start_byte(cons);
        if (!ts_node_is_null(rt_next_stmt(st)))
            row_parallel__why(r->why, sizeof r->why, "statements follow the row's guard at line %u", kl_ast_line(st));
    } else if (row_parallel__op_is(ctx, cond, ">=") && rt_is(cons, "return_statement") && ts_node_is_null(rt_field(st, "alternative"))) {
        r->early = true;
        r->rbody = r->body;
        r->from = ts_node_end_byte(st);
    } else {
        return false;
    }
    /* the block size */
    int64_t bs = 0;
    char why[300] = "";
    if (!row_parallel__launch_block(ctx, name, &bs, &r->launches, why, sizeof why)) {
        /* said after the scan (which stops at the first reason) */
    } else if (r->block && r->block != bs) {
        kl_snprintf(why, sizeof why, "the row index multiplies blockIdx.x by %lld but the block is %lld threads",
                    (long long)r->block, (long long)bs);
    }
    r->block = bs;
    /* the row loops, stores, reductions */
    scan s = {ctx, ax, r, -1};
    char early_why[400];
    kl_snprintf(early_why, sizeof early_why, "%s", r->why);
    r->why[0] = '\0';
    kl_ast_walk(r->rbody, scan_visit, &s);
    if (!r->nloops && !r->why[0]) return false; /* nothing to spread */
    if (early_why[0]) kl_snprintf(r->why, sizeof r->why, "%s", early_why);
    else if (why[0] && !r->why[0]) kl_snprintf(r->why, sizeof r->why, "%s", why);
    if (r->why[0]) return true;
    /* the row's other uses of the row loop's variable: a while's variable after its loop */
    for (unsigned k = 0; k < r->nloops; k++) {
        rp_loop *L = &r->loops[k];
        if (L->is_while) {
            unsigned all = rt_count_ident(ctx, r->rbody, L->var);
            unsigned in = rt_count_ident(ctx, L->node, L->var) + rt_count_ident(ctx, rt_prev_stmt(L->node), L->var);
            if (all != in) return row_parallel__why(r->why, sizeof r->why, "%s is used after its while loop at line %u", L->var, kl_ast_line(L->node)), true;
        }
        /* a reduction read elsewhere in its loop is a loop-carried dependence (a prefix) */
        for (unsigned q = 0; q < L->nred; q++) {
            const rp_red *rd = &L->reds[q];
            /* each reduction statement uses v once (+=, ++) or twice (v = v + e, v = f(v, e)) */
            unsigned uses = rt_count_ident(ctx, rt_field(L->node, "body"), rd->var);
            unsigned in_red = 0;
            TSNode stack[256];
            unsigned sp = 0;
            stack[sp++] = rt_field(L->node, "body");
            while (sp) {
                TSNode x = stack[--sp];
                if ((rt_is(x, "assignment_expression") && rt_text_is(ctx, kl_ast_unparen(rt_field(x, "left")), rd->var)) ||
                    (rt_is(x, "update_expression") && rt_text_is(ctx, kl_ast_unparen(rt_field(x, "argument")), rd->var))) {
                    in_red += rt_count_ident(ctx, x, rd->var);
                    continue;
                }
                uint32_t nc = ts_node_named_child_count(x);
                for (uint32_t j = 0; j < nc && sp < 256; j++) stack[sp++] = ts_node_named_child(x, j);
            }
            if (uses != in_red)
                return row_parallel__why(r->why, sizeof r->why, "%s is read inside the loop at line %u besides its own update: a loop-carried "
                                  "dependence that is not a reduction (a prefix?)",
                               rd->var, kl_ast_line(L->node)),
                       true;
            if (!strcmp(rd->op, "+")) {
                TSNode init = reduction_init(ctx, L->node, rd->var);
                if (ts_node_is_null(init) || !zero_literal(ctx, init))
                    return row_parallel__why(r->why, sizeof r->why, "the sum %s of the loop at line %u does not start at 0 right before it: every "
                                      "lane would add its start",
                                   rd->var, kl_ast_line(L->node)),
                           true;
            }
        }
    }
    /* a row element written by one lane and read by another */
    for (unsigned w = 0; w < r->nacc; w++) {
        const rp_acc *W = &r->acc[w];
        if (!W->write) continue;
        for (unsigned k = 0; k < r->nacc; k++) {
            const rp_acc *R = &r->acc[k];
            if (R->write || strcmp(R->array, W->array)) continue;
            bool same = W->loop >= 0 && R->loop >= 0 && !strcmp(W->index, R->index) &&
                        (W->loop == R->loop || !strcmp(r->loops[W->loop].start_text, r->loops[R->loop].start_text));
            if (!same)
                return row_parallel__why(r->why, sizeof r->why, "%s is written at line %u and read at line %u: another lane may read what one wrote",
                               W->array, kl_ast_line(W->node), kl_ast_line(R->node)),
                       true;
        }
    }
    return true;
}

/* ---- apply ---------------------------------------------------------------------------------------- */

static void combine_step(char *buf, size_t size, const char *op, const char *v, const char *other)
{
    if (!strcmp(op, "+")) kl_snprintf(buf, size, "%s += %s", v, other);
    else kl_snprintf(buf, size, "%s = %s(%s, %s)", v, op, v, other);
}

/* The type of a reduction variable (its declaration in the kernel). */
static void var_type(const kl_rule_ctx *ctx, TSNode fn, const char *v, char *buf, size_t size)
{
    TSNode decl = rt_find_decl(ctx, fn, v, true, NULL);
    TSNode t = rt_field(decl, "type");
    if (ts_node_is_null(t)) kl_snprintf(buf, size, "float");
    else rt_text_copy(ctx, t, buf, size);
}

/* Multiply the x extent of a launch's grid by mult: `G * M`, `dim3(X * M, Y)`, or for a dim3
 * variable g, `dim3(g.x * M, g.y, g.z)`. */
static kl_status grid_mul(const kl_rule_ctx *ctx, const kl_launch_site *l, const char *mult, kl_edits *out)
{
    TSNode g = l->grid, gs = kl_ast_unparen(g);
    char gt[256];
    rt_text_copy(ctx, g, gt, sizeof gt);
    if (rt_is(gs, "call_expression") && rt_text_is(ctx, rt_field(gs, "function"), "dim3") &&
        ts_node_named_child_count(rt_field(gs, "arguments")) >= 1) {
        TSNode x = ts_node_named_child(rt_field(gs, "arguments"), 0);
        char xt[256];
        rt_text_copy(ctx, x, xt, sizeof xt);
        return kl_edits_addf(out, ts_node_start_byte(x), ts_node_end_byte(x), row_parallel__simple_operand(x) ? "%s * %s" : "(%s) * %s",
                             xt, mult);
    }
    if (rt_is(gs, "identifier")) {
        char tt[64];
        var_type(ctx, l->host_fn, gt, tt, sizeof tt);
        if (!strcmp(tt, "dim3"))
            return kl_edits_addf(out, ts_node_start_byte(g), ts_node_end_byte(g), "dim3(%s.x * %s, %s.y, %s.z)", gt, mult,
                                 gt, gt);
    }
    return kl_edits_addf(out, ts_node_start_byte(g), ts_node_end_byte(g), row_parallel__simple_operand(g) ? "%s * %s" : "(%s) * %s", gt,
                         mult);
}

static kl_status apply_launches(const kl_rule_ctx *ctx, const char *name, bool warp, int64_t threads, kl_edits *out,
                                kl_error *err)
{
    kl_launch_sites ls;
    kl_status st = kl_ast_launches(ctx->src, &ls, err);
    if (st != KL_OK) return st;
    for (unsigned i = 0; i < ls.count && st == KL_OK; i++) {
        const kl_launch_site *l = &ls.items[i];
        if (strcmp(l->kernel, name)) continue;
        if (warp) {
            st = grid_mul(ctx, l, "32", out);
        } else {
            /* the old block as the multiplier: its text when it is a scalar constant, else its value */
            char m[256];
            int64_t v = 0;
            if (kl_const_eval(ctx->src, l->host_fn, l->block, false, &v, NULL, 0)) {
                char bt[240];
                rt_text_copy(ctx, l->block, bt, sizeof bt);
                kl_snprintf(m, sizeof m, row_parallel__simple_operand(l->block) ? "%s" : "(%s)", bt);
            } else {
                row_parallel__block_1d(ctx, l->host_fn, l->block, &v, NULL, 0);
                kl_snprintf(m, sizeof m, "%lld", (long long)v);
            }
            st = grid_mul(ctx, l, m, out);
            if (st == KL_OK)
                st = kl_edits_addf(out, ts_node_start_byte(l->block), ts_node_end_byte(l->block), "%lld", (long long)threads);
        }
        if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    }
    kl_launch_sites_release(&ls);
    return st;
}

kl_status row_parallel__apply_row(const kl_rule_ctx *ctx, const kl_site *site, const rp_row *r, const json_t *params,
                           kl_edits *out, kl_error *err)
{
    if (r->why[0]) return kl_rule_not_applicable(err, "%s", r->why);
    const char *unit = "warp";
    int64_t threads = 256;
    kl_rule_param_str(&kl_rule_row_parallel, params, "unit", &unit);
    kl_rule_param_int(&kl_rule_row_parallel, params, "threads", &threads);
    bool warp = strcmp(unit, "block") != 0;
    if (warp && params && json_object_get(params, "threads"))
        return kl_rule_not_applicable(err, "threads is the block of unit=block; a warp per row keeps the launch's block "
                                           "(%lld threads; block-size changes it)",
                                      (long long)r->block);
    if (warp && (r->block % 32 || r->block < 32))
        return kl_rule_not_applicable(err, "the block of %s is %lld threads, not a multiple of 32: warps would straddle rows",
                                      site->kernel, (long long)r->block);
    char lane[32], o[32];
    rt_fresh_name(ctx, r->fn, "kl_lane", lane, sizeof lane);
    rt_fresh_name(ctx, r->fn, "kl_o", o, sizeof o);
    long long G = warp ? 32 : threads;
    char ind[64];
    kl_rules_indent(ctx, ts_node_start_byte(r->decl), ind, sizeof ind);
    /* the row and the lane */
    char *e = kl_node_text(ctx->src, r->init);
    if (!e) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    kl_status st = warp ? kl_edits_addf(out, ts_node_start_byte(r->init), ts_node_end_byte(r->init), "(%s) / 32", e)
                        : kl_edits_add(out, ts_node_start_byte(r->init), ts_node_end_byte(r->init), "blockIdx.x");
    free(e);
    uint32_t le = rt_line_end(ctx, ts_node_end_byte(r->decl));
    if (st == KL_OK)
        st = kl_edits_addf(out, le, le, "%sconst int %s = threadIdx.x%s;\n", ind, lane, warp ? " % 32" : "");
    /* the loops */
    for (unsigned k = 0; k < r->nloops && st == KL_OK; k++) {
        const rp_loop *L = &r->loops[k];
        if (zero_literal(ctx, L->start))
            st = kl_edits_add(out, ts_node_start_byte(L->start), ts_node_end_byte(L->start), lane);
        else
            st = kl_edits_addf(out, ts_node_end_byte(L->start), ts_node_end_byte(L->start), " + %s", lane);
        TSNode upd = L->is_while ? row_parallel__stmt_expr(L->update) : L->update;
        if (st == KL_OK)
            st = kl_edits_addf(out, ts_node_start_byte(upd), ts_node_end_byte(upd), "%s += %lld", L->var, G);
        if (!L->nred || st != KL_OK) continue;
        char lind[64];
        kl_rules_indent(ctx, ts_node_start_byte(L->node), lind, sizeof lind);
        uint32_t at = rt_line_end(ctx, ts_node_end_byte(L->node));
        kl_strbuf sb = KL_STRBUF_INIT;
        for (unsigned q = 0; q < L->nred; q++) {
            const rp_red *rd = &L->reds[q];
            char shfl[200], step[300];
            kl_snprintf(shfl, sizeof shfl, "__shfl_xor_sync(0xffffffff, %s, %s)", rd->var, o);
            combine_step(step, sizeof step, rd->op, rd->var, shfl);
            kl_strbuf_addf(&sb, "%sfor (int %s = 16; %s > 0; %s >>= 1) %s;\n", lind, o, o, o, step);
            if (!warp) {
                char type[64], part[32], pstep[200], pw[64];
                var_type(ctx, r->fn, rd->var, type, sizeof type);
                rt_fresh_name(ctx, r->fn, "kl_part", part, sizeof part);
                kl_snprintf(pw, sizeof pw, "%s[kl_w]", part);
                combine_step(pstep, sizeof pstep, rd->op, rd->var, pw);
                kl_strbuf_addf(&sb,
                               "%s{\n"
                               "%s    __shared__ %s %s[%lld];\n"
                               "%s    if (%s %% 32 == 0) %s[%s / 32] = %s;\n"
                               "%s    __syncthreads();\n"
                               "%s    %s = %s[0];\n"
                               "%s    for (int kl_w = 1; kl_w < %lld; kl_w++) %s;\n"
                               "%s}\n",
                               lind, lind, type, part, G / 32, lind, lane, part, lane, rd->var, lind, lind, rd->var, part,
                               lind, G / 32, pstep, lind);
            }
        }
        st = sb.failed ? KL_ERR_NOMEM : kl_edits_add(out, at, at, kl_strbuf_str(&sb));
        kl_strbuf_release(&sb);
    }
    for (unsigned k = 0; k < r->nstores && st == KL_OK; k++)
        st = kl_edits_addf(out, ts_node_start_byte(r->stores[k]), ts_node_start_byte(r->stores[k]), "if (%s == 0) ", lane);
    if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    return apply_launches(ctx, site->kernel, warp, threads, out, err);
}
