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

#define RP_MAXLOOP 16
#define RP_MAXRED 8
#define RP_MAXACC 64

static const TSNode null_node = {{0}, 0, 0};

/* Text with the blanks removed, into buf. */
static TSNode cond_expr(TSNode n)
{
    if (rt_is(n, "condition_clause")) n = ts_node_named_child(n, 0);
    return kl_ast_unparen(n);
}

static bool op_is(const kl_rule_ctx *ctx, TSNode n, const char *op) { return rt_text_is(ctx, rt_field(n, "operator"), op); }

static bool is_inside(TSNode n, TSNode outer)
{
    return !ts_node_is_null(outer) && ts_node_start_byte(n) >= ts_node_start_byte(outer) &&
           ts_node_end_byte(n) <= ts_node_end_byte(outer);
}

/* The expression of `X;`, or a null node. */
static TSNode stmt_expr(TSNode st)
{
    if (!rt_is(st, "expression_statement") || ts_node_named_child_count(st) != 1) return null_node;
    return ts_node_named_child(st, 0);
}

/* `v++`, `++v`, `v += 1`, `v = v + 1` (k = 1) or `v += K` (*step = K's node): true when n
 * increments identifier v. */
static bool increments(const kl_rule_ctx *ctx, TSNode n, const char *v, TSNode *step)
{
    n = kl_ast_unparen(n);
    *step = null_node;
    if (rt_is(n, "update_expression"))
        return rt_text_is(ctx, rt_field(n, "argument"), v) && op_is(ctx, n, "++");
    if (rt_is(n, "assignment_expression") && rt_text_is(ctx, rt_field(n, "left"), v)) {
        if (op_is(ctx, n, "+=")) {
            *step = rt_field(n, "right");
            return true;
        }
    }
    return false;
}

/* The declaration statement declaring `name` inside n (first), or a null node. */
static TSNode find_decl(const kl_rule_ctx *ctx, TSNode in, const char *name, TSNode *declarator)
{
    return rt_find_decl(ctx, in, name, true, declarator);
}

/* The range deleting a statement: its whole lines when alone on them. */
static kl_status delete_stmt(const kl_rule_ctx *ctx, TSNode st, kl_edits *out)
{
    uint32_t a, b;
    rt_stmt_range(ctx, st, NULL, &a, &b);
    return kl_edits_add(out, a, b, "");
}

/* A simple operand (identifier, number, call, field): no parentheses needed around it. */
static bool simple_operand(TSNode n)
{
    return rt_is(n, "identifier") || rt_is(n, "number_literal") || rt_is(n, "call_expression") ||
           rt_is(n, "field_expression") || rt_is(n, "parenthesized_expression") || rt_is(n, "subscript_expression");
}

/* The only declarator of a declaration when it is `T name = value` (qualifiers allowed), else null. */
static TSNode single_init(TSNode decl)
{
    if (!rt_is(decl, "declaration")) return null_node;
    TSNode found = null_node;
    uint32_t c = ts_node_named_child_count(decl);
    for (uint32_t i = 0; i < c; i++) {
        TSNode k = ts_node_named_child(decl, i);
        if (rt_is(k, "init_declarator") || rt_is(k, "identifier") || rt_is(k, "pointer_declarator") ||
            rt_is(k, "array_declarator")) {
            if (!ts_node_is_null(found)) return null_node;
            found = k;
        }
    }
    return rt_is(found, "init_declarator") ? found : null_node;
}

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
        return op_is(ctx, n, "++") && uses == 1;
    }
    if (!rt_is(n, "assignment_expression") || !rt_text_is(ctx, rt_field(n, "left"), v)) return false;
    TSNode r = kl_ast_unparen(rt_field(n, "right"));
    if (op_is(ctx, n, "+=") || op_is(ctx, n, "-=")) {
        kl_snprintf(op, opsize, "+");
        return uses == 1;
    }
    if (!op_is(ctx, n, "=") || uses != 2) return false;
    if (rt_is(r, "binary_expression") && op_is(ctx, r, "+") &&
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

/* ---- the applicable side: a row per thread -------------------------------------------------------- */

typedef struct rp_red {
    char var[64], op[16];
} rp_red;

typedef struct rp_loop {
    TSNode node;          /* for_statement / while_statement */
    bool is_while;
    char var[64];
    TSNode start;         /* the start value */
    TSNode update;        /* the increment (for: the update; while: the expression statement) */
    char start_text[128];
    rp_red reds[RP_MAXRED];
    unsigned nred;
} rp_loop;

typedef struct rp_acc {
    char array[64];
    char index[160];
    int loop;             /* -1: outside the row loops */
    bool write;
    TSNode node;
} rp_acc;

typedef struct rp_row {
    TSNode fn, body;      /* the kernel, its body */
    TSNode decl, init;    /* `T row = E;`, E */
    char row[64];
    TSNode guard;         /* the if */
    bool early;           /* `if (row >= R) return;` */
    TSNode rbody;         /* the row body: the if's compound, or the kernel body (early) */
    uint32_t from;        /* statements of rbody from this byte */
    rp_loop loops[RP_MAXLOOP];
    unsigned nloops;
    TSNode stores[RP_MAXLOOP];  /* statements done by one lane */
    unsigned nstores;
    rp_acc acc[RP_MAXACC];
    unsigned nacc;
    int64_t block;        /* the launches' block size */
    unsigned launches;
    char why[400];
} rp_row;

/* A 1-D compile-time block: a constant, `dim3(X)`, or a `dim3 b(X)` of the host function. */
static bool block_1d(const kl_rule_ctx *ctx, TSNode host, TSNode block, int64_t *v, char *w, size_t wn)
{
    if (kl_const_eval(ctx->src, host, block, false, v, w, wn)) return true;
    TSNode b = kl_ast_unparen(block);
    TSNode decl = null_node;
    if (rt_is(b, "identifier")) {
        char name[64];
        rt_text_copy(ctx, b, name, sizeof name);
        decl = find_decl(ctx, host, name, NULL);
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
static bool launch_block(const kl_rule_ctx *ctx, const char *name, int64_t *bs, unsigned *n, char *why, size_t wn)
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
        if (ts_node_is_null(l->block) || !block_1d(ctx, l->host_fn, l->block, &v, w, sizeof w)) {
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

static bool why_set(rp_row *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool why_set(rp_row *r, const char *fmt, ...)
{
    if (r->why[0]) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
    return false;
}

/* `T c = S;` as the statement before a while loop: the declarator's value. */
static TSNode decl_value_of(const kl_rule_ctx *ctx, TSNode st, const char *var)
{
    TSNode d = single_init(st);
    if (ts_node_is_null(d) || !rt_text_is(ctx, kl_ast_declarator_name(d), var)) return null_node;
    return rt_field(d, "value");
}

/* A row loop: `for (T c = S; c < N; c++)` or `T c = S; while (c < N) { …; c++; }`. */
static bool plain_loop(const kl_rule_ctx *ctx, TSNode st, rp_loop *L, rp_row *r)
{
    memset(L, 0, sizeof *L);
    L->node = st;
    TSNode cond;
    if (rt_is(st, "for_statement")) {
        TSNode init = rt_field(st, "initializer");
        TSNode d = single_init(init);
        if (ts_node_is_null(d))
            return why_set(r, "the loop at line %u does not declare its variable with a start value in its initializer",
                           kl_ast_line(st));
        rt_text_copy(ctx, kl_ast_declarator_name(d), L->var, sizeof L->var);
        L->start = rt_field(d, "value");
        L->update = rt_field(st, "update");
        cond = kl_ast_unparen(rt_field(st, "condition"));
    } else if (rt_is(st, "while_statement")) {
        L->is_while = true;
        cond = cond_expr(rt_field(st, "condition"));
        if (rt_is(cond, "binary_expression")) rt_text_copy(ctx, rt_field(cond, "left"), L->var, sizeof L->var);
        L->start = decl_value_of(ctx, rt_prev_stmt(st), L->var);
        TSNode body = rt_field(st, "body"), last = null_node;
        if (rt_is(body, "compound_statement"))
            for (uint32_t i = ts_node_named_child_count(body); i-- > 0;) {
                TSNode k = ts_node_named_child(body, i);
                if (!rt_is(k, "comment")) {
                    last = k;
                    break;
                }
            }
        L->update = last;
        if (ts_node_is_null(L->start))
            return why_set(r, "the while loop at line %u is not preceded by the declaration of its variable", kl_ast_line(st));
    } else {
        return why_set(r, "line %u: a do-while loop over the row is not supported", kl_ast_line(st));
    }
    if (!rt_is(cond, "binary_expression") || !rt_text_is(ctx, rt_field(cond, "left"), L->var) ||
        (!op_is(ctx, cond, "<") && !op_is(ctx, cond, "<=")))
        return why_set(r, "the loop at line %u is not `%s < bound`", kl_ast_line(st), L->var[0] ? L->var : "c");
    TSNode step;
    TSNode upd = L->is_while ? stmt_expr(L->update) : L->update;
    if (ts_node_is_null(upd) || !increments(ctx, upd, L->var, &step) || (!ts_node_is_null(step) && !rt_text_is(ctx, step, "1")))
        return why_set(r, "the loop at line %u does not step %s by 1", kl_ast_line(st), L->var);
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
    *index = null_node;
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
    if (rt_is(n, "binary_expression") && op_is(ctx, n, "+")) {
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
        why_set(r, "more than %d array accesses in the row", RP_MAXACC);
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
        TSNode decl = find_decl(ctx, r->fn, v, &dd);
        if (rt_is(decl, "declaration") && (rt_is(dd, "identifier") || rt_is(dd, "init_declarator")) &&
            !rt_is(rt_field(dd, "declarator"), "pointer_declarator")) {
            if (s->loop >= 0 && ts_node_is_null(find_decl(ctx, r->loops[s->loop].node, v, NULL)))
                why_set(r, "the loop at line %u carries the local %s with an update at line %u that is not a reduction "
                           "(sum, max, min, count)",
                        kl_ast_line(r->loops[s->loop].node), v, kl_ast_line(n));
            return;
        }
    }
    if (!lvalue_array(ctx, target, arr, sizeof arr, &index)) {
        why_set(r, "line %u writes through an expression that is not an array element", kl_ast_line(n));
        return;
    }
    /* a local array (not a pointer) */
    TSNode decl_d;
    TSNode decl = find_decl(ctx, r->fn, arr, &decl_d);
    if (!ts_node_is_null(decl) && rt_is(decl_d, "array_declarator")) {
        why_set(r, "line %u writes the local array %s: its elements would be spread over the lanes", kl_ast_line(n), arr);
        return;
    }
    if (s->loop >= 0) {
        const rp_loop *L = &r->loops[s->loop];
        if (ts_node_is_null(index)) {
            why_set(r, "the store at line %u does not move with %s: the lanes would race", kl_ast_line(n), L->var);
            return;
        }
        kl_affine a = {0};
        if (kl_affine_of(s->ax, index, &a) != KL_OK) {
            why_set(r, "out of memory");
            return;
        }
        int64_t k = 0;
        bool moves = a.ok && kl_affine_coef_int(&a, L->var, &k) && k != 0;
        if (!a.ok && !L->is_while)
            why_set(r, "the store at line %u has an index that is not affine in %s (%s)", kl_ast_line(n), L->var,
                    a.why ? a.why : "?");
        else if (!moves && !L->is_while)
            why_set(r, "the store at line %u does not move with %s: the lanes would race", kl_ast_line(n), L->var);
        else if (L->is_while) {
            /* a while loop's variable is not a loop variable of the analysis: the index must name it */
            if (!rt_count_ident(ctx, index, L->var))
                why_set(r, "the store at line %u does not move with %s: the lanes would race", kl_ast_line(n), L->var);
        }
        kl_affine_release(&a);
    } else {
        /* one lane: the statement holding it, a statement of a block */
        TSNode st = n;
        while (!ts_node_is_null(st) && !rt_is(st, "expression_statement")) st = ts_node_parent(st);
        if (ts_node_is_null(st) || !rt_is(ts_node_parent(st), "compound_statement")) {
            why_set(r, "the store at line %u is not a statement of its own in a block", kl_ast_line(n));
            return;
        }
        bool seen = false;
        for (unsigned i = 0; i < r->nstores; i++) seen |= ts_node_eq(r->stores[i], st);
        if (!seen) {
            if (r->nstores >= RP_MAXLOOP) {
                why_set(r, "too many stores outside the row loops");
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
    if (L->is_while && ts_node_eq(stmt_expr(L->update), n)) return;
    if (!strcmp(v, L->var)) {
        why_set(r, "line %u assigns the loop variable %s inside the loop", kl_ast_line(n), v);
        return;
    }
    if (!ts_node_is_null(find_decl(ctx, L->node, v, NULL))) return; /* a local of the loop */
    char op[16];
    if (!reduction_of(ctx, n, v, op, sizeof op)) {
        why_set(r, "the loop at line %u carries %s with an update at line %u that is not a reduction (sum, max, min, count)",
                kl_ast_line(L->node), v, kl_ast_line(n));
        return;
    }
    for (unsigned i = 0; i < L->nred; i++)
        if (!strcmp(L->reds[i].var, v)) {
            if (strcmp(L->reds[i].op, op))
                why_set(r, "the loop at line %u updates %s by two different operations", kl_ast_line(L->node), v);
            return;
        }
    if (L->nred >= RP_MAXRED) {
        why_set(r, "the loop at line %u carries more than %d reductions", kl_ast_line(L->node), RP_MAXRED);
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
            return why_set(r, "the loop at line %u is inside a condition: the lanes' exchange needs every lane",
                           kl_ast_line(n));
        if (r->nloops >= RP_MAXLOOP) return why_set(r, "more than %d loops over the row", RP_MAXLOOP);
        rp_loop *L = &r->loops[r->nloops];
        if (!plain_loop(ctx, n, L, r)) return false;
        r->nloops++;
        scan inner = *s;
        inner.loop = (int)(r->nloops - 1);
        rt_walk(rt_field(n, "body"), scan_visit, &inner);
        if (!L->is_while) {
            /* reads in the condition and the start */
            rt_walk(rt_field(n, "condition"), scan_visit, &inner);
        }
        return false;
    }
    if (!strcmp(t, "break_statement") && s->loop >= 0)
        return why_set(r, "line %u: a break leaves the loop over the row early", kl_ast_line(n));
    if (!strcmp(t, "goto_statement")) return why_set(r, "line %u: goto", kl_ast_line(n));
    if (!strcmp(t, "return_statement") && s->loop >= 0)
        return why_set(r, "line %u: a return inside the loop over the row", kl_ast_line(n));
    if (!strcmp(t, "call_expression")) {
        char f[64];
        rt_text_copy(ctx, rt_field(n, "function"), f, sizeof f);
        if (!strcmp(f, "__syncthreads") || !strncmp(f, "__shfl", 6) || !strcmp(f, "__syncwarp"))
            return why_set(r, "line %u: %s: the threads already cooperate", kl_ast_line(n), f);
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
            if (!strcmp(t, "assignment_expression")) rt_walk(rt_field(n, "right"), scan_visit, s);
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
            return null_node;
        }
        TSNode a = stmt_expr(st);
        if (rt_is(a, "assignment_expression") && op_is(ctx, a, "=") && rt_text_is(ctx, rt_field(a, "left"), v))
            return rt_field(a, "right");
        return null_node;
    }
    return null_node;
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
static bool analyse_row(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *name, rp_row *r)
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
        TSNode d = single_init(st);
        if (ts_node_is_null(d)) continue;
        kl_affine a = {0};
        if (kl_affine_of(ax, rt_field(d, "value"), &a) != KL_OK) return false;
        int64_t tx = 0;
        bool ok = a.ok && kl_affine_coef_int(&a, "threadIdx.x", &tx) && tx == 1 && kl_affine_coef(&a, "blockIdx.x");
        if (ok) {
            const char *bc = kl_affine_coef(&a, "blockIdx.x");
            int64_t bci = 0;
            bool other = a.nterms != 2 || !a.const_is_int || a.const_int != 0;
            if (other) why_set(r, "the row index at line %u is not blockIdx.x * B + threadIdx.x", kl_ast_line(st));
            else if (!kl_affine_coef_int(&a, "blockIdx.x", &bci) && strcmp(bc, "blockDim.x"))
                why_set(r, "the row index at line %u multiplies blockIdx.x by %s, not the block size", kl_ast_line(st), bc);
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
    TSNode cond = cond_expr(rt_field(st, "condition"));
    TSNode cons = rt_field(st, "consequence");
    if (!rt_is(cond, "binary_expression") || !rt_text_is(ctx, rt_field(cond, "left"), r->row)) return false;
    r->guard = st;
    if (op_is(ctx, cond, "<") && rt_is(cons, "compound_statement") && ts_node_is_null(rt_field(st, "alternative"))) {
        r->rbody = cons;
        r->from = ts_node_start_byte(cons);
        if (!ts_node_is_null(rt_next_stmt(st)))
            why_set(r, "statements follow the row's guard at line %u", kl_ast_line(st));
    } else if (op_is(ctx, cond, ">=") && rt_is(cons, "return_statement") && ts_node_is_null(rt_field(st, "alternative"))) {
        r->early = true;
        r->rbody = r->body;
        r->from = ts_node_end_byte(st);
    } else {
        return false;
    }
    /* the block size */
    int64_t bs = 0;
    char why[300] = "";
    if (!launch_block(ctx, name, &bs, &r->launches, why, sizeof why)) {
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
    rt_walk(r->rbody, scan_visit, &s);
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
            if (all != in) return why_set(r, "%s is used after its while loop at line %u", L->var, kl_ast_line(L->node)), true;
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
                return why_set(r, "%s is read inside the loop at line %u besides its own update: a loop-carried "
                                  "dependence that is not a reduction (a prefix?)",
                               rd->var, kl_ast_line(L->node)),
                       true;
            if (!strcmp(rd->op, "+")) {
                TSNode init = reduction_init(ctx, L->node, rd->var);
                if (ts_node_is_null(init) || !zero_literal(ctx, init))
                    return why_set(r, "the sum %s of the loop at line %u does not start at 0 right before it: every "
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
                return why_set(r, "%s is written at line %u and read at line %u: another lane may read what one wrote",
                               W->array, kl_ast_line(W->node), kl_ast_line(R->node)),
                       true;
        }
    }
    return true;
}

/* ---- the present side: rows spread over lanes ----------------------------------------------------- */

typedef struct rp_sloop {
    TSNode node, start, update;  /* the loop, its start value, its update */
    TSNode start_rest;           /* the start without the lane (null: the start is the lane) */
    bool is_while;
    TSNode while_decl;           /* the while's declaration */
} rp_sloop;

typedef struct rp_present {
    TSNode fn, body;
    bool warp;                   /* lanes of a warp (else a block) */
    char lane[64];               /* the lane's name, or "threadIdx.x" */
    TSNode lane_decl;            /* `const int lane = threadIdx.x [% 32];` (null when threadIdx.x is used) */
    long long group;             /* 32, or the block size */
    TSNode row_decl, row_init;   /* W: `(E) / 32`; B: `blockIdx.x` (null when the kernel uses blockIdx.x directly) */
    TSNode row_e;                /* W: E */
    rp_sloop loops[RP_MAXLOOP];
    unsigned nloops;
    TSNode gone[32];             /* combine statements to delete */
    unsigned ngone;
    TSNode calls[16];            /* block-reduction helper calls: replaced by their first argument */
    unsigned ncalls;
    TSNode ifs[16];              /* `if (lane == 0) stmt` */
    unsigned nifs;
    TSNode shared[16];           /* __shared__ declarations only used by removed code */
    unsigned nshared;
    char why[400];
    char helper[64];
} rp_present;

static bool pwhy(rp_present *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool pwhy(rp_present *p, const char *fmt, ...)
{
    if (p->why[0]) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->why, sizeof p->why, fmt, ap);
    va_end(ap);
    return false;
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
    *rest = null_node;
    if (is_lane(ctx, p, v)) return true;
    if (rt_is(v, "binary_expression") && op_is(ctx, v, "+")) {
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
        TSNode d = single_init(init);
        if (ts_node_is_null(d)) return false;
        rt_text_copy(ctx, kl_ast_declarator_name(d), var, sizeof var);
        L->start = rt_field(d, "value");
        upd = rt_field(st, "update");
        L->update = upd;
    } else if (rt_is(st, "while_statement")) {
        TSNode cond = cond_expr(rt_field(st, "condition"));
        if (!rt_is(cond, "binary_expression")) return false;
        rt_text_copy(ctx, rt_field(cond, "left"), var, sizeof var);
        L->while_decl = rt_prev_stmt(st);
        L->start = decl_value_of(ctx, L->while_decl, var);
        TSNode body = rt_field(st, "body");
        if (!rt_is(body, "compound_statement") || ts_node_is_null(L->start)) return false;
        TSNode last = null_node;
        for (uint32_t i = ts_node_named_child_count(body); i-- > 0;) {
            TSNode k = ts_node_named_child(body, i);
            if (!rt_is(k, "comment")) {
                last = k;
                break;
            }
        }
        L->update = last;
        upd = stmt_expr(last);
        L->is_while = true;
    } else {
        return false;
    }
    if (!var[0] || ts_node_is_null(upd) || !increments(ctx, upd, var, &step) || !group_step(ctx, p, step)) return false;
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
        TSNode c = cond_expr(rt_field(n, "condition"));
        if (rt_is(c, "binary_expression") && op_is(ctx, c, "==") && is_lane(ctx, p, rt_field(c, "left")) &&
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
        rt_walk(kl_ast_function_body(fs[i]), coop_visit, &c);
        if (c.found) return true;
    }
    return false;
}

typedef struct left_scan {
    const kl_rule_ctx *ctx;
    rp_present *p;
} left_scan;

/* What stays after the removal must not cooperate: no lane, threadIdx.x, barrier or shuffle
 * outside what is rewritten. */
static bool left_visit(TSNode n, void *user)
{
    left_scan *s = user;
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
            return pwhy(p, "line %u: %s is not part of a reduction this transform recognises", kl_ast_line(n), f);
        char callee[128];
        if (rt_callee_name(ctx, n, callee, sizeof callee) && cooperates(ctx, callee, 0))
            return pwhy(p,
                        "line %u calls %s, a __device__ function of the file that synchronises, shuffles or reads "
                        "threadIdx, and is not a block reduction this transform recognises",
                        kl_ast_line(n), callee);
    }
    if (rt_is(n, "field_expression") && rt_is_builtin(ctx, n, "threadIdx", 0))
        return pwhy(p, "line %u uses threadIdx other than as the lane of a loop over the row: the threads share the row "
                       "in another way",
                    kl_ast_line(n));
    if (rt_is(n, "identifier") && p->lane[0] && strcmp(p->lane, "threadIdx.x") && rt_text_is(ctx, n, p->lane))
        return pwhy(p, "line %u uses the lane %s other than as the start of a loop over the row", kl_ast_line(n), p->lane);
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
static bool analyse_present(const kl_rule_ctx *ctx, TSNode fn, const char *name, rp_present *p)
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
        TSNode d = single_init(st);
        if (ts_node_is_null(d)) continue;
        char v[128];
        rt_text_unblank_to(ctx, rt_field(d, "value"), v, sizeof v);
        if (!strcmp(v, "threadIdx.x%32") || !strcmp(v, "threadIdx.x&31")) p->warp = true;
        else if (strcmp(v, "threadIdx.x")) continue;
        p->lane_decl = st;
        rt_text_copy(ctx, kl_ast_declarator_name(d), p->lane, sizeof p->lane);
        /* the row of a warp: `T row = (E) / 32;` declared before it */
        TSNode prev = rt_prev_stmt(st);
        if (p->warp && !ts_node_is_null(single_init(prev))) {
            TSNode pv = rt_field(single_init(prev), "value");
            if (rt_is(pv, "binary_expression") && op_is(ctx, pv, "/") && rt_text_is(ctx, rt_field(pv, "right"), "32") &&
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
    bool bs_ok = launch_block(ctx, name, &bs, &nl, why, sizeof why);
    p->group = p->warp ? 32 : bs;
    if (!p->warp && !bs_ok) {
        /* blockDim.x steps still show the site */
        p->group = -1;
    }
    pscan s = {ctx, p};
    rt_walk(p->body, present_visit, &s);
    if (!p->nloops) return false;
    if (!p->warp && !bs_ok) pwhy(p, "%s", why);
    if (p->warp && ts_node_is_null(p->row_decl))
        pwhy(p, "the lanes of a warp share a row, but no `T row = (E) / 32;` declaration precedes the lane");
    /* the row of a block */
    if (!p->warp) {
        for (uint32_t i = 0; i < c && ts_node_is_null(p->row_decl); i++) {
            TSNode st = ts_node_named_child(p->body, i);
            TSNode d = single_init(st);
            if (!ts_node_is_null(d) && rt_is_builtin(ctx, kl_ast_unparen(rt_field(d, "value")), "blockIdx", 'x')) {
                p->row_decl = st;
                p->row_init = rt_field(d, "value");
            }
        }
    }
    unused_shared(ctx, p);
    left_scan ls = {ctx, p};
    rt_walk(p->body, left_visit, &ls);
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
    if (analyse_row(ctx, ax, fn, name, r)) {
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
    if (analyse_present(ctx, fn, name, p)) {
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

/* ---- apply ---------------------------------------------------------------------------------------- */

static void combine_step(char *buf, size_t size, const char *op, const char *v, const char *other)
{
    if (!strcmp(op, "+")) kl_snprintf(buf, size, "%s += %s", v, other);
    else kl_snprintf(buf, size, "%s = %s(%s, %s)", v, op, v, other);
}

/* The type of a reduction variable (its declaration in the kernel). */
static void var_type(const kl_rule_ctx *ctx, TSNode fn, const char *v, char *buf, size_t size)
{
    TSNode decl = find_decl(ctx, fn, v, NULL);
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
        return kl_edits_addf(out, ts_node_start_byte(x), ts_node_end_byte(x), simple_operand(x) ? "%s * %s" : "(%s) * %s",
                             xt, mult);
    }
    if (rt_is(gs, "identifier")) {
        char tt[64];
        var_type(ctx, l->host_fn, gt, tt, sizeof tt);
        if (!strcmp(tt, "dim3"))
            return kl_edits_addf(out, ts_node_start_byte(g), ts_node_end_byte(g), "dim3(%s.x * %s, %s.y, %s.z)", gt, mult,
                                 gt, gt);
    }
    return kl_edits_addf(out, ts_node_start_byte(g), ts_node_end_byte(g), simple_operand(g) ? "%s * %s" : "(%s) * %s", gt,
                         mult);
}

/* The inverse of grid_mul: the grid's x extent without its `* M` (*mult receives M's node).
 * False when the grid is not of that form. */
static bool grid_unmul(const kl_rule_ctx *ctx, const kl_launch_site *l, TSNode *mult, uint32_t *a, uint32_t *b,
                       char *text, size_t size)
{
    TSNode g = kl_ast_unparen(l->grid), x = g;
    bool d3 = rt_is(g, "call_expression") && rt_text_is(ctx, rt_field(g, "function"), "dim3");
    if (d3) {
        TSNode args = rt_field(g, "arguments");
        if (ts_node_named_child_count(args) < 1) return false;
        x = kl_ast_unparen(ts_node_named_child(args, 0));
    }
    if (!rt_is(x, "binary_expression") || !op_is(ctx, x, "*")) return false;
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
                kl_snprintf(m, sizeof m, simple_operand(l->block) ? "%s" : "(%s)", bt);
            } else {
                block_1d(ctx, l->host_fn, l->block, &v, NULL, 0);
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

static kl_status apply_row(const kl_rule_ctx *ctx, const kl_site *site, const rp_row *r, const json_t *params,
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
        TSNode upd = L->is_while ? stmt_expr(L->update) : L->update;
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
        bool mul = grid_unmul(ctx, l, &mult, &ga, &gb, lt, sizeof lt);
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
        bool bsim = simple_operand(l->block);
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

static kl_status remove_present(const kl_rule_ctx *ctx, const kl_site *site, const rp_present *p, kl_edits *out,
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
        TSNode upd = L->is_while ? stmt_expr(L->update) : L->update;
        TSNode var = rt_is(upd, "assignment_expression") ? rt_field(upd, "left") : rt_field(upd, "argument");
        char v[64];
        rt_text_copy(ctx, var, v, sizeof v);
        if (st == KL_OK) st = kl_edits_addf(out, ts_node_start_byte(upd), ts_node_end_byte(upd), "%s++", v);
    }
    for (unsigned k = 0; k < p->ngone && st == KL_OK; k++) st = delete_stmt(ctx, p->gone[k], out);
    for (unsigned k = 0; k < p->nshared && st == KL_OK; k++) st = delete_stmt(ctx, p->shared[k], out);
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
    if (st == KL_OK && !ts_node_is_null(p->lane_decl)) st = delete_stmt(ctx, p->lane_decl, out);
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
            if (!grid_unmul(ctx, &ls.items[i], &b, &ga, &gb, lt, sizeof lt)) continue;
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
        rt_text_copy(ctx, kl_ast_declarator_name(single_init(p->row_decl)), name, sizeof name);
        st = kl_edits_add(out, ts_node_start_byte(p->row_init), ts_node_end_byte(p->row_init),
                          "blockIdx.x * blockDim.x + threadIdx.x");
        uint32_t le = rt_line_end(ctx, ts_node_end_byte(p->row_decl));
        if (st == KL_OK) st = kl_edits_addf(out, le, le, "%sif (%s >= %s) return;\n", ind, name, rows);
        bx_scan bs = {ctx, out, name, p->row_decl, KL_OK};
        if (st == KL_OK) rt_walk(p->body, bx_visit, &bs), st = bs.st;
    } else if (st == KL_OK) {
        rt_fresh_name(ctx, p->fn, "kl_row", row, sizeof row);
        uint32_t at = rt_line_start(ctx, ts_node_start_byte(first));
        st = kl_edits_addf(out, at, at, "%sconst int %s = blockIdx.x * blockDim.x + threadIdx.x;\n%sif (%s >= %s) return;\n",
                           ind, row, ind, row, rows);
        bx_scan bs = {ctx, out, row, null_node, KL_OK};
        if (st == KL_OK) rt_walk(p->body, bx_visit, &bs), st = bs.st;
    }
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

/* ---- running a site ------------------------------------------------------------------------------- */

typedef struct rp_run {
    const kl_site *site;
    const json_t *params;
    kl_edits *out;
    kl_error *err;
    bool done;
    kl_status st;
} rp_run;

static kl_status run_visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    rp_run *run = user;
    if (run->done || strcmp(name, run->site->kernel)) return KL_OK;
    if (ts_node_start_byte(fn) > run->site->span.start || ts_node_end_byte(fn) < run->site->span.end) return KL_OK;
    run->done = true;
    if (run->site->dir == KL_SITE_APPLICABLE) {
        rp_row *r = malloc(sizeof *r);
        if (!r) return KL_ERR_NOMEM;
        if (!analyse_row(ctx, ax, fn, name, r))
            run->st = kl_rule_not_applicable(run->err, "no row per thread at %s", run->site->id);
        else
            run->st = apply_row(ctx, run->site, r, run->params, run->out, run->err);
        free(r);
        return KL_OK;
    }
    rp_present *p = malloc(sizeof *p);
    if (!p) return KL_ERR_NOMEM;
    if (!analyse_present(ctx, fn, name, p))
        run->st = kl_rule_not_applicable(run->err, "no loop spread over lanes at %s", run->site->id);
    else
        run->st = remove_present(ctx, run->site, p, run->out, run->err);
    free(p);
    return KL_OK;
}

static kl_status run_site(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out,
                          kl_error *err)
{
    rp_run r = {site, params, out, err, false, KL_OK};
    kl_status st = kl_rules_each_function(ctx, "__global__", run_visit, &r, err);
    if (st != KL_OK) return st == KL_ERR_NOMEM ? kl_error_set(err, st, "out of memory") : st;
    if (!r.done) return kl_rule_not_applicable(err, "no kernel at %s", site->id);
    return r.st;
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
