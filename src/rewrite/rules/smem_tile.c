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

#include "rewrite/rules/smem_tile.h"
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


TSNode smem_tile__strip(TSNode n)
{
    while (rt_is(n, "parenthesized_expression") && ts_node_named_child_count(n) == 1) n = ts_node_named_child(n, 0);
    return n;
}

bool smem_tile__text_is(const kl_rule_ctx *ctx, TSNode n, const char *s) { return !ts_node_is_null(n) && rt_text_is(ctx, n, s); }

bool smem_tile__node_in(TSNode n, TSNode outer)
{
    return ts_node_start_byte(n) >= ts_node_start_byte(outer) && ts_node_end_byte(n) <= ts_node_end_byte(outer);
}

/* The text of n without blanks, into buf. */
void smem_tile__squeezed(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size)
{
    size_t k = 0;
    for (uint32_t i = ts_node_start_byte(n); i < ts_node_end_byte(n) && k + 1 < size; i++)
        if (!isspace((unsigned char)ctx->text[i])) buf[k++] = ctx->text[i];
    buf[k] = '\0';
}

void smem_tile__squeeze_str(const char *s, char *buf, size_t size)
{
    size_t k = 0;
    for (; *s && k + 1 < size; s++)
        if (!isspace((unsigned char)*s)) buf[k++] = *s;
    buf[k] = '\0';
}

const char *smem_tile__binop(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size)
{
    buf[0] = '\0';
    if (!rt_is(n, "binary_expression")) return buf;
    TSNode op = rt_field(n, "operator");
    uint32_t a = ts_node_start_byte(op), b = ts_node_end_byte(op);
    if (b - a < size) {
        memcpy(buf, ctx->text + a, b - a);
        buf[b - a] = '\0';
    }
    return buf;
}

/* Split n on a binary operator (`&&`, `||`, `+`) into its operands, left to right. */
void smem_tile__split_on(const kl_rule_ctx *ctx, TSNode n, const char *op, TSNode *out, unsigned *k, unsigned max)
{
    char b[8];
    TSNode s = smem_tile__strip(n);
    if (!strcmp(smem_tile__binop(ctx, s, b, sizeof b), op)) {
        smem_tile__split_on(ctx, rt_field(s, "left"), op, out, k, max);
        smem_tile__split_on(ctx, rt_field(s, "right"), op, out, k, max);
        return;
    }
    if (*k < max) out[*k] = n;
    (*k)++;
}

/* A comparison's negation as text ("row >= M" -> "row < M"); other conditions become !(c). */
char *smem_tile__negate(const kl_rule_ctx *ctx, TSNode c)
{
    static const char *const ops[][2] = {{">=", "<"}, {">", "<="}, {"<=", ">"}, {"<", ">="}, {"==", "!="}, {"!=", "=="}};
    char b[8];
    TSNode s = smem_tile__strip(c);
    smem_tile__binop(ctx, s, b, sizeof b);
    kl_strbuf sb = KL_STRBUF_INIT;
    bool done = false;
    for (int i = 0; i < 6 && !done; i++) {
        if (strcmp(b, ops[i][0])) continue;
        TSNode l = rt_field(s, "left"), r = rt_field(s, "right");
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
int smem_tile__depends(kl_affine_ctx *ax, const kl_rule_ctx *ctx, TSNode n, const char *var)
{
    n = smem_tile__strip(n);
    char b[8];
    smem_tile__binop(ctx, n, b, sizeof b);
    if (b[0] && (strchr("<>=!&|", b[0]) != NULL)) {
        int l = smem_tile__depends(ax, ctx, rt_field(n, "left"), var), r = smem_tile__depends(ax, ctx, rt_field(n, "right"), var);
        if (l < 0 || r < 0) return -1;
        return l || r;
    }
    if (rt_is(n, "unary_expression")) return smem_tile__depends(ax, ctx, rt_field(n, "argument"), var);
    kl_affine a = {0};
    if (kl_affine_of(ax, n, &a) != KL_OK) return -1;
    int r = a.ok ? kl_affine_coef(&a, var) != NULL : -1;
    kl_affine_release(&a);
    return r;
}

static int rep_cmp(const void *x, const void *y)
{
    const smem_tile__rep *p = x, *q = y;
    return p->a < q->a ? -1 : p->a > q->a;
}

/* The text [a,b) with the replacements (inside it, not overlapping) done. New string. */
char *smem_tile__splice(const kl_rule_ctx *ctx, uint32_t a, uint32_t b, smem_tile__rep *reps, unsigned n)
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
char *smem_tile__reindent_node_text(const char *first_ind, const char *text, int delta)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_adds(&sb, first_ind);
    kl_strbuf_adds(&sb, text);
    char *full = kl_strbuf_detach(&sb, NULL);
    if (!full) return NULL;
    char *r = rt_reindent(full, strlen(full), delta);
    free(full);
    if (!r) return NULL;
    size_t skip = 0;
    while (r[skip] == ' ' || r[skip] == '\t') skip++;
    char *out = kl_strdup(r + skip);
    free(r);
    return out;
}

/* Identifier uses of name in n, skipping field names. */
unsigned smem_tile__uses_of(const kl_rule_ctx *ctx, TSNode n, const char *name) { return rt_count_ident(ctx, n, name); }

/* A name not used in the function: base, else kl_<base>. */
void smem_tile__fresh_name(const kl_rule_ctx *ctx, TSNode fn, const char *base, char *buf, size_t size)
{
    kl_snprintf(buf, size, "%s", base);
    if (!smem_tile__uses_of(ctx, fn, buf)) return;
    kl_snprintf(buf, size, "kl_%s", base);
    for (int i = 2; smem_tile__uses_of(ctx, fn, buf) && i < 100; i++) kl_snprintf(buf, size, "kl_%s%d", base, i);
}

/* The launch's block extents (x, y, z) of kernel `name`, with the text of each (the constant's
 * name when the launch names one, else the number). A scalar block (`<<<g, BS>>>`) is BS x 1 x 1.
 * False with why when not compile-time constants. */
bool smem_tile__launch_block(const kl_rule_ctx *ctx, const char *name, int64_t dim[3], char text[3][64], char *why,
                         size_t wsize)
{
    rt_launch ls[8];
    unsigned n = rt_launches(ctx, name, ls, 8);
    if (!n) {
        kl_snprintf(why, wsize, "kernel '%s' is not launched in the file: its block size is unknown", name);
        return false;
    }
    for (unsigned i = 0; i < n && i < 8; i++) {
        TSNode cfg = smem_tile__strip(ls[i].cfg[1]);
        TSNode list = {0};
        long long scalar;
        if (!ts_node_is_null(cfg) && !rt_is(cfg, "call_expression") && rt_const_eval(ctx, ls[i].host.body, cfg, &scalar)) {
            /* a 1-D block: a constant number of threads */
            int64_t d[3] = {scalar, 1, 1};
            if (i > 0 && (d[0] != dim[0] || dim[1] != 1 || dim[2] != 1)) {
                kl_snprintf(why, wsize, "kernel '%s' is launched with different block sizes", name);
                return false;
            }
            memcpy(dim, d, sizeof d);
            char t[64];
            smem_tile__squeezed(ctx, cfg, t, sizeof t);
            long long cv;
            bool named = t[0] && (isalpha((unsigned char)t[0]) || t[0] == '_') && rt_const_name(ctx, (TSNode){0}, t, &cv);
            kl_snprintf(text[0], 64, "%s", named ? t : "");
            if (!named) kl_snprintf(text[0], 64, "%lld", scalar);
            kl_snprintf(text[1], 64, "1");
            kl_snprintf(text[2], 64, "1");
            continue;
        }
        if (rt_is(cfg, "call_expression") && smem_tile__text_is(ctx, rt_field(cfg, "function"), "dim3"))
            list = rt_field(cfg, "arguments");
        else if (rt_is(cfg, "identifier")) {
            char *nm = rt_text(ctx, cfg);
            uint32_t c = ts_node_named_child_count(ls[i].host.body);
            for (uint32_t k = 0; nm && k < c; k++) {
                TSNode d = ts_node_named_child(ls[i].host.body, k);
                if (!rt_is(d, "declaration")) continue;
                char ty[64];
                smem_tile__squeezed(ctx, rt_field(d, "type"), ty, sizeof ty);
                if (strcmp(ty, "dim3")) continue;
                TSNode dds[16];
                unsigned ndd = rt_declarators(d, dds, 16);
                for (unsigned j = 0; j < ndd; j++) {
                    TSNode dd = dds[j];
                    TSNode id = kl_ast_declarator_name(dd);
                    if (ts_node_is_null(id) && rt_is(dd, "function_declarator")) id = rt_field(dd, "declarator");
                    if (!smem_tile__text_is(ctx, id, nm)) continue;
                    if (rt_is(dd, "function_declarator")) list = rt_field(dd, "parameters");
                    else if (rt_is(dd, "init_declarator")) {
                        TSNode v = rt_field(dd, "value");
                        if (rt_is(v, "argument_list") || rt_is(v, "initializer_list")) list = v;
                        else if (rt_is(v, "call_expression") && smem_tile__text_is(ctx, rt_field(v, "function"), "dim3"))
                            list = rt_field(v, "arguments");
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
            if (rt_is(a, "parameter_declaration")) {
                char t[64];
                smem_tile__squeezed(ctx, a, t, sizeof t);
                char *end = NULL;
                v = strtoll(t, &end, 10);
                ok = (end && end != t && !*end) || rt_const_name(ctx, (TSNode){0}, t, &v);
            } else ok = rt_const_eval(ctx, ls[i].host.body, a, &v);
            if (!ok) {
                kl_snprintf(why, wsize, "the block extent '%.*s' at line %u is not a compile-time constant",
                            (int)(ts_node_end_byte(a) - ts_node_start_byte(a)), ctx->text + ts_node_start_byte(a),
                            kl_ast_line(a));
                return false;
            }
            d[k] = v;
            char t[64];
            smem_tile__squeezed(ctx, a, t, sizeof t);
            long long cv;
            bool named = t[0] && (isalpha((unsigned char)t[0]) || t[0] == '_') && rt_const_name(ctx, (TSNode){0}, t, &cv);
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
bool smem_tile__elem_of(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *name, char *buf, size_t size)
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
            if (!rt_is(d, "declaration")) continue;
            for (uint32_t k = 0; k < ts_node_named_child_count(d); k++) {
                TSNode dd = ts_node_named_child(d, k);
                TSNode inner = rt_is(dd, "init_declarator") ? rt_field(dd, "declarator") : dd;
                if (!rt_is(inner, "pointer_declarator")) continue;
                if (!smem_tile__text_is(ctx, kl_ast_declarator_name(inner), name)) continue;
                TSNode ty = rt_field(d, "type");
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

void smem_tile__zero_of(const char *elem, char *buf, size_t size)
{
    if (!strcmp(elem, "float")) kl_snprintf(buf, size, "0.0f");
    else if (!strcmp(elem, "double")) kl_snprintf(buf, size, "0.0");
    else kl_snprintf(buf, size, "%s(0.0f)", elem);
}

/* Is the statement `if (c) return;` (or `{ return; }`), no else? */
bool smem_tile__early_return(TSNode st)
{
    if (!rt_is(st, "if_statement") || !ts_node_is_null(rt_field(st, "alternative"))) return false;
    TSNode c = rt_field(st, "consequence");
    if (rt_is(c, "compound_statement") && ts_node_named_child_count(c) == 1) c = ts_node_named_child(c, 0);
    return rt_is(c, "return_statement") && ts_node_named_child_count(c) == 0;
}

TSNode smem_tile__if_cond(TSNode st)
{
    TSNode c = rt_field(st, "condition");
    if (rt_is(c, "condition_clause")) c = rt_field(c, "value");
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
    if (rt_is(n, "lambda_expression")) return false;
    if (rt_is(n, c->type)) {
        if (!c->n) c->first = n;
        c->n++;
    }
    return true;
}

unsigned smem_tile__count_type(TSNode n, const char *type, TSNode *first)
{
    count_scan c = {.type = type};
    kl_ast_walk(n, count_visit, &c);
    if (first) *first = c.first;
    return c.n;
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
    if (rt_is(n, "declaration")) {
        char t[32];
        smem_tile__squeezed(s->ctx, n, t, sizeof t);
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
    TSNode body = rt_field(L->node, "body");
    if (smem_tile__count_type(body, "for_statement", NULL) || smem_tile__count_type(body, "while_statement", NULL)) return false;
    for (unsigned i = 0; i < kl_affine_access_count(ax); i++) {
        const kl_ax_access *a = kl_affine_access(ax, i);
        if (a->is_shared || a->write || !smem_tile__node_in(a->node, body)) continue;
        if (smem_tile__uses_of(ctx, a->node, L->var)) return true;
    }
    return false;
}

/* Listing an applicable site at loop L of fn (a stencil candidate, or a GEMM's dot product). */
static kl_status list_stencil(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *name, const kl_ax_loop *L,
                              const char *id, kl_sites *out)
{
    char note[600];
    smem_tile__sa s;
    bool ok = smem_tile__analyse_stencil(ctx, ax, fn, name, L->node, &s);
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
        json_object_set_new(feat, "guard", json_string(s.form == 'I' ? "if" : s.form == 'R' ? "early-return" : "none"));
        kl_snprintf(note, sizeof note, "'%s' re-read around each thread's pixel: a %s halo tile in shared memory", s.arr,
                    s.nd == 2 ? "2-D" : "1-D");
    } else {
        json_object_set_new(feat, "why_not", json_string(s.why));
        kl_snprintf(note, sizeof note, "not applicable: %s", s.why);
    }
    return kl_sites_add(out, id, KL_SITE_APPLICABLE, kl_node_span(L->node), name, feat, NULL, note);
}

static kl_status list_gemm(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *name, const kl_ax_loop *L,
                           const char *id, kl_sites *out)
{
    char note[600];
    smem_tile__ga g;
    bool ok = smem_tile__analyse_apply(ctx, ax, fn, name, L->node, &g);
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
    smem_tile__ga_release(&g);
    return kl_sites_add(out, id, KL_SITE_APPLICABLE, kl_node_span(L->node), name, feat, NULL, note);
}

/* Apply at loop L of fn, a stencil candidate, with the site's parameters (max_radius, outputs_x). */
static kl_status apply_stencil_at(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *name, const kl_ax_loop *L,
                                  const json_t *params, kl_edits *out, kl_error *err)
{
    smem_tile__sa s;
    if (!smem_tile__analyse_stencil(ctx, ax, fn, name, L->node, &s)) return kl_rule_not_applicable(err, "%s", s.why);
    int64_t maxr = 4;
    if (params && json_object_get(params, "max_radius") && !kl_rule_param_int(&kl_rule_smem_tile, params, "max_radius", &maxr))
        return kl_rule_not_applicable(err, "%s: max_radius is not an integer", kl_source_name(ctx->src));
    int64_t ox = 1;
    if (params && json_object_get(params, "outputs_x") &&
        (!kl_rule_param_int(&kl_rule_smem_tile, params, "outputs_x", &ox) || (ox != 1 && ox != 2 && ox != 4)))
        return kl_error_set(err, KL_ERR_INVALID, "%s: outputs_x must be 1, 2 or 4", kl_source_name(ctx->src));
    return ox > 1 ? smem_tile__apply_stencil_rt(ctx, &s, maxr, (int)ox, out, err) : smem_tile__apply_stencil(ctx, &s, maxr, out, err);
}

/* Apply at loop L of fn, a GEMM candidate, with the site's tile (default: the block's extent). */
static kl_status apply_gemm_at(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *name, const kl_ax_loop *L,
                               const json_t *params, kl_edits *out, kl_error *err)
{
    smem_tile__ga g;
    kl_status st;
    if (!smem_tile__analyse_apply(ctx, ax, fn, name, L->node, &g)) {
        st = kl_rule_not_applicable(err, "%s", g.why);
    } else {
        int64_t tile = g.dim[0];
        if (params && json_object_get(params, "tile") && !kl_rule_param_int(&kl_rule_smem_tile, params, "tile", &tile)) tile = -1;
        st = smem_tile__apply_gemm(ctx, &g, tile, out, err);
    }
    smem_tile__ga_release(&g);
    return st;
}

/* Finding the sites (run.site NULL: each goes into out) or running one (run.site: the one whose id it
 * is rewrites, in the direction of the site). */
typedef struct run_state {
    rt_run run;
    kl_sites *out;
} run_state;

/* Is the site at id the one being run? Then it is done. */
static bool run_here(run_state *r, const char *id)
{
    if (strcmp(id, r->run.site->id)) return false;
    r->run.done = true;
    return true;
}

/* The sites where the optimization is present: GEMM tile loops, staged tiles, lambdas' register stashes. */
static kl_status visit_present(run_state *r, const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax)
{
    const kl_site *site = r->run.site;
    kl_status st = KL_OK;
    char id[256], note[600];
    /* GEMM tile loops */
    for (unsigned li = 0; li < kl_affine_loop_count(ax); li++) {
        const kl_ax_loop *L = kl_affine_loop(ax, li);
        if (L->kind != KL_LOOP_FOR) continue;
        smem_tile__gp p;
        if (!smem_tile__analyse_present(ctx, ax, fn, L->node, &p)) continue;
        kl_site_id(id, sizeof id, name, L->node, NULL);
        if (site) {
            if (!run_here(r, id)) continue;
            r->run.st = smem_tile__remove_gemm(ctx, ax, &p, r->run.out, r->run.err);
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
    /* staged tiles read after one barrier */
    shared_list sl = {.ctx = ctx};
    kl_ast_walk(kl_ast_function_body(fn), shared_visit, &sl);
    for (unsigned i = 0; i < sl.n; i++) {
        smem_tile__rtp rp;
        if (smem_tile__analyse_rt_present(ctx, fn, sl.items[i], &rp)) {
            char arr[64];
            TSNode dn = kl_ast_declarator_name(rt_field(sl.items[i], "declarator"));
            smem_tile__squeezed(ctx, dn, arr, sizeof arr);
            kl_site_id(id, sizeof id, name, sl.items[i], arr);
            if (site && run_here(r, id)) {
                r->run.st = smem_tile__remove_rt(ctx, fn, &rp, r->run.out, r->run.err);
                return KL_OK;
            }
            if (!site) {
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
            }
            i++; /* the factor tile after it belongs to the site */
            continue;
        }
        smem_tile__sp q;
        if (smem_tile__analyse_stencil_present(ctx, ax, fn, sl.items[i], &q)) {
            kl_site_id(id, sizeof id, name, q.load, q.arr);
            if (site) {
                if (!run_here(r, id)) continue;
                r->run.st = smem_tile__remove_stencil(ctx, ax, fn, &q, r->run.out, r->run.err);
                return KL_OK;
            }
            json_t *feat = json_pack("{s:s, s:s, s:i, s:b}", "shape", "stencil", "tile", q.arr, "dims", (int)q.nd,
                                     "fallback", q.runtime);
            kl_snprintf(note, sizeof note, "stencil tile '%s' with its halo, loaded by the block%s", q.arr,
                        q.runtime ? " (a global-memory fallback beside it)" : "");
            st = kl_sites_add(r->out, id, KL_SITE_PRESENT, kl_node_span(q.load), name, feat, json_object(), note);
            if (st != KL_OK) return st;
            continue;
        }
        smem_tile__hp h;
        if (!smem_tile__analyse_halo(ctx, ax, fn, sl.items[i], &h)) continue;
        kl_site_id(id, sizeof id, name, h.load, h.arr);
        if (site) {
            if (!run_here(r, id)) continue;
            r->run.st = smem_tile__remove_halo(ctx, ax, fn, &h, r->run.out, r->run.err);
            return KL_OK;
        }
        json_t *feat = json_pack("{s:s, s:s, s:s}", "shape", "staged", "tile", h.arr, "dtype", h.elem);
        if (h.why[0]) json_object_set_new(feat, "why_not", json_string(h.why));
        if (h.why[0]) kl_snprintf(note, sizeof note, "not applicable: %s", h.why);
        else kl_snprintf(note, sizeof note, "tile '%s' loaded once, read after a barrier", h.arr);
        st = kl_sites_add(r->out, id, KL_SITE_PRESENT, kl_node_span(h.load), name, feat, json_object(), note);
        if (st != KL_OK) return st;
    }
    /* tiles staged through registers by lambdas */
    char why[480], what[64];
    TSNode at;
    if (!smem_tile__lambda_site(ctx, fn, why, sizeof why, &at, what, sizeof what)) return KL_OK;
    kl_site_id(id, sizeof id, name, at, what);
    if (site) {
        if (run_here(r, id)) r->run.st = smem_tile__remove_lambda(ctx, fn, r->run.out, r->run.err);
        return KL_OK;
    }
    json_t *feat = json_pack("{s:s, s:s}", "shape", "lambda", "stash", what);
    if (why[0]) json_object_set_new(feat, "why_not", json_string(why));
    if (why[0]) kl_snprintf(note, sizeof note, "not applicable: %s", why);
    else kl_snprintf(note, sizeof note, "tiles stored by '%s' from registers a lambda fetched", what);
    return kl_sites_add(r->out, id, KL_SITE_PRESENT, kl_node_span(at), name, feat, json_object(), note);
}

/* The sites where it could be applied: stencils and dot-product loops of kernels. */
static kl_status visit_applicable(run_state *r, const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax)
{
    const kl_site *site = r->run.site;
    char id[256];
    if (!kl_ast_function_has(ctx->src, fn, "__global__")) return KL_OK;
    for (unsigned li = 0; li < kl_affine_loop_count(ax); li++) {
        bool stencil = smem_tile__stencil_candidate(ctx, ax, li);
        if (!stencil && !apply_candidate(ctx, ax, li)) continue;
        const kl_ax_loop *L = kl_affine_loop(ax, li);
        kl_site_id(id, sizeof id, name, L->node, NULL);
        if (site) {
            if (!run_here(r, id)) continue;
            r->run.st = stencil ? apply_stencil_at(ctx, ax, fn, name, L, r->run.params, r->run.out, r->run.err)
                                : apply_gemm_at(ctx, ax, fn, name, L, r->run.params, r->run.out, r->run.err);
            return KL_OK;
        }
        kl_status st = stencil ? list_stencil(ctx, ax, fn, name, L, id, r->out) : list_gemm(ctx, ax, fn, name, L, id, r->out);
        if (st != KL_OK) return st;
    }
    return KL_OK;
}

static kl_status visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    run_state *r = user;
    const kl_site *site = r->run.site;
    if (!site) {
        kl_status st = visit_present(r, ctx, name, fn, ax);
        return st == KL_OK ? visit_applicable(r, ctx, name, fn, ax) : st;
    }
    if (r->run.done || strcmp(name, site->kernel)) return KL_OK;
    return site->dir == KL_SITE_PRESENT ? visit_present(r, ctx, name, fn, ax) : visit_applicable(r, ctx, name, fn, ax);
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    run_state r = {.run = {.err = err, .st = KL_OK}, .out = out};
    return kl_rules_each_function(ctx, "__global__", visit, &r, err);
}

static kl_status exec(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    run_state x = {.run = {site, params, out, err, false, KL_OK}};
    kl_status st = kl_rules_each_function(ctx, "__global__", visit, &x, err);
    if (st != KL_OK) return st;
    if (!x.run.done)
        return kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no %s site '%s'", kl_source_name(ctx->src), NAME, site->id);
    return x.run.st;
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

