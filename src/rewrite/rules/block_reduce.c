/*
 * block-reduce — one atomicAdd per element into a single output (`atomicAdd(out, x[i])`) ↔ a
 * per-thread partial sum, summed over the block by a `__device__` helper and added to the output
 * by one thread of the block.
 *
 * Present: `T r = H(v, …);` at the top level of a kernel, where H is a `__device__` block-sum
 * helper (a shared tree or shuffles combining with `+`), v a local partial (`T v = 0;`, updated
 * only by `v += e;`, or folded from a local array of partials: `for (…) v += A[u];` with A only
 * zeroed and updated by `A[k] += e;`), finished either by `if (threadIdx.x == 0) atomicAdd(out, r);`
 * or by a last-block ticket (`if (threadIdx.x == 0) { G[blockIdx.x] = r; … }` and the rest of
 * the kernel summing the per-block partials into `out[0] = …`). Remove turns every `v += e;`
 * (`A[k] += e;`) into `atomicAdd(out, e);` and deletes the partials, the helper call and the
 * finish; with a ticket, launch() zeroes out first (cudaMemsetAsync on the launch's stream).
 * Applicable: every `atomicAdd(P, e);` (or `&P[0]`) of a kernel into one pointer parameter P, as
 * statements, in a 1-D kernel without returns or barriers. Apply accumulates into `kl_part`, sums
 * it with an inserted `kl_block_sum` helper and adds it once per block.
 *
 * Why its own transform (and not privatize with a one-entry table): privatize keeps the atomics
 * and moves them into a shared copy of a table; this one removes the atomics altogether in favour
 * of a reduction across the block, with its own helper, barriers and finish (atomic or ticket).
 */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules_tree.h"

#define NAME "block-reduce"
#define BR_MAX 16

/* ---- small tree helpers ------------------------------------------------------------------------ */

static TSNode strip(TSNode n)
{
    while (rt_is(n, "parenthesized_expression")) n = ts_node_named_child(n, 0);
    return n;
}


/* The text of n without blanks, into buf. */
/* The operator of an assignment / binary expression, read from the text between its operands. */
static void op_of(const kl_rule_ctx *ctx, TSNode n, char *op, size_t size)
{
    TSNode l = rt_field(n, "left"), r = rt_field(n, "right");
    size_t k = 0;
    op[0] = '\0';
    if (ts_node_is_null(l) || ts_node_is_null(r)) return;
    for (uint32_t i = ts_node_end_byte(l); i < ts_node_start_byte(r) && k + 1 < size; i++)
        if (ctx->text[i] != ' ' && ctx->text[i] != '\t' && ctx->text[i] != '\n') op[k++] = ctx->text[i];
    op[k] = '\0';
}

static bool is_zero_literal(const kl_rule_ctx *ctx, TSNode n)
{
    char t[32];
    n = strip(n);
    if (!rt_is(n, "number_literal")) return false;
    rt_text_unblank_to(ctx, n, t, sizeof t);
    return !strcmp(t, "0") || !strcmp(t, "0.0f") || !strcmp(t, "0.f") || !strcmp(t, "0.0") || !strcmp(t, "0.0F") ||
           !strcmp(t, "0u");
}

/* `x += e;` as an expression statement: the left side and e. */
static bool plus_assign(const kl_rule_ctx *ctx, TSNode stmt, TSNode *left, TSNode *right)
{
    if (!rt_is(stmt, "expression_statement")) return false;
    TSNode a = ts_node_named_child(stmt, 0);
    if (!rt_is(a, "assignment_expression")) return false;
    char op[4];
    op_of(ctx, a, op, sizeof op);
    if (strcmp(op, "+=")) return false;
    *left = rt_field(a, "left");
    *right = rt_field(a, "right");
    return true;
}

/* The single statement of a loop body or an if's consequence (`s;` or `{ s; }`). */
static TSNode only_stmt(TSNode body)
{
    if (!rt_is(body, "compound_statement")) return body;
    TSNode s = {0};
    unsigned n = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(body); i++) {
        TSNode c = ts_node_named_child(body, i);
        if (rt_is(c, "comment")) continue;
        s = c;
        n++;
    }
    return n == 1 ? s : (TSNode){0};
}

/* `threadIdx.x == 0` */
static bool is_thread0(const kl_rule_ctx *ctx, TSNode cond)
{
    char t[64];
    if (rt_is(cond, "condition_clause")) cond = ts_node_named_child(cond, 0);
    rt_text_unblank_to(ctx, strip(cond), t, sizeof t);
    return !strcmp(t, "threadIdx.x==0") || !strcmp(t, "0==threadIdx.x") || !strcmp(t, "!threadIdx.x");
}

/* The enclosing top-level statement of n in the function body. */
static TSNode top_stmt(TSNode body, TSNode n)
{
    while (!ts_node_is_null(n) && !ts_node_eq(ts_node_parent(n), body)) n = ts_node_parent(n);
    return n;
}

/* ---- the block-sum helper --------------------------------------------------------------------- */

/* A __device__ function of the file that sums its first argument over the block: barriers or
 * shuffles, combining with `+` only. */
static const rt_func *block_sum_helper(const kl_rule_ctx *ctx, const rt_func *fs, unsigned nf, TSNode call)
{
    TSNode fn = rt_field(call, "function");
    if (!rt_is(fn, "identifier")) return NULL;
    char name[128];
    rt_text_unblank_to(ctx, fn, name, sizeof name);
    const rt_func *h = rt_function_named(fs, nf, name);
    if (!h || h->global || ts_node_is_null(h->body)) return NULL;
    char *t = rt_text(ctx, h->body);
    bool ok = t && (strstr(t, "__syncthreads") || strstr(t, "shfl")) && strstr(t, "+") && strstr(t, "return") &&
              !strstr(t, "max") && !strstr(t, "min") && !strstr(t, "*=") && !strstr(t, "blockIdx") &&
              !strstr(t, "atomic");
    free(t);
    return ok ? h : NULL;
}

/* ---- identifier uses ------------------------------------------------------------------------------ */

typedef struct ranges {
    uint32_t a[64], b[64];
    unsigned n;
} ranges;

static void ranges_add(ranges *r, uint32_t a, uint32_t b)
{
    if (r->n < 64) {
        r->a[r->n] = a;
        r->b[r->n++] = b;
    }
}

static bool in_ranges(const ranges *r, uint32_t x)
{
    for (unsigned i = 0; i < r->n; i++)
        if (x >= r->a[i] && x < r->b[i]) return true;
    return false;
}

typedef struct use_scan {
    const kl_rule_ctx *ctx;
    const char *name;
    const ranges *allowed;
    TSNode first;           /* the first use outside the allowed ranges */
} use_scan;

static bool use_visit(TSNode n, void *user)
{
    use_scan *u = user;
    if (!ts_node_is_null(u->first)) return false;
    if (rt_is(n, "identifier") && rt_text_is(u->ctx, n, u->name) && !in_ranges(u->allowed, ts_node_start_byte(n)))
        u->first = n;
    return true;
}

static TSNode use_outside(const kl_rule_ctx *ctx, TSNode scope, const char *name, const ranges *allowed)
{
    use_scan u = {.ctx = ctx, .name = name, .allowed = allowed};
    kl_ast_walk(scope, use_visit, &u);
    return u.first;
}

/* ---- present ------------------------------------------------------------------------------------- */

typedef struct br_present {
    TSNode rdecl;           /* T r = H(v, …); */
    TSNode vdecl;           /* T v = 0; */
    TSNode emit;            /* if (threadIdx.x == 0) … */
    bool ticket;
    char v[128], r[128], helper[128], out[128], addr[160];
    char elem[64];
    TSNode acc[BR_MAX];     /* `v += e;` / `A[k] += e;` statements */
    unsigned nacc;
    ranges del;             /* statements deleted */
    char why[300];
} br_present;

static void decl_name(const kl_rule_ctx *ctx, TSNode decl, char *buf, size_t size)
{
    buf[0] = '\0';
    TSNode nm = kl_ast_declarator_name(rt_field(decl, "declarator"));
    if (!ts_node_is_null(nm)) rt_text_unblank_to(ctx, nm, buf, size);
}

/* The element type of a declaration (without const/__shared__), normalised. */
static void decl_elem(const kl_rule_ctx *ctx, TSNode decl, char *buf, size_t size)
{
    TSNode t = rt_field(decl, "type");
    buf[0] = '\0';
    if (!ts_node_is_null(t)) rt_text_unblank_to(ctx, t, buf, size);
}

/* Is name a local array declared at the top level of the kernel? */
static bool local_array(const kl_rule_ctx *ctx, const rt_func *f, TSNode name)
{
    char a[128];
    rt_text_unblank_to(ctx, name, a, sizeof a);
    for (uint32_t i = 0; i < ts_node_named_child_count(f->body); i++) {
        TSNode d = ts_node_named_child(f->body, i);
        char nm[128];
        if (!rt_is(d, "declaration") || !rt_is(rt_field(d, "declarator"), "array_declarator")) continue;
        decl_name(ctx, d, nm, sizeof nm);
        char *t = rt_text(ctx, d);
        bool shared = t && strstr(t, "__shared__");
        free(t);
        if (!strcmp(nm, a) && !shared) return true;
    }
    return false;
}

/* The partial array A folded into v: `for (…) v += A[u];` (a top-level loop). The statements of A
 * (zeroing loops, updates) are added to p; false with p->why when A is used otherwise. */
static bool fold_array(const kl_rule_ctx *ctx, const rt_func *f, br_present *p, TSNode loop, TSNode arr)
{
    char a[128];
    rt_text_unblank_to(ctx, arr, a, sizeof a);
    /* its declaration: `T A[K];` at the top level */
    TSNode adecl = {0};
    for (uint32_t i = 0; i < ts_node_named_child_count(f->body); i++) {
        TSNode d = ts_node_named_child(f->body, i);
        char nm[128];
        if (!rt_is(d, "declaration") || !rt_is(rt_field(d, "declarator"), "array_declarator")) continue;
        decl_name(ctx, d, nm, sizeof nm);
        if (!strcmp(nm, a)) adecl = d;
    }
    if (ts_node_is_null(adecl)) {
        kl_snprintf(p->why, sizeof p->why, "%s (line %u) is not a local array of partials", a, kl_ast_line(arr));
        return false;
    }
    ranges_add(&p->del, ts_node_start_byte(adecl), ts_node_end_byte(adecl));
    ranges_add(&p->del, ts_node_start_byte(loop), ts_node_end_byte(loop));
    /* every other use: A[k] = 0 alone in a top-level loop (or alone), or A[k] += e */
    for (;;) {
        ranges ok = p->del;
        for (unsigned i = 0; i < p->nacc; i++) ranges_add(&ok, ts_node_start_byte(p->acc[i]), ts_node_end_byte(p->acc[i]));
        TSNode u = use_outside(ctx, f->body, a, &ok);
        if (ts_node_is_null(u)) return true;
        TSNode sub = ts_node_parent(u);
        TSNode asg = ts_node_parent(sub);
        TSNode stmt = ts_node_parent(asg);
        TSNode l, r;
        char op[4] = "";
        if (rt_is(asg, "assignment_expression")) op_of(ctx, asg, op, sizeof op);
        if (!rt_is(sub, "subscript_expression") || !ts_node_eq(rt_field(sub, "argument"), u) ||
            !rt_is(asg, "assignment_expression") || !ts_node_eq(rt_field(asg, "left"), sub) ||
            !rt_is(stmt, "expression_statement")) {
            kl_snprintf(p->why, sizeof p->why, "line %u uses the partials %s otherwise than `%s[k] += e`", kl_ast_line(u),
                        a, a);
            return false;
        }
        if (!strcmp(op, "=") && is_zero_literal(ctx, rt_field(asg, "right"))) {
            TSNode top = top_stmt(f->body, stmt);
            bool alone = ts_node_eq(top, stmt) ||
                         (rt_is(top, "for_statement") && ts_node_eq(only_stmt(rt_field(top, "body")), stmt));
            if (!alone) {
                kl_snprintf(p->why, sizeof p->why, "line %u zeroes %s inside other code", kl_ast_line(u), a);
                return false;
            }
            ranges_add(&p->del, ts_node_start_byte(top), ts_node_end_byte(top));
        } else if (plus_assign(ctx, stmt, &l, &r) && p->nacc < BR_MAX) {
            p->acc[p->nacc++] = stmt;
        } else {
            kl_snprintf(p->why, sizeof p->why, "line %u uses the partials %s otherwise than `%s[k] += e`", kl_ast_line(u),
                        a, a);
            return false;
        }
        if (p->del.n >= 60) {
            kl_snprintf(p->why, sizeof p->why, "too many statements use %s", a);
            return false;
        }
    }
}

/* Writes to pointer parameters in the tail of a ticket finish: only `out[0] = X` / `*out = X`. */
typedef struct tail_scan {
    const kl_rule_ctx *ctx;
    const rt_func *f;
    TSNode store;           /* the one store into a parameter */
    unsigned stores;
    TSNode bad;
} tail_scan;

static bool tail_visit(TSNode n, void *user)
{
    tail_scan *t = user;
    if (!ts_node_is_null(t->bad)) return false;
    TSNode target = {0};
    if (rt_is(n, "assignment_expression")) target = strip(rt_field(n, "left"));
    else if (rt_is(n, "update_expression")) target = strip(rt_field(n, "argument"));
    else if (rt_is(n, "call_expression")) {
        char fn[64];
        rt_text_unblank_to(t->ctx, rt_field(n, "function"), fn, sizeof fn);
        TSNode args = rt_field(n, "arguments");
        if (kl_str_starts(fn, "atomic") && ts_node_named_child_count(args) > 0) target = ts_node_named_child(args, 0);
    }
    if (ts_node_is_null(target)) return true;
    /* the base pointer */
    TSNode base = strip(target);
    while (rt_is(base, "subscript_expression") || rt_is(base, "pointer_expression") || rt_is(base, "field_expression"))
        base = strip(rt_field(base, rt_is(base, "subscript_expression") || rt_is(base, "field_expression") ? "argument"
                                                                                                           : "argument"));
    if (!rt_is(base, "identifier")) return true;
    char nm[128];
    rt_text_unblank_to(t->ctx, base, nm, sizeof nm);
    if (!rt_pointer_param(t->ctx, t->f, nm, NULL, 0)) return true;
    char tt[160];
    rt_text_unblank_to(t->ctx, target, tt, sizeof tt);
    char want0[160], want1[160];
    kl_snprintf(want0, sizeof want0, "%s[0]", nm);
    kl_snprintf(want1, sizeof want1, "*%s", nm);
    if (rt_is(n, "assignment_expression") && (!strcmp(tt, want0) || !strcmp(tt, want1))) {
        char op[4];
        op_of(t->ctx, n, op, sizeof op);
        if (!strcmp(op, "=")) {
            t->store = n;
            t->stores++;
            return true;
        }
    }
    t->bad = n;
    return false;
}

static bool analyse_present(const kl_rule_ctx *ctx, const rt_func *fs, unsigned nf, const rt_func *f, TSNode rdecl,
                            br_present *p)
{
    memset(p, 0, sizeof *p);
    p->rdecl = rdecl;
    TSNode idecl = rt_field(rdecl, "declarator");
    if (!rt_is(idecl, "init_declarator") || ts_node_named_child_count(rdecl) > 3) return false;
    TSNode call = strip(rt_field(idecl, "value"));
    if (!rt_is(call, "call_expression")) return false;
    const rt_func *h = block_sum_helper(ctx, fs, nf, call);
    TSNode args = rt_field(call, "arguments");
    if (!h || ts_node_named_child_count(args) < 1 || !rt_is(strip(ts_node_named_child(args, 0)), "identifier"))
        return false;
    kl_snprintf(p->helper, sizeof p->helper, "%s", h->name);
    rt_text_unblank_to(ctx, strip(ts_node_named_child(args, 0)), p->v, sizeof p->v);
    decl_name(ctx, rdecl, p->r, sizeof p->r);
    /* the finish */
    TSNode emit = rt_next_stmt(rdecl);
    if (!rt_is(emit, "if_statement") || !ts_node_is_null(rt_field(emit, "alternative")) ||
        !is_thread0(ctx, rt_field(emit, "condition")))
        return false;
    p->emit = emit;
    TSNode one = only_stmt(rt_field(emit, "consequence"));
    TSNode ex = rt_is(one, "expression_statement") ? strip(ts_node_named_child(one, 0)) : (TSNode){0};
    char fn[64] = "";
    if (rt_is(ex, "call_expression")) rt_text_unblank_to(ctx, rt_field(ex, "function"), fn, sizeof fn);
    TSNode eargs = rt_is(ex, "call_expression") ? rt_field(ex, "arguments") : (TSNode){0};
    if (!strcmp(fn, "atomicAdd") && ts_node_named_child_count(eargs) == 2 &&
        rt_text_is(ctx, strip(ts_node_named_child(eargs, 1)), p->r)) {
        /* atomicAdd(out, r) / atomicAdd(&out[0], r) */
        TSNode a = strip(ts_node_named_child(eargs, 0));
        rt_text_unblank_to(ctx, a, p->addr, sizeof p->addr);
        char *o = p->addr;
        if (kl_str_starts(o, "&") && kl_str_ends(o, "[0]")) kl_snprintf(p->out, sizeof p->out, "%.*s", (int)(strlen(o) - 4), o + 1);
        else kl_snprintf(p->out, sizeof p->out, "%s", o);
        if (!rt_pointer_param(ctx, f, p->out, p->elem, sizeof p->elem)) return false;
        ranges_add(&p->del, ts_node_start_byte(rdecl), ts_node_end_byte(emit));
        if (!ts_node_is_null(rt_next_stmt(emit)) && rt_count_ident(ctx, f->body, p->r) > 2)
            kl_snprintf(p->why, sizeof p->why, "%s is used after line %u", p->r, kl_ast_line(emit));
    } else {
        /* a last-block ticket: G[blockIdx.x] = r; … and the rest of the kernel finishing into out[0] */
        char *et = rt_text(ctx, emit);
        char want[200];
        kl_snprintf(want, sizeof want, "[blockIdx.x] = %s;", p->r);
        bool stores = et && strstr(et, want);
        free(et);
        if (!stores) return false;
        p->ticket = true;
        tail_scan t = {.ctx = ctx, .f = f};
        for (TSNode s = emit; !ts_node_is_null(s); s = ts_node_next_named_sibling(s)) kl_ast_walk(s, tail_visit, &t);
        if (!ts_node_is_null(t.bad) || t.stores != 1) {
            kl_snprintf(p->why, sizeof p->why,
                        "the finish after line %u does not write its result once as out[0] = … (line %u)",
                        kl_ast_line(rdecl), kl_ast_line(ts_node_is_null(t.bad) ? emit : t.bad));
            return true;
        }
        TSNode target = strip(rt_field(t.store, "left"));
        TSNode base = strip(rt_field(target, "argument"));
        rt_text_unblank_to(ctx, base, p->out, sizeof p->out);
        kl_snprintf(p->addr, sizeof p->addr, "%s", p->out);
        rt_pointer_param(ctx, f, p->out, p->elem, sizeof p->elem);
        /* the stored value is a block sum too */
        TSNode val = strip(rt_field(t.store, "right"));
        bool summed = false;
        if (rt_is(val, "identifier")) {
            for (TSNode s = emit; !ts_node_is_null(s) && !summed; s = ts_node_next_named_sibling(s)) {
                char nm[128];
                if (!rt_is(s, "declaration")) continue;
                decl_name(ctx, s, nm, sizeof nm);
                TSNode cv = strip(rt_field(rt_field(s, "declarator"), "value"));
                summed = rt_text_is(ctx, val, nm) && rt_is(cv, "call_expression") && block_sum_helper(ctx, fs, nf, cv);
            }
        }
        if (!summed) {
            kl_snprintf(p->why, sizeof p->why, "the value stored at line %u is not a block sum of the partials",
                        kl_ast_line(t.store));
            return true;
        }
        TSNode last = ts_node_named_child(f->body, ts_node_named_child_count(f->body) - 1);
        ranges_add(&p->del, ts_node_start_byte(rdecl), ts_node_end_byte(last));
    }
    /* the partial v: `T v = 0;` at the top level, then only `v += e;` */
    for (uint32_t i = 0; i < ts_node_named_child_count(f->body); i++) {
        TSNode d = ts_node_named_child(f->body, i);
        char nm[128];
        if (!rt_is(d, "declaration") || ts_node_start_byte(d) >= ts_node_start_byte(rdecl)) continue;
        decl_name(ctx, d, nm, sizeof nm);
        if (strcmp(nm, p->v)) continue;
        TSNode id = rt_field(d, "declarator");
        if (rt_is(id, "init_declarator") && is_zero_literal(ctx, rt_field(id, "value")) && ts_node_named_child_count(d) <= 3)
            p->vdecl = d;
    }
    if (ts_node_is_null(p->vdecl)) {
        kl_snprintf(p->why, sizeof p->why, "the partial %s is not a local `T %s = 0;` declared before line %u", p->v,
                    p->v, kl_ast_line(rdecl));
        return true;
    }
    char velem[64];
    decl_elem(ctx, p->vdecl, velem, sizeof velem);
    if (strcmp(velem, p->elem)) {
        kl_snprintf(p->why, sizeof p->why, "the partial %s is %s, the output %s holds %s", p->v, velem, p->out,
                    p->elem[0] ? p->elem : "?");
        return true;
    }
    ranges_add(&p->del, ts_node_start_byte(p->vdecl), ts_node_end_byte(p->vdecl));
    ranges allowed = p->del;
    ranges_add(&allowed, ts_node_start_byte(rdecl), ts_node_end_byte(rdecl));
    for (;;) {
        for (unsigned i = 0; i < p->nacc; i++)
            ranges_add(&allowed, ts_node_start_byte(p->acc[i]), ts_node_end_byte(p->acc[i]));
        TSNode u = use_outside(ctx, f->body, p->v, &allowed);
        if (ts_node_is_null(u)) break;
        TSNode asg = ts_node_parent(u), stmt = ts_node_parent(asg), l, r;
        if (!plus_assign(ctx, stmt, &l, &r) || !ts_node_eq(l, u) || ts_node_start_byte(stmt) > ts_node_start_byte(rdecl)) {
            kl_snprintf(p->why, sizeof p->why, "line %u uses the partial %s otherwise than `%s += e` before the sum",
                        kl_ast_line(u), p->v, p->v);
            return true;
        }
        TSNode rs = strip(r), top = top_stmt(f->body, stmt);
        if (rt_is(rs, "subscript_expression") && rt_is(top, "for_statement") &&
            ts_node_eq(only_stmt(rt_field(top, "body")), stmt) && rt_is(strip(rt_field(rs, "argument")), "identifier") &&
            local_array(ctx, f, strip(rt_field(rs, "argument")))) {
            /* a fold of an array of partials */
            ranges_add(&allowed, ts_node_start_byte(top), ts_node_end_byte(top));
            if (!fold_array(ctx, f, p, top, strip(rt_field(rs, "argument")))) return true;
            allowed = p->del;
            ranges_add(&allowed, ts_node_start_byte(rdecl), ts_node_end_byte(rdecl));
            continue;
        }
        if (p->nacc == BR_MAX) {
            kl_snprintf(p->why, sizeof p->why, "more than %d updates of the partial %s", BR_MAX, p->v);
            return true;
        }
        p->acc[p->nacc++] = stmt;
    }
    if (p->nacc == 0)
        kl_snprintf(p->why, sizeof p->why, "nothing is added to the partial %s before line %u", p->v, kl_ast_line(rdecl));
    for (unsigned i = 0; i < p->nacc && !p->why[0]; i++)
        if (in_ranges(&p->del, ts_node_start_byte(p->acc[i])))
            kl_snprintf(p->why, sizeof p->why, "the update at line %u sits in code that goes", kl_ast_line(p->acc[i]));
    return true;
}

/* The candidate sum declarations of a kernel: top-level `T r = H(…);` with H a block-sum helper. */
static unsigned sum_decls(const kl_rule_ctx *ctx, const rt_func *fs, unsigned nf, const rt_func *f, TSNode *out,
                          unsigned max)
{
    unsigned n = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(f->body) && n < max; i++) {
        TSNode d = ts_node_named_child(f->body, i);
        if (!rt_is(d, "declaration")) continue;
        TSNode v = strip(rt_field(rt_field(d, "declarator"), "value"));
        if (rt_is(v, "call_expression") && block_sum_helper(ctx, fs, nf, v)) out[n++] = d;
    }
    return n;
}

/* ---- applicable ------------------------------------------------------------------------------------ */

typedef struct br_apply {
    char out[128], addr[160], elem[64];
    TSNode atomics[BR_MAX];
    unsigned n;
    TSNode first;           /* the first atomic into the output (the site) */
    char why[300];
} br_apply;

typedef struct apply_scan {
    const kl_rule_ctx *ctx;
    const rt_func *f;
    br_apply *a;
    TSNode ret, yz, sync;   /* the first return, threadIdx.y/z, barrier or shuffle */
} apply_scan;

static bool apply_visit(TSNode n, void *user)
{
    apply_scan *s = user;
    br_apply *a = s->a;
    if (rt_is(n, "return_statement") && ts_node_is_null(s->ret)) s->ret = n;
    if (rt_is(n, "field_expression") && ts_node_is_null(s->yz) &&
        (rt_text_is(s->ctx, n, "threadIdx.y") || rt_text_is(s->ctx, n, "threadIdx.z")))
        s->yz = n;
    if (!rt_is(n, "call_expression")) return true;
    char fn[64];
    rt_text_unblank_to(s->ctx, rt_field(n, "function"), fn, sizeof fn);
    if ((kl_str_starts(fn, "__syncthreads") || strstr(fn, "shfl") || kl_str_starts(fn, "__syncwarp")) &&
        ts_node_is_null(s->sync))
        s->sync = n;
    if (strcmp(fn, "atomicAdd")) return true;
    TSNode args = rt_field(n, "arguments");
    if (ts_node_named_child_count(args) != 2) return true;
    char addr[160], out[128], elem[64];
    rt_text_unblank_to(s->ctx, strip(ts_node_named_child(args, 0)), addr, sizeof addr);
    if (kl_str_starts(addr, "&") && kl_str_ends(addr, "[0]"))
        kl_snprintf(out, sizeof out, "%.*s", (int)(strlen(addr) - 4), addr + 1);
    else kl_snprintf(out, sizeof out, "%s", addr);
    /* only atomics into one address: a pointer parameter itself (or its first element) */
    if (!rt_pointer_param(s->ctx, s->f, out, elem, sizeof elem)) return true;
    if (a->out[0] && strcmp(a->out, out)) {
        if (!a->why[0]) kl_snprintf(a->why, sizeof a->why, "atomics into both %s and %s", a->out, out);
        return true;
    }
    if (!a->out[0]) {
        kl_snprintf(a->out, sizeof a->out, "%s", out);
        kl_snprintf(a->addr, sizeof a->addr, "%s", addr);
        kl_snprintf(a->elem, sizeof a->elem, "%s", elem);
    }
    if (ts_node_is_null(a->first)) a->first = rt_is(ts_node_parent(n), "expression_statement") ? ts_node_parent(n) : n;
    if (!rt_is(ts_node_parent(n), "expression_statement")) {
        if (!a->why[0])
            kl_snprintf(a->why, sizeof a->why, "the atomicAdd at line %u is not a statement of its own (its value is used)",
                        kl_ast_line(n));
        return true;
    }
    if (a->n == BR_MAX) {
        if (!a->why[0]) kl_snprintf(a->why, sizeof a->why, "more than %d atomics into %s", BR_MAX, out);
        return true;
    }
    a->atomics[a->n++] = ts_node_parent(n);
    return true;
}

static void analyse_apply(const kl_rule_ctx *ctx, const rt_func *f, br_apply *a)
{
    memset(a, 0, sizeof *a);
    apply_scan s = {.ctx = ctx, .f = f, .a = a};
    kl_ast_walk(f->body, apply_visit, &s);
    if (ts_node_is_null(a->first)) return;
    if (!a->why[0] && !ts_node_is_null(s.ret))
        kl_snprintf(a->why, sizeof a->why, "a return at line %u: every thread must reach the block sum", kl_ast_line(s.ret));
    if (!a->why[0] && !ts_node_is_null(s.yz))
        kl_snprintf(a->why, sizeof a->why, "line %u uses threadIdx.y/z: the block sum is 1-D", kl_ast_line(s.yz));
    if (!a->why[0] && !ts_node_is_null(s.sync))
        kl_snprintf(a->why, sizeof a->why, "line %u already synchronises the block", kl_ast_line(s.sync));
    const char *types[] = {"float", "double", "int", "unsignedint", "unsigned", "int32_t", "uint32_t", NULL};
    bool ok = false;
    for (int i = 0; types[i]; i++) ok = ok || !strcmp(a->elem, types[i]);
    if (!a->why[0] && !ok) kl_snprintf(a->why, sizeof a->why, "%s holds %s: no block sum for it", a->out, a->elem);
    if (!a->why[0] && (rt_count_ident(ctx, f->body, "kl_part") || rt_count_ident(ctx, f->body, "kl_total")))
        kl_snprintf(a->why, sizeof a->why, "the kernel already names kl_part or kl_total");
    /* the other uses of out: none but the atomics */
    if (!a->why[0] && rt_count_ident(ctx, f->body, a->out) != a->n)
        kl_snprintf(a->why, sizeof a->why, "%s is used otherwise than by the atomics", a->out);
}

/* ---- launches --------------------------------------------------------------------------------------- */

static bool launches_1d(const kl_rule_ctx *ctx, const char *kernel, char *why, size_t size, unsigned *nl)
{
    rt_launch ls[16];
    unsigned n = rt_launches(ctx, kernel, ls, 16);
    *nl = n;
    for (unsigned i = 0; i < n && i < 16; i++) {
        TSNode b = strip(ls[i].cfg[1]);
        char t[160];
        rt_text_unblank_to(ctx, b, t, sizeof t);
        if ((kl_str_starts(t, "dim3(") && strchr(t, ',')) || strchr(t, '{')) {
            kl_snprintf(why, size, "the block at line %u is not 1-D", kl_ast_line(ls[i].call));
            return false;
        }
        long long v;
        if (rt_const_eval(ctx, ls[i].host.body, b, &v) && v > 1024) {
            kl_snprintf(why, size, "the block at line %u has more than 1024 threads", kl_ast_line(ls[i].call));
            return false;
        }
        TSNode st = ts_node_parent(ls[i].call);
        if (!rt_is(st, "expression_statement") || !rt_line_blank_before(ctx, ts_node_start_byte(st))) {
            kl_snprintf(why, size, "the launch at line %u is not a statement on its own line", kl_ast_line(ls[i].call));
            return false;
        }
    }
    return true;
}

/* ---- find ------------------------------------------------------------------------------------------- */

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    kl_status st = KL_OK;
    for (unsigned k = 0; k < nf && k < 64; k++) {
        const rt_func *f = &fs[k];
        if (!f->global || ts_node_is_null(f->body)) continue;
        TSNode ds[8];
        unsigned nd = sum_decls(ctx, fs, nf, f, ds, 8);
        for (unsigned i = 0; i < nd; i++) {
            br_present p;
            if (!analyse_present(ctx, fs, nf, f, ds[i], &p)) continue;
            unsigned nl = 0;
            char lwhy[300] = "";
            if (!p.why[0] && !launches_1d(ctx, f->name, lwhy, sizeof lwhy, &nl)) kl_snprintf(p.why, sizeof p.why, "%s", lwhy);
            char id[256], note[400];
            kl_site_id(id, sizeof id, f->name, ds[i], NULL);
            if (p.why[0]) kl_snprintf(note, sizeof note, "not applicable: %s", p.why);
            else
                kl_snprintf(note, sizeof note, "partial %s summed over the block by %s, finished by %s into %s", p.v,
                            p.helper, p.ticket ? "a last-block ticket" : "one atomicAdd per block", p.out);
            json_t *feat = json_pack("{s:s, s:s, s:s, s:s, s:i}", "partial", p.v, "helper", p.helper, "finish",
                                     p.ticket ? "last-block" : "atomic", "output", p.out, "updates", (int)p.nacc);
            if (feat && p.why[0]) json_object_set_new(feat, "why_not", json_string(p.why));
            KL_TRY(kl_sites_add(out, id, KL_SITE_PRESENT, kl_node_span(ds[i]), f->name, feat, NULL, note));
        }
        br_apply a;
        analyse_apply(ctx, f, &a);
        if (!ts_node_is_null(a.first) && nd == 0) {
            unsigned nl = 0;
            char lwhy[300] = "";
            if (!a.why[0] && !launches_1d(ctx, f->name, lwhy, sizeof lwhy, &nl)) kl_snprintf(a.why, sizeof a.why, "%s", lwhy);
            char id[256], note[400];
            kl_site_id(id, sizeof id, f->name, a.first, a.out);
            if (a.why[0]) kl_snprintf(note, sizeof note, "not applicable: %s", a.why);
            else kl_snprintf(note, sizeof note, "%u atomicAdd(s) into %s: one per element", a.n, a.out);
            json_t *feat = json_pack("{s:s, s:s, s:i}", "output", a.out, "dtype", a.elem, "atomics", (int)a.n);
            if (feat && a.why[0]) json_object_set_new(feat, "why_not", json_string(a.why));
            KL_TRY(kl_sites_add(out, id, KL_SITE_APPLICABLE, kl_node_span(a.first), f->name, feat, NULL, note));
        }
    }
cleanup:
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

/* ---- remove ------------------------------------------------------------------------------------------ */

/* Delete [a, b) as whole lines when they hold nothing else. */
static kl_status delete_lines(const kl_rule_ctx *ctx, uint32_t a, uint32_t b, const char *marker, kl_edits *out)
{
    uint32_t s = a, e = b;
    if (rt_line_blank_before(ctx, a)) {
        s = rt_line_start(ctx, a);
        uint32_t le = rt_line_end(ctx, b > a ? b - 1 : b);
        bool blank_after = true;
        for (uint32_t i = b; i < le; i++)
            if (ctx->text[i] != ' ' && ctx->text[i] != '\t' && ctx->text[i] != '\n' && ctx->text[i] != '\r') blank_after = false;
        if (blank_after) e = le;
        /* a `#pragma unroll` line just above belongs to the statement */
        if (s > 0) {
            uint32_t ps = rt_line_start(ctx, s - 1);
            const char *l = ctx->text + ps;
            while (*l == ' ' || *l == '\t') l++;
            if (kl_str_starts(l, "#pragma unroll")) s = ps;
        }
        /* a marker comment line just above */
        if (marker && s > 0) {
            uint32_t ps = rt_line_start(ctx, s - 1);
            const char *l = ctx->text + ps;
            while (*l == ' ' || *l == '\t') l++;
            if (!strncmp(l, "// ", 3) && kl_str_starts(l + 3, marker)) s = ps;
        }
    }
    return kl_edits_add(out, s, e, "");
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    const rt_func *f = rt_function_named(fs, nf, site->kernel);
    if (!f) return kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no kernel '%s'", kl_source_name(ctx->src), site->kernel);
    TSNode ds[8];
    unsigned nd = sum_decls(ctx, fs, nf, f, ds, 8);
    TSNode rdecl = {0};
    for (unsigned i = 0; i < nd; i++)
        if (ts_node_start_byte(ds[i]) == site->span.start) rdecl = ds[i];
    br_present p;
    if (ts_node_is_null(rdecl) || !analyse_present(ctx, fs, nf, f, rdecl, &p))
        return kl_rule_not_applicable(err, "no block sum at %s", site->id);
    if (p.why[0]) return kl_rule_not_applicable(err, "%s", p.why);
    char lwhy[300] = "";
    unsigned nl = 0;
    if (!launches_1d(ctx, f->name, lwhy, sizeof lwhy, &nl)) return kl_rule_not_applicable(err, "%s", lwhy);
    kl_status st = KL_OK;
    /* the updates become atomics */
    for (unsigned i = 0; i < p.nacc && st == KL_OK; i++) {
        TSNode l, r;
        plus_assign(ctx, p.acc[i], &l, &r);
        char *rt = rt_text(ctx, r);
        st = rt ? kl_edits_addf(out, ts_node_start_byte(p.acc[i]), ts_node_end_byte(p.acc[i]), "atomicAdd(%s, %s);",
                                p.addr, rt)
                : KL_ERR_NOMEM;
        free(rt);
    }
    /* the deleted statements, merged where they nest or touch */
    ranges d = p.del;
    for (unsigned i = 0; i < d.n; i++)
        for (unsigned j = i + 1; j < d.n; j++)
            if (d.a[i] > d.a[j]) {
                uint32_t ta = d.a[i], tb = d.b[i];
                d.a[i] = d.a[j], d.b[i] = d.b[j], d.a[j] = ta, d.b[j] = tb;
            }
    ranges m = {0};
    for (unsigned i = 0; i < d.n; i++) {
        if (m.n && d.a[i] <= m.b[m.n - 1]) {
            if (d.b[i] > m.b[m.n - 1]) m.b[m.n - 1] = d.b[i];
        } else ranges_add(&m, d.a[i], d.b[i]);
    }
    /* __shared__ arrays of the kernel and __device__ variables of the file only the deleted code used */
    ranges gone = m;
    TSNode root = kl_source_root(ctx->src);
    for (int pass = 0; pass < 2; pass++) {
        TSNode scope = pass ? root : f->body;
        for (uint32_t i = 0; i < ts_node_named_child_count(scope); i++) {
            TSNode dcl = ts_node_named_child(scope, i);
            if (!rt_is(dcl, "declaration") || in_ranges(&gone, ts_node_start_byte(dcl))) continue;
            char *t = rt_text(ctx, dcl);
            bool cand = t && (pass ? kl_str_starts(t, "__device__") : strstr(t, "__shared__") != NULL) && !strchr(t, '(');
            free(t);
            if (!cand || ts_node_named_child_count(dcl) > 3) continue;
            char nm[128];
            decl_name(ctx, dcl, nm, sizeof nm);
            if (!nm[0] || !rt_count_ident(ctx, f->body, nm)) continue;
            ranges al = gone;
            ranges_add(&al, ts_node_start_byte(dcl), ts_node_end_byte(dcl));
            if (!ts_node_is_null(use_outside(ctx, scope, nm, &al))) continue;
            ranges_add(&m, ts_node_start_byte(dcl), ts_node_end_byte(dcl));
            ranges_add(&gone, ts_node_start_byte(dcl), ts_node_end_byte(dcl));
        }
    }
    /* our own helper, when nothing calls it any more */
    if (kl_str_starts(p.helper, "kl_block_sum")) {
        const rt_func *h = rt_function_named(fs, nf, p.helper);
        ranges al = gone;
        if (h) ranges_add(&al, ts_node_start_byte(h->outer), ts_node_end_byte(h->outer));
        if (h && ts_node_is_null(use_outside(ctx, root, p.helper, &al)))
            ranges_add(&m, ts_node_start_byte(h->outer), ts_node_end_byte(h->outer) + (ctx->text[ts_node_end_byte(h->outer)] == '\n' &&
                                                                                     ctx->text[ts_node_end_byte(h->outer) + 1] == '\n'
                                                                                 ? 2 : 0));
    }
    for (unsigned i = 0; i < m.n && st == KL_OK; i++)
        st = delete_lines(ctx, m.a[i], m.b[i], NAME, out);
    /* a ticket wrote out: now it is added to, so launch() zeroes it first */
    if (st == KL_OK && p.ticket) {
        rt_launch ls[16];
        unsigned n = rt_launches(ctx, f->name, ls, 16);
        int idx = -1;
        for (uint32_t i = 0; i < ts_node_named_child_count(f->params); i++) {
            char nm[128];
            decl_name(ctx, ts_node_named_child(f->params, i), nm, sizeof nm);
            if (!strcmp(nm, p.out)) idx = (int)i;
        }
        for (unsigned i = 0; i < n && i < 16 && st == KL_OK; i++) {
            if (idx < 0 || (uint32_t)idx >= ts_node_named_child_count(ls[i].args)) {
                st = kl_rule_not_applicable(err, "the launch at line %u does not pass %s", kl_ast_line(ls[i].call), p.out);
                break;
            }
            char *arg = rt_text(ctx, ts_node_named_child(ls[i].args, (uint32_t)idx));
            char *stream = ls[i].ncfg >= 4 && !ts_node_is_null(ls[i].cfg[3]) ? rt_text(ctx, ls[i].cfg[3]) : kl_strdup("0");
            TSNode stmt = ts_node_parent(ls[i].call);
            char ind[64];
            rt_indent_of(ctx, ts_node_start_byte(stmt), ind, sizeof ind);
            uint32_t at = rt_line_start(ctx, ts_node_start_byte(stmt));
            st = arg && stream ? kl_edits_addf(out, at, at, "%scudaMemsetAsync(%s, 0, sizeof(%s), %s);\n", ind, arg, p.elem,
                                               stream)
                               : KL_ERR_NOMEM;
            free(arg);
            free(stream);
        }
    }
    if (st == KL_ERR_NOMEM) return kl_error_set(err, st, "out of memory");
    return st;
}

/* ---- apply --------------------------------------------------------------------------------------------- */

static const char helper_text[] =
    "// block-reduce: the sum of v over a 1-D block of up to 1024 threads, valid in every thread\n"
    "template <typename T>\n"
    "__device__ __forceinline__ T kl_block_sum(T v)\n"
    "{\n"
    "    __shared__ T kl_sums[1024];\n"
    "    kl_sums[threadIdx.x] = v;\n"
    "    __syncthreads();\n"
    "    for (unsigned s = 1; s < blockDim.x; s <<= 1) {\n"
    "        if (threadIdx.x % (2 * s) == 0 && threadIdx.x + s < blockDim.x) kl_sums[threadIdx.x] += kl_sums[threadIdx.x + s];\n"
    "        __syncthreads();\n"
    "    }\n"
    "    v = kl_sums[0];\n"
    "    __syncthreads();\n"
    "    return v;\n"
    "}\n\n";

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    (void)params;
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    const rt_func *f = rt_function_named(fs, nf, site->kernel);
    if (!f) return kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no kernel '%s'", kl_source_name(ctx->src), site->kernel);
    br_apply a;
    analyse_apply(ctx, f, &a);
    if (ts_node_is_null(a.first) || ts_node_start_byte(a.first) != site->span.start)
        return kl_rule_not_applicable(err, "no atomics into one output at %s", site->id);
    if (a.why[0]) return kl_rule_not_applicable(err, "%s", a.why);
    char lwhy[300] = "";
    unsigned nl = 0;
    if (!launches_1d(ctx, f->name, lwhy, sizeof lwhy, &nl)) return kl_rule_not_applicable(err, "%s", lwhy);
    if (f->templated && strstr(a.elem, "T"))
        return kl_rule_not_applicable(err, "the output's type %s is a template parameter", a.elem);
    kl_status st = KL_OK;
    /* the helper, once per file, before the kernel */
    const rt_func *h = rt_function_named(fs, nf, "kl_block_sum");
    if (!h) {
        uint32_t at = rt_line_start(ctx, ts_node_start_byte(f->outer));
        /* above the kernel's comment lines */
        while (at > 0) {
            uint32_t ps = rt_line_start(ctx, at - 1);
            const char *l = ctx->text + ps;
            while (*l == ' ' || *l == '\t') l++;
            if (strncmp(l, "//", 2)) break;
            at = ps;
        }
        st = kl_edits_add(out, at, at, helper_text);
    }
    /* the partial */
    char ind[64];
    TSNode first = ts_node_named_child(f->body, 0);
    rt_indent_of(ctx, ts_node_start_byte(first), ind, sizeof ind);
    uint32_t top = rt_line_start(ctx, ts_node_start_byte(first));
    if (st == KL_OK) st = kl_edits_addf(out, top, top, "%s%s kl_part = 0;\n", ind, a.elem);
    for (unsigned i = 0; i < a.n && st == KL_OK; i++) {
        TSNode call = ts_node_named_child(a.atomics[i], 0);
        char *v = rt_text(ctx, ts_node_named_child(rt_field(call, "arguments"), 1));
        st = v ? kl_edits_addf(out, ts_node_start_byte(a.atomics[i]), ts_node_end_byte(a.atomics[i]), "kl_part += %s;", v)
               : KL_ERR_NOMEM;
        free(v);
    }
    /* the sum and one atomic per block, at the end of the kernel */
    TSNode last = ts_node_named_child(f->body, ts_node_named_child_count(f->body) - 1);
    uint32_t end = rt_line_end(ctx, ts_node_end_byte(last) - 1);
    if (st == KL_OK)
        st = kl_edits_addf(out, end, end, "%sconst %s kl_total = kl_block_sum(kl_part);\n%sif (threadIdx.x == 0) atomicAdd(%s, kl_total);\n",
                           ind, a.elem, ind, a.addr);
    if (st == KL_ERR_NOMEM) return kl_error_set(err, st, "out of memory");
    return st;
}

static const kl_rule_param br_params[] = {{NULL, NULL, NULL}};

const kl_rule kl_rule_block_reduce = {
    NAME, "one atomicAdd per element into one output <-> a per-thread partial summed over the block, added once per block",
    br_params, 0, find, remove_site, apply,
};
