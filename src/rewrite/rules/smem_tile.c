/*
 * smem-tile — operands re-read from global memory inside a dot-product loop ↔ cooperative
 * loads into shared-memory tiles, a barrier, the loop over the tile, a barrier.
 *
 * applicable (site `kernel:line` of the loop): `for (T k = S; k < K; k++) body` in a
 * __global__ launched with a compile-time TILE x TILE block, whose body is `acc += X * Y`
 * statements reading exactly two arrays varying along k: A at an index that does not depend
 * on threadIdx.x (a row of the block) and B at one that does not depend on threadIdx.y (a
 * column), k used nowhere else. The loop sits at the kernel's top level, inside the output
 * guard `if (cond) { pre; loop; post }`, or after an early `if (cond) return;`. Apply writes
 * `__shared__ E As[TILE][TILE], Bs[TILE][TILE]`, hoists pre (declarations that read no
 * memory) out of the guard, and loops `for (T k0 = S; k0 < K; k0 += TILE)` over guarded loads
 * (zeros outside: the guard's conjuncts free of threadIdx.x for A, free of threadIdx.y for B,
 * and `k0 + threadIdx.{x,y} < K`), a barrier, `for (T kk = 0; kk < TILE; kk++) body` reading
 * the tiles, a barrier; the guard (or the early return) follows the loop, so every thread
 * reaches both barriers.
 *
 * applicable, stencil (site `kernel:line` of the outer offset loop): one or two loops
 * `for (T v = S; v < B; v++)` around one read G[idx] of a pointer parameter whose index moves with
 * each loop variable exactly as with threadIdx.x / threadIdx.y (blur: img[(y+i-r)*w + (x+j-r)]),
 * under a guard (enclosing ifs, `if (c) continue;` before it) bounding each axis on both sides,
 * every leaf of which is, like idx, a function of threadIdx + offset only. Apply writes a
 * __shared__ tile of (BY + count - 1) x (BX + count - 1) (with a run-time count: BY + 2*max_radius,
 * and the original loop kept under `else` for counts beyond it), loaded by loops over the tile that
 * repeat the naive's locals with `v = s - threadIdx` (so each element is the value the reading
 * thread would have read, or 0 outside the guard), a barrier, and the loop with the read replaced
 * by S[threadIdx.y + i][threadIdx.x + j]; the output guard / early return moves after the barrier.
 *
 * present (site `kernel:line` of the tile loop), two shapes:
 *  - GEMM tiles: a loop over k-tiles whose body is guarded loads `S[ti][tj] = cond ? G[e] : 0`
 *    (or `if (cond) S[..] = G[e]; else S[..] = 0;`) of two 2-D __shared__ arrays at thread
 *    indices, __syncthreads(), `for (kk = 0; kk < TILE; kk++)` reading them, __syncthreads().
 *    Remove writes the single loop over k back (e with its `k0 + tid` part replaced by k) and
 *    puts the loop back inside the store guard that follows (or the early return back before
 *    it).
 *  - a staged tile with halo (blur's expert): a __shared__ array filled once by a load that
 *    stores `S[sy][sx] = value(sy, sx)` with a value computed from the tile coordinates and
 *    block-uniform values only, then a barrier, then only reads. Remove turns the load into a
 *    lambda of the same name computing that value from global memory, and every read
 *    `S[a][b]` into `S(a, b)`.
 *  - a stencil halo tile as stencil apply writes it (site `kernel:line:S` of the load): remove
 *    keeps the fallback loop, or writes each tile read back as the global read the load stores,
 *    and puts the hoisted statements / the early return back.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules_b.h"
#include "syntax/affine.h"
#include "util/util.h"

#define NAME "smem-tile"

static const char *const tile_values[] = {"16", "32", NULL};
static const char *const radius_values[] = {"1", "2", "3", "4", "8", NULL};
static const char *const ox_values[] = {"1", "2", "4", NULL};
static const kl_rule_param st_params[] = {
    {"tile", tile_values, "16"}, {"max_radius", radius_values, "4"}, {"outputs_x", ox_values, "1"}};

/* Forward presets (docs/rules.md, "Forward presets"): register blocking along x for stencils, which
 * the sweep of `tile` (a GEMM parameter stencils ignore) never reaches. An SM issues 128 FP32 FMAs
 * per clock but reads 32 words of shared memory, so a stencil reading one tile value per FMA is
 * bound by its shared reads; with OX outputs per thread a row of OX + k - 1 values, read as
 * float4 (float2), feeds OX FMAs per value. Only 2-D float stencils inside their output guard
 * take them (apply says why not otherwise). */
static const kl_rule_preset st_presets[] = {
    {"stencil-x4", "outputs_x=4", "shape=stencil",
     "4 adjacent outputs per thread: each tile value read (16 bytes at a time) feeds up to 4 FMAs, and the row of "
     "filter weights is shared by the 4; a 16 x 16 block's halo tile for run-time radii up to 4 (the default "
     "max_radius) is 24 x 72 floats, 6.8 KiB"},
    {"stencil-x2", "outputs_x=2", "shape=stencil",
     "2 outputs per thread (float2 reads): half the reuse of 4, twice its blocks, for images too narrow for the "
     "grid divided by 4 along x to fill 132 SMs"},
    {"stencil-x4-wide", "outputs_x=4 max_radius=8", "shape=stencil",
     "4 outputs per thread with the tile sized for run-time radii up to 8 (filters up to 17 wide) instead of "
     "falling back to global reads past radius 4: 32 x 80 floats, 10 KiB, for a 16 x 16 block"},
};
const kl_rule_presets kl_presets_smem_tile = {&kl_rule_smem_tile, st_presets, sizeof st_presets / sizeof st_presets[0]};

/* ---- small helpers ----------------------------------------------------------------------------- */


static TSNode strip(TSNode n)
{
    while (rb_is(n, "parenthesized_expression") && ts_node_named_child_count(n) == 1) n = ts_node_named_child(n, 0);
    return n;
}

static bool text_is(const kl_rule_ctx *ctx, TSNode n, const char *s) { return !ts_node_is_null(n) && rb_text_is(ctx, n, s); }

static bool node_in(TSNode n, TSNode outer)
{
    return ts_node_start_byte(n) >= ts_node_start_byte(outer) && ts_node_end_byte(n) <= ts_node_end_byte(outer);
}

/* The text of n without blanks, into buf. */
static void squeezed(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size)
{
    size_t k = 0;
    for (uint32_t i = ts_node_start_byte(n); i < ts_node_end_byte(n) && k + 1 < size; i++)
        if (!isspace((unsigned char)ctx->text[i])) buf[k++] = ctx->text[i];
    buf[k] = '\0';
}

static void squeeze_str(const char *s, char *buf, size_t size)
{
    size_t k = 0;
    for (; *s && k + 1 < size; s++)
        if (!isspace((unsigned char)*s)) buf[k++] = *s;
    buf[k] = '\0';
}

static const char *binop(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size)
{
    buf[0] = '\0';
    if (!rb_is(n, "binary_expression")) return buf;
    TSNode op = rb_field(n, "operator");
    uint32_t a = ts_node_start_byte(op), b = ts_node_end_byte(op);
    if (b - a < size) {
        memcpy(buf, ctx->text + a, b - a);
        buf[b - a] = '\0';
    }
    return buf;
}

/* Split n on a binary operator (`&&`, `||`, `+`) into its operands, left to right. */
static void split_on(const kl_rule_ctx *ctx, TSNode n, const char *op, TSNode *out, unsigned *k, unsigned max)
{
    char b[8];
    TSNode s = strip(n);
    if (!strcmp(binop(ctx, s, b, sizeof b), op)) {
        split_on(ctx, rb_field(s, "left"), op, out, k, max);
        split_on(ctx, rb_field(s, "right"), op, out, k, max);
        return;
    }
    if (*k < max) out[*k] = n;
    (*k)++;
}

/* A comparison's negation as text ("row >= M" -> "row < M"); other conditions become !(c). */
static char *negate(const kl_rule_ctx *ctx, TSNode c)
{
    static const char *const ops[][2] = {{">=", "<"}, {">", "<="}, {"<=", ">"}, {"<", ">="}, {"==", "!="}, {"!=", "=="}};
    char b[8];
    TSNode s = strip(c);
    binop(ctx, s, b, sizeof b);
    kl_strbuf sb = KL_STRBUF_INIT;
    bool done = false;
    for (int i = 0; i < 6 && !done; i++) {
        if (strcmp(b, ops[i][0])) continue;
        TSNode l = rb_field(s, "left"), r = rb_field(s, "right");
        kl_strbuf_add(&sb, ctx->text + ts_node_start_byte(l), ts_node_end_byte(l) - ts_node_start_byte(l));
        kl_strbuf_addf(&sb, " %s ", ops[i][1]);
        kl_strbuf_add(&sb, ctx->text + ts_node_start_byte(r), ts_node_end_byte(r) - ts_node_start_byte(r));
        done = true;
    }
    if (!done) {
        kl_strbuf_adds(&sb, "!(");
        kl_strbuf_add(&sb, ctx->text + ts_node_start_byte(c), ts_node_end_byte(c) - ts_node_start_byte(c));
        kl_strbuf_adds(&sb, ")");
    }
    return kl_strbuf_detach(&sb, NULL);
}

/* Does the value of expression n depend on var ("threadIdx.x", a loop variable)? 1 yes, 0 no,
 * -1 unknown (not affine). Comparisons and logical operators are looked through. */
static int depends(kl_affine_ctx *ax, const kl_rule_ctx *ctx, TSNode n, const char *var)
{
    n = strip(n);
    char b[8];
    binop(ctx, n, b, sizeof b);
    if (b[0] && (strchr("<>=!&|", b[0]) != NULL)) {
        int l = depends(ax, ctx, rb_field(n, "left"), var), r = depends(ax, ctx, rb_field(n, "right"), var);
        if (l < 0 || r < 0) return -1;
        return l || r;
    }
    if (rb_is(n, "unary_expression")) return depends(ax, ctx, rb_field(n, "argument"), var);
    kl_affine a = {0};
    if (kl_affine_of(ax, n, &a) != KL_OK) return -1;
    int r = a.ok ? kl_affine_coef(&a, var) != NULL : -1;
    kl_affine_release(&a);
    return r;
}

/* A replacement of the byte range [a,b) by text (borrowed). */
typedef struct rep {
    uint32_t a, b;
    const char *text;
} rep;

static int rep_cmp(const void *x, const void *y)
{
    const rep *p = x, *q = y;
    return p->a < q->a ? -1 : p->a > q->a;
}

/* The text [a,b) with the replacements (inside it, not overlapping) done. New string. */
static char *splice(const kl_rule_ctx *ctx, uint32_t a, uint32_t b, rep *reps, unsigned n)
{
    qsort(reps, n, sizeof *reps, rep_cmp);
    kl_strbuf sb = KL_STRBUF_INIT;
    uint32_t pos = a;
    for (unsigned i = 0; i < n; i++) {
        if (reps[i].a < pos || reps[i].b > b) continue;
        kl_strbuf_add(&sb, ctx->text + pos, reps[i].a - pos);
        kl_strbuf_adds(&sb, reps[i].text);
        pos = reps[i].b;
    }
    kl_strbuf_add(&sb, ctx->text + pos, b - pos);
    return kl_strbuf_detach(&sb, NULL);
}

/* Re-indent the text of a node that starts after `first_ind` on its line by delta columns;
 * the result starts at the node (no indentation on its first line). New string or NULL. */
static char *reindent_node_text(const char *first_ind, const char *text, int delta)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_adds(&sb, first_ind);
    kl_strbuf_adds(&sb, text);
    char *full = kl_strbuf_detach(&sb, NULL);
    if (!full) return NULL;
    char *r = rb_reindent(full, strlen(full), delta);
    free(full);
    if (!r) return NULL;
    size_t skip = 0;
    while (r[skip] == ' ' || r[skip] == '\t') skip++;
    char *out = kl_strdup(r + skip);
    free(r);
    return out;
}

/* Identifier uses of name in n, skipping field names. */
static unsigned uses_of(const kl_rule_ctx *ctx, TSNode n, const char *name) { return rb_count_ident(ctx, n, name); }

/* A name not used in the function: base, else kl_<base>. */
static void fresh_name(const kl_rule_ctx *ctx, TSNode fn, const char *base, char *buf, size_t size)
{
    kl_snprintf(buf, size, "%s", base);
    if (!uses_of(ctx, fn, buf)) return;
    kl_snprintf(buf, size, "kl_%s", base);
    for (int i = 2; uses_of(ctx, fn, buf) && i < 100; i++) kl_snprintf(buf, size, "kl_%s%d", base, i);
}

/* The launch's block extents (x, y, z) of kernel `name`, with the text of each (the constant's
 * name when the launch names one, else the number). A scalar block (`<<<g, BS>>>`) is BS x 1 x 1.
 * False with why when not compile-time constants. */
static bool launch_block(const kl_rule_ctx *ctx, const char *name, int64_t dim[3], char text[3][64], char *why,
                         size_t wsize)
{
    rb_launch ls[8];
    unsigned n = rb_launches(ctx, name, ls, 8);
    if (!n) {
        kl_snprintf(why, wsize, "kernel '%s' is not launched in the file: its block size is unknown", name);
        return false;
    }
    for (unsigned i = 0; i < n && i < 8; i++) {
        TSNode cfg = strip(ls[i].cfg[1]);
        TSNode list = {0};
        long long scalar;
        if (!ts_node_is_null(cfg) && !rb_is(cfg, "call_expression") && rb_const_eval(ctx, ls[i].host.body, cfg, &scalar)) {
            /* a 1-D block: a constant number of threads */
            int64_t d[3] = {scalar, 1, 1};
            if (i > 0 && (d[0] != dim[0] || dim[1] != 1 || dim[2] != 1)) {
                kl_snprintf(why, wsize, "kernel '%s' is launched with different block sizes", name);
                return false;
            }
            memcpy(dim, d, sizeof d);
            char t[64];
            squeezed(ctx, cfg, t, sizeof t);
            long long cv;
            bool named = t[0] && (isalpha((unsigned char)t[0]) || t[0] == '_') && rb_const_name(ctx, (TSNode){0}, t, &cv);
            kl_snprintf(text[0], 64, "%s", named ? t : "");
            if (!named) kl_snprintf(text[0], 64, "%lld", scalar);
            kl_snprintf(text[1], 64, "1");
            kl_snprintf(text[2], 64, "1");
            continue;
        }
        if (rb_is(cfg, "call_expression") && text_is(ctx, rb_field(cfg, "function"), "dim3"))
            list = rb_field(cfg, "arguments");
        else if (rb_is(cfg, "identifier")) {
            char *nm = rb_text(ctx, cfg);
            uint32_t c = ts_node_named_child_count(ls[i].host.body);
            for (uint32_t k = 0; nm && k < c; k++) {
                TSNode d = ts_node_named_child(ls[i].host.body, k);
                if (!rb_is(d, "declaration")) continue;
                char ty[64];
                squeezed(ctx, rb_field(d, "type"), ty, sizeof ty);
                if (strcmp(ty, "dim3")) continue;
                TSNode dds[16];
                unsigned ndd = rb_declarators(d, dds, 16);
                for (unsigned j = 0; j < ndd; j++) {
                    TSNode dd = dds[j];
                    TSNode id = rb_declarator_name(dd);
                    if (ts_node_is_null(id) && rb_is(dd, "function_declarator")) id = rb_field(dd, "declarator");
                    if (!text_is(ctx, id, nm)) continue;
                    if (rb_is(dd, "function_declarator")) list = rb_field(dd, "parameters");
                    else if (rb_is(dd, "init_declarator")) {
                        TSNode v = rb_field(dd, "value");
                        if (rb_is(v, "argument_list") || rb_is(v, "initializer_list")) list = v;
                        else if (rb_is(v, "call_expression") && text_is(ctx, rb_field(v, "function"), "dim3"))
                            list = rb_field(v, "arguments");
                    }
                }
            }
            free(nm);
        }
        if (ts_node_is_null(list)) {
            kl_snprintf(why, wsize, "the block of the launch at line %u is not a dim3 of constants", kl_ast_line(ls[i].call));
            return false;
        }
        int64_t d[3] = {1, 1, 1};
        uint32_t c = ts_node_named_child_count(list);
        for (uint32_t k = 0; k < c && k < 3; k++) {
            TSNode a = ts_node_named_child(list, k);
            long long v = 0;
            bool ok;
            if (rb_is(a, "parameter_declaration")) {
                char t[64];
                squeezed(ctx, a, t, sizeof t);
                char *end = NULL;
                v = strtoll(t, &end, 10);
                ok = (end && end != t && !*end) || rb_const_name(ctx, (TSNode){0}, t, &v);
            } else ok = rb_const_eval(ctx, ls[i].host.body, a, &v);
            if (!ok) {
                kl_snprintf(why, wsize, "the block extent '%.*s' at line %u is not a compile-time constant",
                            (int)(ts_node_end_byte(a) - ts_node_start_byte(a)), ctx->text + ts_node_start_byte(a),
                            kl_ast_line(a));
                return false;
            }
            d[k] = v;
            char t[64];
            squeezed(ctx, a, t, sizeof t);
            long long cv;
            bool named = t[0] && (isalpha((unsigned char)t[0]) || t[0] == '_') && rb_const_name(ctx, (TSNode){0}, t, &cv);
            if (named) kl_snprintf(text[k], 64, "%s", t);
            else kl_snprintf(text[k], 64, "%lld", (long long)v);
        }
        for (uint32_t k = c; k < 3; k++) kl_snprintf(text[k], 64, "1");
        if (i > 0 && (d[0] != dim[0] || d[1] != dim[1] || d[2] != dim[2])) {
            kl_snprintf(why, wsize, "kernel '%s' is launched with different block sizes", name);
            return false;
        }
        memcpy(dim, d, sizeof d);
    }
    return true;
}

/* The element type of an array name in fn: a pointer parameter's pointee, or a local pointer's
 * declared type; without const. False when unknown. */
static bool elem_of(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *name, char *buf, size_t size)
{
    int pi = kl_affine_param_index(ax, name);
    const char *e = NULL;
    char local[96] = "";
    if (pi >= 0) {
        const kl_param_info *p = kl_affine_param(ax, (unsigned)pi);
        if (!p->pointer) return false;
        e = p->elem;
    } else {
        TSNode body = kl_ast_function_body(fn);
        uint32_t c = ts_node_named_child_count(body);
        for (uint32_t i = 0; i < c && !e; i++) {
            TSNode d = ts_node_named_child(body, i);
            if (!rb_is(d, "declaration")) continue;
            for (uint32_t k = 0; k < ts_node_named_child_count(d); k++) {
                TSNode dd = ts_node_named_child(d, k);
                TSNode inner = rb_is(dd, "init_declarator") ? rb_field(dd, "declarator") : dd;
                if (!rb_is(inner, "pointer_declarator")) continue;
                if (!text_is(ctx, rb_declarator_name(inner), name)) continue;
                TSNode ty = rb_field(d, "type");
                kl_snprintf(local, sizeof local, "%.*s", (int)(ts_node_end_byte(ty) - ts_node_start_byte(ty)),
                            ctx->text + ts_node_start_byte(ty));
                e = local;
            }
        }
    }
    if (!e) return false;
    while (!strncmp(e, "const ", 6)) e += 6;
    kl_snprintf(buf, size, "%s", e);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == ' ' || buf[n - 1] == '*')) buf[--n] = '\0';
    if (n > 6 && !strcmp(buf + n - 6, " const")) buf[n - 6] = '\0';
    return buf[0] != '\0';
}

static void zero_of(const char *elem, char *buf, size_t size)
{
    if (!strcmp(elem, "float")) kl_snprintf(buf, size, "0.0f");
    else if (!strcmp(elem, "double")) kl_snprintf(buf, size, "0.0");
    else kl_snprintf(buf, size, "%s(0.0f)", elem);
}

/* Is the statement `if (c) return;` (or `{ return; }`), no else? */
static bool early_return(TSNode st)
{
    if (!rb_is(st, "if_statement") || !ts_node_is_null(rb_field(st, "alternative"))) return false;
    TSNode c = rb_field(st, "consequence");
    if (rb_is(c, "compound_statement") && ts_node_named_child_count(c) == 1) c = ts_node_named_child(c, 0);
    return rb_is(c, "return_statement") && ts_node_named_child_count(c) == 0;
}

static TSNode if_cond(TSNode st)
{
    TSNode c = rb_field(st, "condition");
    if (rb_is(c, "condition_clause")) c = rb_field(c, "value");
    return c;
}

typedef struct count_scan {
    const char *type;
    unsigned n;
    TSNode first;
} count_scan;

static bool count_visit(TSNode n, void *user)
{
    count_scan *c = user;
    if (rb_is(n, "lambda_expression")) return false;
    if (rb_is(n, c->type)) {
        if (!c->n) c->first = n;
        c->n++;
    }
    return true;
}

static unsigned count_type(TSNode n, const char *type, TSNode *first)
{
    count_scan c = {.type = type};
    rb_walk(n, count_visit, &c);
    if (first) *first = c.first;
    return c.n;
}

/* ---- apply: the GEMM dot-product loop ------------------------------------------------------------ */

#define MAXC 16

typedef struct ga {
    TSNode fn, loop, body;
    const kl_ax_loop *L;
    char type[64];               /* the loop variable's type */
    TSNode op[2];                /* A[...] (row operand), B[...] (column operand) */
    TSNode idx[2];
    char arr[2][64], elem[2][64];
    char form;                   /* 'I' inside if (cond) {...}, 'R' after if (cond) return;, 'N' none */
    TSNode guard;
    TSNode pre[32];
    unsigned npre;
    char *gtext[2];              /* the load guards without the k part (may be empty), owned */
    int64_t dim[3];
    char tile_text[64];
    char why[480];
} ga;

static void ga_release(ga *g)
{
    free(g->gtext[0]);
    free(g->gtext[1]);
    g->gtext[0] = g->gtext[1] = NULL;
}

/* Is the declaration safe to run in every thread: no memory read, no call but casts/conversions? */
typedef struct hoist_scan {
    const kl_rule_ctx *ctx;
    bool reads;
} hoist_scan;

/* A load or a call: a subscript not under `&`, a `*p`, a call. (`&b[j]` computes an address only.) */
static bool hoist_visit(TSNode n, void *user)
{
    hoist_scan *r = user;
    if (r->reads) return false;
    if (rb_is(n, "call_expression")) r->reads = true;
    if (rb_is(n, "pointer_expression")) {
        if (!text_is(r->ctx, rb_field(n, "operator"), "&")) r->reads = true;
        else if (rb_is(strip(rb_field(n, "argument")), "subscript_expression")) {
            /* &p[i]: the address; its index may still read */
            TSNode s = strip(rb_field(n, "argument"));
            rb_walk(rb_field(s, "indices"), hoist_visit, r);
            return false;
        }
    }
    if (rb_is(n, "subscript_expression")) r->reads = true;
    return !r->reads;
}

static bool hoistable(const kl_rule_ctx *ctx, TSNode d)
{
    if (!rb_is(d, "declaration")) return false;
    char ty[512];
    squeezed(ctx, d, ty, sizeof ty);
    if (strstr(ty, "__shared__") || strstr(ty, "static")) return false;
    hoist_scan r = {ctx, false};
    rb_walk(d, hoist_visit, &r);
    return !r.reads;
}

/* Where a loop that is to get barriers sits: at the kernel's top level ('N'), after an early
 * `if (…) return;` ('R', guard = that if), or as the only body of the output guard
 * `if (…) { … }` ('I', guard = that if); the statements before it that move with the guard
 * (hoistable ones only) into pre. Every thread must reach the barriers, so no other return
 * may come before the loop. False with the reason in why. */
typedef struct placement {
    char form;
    TSNode guard;
    TSNode pre[32];
    unsigned npre;
} placement;

static bool loop_placement(const kl_rule_ctx *ctx, const char *src, TSNode fn, TSNode loop, placement *pl,
                           char *why, size_t wsize)
{
#define PWHY(...) (kl_snprintf(why, wsize, __VA_ARGS__), false)
    unsigned ln = kl_ast_line(loop);
    TSNode fbody = kl_ast_function_body(fn);
    TSNode par = ts_node_parent(loop);
    memset(pl, 0, sizeof *pl);
    if (ts_node_eq(par, fbody)) {
        pl->form = 'N';
        for (TSNode q = rb_prev_stmt(loop); !ts_node_is_null(q); q = rb_prev_stmt(q)) {
            if (early_return(q)) {
                if (pl->form == 'R') return PWHY("%s:%u: two early returns before the loop", src, kl_ast_line(q));
                pl->form = 'R';
                pl->guard = q;
            } else if (count_type(q, "return_statement", NULL) || count_type(q, "goto_statement", NULL))
                return PWHY("%s:%u: a return before the loop would skip the barriers", src, kl_ast_line(q));
        }
        if (pl->form == 'R')
            for (TSNode q = rb_next_stmt(pl->guard); !ts_node_eq(q, loop); q = rb_next_stmt(q)) {
                if (!hoistable(ctx, q))
                    return PWHY("%s:%u: the statement between the early return and the loop reads memory or calls "
                                "a function: it cannot run in the threads that returned", src, kl_ast_line(q));
                if (pl->npre < 32) pl->pre[pl->npre++] = q;
            }
    } else if (rb_is(par, "compound_statement") && rb_is(ts_node_parent(par), "if_statement") &&
               ts_node_eq(ts_node_parent(ts_node_parent(par)), fbody) &&
               ts_node_is_null(rb_field(ts_node_parent(par), "alternative"))) {
        pl->form = 'I';
        pl->guard = ts_node_parent(par);
        for (TSNode q = rb_prev_stmt(pl->guard); !ts_node_is_null(q); q = rb_prev_stmt(q))
            if (count_type(q, "return_statement", NULL) || count_type(q, "goto_statement", NULL))
                return PWHY("%s:%u: a return before the loop would skip the barriers", src, kl_ast_line(q));
        for (uint32_t i = 0; i < ts_node_named_child_count(par); i++) {
            TSNode q = ts_node_named_child(par, i);
            if (ts_node_eq(q, loop)) break;
            if (rb_is(q, "comment")) continue;
            if (!hoistable(ctx, q))
                return PWHY("%s:%u: the statement before the loop reads memory or calls a function: it cannot move "
                            "out of the guard", src, kl_ast_line(q));
            if (pl->npre < 32) pl->pre[pl->npre++] = q;
        }
        if (rb_line_end(ctx, ts_node_start_byte(par)) > ts_node_start_byte(ts_node_named_child(par, 0)) ||
            !rb_line_blank_before(ctx, ts_node_end_byte(par) - 1))
            return PWHY("%s:%u: the guard and the loop are not laid out one statement a line", src, ln);
    } else
        return PWHY("%s:%u: the loop is not at the kernel's top level nor directly inside its output guard (a "
                    "barrier would sit in divergent control flow)", src, ln);
    if (!kl_rules_starts_line(ctx, ts_node_start_byte(loop)))
        return PWHY("%s:%u: the loop does not start its line", src, ln);
    for (unsigned i = 0; i < pl->npre; i++)
        if (!kl_rules_starts_line(ctx, ts_node_start_byte(pl->pre[i])))
            return PWHY("%s:%u: the statements are not one a line", src, kl_ast_line(pl->pre[i]));
    return true;
#undef PWHY
}

typedef struct sub_scan {
    const kl_rule_ctx *ctx;
    TSNode subs[16];
    unsigned n;
} sub_scan;

static bool sub_visit(TSNode n, void *user)
{
    sub_scan *s = user;
    if (rb_is(n, "subscript_expression")) {
        if (s->n < 16) s->subs[s->n] = n;
        s->n++;
        return false;
    }
    return true;
}

static bool analyse_apply(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *kname, TSNode loop, ga *g)
{
    memset(g, 0, sizeof *g);
    g->fn = fn;
    g->loop = loop;
    int li = kl_affine_loop_index(ax, loop);
    const char *src = kl_source_name(ctx->src);
    unsigned ln = kl_ast_line(loop);
#define WHY(...) (kl_snprintf(g->why, sizeof g->why, __VA_ARGS__), false)
    if (li < 0 || !rb_is(loop, "for_statement")) return WHY("%s:%u: not a for loop", src, ln);
    const kl_ax_loop *L = kl_affine_loop(ax, (unsigned)li);
    g->L = L;
    if (!L->var || !L->cmp || strcmp(L->cmp, "<") || !L->step_is_int || L->step_int != 1 || !L->start || !L->bound)
        return WHY("%s:%u: the loop is not `for (T k = S; k < K; k++)`", src, ln);
    if (L->parent >= 0) return WHY("%s:%u: the loop is nested in another loop", src, ln);
    TSNode init = rb_field(loop, "initializer");
    if (!rb_is(init, "declaration")) return WHY("%s:%u: the loop does not declare its variable", src, ln);
    squeezed(ctx, rb_field(init, "type"), g->type, sizeof g->type);
    if (!strcmp(g->type, "unsigned")) kl_snprintf(g->type, sizeof g->type, "unsigned");
    /* the raw type text (keeps `size_t`, `unsigned int`) */
    {
        TSNode ty = rb_field(init, "type");
        kl_snprintf(g->type, sizeof g->type, "%.*s", (int)(ts_node_end_byte(ty) - ts_node_start_byte(ty)),
                    ctx->text + ts_node_start_byte(ty));
    }
    g->body = rb_field(loop, "body");
    /* the body: `acc += X * Y;` statements */
    TSNode stmts[16];
    unsigned ns = 0;
    if (rb_is(g->body, "compound_statement")) {
        for (uint32_t i = 0; i < ts_node_named_child_count(g->body); i++) {
            TSNode s = ts_node_named_child(g->body, i);
            if (rb_is(s, "comment")) continue;
            if (ns < 16) stmts[ns] = s;
            ns++;
        }
    } else stmts[ns++] = g->body;
    if (!ns || ns > 16) return WHY("%s:%u: the loop body is not a few accumulations", src, ln);
    sub_scan ss = {.ctx = ctx};
    for (unsigned i = 0; i < ns; i++) {
        TSNode e = ts_node_named_child(stmts[i], 0);
        char op[8] = "";
        if (rb_is(e, "assignment_expression")) {
            TSNode o = rb_field(e, "operator");
            kl_snprintf(op, sizeof op, "%.*s", (int)(ts_node_end_byte(o) - ts_node_start_byte(o)), ctx->text + ts_node_start_byte(o));
        }
        if (!rb_is(stmts[i], "expression_statement") || strcmp(op, "+=") || !rb_is(rb_field(e, "left"), "identifier"))
            return WHY("%s:%u: the loop body is not `acc += X * Y` accumulations into locals", src, kl_ast_line(stmts[i]));
        char b[8];
        if (strcmp(binop(ctx, strip(rb_field(e, "right")), b, sizeof b), "*"))
            return WHY("%s:%u: the accumulated value is not a product (a zero-padded tile adds 0*0 terms, which only a "
                       "product of the operands keeps exact)", src, kl_ast_line(stmts[i]));
        rb_walk(rb_field(e, "right"), sub_visit, &ss);
    }
    if (count_type(g->body, "call_expression", NULL) > 2 * ns + 2 && 0) return false;
    /* the operands: subscripts varying along k */
    unsigned nvar = 0;
    for (unsigned i = 0; i < ss.n && i < 16; i++) {
        TSNode s = ss.subs[i];
        TSNode base = rb_field(s, "argument"), ix = rb_field(s, "indices");
        if (!rb_is(base, "identifier") || ts_node_named_child_count(ix) != 1)
            return WHY("%s:%u: '%.*s' is not a 1-D subscript of a pointer", src, kl_ast_line(s),
                       (int)(ts_node_end_byte(s) - ts_node_start_byte(s)), ctx->text + ts_node_start_byte(s));
        TSNode index = ts_node_named_child(ix, 0);
        if (!uses_of(ctx, index, L->var)) continue;
        if (nvar >= 2) return WHY("%s:%u: more than two operands vary along '%s'", src, kl_ast_line(s), L->var);
        g->op[nvar] = s;
        g->idx[nvar] = index;
        nvar++;
    }
    if (nvar != 2) return WHY("%s:%u: %u operand(s) vary along '%s'; a GEMM-like loop reads two", src, ln, nvar, L->var);
    /* k only inside the operands' indices */
    unsigned inside = uses_of(ctx, g->idx[0], L->var) + uses_of(ctx, g->idx[1], L->var);
    if (uses_of(ctx, g->body, L->var) != inside)
        return WHY("%s:%u: '%s' is used outside the operands' indices", src, ln, L->var);
    /* which operand is the row one (no threadIdx.x) and which the column one (no threadIdx.y) */
    int dx[2], dy[2], dz[2];
    for (int i = 0; i < 2; i++) {
        dx[i] = depends(ax, ctx, g->idx[i], "threadIdx.x");
        dy[i] = depends(ax, ctx, g->idx[i], "threadIdx.y");
        dz[i] = depends(ax, ctx, g->idx[i], "threadIdx.z");
        if (dx[i] < 0 || dy[i] < 0 || dz[i] < 0) {
            kl_affine a = {0};
            kl_affine_of(ax, g->idx[i], &a);
            kl_snprintf(g->why, sizeof g->why, "%s:%u: the index of '%.*s' is not affine (%s)", src, kl_ast_line(g->op[i]),
                (int)(ts_node_end_byte(g->op[i]) - ts_node_start_byte(g->op[i])), ctx->text + ts_node_start_byte(g->op[i]),
                a.why ? a.why : "unknown");
            kl_affine_release(&a);
            return false;
        }
        if (dz[i]) return WHY("%s:%u: the operand depends on threadIdx.z", src, kl_ast_line(g->op[i]));
    }
    if (dx[0] && !dx[1]) {
        TSNode t = g->op[0];
        g->op[0] = g->op[1], g->op[1] = t;
        t = g->idx[0];
        g->idx[0] = g->idx[1], g->idx[1] = t;
        int u = dy[0];
        dy[0] = dy[1], dy[1] = u;
        u = dx[0];
        dx[0] = dx[1], dx[1] = u;
    }
    if (dx[0]) return WHY("%s:%u: both operands depend on threadIdx.x: no row of the block shares one", src, ln);
    if (dy[1]) return WHY("%s:%u: the operand '%.*s' depends on both threadIdx.x and threadIdx.y: the threads of a block "
                          "share no tile of it", src, kl_ast_line(g->op[1]),
                          (int)(ts_node_end_byte(g->op[1]) - ts_node_start_byte(g->op[1])), ctx->text + ts_node_start_byte(g->op[1]));
    for (int i = 0; i < 2; i++) {
        TSNode base = rb_field(g->op[i], "argument");
        uint32_t a = ts_node_start_byte(base), b = ts_node_end_byte(base);
        kl_snprintf(g->arr[i], sizeof g->arr[i], "%.*s", (int)(b - a), ctx->text + a);
        if (!elem_of(ctx, ax, fn, g->arr[i], g->elem[i], sizeof g->elem[i]))
            return WHY("%s:%u: the element type of '%s' is unknown", src, kl_ast_line(g->op[i]), g->arr[i]);
    }
    /* the structure: top level, inside an if guard, or after an early return */
    placement pl;
    if (!loop_placement(ctx, src, fn, loop, &pl, g->why, sizeof g->why)) return false;
    g->form = pl.form, g->guard = pl.guard, g->npre = pl.npre;
    memcpy(g->pre, pl.pre, sizeof pl.pre);
    /* the load guards from the output guard */
    kl_strbuf gs[2] = {KL_STRBUF_INIT, KL_STRBUF_INIT};
    if (g->form != 'N') {
        TSNode c = if_cond(g->guard);
        TSNode parts[MAXC];
        unsigned np = 0;
        split_on(ctx, c, g->form == 'I' ? "&&" : "||", parts, &np, MAXC);
        if (np > MAXC) return WHY("%s:%u: the guard has too many conditions", src, kl_ast_line(g->guard));
        for (unsigned i = 0; i < np; i++) {
            int px = depends(ax, ctx, parts[i], "threadIdx.x"), py = depends(ax, ctx, parts[i], "threadIdx.y");
            if (px < 0 || py < 0 || (px && py)) {
                kl_snprintf(g->why, sizeof g->why,
                            "%s:%u: the guard condition '%.*s' %s: it bounds neither operand's loads", src,
                            kl_ast_line(parts[i]), (int)(ts_node_end_byte(parts[i]) - ts_node_start_byte(parts[i])),
                            ctx->text + ts_node_start_byte(parts[i]),
                            px < 0 || py < 0 ? "is not affine in the thread indices" : "depends on both threadIdx.x and threadIdx.y");
                kl_strbuf_release(&gs[0]);
                kl_strbuf_release(&gs[1]);
                return false;
            }
            char *t = g->form == 'I' ? rb_text(ctx, strip(parts[i])) : negate(ctx, parts[i]);
            if (!t) break;
            if (!px) kl_strbuf_addf(&gs[0], "%s%s", gs[0].len ? " && " : "", t);
            if (!py) kl_strbuf_addf(&gs[1], "%s%s", gs[1].len ? " && " : "", t);
            free(t);
        }
    }
    g->gtext[0] = kl_strbuf_detach(&gs[0], NULL);
    g->gtext[1] = kl_strbuf_detach(&gs[1], NULL);
    if (!g->gtext[0]) g->gtext[0] = kl_strdup("");
    if (!g->gtext[1]) g->gtext[1] = kl_strdup("");
    char bwhy[300], btext[3][64];
    if (!launch_block(ctx, kname, g->dim, btext, bwhy, sizeof bwhy)) return WHY("%s: %s", src, bwhy);
    kl_snprintf(g->tile_text, sizeof g->tile_text, "%s", btext[0]);
    if (g->dim[0] != g->dim[1] || g->dim[2] != 1 || (g->dim[0] != 16 && g->dim[0] != 32 && g->dim[0] != 8))
        return WHY("%s: kernel '%s' is launched with a %lldx%lldx%lld block; tiles need a square 8, 16 or 32 block "
                   "(change the block size first)", src, kname, (long long)g->dim[0], (long long)g->dim[1],
                   (long long)g->dim[2]);
#undef WHY
    return true;
}

static kl_status apply_gemm(const kl_rule_ctx *ctx, const ga *g, int64_t tile, kl_edits *out, kl_error *err)
{
    const char *src = kl_source_name(ctx->src);
    if (tile != g->dim[0])
        return kl_rule_not_applicable(err, "%s:%u: tile %lld differs from the %lldx%lld block; change the block size "
                                      "first (block-size)", src, kl_ast_line(g->loop), (long long)tile,
                                      (long long)g->dim[0], (long long)g->dim[1]);
    const char *k = g->L->var;
    char k0[64], kk[64], as[80], bs[80], base[80];
    kl_snprintf(base, sizeof base, "%s0", k);
    fresh_name(ctx, g->fn, base, k0, sizeof k0);
    kl_snprintf(base, sizeof base, "%s%s", k, k);
    fresh_name(ctx, g->fn, base, kk, sizeof kk);
    kl_snprintf(base, sizeof base, "%ss", g->arr[0]);
    fresh_name(ctx, g->fn, base, as, sizeof as);
    kl_snprintf(base, sizeof base, "%ss", g->arr[1]);
    fresh_name(ctx, g->fn, base, bs, sizeof bs);
    if (!strcmp(as, bs)) kl_snprintf(bs, sizeof bs, "%s_b", as);
    const char *T = g->tile_text;
    char ind[64], lind[64], unit[64];
    TSNode anchor = g->form == 'N' ? g->loop : g->guard;
    rb_indent_of(ctx, ts_node_start_byte(anchor), ind, sizeof ind);
    rb_indent_of(ctx, ts_node_start_byte(g->loop), lind, sizeof lind);
    if (g->form == 'I' && strlen(lind) > strlen(ind)) kl_snprintf(unit, sizeof unit, "%s", lind + strlen(ind));
    else kl_snprintf(unit, sizeof unit, "    ");
    kl_status st = KL_OK;
    char *ld[2] = {NULL, NULL}, *body = NULL, *pre = NULL, *guard_text = NULL, *loop_text = NULL;
    /* the loads: k -> (k0 + threadIdx.x) in A's index, (k0 + threadIdx.y) in B's */
    for (int i = 0; i < 2; i++) {
        char sub[160], zero[96];
        kl_snprintf(sub, sizeof sub, "(%s + threadIdx.%c)", k0, i == 0 ? 'x' : 'y');
        rep reps[16];
        unsigned nr = 0;
        TSNode stack[64];
        unsigned sp = 0;
        stack[sp++] = g->idx[i];
        while (sp) {
            TSNode n = stack[--sp];
            if (rb_is(n, "identifier") && text_is(ctx, n, k)) {
                if (nr < 16) reps[nr++] = (rep){ts_node_start_byte(n), ts_node_end_byte(n), sub};
                continue;
            }
            for (uint32_t c = 0; c < ts_node_named_child_count(n) && sp < 64; c++) stack[sp++] = ts_node_named_child(n, c);
        }
        char *ix = splice(ctx, ts_node_start_byte(g->idx[i]), ts_node_end_byte(g->idx[i]), reps, nr);
        if (!ix) goto oom;
        zero_of(g->elem[i], zero, sizeof zero);
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&sb, "%s%s[threadIdx.y][threadIdx.x] = ", i == 0 ? "" : "", i == 0 ? as : bs);
        if (i == 0) kl_strbuf_addf(&sb, "%s%s%s + threadIdx.x < %s", g->gtext[0], g->gtext[0][0] ? " && " : "", k0, g->L->bound);
        else kl_strbuf_addf(&sb, "%s + threadIdx.y < %s%s%s", k0, g->L->bound, g->gtext[1][0] ? " && " : "", g->gtext[1]);
        kl_strbuf_addf(&sb, " ? %s[%s] : %s;", g->arr[i], ix, zero);
        free(ix);
        ld[i] = kl_strbuf_detach(&sb, NULL);
        if (!ld[i]) goto oom;
    }
    /* the inner loop's body: the operands read from the tiles */
    {
        char ra[200], rbuf[200];
        kl_snprintf(ra, sizeof ra, "%s[threadIdx.y][%s]", as, kk);
        kl_snprintf(rbuf, sizeof rbuf, "%s[%s][threadIdx.x]", bs, kk);
        rep reps[2] = {{ts_node_start_byte(g->op[0]), ts_node_end_byte(g->op[0]), ra},
                       {ts_node_start_byte(g->op[1]), ts_node_end_byte(g->op[1]), rbuf}};
        char *raw = splice(ctx, ts_node_start_byte(g->body), ts_node_end_byte(g->body), reps, 2);
        if (!raw) goto oom;
        int delta = (int)(strlen(ind) + strlen(unit)) - (int)strlen(lind);
        body = reindent_node_text(lind, raw, delta);
        free(raw);
        if (!body) return kl_rule_not_applicable(err, "%s:%u: the loop body is indented with tabs", src, kl_ast_line(g->loop));
    }
    /* the pre statements, moved out of the guard */
    if (g->form == 'I' && g->npre) {
        uint32_t a = rb_line_start(ctx, ts_node_start_byte(g->pre[0]));
        uint32_t b = rb_line_end(ctx, ts_node_end_byte(g->pre[g->npre - 1]) - 1);
        pre = rb_reindent(ctx->text + a, b - a, (int)strlen(ind) - (int)strlen(lind));
        if (!pre) return kl_rule_not_applicable(err, "%s:%u: the statements before the loop are indented with tabs", src,
                                                kl_ast_line(g->pre[0]));
    }
    {
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&sb, "for (%s %s = %s; %s < %s; %s += %s) {\n", g->type, k0, g->L->start, k0, g->L->bound, k0, T);
        kl_strbuf_addf(&sb, "%s%s%s\n%s%s%s\n", ind, unit, ld[0], ind, unit, ld[1]);
        kl_strbuf_addf(&sb, "%s%s__syncthreads();\n", ind, unit);
        kl_strbuf_addf(&sb, "%s%sfor (%s %s = 0; %s < %s; %s++) %s\n", ind, unit, g->type, kk, kk, T, kk, body);
        kl_strbuf_addf(&sb, "%s%s__syncthreads();\n%s}", ind, unit, ind);
        loop_text = kl_strbuf_detach(&sb, NULL);
        if (!loop_text) goto oom;
    }
    {
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&sb, "%s// " NAME ": %s x %s tiles of %s and %s in shared memory\n", ind, T, T, g->arr[0], g->arr[1]);
        kl_strbuf_addf(&sb, "%s__shared__ %s %s[%s][%s];\n", ind, g->elem[0], as, T, T);
        kl_strbuf_addf(&sb, "%s__shared__ %s %s[%s][%s];\n", ind, g->elem[1], bs, T, T);
        char *decls = kl_strbuf_detach(&sb, NULL);
        if (!decls) goto oom;
        if (g->form == 'I') {
            /* decls, pre and the tile loop before the guard; pre and the loop leave it */
            st = kl_edits_addf(out, rb_line_start(ctx, ts_node_start_byte(g->guard)),
                               rb_line_start(ctx, ts_node_start_byte(g->guard)), "%s%s%s%s\n", decls, pre ? pre : "", ind,
                               loop_text);
            uint32_t a = rb_line_start(ctx, ts_node_start_byte(g->npre ? g->pre[0] : g->loop));
            uint32_t b = rb_line_end(ctx, ts_node_end_byte(g->loop) - 1);
            if (st == KL_OK) st = kl_edits_add(out, a, b, "");
        } else if (g->form == 'R') {
            uint32_t a = rb_line_start(ctx, ts_node_start_byte(g->guard));
            uint32_t b = rb_line_end(ctx, ts_node_end_byte(g->guard) - 1);
            st = kl_edits_add(out, a, b, decls);
            guard_text = rb_text(ctx, g->guard);
            if (st == KL_OK && guard_text)
                st = kl_edits_addf(out, ts_node_start_byte(g->loop), ts_node_end_byte(g->loop), "%s\n%s%s", loop_text, ind,
                                   guard_text);
        } else {
            st = kl_edits_add(out, rb_line_start(ctx, ts_node_start_byte(g->loop)), rb_line_start(ctx, ts_node_start_byte(g->loop)),
                              decls);
            if (st == KL_OK) st = kl_edits_add(out, ts_node_start_byte(g->loop), ts_node_end_byte(g->loop), loop_text);
        }
        free(decls);
    }
    goto done;
oom:
    st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
done:
    free(ld[0]);
    free(ld[1]);
    free(body);
    free(pre);
    free(guard_text);
    free(loop_text);
    if (st == KL_ERR_NOMEM && err->status != KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

/* ---- present: GEMM tiles -------------------------------------------------------------------------- */

typedef struct tload {
    TSNode stmt;            /* the load statement */
    TSNode target;          /* S[..][..] */
    char arr[64];
    TSNode sub[2];          /* the subscripts */
    int thr[2];             /* which thread index each subscript is: 'x', 'y' */
    TSNode cond, value;     /* the guard (may be null) and G[e] */
    TSNode gidx;            /* e */
    char garr[64];
    int kdim;               /* the subscript (0/1) whose thread index moves along k */
} tload;

typedef struct gp {
    TSNode fn, tl, cl;      /* tile loop, compute loop */
    const kl_ax_loop *T, *C;
    tload ld[2];
    TSNode decl[2];
    unsigned ndecl;
    char form;              /* 'I', 'R', 'N' */
    TSNode after;           /* the guard statement after the tile loop */
    TSNode pre[32];
    unsigned npre;
    char kname[64];         /* the naive loop variable */
    char bound[256];        /* the naive loop bound */
    char ttype[64];
    char why[480];
} gp;

/* The thread index a subscript is exactly: 'x' / 'y', 0 otherwise. */
static int thread_index(kl_affine_ctx *ax, TSNode n)
{
    kl_affine a = {0};
    if (kl_affine_of(ax, n, &a) != KL_OK) return 0;
    int r = 0;
    if (a.ok && a.nterms == 1 && a.const_is_int && a.const_int == 0 && a.terms[0].coef_is_int && a.terms[0].coef_int == 1) {
        if (!strcmp(a.terms[0].var, "threadIdx.x")) r = 'x';
        else if (!strcmp(a.terms[0].var, "threadIdx.y")) r = 'y';
    }
    kl_affine_release(&a);
    return r;
}

static bool zero_value(const kl_rule_ctx *ctx, TSNode v)
{
    v = strip(v);
    if (rb_is(v, "number_literal")) {
        char t[32];
        squeezed(ctx, v, t, sizeof t);
        for (char *p = t; *p; p++)
            if (*p != '0' && *p != '.' && *p != 'f' && *p != 'F') return false;
        return true;
    }
    if (rb_is(v, "call_expression")) {
        TSNode args = rb_field(v, "arguments");
        return ts_node_named_child_count(args) == 1 && zero_value(ctx, ts_node_named_child(args, 0));
    }
    if (rb_is(v, "cast_expression")) return zero_value(ctx, rb_field(v, "value"));
    return false;
}

/* Is the statement a guarded load into a 2-D shared subscript? */
static bool parse_load(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode st, tload *l)
{
    memset(l, 0, sizeof *l);
    l->stmt = st;
    TSNode asg = {0};
    if (rb_is(st, "expression_statement")) {
        asg = ts_node_named_child(st, 0);
        if (!rb_is(asg, "assignment_expression") || !text_is(ctx, rb_field(asg, "operator"), "=")) return false;
        TSNode r = strip(rb_field(asg, "right"));
        if (rb_is(r, "conditional_expression")) {
            if (!zero_value(ctx, rb_field(r, "alternative"))) return false;
            l->cond = rb_field(r, "condition");
            l->value = strip(rb_field(r, "consequence"));
        } else l->value = r;
    } else if (rb_is(st, "if_statement")) {
        TSNode c = rb_field(st, "consequence"), e = rb_field(st, "alternative");
        if (rb_is(e, "else_clause")) e = ts_node_named_child(e, 0);
        if (rb_is(c, "compound_statement") && ts_node_named_child_count(c) == 1) c = ts_node_named_child(c, 0);
        if (rb_is(e, "compound_statement") && ts_node_named_child_count(e) == 1) e = ts_node_named_child(e, 0);
        if (!rb_is(c, "expression_statement") || !rb_is(e, "expression_statement")) return false;
        asg = ts_node_named_child(c, 0);
        TSNode a2 = ts_node_named_child(e, 0);
        if (!rb_is(asg, "assignment_expression") || !rb_is(a2, "assignment_expression")) return false;
        char t1[256], t2[256];
        squeezed(ctx, rb_field(asg, "left"), t1, sizeof t1);
        squeezed(ctx, rb_field(a2, "left"), t2, sizeof t2);
        if (strcmp(t1, t2) || !zero_value(ctx, rb_field(a2, "right"))) return false;
        l->cond = if_cond(st);
        l->value = strip(rb_field(asg, "right"));
    } else return false;
    TSNode t = rb_field(asg, "left");
    if (!rb_is(t, "subscript_expression")) return false;
    TSNode inner = rb_field(t, "argument");
    if (!rb_is(inner, "subscript_expression") || !rb_is(rb_field(inner, "argument"), "identifier")) return false;
    l->target = t;
    l->sub[0] = kl_ast_subscript_index(inner);
    l->sub[1] = kl_ast_subscript_index(t);
    uint32_t a = ts_node_start_byte(rb_field(inner, "argument")), b = ts_node_end_byte(rb_field(inner, "argument"));
    kl_snprintf(l->arr, sizeof l->arr, "%.*s", (int)(b - a), ctx->text + a);
    for (int i = 0; i < 2; i++) l->thr[i] = thread_index(ax, l->sub[i]);
    if (!l->thr[0] || !l->thr[1] || l->thr[0] == l->thr[1]) return false;
    if (!rb_is(l->value, "subscript_expression") || !rb_is(rb_field(l->value, "argument"), "identifier")) return false;
    TSNode ix = rb_field(l->value, "indices");
    if (ts_node_named_child_count(ix) != 1) return false;
    l->gidx = ts_node_named_child(ix, 0);
    a = ts_node_start_byte(rb_field(l->value, "argument")), b = ts_node_end_byte(rb_field(l->value, "argument"));
    kl_snprintf(l->garr, sizeof l->garr, "%.*s", (int)(b - a), ctx->text + a);
    return true;
}

static bool is_shared_decl_of(const kl_rule_ctx *ctx, TSNode d, const char *name, unsigned *ndecls)
{
    if (!rb_is(d, "declaration")) return false;
    bool shared = false;
    for (uint32_t i = 0; i < ts_node_named_child_count(d); i++) {
        TSNode ch = ts_node_named_child(d, i);
        if ((rb_is(ch, "type_qualifier") || rb_is(ch, "storage_class_specifier") || rb_is(ch, "attribute_specifier")) &&
            text_is(ctx, ch, "__shared__"))
            shared = true;
    }
    if (!shared) {
        char t[256];
        squeezed(ctx, d, t, sizeof t);
        if (strncmp(t, "__shared__", 10)) return false;
    }
    bool found = false;
    unsigned n = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(d); i++) {
        TSNode ch = ts_node_named_child(d, i);
        if (!rb_is(ch, "array_declarator") && !rb_is(ch, "init_declarator")) continue;
        n++;
        if (text_is(ctx, rb_declarator_name(ch), name)) found = true;
    }
    *ndecls = n;
    return found;
}

typedef struct decl_find {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode decl;
    unsigned ndecls;
} decl_find;

static bool decl_find_visit(TSNode n, void *user)
{
    decl_find *d = user;
    unsigned k;
    if (ts_node_is_null(d->decl) && is_shared_decl_of(d->ctx, n, d->name, &k)) {
        d->decl = n;
        d->ndecls = k;
    }
    return ts_node_is_null(d->decl);
}

/* The node(s) of e holding the k part (affine equal to the load's k coordinate): the smallest
 * subtree holding every use of the tile variable, which must be c*t + thread. */
static bool affine_equal(kl_affine_ctx *ax, TSNode a, const kl_affine *want)
{
    kl_affine x = {0};
    if (kl_affine_of(ax, a, &x) != KL_OK || !x.ok) {
        kl_affine_release(&x);
        return false;
    }
    char *s1 = kl_affine_to_text(&x), *s2 = kl_affine_to_text(want);
    bool eq = s1 && s2 && !strcmp(s1, s2);
    free(s1);
    free(s2);
    kl_affine_release(&x);
    return eq;
}

typedef struct kpart {
    const kl_rule_ctx *ctx;
    kl_affine_ctx *ax;
    const kl_affine *want;
    const char *tvar;
    TSNode found[8];
    unsigned n;
} kpart;

static bool kpart_visit(TSNode n, void *user)
{
    kpart *k = user;
    if (!rb_count_ident(k->ctx, n, k->tvar)) return false;
    if (rb_is(n, "parenthesized_expression") || rb_is(n, "binary_expression")) {
        if (affine_equal(k->ax, n, k->want)) {
            if (k->n < 8) k->found[k->n] = n;
            k->n++;
            return false;
        }
    }
    return true;
}

/* The replacements in e turning its k part into `kname`; false with why when e has none. For a
 * `+` chain holding c*t and the thread index as separate terms, the chain is rebuilt. */
static bool k_replace(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode e, const kl_affine *want, const char *tvar,
                      const char *thr_var, const char *kname, rep *reps, unsigned *nr, char **owned)
{
    kpart kp = {.ctx = ctx, .ax = ax, .want = want, .tvar = tvar};
    rb_walk(e, kpart_visit, &kp);
    *owned = NULL;
    if (kp.n && kp.n <= 8) {
        for (unsigned i = 0; i < kp.n; i++)
            reps[(*nr)++] = (rep){ts_node_start_byte(kp.found[i]), ts_node_end_byte(kp.found[i]), kname};
        return true;
    }
    /* a + chain: find the chain whose terms include the t part and the thread index */
    TSNode terms[16];
    unsigned nt = 0;
    split_on(ctx, e, "+", terms, &nt, 16);
    if (nt > 16 || nt < 2) return false;
    int ti = -1, hi = -1;
    for (unsigned i = 0; i < nt; i++) {
        int dt = depends(ax, ctx, terms[i], tvar);
        if (dt != 0) {
            if (ti >= 0 || dt < 0) return false;
            ti = (int)i;
        } else if (thread_index(ax, terms[i]) == thr_var[10]) {
            if (hi >= 0) return false;
            hi = (int)i;
        }
    }
    if (ti < 0 || hi < 0) return false;
    /* the two terms together must be the k coordinate */
    kl_affine a = {0}, b = {0};
    kl_affine_of(ax, terms[ti], &a);
    bool ok = a.ok;
    if (ok) {
        /* c*t alone: the want minus the thread index */
        kl_affine_of(ax, terms[hi], &b);
        char *wt = kl_affine_to_text(want), *at = kl_affine_to_text(&a);
        char expect[256];
        kl_snprintf(expect, sizeof expect, "%s + %s", at ? at : "", thr_var);
        char s1[256], s2[256];
        squeeze_str(expect, s1, sizeof s1);
        squeeze_str(wt ? wt : "", s2, sizeof s2);
        ok = !strcmp(s1, s2);
        if (!ok) {
            kl_snprintf(expect, sizeof expect, "%s + %s", thr_var, at ? at : "");
            squeeze_str(expect, s1, sizeof s1);
            ok = !strcmp(s1, s2);
        }
        free(wt);
        free(at);
    }
    kl_affine_release(&a);
    kl_affine_release(&b);
    if (!ok) return false;
    kl_strbuf sb = KL_STRBUF_INIT;
    bool first = true;
    for (unsigned i = 0; i < nt; i++) {
        if ((int)i == hi) continue;
        if (!first) kl_strbuf_adds(&sb, " + ");
        first = false;
        if ((int)i == ti) kl_strbuf_adds(&sb, kname);
        else kl_strbuf_add(&sb, ctx->text + ts_node_start_byte(terms[i]), ts_node_end_byte(terms[i]) - ts_node_start_byte(terms[i]));
    }
    *owned = kl_strbuf_detach(&sb, NULL);
    if (!*owned) return false;
    TSNode chain = strip(e);
    reps[(*nr)++] = (rep){ts_node_start_byte(chain), ts_node_end_byte(chain), *owned};
    return true;
}

typedef struct read_scan {
    const kl_rule_ctx *ctx;
    const char *arr[2];
    TSNode reads[32];
    unsigned n, other;
} read_scan;

static bool read_visit(TSNode n, void *user)
{
    read_scan *r = user;
    if (rb_is(n, "subscript_expression")) {
        TSNode in = rb_field(n, "argument");
        if (rb_is(in, "subscript_expression") && rb_is(rb_field(in, "argument"), "identifier")) {
            for (int i = 0; i < 2; i++)
                if (text_is(r->ctx, rb_field(in, "argument"), r->arr[i])) {
                    if (r->n < 32) r->reads[r->n] = n;
                    r->n++;
                    return true;
                }
        }
    }
    return true;
}

static bool analyse_present(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, TSNode tl, gp *p)
{
    memset(p, 0, sizeof *p);
    p->fn = fn;
    p->tl = tl;
    const char *src = kl_source_name(ctx->src);
#define WHY(...) (kl_snprintf(p->why, sizeof p->why, __VA_ARGS__), true)
    int ti = kl_affine_loop_index(ax, tl);
    if (ti < 0) return false;
    p->T = kl_affine_loop(ax, (unsigned)ti);
    TSNode body = rb_field(tl, "body");
    if (!rb_is(body, "compound_statement")) return false;
    TSNode st[12];
    unsigned ns = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(body); i++) {
        TSNode s = ts_node_named_child(body, i);
        if (rb_is(s, "comment") || rb_is(s, "preproc_call")) continue;
        if (ns >= 12) return false;
        st[ns++] = s;
    }
    /* loads, sync, compute loop, sync */
    if (ns != 5 || !rb_is_syncthreads(ctx, st[2]) || !rb_is_syncthreads(ctx, st[4]) || !rb_is(st[3], "for_statement"))
        return false;
    for (int i = 0; i < 2; i++)
        if (!parse_load(ctx, ax, st[i], &p->ld[i])) return false;
    if (!strcmp(p->ld[0].arr, p->ld[1].arr)) return false;
    p->cl = st[3];
    int ci = kl_affine_loop_index(ax, p->cl);
    if (ci < 0) return false;
    p->C = kl_affine_loop(ax, (unsigned)ci);
    /* from here on the shape is the tiled GEMM: say why when it cannot be undone */
    if (!p->T->var || !p->T->start || !p->T->bound || !p->T->step || !p->T->cmp || strcmp(p->T->cmp, "<"))
        return WHY("%s:%u: the tile loop is not `for (t = S; t < B; t += step)`", src, kl_ast_line(tl));
    if (!p->C->var || !p->C->start || strcmp(p->C->start, "0") || !p->C->step_is_int || p->C->step_int != 1 ||
        !p->C->trip_known || !p->C->cmp || strcmp(p->C->cmp, "<"))
        return WHY("%s:%u: the loop over the tile is not `for (kk = 0; kk < TILE; kk++)`", src, kl_ast_line(p->cl));
    int64_t tile = p->C->trip;
    TSNode init = rb_field(tl, "initializer");
    if (!rb_is(init, "declaration")) return WHY("%s:%u: the tile loop does not declare its variable", src, kl_ast_line(tl));
    TSNode ty = rb_field(init, "type");
    kl_snprintf(p->ttype, sizeof p->ttype, "%.*s", (int)(ts_node_end_byte(ty) - ts_node_start_byte(ty)),
                ctx->text + ts_node_start_byte(ty));
    const char *tv = p->T->var;
    /* each load: its k coordinate c*t + thread, the thread index that moves along k */
    char bound[2][256] = {"", ""};
    const char *other[2][MAXC];
    (void)other;
    for (int i = 0; i < 2; i++) {
        tload *l = &p->ld[i];
        int kd = -1;
        if (!ts_node_is_null(l->cond)) {
            TSNode parts[MAXC];
            unsigned np = 0;
            split_on(ctx, l->cond, "&&", parts, &np, MAXC);
            for (unsigned c = 0; c < np && c < MAXC; c++) {
                TSNode s = strip(parts[c]);
                char b[8];
                if (depends(ax, ctx, s, tv) == 0) continue;
                if (strcmp(binop(ctx, s, b, sizeof b), "<") || depends(ax, ctx, rb_field(s, "right"), tv) != 0)
                    return WHY("%s:%u: the load's k condition is not `k < K`", src, kl_ast_line(s));
                squeezed(ctx, rb_field(s, "right"), bound[i], sizeof bound[i]);
                kl_affine a = {0};
                kl_affine_of(ax, rb_field(s, "left"), &a);
                for (int d = 0; d < 2 && a.ok; d++) {
                    char thr[16];
                    kl_snprintf(thr, sizeof thr, "threadIdx.%c", l->thr[d]);
                    if (kl_affine_coef(&a, thr)) kd = kd == -1 ? d : -2;
                }
                kl_affine_release(&a);
            }
        }
        if (kd < 0) {
            /* no k condition: the thread index of the subscript that e moves with */
            for (int d = 0; d < 2; d++) {
                char thr[16];
                kl_snprintf(thr, sizeof thr, "threadIdx.%c", l->thr[d]);
                int dt = depends(ax, ctx, l->gidx, thr);
                int other_d = depends(ax, ctx, l->gidx, l->thr[!d] == 'x' ? "threadIdx.x" : "threadIdx.y");
                if (dt == 1 && other_d == 0) kd = d;
            }
        }
        if (kd < 0) return WHY("%s:%u: cannot tell which thread index of the load moves along k", src, kl_ast_line(l->stmt));
        l->kdim = kd;
    }
    if (p->ld[0].kdim == p->ld[1].kdim && p->ld[0].thr[p->ld[0].kdim] == p->ld[1].thr[p->ld[1].kdim] && 0)
        return false;
    if (strcmp(bound[0], bound[1])) return WHY("%s:%u: the two loads bound k differently", src, kl_ast_line(tl));
    /* the naive loop: k from the tile loop's start, up to the bound */
    bool k0_style = p->T->step_is_int ? p->T->step_int == tile : false;
    if (!k0_style) {
        long long sv;
        TSNode upd = rb_field(tl, "update");
        (void)upd;
        char s2[64];
        squeeze_str(p->T->step, s2, sizeof s2);
        if (rb_const_name(ctx, fn, s2, &sv) && sv == tile) k0_style = true;
    }
    char kbase[64];
    size_t tl_len = strlen(tv);
    if (tl_len > 1 && tv[tl_len - 1] == '0') kl_snprintf(kbase, sizeof kbase, "%.*s", (int)(tl_len - 1), tv);
    else kl_snprintf(kbase, sizeof kbase, "k");
    fresh_name(ctx, fn, kbase, p->kname, sizeof p->kname);
    if (k0_style) {
        char tb[256];
        squeeze_str(p->T->bound, tb, sizeof tb);
        if (bound[0][0] && strcmp(tb, bound[0]))
            return WHY("%s:%u: the tile loop runs to '%s' but the loads to '%s'", src, kl_ast_line(tl), p->T->bound, bound[0]);
        kl_snprintf(p->bound, sizeof p->bound, "%s", p->T->bound);
    } else if (p->T->step_is_int && p->T->step_int == 1 && !strcmp(p->T->start, "0")) {
        if (!bound[0][0]) kl_snprintf(p->bound, sizeof p->bound, "(%s) * %lld", p->T->bound, (long long)tile);
        else {
            /* t < (K + TILE - 1) / TILE */
            char want1[300], want2[300], tb[256];
            squeeze_str(p->T->bound, tb, sizeof tb);
            kl_snprintf(want1, sizeof want1, "(%s+%lld)/%lld", bound[0], (long long)tile - 1, (long long)tile);
            bool ok = !strcmp(tb, want1);
            for (int pass = 0; pass < 2 && !ok; pass++) {
                /* the tile size by name: (K + TILE - 1) / TILE */
                const char *slash = strrchr(tb, '/');
                long long v;
                if (!slash || !rb_const_name(ctx, fn, slash + 1, &v) || v != tile) break;
                kl_snprintf(want2, sizeof want2, "(%s+%s-1)/%s", bound[0], slash + 1, slash + 1);
                ok = !strcmp(tb, want2);
                break;
            }
            if (!ok)
                return WHY("%s:%u: the tile count '%s' is not (%s + %lld) / %lld", src, kl_ast_line(tl), p->T->bound, bound[0],
                           (long long)tile - 1, (long long)tile);
            kl_snprintf(p->bound, sizeof p->bound, "%s", bound[0]);
        }
    } else return WHY("%s:%u: the tile loop steps by '%s', not by the tile (%lld) or by 1", src, kl_ast_line(tl), p->T->step,
                      (long long)tile);
    /* the shared arrays: declared once each, used only by the loads and the compute loop */
    for (int i = 0; i < 2; i++) {
        decl_find df = {.ctx = ctx, .name = p->ld[i].arr};
        rb_walk(kl_ast_function_body(fn), decl_find_visit, &df);
        if (ts_node_is_null(df.decl)) return WHY("%s: '%s' is not a __shared__ array of the kernel", src, p->ld[i].arr);
        if (i == 1 && ts_node_eq(df.decl, p->decl[0])) {
            if (df.ndecls != 2) return WHY("%s:%u: the declaration declares other arrays too", src, kl_ast_line(df.decl));
            continue;
        }
        if (df.ndecls != 1 && !(df.ndecls == 2 && i == 0))
            return WHY("%s:%u: the declaration declares other arrays too", src, kl_ast_line(df.decl));
        p->decl[p->ndecl++] = df.decl;
    }
    read_scan rs = {.ctx = ctx, .arr = {p->ld[0].arr, p->ld[1].arr}};
    rb_walk(rb_field(p->cl, "body"), read_visit, &rs);
    unsigned all = uses_of(ctx, kl_ast_function_body(fn), p->ld[0].arr) + uses_of(ctx, kl_ast_function_body(fn), p->ld[1].arr);
    if (rs.n > 32 || all != rs.n + 2 + 2 + (ts_node_is_null(p->ld[0].cond) || rb_is(p->ld[0].stmt, "expression_statement") ? 0 : 1) +
                                 (ts_node_is_null(p->ld[1].cond) || rb_is(p->ld[1].stmt, "expression_statement") ? 0 : 1))
        return WHY("%s: the tiles '%s' and '%s' are used other than by the loads and the loop over the tile", src,
                   p->ld[0].arr, p->ld[1].arr);
    if (uses_of(ctx, rb_field(p->cl, "body"), p->C->var) != 0) {
        /* every use of kk must be a tile subscript */
        unsigned in_reads = 0;
        for (unsigned r = 0; r < rs.n; r++) in_reads += uses_of(ctx, rs.reads[r], p->C->var);
        if (in_reads != uses_of(ctx, rb_field(p->cl, "body"), p->C->var))
            return WHY("%s:%u: '%s' is used outside the tile subscripts", src, kl_ast_line(p->cl), p->C->var);
    }
    if (uses_of(ctx, rb_field(p->cl, "body"), tv))
        return WHY("%s:%u: the loop over the tile uses '%s'", src, kl_ast_line(p->cl), tv);
    /* where the guard went: after the tile loop */
    TSNode parts_all[2][MAXC];
    unsigned npa[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        if (ts_node_is_null(p->ld[i].cond)) continue;
        TSNode parts[MAXC];
        unsigned np = 0;
        split_on(ctx, p->ld[i].cond, "&&", parts, &np, MAXC);
        for (unsigned c = 0; c < np && c < MAXC; c++)
            if (depends(ax, ctx, parts[c], tv) == 0) parts_all[i][npa[i]++] = parts[c];
    }
    TSNode nx = rb_next_stmt(tl);
    p->form = 'N';
    if (npa[0] + npa[1]) {
        if (!rb_is(nx, "if_statement") || !ts_node_is_null(rb_field(nx, "alternative")))
            return WHY("%s:%u: the loads are guarded but no store guard follows the tile loop", src, kl_ast_line(tl));
        p->form = early_return(nx) ? 'R' : 'I';
        p->after = nx;
        TSNode gparts[MAXC];
        unsigned ng = 0;
        split_on(ctx, if_cond(nx), p->form == 'R' ? "||" : "&&", gparts, &ng, MAXC);
        if (ng > MAXC) ng = MAXC;
        for (int i = 0; i < 2; i++)
            for (unsigned c = 0; c < npa[i]; c++) {
                char want[256];
                squeezed(ctx, strip(parts_all[i][c]), want, sizeof want);
                bool found = false;
                for (unsigned g = 0; g < ng && !found; g++) {
                    char have[256];
                    if (p->form == 'R') {
                        char *t = negate(ctx, gparts[g]);
                        squeeze_str(t ? t : "", have, sizeof have);
                        free(t);
                    } else squeezed(ctx, strip(gparts[g]), have, sizeof have);
                    found = !strcmp(want, have);
                }
                if (!found)
                    return WHY("%s:%u: the load condition '%s' is not part of the guard at line %u", src,
                               kl_ast_line(parts_all[i][c]), want, kl_ast_line(nx));
            }
    }
    if (!kl_rules_starts_line(ctx, ts_node_start_byte(tl)))
        return WHY("%s:%u: the tile loop does not start its line", src, kl_ast_line(tl));
    /* the declarations right before the tile loop that only it and later code use */
    for (TSNode s = rb_prev_stmt(tl); !ts_node_is_null(s) && p->form != 'N'; s = rb_prev_stmt(s)) {
        if (!rb_is(s, "declaration") || !hoistable(ctx, s) || !kl_rules_starts_line(ctx, ts_node_start_byte(s))) break;
        bool used = false, in_guard = false;
        for (uint32_t k = 0; k < ts_node_named_child_count(s); k++) {
            TSNode nm = rb_declarator_name(ts_node_named_child(s, k));
            if (ts_node_is_null(nm)) continue;
            char *t = rb_text(ctx, nm);
            if (!t) break;
            if (uses_of(ctx, tl, t)) used = true;
            if (uses_of(ctx, if_cond(nx), t)) in_guard = true;
            free(t);
        }
        if (!used || in_guard) break;
        if (p->npre >= 32) break;
        memmove(p->pre + 1, p->pre, p->npre * sizeof *p->pre);
        p->pre[0] = s;
        p->npre++;
    }
#undef WHY
    return true;
}

/* Every use of the k thread index in the load's index must be inside its k part: checked on the
 * naive text by the affine analysis of the original (dependence outside the replaced nodes). */
typedef struct outside_scan {
    const kl_rule_ctx *ctx;
    kl_affine_ctx *ax;
    const rep *reps;
    unsigned nr;
    const char *thr;
    bool bad;
} outside_scan;

static bool outside_visit(TSNode n, void *user)
{
    outside_scan *o = user;
    for (unsigned i = 0; i < o->nr; i++)
        if (ts_node_start_byte(n) >= o->reps[i].a && ts_node_end_byte(n) <= o->reps[i].b) return false;
    if (rb_is(n, "call_expression")) {
        /* a macro or helper: its arguments carry the dependence (the affine analysis expands it) */
        rb_walk(rb_field(n, "arguments"), outside_visit, o);
        return false;
    }
    if (rb_is(n, "identifier") || rb_is(n, "field_expression")) {
        if (depends(o->ax, o->ctx, n, o->thr) != 0) o->bad = true;
        return false;
    }
    return true;
}

/* The naive loop's text at indentation `ind` (the loop's own line not indented). */
static char *naive_loop(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const gp *p, const char *ind, kl_error *err)
{
    const char *src = kl_source_name(ctx->src);
    read_scan rs = {.ctx = ctx, .arr = {p->ld[0].arr, p->ld[1].arr}};
    TSNode cb = rb_field(p->cl, "body");
    rb_walk(cb, read_visit, &rs);
    rep reps[32];
    char *texts[32] = {0};
    unsigned nr = 0;
    char *result = NULL;
    for (unsigned r = 0; r < rs.n && r < 32; r++) {
        TSNode rd = rs.reads[r];
        TSNode in = rb_field(rd, "argument");
        int li = text_is(ctx, rb_field(in, "argument"), p->ld[0].arr) ? 0 : 1;
        const tload *l = &p->ld[li];
        TSNode sub[2] = {kl_ast_subscript_index(in), kl_ast_subscript_index(rd)};
        /* the k dimension reads kk, the other the load's own thread index */
        char s1[128], s2[128];
        squeezed(ctx, sub[l->kdim], s1, sizeof s1);
        int od = !l->kdim;
        if (strcmp(s1, p->C->var) || thread_index(ax, sub[od]) != l->thr[od]) {
            kl_rule_not_applicable(err, "%s:%u: the tile read '%.*s' is not at [thread][%s] as loaded", src, kl_ast_line(rd),
                                   (int)(ts_node_end_byte(rd) - ts_node_start_byte(rd)), ctx->text + ts_node_start_byte(rd),
                                   p->C->var);
            goto done;
        }
        (void)s2;
        /* the k coordinate c*t + threadIdx.<kdim>, from the load's index */
        char thr[16];
        kl_snprintf(thr, sizeof thr, "threadIdx.%c", l->thr[l->kdim]);
        /* what the load's index depends on besides t and that thread index must not involve it */
        kl_affine ea = {0};
        kl_affine_of(ax, l->gidx, &ea);
        if (!ea.ok) {
            kl_rule_not_applicable(err, "%s:%u: the load's index is not affine (%s)", src, kl_ast_line(l->stmt),
                                   ea.why ? ea.why : "");
            kl_affine_release(&ea);
            goto done;
        }
        /* want: the part of e made of t and the thread index, c*t + thread */
        kl_affine want = {0};
        want.ok = true;
        want.constant = kl_strdup("0");
        want.const_is_int = true;
        want.const_int = 0;
        want.terms = calloc(2, sizeof *want.terms);
        const char *ct = kl_affine_coef(&ea, p->T->var), *ch = kl_affine_coef(&ea, thr);
        bool okw = want.terms && ct && ch;
        char ratio[128] = "";
        if (okw) {
            /* the k coordinate is (ct/ch)*t + thread: ct must be ch times a constant */
            int64_t vt, vh;
            if (kl_affine_coef_int(&ea, p->T->var, &vt) && kl_affine_coef_int(&ea, thr, &vh) && vh && vt % vh == 0)
                kl_snprintf(ratio, sizeof ratio, "%lld", (long long)(vt / vh));
            else if (!strcmp(ct, ch)) kl_snprintf(ratio, sizeof ratio, "1");
            else {
                /* "16*N" over "N" */
                size_t lh = strlen(ch), lt = strlen(ct);
                if (lt > lh + 1 && !strcmp(ct + lt - lh, ch) && ct[lt - lh - 1] == '*')
                    kl_snprintf(ratio, sizeof ratio, "%.*s", (int)(lt - lh - 1), ct);
                else if (lt > lh + 1 && !strncmp(ct, ch, lh) && ct[lh] == '*')
                    kl_snprintf(ratio, sizeof ratio, "%s", ct + lh + 1);
            }
            okw = ratio[0] != '\0';
        }
        if (okw) {
            const char *vars[2] = {p->T->var, thr};
            const char *coefs[2] = {ratio, "1"};
            /* terms sorted by var name */
            int first = strcmp(vars[0], vars[1]) < 0 ? 0 : 1;
            for (int t = 0; t < 2; t++) {
                int s = t == 0 ? first : !first;
                want.terms[t].var = kl_strdup(vars[s]);
                want.terms[t].coef = kl_strdup(coefs[s]);
                char *end = NULL;
                long long v = strtoll(coefs[s], &end, 10);
                want.terms[t].coef_is_int = end && !*end;
                want.terms[t].coef_int = v;
            }
            want.nterms = 2;
        }
        kl_affine_release(&ea);
        char *owned = NULL;
        bool ok = okw && k_replace(ctx, ax, l->gidx, &want, p->T->var, thr, p->kname, reps, &nr, &owned);
        /* e must not depend on the thread index outside its k part */
        kl_affine_release(&want);
        char *etext = NULL;
        if (ok) {
            rep local[8];
            unsigned nl = 0;
            for (unsigned q = 0; q < nr; q++)
                if (reps[q].a >= ts_node_start_byte(l->gidx) && reps[q].b <= ts_node_end_byte(l->gidx) && nl < 8)
                    local[nl++] = reps[q];
            /* drop the index-local replacements from reps: they apply to the load's text */
            unsigned keep = 0;
            for (unsigned q = 0; q < nr; q++)
                if (!(reps[q].a >= ts_node_start_byte(l->gidx) && reps[q].b <= ts_node_end_byte(l->gidx))) reps[keep++] = reps[q];
            nr = keep;
            outside_scan os = {ctx, ax, local, nl, thr, false};
            rb_walk(l->gidx, outside_visit, &os);
            if (os.bad) ok = false;
            else etext = splice(ctx, ts_node_start_byte(l->gidx), ts_node_end_byte(l->gidx), local, nl);
        }
        free(owned);
        if (!ok || !etext) {
            free(etext);
            kl_rule_not_applicable(err, "%s:%u: cannot find the k coordinate (%s times '%s' plus %s) in the load's index",
                                   src, kl_ast_line(l->stmt), ratio[0] ? ratio : "?", p->T->var, thr);
            goto done;
        }
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&sb, "%s[%s]", l->garr, etext);
        free(etext);
        texts[r] = kl_strbuf_detach(&sb, NULL);
        if (!texts[r]) {
            kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            goto done;
        }
        reps[nr++] = (rep){ts_node_start_byte(rd), ts_node_end_byte(rd), texts[r]};
    }
    /* the check that e's dependence on the k thread index is only through the k part is done by
     * construction: the replaced node is the whole k coordinate, and the rest was checked free of it */
    {
        char *raw = splice(ctx, ts_node_start_byte(cb), ts_node_end_byte(cb), reps, nr);
        char cind[64];
        rb_indent_of(ctx, ts_node_start_byte(p->cl), cind, sizeof cind);
        char *body = raw ? reindent_node_text(cind, raw, (int)strlen(ind) - (int)strlen(cind)) : NULL;
        free(raw);
        if (!body) {
            kl_rule_not_applicable(err, "%s:%u: the loop over the tile is indented with tabs", src, kl_ast_line(p->cl));
            goto done;
        }
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&sb, "for (%s %s = %s; %s < %s; %s++) %s", p->ttype, p->kname, p->T->start, p->kname, p->bound,
                       p->kname, body);
        free(body);
        result = kl_strbuf_detach(&sb, NULL);
        if (!result) kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
done:
    for (unsigned i = 0; i < 32; i++) free(texts[i]);
    return result;
}

static kl_status remove_gemm(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const gp *p, kl_edits *out, kl_error *err)
{
    const char *src = kl_source_name(ctx->src);
    if (p->why[0]) return kl_rule_not_applicable(err, "%s", p->why);
    /* the loads' indices depend on the k thread index only through the k coordinate */
    for (int i = 0; i < 2; i++) {
        const tload *l = &p->ld[i];
        char thr[16];
        kl_snprintf(thr, sizeof thr, "threadIdx.%c", l->thr[l->kdim]);
        kpart kp = {0};
        (void)kp;
        /* find the k part again (as naive_loop does) and scan the rest */
        kl_affine ea = {0};
        kl_affine_of(ax, l->gidx, &ea);
        bool ok = ea.ok;
        kl_affine_release(&ea);
        if (!ok) return kl_rule_not_applicable(err, "%s:%u: the load's index is not affine", src, kl_ast_line(l->stmt));
    }
    char ind[64], gind[64], unit[8] = "    ";
    rb_indent_of(ctx, ts_node_start_byte(p->tl), ind, sizeof ind);
    kl_status st = KL_OK;
    char *loop = NULL, *pre = NULL, *after = NULL;
    /* the shared declarations (with a marker comment above) */
    for (unsigned i = 0; i < p->ndecl; i++) {
        uint32_t a, b;
        rb_stmt_range(ctx, p->decl[i], NAME, &a, &b);
        KL_TRY(kl_edits_add(out, a, b, ""));
    }
    if (p->form == 'I') {
        TSNode cons = rb_field(p->after, "consequence");
        bool compound = rb_is(cons, "compound_statement");
        TSNode first = compound ? ts_node_named_child(cons, 0) : cons;
        rb_indent_of(ctx, ts_node_start_byte(p->after), gind, sizeof gind);
        char iind[64];
        if (compound && !ts_node_is_null(first) && kl_rules_starts_line(ctx, ts_node_start_byte(first)))
            rb_indent_of(ctx, ts_node_start_byte(first), iind, sizeof iind);
        else kl_snprintf(iind, sizeof iind, "%s%s", gind, unit);
        loop = naive_loop(ctx, ax, p, iind, err);
        if (!loop) return err->status;
        if (p->npre) {
            uint32_t a = rb_line_start(ctx, ts_node_start_byte(p->pre[0]));
            uint32_t b = rb_line_end(ctx, ts_node_end_byte(p->pre[p->npre - 1]) - 1);
            pre = rb_reindent(ctx->text + a, b - a, (int)strlen(iind) - (int)strlen(ind));
            if (!pre) {
                st = kl_rule_not_applicable(err, "%s:%u: tabs in the indentation", src, kl_ast_line(p->pre[0]));
                goto cleanup;
            }
        }
        uint32_t a = rb_line_start(ctx, ts_node_start_byte(p->npre ? p->pre[0] : p->tl));
        uint32_t b = rb_line_end(ctx, ts_node_end_byte(p->tl) - 1);
        KL_TRY(kl_edits_add(out, a, b, ""));
        if (compound) {
            uint32_t at = rb_line_end(ctx, ts_node_start_byte(cons));
            if (at > ts_node_start_byte(first) && !ts_node_is_null(first)) {
                st = kl_rule_not_applicable(err, "%s:%u: the guard's block does not open on a line of its own", src,
                                            kl_ast_line(p->after));
                goto cleanup;
            }
            KL_TRY(kl_edits_addf(out, at, at, "%s%s%s\n", pre ? pre : "", iind, loop));
        } else {
            after = rb_text(ctx, cons);
            if (!after) goto oom;
            KL_TRY(kl_edits_addf(out, ts_node_start_byte(cons), ts_node_end_byte(cons), "{\n%s%s%s\n%s%s\n%s}",
                                 pre ? pre : "", iind, loop, iind, after, gind));
        }
    } else {
        loop = naive_loop(ctx, ax, p, ind, err);
        if (!loop) return err->status;
        if (p->form == 'R') {
            uint32_t a, b;
            rb_stmt_range(ctx, p->after, NULL, &a, &b);
            after = rb_text(ctx, p->after);
            if (!after) goto oom;
            KL_TRY(kl_edits_add(out, a, b, ""));
            uint32_t at = rb_line_start(ctx, ts_node_start_byte(p->npre ? p->pre[0] : p->tl));
            KL_TRY(kl_edits_addf(out, at, at, "%s%s\n", ind, after));
        }
        KL_TRY(kl_edits_add(out, ts_node_start_byte(p->tl), ts_node_end_byte(p->tl), loop));
    }
    goto cleanup;
oom:
    st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
cleanup:
    if (st == KL_ERR_NOMEM && err->status != KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    free(loop);
    free(pre);
    free(after);
    return st;
}

/* ---- present: a staged tile with halo, read through ----------------------------------------------- */

typedef struct hp {
    TSNode decl;            /* __shared__ T S[H][W]; */
    char arr[64], elem[64];
    TSNode load;            /* the statement (a loop) filling it */
    TSNode store;           /* S[sy][sx] = value; inside it */
    TSNode sync;            /* the barrier after it */
    TSNode sub[2];
    char sv[2][64];         /* the coordinate variables sy, sx */
    TSNode vdecls[8];       /* declarations inside the load the value needs (gy, gx) */
    unsigned nv;
    TSNode value;
    char why[480];
} hp;

typedef struct store_scan {
    const kl_rule_ctx *ctx;
    const char *arr;
    TSNode stores[4];
    unsigned nstores, reads;
} store_scan;

static bool store_visit(TSNode n, void *user)
{
    store_scan *s = user;
    if (rb_is(n, "assignment_expression")) {
        TSNode l = rb_field(n, "left");
        if (rb_is(l, "subscript_expression") && rb_is(rb_field(l, "argument"), "subscript_expression") &&
            text_is(s->ctx, rb_field(rb_field(l, "argument"), "argument"), s->arr)) {
            if (s->nstores < 4) s->stores[s->nstores] = n;
            s->nstores++;
            rb_walk(rb_field(n, "right"), store_visit, s);
            return false;
        }
    }
    if (rb_is(n, "identifier") && text_is(s->ctx, n, s->arr)) s->reads++;
    return true;
}

/* The declaration (in the load statement `in`) that defines `name`, with its value. */
static TSNode local_decl(const kl_rule_ctx *ctx, TSNode in, const char *name, TSNode *value)
{
    TSNode stack[128];
    unsigned sp = 0;
    stack[sp++] = in;
    while (sp) {
        TSNode n = stack[--sp];
        if (rb_is(n, "init_declarator") && text_is(ctx, rb_declarator_name(rb_field(n, "declarator")), name)) {
            *value = rb_field(n, "value");
            return ts_node_parent(n);
        }
        for (uint32_t c = 0; c < ts_node_named_child_count(n) && sp < 128; c++) stack[sp++] = ts_node_named_child(n, c);
    }
    return (TSNode){0};
}

/* Does the text of n assign (`=` that is not part of a comparison, `++`, `--`, `op=`)? */
static bool text_assigns(const kl_rule_ctx *ctx, TSNode n)
{
    uint32_t a = ts_node_start_byte(n), b = ts_node_end_byte(n);
    for (uint32_t i = a; i < b; i++) {
        char c = ctx->text[i], prev = i > a ? ctx->text[i - 1] : ' ', next = i + 1 < b ? ctx->text[i + 1] : ' ';
        if ((c == '+' && next == '+') || (c == '-' && next == '-')) return true;
        if (c != '=') continue;
        if (next == '=') {
            i++;
            continue;
        }
        if (prev == '<' || prev == '>' || prev == '!') {
            /* <= >= != ; but <<= >>= assign */
            if (i >= a + 2 && ctx->text[i - 2] == prev && prev != '!') return true;
            continue;
        }
        return true;
    }
    return false;
}

/* A read `*reinterpret_cast<const float4*>(&S[a][b])` (float2 too): the dereference node and the
 * width, or a null node. */
static TSNode vector_read(const kl_rule_ctx *ctx, TSNode rd, int *width)
{
    TSNode amp = ts_node_parent(rd);
    if (!rb_is(amp, "pointer_expression") || !text_is(ctx, rb_field(amp, "operator"), "&")) return (TSNode){0};
    TSNode args = ts_node_parent(amp);
    if (!rb_is(args, "argument_list") || ts_node_named_child_count(args) != 1) return (TSNode){0};
    TSNode call = ts_node_parent(args);
    if (!rb_is(call, "call_expression")) return (TSNode){0};
    char fn[128];
    squeezed(ctx, rb_field(call, "function"), fn, sizeof fn);
    if (!strcmp(fn, "reinterpret_cast<constfloat4*>") || !strcmp(fn, "reinterpret_cast<floatconst4*>")) *width = 4;
    else if (!strcmp(fn, "reinterpret_cast<constfloat2*>")) *width = 2;
    else return (TSNode){0};
    TSNode deref = ts_node_parent(call);
    if (!rb_is(deref, "pointer_expression") || !text_is(ctx, rb_field(deref, "operator"), "*")) return (TSNode){0};
    return deref;
}

static bool analyse_halo(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, TSNode decl, hp *h)
{
    memset(h, 0, sizeof *h);
    h->decl = decl;
    const char *src = kl_source_name(ctx->src);
    TSNode d = rb_field(decl, "declarator");
    if (!rb_is(d, "array_declarator") || !rb_is(rb_field(d, "declarator"), "array_declarator")) return false;
    if (ts_node_named_child_count(decl) > 3) return false;
    TSNode id = rb_declarator_name(d);
    uint32_t a = ts_node_start_byte(id), b = ts_node_end_byte(id);
    kl_snprintf(h->arr, sizeof h->arr, "%.*s", (int)(b - a), ctx->text + a);
    TSNode ty = rb_field(decl, "type");
    kl_snprintf(h->elem, sizeof h->elem, "%.*s", (int)(ts_node_end_byte(ty) - ts_node_start_byte(ty)),
                ctx->text + ts_node_start_byte(ty));
    /* one statement after the declaration stores into it, then a barrier, then only reads */
    store_scan all = {.ctx = ctx, .arr = h->arr};
    rb_walk(kl_ast_function_body(fn), store_visit, &all);
    if (all.nstores != 1) return false;
    TSNode store = all.stores[0];
    TSNode load = store;
    while (!ts_node_eq(ts_node_parent(load), ts_node_parent(decl))) {
        load = ts_node_parent(load);
        if (ts_node_is_null(load)) return false;
    }
#define WHY(...) (kl_snprintf(h->why, sizeof h->why, __VA_ARGS__), true)
    h->load = load;
    h->store = store;
    h->sync = rb_next_stmt(load);
    /* not this shape (the GEMM tiles are reloaded inside their loop): no site */
    if (!rb_is_syncthreads(ctx, h->sync) || kl_affine_loop_enclosing(ax, load) >= 0) return false;
    if (!rb_is(ts_node_parent(load), "compound_statement") || !ts_node_eq(ts_node_parent(load), kl_ast_function_body(fn)))
        return WHY("%s:%u: the load is not at the kernel's top level", src, kl_ast_line(load));
    TSNode l = rb_field(store, "left");
    h->sub[0] = kl_ast_subscript_index(rb_field(l, "argument"));
    h->sub[1] = kl_ast_subscript_index(l);
    for (int i = 0; i < 2; i++) {
        if (!rb_is(h->sub[i], "identifier"))
            return WHY("%s:%u: the tile is stored at a subscript that is not a variable", src, kl_ast_line(store));
        uint32_t sa = ts_node_start_byte(h->sub[i]), sb = ts_node_end_byte(h->sub[i]);
        kl_snprintf(h->sv[i], sizeof h->sv[i], "%.*s", (int)(sb - sa), ctx->text + sa);
    }
    h->value = rb_field(store, "right");
    if (!text_is(ctx, rb_field(store, "operator"), "="))
        return WHY("%s:%u: the tile is updated, not stored", src, kl_ast_line(store));
    /* the value: from sy, sx, locals of the load defined from them, and block-uniform values */
    TSNode work[16];
    unsigned nw = 0, done = 0;
    work[nw++] = h->value;
    while (done < nw) {
        TSNode e = work[done++];
        TSNode stack[256];
        unsigned sp = 0;
        stack[sp++] = e;
        while (sp) {
            TSNode n = stack[--sp];
            if (rb_is(n, "field_expression")) {
                TSNode arg = rb_field(n, "argument");
                if (text_is(ctx, arg, "threadIdx"))
                    return WHY("%s:%u: the tile's value depends on the thread", src, kl_ast_line(n));
                continue;
            }
            if (rb_is(n, "identifier")) {
                char nm[64];
                squeezed(ctx, n, nm, sizeof nm);
                if (!strcmp(nm, h->sv[0]) || !strcmp(nm, h->sv[1])) continue;
                TSNode v = {0};
                TSNode dl = local_decl(ctx, h->load, nm, &v);
                if (!ts_node_is_null(dl)) {
                    bool seen = false;
                    for (unsigned q = 0; q < h->nv; q++) seen |= ts_node_eq(h->vdecls[q], dl);
                    if (!seen) {
                        if (h->nv >= 8 || nw >= 16) return WHY("%s:%u: too many locals in the load", src, kl_ast_line(dl));
                        h->vdecls[h->nv++] = dl;
                        work[nw++] = dl;
                    }
                    continue;
                }
                /* a value of the kernel outside the load: must not depend on the thread */
                if (depends(ax, ctx, n, "threadIdx.x") == 1 || depends(ax, ctx, n, "threadIdx.y") == 1 ||
                    depends(ax, ctx, n, "threadIdx.z") == 1)
                    return WHY("%s:%u: the tile's value depends on '%s', which differs between threads", src, kl_ast_line(n), nm);
                continue;
            }
            if (rb_is(n, "call_expression")) {
                stack[sp++] = rb_field(n, "arguments");
                continue;
            }
            if (rb_is(n, "assignment_expression") || rb_is(n, "update_expression")) {
                /* the tree may read `a < b && c >= d` as a template and an assignment: judge the text */
                if (text_assigns(ctx, n))
                    return WHY("%s:%u: the tile's value has side effects ('%.*s')", src, kl_ast_line(n),
                               (int)(ts_node_end_byte(n) - ts_node_start_byte(n)), ctx->text + ts_node_start_byte(n));
            }
            for (uint32_t c = 0; c < ts_node_named_child_count(n) && sp < 256; c++) stack[sp++] = ts_node_named_child(n, c);
        }
    }
    /* the declarations of sy, sx (and the value's locals) must be in the load, each once */
    for (int i = 0; i < 2; i++) {
        TSNode v;
        TSNode dl = local_decl(ctx, h->load, h->sv[i], &v);
        if (ts_node_is_null(dl))
            return WHY("%s:%u: the tile coordinate '%s' is not declared in the load", src, kl_ast_line(store), h->sv[i]);
        /* a loop's own variable (`for (int sy = threadIdx.y; sy < SH; sy += BY)`) is updated only there */
        TSNode lp = ts_node_parent(dl);
        bool loop_var = rb_is(lp, "for_statement") && ts_node_eq(rb_field(lp, "initializer"), dl) &&
                        kl_affine_loop_index(ax, lp) >= 0 && kl_affine_loop(ax, (unsigned)kl_affine_loop_index(ax, lp))->var &&
                        !strcmp(kl_affine_loop(ax, (unsigned)kl_affine_loop_index(ax, lp))->var, h->sv[i]);
        if (!loop_var && kl_affine_assign_count(ax, h->sv[i]) > 1)
            return WHY("%s:%u: the tile coordinate '%s' is assigned more than once", src, kl_ast_line(store), h->sv[i]);
    }
    /* every other use of the tile, after the barrier, is a read S[a][b] */
    read_scan rs = {.ctx = ctx, .arr = {h->arr, h->arr}};
    for (TSNode s = rb_next_stmt(h->sync); !ts_node_is_null(s); s = rb_next_stmt(s)) rb_walk(s, read_visit, &rs);
    if (rs.n > 32) return WHY("%s: more than 32 reads of '%s'", src, h->arr);
    if (uses_of(ctx, kl_ast_function_body(fn), h->arr) != rs.n + 2)
        return WHY("%s: '%s' is used other than by its load and reads after the barrier", src, h->arr);
    for (unsigned r = 0; r < rs.n; r++) {
        TSNode p = ts_node_parent(rs.reads[r]);
        int width = 0;
        if (!strcmp(h->elem, "float") && !ts_node_is_null(vector_read(ctx, rs.reads[r], &width))) continue;
        if ((rb_is(p, "assignment_expression") && ts_node_eq(rb_field(p, "left"), rs.reads[r])) || rb_is(p, "update_expression") ||
            (rb_is(p, "pointer_expression") && text_is(ctx, rb_field(p, "operator"), "&")))
            return WHY("%s:%u: '%s' is written or its address taken after the barrier", src, kl_ast_line(p), h->arr);
    }
#undef WHY
    return true;
}

static kl_status remove_halo(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const hp *h, kl_edits *out, kl_error *err)
{
    (void)ax;
    const char *src = kl_source_name(ctx->src);
    if (h->why[0]) return kl_rule_not_applicable(err, "%s", h->why);
    char ind[64];
    rb_indent_of(ctx, ts_node_start_byte(h->load), ind, sizeof ind);
    kl_status st = KL_OK;
    kl_strbuf sb = KL_STRBUF_INIT;
    /* the value's locals, in document order */
    TSNode vd[8];
    unsigned nv = h->nv;
    memcpy(vd, h->vdecls, nv * sizeof *vd);
    for (unsigned i = 0; i < nv; i++)
        for (unsigned j = i + 1; j < nv; j++)
            if (ts_node_start_byte(vd[j]) < ts_node_start_byte(vd[i])) {
                TSNode t = vd[i];
                vd[i] = vd[j], vd[j] = t;
            }
    kl_strbuf_addf(&sb, "%s// " NAME " removed: '%s' reads global memory where the tile was loaded from it\n", ind, h->arr);
    kl_strbuf_addf(&sb, "%sauto %s = [&](int %s, int %s) -> %s {\n", ind, h->arr, h->sv[0], h->sv[1], h->elem);
    for (unsigned i = 0; i < nv; i++) {
        char *t = rb_text(ctx, vd[i]);
        if (!t) goto oom;
        kl_strbuf_addf(&sb, "%s    %s\n", ind, t);
        free(t);
    }
    {
        char *v = rb_text(ctx, h->value);
        if (!v) goto oom;
        kl_strbuf_addf(&sb, "%s    return %s;\n%s};\n", ind, v, ind);
        free(v);
    }
    if (sb.failed) goto oom;
    {
        uint32_t a, b, a2, b2, a3, b3;
        rb_stmt_range(ctx, h->decl, NAME, &a, &b);
        KL_TRY(kl_edits_add(out, a, b, ""));
        rb_stmt_range(ctx, h->load, NULL, &a2, &b2);
        /* a comment / pragma line right above the load goes with it */
        uint32_t ls = rb_line_start(ctx, a2);
        if (ls > 0) {
            uint32_t pl = rb_line_start(ctx, ls - 1);
            const char *t = ctx->text + pl;
            while (*t == ' ' || *t == '\t') t++;
            if (!strncmp(t, "#pragma", 7) && pl >= b) a2 = pl;
        }
        KL_TRY(kl_edits_add(out, a2, b2, kl_strbuf_str(&sb)));
        rb_stmt_range(ctx, h->sync, NULL, &a3, &b3);
        KL_TRY(kl_edits_add(out, a3, b3, ""));
    }
    {
        read_scan rs = {.ctx = ctx, .arr = {h->arr, h->arr}};
        for (TSNode s = rb_next_stmt(h->sync); !ts_node_is_null(s); s = rb_next_stmt(s)) rb_walk(s, read_visit, &rs);
        for (unsigned r = 0; r < rs.n && r < 32; r++) {
            TSNode rd = rs.reads[r];
            TSNode in = rb_field(rd, "argument");
            TSNode s0 = kl_ast_subscript_index(in), s1 = kl_ast_subscript_index(rd);
            int width = 0;
            TSNode deref = vector_read(ctx, rd, &width);
            if (!ts_node_is_null(deref)) {
                /* a float4 read of the row: its elements one by one */
                int l0 = (int)(ts_node_end_byte(s0) - ts_node_start_byte(s0)), l1 = (int)(ts_node_end_byte(s1) - ts_node_start_byte(s1));
                const char *t0 = ctx->text + ts_node_start_byte(s0), *t1 = ctx->text + ts_node_start_byte(s1);
                kl_strbuf vb = KL_STRBUF_INIT;
                kl_strbuf_addf(&vb, "make_float%d(", width);
                for (int e = 0; e < width; e++) {
                    if (e == 0) kl_strbuf_addf(&vb, "%s(%.*s, %.*s)", h->arr, l0, t0, l1, t1);
                    else kl_strbuf_addf(&vb, ", %s(%.*s, %.*s + %d)", h->arr, l0, t0, l1, t1, e);
                }
                kl_strbuf_addc(&vb, ')');
                char *vt = kl_strbuf_detach(&vb, NULL);
                if (!vt) goto oom;
                st = kl_edits_add(out, ts_node_start_byte(deref), ts_node_end_byte(deref), vt);
                free(vt);
                KL_TRY(st);
                continue;
            }
            KL_TRY(kl_edits_addf(out, ts_node_start_byte(rd), ts_node_end_byte(rd), "%s(%.*s, %.*s)", h->arr,
                                 (int)(ts_node_end_byte(s0) - ts_node_start_byte(s0)), ctx->text + ts_node_start_byte(s0),
                                 (int)(ts_node_end_byte(s1) - ts_node_start_byte(s1)), ctx->text + ts_node_start_byte(s1)));
        }
    }
    (void)fn;
    goto cleanup;
oom:
    st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
cleanup:
    kl_strbuf_release(&sb);
    if (st == KL_ERR_NOMEM && err->status != KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    (void)src;
    return st;
}

/* ---- apply: a stencil around each thread's pixel, read through a halo tile ------------------------ */

#define SMAXC 24

typedef struct sdim {
    TSNode loop;              /* the loop over this axis' offsets */
    const kl_ax_loop *L;
    char type[64];            /* the loop variable's declared type */
    char axis;                /* 'x' or 'y' */
    bool fixed;               /* the offset count is a compile-time constant … */
    int64_t ntrip;            /* … of this value */
    char trip[256];           /* the offset count as text ("k", "3", "r - -r + 1") */
    char ext[320];            /* the tile's extent along the axis, as text */
    char loadext[320];        /* how far the load runs along the axis */
    char svar[32];            /* the load's coordinate ("sy", "sx") */
    TSNode decls[16];         /* declarations of this loop's body the load needs, document order */
    unsigned ndecls;
} sdim;

typedef struct sa {
    TSNode fn, outer;         /* the outermost loop of the stencil */
    TSNode read, ridx;        /* G[idx] and idx */
    char arr[64], elem[64];
    sdim d[2];                /* d[0]: the outer loop */
    unsigned nd;
    TSNode conj[SMAXC];       /* the read's guard: conditions and (neg) negated ones */
    bool neg[SMAXC];
    unsigned nconj;
    char form;                /* 'I' inside if (cond) {...}, 'R' after if (cond) return;, 'N' none */
    TSNode guard;
    TSNode pre[32];
    unsigned npre;
    int64_t dim[3];
    char btext[3][64];
    char why[480];
} sa;

static bool cmp_op(const char *op)
{
    return !strcmp(op, "<") || !strcmp(op, "<=") || !strcmp(op, ">") || !strcmp(op, ">=") || !strcmp(op, "==") ||
           !strcmp(op, "!=") || !strcmp(op, "&&") || !strcmp(op, "||");
}

/* A token that needs no parentheses in a sum: an identifier or a number, maybe negated. */
static bool simple_token(const char *s)
{
    if (*s == '-') s++;
    if (!*s) return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_') return false;
    return true;
}

static bool is_continue_if(TSNode st)
{
    if (!rb_is(st, "if_statement") || !ts_node_is_null(rb_field(st, "alternative"))) return false;
    TSNode c = rb_field(st, "consequence");
    if (rb_is(c, "compound_statement") && ts_node_named_child_count(c) == 1) c = ts_node_named_child(c, 0);
    return rb_is(c, "continue_statement");
}

/* The conditions under which control reaches the read inside the loop nest: the conjuncts of the
 * enclosing ifs (and ternaries), and the negated disjuncts of `if (c) continue;` before it. */
static bool stencil_path(const kl_rule_ctx *ctx, sa *s)
{
    const char *src = kl_source_name(ctx->src);
#define SWHY(...) (kl_snprintf(s->why, sizeof s->why, __VA_ARGS__), false)
    for (TSNode c = s->read; !ts_node_eq(c, s->outer);) {
        TSNode p = ts_node_parent(c);
        if (ts_node_is_null(p)) return SWHY("%s: the read is not inside the loop", src);
        TSNode parts[SMAXC];
        unsigned np = 0;
        bool negated = false;
        if (rb_is(p, "if_statement") || rb_is(p, "conditional_expression")) {
            TSNode cons = rb_field(p, "consequence");
            if (!ts_node_eq(c, cons))
                return SWHY("%s:%u: the read sits in the condition or the else branch of a conditional", src, kl_ast_line(p));
            split_on(ctx, rb_is(p, "if_statement") ? if_cond(p) : rb_field(p, "condition"), "&&", parts, &np, SMAXC);
        } else if (rb_is(p, "else_clause"))
            return SWHY("%s:%u: the read sits in an else branch", src, kl_ast_line(p));
        else if (rb_is(p, "compound_statement")) {
            for (TSNode q = rb_prev_stmt(c); !ts_node_is_null(q); q = rb_prev_stmt(q)) {
                if (!is_continue_if(q)) continue;
                TSNode ps[SMAXC];
                unsigned nq = 0;
                split_on(ctx, if_cond(q), "||", ps, &nq, SMAXC);
                if (nq > SMAXC || s->nconj + nq > SMAXC) return SWHY("%s:%u: too many conditions", src, kl_ast_line(q));
                for (unsigned i = 0; i < nq; i++) {
                    s->conj[s->nconj] = ps[i];
                    s->neg[s->nconj++] = true;
                }
            }
        }
        (void)negated;
        if (np > SMAXC || s->nconj + np > SMAXC) return SWHY("%s:%u: too many conditions", src, kl_ast_line(p));
        for (unsigned i = 0; i < np; i++) {
            s->conj[s->nconj] = parts[i];
            s->neg[s->nconj++] = false;
        }
        c = p;
    }
    /* document order */
    for (unsigned i = 0; i < s->nconj; i++)
        for (unsigned j = i + 1; j < s->nconj; j++)
            if (ts_node_start_byte(s->conj[j]) < ts_node_start_byte(s->conj[i])) {
                TSNode t = s->conj[i];
                s->conj[i] = s->conj[j], s->conj[j] = t;
                bool b = s->neg[i];
                s->neg[i] = s->neg[j], s->neg[j] = b;
            }
    return true;
}

/* Is every leaf of e (the operands of comparisons, logical operators and `!`) a function of the
 * tile coordinates only: affine, each stencil axis' thread index moving it exactly as that axis'
 * loop offset does, no other thread index or loop? *mask gets the axes (dims) it depends on. */
static bool tile_expressible(const kl_rule_ctx *ctx, kl_affine_ctx *ax, sa *s, TSNode e, unsigned *mask)
{
    const char *src = kl_source_name(ctx->src);
    e = strip(e);
    if (ts_node_is_null(e) || ts_node_has_error(e)) return SWHY("%s: the read's guard or index does not parse", src);
    char b[8];
    binop(ctx, e, b, sizeof b);
    if (b[0] && cmp_op(b))
        return tile_expressible(ctx, ax, s, rb_field(e, "left"), mask) &&
               tile_expressible(ctx, ax, s, rb_field(e, "right"), mask);
    if (rb_is(e, "unary_expression") && text_is(ctx, rb_field(e, "operator"), "!"))
        return tile_expressible(ctx, ax, s, rb_field(e, "argument"), mask);
    kl_affine a = {0};
    if (kl_affine_of(ax, e, &a) != KL_OK) return SWHY("out of memory");
    bool ok = a.ok;
    if (!ok)
        kl_snprintf(s->why, sizeof s->why, "%s:%u: '%.*s' is not affine in the thread indices and loop offsets (%s)", src,
                    kl_ast_line(e), (int)(ts_node_end_byte(e) - ts_node_start_byte(e)), ctx->text + ts_node_start_byte(e),
                    a.why ? a.why : "unknown");
    static const char axes[] = "xyz";
    for (int k = 0; k < 3 && ok; k++) {
        char thr[16];
        kl_snprintf(thr, sizeof thr, "threadIdx.%c", axes[k]);
        const char *ct = kl_affine_coef(&a, thr), *cv = NULL;
        bool has_dim = false;
        for (unsigned d = 0; d < s->nd; d++)
            if (s->d[d].axis == axes[k]) {
                has_dim = true;
                cv = kl_affine_coef(&a, s->d[d].L->var);
                if (cv) *mask |= 1u << d;
            }
        if ((!ct && !cv) || (ct && cv && !strcmp(ct, cv))) continue;
        ok = false;
        if (has_dim)
            kl_snprintf(s->why, sizeof s->why, "%s:%u: '%.*s' moves with %s by %s but with its loop offset by %s: its "
                        "value is not a function of the tile position", src, kl_ast_line(e),
                        (int)(ts_node_end_byte(e) - ts_node_start_byte(e)), ctx->text + ts_node_start_byte(e), thr,
                        ct ? ct : "0", cv ? cv : "0");
        else
            kl_snprintf(s->why, sizeof s->why, "%s:%u: '%.*s' depends on %s, along which the stencil has no offset", src,
                        kl_ast_line(e), (int)(ts_node_end_byte(e) - ts_node_start_byte(e)), ctx->text + ts_node_start_byte(e),
                        thr);
    }
    for (unsigned t = 0; t < a.nterms && ok; t++) {
        const char *v = a.terms[t].var;
        bool known = !strncmp(v, "threadIdx.", 10) || !strncmp(v, "blockIdx.", 9);
        for (unsigned d = 0; d < s->nd; d++) known |= !strcmp(v, s->d[d].L->var);
        if (!known) {
            ok = false;
            kl_snprintf(s->why, sizeof s->why, "%s:%u: '%.*s' depends on the loop variable '%s', which is not a stencil "
                        "offset", src, kl_ast_line(e), (int)(ts_node_end_byte(e) - ts_node_start_byte(e)),
                        ctx->text + ts_node_start_byte(e), v);
        }
    }
    kl_affine_release(&a);
    return ok;
}

typedef struct ident_scan {
    const kl_rule_ctx *ctx;
    char (*names)[64];
    unsigned n, max;
} ident_scan;

static bool ident_visit(TSNode n, void *user)
{
    ident_scan *s = user;
    if (rb_is(n, "identifier")) {
        char nm[64];
        squeezed(s->ctx, n, nm, sizeof nm);
        for (unsigned i = 0; i < s->n; i++)
            if (!strcmp(s->names[i], nm)) return false;
        if (s->n < s->max) kl_snprintf(s->names[s->n++], 64, "%s", nm);
        return false;
    }
    if (rb_is(n, "field_expression")) {
        rb_walk(rb_field(n, "argument"), ident_visit, user);
        return false;
    }
    return true;
}

/* Does declaration d declare `name`? */
static bool declares(const kl_rule_ctx *ctx, TSNode d, const char *name)
{
    if (!rb_is(d, "declaration")) return false;
    for (uint32_t k = 0; k < ts_node_named_child_count(d); k++) {
        TSNode ch = ts_node_named_child(d, k);
        if (!rb_is(ch, "init_declarator") && !rb_is(ch, "identifier") && !rb_is(ch, "array_declarator") &&
            !rb_is(ch, "pointer_declarator"))
            continue;
        if (text_is(ctx, rb_declarator_name(ch), name) || (rb_is(ch, "identifier") && text_is(ctx, ch, name))) return true;
    }
    return false;
}

typedef struct decl_scan {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode found;
} decl_scan;

static bool decl_scan_visit(TSNode n, void *user)
{
    decl_scan *d = user;
    if (!ts_node_is_null(d->found)) return false;
    if (rb_is(n, "declaration") && declares(d->ctx, n, d->name)) {
        d->found = n;
        return false;
    }
    return true;
}

/* The declarations in the loop bodies (before the loop or statement leading to the read) that the
 * guard and the index need, transitively; each must be free of memory reads and assigned once. */
static bool stencil_decls(const kl_rule_ctx *ctx, kl_affine_ctx *ax, sa *s)
{
    const char *src = kl_source_name(ctx->src);
    char names[96][64];
    ident_scan is = {.ctx = ctx, .names = names, .max = 96};
    rb_walk(s->ridx, ident_visit, &is);
    for (unsigned i = 0; i < s->nconj; i++) rb_walk(s->conj[i], ident_visit, &is);
    for (unsigned w = 0; w < is.n; w++) {
        const char *nm = names[w];
        bool loopvar = false;
        for (unsigned d = 0; d < s->nd; d++) loopvar |= !strcmp(nm, s->d[d].L->var);
        if (loopvar) continue;
        bool found = false;
        for (unsigned d = 0; d < s->nd && !found; d++) {
            TSNode body = rb_field(s->d[d].loop, "body");
            if (!rb_is(body, "compound_statement")) continue;
            /* the child of the body on the way to the read */
            TSNode path = s->read;
            while (!ts_node_is_null(path) && !ts_node_eq(ts_node_parent(path), body)) path = ts_node_parent(path);
            for (uint32_t k = 0; k < ts_node_named_child_count(body) && !found; k++) {
                TSNode st = ts_node_named_child(body, k);
                if (ts_node_eq(st, path)) break;
                if (!declares(ctx, st, nm)) continue;
                found = true;
                if (!hoistable(ctx, st))
                    return SWHY("%s:%u: the declaration of '%s' reads memory or calls a function: the tile load cannot "
                                "repeat it", src, kl_ast_line(st), nm);
                if (kl_affine_assign_count(ax, nm) > 1)
                    return SWHY("%s:%u: '%s' is assigned more than once", src, kl_ast_line(st), nm);
                bool seen = false;
                for (unsigned q = 0; q < s->d[d].ndecls; q++) seen |= ts_node_eq(s->d[d].decls[q], st);
                if (!seen) {
                    if (s->d[d].ndecls >= 16) return SWHY("%s:%u: too many declarations in the loop", src, kl_ast_line(st));
                    s->d[d].decls[s->d[d].ndecls++] = st;
                    rb_walk(st, ident_visit, &is);
                }
            }
        }
        if (found) continue;
        decl_scan ds = {.ctx = ctx, .name = nm};
        rb_walk(s->outer, decl_scan_visit, &ds);
        if (!ts_node_is_null(ds.found))
            return SWHY("%s:%u: '%s' is declared inside the loops where a tile load cannot repeat it", src,
                        kl_ast_line(ds.found), nm);
    }
    if (is.n >= is.max) return SWHY("%s:%u: too many names in the read's guard", src, kl_ast_line(s->read));
    for (unsigned d = 0; d < s->nd; d++)
        for (unsigned i = 0; i < s->d[d].ndecls; i++)
            for (unsigned j = i + 1; j < s->d[d].ndecls; j++)
                if (ts_node_start_byte(s->d[d].decls[j]) < ts_node_start_byte(s->d[d].decls[i])) {
                    TSNode t = s->d[d].decls[i];
                    s->d[d].decls[i] = s->d[d].decls[j], s->d[d].decls[j] = t;
                }
    return true;
}

/* The offset count of a loop as text: B for `v = 0; v < B`, else B - S (+ 1 for `<=`). */
static void trip_text(const kl_ax_loop *L, char *buf, size_t size)
{
    char b[256], st[256];
    squeeze_str(L->bound, b, sizeof b);
    squeeze_str(L->start, st, sizeof st);
    bool le = !strcmp(L->cmp, "<=");
    const char *bp = simple_token(b) ? "" : "(", *bq = simple_token(b) ? "" : ")";
    if (!strcmp(st, "0")) kl_snprintf(buf, size, "%s%s%s%s", le ? bp : "", L->bound, le ? bq : "", le ? " + 1" : "");
    else if (st[0] == '-' && simple_token(st + 1))
        kl_snprintf(buf, size, "%s%s%s + %s%s", bp, L->bound, bq, st + 1, le ? " + 1" : "");
    else
        kl_snprintf(buf, size, "%s%s%s - %s%s%s%s", bp, L->bound, bq, simple_token(st) ? "" : "(", L->start,
                    simple_token(st) ? "" : ")", le ? " + 1" : "");
}

/* A candidate stencil: a top-level loop holding a read whose index moves with a loop offset inside
 * it exactly as with a thread index. */
static bool stencil_candidate(const kl_rule_ctx *ctx, kl_affine_ctx *ax, unsigned li)
{
    (void)ctx;
    const kl_ax_loop *L = kl_affine_loop(ax, li);
    if (L->kind != KL_LOOP_FOR || !L->var || L->parent >= 0) return false;
    for (unsigned i = 0; i < kl_affine_access_count(ax); i++) {
        const kl_ax_access *a = kl_affine_access(ax, i);
        if (a->is_shared || a->write || a->param < 0 || !a->flat.ok || !node_in(a->node, L->node)) continue;
        for (unsigned k = 0; k < kl_affine_loop_count(ax); k++) {
            const kl_ax_loop *M = kl_affine_loop(ax, k);
            if (!M->var || !node_in(M->node, L->node)) continue;
            const char *cv = kl_affine_coef(&a->flat, M->var);
            const char *cx = kl_affine_coef(&a->flat, "threadIdx.x"), *cy = kl_affine_coef(&a->flat, "threadIdx.y");
            if (cv && ((cx && !strcmp(cv, cx)) || (cy && !strcmp(cv, cy)))) return true;
        }
    }
    return false;
}

static bool analyse_stencil(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *kname, TSNode outer, sa *s)
{
    memset(s, 0, sizeof *s);
    s->fn = fn;
    s->outer = outer;
    const char *src = kl_source_name(ctx->src);
    unsigned ln = kl_ast_line(outer);
    if (ts_node_has_error(outer)) return SWHY("%s:%u: the loop does not parse", src, ln);
    /* the read: one subscript of a pointer parameter moving with a loop offset as with a thread index */
    const kl_ax_access *rd = NULL;
    for (unsigned i = 0; i < kl_affine_access_count(ax); i++) {
        const kl_ax_access *a = kl_affine_access(ax, i);
        if (a->is_shared || a->write || a->param < 0 || !a->flat.ok || !node_in(a->node, outer)) continue;
        bool moves = false;
        for (unsigned k = 0; k < kl_affine_loop_count(ax) && !moves; k++) {
            const kl_ax_loop *M = kl_affine_loop(ax, k);
            if (!M->var || !node_in(M->node, outer)) continue;
            const char *cv = kl_affine_coef(&a->flat, M->var);
            const char *cx = kl_affine_coef(&a->flat, "threadIdx.x"), *cy = kl_affine_coef(&a->flat, "threadIdx.y");
            moves = cv && ((cx && !strcmp(cv, cx)) || (cy && !strcmp(cv, cy)));
        }
        if (!moves) continue;
        if (rd)
            return SWHY("%s:%u: two reads ('%s' at lines %u and %u) move with the thread and the loop offsets; one "
                        "stencil operand is tiled", src, ln, a->array, kl_ast_line(rd->node), kl_ast_line(a->node));
        rd = a;
    }
    if (!rd) return SWHY("%s:%u: no read moves with a loop offset as with a thread index", src, ln);
    s->read = rd->node;
    kl_snprintf(s->arr, sizeof s->arr, "%s", rd->array);
    if (rd->ndims != 1 || !rb_is(s->read, "subscript_expression"))
        return SWHY("%s:%u: the read of '%s' is not a 1-D subscript", src, kl_ast_line(s->read), s->arr);
    s->ridx = kl_ast_subscript_index(s->read);
    for (unsigned i = 0; i < kl_affine_access_count(ax); i++) {
        const kl_ax_access *a = kl_affine_access(ax, i);
        if (a->write && !strcmp(a->array, s->arr))
            return SWHY("%s:%u: '%s' is written in the kernel: a tile of it would go stale", src, kl_ast_line(a->node), s->arr);
        if (a != rd && !strcmp(a->array, s->arr) && node_in(a->node, outer))
            return SWHY("%s:%u: '%s' is read twice in the loop; one read is tiled", src, kl_ast_line(a->node), s->arr);
    }
    if (!elem_of(ctx, ax, fn, s->arr, s->elem, sizeof s->elem))
        return SWHY("%s:%u: the element type of '%s' is unknown", src, kl_ast_line(s->read), s->arr);
    /* the loops from the read out to the outer one */
    TSNode loops[4];
    unsigned nl = 0;
    for (TSNode n = ts_node_parent(s->read); !ts_node_is_null(n); n = ts_node_parent(n)) {
        if (rb_is(n, "while_statement") || rb_is(n, "do_statement"))
            return SWHY("%s:%u: the read sits in a while loop", src, kl_ast_line(n));
        if (rb_is(n, "for_statement")) {
            if (nl >= 3) return SWHY("%s:%u: more than two loops around the read", src, kl_ast_line(n));
            loops[nl++] = n;
        }
        if (ts_node_eq(n, outer)) break;
    }
    if (nl > 2) return SWHY("%s:%u: more than two loops around the read; a 1-D or 2-D stencil is tiled", src, ln);
    s->nd = nl;
    for (unsigned d = 0; d < nl; d++) {
        sdim *D = &s->d[d];
        D->loop = loops[nl - 1 - d];
        int li = kl_affine_loop_index(ax, D->loop);
        if (li < 0) return SWHY("%s:%u: the loop is not understood", src, kl_ast_line(D->loop));
        D->L = kl_affine_loop(ax, (unsigned)li);
        const kl_ax_loop *L = D->L;
        if (!L->var || !L->start || !L->bound || !L->cmp || (strcmp(L->cmp, "<") && strcmp(L->cmp, "<=")) ||
            !L->step_is_int || L->step_int != 1)
            return SWHY("%s:%u: the loop is not `for (T v = S; v < B; v++)` (or `v <= B`)", src, kl_ast_line(D->loop));
        if (strlen(L->bound) > 160 || strlen(L->start) > 60 || strlen(L->var) > 48)
            return SWHY("%s:%u: the loop's bounds are too long to rewrite", src, kl_ast_line(D->loop));
        TSNode init = rb_field(D->loop, "initializer");
        if (!rb_is(init, "declaration")) return SWHY("%s:%u: the loop does not declare its variable", src, kl_ast_line(D->loop));
        TSNode ty = rb_field(init, "type");
        kl_snprintf(D->type, sizeof D->type, "%.*s", (int)(ts_node_end_byte(ty) - ts_node_start_byte(ty)),
                    ctx->text + ts_node_start_byte(ty));
        const char *cv = kl_affine_coef(&rd->flat, L->var);
        const char *cx = kl_affine_coef(&rd->flat, "threadIdx.x"), *cy = kl_affine_coef(&rd->flat, "threadIdx.y");
        if (cv && cx && !strcmp(cv, cx)) D->axis = 'x';
        else if (cv && cy && !strcmp(cv, cy)) D->axis = 'y';
        else
            return SWHY("%s:%u: the offset '%s' moves the read of '%s' by %s, unlike threadIdx.x (%s) and threadIdx.y (%s)",
                        src, kl_ast_line(D->loop), L->var, s->arr, cv ? cv : "0", cx ? cx : "0", cy ? cy : "0");
        D->fixed = L->trip_known && L->trip >= 1;
        D->ntrip = L->trip;
        trip_text(L, D->trip, sizeof D->trip);
    }
    if (nl == 2 && s->d[0].axis == s->d[1].axis)
        return SWHY("%s:%u: both loops move the read along threadIdx.%c", src, ln, s->d[0].axis);
    if (nl == 1 && s->d[0].axis != 'x') return SWHY("%s:%u: a 1-D stencil along threadIdx.y is not tiled", src, ln);
    /* the guard of the read, and everything the load repeats, must be a function of the tile position */
    if (!stencil_path(ctx, s)) return false;
    unsigned mask = 0;
    if (!tile_expressible(ctx, ax, s, s->ridx, &mask)) return false;
    unsigned nb[2] = {0, 0};
    for (unsigned i = 0; i < s->nconj; i++) {
        unsigned m = 0;
        if (!tile_expressible(ctx, ax, s, s->conj[i], &m)) return false;
        for (unsigned d = 0; d < s->nd; d++)
            if (m & (1u << d)) nb[d]++;
    }
    for (unsigned d = 0; d < s->nd; d++)
        if (nb[d] < 2)
            return SWHY("%s:%u: the read of '%s' is not guarded on both sides along %s ('%s'): a halo tile would load "
                        "outside the image", src, kl_ast_line(s->read), s->arr, s->d[d].axis == 'x' ? "x" : "y", s->d[d].L->var);
    if (!stencil_decls(ctx, ax, s)) return false;
    /* where the loop sits: the barrier must be reached by every thread */
    placement pl;
    if (!loop_placement(ctx, src, fn, outer, &pl, s->why, sizeof s->why)) return false;
    s->form = pl.form, s->guard = pl.guard, s->npre = pl.npre;
    memcpy(s->pre, pl.pre, sizeof pl.pre);
    char bwhy[300];
    if (!launch_block(ctx, kname, s->dim, s->btext, bwhy, sizeof bwhy)) return SWHY("%s: %s", src, bwhy);
    if (s->dim[2] != 1 || (nl == 1 && s->dim[1] != 1))
        return SWHY("%s: kernel '%s' is launched with a %lldx%lldx%lld block; a %s stencil tile needs a %s block", src,
                    kname, (long long)s->dim[0], (long long)s->dim[1], (long long)s->dim[2], nl == 1 ? "1-D" : "2-D",
                    nl == 1 ? "1-D" : "2-D");
    return true;
}

/* The text of a guard conjunct: negated, or parenthesized where `&&` would bind it differently. */
static char *conj_text(const kl_rule_ctx *ctx, TSNode c, bool neg)
{
    if (neg) return negate(ctx, c);
    TSNode s = strip(c);
    char b[8];
    binop(ctx, s, b, sizeof b);
    bool wrap = !rb_is(c, "parenthesized_expression") &&
                (!strcmp(b, "||") || rb_is(s, "conditional_expression") || rb_is(s, "assignment_expression") ||
                 rb_is(s, "comma_expression"));
    char *t = rb_text(ctx, c);
    if (!t || !wrap) return t;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "(%s)", t);
    free(t);
    return kl_strbuf_detach(&sb, NULL);
}

/* The compute-side read of the tile for axis dim d: `threadIdx.y + i` (or `threadIdx.y + (i - S)`). */
static void tile_coord(const sdim *D, char *buf, size_t size)
{
    char st[256];
    squeeze_str(D->L->start, st, sizeof st);
    if (!strcmp(st, "0")) kl_snprintf(buf, size, "threadIdx.%c + %s", D->axis, D->L->var);
    else if (st[0] == '-' && simple_token(st + 1))
        kl_snprintf(buf, size, "threadIdx.%c + (%s + %s)", D->axis, D->L->var, st + 1);
    else if (simple_token(st)) kl_snprintf(buf, size, "threadIdx.%c + (%s - %s)", D->axis, D->L->var, D->L->start);
    else kl_snprintf(buf, size, "threadIdx.%c + (%s - (%s))", D->axis, D->L->var, D->L->start);
}

/* What the halo load stores: the read's guard ? the read : 0 (a new string, NULL when out of memory). */
static char *stencil_value(const kl_rule_ctx *ctx, const sa *s)
{
    char zero[96];
    zero_of(s->elem, zero, sizeof zero);
    kl_strbuf vb = KL_STRBUF_INIT;
    for (unsigned i = 0; i < s->nconj; i++) {
        char *t = conj_text(ctx, s->conj[i], s->neg[i]);
        if (!t) {
            kl_strbuf_release(&vb);
            return NULL;
        }
        kl_strbuf_addf(&vb, "%s%s", i ? " && " : "", t);
        free(t);
    }
    char *rt = rb_text(ctx, s->read);
    if (!rt) {
        kl_strbuf_release(&vb);
        return NULL;
    }
    kl_strbuf_addf(&vb, " ? %s : %s", rt, zero);
    free(rt);
    return kl_strbuf_detach(&vb, NULL);
}

static kl_status apply_stencil(const kl_rule_ctx *ctx, sa *s, int64_t maxr, kl_edits *out, kl_error *err)
{
    const char *src = kl_source_name(ctx->src);
    unsigned ln = kl_ast_line(s->outer);
    if (maxr < 1 || maxr > 32)
        return kl_rule_not_applicable(err, "%s:%u: max_radius %lld is outside 1..32", src, ln, (long long)maxr);
    char tname[96], base[80];
    kl_snprintf(base, sizeof base, "%s_s", s->arr);
    fresh_name(ctx, s->fn, base, tname, sizeof tname);
    /* per axis: the tile's extent, the load's extent, the coordinate names */
    bool runtime = false;
    int64_t elems = 1;
    kl_strbuf cond = KL_STRBUF_INIT;
    for (unsigned d = 0; d < s->nd; d++) {
        sdim *D = &s->d[d];
        const char *bt = s->btext[D->axis == 'x' ? 0 : 1];
        int64_t bv = s->dim[D->axis == 'x' ? 0 : 1];
        kl_snprintf(base, sizeof base, "s%c", D->axis);
        fresh_name(ctx, s->fn, base, D->svar, sizeof D->svar);
        if (D->fixed) {
            if (D->ntrip > 1) kl_snprintf(D->ext, sizeof D->ext, "%s + %lld", bt, (long long)(D->ntrip - 1));
            else kl_snprintf(D->ext, sizeof D->ext, "%s", bt);
            kl_snprintf(D->loadext, sizeof D->loadext, "%s", D->ext);
            elems *= bv + D->ntrip - 1;
        } else {
            runtime = true;
            kl_snprintf(D->ext, sizeof D->ext, "%s + 2 * %lld", bt, (long long)maxr);
            kl_snprintf(D->loadext, sizeof D->loadext, "%s + %s - 1", bt, D->trip);
            elems *= bv + 2 * maxr;
            char t1[256], t0[256];
            squeeze_str(D->trip, t1, sizeof t1);
            squeeze_str(d ? s->d[0].trip : "", t0, sizeof t0);
            if (d == 1 && !s->d[0].fixed && !strcmp(t0, t1)) continue;
            kl_strbuf_addf(&cond, "%s%s <= 2 * %lld + 1", cond.len ? " && " : "", D->trip, (long long)maxr);
        }
    }
    unsigned esize = rb_type_size(s->elem);
    if (!esize) esize = 8;
    if (elems * esize > 48 * 1024) {
        kl_strbuf_release(&cond);
        return kl_rule_not_applicable(err, "%s:%u: the tile with its halo takes %lld bytes of shared memory, more than "
                                      "48 KiB", src, ln, (long long)(elems * esize));
    }
    char *ctext = kl_strbuf_detach(&cond, NULL);
    if (!ctext) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    char ind[64], lind[64], unit[64];
    TSNode anchor = s->form == 'N' ? s->outer : s->guard;
    rb_indent_of(ctx, ts_node_start_byte(anchor), ind, sizeof ind);
    rb_indent_of(ctx, ts_node_start_byte(s->outer), lind, sizeof lind);
    if (s->form == 'I' && strlen(lind) > strlen(ind)) kl_snprintf(unit, sizeof unit, "%s", lind + strlen(ind));
    else if (ind[0] && !strchr(ind, '\t')) kl_snprintf(unit, sizeof unit, "%s", ind);
    else kl_snprintf(unit, sizeof unit, "    ");
    kl_status st = KL_OK;
    char *pre = NULL, *load = NULL, *guard_text = NULL, *compute = NULL, *copy = NULL, *orig = NULL, *value = NULL;
    kl_strbuf sb = KL_STRBUF_INIT;
    /* the stored value: the naive's guard ? the read : 0 */
    value = stencil_value(ctx, s);
    if (!value) goto oom;
    /* the cooperative load: the loops over the tile, each repeating the offset and the locals it needs */
    {
        char bind[192];
        kl_snprintf(bind, sizeof bind, "%s%s", ind, runtime ? unit : "");
        if (runtime) kl_strbuf_addf(&sb, "if (%s) {\n%s", ctext, bind);
        for (unsigned d = 0; d < s->nd; d++) {
            const sdim *D = &s->d[d];
            const char *bt = s->btext[D->axis == 'x' ? 0 : 1];
            char li[256] = "";
            for (unsigned k = 0; k <= d; k++) kl_snprintf(li + strlen(li), sizeof li - strlen(li), "%s", unit);
            kl_strbuf_addf(&sb, "for (int %s = threadIdx.%c; %s < %s; %s += %s) {\n", D->svar, D->axis, D->svar, D->loadext,
                           D->svar, bt);
            char st0[256];
            squeeze_str(D->L->start, st0, sizeof st0);
            if (!strcmp(st0, "0"))
                kl_strbuf_addf(&sb, "%s%s%s %s = %s - (int)threadIdx.%c;\n", bind, li, D->type, D->L->var, D->svar, D->axis);
            else
                kl_strbuf_addf(&sb, "%s%s%s %s = %s%s%s + %s - (int)threadIdx.%c;\n", bind, li, D->type, D->L->var,
                               simple_token(st0) ? "" : "(", D->L->start, simple_token(st0) ? "" : ")", D->svar, D->axis);
            for (unsigned q = 0; q < D->ndecls; q++) {
                char dind[64];
                rb_indent_of(ctx, ts_node_start_byte(D->decls[q]), dind, sizeof dind);
                char *t = rb_text(ctx, D->decls[q]);
                char *r = t ? reindent_node_text(dind, t, (int)(strlen(bind) + strlen(li)) - (int)strlen(dind)) : NULL;
                free(t);
                if (!r) {
                    st = kl_rule_not_applicable(err, "%s:%u: the declaration is indented with tabs", src,
                                                kl_ast_line(D->decls[q]));
                    goto cleanup;
                }
                kl_strbuf_addf(&sb, "%s%s%s\n", bind, li, r);
                free(r);
            }
            if (d + 1 < s->nd) kl_strbuf_addf(&sb, "%s%s", bind, li);
        }
        {
            char li[256] = "";
            for (unsigned k = 0; k < s->nd; k++) kl_snprintf(li + strlen(li), sizeof li - strlen(li), "%s", unit);
            kl_strbuf_addf(&sb, "%s%s%s", bind, li, tname);
            for (unsigned k = 0; k < s->nd; k++) kl_strbuf_addf(&sb, "[%s]", s->d[s->nd == 2 && s->d[0].axis == 'x' ? 1 - k : k].svar);
            kl_strbuf_addf(&sb, " = %s;\n", value);
        }
        for (unsigned d = s->nd; d-- > 0;) {
            char li[256] = "";
            for (unsigned k = 0; k < d; k++) kl_snprintf(li + strlen(li), sizeof li - strlen(li), "%s", unit);
            kl_strbuf_addf(&sb, "%s%s}\n", bind, li);
        }
        if (runtime) kl_strbuf_addf(&sb, "%s__syncthreads();\n%s}", bind, ind);
        else kl_strbuf_addf(&sb, "%s__syncthreads();", ind);
        load = kl_strbuf_detach(&sb, NULL);
        if (!load) goto oom;
    }
    /* the read of the tile ([y][x] order) */
    char tread[512];
    {
        char c[2][192];
        unsigned order[2] = {0, 1};
        if (s->nd == 2 && s->d[0].axis == 'x') order[0] = 1, order[1] = 0;
        kl_snprintf(tread, sizeof tread, "%s", tname);
        for (unsigned k = 0; k < s->nd; k++) {
            tile_coord(&s->d[order[k]], c[k], sizeof c[k]);
            kl_snprintf(tread + strlen(tread), sizeof tread - strlen(tread), "[%s]", c[k]);
        }
    }
    /* the declaration and its marker */
    kl_strbuf_addf(&sb, "%s// " NAME ": '%s' with its halo in shared memory", ind, s->arr);
    if (runtime) kl_strbuf_addf(&sb, " (the loop reads global memory unless %s)", ctext);
    kl_strbuf_addf(&sb, "\n%s__shared__ %s %s", ind, s->elem, tname);
    {
        unsigned order[2] = {0, 1};
        if (s->nd == 2 && s->d[0].axis == 'x') order[0] = 1, order[1] = 0;
        for (unsigned k = 0; k < s->nd; k++) kl_strbuf_addf(&sb, "[%s]", s->d[order[k]].ext);
    }
    kl_strbuf_adds(&sb, ";\n");
    char *decl = kl_strbuf_detach(&sb, NULL);
    if (!decl) goto oom;
    /* the compute: the loop with the read from the tile; with a run-time extent, the original loop
     * stays as the path for offsets beyond max_radius */
    if (runtime) {
        rep r = {ts_node_start_byte(s->read), ts_node_end_byte(s->read), tread};
        char *raw = splice(ctx, ts_node_start_byte(s->outer), ts_node_end_byte(s->outer), &r, 1);
        char *otext = rb_text(ctx, s->outer);
        if (!raw || !otext) {
            free(raw);
            free(otext);
            free(decl);
            goto oom;
        }
        copy = reindent_node_text(lind, raw, (int)strlen(unit));
        orig = reindent_node_text(lind, otext, (int)strlen(unit));
        free(raw);
        free(otext);
        if (!copy || !orig) {
            free(decl);
            goto oom;
        }
        kl_strbuf_addf(&sb, "if (%s) {\n%s%s%s\n%s} else {\n%s%s%s\n%s}", ctext, lind, unit, copy, lind, lind, unit, orig,
                       lind);
        compute = kl_strbuf_detach(&sb, NULL);
        if (!compute) {
            free(decl);
            goto oom;
        }
    }
    if (s->form == 'I' && s->npre) {
        uint32_t a = rb_line_start(ctx, ts_node_start_byte(s->pre[0]));
        uint32_t b = rb_line_start(ctx, ts_node_start_byte(s->outer));
        pre = rb_reindent(ctx->text + a, b - a, (int)strlen(ind) - (int)strlen(lind));
        if (!pre) {
            free(decl);
            st = kl_rule_not_applicable(err, "%s:%u: the statements before the loop are indented with tabs", src,
                                        kl_ast_line(s->pre[0]));
            goto cleanup;
        }
    }
    if (s->form == 'I') {
        uint32_t at = rb_line_start(ctx, ts_node_start_byte(s->guard));
        st = kl_edits_addf(out, at, at, "%s%s%s%s\n", decl, pre ? pre : "", ind, load);
        if (st == KL_OK && s->npre)
            st = kl_edits_add(out, rb_line_start(ctx, ts_node_start_byte(s->pre[0])),
                              rb_line_start(ctx, ts_node_start_byte(s->outer)), "");
    } else if (s->form == 'R') {
        uint32_t a = rb_line_start(ctx, ts_node_start_byte(s->guard));
        uint32_t b = rb_line_end(ctx, ts_node_end_byte(s->guard) - 1);
        st = kl_edits_add(out, a, b, decl);
        guard_text = rb_text(ctx, s->guard);
        if (!guard_text) st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        uint32_t at = rb_line_start(ctx, ts_node_start_byte(s->outer));
        if (st == KL_OK) st = kl_edits_addf(out, at, at, "%s%s\n%s%s\n", ind, load, ind, guard_text);
    } else {
        uint32_t at = rb_line_start(ctx, ts_node_start_byte(s->outer));
        st = kl_edits_addf(out, at, at, "%s%s%s\n", decl, ind, load);
    }
    free(decl);
    if (st == KL_OK) {
        if (runtime) st = kl_edits_add(out, ts_node_start_byte(s->outer), ts_node_end_byte(s->outer), compute);
        else st = kl_edits_add(out, ts_node_start_byte(s->read), ts_node_end_byte(s->read), tread);
    }
    goto cleanup;
oom:
    st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
cleanup:
    kl_strbuf_release(&sb);
    if (st == KL_ERR_NOMEM && err->status != KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    free(ctext);
    free(pre);
    free(load);
    free(guard_text);
    free(compute);
    free(copy);
    free(orig);
    free(value);
    return st;
}
#undef SWHY

/* ---- apply with several outputs per thread along x (a register tile) --------------------------------
 *
 * outputs_x = OX > 1, for a 2-D stencil (offset loops over y outside x) in the output guard
 * `if (G) { pre; loop; post }`, whose read sits in `ACC += E * READ;` (or READ * E) with ACC declared
 * in pre and E the same for every output of the thread (no threadIdx.x, nothing declared in the loops):
 * each thread computes the OX adjacent outputs x0 .. x0+OX-1 of a block OX times as wide. The
 * statements before the guard run with threadIdx.x -> threadIdx.x * OX and blockIdx.x -> blockIdx.x * OX
 * (the thread's first column); the halo tile is (BX - 1) * OX + RN floats wide, RN = OX + count - 1
 * rounded up to the vector width VW (OX, at most 4); for each offset row a thread reads its RN values
 * once as VW-wide vectors and each E feeds OX accumulators. The outputs are stored by the statements
 * before the guard run again per output (threadIdx.x -> threadIdx.x * OX + c), ACC = its accumulator, then
 * `if (G) { post }`. The read's guard is left out: the tile holds 0 where it failed, so the product
 * adds 0 — the same sum unless E is an infinity or NaN at an offset outside the image. With a run-time
 * count the original loop stays, per output, for counts beyond max_radius. */

/* The replacements of threadIdx.x and blockIdx.x (subst_x). */
typedef struct bx_sub {
    const kl_rule_ctx *ctx;
    rep reps[64];
    unsigned n;
    const char *tx, *bx;
    bool grid;                /* gridDim.x seen */
} bx_sub;

static bool bx_visit(TSNode n, void *user)
{
    bx_sub *b = user;
    if (!rb_is(n, "field_expression")) return true;
    TSNode arg = rb_field(n, "argument"), fld = rb_field(n, "field");
    if (rb_is(fld, "template_method")) fld = rb_field(fld, "name");
    if (!rb_is(arg, "identifier") || !text_is(b->ctx, fld, "x")) return true;
    const char *to = text_is(b->ctx, arg, "threadIdx") ? b->tx : text_is(b->ctx, arg, "blockIdx") ? b->bx : NULL;
    if (text_is(b->ctx, arg, "gridDim")) b->grid = true;
    if (to && b->n < 64) b->reps[b->n++] = (rep){ts_node_start_byte(n), ts_node_end_byte(fld), to};
    return false;
}

/* The statements of scope inside [a,b) as text, with threadIdx.x and blockIdx.x replaced by tx and bx;
 * *grid is set when gridDim.x is read (a wider block would change it). NULL with more than 64 uses. */
static char *subst_x(const kl_rule_ctx *ctx, uint32_t a, uint32_t b, TSNode scope, const char *tx, const char *bx,
                     bool *grid)
{
    bx_sub s = {.ctx = ctx, .tx = tx, .bx = bx};
    for (uint32_t i = 0; i < ts_node_named_child_count(scope); i++) {
        TSNode c = ts_node_named_child(scope, i);
        if (ts_node_start_byte(c) >= a && ts_node_end_byte(c) <= b) rb_walk(c, bx_visit, &s);
    }
    if (grid) *grid |= s.grid;
    return s.n >= 64 ? NULL : splice(ctx, a, b, s.reps, s.n);
}

/* Are the statements of compound c only declarations, `if (…) continue;`, and `keep`? */
static bool only_decls_and(TSNode c, TSNode keep)
{
    for (uint32_t i = 0; i < ts_node_named_child_count(c); i++) {
        TSNode q = ts_node_named_child(c, i);
        if (ts_node_eq(q, keep) || rb_is(q, "comment") || rb_is(q, "declaration") || is_continue_if(q)) continue;
        return false;
    }
    return true;
}

/* The first of the `#pragma …` lines right above byte off (only blanks before off on its line, and
 * before each directive on its own), or off when there is none: directives that belong to the
 * statement at off. */
static uint32_t pragmas_above(const kl_rule_ctx *ctx, uint32_t off)
{
    uint32_t lead = off;
    while (rb_line_blank_before(ctx, lead)) {
        uint32_t ls = rb_line_start(ctx, lead);
        if (ls == 0) break;
        uint32_t k = rb_line_start(ctx, ls - 1);
        while (k < ls && (ctx->text[k] == ' ' || ctx->text[k] == '\t')) k++;
        if (ls - k < 7 || memcmp(ctx->text + k, "#pragma", 7)) break;
        lead = k;
    }
    return lead;
}

/* Every launch of the kernel covers the same columns with blocks OX times as wide: the grid's x
 * extent G becomes (G + OX - 1) / OX (ceil(ceil(w / B) / OX) = ceil(w / (B * OX))). */
static kl_status widen_launches(const kl_rule_ctx *ctx, const sa *s, int ox, kl_edits *out, kl_error *err)
{
    const char *src = kl_source_name(ctx->src);
    rb_func fs[64];
    unsigned nf = rb_functions(ctx, fs, 64);
    const rb_func *f = NULL;
    for (unsigned i = 0; i < nf && !f; i++)
        if (ts_node_eq(fs[i].def, s->fn)) f = &fs[i];
    if (!f) return kl_rule_not_applicable(err, "%s: the kernel is not a function of the file", src);
    rb_launch ls[16];
    unsigned n = rb_launches(ctx, f->name, ls, 16);
    if (!n) return kl_rule_not_applicable(err, "%s: kernel '%s' is not launched in this file", src, f->name);
    uint32_t done[16];
    unsigned nd = 0;
    for (unsigned i = 0; i < n; i++) {
        TSNode cfg = ls[i].cfg[0];
        TSNode list = ls[i].ncfg ? rb_dim3_args(ctx, &ls[i], cfg) : (TSNode){0};
        if (ts_node_is_null(list) || ts_node_named_child_count(list) < 2)
            return kl_rule_not_applicable(err, "%s:%u: the grid of this launch is not a dim3 of the file", src,
                                          kl_node_span(ls[i].call).line);
        if (rb_is(cfg, "identifier")) {
            char nm[64];
            squeezed(ctx, cfg, nm, sizeof nm);
            unsigned launches = 0;
            for (unsigned j = 0; j < n; j++)
                if (ts_node_eq(ls[j].host.def, ls[i].host.def) && rb_is(ls[j].cfg[0], "identifier") &&
                    text_is(ctx, ls[j].cfg[0], nm))
                    launches++;
            if (uses_of(ctx, ls[i].host.body, nm) != 1 + launches) {
                /* the grid serves more than this kernel (specialize's dispatch launches the generic
                 * kernel with it too): this launch alone gets the narrower grid */
                kl_status st = kl_edits_addf(out, ts_node_start_byte(cfg), ts_node_end_byte(cfg),
                                             "dim3((%s.x + %d) / %d, %s.y, %s.z)", nm, ox - 1, ox, nm, nm);
                if (st != KL_OK) return kl_error_set(err, st, "out of memory");
                continue;
            }
        }
        TSNode ex = rb_dim3_extent(list, 0);
        uint32_t a = ts_node_start_byte(ex), b = ts_node_end_byte(ex);
        bool seen = false;
        for (unsigned j = 0; j < nd; j++) seen |= done[j] == a;
        if (seen) continue;
        if (nd < 16) done[nd++] = a;
        kl_status st = kl_edits_addf(out, a, b, "(%.*s + %d) / %d", (int)(b - a), ctx->text + a, ox - 1, ox);
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    }
    return KL_OK;
}

static kl_status apply_stencil_rt(const kl_rule_ctx *ctx, sa *s, int64_t maxr, int ox, kl_edits *out, kl_error *err)
{
    const char *src = kl_source_name(ctx->src);
    unsigned ln = kl_ast_line(s->outer);
#define RWHY(...) kl_rule_not_applicable(err, __VA_ARGS__)
    if (s->nd != 2 || s->d[0].axis != 'y' || s->d[1].axis != 'x')
        return RWHY("%s:%u: outputs_x needs a 2-D stencil whose outer offset loop moves along y", src, ln);
    if (s->form != 'I') return RWHY("%s:%u: outputs_x needs the loop inside the output guard `if (…) { … }`", src, ln);
    if (strcmp(s->elem, "float")) return RWHY("%s:%u: outputs_x reads rows of float; '%s' holds %s", src, ln, s->arr, s->elem);
    if (maxr < 1 || maxr > 32) return RWHY("%s:%u: max_radius %lld is outside 1..32", src, ln, (long long)maxr);
    /* the accumulation: ACC += E * READ */
    TSNode st = ts_node_parent(s->read);
    while (rb_is(st, "parenthesized_expression")) st = ts_node_parent(st);
    TSNode mul = st, asg = ts_node_parent(mul);
    if (!rb_is(mul, "binary_expression") || !text_is(ctx, rb_field(mul, "operator"), "*") ||
        !rb_is(asg, "assignment_expression") || !text_is(ctx, rb_field(asg, "operator"), "+=") ||
        !ts_node_eq(rb_field(asg, "right"), mul) || !rb_is(ts_node_parent(asg), "expression_statement") ||
        !rb_is(rb_field(asg, "left"), "identifier"))
        return RWHY("%s:%u: the read is not in `acc += e * %s[…];`", src, kl_ast_line(s->read), s->arr);
    TSNode accstmt = ts_node_parent(asg);
    TSNode E = ts_node_eq(strip(rb_field(mul, "left")), s->read) ? rb_field(mul, "right") : rb_field(mul, "left");
    char acc[64];
    uint32_t aa = ts_node_start_byte(rb_field(asg, "left")), ab = ts_node_end_byte(rb_field(asg, "left"));
    kl_snprintf(acc, sizeof acc, "%.*s", (int)(ab - aa), ctx->text + aa);
    if (uses_of(ctx, s->outer, acc) != 1) return RWHY("%s:%u: '%s' is used in the loop besides the sum", src, ln, acc);
    /* ACC: declared in pre with an initializer */
    TSNode accinit = {0};
    char acctype[64] = "";
    for (unsigned i = 0; i < s->npre; i++) {
        TSNode d = s->pre[i];
        for (uint32_t k = 0; k < ts_node_named_child_count(d); k++) {
            TSNode dd = ts_node_named_child(d, k);
            if (rb_is(dd, "init_declarator") && text_is(ctx, rb_field(dd, "declarator"), acc)) {
                accinit = rb_field(dd, "value");
                TSNode ty = rb_field(d, "type");
                kl_snprintf(acctype, sizeof acctype, "%.*s", (int)(ts_node_end_byte(ty) - ts_node_start_byte(ty)),
                            ctx->text + ts_node_start_byte(ty));
            }
        }
    }
    if (ts_node_is_null(accinit)) return RWHY("%s:%u: '%s' is not declared with a value before the loop", src, ln, acc);
    /* E: the same for the thread's outputs */
    {
        char et[512];
        squeezed(ctx, E, et, sizeof et);
        if (strstr(et, "threadIdx.x")) return RWHY("%s:%u: the factor `%s` depends on threadIdx.x", src, kl_ast_line(E), et);
        char names[32][64];
        ident_scan is = {.ctx = ctx, .names = names, .max = 32};
        rb_walk(E, ident_visit, &is);
        TSNode fbody = kl_ast_function_body(s->fn);
        for (unsigned w = 0; w < is.n && w < 32; w++) {
            decl_scan ds = {.ctx = ctx, .name = names[w]};
            rb_walk(s->outer, decl_scan_visit, &ds);
            if (!ts_node_is_null(ds.found) && !ts_node_eq(ds.found, rb_field(s->d[0].loop, "initializer")) &&
                !ts_node_eq(ds.found, rb_field(s->d[1].loop, "initializer")))
                return RWHY("%s:%u: the factor `%s` reads '%s', declared in the loops", src, kl_ast_line(E), et, names[w]);
            for (uint32_t k = 0; k < ts_node_named_child_count(fbody); k++) {
                TSNode q = ts_node_named_child(fbody, k);
                if (ts_node_eq(q, s->guard)) break;
                char qt[512];
                squeezed(ctx, q, qt, sizeof qt);
                if (declares(ctx, q, names[w]) && strstr(qt, "threadIdx.x"))
                    return RWHY("%s:%u: the factor `%s` reads '%s', which depends on threadIdx.x", src, kl_ast_line(E), et,
                                names[w]);
            }
        }
    }
    /* the loops hold only declarations, continues and the way to the sum */
    for (TSNode c = accstmt; !ts_node_eq(c, s->outer); c = ts_node_parent(c)) {
        TSNode p = ts_node_parent(c);
        if (rb_is(p, "compound_statement") && !only_decls_and(p, c))
            return RWHY("%s:%u: the loop does more than accumulate `%s`", src, kl_ast_line(p), acc);
        if (rb_is(p, "if_statement") && !ts_node_is_null(rb_field(p, "alternative")))
            return RWHY("%s:%u: the sum sits in an if with an else", src, kl_ast_line(p));
    }
    /* the statements before the guard: declarations, run per output too */
    TSNode fbody = kl_ast_function_body(s->fn);
    uint32_t ta = 0, tb = 0;
    bool any = false;
    for (uint32_t k = 0; k < ts_node_named_child_count(fbody); k++) {
        TSNode q = ts_node_named_child(fbody, k);
        if (ts_node_eq(q, s->guard)) break;
        if (rb_is(q, "comment")) continue;
        if (!hoistable(ctx, q)) return RWHY("%s:%u: the statement before the guard is not a plain declaration", src, kl_ast_line(q));
        if (!any) ta = rb_line_start(ctx, ts_node_start_byte(q));
        tb = rb_line_end(ctx, ts_node_end_byte(q) - 1);
        any = true;
    }
    if (!any) return RWHY("%s:%u: no declaration of the thread's column before the guard", src, ln);
    if (!ts_node_is_null(rb_next_stmt(s->guard))) return RWHY("%s:%u: statements follow the output guard", src, ln);
    /* the guard's body: pre, the loop, post */
    TSNode gbody = rb_field(s->guard, "consequence");
    uint32_t pa = 0, pb = 0;
    bool after = false, havepost = false;
    for (uint32_t k = 0; k < ts_node_named_child_count(gbody); k++) {
        TSNode q = ts_node_named_child(gbody, k);
        if (ts_node_eq(q, s->outer)) {
            after = true;
            continue;
        }
        if (!after) continue;
        if (!havepost) pa = rb_line_start(ctx, ts_node_start_byte(q));
        pb = rb_line_end(ctx, ts_node_end_byte(q) - 1);
        havepost = true;
    }
    if (!havepost) return RWHY("%s:%u: nothing after the loop stores the sum", src, ln);
    bool runtime = !s->d[0].fixed || !s->d[1].fixed;
    int vw = ox < 4 ? ox : 4;
    int64_t extx = s->d[1].fixed ? s->d[1].ntrip : 2 * maxr + 1;
    int64_t rn = (ox + extx - 1 + vw - 1) / vw * vw;
    int64_t bx = s->dim[0], by = s->dim[1];
    int64_t sw = (bx - 1) * ox + rn;
    int64_t rows = s->d[0].fixed ? by + s->d[0].ntrip - 1 : by + 2 * maxr;
    if (rows * sw * 4 > 48 * 1024)
        return RWHY("%s:%u: the tile takes %lld bytes of shared memory, over 48 KiB", src, ln, (long long)(rows * sw * 4));
    /* names */
    char tname[96], base[80], cn[32], rown[32], accn[32], fn_[32];
    kl_snprintf(base, sizeof base, "%s_s", s->arr);
    fresh_name(ctx, s->fn, base, tname, sizeof tname);
    fresh_name(ctx, s->fn, "kl_c", cn, sizeof cn);
    fresh_name(ctx, s->fn, "kl_row", rown, sizeof rown);
    fresh_name(ctx, s->fn, "kl_acc", accn, sizeof accn);
    fresh_name(ctx, s->fn, "kl_f", fn_, sizeof fn_);
    char fsn[32], vn[32];
    fresh_name(ctx, s->fn, "kl_f_s", fsn, sizeof fsn);
    fresh_name(ctx, s->fn, "kl_v", vn, sizeof vn);
    for (unsigned d = 0; d < 2; d++) {
        kl_snprintf(base, sizeof base, "s%c", s->d[d].axis);
        fresh_name(ctx, s->fn, base, s->d[d].svar, sizeof s->d[d].svar);
    }
    kl_status stt = KL_OK;
    char *top = NULL, *top_c = NULL, *pre = NULL, *post = NULL, *value = NULL, *guardtxt = NULL, *ltext = NULL;
    char *ctext = NULL, *etext = NULL;
    kl_strbuf sb = KL_STRBUF_INIT;
    char txo[64], txc[96], bxo[64];
    kl_snprintf(txo, sizeof txo, "(threadIdx.x * %d)", ox);
    kl_snprintf(txc, sizeof txc, "(threadIdx.x * %d + %s)", ox, cn);
    kl_snprintf(bxo, sizeof bxo, "(blockIdx.x * %d)", ox);
    bool grid = false;
    top = subst_x(ctx, ta, tb, fbody, txo, bxo, &grid);
    top_c = subst_x(ctx, ta, tb, fbody, txc, bxo, &grid);
    if (grid) {
        stt = RWHY("%s:%u: the statements before the guard read gridDim.x, which a wider block changes", src, ln);
        goto done;
    }
    char ind[64], unit[64], lind[64];
    rb_indent_of(ctx, ts_node_start_byte(s->guard), ind, sizeof ind);
    rb_indent_of(ctx, ts_node_start_byte(s->outer), lind, sizeof lind);
    if (strlen(lind) <= strlen(ind)) {
        stt = RWHY("%s:%u: the loop is not indented inside the guard", src, ln);
        goto done;
    }
    kl_snprintf(unit, sizeof unit, "%s", lind + strlen(ind));
    /* directives right before the loop (`#pragma unroll`) belong to it, not to the statements before it */
    uint32_t lead = pragmas_above(ctx, ts_node_start_byte(s->outer));
    if (s->npre) {
        uint32_t a = rb_line_start(ctx, ts_node_start_byte(s->pre[0]));
        uint32_t b = rb_line_start(ctx, lead);
        pre = rb_reindent(ctx->text + a, b - a, (int)strlen(ind) - (int)strlen(lind));
        if (!pre) {
            stt = kl_rule_not_applicable(err, "%s:%u: the statements before the loop are indented with tabs or left of it",
                                         src, kl_ast_line(s->pre[0]));
            goto done;
        }
    } else pre = kl_strdup("");
    post = havepost ? rb_reindent(ctx->text + pa, pb - pa, 0) : kl_strdup("");
    guardtxt = rb_text(ctx, if_cond(s->guard));
    etext = rb_text(ctx, E);
    ltext = rb_text(ctx, s->outer);
    if (!top || !top_c || !pre || !post || !guardtxt || !etext || !ltext) goto oom;
    /* the run-time condition (counts within max_radius) */
    {
        kl_strbuf cb = KL_STRBUF_INIT;
        for (unsigned d = 0; d < 2; d++) {
            if (s->d[d].fixed) continue;
            char t1[256], t0[256];
            squeeze_str(s->d[d].trip, t1, sizeof t1);
            squeeze_str(s->d[0].trip, t0, sizeof t0);
            if (d == 1 && !s->d[0].fixed && !strcmp(t0, t1)) continue;
            kl_strbuf_addf(&cb, "%s%s <= 2 * %lld + 1", cb.len ? " && " : "", s->d[d].trip, (long long)maxr);
        }
        ctext = kl_strbuf_detach(&cb, NULL);
        if (!ctext) goto oom;
    }
    /* the stored value */
    value = stencil_value(ctx, s);
    if (!value) goto oom;
    /* the body, written whole */
    uint32_t body_a = rb_line_end(ctx, ts_node_start_byte(fbody)), body_b = rb_line_start(ctx, ts_node_end_byte(fbody) - 1);
    if (body_a > ta || !rb_line_blank_before(ctx, ts_node_end_byte(fbody) - 1)) {
        stt = RWHY("%s: expected the kernel's braces on lines of their own", src);
        goto done;
    }
    kl_strbuf_add(&sb, ctx->text + body_a, ta - body_a);  /* comments before the first statement */
    kl_strbuf_adds(&sb, top);
    kl_strbuf_addf(&sb, "%s// " NAME ": '%s' with its halo in shared memory, %d outputs per thread along x (a register "
                        "tile)%s%s\n", ind, s->arr, ox, runtime ? "; the loop reads global memory unless " : "",
                   runtime ? ctext : "");
    kl_strbuf_addf(&sb, "%s__shared__ __align__(16) %s %s[%s + %lld][(%s - 1) * %d + %lld];\n", ind, s->elem, tname,
                   s->btext[1], (long long)(rows - by), s->btext[0], ox, (long long)rn);
    kl_strbuf_addf(&sb, "%s__shared__ %s %s[%lld];  // the factor `%s` per offset pair\n", ind, acctype, fsn,
                   (long long)((s->d[0].fixed ? s->d[0].ntrip : 2 * maxr + 1) * (s->d[1].fixed ? s->d[1].ntrip : 2 * maxr + 1)),
                   etext);
    kl_strbuf_adds(&sb, pre);
    char in1[80];
    kl_snprintf(in1, sizeof in1, "%s%s", ind, runtime ? unit : "");
    if (runtime) kl_strbuf_addf(&sb, "%sif (%s) {\n", ind, ctext);
    /* the load: each element is what the thread at that offset would have read, or 0 */
    {
        const sdim *Y = &s->d[0], *X = &s->d[1];
        char sty[256], stx[256];
        squeeze_str(Y->L->start, sty, sizeof sty);
        squeeze_str(X->L->start, stx, sizeof stx);
        if (Y->fixed) kl_strbuf_addf(&sb, "%sfor (int %s = threadIdx.y; %s < %s + %lld; %s += %s) {\n", in1, Y->svar, Y->svar,
                                     s->btext[1], (long long)(Y->ntrip - 1), Y->svar, s->btext[1]);
        else kl_strbuf_addf(&sb, "%sfor (int %s = threadIdx.y; %s < %s + %s - 1; %s += %s) {\n", in1, Y->svar, Y->svar,
                            s->btext[1], Y->trip, Y->svar, s->btext[1]);
        if (!strcmp(sty, "0")) kl_strbuf_addf(&sb, "%s%s%s %s = %s - (int)threadIdx.y;\n", in1, unit, Y->type, Y->L->var, Y->svar);
        else kl_strbuf_addf(&sb, "%s%s%s %s = (%s) + %s - (int)threadIdx.y;\n", in1, unit, Y->type, Y->L->var, Y->L->start, Y->svar);
        for (unsigned q = 0; q < Y->ndecls; q++) {
            char dind[64];
            rb_indent_of(ctx, ts_node_start_byte(Y->decls[q]), dind, sizeof dind);
            char *t = rb_text(ctx, Y->decls[q]);
            char *r = t ? reindent_node_text(dind, t, (int)(strlen(in1) + strlen(unit)) - (int)strlen(dind)) : NULL;
            free(t);
            if (!r) goto oom;
            kl_strbuf_addf(&sb, "%s%s%s\n", in1, unit, r);
            free(r);
        }
        kl_strbuf_addf(&sb, "%s%sfor (int %s = threadIdx.x; %s < (%s - 1) * %d + %lld; %s += %s) {\n", in1, unit, X->svar,
                       X->svar, s->btext[0], ox, (long long)rn, X->svar, s->btext[0]);
        if (!strcmp(stx, "0"))
            kl_strbuf_addf(&sb, "%s%s%s%s %s = %s - (int)(threadIdx.x * %d);\n", in1, unit, unit, X->type, X->L->var, X->svar, ox);
        else
            kl_strbuf_addf(&sb, "%s%s%s%s %s = (%s) + %s - (int)(threadIdx.x * %d);\n", in1, unit, unit, X->type, X->L->var,
                           X->L->start, X->svar, ox);
        for (unsigned q = 0; q < X->ndecls; q++) {
            char dind[64];
            rb_indent_of(ctx, ts_node_start_byte(X->decls[q]), dind, sizeof dind);
            char *t = rb_text(ctx, X->decls[q]);
            char *r = t ? reindent_node_text(dind, t, (int)(strlen(in1) + 2 * strlen(unit)) - (int)strlen(dind)) : NULL;
            free(t);
            if (!r) goto oom;
            kl_strbuf_addf(&sb, "%s%s%s%s\n", in1, unit, unit, r);
            free(r);
        }
        kl_strbuf_addf(&sb, "%s%s%s%s[%s][%s] = %s;\n", in1, unit, unit, tname, Y->svar, X->svar, value);
        kl_strbuf_addf(&sb, "%s%s}\n%s}\n", in1, unit, in1);
        /* the factor, once per offset pair, staged too: every output of every thread reads it */
        char ty_[300], tx_[300];
        if (Y->fixed) kl_snprintf(ty_, sizeof ty_, "%lld", (long long)Y->ntrip);
        else kl_snprintf(ty_, sizeof ty_, "%s", simple_token(Y->trip) ? Y->trip : "");
        if (X->fixed) kl_snprintf(tx_, sizeof tx_, "%lld", (long long)X->ntrip);
        else kl_snprintf(tx_, sizeof tx_, "%s", simple_token(X->trip) ? X->trip : "");
        if (!ty_[0]) kl_snprintf(ty_, sizeof ty_, "(%s)", Y->trip);
        if (!tx_[0]) kl_snprintf(tx_, sizeof tx_, "(%s)", X->trip);
        kl_strbuf_addf(&sb, "%sfor (int %s = threadIdx.y * %s + threadIdx.x; %s < %s * %s; %s += %s * %s) {\n", in1, cn,
                       s->btext[0], cn, ty_, tx_, cn, s->btext[0], s->btext[1]);
        if (!strcmp(sty, "0")) kl_strbuf_addf(&sb, "%s%s%s %s = %s / %s;\n", in1, unit, Y->type, Y->L->var, cn, tx_);
        else kl_strbuf_addf(&sb, "%s%s%s %s = (%s) + %s / %s;\n", in1, unit, Y->type, Y->L->var, Y->L->start, cn, tx_);
        if (!strcmp(stx, "0")) kl_strbuf_addf(&sb, "%s%s%s %s = %s %% %s;\n", in1, unit, X->type, X->L->var, cn, tx_);
        else kl_strbuf_addf(&sb, "%s%s%s %s = (%s) + %s %% %s;\n", in1, unit, X->type, X->L->var, X->L->start, cn, tx_);
        kl_strbuf_addf(&sb, "%s%s%s[%s] = %s;\n%s}\n", in1, unit, fsn, cn, etext, in1);
        kl_strbuf_addf(&sb, "%s__syncthreads();\n", in1);
        /* the register tile: per offset row, the thread's values read once as vectors */
        char yc[320], xo[256];
        tile_coord(Y, yc, sizeof yc);
        if (!strcmp(stx, "0")) kl_snprintf(xo, sizeof xo, "%s", X->L->var);
        else kl_snprintf(xo, sizeof xo, "(%s - (%s))", X->L->var, X->L->start);
        kl_strbuf_addf(&sb, "%s%s %s[%d];\n", in1, acctype, accn, ox);
        kl_strbuf_addf(&sb, "%s#pragma unroll\n%sfor (int %s = 0; %s < %d; %s++) %s[%s] = ", in1, in1, cn, cn, ox, cn, accn, cn);
        {
            char *it = rb_text(ctx, accinit);
            if (!it) goto oom;
            kl_strbuf_addf(&sb, "%s;\n", it);
            free(it);
        }
        uint32_t ya = ts_node_start_byte(Y->loop), yb = ts_node_start_byte(rb_field(Y->loop, "body"));
        uint32_t xa = ts_node_start_byte(X->loop), xb = ts_node_start_byte(rb_field(X->loop, "body"));
        if (ts_node_eq(Y->loop, s->outer))
            for (uint32_t qa = lead; qa < ya;) { /* the loop's own directives (`#pragma unroll`) */
                uint32_t qe = rb_line_end(ctx, qa), qb = qe;
                while (qb > qa && isspace((unsigned char)ctx->text[qb - 1])) qb--;
                kl_strbuf_addf(&sb, "%s%.*s\n", in1, (int)(qb - qa), ctx->text + qa);
                qa = qe;
                while (qa < ya && isspace((unsigned char)ctx->text[qa])) qa++;
            }
        kl_strbuf_addf(&sb, "%s%.*s{\n", in1, (int)(yb - ya), ctx->text + ya);
        kl_strbuf_addf(&sb, "%s%s%s %s[%lld];\n", in1, unit, s->elem, rown, (long long)rn);
        kl_strbuf_addf(&sb, "%s%s#pragma unroll\n%s%sfor (int %s = 0; %s < %lld; %s++) {\n", in1, unit, in1, unit, cn, cn,
                       (long long)(rn / vw), cn);
        if (vw == 1)
            kl_strbuf_addf(&sb, "%s%s%s%s[%s] = %s[%s][threadIdx.x * %d + %s];\n", in1, unit, unit, rown, cn, tname, yc, ox, cn);
        else {
            kl_strbuf_addf(&sb, "%s%s%sconst float%d %s = *reinterpret_cast<const float%d*>(&%s[%s][threadIdx.x * %d + %d * %s]);\n",
                           in1, unit, unit, vw, vn, vw, tname, yc, ox, vw, cn);
            static const char comp[] = "xyzw";
            for (int m = 0; m < vw; m++)
                kl_strbuf_addf(&sb, "%s%s%s%s[%d * %s + %d] = %s.%c;\n", in1, unit, unit, rown, vw, cn, m, vn, comp[m]);
        }
        kl_strbuf_addf(&sb, "%s%s}\n", in1, unit);
        kl_strbuf_addf(&sb, "%s%s%.*s{\n", in1, unit, (int)(xb - xa), ctx->text + xa);
        {
            char yo[256];
            if (!strcmp(sty, "0")) kl_snprintf(yo, sizeof yo, "%s", Y->L->var);
            else kl_snprintf(yo, sizeof yo, "(%s - (%s))", Y->L->var, Y->L->start);
            kl_strbuf_addf(&sb, "%s%s%sconst %s %s = %s[%s * %s + %s];\n", in1, unit, unit, acctype, fn_, fsn, yo, tx_, xo);
        }
        kl_strbuf_addf(&sb, "%s%s%s#pragma unroll\n%s%s%sfor (int %s = 0; %s < %d; %s++) %s[%s] += %s * %s[%s + %s];\n", in1,
                       unit, unit, in1, unit, unit, cn, cn, ox, cn, accn, cn, fn_, rown, cn, xo);
        kl_strbuf_addf(&sb, "%s%s}\n%s}\n", in1, unit, in1);
        /* the outputs */
        kl_strbuf_addf(&sb, "%sfor (int %s = 0; %s < %d; %s++) {\n", in1, cn, cn, ox, cn);
        char *t2 = rb_reindent(top_c, strlen(top_c), (int)(strlen(in1) + strlen(unit)) - (int)strlen(ind));
        if (!t2) goto oom;
        kl_strbuf_adds(&sb, t2);
        free(t2);
        kl_strbuf_addf(&sb, "%s%s%s = %s[%s];\n", in1, unit, acc, accn, cn);
        kl_strbuf_addf(&sb, "%s%sif (%s) {\n", in1, unit, guardtxt);
        char *p2 = rb_reindent(post, strlen(post), (int)(strlen(in1) + 2 * strlen(unit)) - (int)strlen(lind));
        if (!p2) goto oom;
        kl_strbuf_adds(&sb, p2);
        free(p2);
        kl_strbuf_addf(&sb, "%s%s}\n%s}\n", in1, unit, in1);
    }
    if (runtime) {
        /* counts beyond max_radius: the original loop, per output */
        kl_strbuf_addf(&sb, "%s} else {\n", ind);
        kl_strbuf_addf(&sb, "%s%sfor (int %s = 0; %s < %d; %s++) {\n", ind, unit, cn, cn, ox, cn);
        char *t2 = rb_reindent(top_c, strlen(top_c), 2 * (int)strlen(unit));
        char *p2 = rb_reindent(pre, strlen(pre), 2 * (int)strlen(unit));
        if (!t2 || !p2) {
            free(t2);
            free(p2);
            goto oom;
        }
        kl_strbuf_adds(&sb, t2);
        kl_strbuf_adds(&sb, p2);
        free(t2);
        free(p2);
        kl_strbuf_addf(&sb, "%s%s%sif (%s) {\n", ind, unit, unit, guardtxt);
        char *l2 = reindent_node_text(lind, ltext, (int)(strlen(ind) + 3 * strlen(unit)) - (int)strlen(lind));
        char *p3 = rb_reindent(post, strlen(post), (int)(strlen(ind) + 3 * strlen(unit)) - (int)strlen(lind));
        if (!l2 || !p3) {
            free(l2);
            free(p3);
            goto oom;
        }
        for (uint32_t qa = lead; qa < ts_node_start_byte(s->outer);) {
            uint32_t qe = rb_line_end(ctx, qa), qb = qe;
            while (qb > qa && isspace((unsigned char)ctx->text[qb - 1])) qb--;
            kl_strbuf_addf(&sb, "%s%s%s%s%.*s\n", ind, unit, unit, unit, (int)(qb - qa), ctx->text + qa);
            qa = qe;
            while (qa < ts_node_start_byte(s->outer) && isspace((unsigned char)ctx->text[qa])) qa++;
        }
        kl_strbuf_addf(&sb, "%s%s%s%s%s\n", ind, unit, unit, unit, l2);
        kl_strbuf_adds(&sb, p3);
        free(l2);
        free(p3);
        kl_strbuf_addf(&sb, "%s%s%s}\n%s%s}\n%s}\n", ind, unit, unit, ind, unit, ind);
    }
    if (sb.failed) goto oom;
    stt = kl_edits_add(out, body_a, body_b, kl_strbuf_str(&sb));
    if (stt == KL_OK) stt = widen_launches(ctx, s, ox, out, err);
    goto done;
oom:
    stt = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
done:
    kl_strbuf_release(&sb);
    free(top);
    free(top_c);
    free(pre);
    free(post);
    free(value);
    free(guardtxt);
    free(ltext);
    free(ctext);
    free(etext);
    return stt;
#undef RWHY
}

/* The statements (not comments) of a compound statement, at most max; returns how many. */
static unsigned stmts_of(TSNode compound, TSNode *out, unsigned max)
{
    unsigned n = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(compound); i++) {
        TSNode c = ts_node_named_child(compound, i);
        if (rb_is(c, "comment")) continue;
        if (n < max) out[n] = c;
        n++;
    }
    return n;
}

/* ---- present: a stencil halo tile (apply's output) ------------------------------------------------ */

typedef struct sp {
    TSNode decl;              /* __shared__ E S[..][..]; */
    TSNode load, load_end;    /* the load (the `if` of a run-time extent, or the loop) and its last statement */
    TSNode store, cond, gread;/* S[sy][sx] = cond ? G[idx] : 0; */
    char arr[64];
    unsigned nd;
    bool runtime;
    TSNode compute;           /* the if/else (run-time extent) or the loop reading the tile */
    TSNode tiled, fallback;   /* run-time extent: the loop of each branch */
    TSNode reads[32];
    unsigned nreads;
    char form;                /* 'I', 'R', 'N' as for apply */
    TSNode guard;
} sp;

typedef struct chain_scan {
    const kl_rule_ctx *ctx;
    const char *arr;
    TSNode chains[40];
    unsigned depth[40];
    unsigned n;
} chain_scan;

static bool chain_visit(TSNode n, void *user)
{
    chain_scan *c = user;
    if (!rb_is(n, "subscript_expression")) return true;
    unsigned depth = 0;
    TSNode b = n;
    while (rb_is(b, "subscript_expression")) b = rb_field(b, "argument"), depth++;
    if (!rb_is(b, "identifier") || !text_is(c->ctx, b, c->arr)) return true;
    if (c->n < 40) c->chains[c->n] = n, c->depth[c->n] = depth;
    c->n++;
    return false;
}

/* The outermost for loop around n below `stop` (a null node when none). */
static TSNode outermost_for(TSNode n, TSNode stop)
{
    TSNode best = {0};
    for (TSNode p = ts_node_parent(n); !ts_node_is_null(p) && !ts_node_eq(p, stop); p = ts_node_parent(p))
        if (rb_is(p, "for_statement")) best = p;
    return best;
}

static TSNode only_stmt(TSNode compound)
{
    if (rb_is(compound, "else_clause")) compound = ts_node_named_child(compound, 0);
    if (!rb_is(compound, "compound_statement")) return compound;
    TSNode one = {0};
    unsigned n = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(compound); i++) {
        TSNode c = ts_node_named_child(compound, i);
        if (rb_is(c, "comment")) continue;
        one = c;
        n++;
    }
    return n == 1 ? one : (TSNode){0};
}

/* Is decl a stencil halo tile as apply writes it (the shape only; remove_stencil checks that the
 * global reads it writes back are sound)? */
static bool analyse_stencil_present(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, TSNode decl, sp *p)
{
    memset(p, 0, sizeof *p);
    p->decl = decl;
    TSNode fbody = kl_ast_function_body(fn);
    if (!ts_node_eq(ts_node_parent(decl), fbody) || ts_node_named_child_count(decl) > 3) return false;
    TSNode d = rb_field(decl, "declarator");
    if (!rb_is(d, "array_declarator")) return false;
    p->nd = rb_is(rb_field(d, "declarator"), "array_declarator") ? 2 : 1;
    if (p->nd == 2 && rb_is(rb_field(rb_field(d, "declarator"), "declarator"), "array_declarator")) return false;
    TSNode id = rb_declarator_name(d);
    kl_snprintf(p->arr, sizeof p->arr, "%.*s", (int)(ts_node_end_byte(id) - ts_node_start_byte(id)),
                ctx->text + ts_node_start_byte(id));
    chain_scan cs = {.ctx = ctx, .arr = p->arr};
    rb_walk(fbody, chain_visit, &cs);
    if (cs.n > 40 || uses_of(ctx, fbody, p->arr) != cs.n + 1) return false;
    for (unsigned i = 0; i < cs.n; i++) {
        if (cs.depth[i] != p->nd) return false;
        TSNode par = ts_node_parent(cs.chains[i]);
        if (rb_is(par, "assignment_expression") && ts_node_eq(rb_field(par, "left"), cs.chains[i])) {
            if (!ts_node_is_null(p->store) || !text_is(ctx, rb_field(par, "operator"), "=")) return false;
            p->store = par;
        } else if (p->nreads < 32)
            p->reads[p->nreads++] = cs.chains[i];
        else return false;
    }
    if (ts_node_is_null(p->store) || !p->nreads) return false;
    /* the value: cond ? G[idx] : 0 */
    TSNode v = strip(rb_field(p->store, "right"));
    if (rb_is(v, "conditional_expression")) {
        if (!zero_value(ctx, rb_field(v, "alternative"))) return false;
        p->cond = rb_field(v, "condition");
        p->gread = strip(rb_field(v, "consequence"));
    } else p->gread = v;
    if (!rb_is(p->gread, "subscript_expression") || !rb_is(rb_field(p->gread, "argument"), "identifier")) return false;
    /* the load: `if (C) { loops; __syncthreads(); }`, or the loops and a barrier */
    p->load = p->store;
    while (!ts_node_is_null(p->load) && !ts_node_eq(ts_node_parent(p->load), fbody)) p->load = ts_node_parent(p->load);
    if (ts_node_is_null(p->load) || ts_node_start_byte(p->load) < ts_node_end_byte(decl)) return false;
    TSNode loops;
    if (rb_is(p->load, "if_statement")) {
        TSNode cons = rb_field(p->load, "consequence");
        if (!ts_node_is_null(rb_field(p->load, "alternative")) || !rb_is(cons, "compound_statement")) return false;
        TSNode st[3];
        unsigned ns = stmts_of(cons, st, 3);
        if (ns != 2 || !rb_is(st[0], "for_statement") || !rb_is_syncthreads(ctx, st[1])) return false;
        p->runtime = true;
        p->load_end = p->load;
        loops = st[0];
    } else if (rb_is(p->load, "for_statement")) {
        p->load_end = rb_next_stmt(p->load);
        if (!rb_is_syncthreads(ctx, p->load_end)) return false;
        loops = p->load;
    } else return false;
    /* the load's loops start at the thread index: `for (int sy = threadIdx.y; …)` */
    unsigned nfor = 0;
    for (TSNode q = ts_node_parent(p->store); !ts_node_is_null(q) && !ts_node_eq(q, ts_node_parent(loops));
         q = ts_node_parent(q)) {
        if (!rb_is(q, "for_statement")) continue;
        nfor++;
        char init[128];
        squeezed(ctx, rb_field(q, "initializer"), init, sizeof init);
        if (!strstr(init, "=threadIdx.")) return false;
    }
    if (nfor != p->nd) return false;
    /* the reads: all in one loop nest, at threadIdx.<a> + offset */
    TSNode T = {0};
    for (unsigned r = 0; r < p->nreads; r++) {
        TSNode t = outermost_for(p->reads[r], fbody);
        if (ts_node_is_null(t)) return false;
        if (r && !ts_node_eq(t, T)) return false;
        T = t;
        TSNode ch = p->reads[r];
        for (unsigned k = 0; k < p->nd; k++, ch = rb_field(ch, "argument")) {
            char sub[256];
            squeezed(ctx, kl_ast_subscript_index(ch), sub, sizeof sub);
            if (strlen(sub) < 13 || strncmp(sub, "threadIdx.", 10) || sub[11] != '+') return false;
        }
        TSNode par = ts_node_parent(p->reads[r]);
        if (rb_is(par, "update_expression") || (rb_is(par, "pointer_expression") && text_is(ctx, rb_field(par, "operator"), "&"))) return false;
    }
    if (p->runtime) {
        TSNode X = ts_node_parent(ts_node_parent(T));
        if (!rb_is(ts_node_parent(T), "compound_statement") || !rb_is(X, "if_statement")) return false;
        char c1[256], c2[256];
        squeezed(ctx, if_cond(X), c1, sizeof c1);
        squeezed(ctx, if_cond(p->load), c2, sizeof c2);
        TSNode alt = rb_field(X, "alternative");
        if (strcmp(c1, c2) || ts_node_is_null(alt)) return false;
        p->tiled = only_stmt(rb_field(X, "consequence"));
        p->fallback = only_stmt(alt);
        if (!ts_node_eq(p->tiled, T) || !rb_is(p->fallback, "for_statement")) return false;
        p->compute = X;
    } else p->compute = T;
    /* where the guard is */
    TSNode par = ts_node_parent(p->compute);
    TSNode after = rb_next_stmt(p->load_end);
    if (ts_node_eq(par, fbody)) {
        if (early_return(after) && ts_node_eq(rb_next_stmt(after), p->compute)) {
            p->form = 'R';
            p->guard = after;
        } else if (ts_node_eq(after, p->compute)) p->form = 'N';
        else return false;
    } else if (rb_is(par, "compound_statement") && rb_is(ts_node_parent(par), "if_statement") &&
               ts_node_eq(ts_node_parent(ts_node_parent(par)), fbody) && ts_node_eq(ts_node_parent(par), after)) {
        p->form = 'I';
        p->guard = after;
    } else return false;
    if (!kl_rules_starts_line(ctx, ts_node_start_byte(p->compute)) || !kl_rules_starts_line(ctx, ts_node_start_byte(p->load))) return false;
    (void)ax;
    return true;
}

/* The loop with every tile read written back as the global read it holds. New string. */
static char *stencil_untiled(const kl_rule_ctx *ctx, const sp *p, TSNode loop)
{
    char *g = rb_text(ctx, p->gread);
    if (!g) return NULL;
    rep reps[32];
    unsigned nr = 0;
    for (unsigned r = 0; r < p->nreads; r++)
        if (node_in(p->reads[r], loop)) reps[nr++] = (rep){ts_node_start_byte(p->reads[r]), ts_node_end_byte(p->reads[r]), g};
    char *t = splice(ctx, ts_node_start_byte(loop), ts_node_end_byte(loop), reps, nr);
    free(g);
    return t;
}

static kl_status remove_stencil(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, sp *p, kl_edits *out, kl_error *err)
{
    const char *src = kl_source_name(ctx->src);
    kl_status st = KL_OK;
    char *orig = NULL, *pre = NULL, *gtext = NULL, *g = NULL;
    char ind[64], cind[64];
    rb_indent_of(ctx, ts_node_start_byte(p->decl), ind, sizeof ind);
    rb_indent_of(ctx, ts_node_start_byte(p->compute), cind, sizeof cind);
    if (p->runtime) {
        /* the fallback is the loop itself: check that the tiled branch is it with the reads from the tile */
        char *t = stencil_untiled(ctx, p, p->tiled), *f = rb_text(ctx, p->fallback);
        bool same = false;
        if (t && f) {
            size_t n1 = strlen(t) + 1, n2 = strlen(f) + 1;
            char *a = malloc(n1), *b = malloc(n2);
            if (a && b) {
                squeeze_str(t, a, n1);
                squeeze_str(f, b, n2);
                same = !strcmp(a, b);
            }
            free(a);
            free(b);
        }
        free(t);
        if (!f) goto oom;
        if (!same) {
            free(f);
            return kl_rule_not_applicable(err, "%s:%u: the loop reading the tile and its fallback differ by more than the "
                                          "tile reads", src, kl_ast_line(p->compute));
        }
        char find[64];
        rb_indent_of(ctx, ts_node_start_byte(p->fallback), find, sizeof find);
        orig = reindent_node_text(find, f, (int)strlen(cind) - (int)strlen(find));
        free(f);
        if (!orig) return kl_rule_not_applicable(err, "%s:%u: the fallback loop is indented with tabs", src,
                                                 kl_ast_line(p->fallback));
    } else {
        /* every read happens under the load's guard, with the same locals */
        sa s;
        memset(&s, 0, sizeof s);
        char want[1024] = "";
        if (!ts_node_is_null(p->cond)) {
            if (ts_node_end_byte(p->cond) - ts_node_start_byte(p->cond) >= sizeof want - 1)
                return kl_rule_not_applicable(err, "%s:%u: the load's guard is too long", src, kl_ast_line(p->cond));
            squeezed(ctx, p->cond, want, sizeof want);
        }
        for (unsigned r = 0; r < p->nreads; r++) {
            s.read = p->reads[r];
            s.outer = p->compute;
            s.nconj = 0;
            s.why[0] = '\0';
            if (!stencil_path(ctx, &s)) return kl_rule_not_applicable(err, "%s", s.why);
            kl_strbuf cb = KL_STRBUF_INIT;
            for (unsigned i = 0; i < s.nconj; i++) {
                char *t = conj_text(ctx, s.conj[i], s.neg[i]);
                kl_strbuf_addf(&cb, "%s%s", i ? "&&" : "", t ? t : "");
                free(t);
            }
            char *have = kl_strbuf_detach(&cb, NULL);
            if (!have) goto oom;
            if (strlen(have) >= 1000) {
                free(have);
                return kl_rule_not_applicable(err, "%s:%u: the tile read's guard is too long", src, kl_ast_line(p->reads[r]));
            }
            char hs[1024];
            squeeze_str(have, hs, sizeof hs);
            free(have);
            if (strcmp(hs, want))
                return kl_rule_not_applicable(err, "%s:%u: the tile read is guarded by '%s', the load by '%s': the global "
                                              "read could leave the image", src, kl_ast_line(p->reads[r]), hs, want);
        }
        /* the load's locals (but the offsets it maps from its coordinates) appear in the loop as they are */
        TSNode stack[128];
        unsigned sp_ = 0;
        stack[sp_++] = p->load;
        while (sp_) {
            TSNode n = stack[--sp_];
            if (rb_is(n, "declaration") && !rb_is(ts_node_parent(n), "for_statement")) {
                char dt[512];
                squeezed(ctx, n, dt, sizeof dt);
                if (strstr(dt, "(int)threadIdx.")) continue;
                bool found = false;
                TSNode st2[128];
                unsigned sq = 0;
                st2[sq++] = p->compute;
                while (sq && !found) {
                    TSNode m = st2[--sq];
                    if (rb_is(m, "declaration")) {
                        char mt[512];
                        squeezed(ctx, m, mt, sizeof mt);
                        found = !strcmp(mt, dt);
                        continue;
                    }
                    for (uint32_t c = 0; c < ts_node_named_child_count(m) && sq < 128; c++) st2[sq++] = ts_node_named_child(m, c);
                }
                if (!found)
                    return kl_rule_not_applicable(err, "%s:%u: the load's declaration '%s' is not in the loop reading the "
                                                  "tile", src, kl_ast_line(n), dt);
                continue;
            }
            for (uint32_t c = 0; c < ts_node_named_child_count(n) && sp_ < 128; c++) stack[sp_++] = ts_node_named_child(n, c);
        }
    }
    uint32_t a, b;
    rb_stmt_range(ctx, p->decl, NAME, &a, &b);
    if (p->form == 'I') {
        uint32_t ls = rb_line_start(ctx, ts_node_start_byte(p->load));
        if (ls > b) {
            pre = rb_reindent(ctx->text + b, ls - b, (int)strlen(cind) - (int)strlen(ind));
            if (!pre) return kl_rule_not_applicable(err, "%s:%u: tabs in the indentation", src, kl_ast_line(p->decl));
        }
        KL_TRY(kl_edits_add(out, a, rb_line_end(ctx, ts_node_end_byte(p->load_end) - 1), ""));
        if (pre) {
            uint32_t at = rb_line_start(ctx, ts_node_start_byte(p->compute));
            KL_TRY(kl_edits_add(out, at, at, pre));
        }
    } else {
        if (p->form == 'R') {
            gtext = rb_text(ctx, p->guard);
            if (!gtext) goto oom;
            KL_TRY(kl_edits_addf(out, a, b, "%s%s\n", ind, gtext));
        } else KL_TRY(kl_edits_add(out, a, b, ""));
        KL_TRY(kl_edits_add(out, rb_line_start(ctx, ts_node_start_byte(p->load)),
                            rb_line_start(ctx, ts_node_start_byte(p->compute)), ""));
    }
    if (p->runtime) KL_TRY(kl_edits_add(out, ts_node_start_byte(p->compute), ts_node_end_byte(p->compute), orig));
    else {
        g = rb_text(ctx, p->gread);
        if (!g) goto oom;
        for (unsigned r = 0; r < p->nreads; r++)
            KL_TRY(kl_edits_add(out, ts_node_start_byte(p->reads[r]), ts_node_end_byte(p->reads[r]), g));
    }
    (void)ax;
    (void)fn;
    goto cleanup;
oom:
    st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
cleanup:
    if (st == KL_ERR_NOMEM && err->status != KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    free(orig);
    free(pre);
    free(gtext);
    free(g);
    return st;
}

/* ---- present: the register-tiled stencil (outputs_x > 1) ------------------------------------------------
 *
 * Recognised by apply_stencil_rt's marker ("N outputs per thread along x (a register tile)") right
 * above the halo tile, the factor tile after it. Remove writes the one-output-per-thread stencil
 * back: the statements before the marker with `(threadIdx.x * N)` and `(blockIdx.x * N)` back to
 * threadIdx.x and blockIdx.x, then `if (G) { pre; loop; post }` — with a run-time count the loop
 * and post are the original ones kept under `else`; with a compile-time count the loop is rebuilt
 * from the pieces the form keeps (the offset loops' headers, the load's locals, guard and read, the
 * staged factor, the sum's name): `if (guard) acc += factor * read;` — and every launch's grid x
 * extent `(G + N - 1) / N` is G again. */

typedef struct rtp {
    TSNode marker, decl, fdecl;
    int ox;
    uint32_t top_a, top_b;           /* the statements before the marker */
    uint32_t pre_a, pre_b;           /* after the factor tile, before the load (or the `if (C)`) */
    TSNode cond_if;                  /* run-time count: `if (C) { … } else { … }` */
    TSNode orig_if;                  /* … the `if (G) { loop; post }` under else */
    TSNode ly, lx, stage, yloop, epi; /* compile-time count: load loops, factor staging, compute, epilogue */
    char why[300];
} rtp;

#define RT_MARKER "outputs per thread along x (a register tile)"

static TSNode only_for(TSNode compound)
{
    TSNode st[4];
    return stmts_of(compound, st, 4) == 1 && rb_is(st[0], "for_statement") ? st[0] : (TSNode){0};
}

static bool analyse_rt_present(const kl_rule_ctx *ctx, TSNode fn, TSNode decl, rtp *p)
{
    memset(p, 0, sizeof *p);
    TSNode c = ts_node_prev_named_sibling(decl);
    if (!rb_is(c, "comment") || !rb_has_marker(ctx, ts_node_start_byte(c), ts_node_end_byte(c), RT_MARKER)) return false;
    char *mt = rb_text(ctx, c);
    const char *at = mt ? strstr(mt, " outputs per thread along x") : NULL;
    while (at && at > mt && at[-1] >= '0' && at[-1] <= '9') at--;
    p->ox = at ? atoi(at) : 0;
    free(mt);
    if (p->ox < 2) return false;
    p->marker = c, p->decl = decl;
    p->fdecl = rb_next_stmt(decl);
#define RPWHY(...) (kl_snprintf(p->why, sizeof p->why, __VA_ARGS__), true)
    const char *src = kl_source_name(ctx->src);
    TSNode body = kl_ast_function_body(fn);
    if (!ts_node_eq(ts_node_parent(decl), body) || !rb_is(p->fdecl, "declaration"))
        return RPWHY("%s:%u: the register tile is not laid out as apply writes it", src, kl_ast_line(decl));
    p->top_a = rb_line_end(ctx, ts_node_start_byte(body));
    p->top_b = rb_line_start(ctx, ts_node_start_byte(c));
    /* pre: up to the `if (C)` with an else, or the first loop */
    TSNode q = rb_next_stmt(p->fdecl);
    p->pre_a = p->pre_b = rb_line_end(ctx, ts_node_end_byte(p->fdecl) - 1);
    while (!ts_node_is_null(q) && rb_is(q, "declaration")) {
        p->pre_b = rb_line_end(ctx, ts_node_end_byte(q) - 1);
        q = rb_next_stmt(q);
    }
    if (rb_is(q, "if_statement") && !ts_node_is_null(rb_field(q, "alternative"))) {
        p->cond_if = q;
        TSNode alt = rb_field(q, "alternative");
        if (rb_is(alt, "else_clause")) alt = ts_node_named_child(alt, 0);
        TSNode per = rb_is(alt, "compound_statement") ? only_for(alt) : (TSNode){0};
        TSNode pb = ts_node_is_null(per) ? per : rb_field(per, "body");
        TSNode st[40];
        unsigned n = rb_is(pb, "compound_statement") ? stmts_of(pb, st, 40) : 0;
        if (!n || n > 40 || !rb_is(st[n - 1], "if_statement") || !rb_is(rb_field(st[n - 1], "consequence"), "compound_statement"))
            return RPWHY("%s:%u: the original loop under else is not as apply writes it", src, kl_ast_line(q));
        p->orig_if = st[n - 1];
        return true;
    }
    /* a compile-time count: load loops, factor staging, barrier, accumulators, compute, epilogue */
    TSNode st[12];
    unsigned n = 0;
    for (; !ts_node_is_null(q) && n < 12; q = rb_next_stmt(q)) st[n++] = q;
    if (n < 7 || !rb_is(st[0], "for_statement") || !rb_is(st[1], "for_statement") || !rb_is_syncthreads(ctx, st[2]) ||
        !rb_is(st[n - 2], "for_statement") || !rb_is(st[n - 1], "for_statement"))
        return RPWHY("%s:%u: the register tile is not laid out as apply writes it", src, kl_ast_line(decl));
    p->ly = st[0], p->stage = st[1], p->yloop = st[n - 2], p->epi = st[n - 1];
    p->lx = only_for(rb_field(p->ly, "body"));
    if (ts_node_is_null(p->lx)) {
        TSNode b = rb_field(p->ly, "body");
        for (uint32_t k = 0; k < ts_node_named_child_count(b); k++)
            if (rb_is(ts_node_named_child(b, k), "for_statement")) p->lx = ts_node_named_child(b, k);
    }
    if (ts_node_is_null(p->lx)) return RPWHY("%s:%u: the tile load is not as apply writes it", src, kl_ast_line(p->ly));
    return true;
#undef RPWHY
}

/* Text with every `(threadIdx.x * N)` / `(blockIdx.x * N)` back to threadIdx.x / blockIdx.x. */
static char *unsubst(const char *t, int ox)
{
    char a[48], b[48];
    kl_snprintf(a, sizeof a, "(threadIdx.x * %d)", ox);
    kl_snprintf(b, sizeof b, "(blockIdx.x * %d)", ox);
    kl_strbuf sb = KL_STRBUF_INIT;
    for (const char *s = t; *s;) {
        if (!strncmp(s, a, strlen(a))) kl_strbuf_adds(&sb, "threadIdx.x"), s += strlen(a);
        else if (!strncmp(s, b, strlen(b))) kl_strbuf_adds(&sb, "blockIdx.x"), s += strlen(b);
        else kl_strbuf_add(&sb, s++, 1);
    }
    return kl_strbuf_detach(&sb, NULL);
}

/* The statements of a loop body after its first (the offset declaration), each on its line. */
static void body_decls_after_first(const kl_rule_ctx *ctx, TSNode loop, const char *ind, kl_strbuf *sb, TSNode stop)
{
    TSNode b = rb_field(loop, "body");
    TSNode st[16];
    unsigned n = stmts_of(b, st, 16);
    for (unsigned k = 1; k < n && k < 16; k++) {
        if (!ts_node_is_null(stop) && ts_node_eq(st[k], stop)) break;
        if (!rb_is(st[k], "declaration")) continue;
        char *t = rb_text(ctx, st[k]);
        if (t) kl_strbuf_addf(sb, "%s%s\n", ind, t);
        free(t);
    }
}

static kl_status remove_rt(const kl_rule_ctx *ctx, TSNode fn, const rtp *p, kl_edits *out, kl_error *err)
{
    const char *src = kl_source_name(ctx->src);
    if (p->why[0]) return kl_rule_not_applicable(err, "%s", p->why);
    TSNode body = kl_ast_function_body(fn);
    char ind[64], unit[64] = "    ";
    rb_indent_of(ctx, ts_node_start_byte(p->decl), ind, sizeof ind);
    if (!ind[0] || strchr(ind, '\t')) kl_snprintf(unit, sizeof unit, "    ");
    else kl_snprintf(unit, sizeof unit, "%s", ind);
    kl_status st = KL_OK;
    kl_strbuf sb = KL_STRBUF_INIT;
    char *top = NULL, *pre = NULL, *inner = NULL, *guard = NULL;
    top = kl_strndup(ctx->text + p->top_a, p->top_b - p->top_a);
    char *top2 = top ? unsubst(top, p->ox) : NULL;
    free(top);
    top = top2;
    pre = rb_reindent(ctx->text + p->pre_a, p->pre_b - p->pre_a, (int)strlen(unit));
    if (!top || !pre) goto oom;
    kl_strbuf_adds(&sb, top);
    if (!ts_node_is_null(p->cond_if)) {
        TSNode cons = rb_field(p->orig_if, "consequence");
        uint32_t a = rb_line_end(ctx, ts_node_start_byte(cons)), b = rb_line_start(ctx, ts_node_end_byte(cons) - 1);
        char cind[64];
        rb_indent_of(ctx, a, cind, sizeof cind);
        inner = b > a ? rb_reindent(ctx->text + a, b - a, (int)(strlen(ind) + strlen(unit)) - (int)strlen(cind)) : NULL;
        guard = rb_text(ctx, if_cond(p->orig_if));
        if (!inner || !guard) {
            st = kl_rule_not_applicable(err, "%s:%u: the original loop under else cannot be moved back", src,
                                        kl_ast_line(p->orig_if));
            goto done;
        }
        kl_strbuf_addf(&sb, "%sif (%s) {\n%s%s%s}\n", ind, guard, pre, inner, ind);
    } else {
        /* rebuild: the load's offsets and locals, guard and read; the factor; the sum; the epilogue's guard and store */
        TSNode lyb = rb_field(p->ly, "body"), lxb = rb_field(p->lx, "body");
        TSNode ys[16], xs[16], ss[8], es[24];
        unsigned ny = stmts_of(lyb, ys, 16), nx = stmts_of(lxb, xs, 16), ns = stmts_of(rb_field(p->stage, "body"), ss, 8);
        unsigned ne = stmts_of(rb_field(p->epi, "body"), es, 24);
        TSNode store = nx ? xs[nx - 1] : (TSNode){0};
        TSNode asg = rb_is(store, "expression_statement") ? ts_node_named_child(store, 0) : (TSNode){0};
        TSNode val = rb_is(asg, "assignment_expression") ? rb_field(asg, "right") : (TSNode){0};
        TSNode fst = ns ? ss[ns - 1] : (TSNode){0};
        TSNode fasg = rb_is(fst, "expression_statement") ? ts_node_named_child(fst, 0) : (TSNode){0};
        TSNode eif = ne ? es[ne - 1] : (TSNode){0};
        TSNode accasg = ne >= 2 && rb_is(es[ne - 2], "expression_statement") ? ts_node_named_child(es[ne - 2], 0) : (TSNode){0};
        TSNode xin = rb_field(p->yloop, "body");
        TSNode xloop = {0};
        for (uint32_t k = 0; k < ts_node_named_child_count(xin); k++)
            if (rb_is(ts_node_named_child(xin, k), "for_statement")) xloop = ts_node_named_child(xin, k);
        if (!ny || !nx || !rb_is(val, "conditional_expression") || !rb_is(fasg, "assignment_expression") ||
            !rb_is(eif, "if_statement") || !rb_is(accasg, "assignment_expression") || ts_node_is_null(xloop)) {
            st = kl_rule_not_applicable(err, "%s:%u: the register tile is not laid out as apply writes it", src, kl_ast_line(p->decl));
            goto done;
        }
        char *cond = rb_text(ctx, rb_field(val, "condition")), *read = rb_text(ctx, rb_field(val, "consequence"));
        char *fac = rb_text(ctx, rb_field(fasg, "right")), *acc = rb_text(ctx, rb_field(accasg, "left"));
        guard = rb_text(ctx, if_cond(eif));
        TSNode econs = rb_field(eif, "consequence");
        uint32_t ea = rb_line_end(ctx, ts_node_start_byte(econs)), eb = rb_line_start(ctx, ts_node_end_byte(econs) - 1);
        char eind[64];
        rb_indent_of(ctx, ea, eind, sizeof eind);
        char *post = eb > ea ? rb_reindent(ctx->text + ea, eb - ea, (int)(strlen(ind) + strlen(unit)) - (int)strlen(eind)) : NULL;
        if (cond && read && fac && acc && guard && post) {
            char i1[160], i2[160], i3[160];
            kl_snprintf(i1, sizeof i1, "%s%s", ind, unit);
            kl_snprintf(i2, sizeof i2, "%s%s", i1, unit);
            kl_snprintf(i3, sizeof i3, "%s%s", i2, unit);
            uint32_t ya = ts_node_start_byte(p->yloop), yb = ts_node_start_byte(rb_field(p->yloop, "body"));
            uint32_t xa = ts_node_start_byte(xloop), xb = ts_node_start_byte(rb_field(xloop, "body"));
            kl_strbuf_addf(&sb, "%sif (%s) {\n%s", ind, guard, pre);
            kl_strbuf_addf(&sb, "%s%.*s{\n", i1, (int)(yb - ya), ctx->text + ya);
            body_decls_after_first(ctx, p->ly, i2, &sb, p->lx);
            kl_strbuf_addf(&sb, "%s%.*s{\n", i2, (int)(xb - xa), ctx->text + xa);
            body_decls_after_first(ctx, p->lx, i3, &sb, store);
            kl_strbuf_addf(&sb, "%sif (%s) %s += %s * %s;\n%s}\n%s}\n%s%s}\n", i3, cond, acc, fac, read, i2, i1, post, ind);
        } else st = KL_ERR_NOMEM;
        free(cond);
        free(read);
        free(fac);
        free(acc);
        free(post);
        if (st != KL_OK) goto oom;
    }
    if (sb.failed) goto oom;
    st = kl_edits_add(out, p->top_a, rb_line_start(ctx, ts_node_end_byte(body) - 1), kl_strbuf_str(&sb));
    /* the grids: (G + N - 1) / N -> G */
    if (st == KL_OK) {
        rb_func fs[64];
        unsigned nf = rb_functions(ctx, fs, 64);
        const rb_func *f = NULL;
        for (unsigned i = 0; i < nf && !f; i++)
            if (ts_node_eq(fs[i].def, fn)) f = &fs[i];
        rb_launch ls[16];
        unsigned nl = f ? rb_launches(ctx, f->name, ls, 16) : 0;
        uint32_t done[16];
        unsigned nd = 0;
        for (unsigned i = 0; i < nl && st == KL_OK; i++) {
            TSNode list = ls[i].ncfg ? rb_dim3_args(ctx, &ls[i], ls[i].cfg[0]) : (TSNode){0};
            TSNode ex = ts_node_is_null(list) ? list : strip(rb_dim3_extent(list, 0));
            TSNode num = rb_is(ex, "binary_expression") ? strip(rb_field(ex, "left")) : (TSNode){0};
            long long d = 0, a1 = 0;
            if (!rb_is(num, "binary_expression") || !text_is(ctx, rb_field(ex, "operator"), "/") ||
                !rb_const_eval(ctx, (TSNode){0}, rb_field(ex, "right"), &d) || d != p->ox ||
                !text_is(ctx, rb_field(num, "operator"), "+") ||
                !rb_const_eval(ctx, (TSNode){0}, rb_field(num, "right"), &a1) || a1 != p->ox - 1) {
                st = kl_rule_not_applicable(err, "%s:%u: the grid of this launch is not `(G + %d) / %d`", src,
                                            kl_node_span(ls[i].call).line, p->ox - 1, p->ox);
                break;
            }
            if (rb_is(ls[i].cfg[0], "identifier")) {
                /* a grid local shared with other kernels' launches stays: they were widened with it */
                char nm[64];
                squeezed(ctx, ls[i].cfg[0], nm, sizeof nm);
                unsigned mine = 0;
                for (unsigned j = 0; j < nl; j++)
                    if (ts_node_eq(ls[j].host.def, ls[i].host.def) && text_is(ctx, ls[j].cfg[0], nm)) mine++;
                if (uses_of(ctx, ls[i].host.body, nm) != 1 + mine) {
                    st = kl_rule_not_applicable(err, "%s:%u: the grid '%s' is used by other launches too", src,
                                                kl_node_span(ls[i].cfg[0]).line, nm);
                    break;
                }
            }
            bool seen = false;
            for (unsigned j = 0; j < nd; j++) seen |= done[j] == ts_node_start_byte(ex);
            if (seen) continue;
            if (nd < 16) done[nd++] = ts_node_start_byte(ex);
            TSNode g = rb_field(num, "left");
            char *gt = rb_text(ctx, g);
            st = gt ? kl_edits_add(out, ts_node_start_byte(rb_dim3_extent(list, 0)), ts_node_end_byte(rb_dim3_extent(list, 0)), gt)
                    : KL_ERR_NOMEM;
            free(gt);
        }
    }
    goto done;
oom:
    st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
done:
    kl_strbuf_release(&sb);
    free(top);
    free(pre);
    free(inner);
    free(guard);
    if (st == KL_ERR_NOMEM && err->status != KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

/* ---- find, and running a site ---------------------------------------------------------------------- */

typedef struct shared_list {
    const kl_rule_ctx *ctx;
    TSNode items[16];
    unsigned n;
} shared_list;

static bool shared_visit(TSNode n, void *user)
{
    shared_list *s = user;
    if (rb_is(n, "declaration")) {
        char t[32];
        squeezed(s->ctx, n, t, sizeof t);
        if (!strncmp(t, "__shared__", 10) && s->n < 16) s->items[s->n++] = n;
        return false;
    }
    return true;
}

/* A candidate dot-product loop for apply: a top-level loop (in the kernel or its guard) whose body
 * accumulates with `+=` from a subscript varying along it. */
static bool apply_candidate(const kl_rule_ctx *ctx, kl_affine_ctx *ax, unsigned li)
{
    const kl_ax_loop *L = kl_affine_loop(ax, li);
    if (L->kind != KL_LOOP_FOR || !L->var || L->parent >= 0) return false;
    TSNode body = rb_field(L->node, "body");
    if (count_type(body, "for_statement", NULL) || count_type(body, "while_statement", NULL)) return false;
    for (unsigned i = 0; i < kl_affine_access_count(ax); i++) {
        const kl_ax_access *a = kl_affine_access(ax, i);
        if (a->is_shared || a->write || !node_in(a->node, body)) continue;
        if (uses_of(ctx, a->node, L->var)) return true;
    }
    return false;
}

typedef struct run_state {
    const kl_site *site;       /* NULL: find */
    kl_sites *out;
    const json_t *params;
    kl_edits *edits;
    bool done;
} run_state;

static kl_status visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    run_state *r = user;
    kl_error *err = NULL;
    (void)err;
    kl_status st = KL_OK;
    char id[256], note[600];
    /* present: GEMM tile loops */
    for (unsigned li = 0; li < kl_affine_loop_count(ax); li++) {
        const kl_ax_loop *L = kl_affine_loop(ax, li);
        if (L->kind != KL_LOOP_FOR) continue;
        gp p;
        if (!analyse_present(ctx, ax, fn, L->node, &p)) continue;
        kl_site_id(id, sizeof id, name, L->node, NULL);
        if (r->site) {
            if (r->site->dir != KL_SITE_PRESENT || strcmp(r->site->id, id)) continue;
            r->done = true;
            return KL_OK;
        }
        json_t *feat = json_pack("{s:s, s:s, s:s, s:s, s:s}", "shape", "gemm", "tiles", p.ld[0].arr, "tiles_b", p.ld[1].arr,
                                 "operands", p.ld[0].garr, "guard", p.form == 'I' ? "if" : p.form == 'R' ? "early-return" : "none");
        json_object_set_new(feat, "operand_b", json_string(p.ld[1].garr));
        if (p.why[0]) json_object_set_new(feat, "why_not", json_string(p.why));
        if (p.why[0]) kl_snprintf(note, sizeof note, "not applicable: %s", p.why);
        else kl_snprintf(note, sizeof note, "tiles '%s' and '%s' of '%s' and '%s' over '%s'", p.ld[0].arr, p.ld[1].arr,
                         p.ld[0].garr, p.ld[1].garr, p.T->var);
        st = kl_sites_add(r->out, id, KL_SITE_PRESENT, kl_node_span(L->node), name, feat, json_object(), note);
        if (st != KL_OK) return st;
    }
    /* present: staged tiles read after one barrier */
    shared_list sl = {.ctx = ctx};
    rb_walk(kl_ast_function_body(fn), shared_visit, &sl);
    for (unsigned i = 0; i < sl.n; i++) {
        rtp rp;
        if (analyse_rt_present(ctx, fn, sl.items[i], &rp)) {
            char arr[64];
            TSNode dn = rb_declarator_name(rb_field(sl.items[i], "declarator"));
            squeezed(ctx, dn, arr, sizeof arr);
            kl_site_id(id, sizeof id, name, sl.items[i], arr);
            json_t *feat = json_pack("{s:s, s:s, s:i, s:b}", "shape", "stencil", "tile", arr, "outputs_x", rp.ox, "fallback",
                                     !ts_node_is_null(rp.cond_if));
            if (rp.why[0]) json_object_set_new(feat, "why_not", json_string(rp.why));
            kl_snprintf(note, sizeof note, "stencil tile '%s' with its halo, %d outputs per thread along x (a register tile)",
                        arr, rp.ox);
            char oxs[8];
            kl_snprintf(oxs, sizeof oxs, "%d", rp.ox);
            st = kl_sites_add(r->out, id, KL_SITE_PRESENT, kl_node_span(sl.items[i]), name, feat,
                              json_pack("{s:s}", "outputs_x", oxs), note);
            if (st != KL_OK) return st;
            i++; /* the factor tile after it belongs to the site */
            continue;
        }
        sp q;
        if (analyse_stencil_present(ctx, ax, fn, sl.items[i], &q)) {
            kl_site_id(id, sizeof id, name, q.load, q.arr);
            json_t *feat = json_pack("{s:s, s:s, s:i, s:b}", "shape", "stencil", "tile", q.arr, "dims", (int)q.nd,
                                     "fallback", q.runtime);
            kl_snprintf(note, sizeof note, "stencil tile '%s' with its halo, loaded by the block%s", q.arr,
                        q.runtime ? " (a global-memory fallback beside it)" : "");
            st = kl_sites_add(r->out, id, KL_SITE_PRESENT, kl_node_span(q.load), name, feat, json_object(), note);
            if (st != KL_OK) return st;
            continue;
        }
        hp h;
        if (!analyse_halo(ctx, ax, fn, sl.items[i], &h)) continue;
        kl_site_id(id, sizeof id, name, h.load, h.arr);
        if (r->site) {
            if (r->site->dir != KL_SITE_PRESENT || strcmp(r->site->id, id)) continue;
            r->done = true;
            return KL_OK;
        }
        json_t *feat = json_pack("{s:s, s:s, s:s}", "shape", "staged", "tile", h.arr, "dtype", h.elem);
        if (h.why[0]) json_object_set_new(feat, "why_not", json_string(h.why));
        if (h.why[0]) kl_snprintf(note, sizeof note, "not applicable: %s", h.why);
        else kl_snprintf(note, sizeof note, "tile '%s' loaded once, read after a barrier", h.arr);
        st = kl_sites_add(r->out, id, KL_SITE_PRESENT, kl_node_span(h.load), name, feat, json_object(), note);
        if (st != KL_OK) return st;
    }
    /* applicable: dot-product loops of kernels */
    if (!kl_ast_function_has(ctx->src, fn, "__global__")) return KL_OK;
    for (unsigned li = 0; li < kl_affine_loop_count(ax); li++) {
        if (stencil_candidate(ctx, ax, li)) {
            const kl_ax_loop *L = kl_affine_loop(ax, li);
            kl_site_id(id, sizeof id, name, L->node, NULL);
            sa s;
            bool ok = analyse_stencil(ctx, ax, fn, name, L->node, &s);
            json_t *feat = json_pack("{s:s, s:s}", "shape", "stencil", "loop_var", L->var);
            if (ok) {
                bool runtime = false;
                for (unsigned d = 0; d < s.nd; d++) runtime |= !s.d[d].fixed;
                json_object_set_new(feat, "operand", json_string(s.arr));
                json_object_set_new(feat, "dtype", json_string(s.elem));
                json_object_set_new(feat, "dims", json_integer((json_int_t)s.nd));
                json_object_set_new(feat, "block_x", json_integer((json_int_t)s.dim[0]));
                json_object_set_new(feat, "block_y", json_integer((json_int_t)s.dim[1]));
                json_object_set_new(feat, "extent", json_string(runtime ? "runtime" : "fixed"));
                json_object_set_new(feat, "guard",
                                    json_string(s.form == 'I' ? "if" : s.form == 'R' ? "early-return" : "none"));
                kl_snprintf(note, sizeof note, "'%s' re-read around each thread's pixel: a %s halo tile in shared memory",
                            s.arr, s.nd == 2 ? "2-D" : "1-D");
            } else {
                json_object_set_new(feat, "why_not", json_string(s.why));
                kl_snprintf(note, sizeof note, "not applicable: %s", s.why);
            }
            st = kl_sites_add(r->out, id, KL_SITE_APPLICABLE, kl_node_span(L->node), name, feat, NULL, note);
            if (st != KL_OK) return st;
            continue;
        }
        if (!apply_candidate(ctx, ax, li)) continue;
        const kl_ax_loop *L = kl_affine_loop(ax, li);
        kl_site_id(id, sizeof id, name, L->node, NULL);
        if (r->site) {
            if (r->site->dir != KL_SITE_APPLICABLE || strcmp(r->site->id, id)) continue;
            r->done = true;
            return KL_OK;
        }
        ga g;
        bool ok = analyse_apply(ctx, ax, fn, name, L->node, &g);
        json_t *feat = json_pack("{s:s, s:s}", "shape", "gemm", "loop_var", L->var);
        if (ok) {
            json_object_set_new(feat, "operand_a", json_string(g.arr[0]));
            json_object_set_new(feat, "operand_b", json_string(g.arr[1]));
            json_object_set_new(feat, "dtype", json_string(g.elem[0]));
            json_object_set_new(feat, "block", json_integer((json_int_t)g.dim[0]));
            json_object_set_new(feat, "guard", json_string(g.form == 'I' ? "if" : g.form == 'R' ? "early-return" : "none"));
            kl_snprintf(note, sizeof note, "'%s' and '%s' re-read from global memory along '%s': %lldx%lld tiles",
                        g.arr[0], g.arr[1], L->var, (long long)g.dim[0], (long long)g.dim[0]);
        } else {
            json_object_set_new(feat, "why_not", json_string(g.why));
            kl_snprintf(note, sizeof note, "not applicable: %s", g.why);
        }
        ga_release(&g);
        st = kl_sites_add(r->out, id, KL_SITE_APPLICABLE, kl_node_span(L->node), name, feat, NULL, note);
        if (st != KL_OK) return st;
    }
    return KL_OK;
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    run_state r = {NULL, out, NULL, NULL, false};
    return kl_rules_each_function(ctx, "__global__", visit, &r, err);
}

typedef struct exec_state {
    const kl_site *site;
    const json_t *params;
    kl_edits *out;
    kl_error *err;
    bool done;
    kl_status st;
} exec_state;

static kl_status exec_visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    exec_state *x = user;
    if (x->done || strcmp(name, x->site->kernel)) return KL_OK;
    char id[256];
    if (x->site->dir == KL_SITE_PRESENT) {
        for (unsigned li = 0; li < kl_affine_loop_count(ax); li++) {
            const kl_ax_loop *L = kl_affine_loop(ax, li);
            gp p;
            if (L->kind != KL_LOOP_FOR || !analyse_present(ctx, ax, fn, L->node, &p)) continue;
            kl_site_id(id, sizeof id, name, L->node, NULL);
            if (strcmp(id, x->site->id)) continue;
            x->done = true;
            x->st = remove_gemm(ctx, ax, &p, x->out, x->err);
            return KL_OK;
        }
        shared_list sl = {.ctx = ctx};
        rb_walk(kl_ast_function_body(fn), shared_visit, &sl);
        for (unsigned i = 0; i < sl.n; i++) {
            rtp rp;
            if (analyse_rt_present(ctx, fn, sl.items[i], &rp)) {
                char arr[64];
                squeezed(ctx, rb_declarator_name(rb_field(sl.items[i], "declarator")), arr, sizeof arr);
                kl_site_id(id, sizeof id, name, sl.items[i], arr);
                if (strcmp(id, x->site->id)) {
                    i++;
                    continue;
                }
                x->done = true;
                x->st = remove_rt(ctx, fn, &rp, x->out, x->err);
                return KL_OK;
            }
            sp q;
            if (analyse_stencil_present(ctx, ax, fn, sl.items[i], &q)) {
                kl_site_id(id, sizeof id, name, q.load, q.arr);
                if (strcmp(id, x->site->id)) continue;
                x->done = true;
                x->st = remove_stencil(ctx, ax, fn, &q, x->out, x->err);
                return KL_OK;
            }
            hp h;
            if (!analyse_halo(ctx, ax, fn, sl.items[i], &h)) continue;
            kl_site_id(id, sizeof id, name, h.load, h.arr);
            if (strcmp(id, x->site->id)) continue;
            x->done = true;
            x->st = remove_halo(ctx, ax, fn, &h, x->out, x->err);
            return KL_OK;
        }
        return KL_OK;
    }
    for (unsigned li = 0; li < kl_affine_loop_count(ax); li++) {
        if (stencil_candidate(ctx, ax, li)) {
            const kl_ax_loop *L = kl_affine_loop(ax, li);
            kl_site_id(id, sizeof id, name, L->node, NULL);
            if (strcmp(id, x->site->id)) continue;
            x->done = true;
            sa s;
            if (!analyse_stencil(ctx, ax, fn, name, L->node, &s)) {
                x->st = kl_rule_not_applicable(x->err, "%s", s.why);
                return KL_OK;
            }
            int64_t maxr = 4;
            if (x->params && json_object_get(x->params, "max_radius") &&
                !kl_rule_param_int(&kl_rule_smem_tile, x->params, "max_radius", &maxr)) {
                x->st = kl_rule_not_applicable(x->err, "%s: max_radius is not an integer", kl_source_name(ctx->src));
                return KL_OK;
            }
            int64_t ox = 1;
            if (x->params && json_object_get(x->params, "outputs_x") &&
                (!kl_rule_param_int(&kl_rule_smem_tile, x->params, "outputs_x", &ox) || (ox != 1 && ox != 2 && ox != 4))) {
                x->st = kl_error_set(x->err, KL_ERR_INVALID, "%s: outputs_x must be 1, 2 or 4", kl_source_name(ctx->src));
                return KL_OK;
            }
            x->st = ox > 1 ? apply_stencil_rt(ctx, &s, maxr, (int)ox, x->out, x->err) : apply_stencil(ctx, &s, maxr, x->out, x->err);
            return KL_OK;
        }
        if (!apply_candidate(ctx, ax, li)) continue;
        const kl_ax_loop *L = kl_affine_loop(ax, li);
        kl_site_id(id, sizeof id, name, L->node, NULL);
        if (strcmp(id, x->site->id)) continue;
        x->done = true;
        ga g;
        if (!analyse_apply(ctx, ax, fn, name, L->node, &g)) {
            x->st = kl_rule_not_applicable(x->err, "%s", g.why);
            ga_release(&g);
            return KL_OK;
        }
        int64_t tile = 0;
        const char *tv = NULL;
        kl_rule_param_str(&kl_rule_smem_tile, x->params, "tile", &tv);
        json_t *given = x->params ? json_object_get(x->params, "tile") : NULL;
        if (!given) tile = g.dim[0];
        else if (!kl_rule_param_int(&kl_rule_smem_tile, x->params, "tile", &tile)) tile = -1;
        x->st = apply_gemm(ctx, &g, tile, x->out, x->err);
        ga_release(&g);
        return KL_OK;
    }
    return KL_OK;
}

static kl_status exec(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    exec_state x = {site, params, out, err, false, KL_OK};
    kl_status st = kl_rules_each_function(ctx, "__global__", exec_visit, &x, err);
    if (st != KL_OK) return st;
    if (!x.done)
        return kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no %s site '%s'", kl_source_name(ctx->src), NAME, site->id);
    return x.st;
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    return exec(ctx, site, NULL, out, err);
}

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    return exec(ctx, site, params, out, err);
}

const kl_rule kl_rule_smem_tile = {
    NAME,
    "operands re-read from global memory in a loop (dot products, stencils with halos) -> cooperative "
    "shared-memory tiles with barriers",
    st_params,
    sizeof st_params / sizeof st_params[0],
    find,
    remove_site,
    apply,
};
