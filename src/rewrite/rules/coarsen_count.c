/* coarsen, the count form: K elements a block apart per thread, K a named count (a template
 * parameter bound by the launches, a constexpr or macro, a launching function's local) as
 * block-load helpers write it,
 *     constexpr long long TILE = (long long)BLOCK * K;
 *     long long i = blockIdx.x * TILE + threadIdx.x;
 *     if (i + (K - 1) * BLOCK < n) { T v[K]; for (int u = 0; u < K; ++u) v[u] = x[i + u * BLOCK]; … }
 * -> K = 1 in the kernel (every use of the name written 1) with K times the blocks at each launch.
 * Every value K reaches is a tile of K * B elements, a position i + u * B with u < K, a guard
 * i + (K - 1) * B < N or a per-thread array of K: with K = 1 and K times the blocks each element is
 * taken by one thread as before, and `gridDim.x * TILE` (the stride between one thread's tiles) is
 * unchanged. What a thread adds up must reach memory by sums only (grid_stride__partials_by_sums).
 * Remove only. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/coarsen.h"
#include "rewrite/rules/grid_stride.h"
#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "syntax/affine.h"
#include "util/util.h"

/* Where a kernel's constants are evaluated: the kernel itself, then the functions launching it
 * (the file's launches, read once per analysis). */
typedef struct kscope {
    const kl_rule_ctx *ctx;
    TSNode fn;
    const char *kernel;
    const kl_launch_sites *ls;
} kscope;

/* The value of a constant expression of the kernel: its own or the file's constants, or (a template
 * parameter the canonical form bound to a local of the launching function) the same value at every
 * launch, evaluated there. e null: the name `name`. */
static bool kernel_value(const kscope *ks, TSNode e, const char *name, int64_t *k)
{
    const kl_source *src = ks->ctx->src;
    if (ts_node_is_null(e) ? kl_const_eval_name(src, ks->fn, name, k, NULL, 0)
                           : kl_const_eval(src, ks->fn, e, false, k, NULL, 0))
        return true;
    unsigned n = 0;
    bool ok = true;
    for (unsigned i = 0; i < ks->ls->count && ok; i++) {
        if (strcmp(ks->ls->items[i].kernel, ks->kernel)) continue;
        int64_t v = 0;
        TSNode h = ks->ls->items[i].host_fn;
        ok = (ts_node_is_null(e) ? kl_const_eval_name(src, h, name, &v, NULL, 0)
                                 : kl_const_eval(src, h, e, false, &v, NULL, 0)) &&
             (!n || v == *k);
        *k = v;
        n++;
    }
    return ok && n;
}

/* The block: blockDim.x, or a constant equal to the launches' block. */
static bool is_block(const kscope *ks, TSNode e, int64_t block)
{
    e = rt_bare(e);
    if (rt_is(e, "field_expression")) return rt_text_is(ks->ctx, e, "blockDim.x");
    int64_t v = 0;
    return kernel_value(ks, e, NULL, &v) && v == block;
}

/* p is `a * b` with n one side and the block the other. */
static bool times_block(const kscope *ks, TSNode p, TSNode n, int64_t block)
{
    if (!rt_op_is(ks->ctx, p, "*")) return false;
    TSNode l = rt_field(p, "left"), r = rt_field(p, "right");
    n = rt_bare(n);
    TSNode other = ts_node_eq(rt_bare(l), n) ? r : ts_node_eq(rt_bare(r), n) ? l : (TSNode){{0}, 0, 0};
    return !ts_node_is_null(other) && is_block(ks, other, block);
}

/* The expression holding n once parentheses and casts around n are taken into account. */
static TSNode lift(TSNode n)
{
    TSNode p = ts_node_parent(n);
    while (rt_is(p, "parenthesized_expression") || rt_is(p, "cast_expression")) n = p, p = ts_node_parent(n);
    return n;
}

typedef struct cc_scan {
    const kl_rule_ctx *ctx;
    const kscope *ks;
    coarsen__count *s;
    bool collect; /* first pass: the loops, arrays and tiles; second: every use checked */
} cc_scan;

/* `for (int u = 0; u < K; ++u)` (u++, u += 1): the loop's variable into var. */
static bool count_loop(const kl_rule_ctx *ctx, TSNode loop, const char *count, char *var, size_t size)
{
    if (!rt_is(loop, "for_statement")) return false;
    TSNode init = rt_field(loop, "initializer"), cond = rt_field(loop, "condition"), upd = rt_field(loop, "update");
    if (!rt_is(init, "declaration") || !rt_op_is(ctx, cond, "<") || !rt_text_is(ctx, rt_field(cond, "right"), count))
        return false;
    TSNode d = rt_field(init, "declarator");
    if (!rt_is(d, "init_declarator") || !rt_text_is(ctx, rt_field(d, "value"), "0")) return false;
    if (!rt_text_copy(ctx, rt_field(d, "declarator"), var, size) || !rt_text_is(ctx, rt_field(cond, "left"), var))
        return false;
    char u[80];
    if (!rt_text_unblank_to(ctx, upd, u, sizeof u)) return false;
    char a[80], b[80], c[80];
    kl_snprintf(a, sizeof a, "++%s", var);
    kl_snprintf(b, sizeof b, "%s++", var);
    kl_snprintf(c, sizeof c, "%s+=1", var);
    return !strcmp(u, a) || !strcmp(u, b) || !strcmp(u, c);
}

/* Where a product of the count and the block (a tile, K * B) may stand: times blockIdx.x (a block's
 * first element) or gridDim.x (the stride between a thread's tiles, which K = 1 with K times the
 * blocks keeps), or as the value of a local (a tile, whose uses are checked in turn); (K - 1) * B
 * (last: the offset of a thread's last element) as `i + (K - 1) * B < N`, a guard of the whole tile. */
static bool tile_use(const kl_rule_ctx *ctx, TSNode t, bool last)
{
    TSNode p = ts_node_parent(t);
    if (last) {
        TSNode q = lift(p);
        return rt_op_is(ctx, p, "+") && ts_node_eq(rt_bare(rt_field(p, "right")), rt_bare(t)) && rt_op_is(ctx, ts_node_parent(q), "<") &&
               ts_node_eq(rt_field(ts_node_parent(q), "left"), q);
    }
    if (rt_is(p, "init_declarator")) return true;
    if (!rt_op_is(ctx, p, "*")) return false;
    TSNode other = ts_node_eq(rt_field(p, "left"), t) ? rt_field(p, "right") : rt_field(p, "left");
    other = rt_bare(other);
    return rt_text_is(ctx, other, "blockIdx.x") || rt_text_is(ctx, other, "gridDim.x");
}

/* One identifier use of K, of a loop variable, an array or a tile: where it may stand. */
static void check_use(cc_scan *sc, TSNode n)
{
    const kl_rule_ctx *ctx = sc->ctx;
    coarsen__count *s = sc->s;
    if (s->why[0]) return;
    TSNode up = lift(n), p = ts_node_parent(up);
    unsigned line = kl_ast_line(n);
    if (rt_text_is(ctx, n, s->count)) {
        /* u < K of a loop over K; T v[K]; K * B; (K - 1) * B */
        if (rt_is(p, "binary_expression") && ts_node_eq(rt_field(p, "right"), up) && rt_op_is(ctx, p, "<") &&
            rt_is(ts_node_parent(p), "for_statement"))
            for (unsigned i = 0; i < s->nloops; i++)
                if (ts_node_eq(rt_field(s->loops[i], "condition"), p)) return;
        if (rt_is(p, "array_declarator")) return;
        if (times_block(sc->ks, p, up, s->block) && tile_use(ctx, lift(p), false)) {
            s->tiled = true;
            return;
        }
        if (rt_op_is(ctx, p, "-") && ts_node_eq(rt_bare(rt_field(p, "left")), up) && rt_text_is(ctx, rt_field(p, "right"), "1")) {
            TSNode q = lift(p);
            if (times_block(sc->ks, ts_node_parent(q), q, s->block) &&
                tile_use(ctx, lift(ts_node_parent(q)), true))
                return;
        }
        kl_snprintf(s->why, sizeof s->why, "line %u uses %s other than as a count of elements a block apart", line,
                    s->count);
        return;
    }
    char name[64];
    if (!rt_text_copy(ctx, n, name, sizeof name)) return;
    if (coarsen__in_list(s->vars, s->nloops, name)) {
        /* u * B, or a subscript of a per-thread array of K */
        if (rt_is(ts_node_parent(n), "init_declarator") || rt_is(p, "for_statement") ||
            (rt_is(p, "binary_expression") && ts_node_eq(p, rt_field(ts_node_parent(p), "condition"))))
            return; /* the loop's own declaration, condition and update */
        if (rt_is(p, "update_expression") || (rt_is(p, "assignment_expression") && rt_is(ts_node_parent(p), "for_statement")))
            return;
        if (times_block(sc->ks, p, up, s->block)) return;
        if (rt_is(p, "subscript_argument_list")) {
            TSNode sub = ts_node_parent(p);
            char arr[64];
            if (rt_text_copy(ctx, rt_bare(rt_field(sub, "argument")), arr, sizeof arr) && coarsen__in_list(s->arrays, s->narrays, arr))
                return;
        }
        kl_snprintf(s->why, sizeof s->why, "line %u uses %s other than as an offset of %s times the block", line, name,
                    name);
        return;
    }
    if (coarsen__in_list(s->tiles, s->ntiles, name)) {
        if (rt_is(p, "init_declarator") && ts_node_eq(rt_field(p, "declarator"), n)) return; /* its declaration */
        /* TILE * blockIdx.x, TILE * gridDim.x: with K = 1 and K times the blocks, the stride between a
         * thread's tiles (gridDim.x * TILE) stays what it was */
        if (rt_op_is(ctx, p, "*")) {
            TSNode other = ts_node_eq(rt_field(p, "left"), up) ? rt_field(p, "right") : rt_field(p, "left");
            other = rt_bare(other);
            if (rt_text_is(ctx, other, "blockIdx.x") || rt_text_is(ctx, other, "gridDim.x")) return;
        }
        kl_snprintf(s->why, sizeof s->why, "line %u uses the tile %s other than as a block's or the grid's stride", line,
                    name);
    }
}

static bool use_visit(TSNode n, void *user)
{
    cc_scan *sc = user;
    if (sc->s->why[0]) return false;
    if (sc->collect) {
        char var[64];
        if (count_loop(sc->ctx, n, sc->s->count, var, sizeof var)) {
            if (sc->s->nloops == COARSEN_MAXLOOPS) {
                kl_snprintf(sc->s->why, sizeof sc->s->why, "more than %d loops over %s", COARSEN_MAXLOOPS, sc->s->count);
                return false;
            }
            sc->s->loops[sc->s->nloops] = n;
            kl_snprintf(sc->s->vars[sc->s->nloops++], 64, "%s", var);
        } else if (rt_is(n, "array_declarator") && rt_text_is(sc->ctx, rt_field(n, "size"), sc->s->count) &&
                   sc->s->narrays < 4) {
            rt_text_copy(sc->ctx, rt_field(n, "declarator"), sc->s->arrays[sc->s->narrays++], 64);
        } else if (rt_is(n, "init_declarator") && sc->s->ntiles < COARSEN_MAXTILES) {
            TSNode v = rt_bare(rt_field(n, "value"));
            for (TSNode k = v; rt_op_is(sc->ctx, k, "*");) {
                if (rt_text_is(sc->ctx, rt_bare(rt_field(k, "right")), sc->s->count) ||
                    rt_text_is(sc->ctx, rt_bare(rt_field(k, "left")), sc->s->count)) {
                    rt_text_copy(sc->ctx, rt_field(n, "declarator"), sc->s->tiles[sc->s->ntiles++], 64);
                    break;
                }
                k = rt_bare(rt_field(k, "left"));
            }
        }
        return true;
    }
    if (rt_is(n, "identifier")) check_use(sc, n);
    return true;
}

/* The names a count loop adds to (`acc += …`), declared outside it, into names (new strings). */
typedef struct acc_scan {
    const kl_rule_ctx *ctx;
    TSNode loop;
    char *names[GS_MAXACCUM];
    unsigned n;
} acc_scan;

static bool acc_visit(TSNode n, void *user)
{
    acc_scan *a = user;
    if (!rt_is(n, "assignment_expression") || !rt_text_is(a->ctx, rt_field(n, "operator"), "+=")) return true;
    TSNode l = rt_field(n, "left");
    if (!rt_is(l, "identifier") || a->n == GS_MAXACCUM) return true;
    char *name = rt_text(a->ctx, l);
    if (!name) return true;
    TSNode decl = rt_find_decl(a->ctx, a->loop, name, false, NULL);
    bool seen = !ts_node_is_null(decl);
    for (unsigned i = 0; i < a->n && !seen; i++) seen = !strcmp(a->names[i], name);
    if (seen) free(name);
    else a->names[a->n++] = name;
    return true;
}

/* The names bounding a `for (… u < NAME; …)` under n, into names (at most 4). */
typedef struct bound_scan {
    const kl_rule_ctx *ctx;
    char names[4][64];
    unsigned n;
} bound_scan;

static bool bound_visit(TSNode n, void *user)
{
    bound_scan *b = user;
    if (!rt_is(n, "for_statement")) return true;
    TSNode cond = rt_field(n, "condition"), r = rt_field(cond, "right");
    char t[64];
    if (rt_op_is(b->ctx, cond, "<") && rt_is(r, "identifier") && rt_text_copy(b->ctx, r, t, sizeof t) &&
        !coarsen__in_list(b->names, b->n, t) && b->n < 4)
        kl_snprintf(b->names[b->n++], 64, "%s", t);
    return true;
}

bool coarsen__count_analyse(const kl_rule_ctx *ctx, TSNode fn, const char *kernel, kl_affine_ctx *ax, coarsen__count *out)
{
    TSNode body = kl_ast_function_body(fn);
    bound_scan nm = {ctx, {{0}}, 0};
    kl_ast_walk(body, bound_visit, &nm);
    if (!nm.n) return false;
    kl_launch_sites ls;
    if (kl_ast_launches(ctx->src, &ls, NULL) != KL_OK) return false;
    kscope ks = {ctx, fn, kernel, &ls};
    bool found = false;
    int64_t block = 0;
    char why[300];
    for (unsigned c = 0; c < nm.n && !found; c++) {
        int64_t k = 0;
        if (!kernel_value(&ks, (TSNode){{0}, 0, 0}, nm.names[c], &k) || k < 2 || k > 64) continue;
        memset(out, 0, sizeof *out);
        kl_snprintf(out->count, sizeof out->count, "%s", nm.names[c]);
        out->k = k;
        if (!block && !rt_block_size(ctx, fn, kernel, &block, why, sizeof why)) break;
        out->block = block;
        cc_scan sc = {ctx, &ks, out, true};
        kl_ast_walk(body, use_visit, &sc);
        if (!out->nloops) continue;
        sc.collect = false;
        kl_ast_walk(body, use_visit, &sc);
        /* a tile (K times the block) must be there: else K is some other count */
        if (!out->tiled) continue;
        found = true;
        if (out->why[0]) break;
        /* the count must not reach other device code: a file-level name another __device__ or
         * __global__ function reads would keep its value there */
        rt_func fs[64];
        unsigned nf = rt_functions(ctx, fs, 64);
        for (unsigned i = 0; i < nf && i < 64 && !out->why[0]; i++) {
            TSNode d = fs[i].def;
            if (ts_node_eq(d, fn) || !rt_count_ident(ctx, kl_ast_function_body(d), out->count) ||
                (!kl_ast_function_has(ctx->src, d, "__device__") && !kl_ast_function_has(ctx->src, d, "__global__")))
                continue;
            char *fname = kl_ast_function_name(ctx->src, d);
            kl_snprintf(out->why, sizeof out->why, "%s is also used by %s, which would keep %lld", out->count,
                        fname ? fname : "another function", (long long)k);
            free(fname);
        }
        if (out->why[0]) break;
        /* what a thread adds up reaches memory by sums only */
        uint32_t ra[COARSEN_MAXLOOPS], rb[COARSEN_MAXLOOPS];
        acc_scan as = {ctx, {{0}, 0, 0}, {0}, 0};
        for (unsigned i = 0; i < out->nloops; i++) {
            ra[i] = ts_node_start_byte(out->loops[i]), rb[i] = ts_node_end_byte(out->loops[i]);
            as.loop = out->loops[i];
            kl_ast_walk(rt_field(out->loops[i], "body"), acc_visit, &as);
        }
        if (!as.n)
            kl_snprintf(out->why, sizeof out->why, "the loops over %s add to nothing declared outside them", out->count);
        else
            grid_stride__partials_by_sums(ctx, fn, ax, as.names, as.n, ra, rb, out->nloops, out->why, sizeof out->why);
        for (unsigned i = 0; i < as.n; i++) free(as.names[i]);
    }
    kl_launch_sites_release(&ls);
    return found;
}

/* Every use of the count in the kernel written 1 (its uses are all of the forms checked above). */
kl_status coarsen__count_edits(const kl_rule_ctx *ctx, TSNode fn, const coarsen__count *s, kl_edits *out)
{
    return kl_edits_rename(ctx, kl_ast_function_body(fn), s->count, "1", out);
}
