/* warp-reduce: shared-memory tree reductions <-> warp shuffles with one shared stage between warps.
 *
 * present: a shuffle loop over the offsets 16..1 (`v += __shfl_xor_sync(m, v, o)`,
 *   `v = fmaxf(v, __shfl_down_sync(m, v, o))`, or a struct value shuffled field by field and
 *   merged), or `v = warp_sum(v);` calling a __device__ helper that is such a loop, followed by
 *   the shared stage between warps: `if (lane == 0) P[warp] = v; __syncthreads();` and either a
 *   loop over the partials (every thread reads them) or a second warp step in the first warp.
 *   Remove writes a shared-memory tree over the block in its place.
 * applicable: `for (s = blockDim.x / 2; s > 0; s >>= 1) { if (tid < s) sh[tid] OP= sh[tid + s];
 *   __syncthreads(); }`. Apply writes warp shuffles, one shared array of blockDim/32 partials,
 *   and the first warp's reduction of them, leaving the result in sh[0] as the tree did. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "rewrite/rules/tree_step.h"
#include "syntax/affine.h"
#include "util/util.h"

static const char *const shuffle_values[] = {"xor", "down", NULL};
static const kl_rule_param wr_params[] = {{"shuffle", shuffle_values, "xor"}};

#define WR_MARKER "warp-reduce"

/* rt_text_is that accepts a null node (false). */
/* ---- small tree helpers ------------------------------------------------------------------------ */

static TSNode unwrap1(TSNode n)
{
    while (rt_is(n, "compound_statement") && ts_node_named_child_count(n) == 1) n = ts_node_named_child(n, 0);
    return n;
}

/* The assignment of an expression statement, or a null node. */
static TSNode stmt_assign(TSNode st)
{
    TSNode none = {0};
    if (!rt_is(st, "expression_statement")) return none;
    TSNode a = ts_node_named_child(st, 0);
    return rt_is(a, "assignment_expression") ? a : none;
}

static bool op_is(const kl_rule_ctx *ctx, TSNode n, const char *op)
{
    return rt_text_is(ctx, rt_field(n, "operator"), op);
}

/* The declaration (or parameter) of `name` in fn, with its type text, qualifiers such as const,
 * static, __shared__ and volatile left out. False when not found. */
static bool decl_type(const kl_rule_ctx *ctx, TSNode fn, const char *name, TSNode *decl, char *type, size_t size)
{
    TSNode found = rt_find_decl(ctx, fn, name, false, NULL);
    if (ts_node_is_null(found)) return false;
    if (decl) *decl = found;
    TSNode t = rt_field(found, "type");
    if (ts_node_is_null(t)) return false;
    rt_text_copy(ctx, t, type, size);
    return type[0] != '\0';
}

static const char *dtype_of(const char *type)
{
    if (!strcmp(type, "float")) return "f32";
    if (!strcmp(type, "double")) return "f64";
    if (!strcmp(type, "int")) return "i32";
    if (!strcmp(type, "unsigned") || !strcmp(type, "unsigned int")) return "u32";
    return type;
}

/* ---- the present side: warp steps and the shared stage ---------------------------------------- */

typedef struct wr_step {
    char val[64];      /* the reduced variable */
    char op[64];       /* "+" or the combining function (fmaxf, merge, ...) */
    bool xor_;         /* __shfl_xor_sync (else __shfl_down_sync) */
    char helper[128];  /* `v = helper(v);`: the helper's name */
} wr_step;

/* `__shfl_{xor,down}_sync(m, <val>[.f], var)`: true with *xor_ set. arg_val receives the text
 * of the second argument. */
static bool shfl_call(const kl_rule_ctx *ctx, TSNode n, const char *var, bool *xor_, char *arg_val, size_t size)
{
    n = kl_ast_unparen(n);
    if (!rt_is(n, "call_expression")) return false;
    TSNode f = rt_field(n, "function"), args = rt_field(n, "arguments");
    bool x = rt_text_is(ctx, f, "__shfl_xor_sync"), d = rt_text_is(ctx, f, "__shfl_down_sync");
    if (!x && !d) return false;
    uint32_t c = ts_node_named_child_count(args);
    if (c < 3 || c > 4) return false;
    if (!rt_text_is(ctx, ts_node_named_child(args, 2), var)) return false;
    *xor_ = x;
    rt_text_unblank_to(ctx, ts_node_named_child(args, 1), arg_val, size);
    return true;
}

/* `X OP= shfl(m, X, o)`, `X = X + shfl(...)`, `X = F(X, shfl(...))` (either order), or a block
 * `{ T y; y.f = shfl(m, X.f, o); ...; X = F(X, y); }`. */
static bool shuffle_body(const kl_rule_ctx *ctx, TSNode body, const char *var, wr_step *s)
{
    body = unwrap1(body);
    char av[128];
    if (rt_is(body, "expression_statement")) {
        TSNode a = stmt_assign(body);
        if (ts_node_is_null(a) || !rt_is(rt_field(a, "left"), "identifier")) return false;
        rt_text_copy(ctx, rt_field(a, "left"), s->val, sizeof s->val);
        TSNode r = kl_ast_unparen(rt_field(a, "right"));
        if (op_is(ctx, a, "+=")) {
            if (!shfl_call(ctx, r, var, &s->xor_, av, sizeof av) || strcmp(av, s->val)) return false;
            kl_snprintf(s->op, sizeof s->op, "+");
            return true;
        }
        if (!op_is(ctx, a, "=")) return false;
        TSNode x, y;
        if (rt_is(r, "binary_expression") && op_is(ctx, r, "+")) {
            x = rt_field(r, "left"), y = rt_field(r, "right");
            kl_snprintf(s->op, sizeof s->op, "+");
        } else if (rt_is(r, "call_expression") && rt_is(rt_field(r, "function"), "identifier") &&
                   ts_node_named_child_count(rt_field(r, "arguments")) == 2) {
            x = ts_node_named_child(rt_field(r, "arguments"), 0), y = ts_node_named_child(rt_field(r, "arguments"), 1);
            rt_text_copy(ctx, rt_field(r, "function"), s->op, sizeof s->op);
        } else {
            return false;
        }
        if (rt_text_is(ctx, x, s->val) && shfl_call(ctx, y, var, &s->xor_, av, sizeof av) && !strcmp(av, s->val))
            return true;
        if (rt_text_is(ctx, y, s->val) && shfl_call(ctx, x, var, &s->xor_, av, sizeof av) && !strcmp(av, s->val))
            return true;
        return false;
    }
    if (!rt_is(body, "compound_statement")) return false;
    uint32_t c = ts_node_named_child_count(body);
    TSNode last = {{0}, 0, 0};
    for (uint32_t i = c; i-- > 0;) {
        TSNode k = ts_node_named_child(body, i);
        if (!rt_is(k, "comment")) {
            last = k;
            break;
        }
    }
    TSNode la = stmt_assign(last);
    if (ts_node_is_null(la) || !op_is(ctx, la, "=") || !rt_is(rt_field(la, "left"), "identifier")) return false;
    TSNode r = kl_ast_unparen(rt_field(la, "right"));
    if (!rt_is(r, "call_expression") || !rt_is(rt_field(r, "function"), "identifier") ||
        ts_node_named_child_count(rt_field(r, "arguments")) != 2)
        return false;
    rt_text_copy(ctx, rt_field(la, "left"), s->val, sizeof s->val);
    rt_text_copy(ctx, rt_field(r, "function"), s->op, sizeof s->op);
    TSNode a0 = ts_node_named_child(rt_field(r, "arguments"), 0), a1 = ts_node_named_child(rt_field(r, "arguments"), 1);
    TSNode none = {{0}, 0, 0};
    TSNode other = rt_text_is(ctx, a0, s->val) ? a1 : rt_text_is(ctx, a1, s->val) ? a0 : none;
    if (!rt_is(other, "identifier")) return false;
    char y[64];
    rt_text_copy(ctx, other, y, sizeof y);
    unsigned shuffles = 0;
    size_t vl = strlen(s->val), yl = strlen(y);
    for (uint32_t i = 0; i < c; i++) {
        TSNode k = ts_node_named_child(body, i);
        if (ts_node_eq(k, last) || rt_is(k, "comment") || rt_is(k, "declaration")) continue;
        TSNode a = stmt_assign(k);
        if (ts_node_is_null(a) || !op_is(ctx, a, "=")) return false;
        char lt[128];
        rt_text_unblank_to(ctx, rt_field(a, "left"), lt, sizeof lt);
        bool xr;
        if (strncmp(lt, y, yl) || (lt[yl] && lt[yl] != '.')) return false;
        if (!shfl_call(ctx, rt_field(a, "right"), var, &xr, av, sizeof av)) return false;
        if (strncmp(av, s->val, vl) || (av[vl] && av[vl] != '.') || strcmp(av + vl, lt + yl)) return false;
        if (shuffles++ && xr != s->xor_) return false;
        s->xor_ = xr;
    }
    return shuffles > 0;
}

/* `for (… o = <start>; o > 0; …)` (or `o >= 1`): a halving loop's condition, down to 1. */
static bool halving_to_one(const kl_rule_ctx *ctx, TSNode st, const char *var)
{
    char c[96];
    rt_text_unblank_to(ctx, rt_field(st, "condition"), c, sizeof c);
    char want1[96], want2[96];
    kl_snprintf(want1, sizeof want1, "%s>0", var);
    kl_snprintf(want2, sizeof want2, "%s>=1", var);
    return !strcmp(c, want1) || !strcmp(c, want2);
}

/* A loop over the offsets 16, 8, 4, 2, 1 (or 1 .. 16; not first: from a smaller power of two)
 * whose body is a shuffle step. */
static bool shuffle_loop(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode st, bool first, wr_step *s)
{
    int li = kl_affine_loop_index(ax, st);
    if (li < 0) return false;
    const kl_ax_loop *L = kl_affine_loop(ax, (unsigned)li);
    /* the first step covers the 32 lanes (5 offsets); the one over the partials may cover fewer */
    if (L->kind != KL_LOOP_FOR || !L->var || !L->step) return false;
    if (!L->trip_known) {
        /* the step over the partials may start where the block size puts it, known at run time
         * (`for (o = blockDim.x / (2 * warpSize); o > 0; o /= 2)`): halving down to 1 */
        if (first || !halving_to_one(ctx, st, L->var) || (strcmp(L->step, ">>1") && strcmp(L->step, "/2")))
            return false;
    } else if (first ? L->trip != 5 : (L->trip < 1 || L->trip > 5)) {
        return false;
    }
    if (strcmp(L->step, ">>1") && strcmp(L->step, "/2") && strcmp(L->step, "<<1") && strcmp(L->step, "*2"))
        return false;
    memset(s, 0, sizeof *s);
    return shuffle_body(ctx, rt_field(st, "body"), L->var, s);
}

/* A __device__ helper whose body is a shuffle loop over its first parameter, then `return` it. */
static bool warp_helper(const kl_rule_ctx *ctx, const char *name, wr_step *s)
{
    TSNode fn = rt_device_fn_named(ctx, name);
    if (ts_node_is_null(fn)) return false;
    TSNode body = kl_ast_function_body(fn);
    TSNode ps = kl_ast_function_params(fn);
    if (ts_node_is_null(body) || ts_node_named_child_count(ps) < 1) return false;
    TSNode p0 = kl_ast_declarator_name(rt_field(ts_node_named_child(ps, 0), "declarator"));
    TSNode loop = {{0}, 0, 0}, ret = {{0}, 0, 0};
    uint32_t c = ts_node_named_child_count(body);
    for (uint32_t i = 0; i < c; i++) {
        TSNode k = ts_node_named_child(body, i);
        if (rt_is(k, "comment")) continue;
        if (ts_node_is_null(loop)) loop = k;
        else if (ts_node_is_null(ret)) ret = k;
        else return false;
    }
    if (!rt_is(ret, "return_statement") || ts_node_named_child_count(ret) != 1 || ts_node_is_null(p0)) return false;
    kl_affine_ctx *hax = NULL;
    if (kl_rules_affine(ctx, fn, &hax, NULL) != KL_OK) return false;
    bool ok = shuffle_loop(ctx, hax, loop, true, s) && rt_text_is(ctx, p0, s->val) &&
              rt_text_is(ctx, ts_node_named_child(ret, 0), s->val);
    kl_rules_affine_done(ctx, hax);
    return ok;
}

/* A warp step: a shuffle loop, or `X = helper(X);` with a warp_helper. */
static bool warp_step(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode st, bool first, wr_step *s)
{
    if (rt_is(st, "for_statement")) return shuffle_loop(ctx, ax, st, first, s);
    TSNode a = stmt_assign(st);
    if (ts_node_is_null(a) || !op_is(ctx, a, "=") || !rt_is(rt_field(a, "left"), "identifier")) return false;
    TSNode r = kl_ast_unparen(rt_field(a, "right"));
    char x[64], fname[128];
    if (!rt_is(r, "call_expression") || !rt_callee_name(ctx, r, fname, sizeof fname)) return false;
    TSNode args = rt_field(r, "arguments");
    if (ts_node_named_child_count(args) != 1) return false;
    rt_text_copy(ctx, rt_field(a, "left"), x, sizeof x);
    if (!rt_text_is(ctx, ts_node_named_child(args, 0), x)) return false;
    if (!warp_helper(ctx, fname, s)) return false;
    kl_snprintf(s->val, sizeof s->val, "%s", x);
    kl_snprintf(s->helper, sizeof s->helper, "%s", fname);
    return true;
}

/* A present site, analysed. */
typedef struct wr_present {
    TSNode step;             /* the first warp step */
    wr_step s;
    char type[128];          /* the reduced value's type */
    bool staged;             /* the shared stage between warps was recognised */
    char why[400];           /* else: why not */
    TSNode decls[8];         /* declarations between the step and the lane-0 store */
    unsigned ndecls;
    TSNode mid[4];           /* declarations between the barrier and the stage over the partials
                              * (`extent = blockSize / warpSize`, `ballot = __ballot_sync(mask, tid < extent)`) */
    unsigned nmid;
    TSNode a_if;             /* A inside `if (thread 0) { [T] R = init; for (…) R += P[w]; rest }` (kept) */
    TSNode store, sync;      /* `if (lane == 0) P[warp] = v;`, `__syncthreads();` */
    char part[64];           /* P */
    char final_kind;         /* 'A': a loop over the partials; 'B': a second warp step */
    TSNode a_init, a_loop;   /* A: `T r = ...;` (or `r = ...;`) and the loop */
    TSNode a_value;          /* A: the value r starts from */
    char a_res[64], a_type[128];
    bool a_declared;
    TSNode b_load, b_step, b_if; /* B: the load of the partials, the warp step, the if holding them */
    bool b_rest;             /* B: the if holds other statements too (kept) */
    TSNode c_init, c_if;     /* C: `T R = init;` and the `if (first warp) { R = ..P..; R = step(R); … }` */
    char c_res[64];          /* C: R */
} wr_present;

static bool expr_uses(const kl_rule_ctx *ctx, TSNode n, const char *name) { return rt_count_ident(ctx, n, name) > 0; }

typedef struct part_find {
    const kl_rule_ctx *ctx;
    const char *part;
    size_t len;
    bool found;
} part_find;

static bool part_visit(TSNode n, void *user)
{
    part_find *f = user;
    if (f->found) return false;
    if (!rt_is(n, "field_expression")) return true;
    char buf[256];
    if (ts_node_end_byte(n) - ts_node_start_byte(n) >= sizeof buf) return true;
    rt_text_unblank_to(f->ctx, n, buf, sizeof buf);
    if (!strcmp(buf, f->part)) f->found = true;
    return !f->found;
}

/* Does n read the partials' array `part`: a name (`red`), or a member of the helper's temporary
 * storage (`temp.warp_sums`, `storage->sums`), compared without blanks? */
static bool uses_part(const kl_rule_ctx *ctx, TSNode n, const char *part)
{
    if (!strchr(part, '.') && !strstr(part, "->")) return expr_uses(ctx, n, part);
    part_find f = {ctx, part, strlen(part), false};
    kl_ast_walk(n, part_visit, &f);
    return f.found;
}

/* `X = <expr reading P>;` */
static bool partial_load(const kl_rule_ctx *ctx, TSNode st, const char *x, const char *part)
{
    TSNode a = stmt_assign(st);
    return !ts_node_is_null(a) && op_is(ctx, a, "=") && rt_text_is(ctx, rt_field(a, "left"), x) &&
           uses_part(ctx, rt_field(a, "right"), part);
}

/* The final stage, kind A: `[T] R = init;` then `for (...) R += P[w];` / `R = F(R, P[w]);`. */
static bool final_a(const kl_rule_ctx *ctx, TSNode st, wr_present *p)
{
    TSNode init_val = {{0}, 0, 0};
    if (rt_is(st, "declaration")) {
        TSNode d = ts_node_named_child(st, ts_node_named_child_count(st) - 1);
        if (!rt_is(d, "init_declarator") || ts_node_named_child_count(st) < 2) return false;
        TSNode nm = kl_ast_declarator_name(d);
        if (!rt_is(nm, "identifier")) return false;
        rt_text_copy(ctx, nm, p->a_res, sizeof p->a_res);
        TSNode t = rt_field(st, "type");
        rt_text_copy(ctx, t, p->a_type, sizeof p->a_type);
        p->a_declared = true;
        init_val = rt_field(d, "value");
    } else {
        TSNode a = stmt_assign(st);
        if (ts_node_is_null(a) || !op_is(ctx, a, "=") || !rt_is(rt_field(a, "left"), "identifier")) return false;
        rt_text_copy(ctx, rt_field(a, "left"), p->a_res, sizeof p->a_res);
        init_val = rt_field(a, "right");
    }
    if (!strcmp(p->a_res, p->s.val)) return false;
    if (!ts_node_is_null(init_val) && (expr_uses(ctx, init_val, p->s.val))) return false;
    TSNode loop = rt_next_stmt(st);
    if (!rt_is(loop, "for_statement")) return false;
    TSNode b = unwrap1(rt_field(loop, "body"));
    TSNode a = stmt_assign(b);
    if (ts_node_is_null(a) || !rt_text_is(ctx, rt_field(a, "left"), p->a_res)) return false;
    TSNode r = rt_field(a, "right");
    if (!uses_part(ctx, r, p->part)) return false;
    if (op_is(ctx, a, "+=")) {
        if (strcmp(p->s.op, "+")) return false;
    } else if (op_is(ctx, a, "=")) {
        r = kl_ast_unparen(r);
        TSNode f = rt_field(r, "function");
        bool plus = rt_is(r, "binary_expression") && op_is(ctx, r, "+") && !strcmp(p->s.op, "+");
        bool call = rt_is(r, "call_expression") && rt_text_is(ctx, f, p->s.op);
        if (!plus && !call) return false;
    } else {
        return false;
    }
    p->a_init = st;
    p->a_loop = loop;
    p->a_value = init_val;
    p->final_kind = 'A';
    return true;
}

static bool same_op(const wr_step *a, const wr_step *b)
{
    return !strcmp(a->val, b->val) && !strcmp(a->op, b->op);
}

/* The final stage, kind B: the partials loaded into X and reduced by a second warp step, either
 * inside `if (first warp) { X = ..P..; step; rest }` or as `X = ..P..;` then `[if (c)] step`. */
static bool final_b(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode st, wr_present *p)
{
    wr_step s2;
    if (rt_is(st, "if_statement") && ts_node_is_null(rt_field(st, "alternative"))) {
        TSNode body = rt_field(st, "consequence");
        if (!rt_is(body, "compound_statement")) return false;
        TSNode first = ts_node_named_child(body, 0);
        while (rt_is(first, "comment")) first = ts_node_next_named_sibling(first);
        TSNode second = rt_next_stmt(first);
        if (!partial_load(ctx, first, p->s.val, p->part) || ts_node_is_null(second)) return false;
        if (!warp_step(ctx, ax, second, false, &s2) || !same_op(&s2, &p->s)) return false;
        p->b_load = first;
        p->b_step = second;
        p->b_if = st;
        p->b_rest = !ts_node_is_null(rt_next_stmt(second));
        p->final_kind = 'B';
        return true;
    }
    if (!partial_load(ctx, st, p->s.val, p->part)) return false;
    TSNode nx = rt_next_stmt(st);
    TSNode inner = nx;
    if (rt_is(nx, "if_statement") && ts_node_is_null(rt_field(nx, "alternative")))
        inner = unwrap1(rt_field(nx, "consequence"));
    if (!warp_step(ctx, ax, inner, false, &s2) || !same_op(&s2, &p->s)) return false;
    p->b_load = st;
    p->b_step = nx;
    p->final_kind = 'B';
    return true;
}

/* The final stage, kind C (the block-reduction helpers of CUB-like libraries): the result goes to
 * another variable R, given its value for the other threads first: `[T] R = init;` then
 * `if (first warp) { R = ..P..; R = step(R); rest }` (init reads neither the value nor P). */
static bool final_c(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode st, wr_present *p)
{
    TSNode init_val = {{0}, 0, 0};
    char res[64] = "";
    if (rt_is(st, "declaration")) {
        if (ts_node_named_child_count(st) != 2) return false;
        TSNode d = ts_node_named_child(st, 1);
        TSNode nm = kl_ast_declarator_name(d);
        if (!rt_is(d, "init_declarator") || !rt_is(nm, "identifier")) return false;
        rt_text_copy(ctx, nm, res, sizeof res);
        init_val = rt_field(d, "value");
    } else {
        TSNode a = stmt_assign(st);
        if (ts_node_is_null(a) || !op_is(ctx, a, "=") || !rt_is(rt_field(a, "left"), "identifier")) return false;
        rt_text_copy(ctx, rt_field(a, "left"), res, sizeof res);
        init_val = rt_field(a, "right");
    }
    if (ts_node_is_null(init_val) || !strcmp(res, p->s.val) || expr_uses(ctx, init_val, p->s.val) ||
        uses_part(ctx, init_val, p->part))
        return false;
    TSNode ifs = rt_next_stmt(st);
    if (!rt_is(ifs, "if_statement") || !ts_node_is_null(rt_field(ifs, "alternative"))) return false;
    if (expr_uses(ctx, rt_field(ifs, "condition"), res)) return false;
    TSNode body = rt_field(ifs, "consequence");
    if (!rt_is(body, "compound_statement")) return false;
    TSNode first = ts_node_named_child(body, 0);
    while (rt_is(first, "comment")) first = ts_node_next_named_sibling(first);
    TSNode second = rt_next_stmt(first);
    if (!partial_load(ctx, first, res, p->part) || ts_node_is_null(second)) return false;
    wr_step s2;
    if (!warp_step(ctx, ax, second, false, &s2) || strcmp(s2.val, res) || strcmp(s2.op, p->s.op)) return false;
    p->c_init = st;
    p->c_if = ifs;
    p->b_load = first;
    p->b_step = second;
    kl_snprintf(p->c_res, sizeof p->c_res, "%s", res);
    p->final_kind = 'C';
    return true;
}

static void analyse_present(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, TSNode step, wr_present *p)
{
    p->step = step;
    if (!decl_type(ctx, fn, p->s.val, NULL, p->type, sizeof p->type)) kl_snprintf(p->type, sizeof p->type, "float");
    TSNode st = rt_next_stmt(step);
    while (rt_is(st, "declaration") && p->ndecls < 8) {
        p->decls[p->ndecls++] = st;
        st = rt_next_stmt(st);
    }
    /* the lane-0 store */
    TSNode cons = unwrap1(rt_field(st, "consequence"));
    TSNode a = stmt_assign(cons);
    char ct[128] = "";
    if (rt_is(st, "if_statement")) rt_text_unblank_to(ctx, rt_field(st, "condition"), ct, sizeof ct);
    if (!rt_is(st, "if_statement") || !ts_node_is_null(rt_field(st, "alternative")) || ts_node_is_null(a) ||
        !op_is(ctx, a, "=") || !rt_is(rt_field(a, "left"), "subscript_expression") ||
        !rt_text_is(ctx, rt_field(a, "right"), p->s.val) || !strstr(ct, "==0")) {
        kl_snprintf(p->why, sizeof p->why,
                    "a warp-level reduction of %s: no shared stage between warps follows (line %u: expected "
                    "`if (lane == 0) part[warp] = %s;`)",
                    p->s.val, ts_node_is_null(st) ? kl_ast_line(step) : kl_ast_line(st), p->s.val);
        return;
    }
    TSNode arr = rt_field(rt_field(a, "left"), "argument");
    rt_text_unblank_to(ctx, arr, p->part, sizeof p->part);
    p->store = st;
    p->sync = rt_next_stmt(st);
    if (!rt_is_syncthreads(ctx, p->sync)) {
        kl_snprintf(p->why, sizeof p->why,
                    "a warp-level reduction of %s: its result is stored per warp at line %u with no __syncthreads() "
                    "and no stage between warps after it",
                    p->s.val, kl_ast_line(st));
        return;
    }
    TSNode f = rt_next_stmt(p->sync);
    if (final_a(ctx, f, p) || final_b(ctx, ax, f, p) || final_c(ctx, ax, f, p)) {
        p->staged = true;
        return;
    }
    /* declarations before the stage (an extent, a ballot's mask), each read by nothing before it */
    while (rt_is(f, "declaration") && p->nmid < 4) {
        p->mid[p->nmid++] = f;
        f = rt_next_stmt(f);
    }
    if (p->nmid && final_b(ctx, ax, f, p)) {
        p->staged = true;
        return;
    }
    /* one thread combines the partials one after another and hands the result on (through shared
     * memory): `if (tid == 0) { T r = init; for (w …) r += P[w]; total = r; }` */
    if (rt_is(f, "if_statement") && ts_node_is_null(rt_field(f, "alternative")) &&
        rt_is(rt_field(f, "consequence"), "compound_statement")) {
        TSNode first = ts_node_named_child(rt_field(f, "consequence"), 0);
        while (rt_is(first, "comment")) first = ts_node_next_named_sibling(first);
        if (!expr_uses(ctx, rt_field(f, "condition"), p->s.val) && final_a(ctx, first, p)) {
            p->a_if = f;
            p->staged = true;
            return;
        }
    }
    kl_snprintf(p->why, sizeof p->why,
                "line %u: the partials in %s are not combined by a loop over them nor by a second warp step of the "
                "same operation",
                ts_node_is_null(f) ? kl_ast_line(p->sync) : kl_ast_line(f), p->part);
}

/* ---- the applicable side: the shared-memory tree ------------------------------------------------- */

typedef struct wr_tree {
    TSNode loop;
    char sh[64], tid[128], op[64], type[128];
    char start[128];
} wr_tree;

static bool tree_loop(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const kl_ax_loop *L, wr_tree *t)
{
    memset(t, 0, sizeof *t);
    if (L->kind != KL_LOOP_FOR || !L->var || !L->step || !L->cmp || !L->bound || !L->start) return false;
    if (strcmp(L->step, ">>1") && strcmp(L->step, "/2")) return false;
    if (!(!strcmp(L->cmp, ">") && !strcmp(L->bound, "0")) && !(!strcmp(L->cmp, ">=") && !strcmp(L->bound, "1")) &&
        !(!strcmp(L->cmp, "!=") && !strcmp(L->bound, "0")))
        return false;
    TSNode body = rt_field(L->node, "body");
    if (!rt_is(body, "compound_statement")) return false;
    TSNode ifs = ts_node_named_child(body, 0);
    while (rt_is(ifs, "comment")) ifs = ts_node_next_named_sibling(ifs);
    TSNode sync = rt_next_stmt(ifs);
    if (!rt_is(ifs, "if_statement") || !ts_node_is_null(rt_field(ifs, "alternative")) ||
        !rt_is_syncthreads(ctx, sync) || !ts_node_is_null(rt_next_stmt(sync)))
        return false;
    /* if (tid < s) */
    TSNode c = kl_ast_unparen(rt_field(ifs, "condition"));
    if (rt_is(c, "condition_clause")) c = kl_ast_unparen(ts_node_named_child(c, 0));
    TSNode tid = {{0}, 0, 0};
    char *lt = NULL;
    TSNode rhs;
    if (rt_is(c, "binary_expression") && op_is(ctx, c, "<") && rt_text_is(ctx, rt_field(c, "right"), L->var)) {
        tid = rt_field(c, "left");
    } else if (kl_ast_less_misparse(ctx->src, c, &lt, &rhs) && rt_text_is(ctx, rhs, L->var)) {
        free(lt);
        return false; /* a field compared through the misparse: not a plain index */
    }
    free(lt);
    if (ts_node_is_null(tid)) return false;
    kl_affine af = {0};
    if (kl_affine_of(ax, tid, &af) != KL_OK) return false;
    int64_t k = 0;
    bool tid_ok = af.ok && af.nterms == 1 && kl_affine_coef_int(&af, "threadIdx.x", &k) && k == 1 &&
                  af.const_is_int && af.const_int == 0;
    kl_affine_release(&af);
    if (!tid_ok) return false;
    rt_text_unblank_to(ctx, tid, t->tid, sizeof t->tid);
    /* sh[tid] OP= sh[tid + s] */
    TSNode a = stmt_assign(unwrap1(rt_field(ifs, "consequence")));
    if (!kl_tree_step(ctx, a, t->tid, L->var, t->sh, sizeof t->sh, t->op, sizeof t->op)) return false;
    TSNode decl;
    if (!decl_type(ctx, fn, t->sh, &decl, t->type, sizeof t->type)) return false;
    char dt[64];
    rt_text_copy(ctx, decl, dt, sizeof dt);
    if (!strstr(dt, "__shared__")) return false;
    kl_snprintf(t->start, sizeof t->start, "%s", L->start);
    t->loop = L->node;
    return true;
}

/* ---- find ----------------------------------------------------------------------------------------- */

typedef struct wr_find {
    kl_sites *out;
} wr_find;

/* Is st a warp step (the first of a shuffle reduction)? Then the reduction around it, into p. */
static bool present_at(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, TSNode st, wr_present *p)
{
    memset(p, 0, sizeof *p);
    if (!warp_step(ctx, ax, st, true, &p->s)) return false;
    analyse_present(ctx, ax, fn, st, p);
    return true;
}

static kl_status add_present(const kl_rule_ctx *ctx, const char *name, TSNode fn, TSNode st, const wr_present *p,
                             kl_sites *out)
{
    int64_t bs = 0;
    char why[300] = "";
    bool bs_ok = rt_block_size(ctx, fn, name, &bs, why, sizeof why);
    json_t *f = json_pack("{s:s, s:s, s:s, s:s}", "dtype", dtype_of(p->type), "op", p->s.op, "shuffle",
                          p->s.xor_ ? "xor" : "down", "value", p->s.val);
    if (!f) return KL_ERR_NOMEM;
    if (p->s.helper[0]) json_object_set_new(f, "warp_helper", json_string(p->s.helper));
    if (!kl_ast_function_has(ctx->src, fn, "__global__")) json_object_set_new(f, "device_helper", json_true());
    if (p->staged) {
        json_object_set_new(f, "shared_stage",
                            json_string(p->final_kind == 'A'   ? "every thread reads the partials"
                                        : p->final_kind == 'B' ? "the first warp reduces the partials"
                                                               : "the first warp reduces the partials into another variable"));
        json_object_set_new(f, "partials", json_string(p->part));
    }
    if (bs_ok) json_object_set_new(f, "block", json_integer(bs));
    const char *why_not = !p->staged ? p->why : !bs_ok ? why : NULL;
    if (why_not) json_object_set_new(f, "why_not", json_string(why_not));
    char id[256], note[300];
    kl_site_id(id, sizeof id, name, st, NULL);
    kl_snprintf(note, sizeof note, "a warp-shuffle reduction (%s) of %s%s", p->s.op, p->s.val,
                p->staged ? " with a shared stage between warps" : " within a warp");
    return kl_sites_add(out, id, KL_SITE_PRESENT, kl_node_span(st), name, f, json_pack("{s:s}", "shuffle", p->s.xor_ ? "xor" : "down"),
                        note);
}

typedef struct stmt_scan {
    const kl_rule_ctx *ctx;
    kl_affine_ctx *ax;
    TSNode fn;
    const char *name;
    kl_sites *out;
    kl_status st;
    TSNode skip[16];          /* second warp steps of a recognised stage: not sites of their own */
    unsigned nskip;
} stmt_scan;

static bool scan_visit(TSNode n, void *user)
{
    stmt_scan *sc = user;
    if (sc->st != KL_OK) return false;
    if (!rt_is(n, "for_statement") && !rt_is(n, "expression_statement")) return true;
    for (unsigned i = 0; i < sc->nskip; i++)
        if (ts_node_eq(sc->skip[i], n)) return false;
    /* a shuffle loop that is a helper's whole body: listed in the helper (not applicable: warp-level) */
    wr_present p;
    if (!present_at(sc->ctx, sc->ax, sc->fn, n, &p)) return true;
    if (p.staged && (p.final_kind == 'B' || p.final_kind == 'C') && sc->nskip < 16) {
        TSNode inner = p.b_step;
        if (rt_is(inner, "if_statement")) inner = unwrap1(rt_field(inner, "consequence"));
        sc->skip[sc->nskip++] = inner;
    }
    sc->st = add_present(sc->ctx, sc->name, sc->fn, n, &p, sc->out);
    return false;
}

static kl_status visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    wr_find *wf = user;
    stmt_scan sc;
    memset(&sc, 0, sizeof sc);
    sc.ctx = ctx, sc.ax = ax, sc.fn = fn, sc.name = name, sc.out = wf->out, sc.st = KL_OK;
    kl_ast_walk(kl_ast_function_body(fn), scan_visit, &sc);
    if (sc.st != KL_OK) return sc.st;
    for (unsigned i = 0; i < kl_affine_loop_count(ax); i++) {
        wr_tree t;
        if (!tree_loop(ctx, ax, fn, kl_affine_loop(ax, i), &t)) continue;
        int64_t bs = 0;
        char why[300] = "";
        bool ok = rt_block_size(ctx, fn, name, &bs, why, sizeof why);
        json_t *f = json_pack("{s:s, s:s, s:s, s:s}", "dtype", dtype_of(t.type), "op", t.op, "shared", t.sh, "start",
                              t.start);
        if (!f) return KL_ERR_NOMEM;
        if (ok) json_object_set_new(f, "block", json_integer(bs));
        else json_object_set_new(f, "why_not", json_string(why));
        if (!kl_ast_function_has(ctx->src, fn, "__global__")) json_object_set_new(f, "device_helper", json_true());
        char id[256], note[300];
        kl_site_id(id, sizeof id, name, t.loop, NULL);
        kl_snprintf(note, sizeof note, "a shared-memory tree reduction (%s) over %s", t.op, t.sh);
        kl_status st = kl_sites_add(wf->out, id, KL_SITE_APPLICABLE, kl_node_span(t.loop), name, f, NULL, note);
        if (st != KL_OK) return st;
    }
    return KL_OK;
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    wr_find wf = {out};
    return kl_rules_each_gpu_function(ctx, visit, &wf, err);
}

/* ---- remove and apply ------------------------------------------------------------------------------ */

static void combine(char *buf, size_t size, const char *op, const char *a, const char *b)
{
    if (!strcmp(op, "+")) kl_snprintf(buf, size, "%s + %s", a, b);
    else kl_snprintf(buf, size, "%s(%s, %s)", op, a, b);
}

static kl_status edit_delete(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode st, kl_edits *out)
{
    uint32_t a, b;
    kl_rules_stmt_range(ctx, ax, st, WR_MARKER, &a, &b);
    return kl_edits_add(out, a, b, "");
}

static bool call_visit(TSNode n, void *user)
{
    if (rt_is(n, "call_expression")) *(bool *)user = true;
    return !*(bool *)user;
}

static bool has_call(TSNode n)
{
    bool found = false;
    kl_ast_walk(n, call_visit, &found);
    return found;
}

/* Is every call in n a vote (`__ballot_sync`, `__activemask`), which has no effect but its value? */
typedef struct vote_scan {
    const kl_rule_ctx *ctx;
    bool other;
} vote_scan;

static bool vote_visit(TSNode n, void *user)
{
    vote_scan *v = user;
    if (v->other) return false;
    if (rt_is(n, "call_expression")) {
        TSNode f = rt_field(n, "function");
        if (!rt_text_is(v->ctx, f, "__ballot_sync") && !rt_text_is(v->ctx, f, "__activemask")) v->other = true;
    }
    return true;
}

static bool ballot_only(const kl_rule_ctx *ctx, TSNode n)
{
    vote_scan v = {ctx, false};
    kl_ast_walk(n, vote_visit, &v);
    return !v.other;
}

/* Uses of name in fn outside the nodes in skip[]. */
static unsigned uses_outside(const kl_rule_ctx *ctx, TSNode fn, const char *name, const TSNode *skip, unsigned n)
{
    unsigned u = rt_count_ident(ctx, fn, name);
    for (unsigned i = 0; i < n; i++) {
        unsigned k = rt_count_ident(ctx, skip[i], name);
        u = k > u ? 0 : u - k;
    }
    return u;
}

/* Is the text (blanks removed) a zero: `0`, `0.0f`, `0.f`, `0u`, `T(0)`, `(T)0` …? */
static bool zero_text(const char *t)
{
    const char *open = strrchr(t, '(');
    if (open && t[strlen(t) - 1] == ')') t = open + 1; /* T(0) */
    else if (t[0] == '(' && strchr(t, ')')) t = strchr(t, ')') + 1; /* (T)0 */
    bool digit = false;
    for (; *t && *t != ')'; t++) {
        if (*t == '0') digit = true;
        else if (*t != '.' && !strchr("fFuUlL", *t)) return false;
    }
    return digit;
}

/* Does starting the loop over the partials from `init` leave their combination unchanged (init is
 * the operation's identity)? Only what is known: 0 for +, minus infinity (or the type's lowest
 * value) for the max functions. */
static bool identity_init(const kl_rule_ctx *ctx, const char *op, TSNode init)
{
    char t[64];
    if (ts_node_end_byte(init) - ts_node_start_byte(init) >= sizeof t) return false;
    rt_text_unblank_to(ctx, init, t, sizeof t);
    if (!strcmp(op, "+")) return zero_text(t);
    if (!strcmp(op, "fmaxf") || !strcmp(op, "fmax") || !strcmp(op, "max"))
        return !strcmp(t, "-INFINITY") || !strcmp(t, "-HUGE_VALF") || !strcmp(t, "-HUGE_VAL") ||
               !strcmp(t, "-FLT_MAX") || !strcmp(t, "-DBL_MAX") || !strcmp(t, "INT_MIN");
    return false;
}

static kl_status remove_present(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *name,
                                const wr_present *p, kl_edits *out, kl_error *err)
{
    if (!p->staged) return kl_rule_not_applicable(err, "%s", p->why);
    int64_t bs = 0;
    char why[300];
    if (!rt_block_size(ctx, fn, name, &bs, why, sizeof why)) return kl_rule_not_applicable(err, "%s", why);
    char ind[64], red[32], comb[200], elem[96], elem_s[96];
    uint32_t a, b;
    kl_rules_stmt_range(ctx, ax, p->step, WR_MARKER, &a, &b);
    kl_rules_indent(ctx, ts_node_start_byte(p->step), ind, sizeof ind);
    rt_fresh_name(ctx, fn, "kl_red", red, sizeof red);
    kl_snprintf(elem, sizeof elem, "%s[threadIdx.x]", red);
    kl_snprintf(elem_s, sizeof elem_s, "%s[threadIdx.x + s]", red);
    combine(comb, sizeof comb, p->s.op, elem, elem_s);
    kl_status st = kl_edits_addf(out, a, b,
                                 "%s__shared__ %s %s[%lld];\n"
                                 "%s%s[threadIdx.x] = %s;\n"
                                 "%s__syncthreads();\n"
                                 "%sfor (int s = blockDim.x / 2; s > 0; s >>= 1) {\n"
                                 "%s    if (threadIdx.x < s) %s[threadIdx.x] = %s;\n"
                                 "%s    __syncthreads();\n"
                                 "%s}\n"
                                 "%s%s = %s[0];\n"
                                 "%s__syncthreads();\n",
                                 ind, p->type, red, (long long)bs, ind, red, p->s.val, ind, ind, ind, red, comb, ind, ind,
                                 ind, p->s.val, red, ind);
    /* the statements of the shared stage */
    TSNode gone[32];
    unsigned ng = 0;
    gone[ng++] = p->step;
    gone[ng++] = p->store;
    gone[ng++] = p->sync;
    if (st == KL_OK) st = edit_delete(ctx, ax, p->store, out);
    if (st == KL_OK) st = edit_delete(ctx, ax, p->sync, out);
    if (p->final_kind == 'A') {
        uint32_t a1, b1, a2, b2;
        kl_rules_stmt_range(ctx, ax, p->a_init, WR_MARKER, &a1, &b1);
        kl_rules_stmt_range(ctx, ax, p->a_loop, WR_MARKER, &a2, &b2);
        char ind2[64];
        kl_rules_indent(ctx, ts_node_start_byte(p->a_init), ind2, sizeof ind2);
        /* the loop started from its init: the block's result combined with it, unless it is the
         * operation's identity (`float r = 0; r += P[w]` is the sum alone) */
        char *init = ts_node_is_null(p->a_value) ? NULL : rt_text(ctx, p->a_value);
        if (!ts_node_is_null(p->a_value) && !init) st = KL_ERR_NOMEM;
        kl_strbuf first = KL_STRBUF_INIT;
        if (!init || identity_init(ctx, p->s.op, p->a_value)) {
            kl_strbuf_addf(&first, "%s", p->s.val);
        } else {
            TSNode iv = p->a_value;
            bool atom = rt_is(iv, "identifier") || rt_is(iv, "number_literal") || rt_is(iv, "call_expression") ||
                        rt_is(iv, "parenthesized_expression") || rt_is(iv, "field_expression") ||
                        rt_is(iv, "subscript_expression");
            if (!strcmp(p->s.op, "+")) kl_strbuf_addf(&first, atom ? "%s + %s" : "(%s) + %s", init, p->s.val);
            else kl_strbuf_addf(&first, "%s(%s, %s)", p->s.op, init, p->s.val);
        }
        free(init);
        if (first.failed) st = KL_ERR_NOMEM;
        if (st == KL_OK)
            st = p->a_declared
                     ? kl_edits_addf(out, a1, b2, "%s%s %s = %s;\n", ind2, p->a_type, p->a_res, kl_strbuf_str(&first))
                     : kl_edits_addf(out, a1, b2, "%s%s = %s;\n", ind2, p->a_res, kl_strbuf_str(&first));
        kl_strbuf_release(&first);
        gone[ng++] = p->a_loop;
        (void)a2, (void)b1;
    } else if (p->final_kind == 'C') {
        /* R keeps its value in the other threads; in the if it takes the block's result, which
         * the tree left in every thread */
        char ind2[64];
        uint32_t a2, b2;
        kl_rules_indent(ctx, ts_node_start_byte(p->b_step), ind2, sizeof ind2);
        kl_rules_stmt_range(ctx, ax, p->b_step, WR_MARKER, &a2, &b2);
        if (st == KL_OK) st = edit_delete(ctx, ax, p->b_load, out);
        if (st == KL_OK) st = kl_edits_addf(out, a2, b2, "%s%s = %s;\n", ind2, p->c_res, p->s.val);
        gone[ng++] = p->b_load;
        gone[ng++] = p->b_step;
    } else {
        if (ts_node_is_null(p->b_if) || !p->b_rest) {
            if (st == KL_OK) st = edit_delete(ctx, ax, !ts_node_is_null(p->b_if) ? p->b_if : p->b_load, out);
            if (st == KL_OK && ts_node_is_null(p->b_if)) st = edit_delete(ctx, ax, p->b_step, out);
            gone[ng++] = !ts_node_is_null(p->b_if) ? p->b_if : p->b_load;
            if (ts_node_is_null(p->b_if)) gone[ng++] = p->b_step;
        } else {
            if (st == KL_OK) st = edit_delete(ctx, ax, p->b_load, out);
            if (st == KL_OK) st = edit_delete(ctx, ax, p->b_step, out);
            gone[ng++] = p->b_load;
            gone[ng++] = p->b_step;
        }
    }
    /* declarations that only served the stage (lane, warp, the partials' array): those between
     * the step and the store, those just before the step, and the partials' own, when nothing
     * else uses what they declare and they call nothing */
    TSNode cand[16];
    unsigned nc = 0;
    for (unsigned i = 0; i < p->ndecls; i++) cand[nc++] = p->decls[i];
    for (unsigned i = 0; i < p->nmid; i++) cand[nc++] = p->mid[i];
    for (TSNode d = rt_prev_stmt(p->step); rt_is(d, "declaration") && nc < 12; d = rt_prev_stmt(d)) cand[nc++] = d;
    TSNode pdecl;
    char ptype[128];
    if (decl_type(ctx, fn, p->part, &pdecl, ptype, sizeof ptype) && rt_is(pdecl, "declaration")) {
        bool seen = false;
        for (unsigned i = 0; i < nc; i++) seen |= ts_node_eq(cand[i], pdecl);
        if (!seen) cand[nc++] = pdecl;
    }
    /* to a fixed point: a declaration used only by one that goes (`extent`, read by the ballot's) goes too */
    bool deleted[16] = {0};
    for (bool more = true; more && st == KL_OK;) {
        more = false;
        for (unsigned i = 0; i < nc && st == KL_OK; i++) {
            TSNode d = cand[i];
            if (deleted[i]) continue;
            bool used = has_call(d) && !ballot_only(ctx, d);
            uint32_t c = ts_node_named_child_count(d);
            for (uint32_t k = 0; k < c; k++) {
                TSNode nm = kl_ast_declarator_name(ts_node_named_child(d, k));
                if (ts_node_is_null(nm) || !rt_is(nm, "identifier")) continue;
                char nmt[64];
                rt_text_copy(ctx, nm, nmt, sizeof nmt);
                TSNode skip[33];
                memcpy(skip, gone, ng * sizeof *skip);
                skip[ng] = d;
                if (uses_outside(ctx, fn, nmt, skip, ng + 1)) used = true;
            }
            if (!used && ng < 32) {
                st = edit_delete(ctx, ax, d, out);
                deleted[i] = more = true;
                gone[ng++] = d;
            }
        }
    }
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

/* Is `type` (a declaration's type text) one that __shfl_*_sync moves? The scalar types of the
 * CUDA headers' overloads; a struct or a vector type is not (its fields would each need one). */
static bool shuffle_type(const char *type)
{
    static const char *const ok[] = {"float", "double", "int", "unsigned", "unsigned int", "long", "unsigned long",
                                     "long long", "unsigned long long", "__half", "__half2", "__nv_bfloat16",
                                     "__nv_bfloat162", "half", "half2", "int32_t", "uint32_t", "int64_t",
                                     "uint64_t", NULL};
    char t[128];
    size_t n = 0;
    /* drop the qualifiers a shared array's type may carry */
    for (const char *p = type; *p && n + 1 < sizeof t;) {
        if (!strncmp(p, "volatile ", 9)) p += 9;
        else if (!strncmp(p, "const ", 6)) p += 6;
        else t[n++] = *p++;
    }
    while (n && t[n - 1] == ' ') n--;
    t[n] = '\0';
    for (unsigned i = 0; ok[i]; i++)
        if (!strcmp(t, ok[i])) return true;
    return false;
}

typedef struct struct_find {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode body;
} struct_find;

static bool find_struct(TSNode n, void *user)
{
    struct_find *f = user;
    if (!ts_node_is_null(f->body)) return false;
    if (!rt_is(n, "struct_specifier")) return !rt_is(n, "function_definition");
    TSNode nm = rt_field(n, "name"), body = rt_field(n, "body");
    if (!ts_node_is_null(body) && rt_text_is(f->ctx, nm, f->name)) f->body = body;
    return false;
}

/* The fields of `struct NAME { T a; T b; … };` of the file when every one is a scalar a shuffle
 * moves (one declarator each, no arrays): how many, their names into out; 0 otherwise. */
static unsigned struct_fields(const kl_rule_ctx *ctx, const char *name, char out[][64], unsigned max)
{
    struct_find f = {ctx, name, {{0}, 0, 0}};
    kl_ast_walk(kl_source_root(ctx->src), find_struct, &f);
    if (ts_node_is_null(f.body)) return 0;
    unsigned n = 0;
    uint32_t c = ts_node_named_child_count(f.body);
    for (uint32_t i = 0; i < c; i++) {
        TSNode d = ts_node_named_child(f.body, i);
        if (rt_is(d, "comment")) continue;
        if (!rt_is(d, "field_declaration") || n >= max) return 0;
        char ty[128];
        rt_text_copy(ctx, rt_field(d, "type"), ty, sizeof ty);
        TSNode decl = rt_field(d, "declarator");
        if (!shuffle_type(ty) || !rt_is(decl, "field_identifier") || ts_node_named_child_count(d) != 2) return 0;
        rt_text_copy(ctx, decl, out[n], 64);
        n++;
    }
    return n;
}

/* The number of warps and half of it, written from the tree's own start (half the block) rather
 * than from the block size seen at the launch: `BLOCK / 2` gives `BLOCK / 32` and `BLOCK / 64`,
 * another start S gives `(S) / 16` and `(S) / 32`, a number (or no start) the numbers. A later
 * change of the block size (block-size) then changes the hand-off with it; the shared stage holds
 * 32 partials, the most a block has warps. False when the text does not fit. */
static bool warp_count_text(const kl_rule_ctx *ctx, TSNode start, long long nw, char *nws, char *halfs, size_t cap)
{
    if (ts_node_is_null(start) || rt_is(start, "number_literal")) {
        kl_snprintf(nws, cap, "%lld", nw);
        kl_snprintf(halfs, cap, "%lld", nw / 2);
        return true;
    }
    TSNode e = kl_ast_unparen(start), whole = e;
    char op[4] = "", rhs[16] = "";
    if (rt_is(e, "binary_expression")) {
        rt_text_copy(ctx, rt_field(e, "operator"), op, sizeof op);
        rt_text_copy(ctx, rt_field(e, "right"), rhs, sizeof rhs);
    }
    bool half = (!strcmp(op, "/") && !strcmp(rhs, "2")) || (!strcmp(op, ">>") && !strcmp(rhs, "1"));
    TSNode x = half ? rt_field(e, "left") : whole;
    char xt[160];
    if (!rt_text_copy(ctx, x, xt, sizeof xt) || strchr(xt, '\n')) return false;
    bool plain = rt_is(x, "identifier") || rt_is(x, "field_expression") || rt_is(x, "qualified_identifier") ||
                 rt_is(x, "parenthesized_expression") || rt_is(x, "call_expression");
    const char *l = plain ? "" : "(", *r = plain ? "" : ")";
    kl_snprintf(nws, cap, "%s%s%s / %d", l, xt, r, half ? 32 : 16);
    kl_snprintf(halfs, cap, "%s%s%s / %d", l, xt, r, half ? 64 : 32);
    return true;
}

static kl_status apply_tree(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *name, const wr_tree *t,
                            const json_t *params, kl_edits *out, kl_error *err)
{
    int64_t bs = 0;
    char why[300];
    char fields[8][64];
    unsigned nfields = 0;
    if (!shuffle_type(t->type)) {
        /* a struct of scalars moves field by field (the experts' `o.m = __shfl_xor_sync(…, v.m, o)`) */
        nfields = struct_fields(ctx, t->type, fields, 8);
        if (!nfields || !strcmp(t->op, "+"))
            return kl_rule_not_applicable(err,
                                          "%s holds %s, which a warp shuffle does not move (a scalar, or a struct of "
                                          "scalar fields combined by a function)",
                                          t->sh, t->type);
    }
    if (!rt_block_size(ctx, fn, name, &bs, why, sizeof why)) return kl_rule_not_applicable(err, "%s", why);
    int64_t start = 0;
    TSNode init = rt_field(t->loop, "initializer");
    TSNode sv = {{0}, 0, 0};
    if (rt_is(init, "declaration")) sv = rt_field(ts_node_named_child(init, ts_node_named_child_count(init) - 1), "value");
    else if (rt_is(init, "assignment_expression")) sv = rt_field(init, "right");
    if (!ts_node_is_null(sv) && kl_const_eval(ctx->src, fn, sv, false, &start, NULL, 0) && start * 2 != bs)
        return kl_rule_not_applicable(err, "the tree starts at %s = %lld, which is not half the block size %lld",
                                      t->start, (long long)start, (long long)bs);
    const char *shuffle = "xor";
    kl_rule_param_str(&kl_rule_warp_reduce, params, "shuffle", &shuffle);
    const char *sh_fn = strcmp(shuffle, "down") ? "__shfl_xor_sync" : "__shfl_down_sync";
    char v[32], warp[32], step[300], load[300], shfl[200];
    rt_fresh_name(ctx, fn, "kl_v", v, sizeof v);
    rt_fresh_name(ctx, fn, "kl_warp", warp, sizeof warp);
    kl_snprintf(shfl, sizeof shfl, "%s(0xffffffff, %s, o)", sh_fn, v);
    if (nfields) {
        char other[32];
        rt_fresh_name(ctx, fn, "kl_o", other, sizeof other);
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&sb, "{ %s %s;", t->type, other);
        for (unsigned i = 0; i < nfields; i++)
            kl_strbuf_addf(&sb, " %s.%s = %s(0xffffffff, %s.%s, o);", other, fields[i], sh_fn, v, fields[i]);
        kl_strbuf_addf(&sb, " %s = %s(%s, %s); }", v, t->op, v, other);
        bool fits = !sb.failed && sb.len < sizeof step;
        if (fits) kl_snprintf(step, sizeof step, "%s", kl_strbuf_str(&sb));
        kl_strbuf_release(&sb);
        if (!fits) return kl_rule_not_applicable(err, "the struct %s has too many fields to shuffle", t->type);
    } else if (!strcmp(t->op, "+")) kl_snprintf(step, sizeof step, "%s += %s", v, shfl);
    else kl_snprintf(step, sizeof step, "%s = %s(%s, %s)", v, t->op, v, shfl);
    long long nw = (long long)(bs / 32);
    if (nw < 2)
        return kl_rule_not_applicable(err, "the block of %s is %lld threads, one warp: there is nothing to stage between warps",
                                      name, (long long)bs);
    char nws[200], halfs[200];
    if (!warp_count_text(ctx, sv, nw, nws, halfs, sizeof nws))
        return kl_rule_not_applicable(err, "the tree's start %s is too long to write the warp count from", t->start);
    /* the first warp reduces the nw partials: lanes past them read the first one, and the
     * offsets below nw keep every lane under nw among the partials (any operation, no identity) */
    kl_snprintf(load, sizeof load, "%s = %s[threadIdx.x < %s ? threadIdx.x : 0]", v, warp, nws);
    char ind[64];
    uint32_t a, b;
    kl_rules_stmt_range(ctx, ax, t->loop, WR_MARKER, &a, &b);
    kl_rules_indent(ctx, ts_node_start_byte(t->loop), ind, sizeof ind);
    kl_status st = kl_edits_addf(out, a, b,
                                 "%s{\n"
                                 "%s    %s %s = %s[%s];\n"
                                 "%s    for (int o = 16; o > 0; o >>= 1) %s;\n"
                                 "%s    __shared__ %s %s[32];\n"
                                 "%s    if (threadIdx.x %% 32 == 0) %s[threadIdx.x / 32] = %s;\n"
                                 "%s    __syncthreads();\n"
                                 "%s    if (threadIdx.x < 32) {\n"
                                 "%s        %s;\n"
                                 "%s        for (int o = %s; o > 0; o >>= 1) %s;\n"
                                 "%s        if (threadIdx.x == 0) %s[0] = %s;\n"
                                 "%s    }\n"
                                 "%s    __syncthreads();\n"
                                 "%s}\n",
                                 ind, ind, t->type, v, t->sh, t->tid, ind, step, ind, t->type, warp, ind, warp, v,
                                 ind, ind, ind, load, ind, halfs, step, ind, t->sh, v, ind, ind, ind);
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

typedef struct run_scan {
    rt_run *r;
    const kl_rule_ctx *ctx;
    kl_affine_ctx *ax;
    TSNode fn;
    const char *name;
} run_scan;

static bool run_present_visit(TSNode n, void *user)
{
    run_scan *rs = user;
    rt_run *r = rs->r;
    if (r->done) return false;
    if (ts_node_start_byte(n) != r->site->span.start || ts_node_end_byte(n) != r->site->span.end) return true;
    wr_present p;
    if (!present_at(rs->ctx, rs->ax, rs->fn, n, &p)) return true;
    r->st = remove_present(rs->ctx, rs->ax, rs->fn, rs->name, &p, r->out, r->err);
    r->done = true;
    return false;
}

static kl_status run_visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    rt_run *r = user;
    if (r->done || strcmp(name, r->site->kernel)) return KL_OK;
    if (r->site->dir == KL_SITE_PRESENT) {
        run_scan rs = {r, ctx, ax, fn, name};
        kl_ast_walk(kl_ast_function_body(fn), run_present_visit, &rs);
        return KL_OK;
    }
    for (unsigned i = 0; i < kl_affine_loop_count(ax) && !r->done; i++) {
        const kl_ax_loop *L = kl_affine_loop(ax, i);
        if (ts_node_start_byte(L->node) != r->site->span.start) continue;
        wr_tree t;
        if (!tree_loop(ctx, ax, fn, L, &t)) continue;
        r->st = apply_tree(ctx, ax, fn, name, &t, r->params, r->out, r->err);
        r->done = true;
    }
    return KL_OK;
}

static kl_status run(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    rt_run r = {site, params, out, err, false, KL_OK};
    return kl_rules_run_site(ctx, run_visit, &r, &r, true, "no %s at %s",
                             site->dir == KL_SITE_PRESENT ? "shuffle reduction" : "tree reduction", site->id);
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    return run(ctx, site, NULL, out, err);
}

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    kl_status st = kl_site_why_not(site, err);
    return st == KL_OK ? run(ctx, site, params, out, err) : st;
}

const kl_rule kl_rule_warp_reduce = {
    "warp-reduce",
    "reduce across the block with warp shuffles and one shared stage between warps instead of a shared-memory tree",
    wr_params, 1, find, remove_site, apply,
};
