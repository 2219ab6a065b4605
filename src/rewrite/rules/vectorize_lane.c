/* vectorize, the thread-strided form: see vectorize_lane.h.
 *
 * recognised: `for (T c = S; c < N; c += K)` where either S is a lane index (`threadIdx.x % 32`,
 *   `threadIdx.x & 31`, `% warpSize`, or a local holding one, assigned once) and K the same warp
 *   size (32, warpSize, a constant naming 32), or S is `threadIdx.D` (or a local holding it) and K
 *   `blockDim.D` or a constant (the block size the launch uses). Over the group the starts are
 *   0 … K-1 once each, which is what lets a vector loop `v = S; v < nv; v += K` cover the vectors
 *   0 … nv-1 once each, and the original loop from S + nv * W the rest. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules_tree.h"
#include "rewrite/rules/vectorize_lane.h"
#include "syntax/affine.h"
#include "util/util.h"


/* ---- who a thread is ----------------------------------------------------------------------------- */

typedef struct decl_find {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode value;         /* the initializer of the one declaration of name */
    unsigned decls, assigns;
} decl_find;

static bool decl_visit(TSNode n, void *user)
{
    decl_find *d = user;
    if (rt_is(n, "init_declarator") && rt_text_is(d->ctx, kl_ast_declarator_name(n), d->name)) {
        d->decls++;
        d->value = rt_field(n, "value");
    } else if (rt_is(n, "assignment_expression") && rt_text_is(d->ctx, kl_ast_unparen(rt_field(n, "left")), d->name)) {
        d->assigns++;
    } else if (rt_is(n, "update_expression") && rt_text_is(d->ctx, kl_ast_unparen(rt_field(n, "argument")), d->name)) {
        d->assigns++;
    }
    return true;
}

/* The value of a local of fn declared once with an initializer and never assigned, or a null node. */
static TSNode local_value(const kl_rule_ctx *ctx, TSNode fn, TSNode id)
{
    TSNode none = {{0}, 0, 0};
    if (!rt_is(id, "identifier")) return none;
    char *name = rt_text(ctx, id);
    if (!name) return none;
    decl_find d = {ctx, name, none, 0, 0};
    kl_ast_walk(kl_ast_function_body(fn), decl_visit, &d);
    free(name);
    return d.decls == 1 && !d.assigns ? d.value : none;
}

/* `threadIdx.D` (through locals holding it): D, else 0. */
static char thread_dim(const kl_rule_ctx *ctx, TSNode fn, TSNode e, unsigned depth)
{
    e = kl_ast_unparen(e);
    if (depth > 4) return 0;
    if (rt_is(e, "cast_expression")) return thread_dim(ctx, fn, rt_field(e, "value"), depth + 1);
    if (rt_is(e, "field_expression") && rt_text_is(ctx, rt_field(e, "argument"), "threadIdx")) {
        TSNode f = rt_field(e, "field");
        for (const char *d = "xyz"; *d; d++) {
            char s[2] = {*d, 0};
            if (rt_text_is(ctx, f, s)) return *d;
        }
        return 0;
    }
    TSNode v = local_value(ctx, fn, e);
    return ts_node_is_null(v) ? 0 : thread_dim(ctx, fn, v, depth + 1);
}

static bool is_warp_size(const kl_rule_ctx *ctx, TSNode fn, TSNode e, long long *k)
{
    e = kl_ast_unparen(e);
    if (rt_text_is(ctx, e, "warpSize")) {
        *k = 32;
        return true;
    }
    return rt_const_eval(ctx, fn, e, k);
}

/* A lane index: `tid % M` or `tid & (M - 1)` with tid a thread index (through locals): M, else 0. */
static long long lane_mod(const kl_rule_ctx *ctx, TSNode fn, TSNode e, unsigned depth)
{
    e = kl_ast_unparen(e);
    if (depth > 4) return 0;
    if (rt_is(e, "cast_expression")) return lane_mod(ctx, fn, rt_field(e, "value"), depth + 1);
    if (rt_is(e, "binary_expression")) {
        TSNode op = rt_field(e, "operator");
        long long m = 0;
        if (!thread_dim(ctx, fn, rt_field(e, "left"), 0)) return 0;
        if (rt_text_is(ctx, op, "%") && is_warp_size(ctx, fn, rt_field(e, "right"), &m) && m > 1) return m;
        TSNode r = kl_ast_unparen(rt_field(e, "right"));
        if (rt_text_is(ctx, op, "&")) {
            /* & (warpSize - 1), & 31 */
            if (rt_is(r, "binary_expression") && rt_text_is(ctx, rt_field(r, "operator"), "-") &&
                rt_text_is(ctx, kl_ast_unparen(rt_field(r, "left")), "warpSize") && rt_const_eval(ctx, fn, rt_field(r, "right"), &m) &&
                m == 1)
                return 32;
            if (rt_const_eval(ctx, fn, r, &m) && m > 0 && ((m + 1) & m) == 0) return m + 1;
        }
        return 0;
    }
    TSNode v = local_value(ctx, fn, e);
    return ts_node_is_null(v) ? 0 : lane_mod(ctx, fn, v, depth + 1);
}

int kl_vl_recognise(const kl_rule_ctx *ctx, TSNode fn, TSNode loop, const char *var, kl_vl_loop *L, char *why,
                    size_t size)
{
    memset(L, 0, sizeof *L);
    why[0] = '\0';
    if (!rt_is(loop, "for_statement")) return 0;
    TSNode upd = kl_ast_unparen(rt_field(loop, "update")), stride = {{0}, 0, 0};
    if (rt_is(upd, "assignment_expression") && rt_text_is(ctx, rt_field(upd, "operator"), "+=") &&
        rt_text_is(ctx, kl_ast_unparen(rt_field(upd, "left")), var))
        stride = kl_ast_unparen(rt_field(upd, "right"));
    if (ts_node_is_null(stride)) return 0;
    /* the step: a warp's or a block's size */
    char bdim = 0;
    long long k = 0;
    bool konst = is_warp_size(ctx, fn, stride, &k) && k > 1;
    if (rt_is(stride, "field_expression") && rt_text_is(ctx, rt_field(stride, "argument"), "blockDim")) {
        TSNode f = rt_field(stride, "field");
        bdim = rt_text_is(ctx, f, "x") ? 'x' : rt_text_is(ctx, f, "y") ? 'y' : rt_text_is(ctx, f, "z") ? 'z' : 0;
    }
    if (!konst && !bdim) return 0;
    TSNode init = rt_field(loop, "initializer"), start = {{0}, 0, 0};
    if (rt_is(init, "declaration") && ts_node_named_child_count(init) >= 2) {
        TSNode d = ts_node_named_child(init, ts_node_named_child_count(init) - 1);
        if (rt_is(d, "init_declarator")) start = rt_field(d, "value");
    } else if (rt_is(init, "assignment_expression")) start = rt_field(init, "right");
    if (ts_node_is_null(start)) return 0;
    char td = thread_dim(ctx, fn, start, 0);
    long long m = lane_mod(ctx, fn, start, 0);
    L->start = start;
    L->stride = stride;
    if (m && konst && m == k) {
        kl_snprintf(L->group, sizeof L->group, "warp");
        return 1;
    }
    if (td && (bdim == td || (konst && !bdim))) {
        kl_snprintf(L->group, sizeof L->group, "block");
        return 1;
    }
    char *st = rt_text(ctx, start), *sd = rt_text(ctx, stride);
    kl_snprintf(why, size,
                "the loop over %s steps by %s but starts at `%s`, not at the thread's own index in a group of that "
                "size (threadIdx.x with blockDim.x, a lane index with 32): the vectors would not be shared out "
                "once each",
                var, sd ? sd : "?", st ? st : "?");
    free(st);
    free(sd);
    return 2;
}

/* ---- the body -------------------------------------------------------------------------------------- */

#define VL_MAXRED 16

typedef struct red {
    char name[64];
    unsigned expect;      /* uses of the name its updates account for */
} red;

typedef struct body_scan {
    const kl_rule_ctx *ctx;
    TSNode loop, body;
    const char *var;
    red r[VL_MAXRED];
    unsigned nr;
    char *why;
    size_t size;
} body_scan;

typedef struct declared_scan {
    const kl_rule_ctx *ctx;
    const char *name;
    bool yes;
} declared_scan;

static bool declared_visit(TSNode n, void *user)
{
    declared_scan *d = user;
    if (d->yes) return false;
    if (rt_is(n, "declaration"))
        for (uint32_t k = 0; k < ts_node_named_child_count(n) && !d->yes; k++) {
            TSNode nm = kl_ast_declarator_name(ts_node_named_child(n, k));
            d->yes = rt_is(nm, "identifier") && rt_text_is(d->ctx, nm, d->name);
        }
    return !d->yes;
}

/* Is name declared inside n? */
static bool declared_in(const kl_rule_ctx *ctx, TSNode n, const char *name)
{
    declared_scan d = {ctx, name, false};
    kl_ast_walk(n, declared_visit, &d);
    return d.yes;
}

static bool under_condition(TSNode n, TSNode body)
{
    for (TSNode p = ts_node_parent(n); !ts_node_is_null(p) && !ts_node_eq(p, body); p = ts_node_parent(p))
        if (rt_is(p, "if_statement") || rt_is(p, "conditional_expression") || rt_is(p, "switch_statement") ||
            rt_is(p, "binary_expression"))
            return true; /* binary: `a && (s += x)` */
    return false;
}

static red *red_of(body_scan *b, const char *name)
{
    for (unsigned i = 0; i < b->nr; i++)
        if (!strcmp(b->r[i].name, name)) return &b->r[i];
    if (b->nr == VL_MAXRED) return NULL;
    red *r = &b->r[b->nr++];
    memset(r, 0, sizeof *r);
    kl_snprintf(r->name, sizeof r->name, "%s", name);
    return r;
}

/* The uses of `name` a reduction `name = …` accounts for: 2 for `s = s + e`, `s = fmaxf(s, e)`
 * (the target and the operand), 0 when it is no reduction. */
static unsigned plain_reduction(const kl_rule_ctx *ctx, TSNode rhs, const char *name)
{
    rhs = kl_ast_unparen(rhs);
    if (rt_is(rhs, "binary_expression")) {
        TSNode op = rt_field(rhs, "operator");
        if (!rt_text_is(ctx, op, "+") && !rt_text_is(ctx, op, "*") && !rt_text_is(ctx, op, "|") &&
            !rt_text_is(ctx, op, "&") && !rt_text_is(ctx, op, "^"))
            return 0;
        if (rt_text_is(ctx, kl_ast_unparen(rt_field(rhs, "left")), name) || rt_text_is(ctx, kl_ast_unparen(rt_field(rhs, "right")), name))
            return 2;
        return 0;
    }
    if (rt_is(rhs, "call_expression")) {
        static const char *const fns[] = {"fmaxf", "fminf", "fmax", "fmin", "max", "min", "::fmaxf", "::fminf", NULL};
        TSNode f = rt_field(rhs, "function"), args = rt_field(rhs, "arguments");
        bool known = false;
        for (unsigned i = 0; fns[i] && !known; i++) known = rt_text_is(ctx, f, fns[i]);
        if (!known || ts_node_named_child_count(args) != 2) return 0;
        if (rt_text_is(ctx, kl_ast_unparen(ts_node_named_child(args, 0)), name) ||
            rt_text_is(ctx, kl_ast_unparen(ts_node_named_child(args, 1)), name))
            return 2;
    }
    return 0;
}

static bool body_visit(TSNode n, void *user)
{
    body_scan *b = user;
    if (b->why[0]) return false;
    if (rt_is(n, "call_expression")) {
        static const char *const coll[] = {"__syncthreads", "__syncwarp", "__shfl", "__ballot", "__any", "__all",
                                           "__activemask", "__reduce", "__match", NULL};
        char *f = rt_text(b->ctx, rt_field(n, "function"));
        for (unsigned i = 0; f && coll[i]; i++)
            if (kl_str_starts(f, coll[i])) {
                kl_snprintf(b->why, b->size,
                            "the loop body calls %s (line %u): with other elements per thread the threads would "
                            "run it a different number of times",
                            f, kl_ast_line(n));
                break;
            }
        free(f);
        return !b->why[0];
    }
    TSNode target = {{0}, 0, 0};
    bool update = false;
    if (rt_is(n, "assignment_expression")) target = kl_ast_unparen(rt_field(n, "left"));
    else if (rt_is(n, "update_expression")) target = kl_ast_unparen(rt_field(n, "argument")), update = true;
    if (!rt_is(target, "identifier")) return true;
    char *name = rt_text(b->ctx, target);
    if (!name) return true;
    if (!strcmp(name, b->var)) {
        kl_snprintf(b->why, b->size, "the loop body assigns the loop variable %s (line %u)", name, kl_ast_line(n));
    } else if (!declared_in(b->ctx, b->body, name)) {
        /* a scalar living across passes: a reduction, or the order of the elements shows */
        unsigned uses = 0;
        if (update) uses = 1;
        else {
            TSNode op = rt_field(n, "operator");
            if (rt_text_is(b->ctx, op, "=")) uses = plain_reduction(b->ctx, rt_field(n, "right"), name);
            else if (rt_text_is(b->ctx, op, "+=") || rt_text_is(b->ctx, op, "-=") || rt_text_is(b->ctx, op, "*=") ||
                     rt_text_is(b->ctx, op, "|=") || rt_text_is(b->ctx, op, "&=") || rt_text_is(b->ctx, op, "^="))
                uses = 1;
        }
        red *r = uses ? red_of(b, name) : NULL;
        if (!uses)
            kl_snprintf(b->why, b->size,
                        "the loop body sets %s at line %u other than as a sum, product, min or max: with other "
                        "elements per thread, in another order, its value would change",
                        name, kl_ast_line(n));
        else if (under_condition(n, b->body))
            kl_snprintf(b->why, b->size,
                        "the update of %s at line %u is conditional (an arg-max, a first match): which elements a "
                        "thread sees decides it, and the vector loop changes that",
                        name, kl_ast_line(n));
        else if (!r)
            kl_snprintf(b->why, b->size, "the loop body updates more than %d scalars", VL_MAXRED);
        else r->expect += uses;
    }
    free(name);
    return !b->why[0];
}

typedef struct assigned_scan {
    const kl_rule_ctx *ctx;
    TSNode body;
    char bad[64];
} assigned_scan;

typedef struct set_scan {
    const kl_rule_ctx *ctx;
    const char *name;
    bool yes;
} set_scan;

static bool set_visit(TSNode n, void *user)
{
    set_scan *s = user;
    if (s->yes) return false;
    TSNode t = {{0}, 0, 0};
    if (rt_is(n, "assignment_expression")) t = kl_ast_unparen(rt_field(n, "left"));
    else if (rt_is(n, "update_expression")) t = kl_ast_unparen(rt_field(n, "argument"));
    s->yes = !ts_node_is_null(t) && rt_is(t, "identifier") && rt_text_is(s->ctx, t, s->name);
    return !s->yes;
}

/* An identifier of the visited expression that the body declares or assigns, into bad. */
static bool invariant_visit(TSNode n, void *user)
{
    assigned_scan *a = user;
    if (a->bad[0]) return false;
    if (!rt_is(n, "identifier")) return true;
    char *name = rt_text(a->ctx, n);
    if (!name) return true;
    set_scan s = {a->ctx, name, false};
    kl_ast_walk(a->body, set_visit, &s);
    if (s.yes || declared_in(a->ctx, a->body, name)) kl_snprintf(a->bad, sizeof a->bad, "%s", name);
    free(name);
    return !a->bad[0];
}

typedef struct sub_scan {
    const kl_rule_ctx *ctx;
    TSNode body;
    const char *var;
    char bad[64];
    unsigned line;
} sub_scan;

/* Subscripts at the loop variable: their array and the rest of their index the same every pass. */
static bool sub_visit(TSNode n, void *user)
{
    sub_scan *s = user;
    if (s->bad[0]) return false;
    if (!rt_is(n, "subscript_expression")) return true;
    TSNode ix = rt_field(n, "index");
    if (ts_node_is_null(ix)) ix = ts_node_named_child(n, 1);
    if (ts_node_is_null(ix) || rt_count_ident(s->ctx, ix, s->var) == 0) return true;
    assigned_scan a = {s->ctx, s->body, ""};
    kl_ast_walk(rt_field(n, "argument"), invariant_visit, &a);
    if (!a.bad[0]) kl_ast_walk(ix, invariant_visit, &a);
    if (a.bad[0]) {
        kl_snprintf(s->bad, sizeof s->bad, "%s", a.bad);
        s->line = kl_ast_line(n);
    }
    return !s->bad[0];
}

bool kl_vl_body_ok(const kl_rule_ctx *ctx, TSNode loop, const char *var, char *why, size_t size)
{
    why[0] = '\0';
    TSNode body = rt_field(loop, "body");
    body_scan b = {.ctx = ctx, .loop = loop, .body = body, .var = var, .why = why, .size = size};
    kl_ast_walk(body, body_visit, &b);
    if (why[0]) return false;
    /* every use of a reduction's scalar is its own update's: no update reads another's, none reads its own
     * twice, no other statement reads one */
    for (unsigned i = 0; i < b.nr; i++) {
        unsigned uses = rt_count_ident(ctx, body, b.r[i].name);
        if (uses != b.r[i].expect) {
            kl_snprintf(why, size,
                        "the loop body reads %s besides updating it (a running value: an online max, a mean): "
                        "with other elements per thread, in another order, what it reads would change",
                        b.r[i].name);
            return false;
        }
    }
    assigned_scan a = {ctx, body, ""};
    kl_ast_walk(kl_ast_unparen(rt_field(kl_ast_unparen(rt_field(loop, "condition")), "right")), invariant_visit, &a);
    if (a.bad[0]) {
        kl_snprintf(why, size, "the loop body sets %s, which the loop's bound reads", a.bad);
        return false;
    }
    sub_scan s = {ctx, body, var, "", 0};
    kl_ast_walk(body, sub_visit, &s);
    if (s.bad[0]) {
        kl_snprintf(why, size,
                    "the access at line %u reads %s, which the loop body declares or sets: the vector loop needs "
                    "the row's address before the loop",
                    s.line, s.bad);
        return false;
    }
    return true;
}
