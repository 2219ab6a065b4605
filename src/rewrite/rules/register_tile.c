/*
 * register-tile — the shared-memory tiled GEMM with one output per thread ↔ TM×TN outputs per
 * thread held in registers (an outer-product update per k).
 *
 * The form chosen: the threads stay (the block keeps its TILE_Y × TILE_X shape) and the block's
 * tile of C grows to (TM·TILE) × (TN·TILE). Thread (ty, tx) computes the outputs of the
 * "virtual" threads (ty + i·TILE, tx + j·TILE), i < TM, j < TN — the original statements run
 * for each, with the indices substituted:
 *  - blockIdx.p → (blockIdx.p * TM), blockIdx.q → (blockIdx.q * TN) everywhere in the kernel
 *    (p is the thread index of the A tile's row dimension, q the B tile's column one);
 *  - the loads of the A tile run for i < TM with threadIdx.p → (threadIdx.p + kl_i * TILE) and
 *    every local that is threadIdx.p plus a thread-independent value (row, ty) moved the same
 *    way; the B tile's loads for j < TN on the q side; their k offsets stay;
 *  - the A tile's row dimension grows to TM * TILE, the B tile's column dimension to TN * TILE;
 *  - the accumulator becomes `acc[TM][TN]`; the update `acc += e1 * e2` reads TM values e1 and
 *    TN values e2 into registers kl_a / kl_b and updates the TM×TN outer product;
 *  - the statements after the tile loop that use the accumulator (the guarded store) run for
 *    every (i, j) — each output keeps its own guard, so the tails are exact;
 *  - every launch's grid shrinks: its p extent g becomes (g + TM - 1) / TM, its q extent
 *    (g + TN - 1) / TN.
 * Remove is the inverse on that form (recognised by its kl_i / kl_j loops).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/tile_text.h"

#define NAME "register-tile"

/* Return a failing status (out of memory named in err). */
#define RT_TRY(expr)                                                                                 \
    do {                                                                                             \
        kl_status s_ = (expr);                                                                       \
        if (s_ != KL_OK) return s_ == KL_ERR_NOMEM ? kl_error_set(err, s_, "out of memory") : s_;    \
    } while (0)
#define MAXSTMT 64
#define MAXLOCAL 48

static const char *const tm_values[] = {"4", "2", "8", NULL};
static const kl_rule_param rt_params[] = {{"TM", tm_values, "4"}, {"TN", tm_values, "4"}};

/* Forward presets (docs/rules.md, "Forward presets"). The sweep moves TM with TN = 4 (2x4, 4x4,
 * 8x4); the square 8 x 8 needs both. */
static const kl_rule_preset rt_presets[] = {
    {"outer-8x8", "TM=8 TN=8", NULL,
     "each k step reads 8 + 8 operands from shared memory for 64 FMAs, 4 per load: an SM issues 128 FP32 FMAs "
     "but reads 32 words of shared memory per clock, so 4 is where the FMAs, not the shared reads, bound the loop "
     "(4 x 4 gives 2); 64 accumulators and 16 operands stay under 255 registers, and a 16 x 16 block (256 threads) "
     "at up to 128 registers still fits 2 blocks per SM; a 32 x 32 block is refused (shared memory, registers)"},
};
const kl_rule_presets kl_presets_register_tile = {&kl_rule_register_tile, rt_presets, sizeof rt_presets / sizeof rt_presets[0]};

/* ---- the one-output-per-thread form --------------------------------------------------------------- */

typedef struct rt_local {
    char name[64];
    TSNode decl;
    TSNode value;          /* may be null */
    int tside;             /* the thread index it moves with: 0 none, 1 p, 2 q */
    int bside;             /* the block index it depends on: 0 none, 1 p, 2 q */
} rt_local;

typedef struct rt_tile {
    TSNode decl;
    char name[64], elem[64];
    TSNode dims[2];
    int grow;              /* the dimension indexed by the thread (0 or 1) */
    long long grow_val;
    char stride[64];       /* its size as text (the stride of the virtual threads) */
    int side;              /* 1: the A tile (p), 2: the B tile (q) */
} rt_tile;

typedef struct rt {
    const kl_rule_ctx *ctx;
    rb_func f;
    char p, q;             /* 'x' / 'y' */
    TSNode stmts[MAXSTMT];
    unsigned nstmts, kidx;
    TSNode kloop, inner, upd, e1, e2, sync1, sync2;
    TSNode loads[8];
    int load_side[8];
    unsigned nloads;
    rt_tile tiles[2];
    unsigned ntiles;
    rt_local locals[MAXLOCAL];
    unsigned nlocals;
    int acc;
    char acc_type[64];
} rt;

static bool uses_any(const kl_rule_ctx *ctx, TSNode n, const char *const *names, unsigned count)
{
    for (unsigned i = 0; i < count; i++)
        if (tt_uses(ctx->text, ts_node_start_byte(n), ts_node_end_byte(n), names[i])) return true;
    return false;
}

/* The names that move with the thread index of a side: "threadIdx.p" and the locals. */
static unsigned side_names(const rt *a, int side, const char **out, unsigned max)
{
    static char builtin[2][16];
    unsigned n = 0;
    char letter = side == 1 ? a->p : a->q;
    kl_snprintf(builtin[side - 1], sizeof builtin[0], "threadIdx.%c", letter);
    out[n++] = builtin[side - 1];
    for (unsigned i = 0; i < a->nlocals && n < max; i++)
        if (a->locals[i].tside == side) out[n++] = a->locals[i].name;
    return n;
}

/* The names that depend on a side's block index. */
static unsigned block_names(const rt *a, int side, const char **out, unsigned max)
{
    static char builtin[2][16];
    unsigned n = 0;
    char letter = side == 1 ? a->p : a->q;
    kl_snprintf(builtin[side - 1], sizeof builtin[0], "blockIdx.%c", letter);
    out[n++] = builtin[side - 1];
    for (unsigned i = 0; i < a->nlocals && n < max; i++)
        if (a->locals[i].bside == side) out[n++] = a->locals[i].name;
    return n;
}

/* The subscripts of a 2-D access of a tile within e: *count receives how many accesses of any
 * tile e holds; the last one's tile index and subscripts are returned. */
typedef struct tile_find {
    const rt *a;
    unsigned count;
    int tile;
    TSNode idx[2];
    bool bad;
} tile_find;

static bool tile_find_visit(TSNode n, void *user)
{
    tile_find *t = user;
    if (!rb_is(n, "identifier")) return true;
    for (unsigned k = 0; k < t->a->ntiles; k++) {
        if (!rb_text_is(t->a->ctx, n, t->a->tiles[k].name)) continue;
        TSNode in = tt_parent(n);
        TSNode out = tt_parent(in);
        if (!rb_is(in, "subscript_expression") || !rb_is(out, "subscript_expression") ||
            !ts_node_eq(tt_field(in, "argument"), n) || !ts_node_eq(tt_field(out, "argument"), in)) {
            t->bad = true;
            continue;
        }
        t->count++;
        t->tile = (int)k;
        t->idx[0] = kl_ast_subscript_index(in);
        t->idx[1] = kl_ast_subscript_index(out);
    }
    return true;
}

/* Is the subscript exactly threadIdx.<letter> (through locals)? 1 yes, 0 it does not depend on
 * a thread index, -1 something else. */
static int subscript_is_thread(kl_affine_ctx *ax, TSNode e, char *letter)
{
    kl_affine f = {0};
    if (ts_node_is_null(e)) return -1;
    if (kl_affine_of(ax, e, &f) != KL_OK || !f.ok) {
        kl_affine_release(&f);
        return -1;
    }
    int r = 0;
    bool thread = false;
    for (unsigned i = 0; i < f.nterms; i++)
        if (kl_str_starts(f.terms[i].var, "threadIdx.")) thread = true;
    if (thread) {
        r = -1;
        if (f.nterms == 1 && f.terms[0].coef_is_int && f.terms[0].coef_int == 1 && f.const_is_int &&
            f.const_int == 0 && (!strcmp(f.terms[0].var, "threadIdx.x") || !strcmp(f.terms[0].var, "threadIdx.y"))) {
            *letter = f.terms[0].var[10];
            r = 1;
        }
    }
    kl_affine_release(&f);
    return r;
}

static int local_index(const rt *a, const char *name)
{
    for (unsigned i = 0; i < a->nlocals; i++)
        if (!strcmp(a->locals[i].name, name)) return (int)i;
    return -1;
}

/* Macros and helpers of the file that read thread or block indices: a use of one in the
 * kernel would hide an index from the substitutions. */
static bool hidden_index(const kl_rule_ctx *ctx, const rt *a, char *why, size_t size)
{
    uint32_t bs = ts_node_start_byte(a->f.body), be = ts_node_end_byte(a->f.body);
    const char *t = ctx->text;
    for (size_t i = 0; i < ctx->len;) {
        size_t le = i;
        while (le < ctx->len && t[le] != '\n') le++;
        size_t k = i;
        while (k < le && (t[k] == ' ' || t[k] == '\t')) k++;
        if (le - k > 8 && !memcmp(t + k, "#define", 7)) {
            k += 7;
            while (k < le && (t[k] == ' ' || t[k] == '\t')) k++;
            size_t ns = k;
            while (k < le && (t[k] == '_' || (t[k] >= 'a' && t[k] <= 'z') || (t[k] >= 'A' && t[k] <= 'Z') ||
                              (t[k] >= '0' && t[k] <= '9')))
                k++;
            char name[64];
            kl_snprintf(name, sizeof name, "%.*s", (int)(k - ns), t + ns);
            if (k > ns && (tt_uses(t, (uint32_t)k, (uint32_t)le, "threadIdx") ||
                           tt_uses(t, (uint32_t)k, (uint32_t)le, "blockIdx")) &&
                tt_uses(t, bs, be, name)) {
                unsigned line = 1;
                for (size_t c = 0; c < i; c++) line += t[c] == '\n';
                kl_snprintf(why, size, "the macro %s (line %u) reads a thread or block index", name, line);
                return true;
            }
        }
        i = le + 1;
    }
    rb_func fs[64];
    unsigned nf = rb_functions(ctx, fs, 64);
    for (unsigned i = 0; i < nf && i < 64; i++) {
        if (!strcmp(fs[i].name, a->f.name) || ts_node_is_null(fs[i].body)) continue;
        uint32_t s = ts_node_start_byte(fs[i].body), e = ts_node_end_byte(fs[i].body);
        if ((tt_uses(t, s, e, "threadIdx") || tt_uses(t, s, e, "blockIdx")) && tt_uses(t, bs, be, fs[i].name)) {
            kl_snprintf(why, size, "the helper %s (line %u) reads a thread or block index", fs[i].name,
                        ts_node_start_point(fs[i].def).row + 1);
            return true;
        }
    }
    return false;
}

/* The k loop's parts: loads, barrier, one compute loop, barrier. */
static bool split_kloop(rt *a, char *why, size_t size)
{
    const kl_rule_ctx *ctx = a->ctx;
    TSNode body = tt_field(a->kloop, "body");
    unsigned line = ts_node_start_point(a->kloop).row + 1;
    TSNode st[32];
    unsigned n = rb_is(body, "compound_statement") ? tt_stmts(body, st, 32) : 0;
    if (n < 4 || n > 32) {
        kl_snprintf(why, size, "the tile loop at line %u is not loads, __syncthreads(), the product loop, "
                               "__syncthreads()", line);
        return false;
    }
    unsigned i = 0;
    a->nloads = 0;
    for (; i < n && !rb_is_syncthreads(ctx, st[i]); i++) {
        TSNode as = tt_child(st[i], 0);
        if (!rb_is(st[i], "expression_statement") || !rb_is(as, "assignment_expression") || a->nloads >= 8) {
            kl_snprintf(why, size, "line %u in the tile loop is not a load of a shared tile",
                        ts_node_start_point(st[i]).row + 1);
            return false;
        }
        a->loads[a->nloads++] = st[i];
    }
    if (i + 3 != n || !a->nloads || !rb_is(st[i + 1], "for_statement") || !rb_is_syncthreads(ctx, st[i + 2])) {
        kl_snprintf(why, size, "the tile loop at line %u is not loads, __syncthreads(), one product loop, "
                               "__syncthreads()", line);
        return false;
    }
    a->sync1 = st[i];
    a->inner = st[i + 1];
    a->sync2 = st[i + 2];
    return true;
}

/* The update `acc += e1 * e2;` of the product loop. */
static bool find_update(rt *a, char *why, size_t size)
{
    const kl_rule_ctx *ctx = a->ctx;
    TSNode b = tt_field(a->inner, "body");
    unsigned line = ts_node_start_point(a->inner).row + 1;
    if (rb_is(b, "compound_statement")) {
        TSNode one[2];
        if (tt_stmts(b, one, 2) != 1) {
            kl_snprintf(why, size, "the product loop at line %u has more than one statement", line);
            return false;
        }
        b = one[0];
    }
    TSNode as = tt_child(b, 0);
    if (!rb_is(b, "expression_statement") || !rb_is(as, "assignment_expression") ||
        !rb_text_is(ctx, tt_field(as, "operator"), "+=") || !rb_is(tt_field(as, "left"), "identifier")) {
        kl_snprintf(why, size, "the product loop at line %u is not `acc += a * b;`", line);
        return false;
    }
    TSNode r = tt_field(as, "right");
    while (rb_is(r, "parenthesized_expression")) r = tt_child(r, 0);
    if (!rb_is(r, "binary_expression") || !rb_text_is(ctx, tt_field(r, "operator"), "*")) {
        kl_snprintf(why, size, "the update at line %u is not a product of two tile elements", line);
        return false;
    }
    a->upd = b;
    a->e1 = tt_field(r, "left");
    a->e2 = tt_field(r, "right");
    char name[64];
    tt_copy_text(ctx, tt_field(as, "left"), name, sizeof name);
    a->acc = local_index(a, name);
    if (a->acc < 0 || ts_node_is_null(a->locals[a->acc].value)) {
        kl_snprintf(why, size, "the accumulator %s is not a local with an initial value", name);
        return false;
    }
    return true;
}

/* Analyse kernel f. 0: not the form at all (no site); 1: applicable; -1: the form, but `why`. */
static int analyse(const kl_rule_ctx *ctx, const rb_func *f, rt *a, char *why, size_t size)
{
    memset(a, 0, sizeof *a);
    a->ctx = ctx;
    a->f = *f;
    a->acc = -1;
    why[0] = '\0';
    if (!f->global || ts_node_is_null(f->body)) return 0;
    unsigned n = tt_stmts(f->body, a->stmts, MAXSTMT);
    if (n > MAXSTMT) return 0;
    a->nstmts = n;
    /* the shared tiles and the tile loop */
    bool have_loop = false;
    unsigned nshared = 0;
    for (unsigned i = 0; i < n; i++) {
        TSNode s = a->stmts[i];
        if (tt_is_shared_decl(ctx, s)) {
            nshared++;
            TSNode d = tt_field(s, "declarator");
            if (a->ntiles < 2 && rb_is(d, "array_declarator") && rb_is(tt_field(d, "declarator"), "array_declarator") &&
                rb_is(tt_field(tt_field(d, "declarator"), "declarator"), "identifier")) {
                rt_tile *t = &a->tiles[a->ntiles++];
                t->decl = s;
                t->dims[1] = tt_field(d, "size");
                t->dims[0] = tt_field(tt_field(d, "declarator"), "size");
                tt_copy_text(ctx, tt_field(tt_field(d, "declarator"), "declarator"), t->name, sizeof t->name);
                tt_copy_text(ctx, tt_field(s, "type"), t->elem, sizeof t->elem);
            }
        } else if (rb_is(s, "for_statement") &&
                   tt_uses(ctx->text, ts_node_start_byte(s), ts_node_end_byte(s), "__syncthreads")) {
            if (have_loop) return 0;
            have_loop = true;
            a->kloop = s;
            a->kidx = i;
        }
    }
    if (!have_loop || a->ntiles != 2 || nshared != 2) return 0;
    /* present already: an accumulator array with kl_i loops */
    if (tt_uses(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), "kl_i")) return 0;
    uint32_t bs = ts_node_start_byte(f->body), be = ts_node_end_byte(f->body);
    static const char *const banned[] = {"return", "gridDim", "threadIdx.z", "goto"};
    for (unsigned i = 0; i < 4; i++)
        if (tt_uses(ctx->text, bs, be, banned[i])) {
            kl_snprintf(why, size, "the kernel uses %s (each thread's work would change)", banned[i]);
            return -1;
        }
    if (hidden_index(ctx, a, why, size)) return -1;

    kl_affine_ctx *ax = NULL;
    kl_error err = {0};
    if (kl_affine_ctx_new(ctx->src, f->def, &ax, &err) != KL_OK) {
        kl_snprintf(why, size, "the index analysis failed: %s", err.message);
        return -1;
    }
    int rc = -1;
    /* the locals declared at the top level */
    for (unsigned i = 0; i < n; i++) {
        TSNode s = a->stmts[i];
        if (!rb_is(s, "declaration") || tt_is_shared_decl(ctx, s)) continue;
        if (i > a->kidx) continue;
        uint32_t c = tt_child_count(s);
        for (uint32_t k = 0; k < c; k++) {
            TSNode d = tt_child(s, k);
            TSNode id = rb_is(d, "init_declarator") ? tt_field(d, "declarator") : d;
            if (!rb_is(id, "identifier") || a->nlocals >= MAXLOCAL) continue;
            rt_local *L = &a->locals[a->nlocals++];
            memset(L, 0, sizeof *L);
            tt_copy_text(ctx, id, L->name, sizeof L->name);
            L->decl = s;
            if (rb_is(d, "init_declarator")) L->value = tt_field(d, "value");
        }
    }
    for (unsigned i = 0; i < n; i++)
        if (i < a->kidx && !rb_is(a->stmts[i], "declaration")) {
            kl_snprintf(why, size, "line %u before the tile loop is not a declaration",
                        ts_node_start_point(a->stmts[i]).row + 1);
            goto done;
        }
    if (!split_kloop(a, why, size) || !find_update(a, why, size)) goto done;

    /* the tiles of the update: e1 reads the A tile at [threadIdx.p][k], e2 the B tile */
    tile_find t1 = {.a = a, .tile = -1}, t2 = {.a = a, .tile = -1};
    rb_walk(a->e1, tile_find_visit, &t1);
    rb_walk(a->e2, tile_find_visit, &t2);
    if (t1.count != 1 || t2.count != 1 || t1.bad || t2.bad || t1.tile == t2.tile) {
        kl_snprintf(why, size, "the update at line %u does not multiply an element of each shared tile",
                    ts_node_start_point(a->upd).row + 1);
        goto done;
    }
    for (int w = 0; w < 2; w++) {
        tile_find *tf = w == 0 ? &t1 : &t2;
        rt_tile *t = &a->tiles[tf->tile];
        char l0 = 0, l1 = 0;
        int s0 = subscript_is_thread(ax, tf->idx[0], &l0), s1 = subscript_is_thread(ax, tf->idx[1], &l1);
        if (!((s0 == 1 && s1 == 0) || (s0 == 0 && s1 == 1))) {
            kl_snprintf(why, size, "the read of %s at line %u is not [thread index][k] or [k][thread index]",
                        t->name, ts_node_start_point(a->upd).row + 1);
            goto done;
        }
        t->grow = s0 == 1 ? 0 : 1;
        t->side = w + 1;
        if (w == 0) a->p = s0 == 1 ? l0 : l1;
        else a->q = s0 == 1 ? l0 : l1;
        if (!rb_const_eval(ctx, f->def, t->dims[t->grow], &t->grow_val) || t->grow_val <= 0) {
            kl_snprintf(why, size, "the size of %s is not a compile-time constant", t->name);
            goto done;
        }
        TSNode g = t->dims[t->grow];
        if (rb_is(g, "identifier") || rb_is(g, "number_literal")) tt_copy_text(ctx, g, t->stride, sizeof t->stride);
        else kl_snprintf(t->stride, sizeof t->stride, "%lld", t->grow_val);
    }
    if (a->p == a->q) {
        kl_snprintf(why, size, "both tiles of the update at line %u move with threadIdx.%c",
                    ts_node_start_point(a->upd).row + 1, a->p);
        goto done;
    }
    /* classify the locals by the indices they move with */
    for (unsigned i = 0; i < a->nlocals; i++) {
        rt_local *L = &a->locals[i];
        if ((int)i == a->acc || ts_node_is_null(L->value)) continue;
        kl_affine v = {0};
        if (kl_affine_of(ax, L->value, &v) != KL_OK) {
            kl_affine_release(&v);
            goto done;
        }
        if (!v.ok) {
            bool dep = tt_uses(ctx->text, ts_node_start_byte(L->value), ts_node_end_byte(L->value), "threadIdx") ||
                       tt_uses(ctx->text, ts_node_start_byte(L->value), ts_node_end_byte(L->value), "blockIdx");
            for (unsigned k = 0; k < i && !dep; k++)
                if (a->locals[k].tside || a->locals[k].bside)
                    dep = tt_uses(ctx->text, ts_node_start_byte(L->value), ts_node_end_byte(L->value),
                                  a->locals[k].name);
            kl_affine_release(&v);
            if (dep) {
                kl_snprintf(why, size, "the local %s (line %u) is not affine in the thread and block indices",
                            L->name, ts_node_start_point(L->decl).row + 1);
                goto done;
            }
            continue;
        }
        char tp[16], tq[16], bp[16], bq[16];
        kl_snprintf(tp, sizeof tp, "threadIdx.%c", a->p);
        kl_snprintf(tq, sizeof tq, "threadIdx.%c", a->q);
        kl_snprintf(bp, sizeof bp, "blockIdx.%c", a->p);
        kl_snprintf(bq, sizeof bq, "blockIdx.%c", a->q);
        int64_t cp = 0, cq = 0;
        bool ip = kl_affine_coef_int(&v, tp, &cp), iq = kl_affine_coef_int(&v, tq, &cq);
        bool hp = kl_affine_coef(&v, tp) != NULL, hq = kl_affine_coef(&v, tq) != NULL;
        bool hbp = kl_affine_coef(&v, bp) != NULL, hbq = kl_affine_coef(&v, bq) != NULL;
        kl_affine_release(&v);
        if ((hp && hq) || (hbp && hbq) || (hp && (!ip || cp != 1)) || (hq && (!iq || cq != 1)) || (hp && hbq) ||
            (hq && hbp)) {
            kl_snprintf(why, size, "the local %s (line %u) is not threadIdx.%c or threadIdx.%c plus a "
                                   "thread-independent value", L->name, ts_node_start_point(L->decl).row + 1, a->p, a->q);
            goto done;
        }
        if (kl_affine_assign_count(ax, L->name) > 1 && (hp || hq || hbp || hbq)) {
            kl_snprintf(why, size, "the local %s is assigned more than once", L->name);
            goto done;
        }
        L->tside = hp ? 1 : hq ? 2 : 0;
        L->bside = hbp ? 1 : hbq ? 2 : 0;
    }
    /* the accumulator: a scalar declared alone, used in the tile loop only by the update */
    {
        rt_local *acc = &a->locals[a->acc];
        TSNode d = acc->decl;
        uint32_t nd = 0, c = tt_child_count(d);
        for (uint32_t k = 0; k < c; k++)
            if (rb_is(tt_child(d, k), "init_declarator") || rb_is(tt_child(d, k), "identifier"))
                nd++;
        if (nd != 1) {
            kl_snprintf(why, size, "the accumulator %s is declared with other variables (line %u)", acc->name,
                        ts_node_start_point(d).row + 1);
            goto done;
        }
        tt_copy_text(ctx, tt_field(d, "type"), a->acc_type, sizeof a->acc_type);
        if (tt_count(ctx->text, ts_node_start_byte(a->kloop), ts_node_end_byte(a->kloop), acc->name) != 1 ||
            kl_affine_assign_count(ax, acc->name) != 2) {
            kl_snprintf(why, size, "the accumulator %s is used in the tile loop other than by the update", acc->name);
            goto done;
        }
    }
    /* e1 moves with the p side only, e2 with the q side only */
    {
        const char *pn[MAXLOCAL + 2], *qn[MAXLOCAL + 2], *pb[MAXLOCAL + 2], *qb[MAXLOCAL + 2];
        unsigned np = side_names(a, 1, pn, MAXLOCAL + 2), nq = side_names(a, 2, qn, MAXLOCAL + 2);
        unsigned nbp = block_names(a, 1, pb, MAXLOCAL + 2), nbq = block_names(a, 2, qb, MAXLOCAL + 2);
        if (uses_any(ctx, a->e1, qn, nq) || uses_any(ctx, a->e2, pn, np) || uses_any(ctx, a->e1, qb, nbq) ||
            uses_any(ctx, a->e2, pb, nbp)) {
            kl_snprintf(why, size, "a factor of the update at line %u reads both thread indices",
                        ts_node_start_point(a->upd).row + 1);
            goto done;
        }
        /* the loads: each writes one tile at [threadIdx.p][..] (A) or [..][threadIdx.q] (B) */
        for (unsigned i = 0; i < a->nloads; i++) {
            TSNode as = tt_child(a->loads[i], 0);
            tile_find tf = {.a = a, .tile = -1};
            rb_walk(tt_field(as, "left"), tile_find_visit, &tf);
            tile_find tr = {.a = a, .tile = -1};
            rb_walk(tt_field(as, "right"), tile_find_visit, &tr);
            unsigned line = ts_node_start_point(a->loads[i]).row + 1;
            if (tf.count != 1 || tf.bad || tr.count || tr.bad || !rb_text_is(ctx, tt_field(as, "operator"), "=")) {
                kl_snprintf(why, size, "line %u in the tile loop is not a load of one shared tile", line);
                goto done;
            }
            rt_tile *t = &a->tiles[tf.tile];
            char l = 0, want = t->side == 1 ? a->p : a->q;
            if (subscript_is_thread(ax, tf.idx[t->grow], &l) != 1 || l != want) {
                kl_snprintf(why, size, "the load of %s at line %u does not write row threadIdx.%c of the tile", t->name,
                            line, want);
                goto done;
            }
            a->load_side[i] = t->side;
            bool other_block = t->side == 1 ? uses_any(ctx, a->loads[i], qb, nbq) : uses_any(ctx, a->loads[i], pb, nbp);
            if (other_block || tt_uses(ctx->text, ts_node_start_byte(a->loads[i]), ts_node_end_byte(a->loads[i]),
                                       a->locals[a->acc].name)) {
                kl_snprintf(why, size, "the load of %s at line %u depends on the other tile's block index", t->name,
                            line);
                goto done;
            }
        }
        for (unsigned k = 0; k < 2; k++) {
            bool loaded = false;
            for (unsigned i = 0; i < a->nloads; i++) loaded |= a->load_side[i] == a->tiles[k].side;
            if (!loaded) {
                kl_snprintf(why, size, "the tile %s is not loaded in the tile loop", a->tiles[k].name);
                goto done;
            }
        }
    }
    /* after the loop: statements, no declarations that move with a thread, no tile use */
    for (unsigned i = a->kidx + 1; i < n; i++) {
        TSNode s = a->stmts[i];
        const char *tn[2] = {a->tiles[0].name, a->tiles[1].name};
        if (uses_any(ctx, s, tn, 2) || rb_is(s, "declaration") ||
            tt_uses(ctx->text, ts_node_start_byte(s), ts_node_end_byte(s), "__syncthreads")) {
            kl_snprintf(why, size, "line %u after the tile loop is not a statement this transform can repeat per "
                                   "output", ts_node_start_point(s).row + 1);
            goto done;
        }
    }
    rc = 1;
done:
    kl_affine_ctx_free(ax);
    return rc;
}

/* ---- launches ---------------------------------------------------------------------------------- */

static bool cfg_arg_value(const kl_rule_ctx *ctx, TSNode scope, TSNode arg, long long *v)
{
    if (rb_is(arg, "parameter_declaration")) {
        TSNode ty = tt_field(arg, "type");
        char name[64];
        tt_copy_text(ctx, ty, name, sizeof name);
        return rb_const_name(ctx, scope, name, v);
    }
    return rb_const_eval(ctx, scope, arg, v);
}

/* Check the launches of the kernel and add the grid edits (apply: wrap; remove: unwrap). */
static kl_status launch_edits(const rt *a, bool apply, long long tm, long long tn, kl_edits *out, kl_error *err,
                              char *why, size_t size)
{
    const kl_rule_ctx *ctx = a->ctx;
    rb_launch ls[16];
    unsigned nl = rb_launches(ctx, a->f.name, ls, 16);
    if (nl == 0 || nl > 16) {
        kl_snprintf(why, size, "%s is not launched in the file", a->f.name);
        return KL_ERR_NOT_APPLICABLE;
    }
    uint32_t done[16];
    unsigned ndone = 0;
    for (unsigned i = 0; i < nl; i++) {
        unsigned line = ts_node_start_point(ls[i].call).row + 1;
        TSNode ga[3], ba[3];
        unsigned gn = 0, bn = 0;
        TSNode hb = ls[i].host.body;
        if (ls[i].ncfg < 2 || !tt_dim3_args(ctx, hb, ls[i].cfg[0], ga, &gn) || gn < 2 ||
            !tt_dim3_args(ctx, hb, ls[i].cfg[1], ba, &bn) || bn < 2) {
            kl_snprintf(why, size, "the launch at line %u has no 2-D dim3 grid and block", line);
            return KL_ERR_NOT_APPLICABLE;
        }
        if (apply) {
            long long bx, by;
            if (!cfg_arg_value(ctx, ls[i].host.def, ba[0], &bx) || !cfg_arg_value(ctx, ls[i].host.def, ba[1], &by)) {
                kl_snprintf(why, size, "the block of the launch at line %u is not a compile-time constant", line);
                return KL_ERR_NOT_APPLICABLE;
            }
            long long vp = a->p == 'x' ? bx : by, vq = a->q == 'x' ? bx : by;
            long long tp = a->tiles[0].side == 1 ? a->tiles[0].grow_val : a->tiles[1].grow_val;
            long long tq = a->tiles[0].side == 2 ? a->tiles[0].grow_val : a->tiles[1].grow_val;
            if (vp != tp || vq != tq) {
                kl_snprintf(why, size, "the block of the launch at line %u (%lld x %lld) is not the tile's shape", line,
                            bx, by);
                return KL_ERR_NOT_APPLICABLE;
            }
        }
        for (unsigned d = 0; d < 2; d++) {
            TSNode g = ga[d];
            bool seen = false;
            for (unsigned k = 0; k < ndone; k++) seen |= done[k] == ts_node_start_byte(g);
            if (seen) continue;
            done[ndone++] = ts_node_start_byte(g);
            char letter = d == 0 ? 'x' : 'y';
            long long f = letter == a->p ? tm : tn;
            if (apply) {
                char *gt = rb_text(ctx, rb_is(g, "parameter_declaration") ? tt_field(g, "type") : g);
                kl_status st = gt ? kl_edits_addf(out, ts_node_start_byte(g), ts_node_end_byte(g), "(%s + %lld) / %lld",
                                                   gt, f - 1, f)
                                  : KL_ERR_NOMEM;
                free(gt);
                if (st != KL_OK) return kl_error_set(err, st, "out of memory");
            } else {
                /* (E + f-1) / f */
                TSNode l = tt_field(g, "left"), r = tt_field(g, "right");
                char want_r[32], want_k[32];
                kl_snprintf(want_r, sizeof want_r, "%lld", f);
                kl_snprintf(want_k, sizeof want_k, "%lld", f - 1);
                TSNode in = tt_child(l, 0);
                if (!rb_is(g, "binary_expression") || !rb_text_is(ctx, tt_field(g, "operator"), "/") ||
                    !rb_text_is(ctx, r, want_r) || !rb_is(l, "parenthesized_expression") ||
                    !rb_is(in, "binary_expression") || !rb_text_is(ctx, tt_field(in, "operator"), "+") ||
                    !rb_text_is(ctx, tt_field(in, "right"), want_k)) {
                    kl_snprintf(why, size, "the grid of the launch at line %u is not divided by the register tile", line);
                    return KL_ERR_NOT_APPLICABLE;
                }
                char *e = rb_text(ctx, tt_field(in, "left"));
                kl_status st = e ? kl_edits_add(out, ts_node_start_byte(g), ts_node_end_byte(g), e) : KL_ERR_NOMEM;
                free(e);
                if (st != KL_OK) return kl_error_set(err, st, "out of memory");
            }
        }
    }
    return KL_OK;
}

/* ---- text builders ----------------------------------------------------------------------------- */

/* The loop nest repeating stmt (already substituted; its first line unindented) over kl_i
 * (ni > 0) and/or kl_j (nj > 0), written at indentation ind (the first line unindented). */
static void nest_text(kl_strbuf *sb, const char *ind, long long ni, long long nj, const char *stmt)
{
    int depth = 0;
    if (ni > 0) {
        kl_strbuf_addf(sb, "#pragma unroll\n%sfor (int kl_i = 0; kl_i < %lld; kl_i++) {\n%s    ", ind, ni, ind);
        depth++;
    }
    if (nj > 0) {
        /* the outer loop's body is indented by 4 more */
        kl_strbuf_adds(sb, "#pragma unroll\n");
        kl_strbuf_addf(sb, "%s%sfor (int kl_j = 0; kl_j < %lld; kl_j++) {\n%s%s    ", ind, depth ? "    " : "", nj, ind,
                       depth ? "    " : "");
        depth++;
    }
    char *body = tt_indent_tail(stmt, 4 * depth);
    kl_strbuf_adds(sb, body ? body : stmt);
    free(body);
    if (depth == 2) kl_strbuf_addf(sb, "\n%s    }", ind);
    kl_strbuf_addf(sb, "\n%s}", ind);
}

/* The substitutions for a statement repeated over i (side p) and/or j (side q). */
typedef struct subs {
    tt_pair pairs[2 * MAXLOCAL + 8];
    char buf[2 * MAXLOCAL + 8][160];
    unsigned n;
} subs;

static void subs_add(subs *s, const char *from, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void subs_add(subs *s, const char *from, const char *fmt, ...)
{
    if (s->n >= sizeof s->pairs / sizeof s->pairs[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->buf[s->n], sizeof s->buf[0], fmt, ap);
    va_end(ap);
    s->pairs[s->n].from = from;
    s->pairs[s->n].to = s->buf[s->n];
    s->n++;
}

static void make_subs(const rt *a, bool i, bool j, bool acc, long long tm, long long tn, subs *s)
{
    static char names[4][16];
    s->n = 0;
    const char *stride_p = a->tiles[0].side == 1 ? a->tiles[0].stride : a->tiles[1].stride;
    const char *stride_q = a->tiles[0].side == 2 ? a->tiles[0].stride : a->tiles[1].stride;
    kl_snprintf(names[0], sizeof names[0], "threadIdx.%c", a->p);
    kl_snprintf(names[1], sizeof names[1], "threadIdx.%c", a->q);
    kl_snprintf(names[2], sizeof names[2], "blockIdx.%c", a->p);
    kl_snprintf(names[3], sizeof names[3], "blockIdx.%c", a->q);
    char f[32];
    if (i) subs_add(s, names[0], "(%s + kl_i * %s)", names[0], stride_p);
    if (j) subs_add(s, names[1], "(%s + kl_j * %s)", names[1], stride_q);
    kl_snprintf(f, sizeof f, "%lld", tm);
    subs_add(s, names[2], "(%s * %s)", names[2], f);
    kl_snprintf(f, sizeof f, "%lld", tn);
    subs_add(s, names[3], "(%s * %s)", names[3], f);
    for (unsigned k = 0; k < a->nlocals; k++) {
        const rt_local *L = &a->locals[k];
        if (i && L->tside == 1) subs_add(s, L->name, "(%s + kl_i * %s)", L->name, stride_p);
        if (j && L->tside == 2) subs_add(s, L->name, "(%s + kl_j * %s)", L->name, stride_q);
    }
    if (acc) subs_add(s, a->locals[a->acc].name, "%s[kl_i][kl_j]", a->locals[a->acc].name);
}

static kl_status add_nest(const rt *a, TSNode stmt, bool i, bool j, bool acc, long long tm, long long tn,
                          kl_edits *out, kl_error *err)
{
    const kl_rule_ctx *ctx = a->ctx;
    subs s;
    make_subs(a, i, j, acc, tm, tn, &s);
    char ind[64];
    rb_indent_of(ctx, ts_node_start_byte(stmt), ind, sizeof ind);
    char *body = tt_subst(ctx->text, ts_node_start_byte(stmt), ts_node_end_byte(stmt), s.pairs, s.n);
    kl_strbuf sb = KL_STRBUF_INIT;
    if (body) nest_text(&sb, ind, i ? tm : 0, j ? tn : 0, body);
    free(body);
    kl_status st = !body || sb.failed ? KL_ERR_NOMEM
                                      : kl_edits_add(out, ts_node_start_byte(stmt), ts_node_end_byte(stmt), kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

/* Is [s,e) inside one of the ranges? */
static bool covered(const uint32_t *rs, const uint32_t *re, unsigned n, uint32_t s, uint32_t e)
{
    for (unsigned i = 0; i < n; i++)
        if (s >= rs[i] && e <= re[i]) return true;
    return false;
}

/* ---- apply --------------------------------------------------------------------------------------- */

static kl_status rt_apply_edits(const rt *a, long long tm, long long tn, kl_edits *out, kl_error *err)
{
    const kl_rule_ctx *ctx = a->ctx;
    kl_status st = KL_OK;
    uint32_t rs[64], re[64];
    unsigned nr = 0;
    /* the tiles grow along their thread dimension */
    for (unsigned k = 0; k < 2; k++) {
        const rt_tile *t = &a->tiles[k];
        TSNode g = t->dims[t->grow];
        char *gt = rb_text(ctx, g);
        if (!gt) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        bool simple = rb_is(g, "identifier") || rb_is(g, "number_literal");
        st = kl_edits_addf(out, ts_node_start_byte(g), ts_node_end_byte(g), simple ? "%lld * %s" : "%lld * (%s)",
                           t->side == 1 ? tm : tn, gt);
        free(gt);
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    }
    /* the accumulator */
    {
        const rt_local *acc = &a->locals[a->acc];
        char ind[64];
        rb_indent_of(ctx, ts_node_start_byte(acc->decl), ind, sizeof ind);
        /* the initial value per output (a bias read at [row][col] moves with them) */
        subs sv;
        make_subs(a, true, true, false, tm, tn, &sv);
        char *v = tt_subst(ctx->text, ts_node_start_byte(acc->value), ts_node_end_byte(acc->value), sv.pairs, sv.n);
        kl_strbuf stmt = KL_STRBUF_INIT, sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&stmt, "%s[kl_i][kl_j] = %s;", acc->name, v ? v : "");
        kl_strbuf_addf(&sb, "%s %s[%lld][%lld];\n%s", a->acc_type, acc->name, tm, tn, ind);
        nest_text(&sb, ind, tm, tn, kl_strbuf_str(&stmt));
        st = !v || sb.failed || stmt.failed
                 ? KL_ERR_NOMEM
                 : kl_edits_add(out, ts_node_start_byte(acc->decl), ts_node_end_byte(acc->decl), kl_strbuf_str(&sb));
        free(v);
        kl_strbuf_release(&stmt);
        kl_strbuf_release(&sb);
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
        rs[nr] = ts_node_start_byte(acc->decl), re[nr++] = ts_node_end_byte(acc->decl);
    }
    /* the loads */
    for (unsigned i = 0; i < a->nloads; i++) {
        RT_TRY(add_nest(a, a->loads[i], a->load_side[i] == 1, a->load_side[i] == 2, false, tm, tn, out, err));
        rs[nr] = ts_node_start_byte(a->loads[i]), re[nr++] = ts_node_end_byte(a->loads[i]);
    }
    /* the product: registers and the outer product */
    {
        TSNode body = tt_field(a->inner, "body");
        char ind[64];
        rb_indent_of(ctx, ts_node_start_byte(a->inner), ind, sizeof ind);
        subs si, sj;
        make_subs(a, true, false, false, tm, tn, &si);
        make_subs(a, false, true, false, tm, tn, &sj);
        char *e1 = tt_subst(ctx->text, ts_node_start_byte(a->e1), ts_node_end_byte(a->e1), si.pairs, si.n);
        char *e2 = tt_subst(ctx->text, ts_node_start_byte(a->e2), ts_node_end_byte(a->e2), sj.pairs, sj.n);
        /* the register types: a bare tile element keeps the tile's type, else the accumulator's */
        const char *ta = a->acc_type, *tb = a->acc_type;
        for (unsigned k = 0; k < 2; k++) {
            TSNode e = a->tiles[k].side == 1 ? a->e1 : a->e2;
            while (rb_is(e, "parenthesized_expression")) e = tt_child(e, 0);
            if (rb_is(e, "subscript_expression")) *(a->tiles[k].side == 1 ? &ta : &tb) = a->tiles[k].elem;
        }
        const char *accn = a->locals[a->acc].name;
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&sb, "{\n%s    %s kl_a[%lld];\n%s    %s kl_b[%lld];\n", ind, ta, tm, ind, tb, tn);
        kl_strbuf_addf(&sb, "%s    #pragma unroll\n%s    for (int kl_i = 0; kl_i < %lld; kl_i++) kl_a[kl_i] = %s;\n", ind,
                       ind, tm, e1 ? e1 : "");
        kl_strbuf_addf(&sb, "%s    #pragma unroll\n%s    for (int kl_j = 0; kl_j < %lld; kl_j++) kl_b[kl_j] = %s;\n", ind,
                       ind, tn, e2 ? e2 : "");
        kl_strbuf_addf(&sb, "%s    #pragma unroll\n%s    for (int kl_i = 0; kl_i < %lld; kl_i++)\n", ind, ind, tm);
        kl_strbuf_addf(&sb, "%s        #pragma unroll\n%s        for (int kl_j = 0; kl_j < %lld; kl_j++) "
                            "%s[kl_i][kl_j] += kl_a[kl_i] * kl_b[kl_j];\n%s}", ind, ind, tn, accn, ind);
        st = !e1 || !e2 || sb.failed ? KL_ERR_NOMEM
                                     : kl_edits_add(out, ts_node_start_byte(body), ts_node_end_byte(body), kl_strbuf_str(&sb));
        free(e1);
        free(e2);
        kl_strbuf_release(&sb);
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
        rs[nr] = ts_node_start_byte(body), re[nr++] = ts_node_end_byte(body);
    }
    /* after the loop: each statement repeated per output it touches */
    {
        const char *pn[MAXLOCAL + 2], *qn[MAXLOCAL + 2];
        unsigned np = side_names(a, 1, pn, MAXLOCAL + 2), nq = side_names(a, 2, qn, MAXLOCAL + 2);
        const char *an[1] = {a->locals[a->acc].name};
        for (unsigned k = a->kidx + 1; k < a->nstmts && nr < 64; k++) {
            TSNode s = a->stmts[k];
            bool acc = uses_any(ctx, s, an, 1);
            bool i = acc || uses_any(ctx, s, pn, np), j = acc || uses_any(ctx, s, qn, nq);
            if (!i && !j) continue;
            RT_TRY(add_nest(a, s, i, j, acc, tm, tn, out, err));
            rs[nr] = ts_node_start_byte(s), re[nr++] = ts_node_end_byte(s);
        }
    }
    /* everywhere else: the block indices */
    for (int side = 1; side <= 2; side++) {
        char b[16];
        kl_snprintf(b, sizeof b, "blockIdx.%c", side == 1 ? a->p : a->q);
        uint32_t ms[128], me[128];
        unsigned nm = tt_find(ctx->text, ts_node_start_byte(a->f.body), ts_node_end_byte(a->f.body), b, ms, me, 128);
        if (nm > 128) return kl_rule_not_applicable(err, "%s is used more than 128 times", b);
        for (unsigned k = 0; k < nm; k++) {
            if (covered(rs, re, nr, ms[k], me[k])) continue;
            RT_TRY(kl_edits_addf(out, ms[k], me[k], "(%s * %lld)", b, side == 1 ? tm : tn));
        }
    }
    return KL_OK;
}

/* ---- the present form ---------------------------------------------------------------------------- */

typedef struct rt_present {
    TSNode decl, init;      /* `T acc[TM][TN];` and the loop nest filling it */
    char acc[64];
    long long tm, tn;
    char p;                 /* the letter multiplied by TM */
} rt_present;

/* Is the for statement `for (int <var> = 0; <var> < N; <var>++)`? */
static bool is_kl_loop(const kl_rule_ctx *ctx, TSNode f, const char *var)
{
    if (!rb_is(f, "for_statement")) return false;
    TSNode init = tt_field(f, "initializer");
    if (ts_node_is_null(init)) return false;
    TSNode d = tt_field(init, "declarator");
    return rb_is(d, "init_declarator") && rb_text_is(ctx, tt_field(d, "declarator"), var);
}

static bool find_present(const kl_rule_ctx *ctx, const rb_func *f, rt_present *pr)
{
    memset(pr, 0, sizeof *pr);
    if (!f->global || ts_node_is_null(f->body)) return false;
    TSNode st[MAXSTMT];
    unsigned n = tt_stmts(f->body, st, MAXSTMT);
    for (unsigned i = 0; i + 1 < n && i + 1 < MAXSTMT; i++) {
        TSNode d = tt_field(st[i], "declarator");
        if (!rb_is(st[i], "declaration") || tt_is_shared_decl(ctx, st[i]) || !rb_is(d, "array_declarator")) continue;
        TSNode in = tt_field(d, "declarator");
        if (!rb_is(in, "array_declarator") || !rb_is(tt_field(in, "declarator"), "identifier")) continue;
        if (!is_kl_loop(ctx, st[i + 1], "kl_i")) continue;
        tt_copy_text(ctx, tt_field(in, "declarator"), pr->acc, sizeof pr->acc);
        if (!rb_const_eval(ctx, f->def, tt_field(in, "size"), &pr->tm) ||
            !rb_const_eval(ctx, f->def, tt_field(d, "size"), &pr->tn))
            continue;
        pr->decl = st[i];
        pr->init = st[i + 1];
        char pat[64];
        kl_snprintf(pat, sizeof pat, "(blockIdx.y * %lld)", pr->tm);
        pr->p = pr->tm == pr->tn || tt_uses(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), pat)
                    ? 'y' : 'x';
        if (pr->tm == pr->tn) {
            /* which letter the A tile moves with: kl_i goes with it */
            pr->p = tt_uses(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), "threadIdx.x + kl_i") ? 'x'
                                                                                                                     : 'y';
        }
        return true;
    }
    return false;
}

/* The innermost statement of a kl_i / kl_j nest (through braces), and its depth. */
static TSNode nest_inner(const kl_rule_ctx *ctx, TSNode f, int *depth)
{
    *depth = 0;
    while (is_kl_loop(ctx, f, "kl_i") || is_kl_loop(ctx, f, "kl_j")) {
        (*depth)++;
        TSNode b = tt_field(f, "body");
        if (rb_is(b, "compound_statement")) {
            TSNode one[2];
            if (tt_stmts(b, one, 2) != 1) return (TSNode){0};
            b = one[0];
        }
        f = b;
    }
    return f;
}

/* The inverse substitutions of a piece of text (new string). */
static char *unsubst(const char *text, uint32_t s, uint32_t e, const rt_present *pr)
{
    char *t1 = tt_unstride(text, s, e, "kl_i");
    char *t2 = t1 ? tt_unstride(t1, 0, (uint32_t)strlen(t1), "kl_j") : NULL;
    char from[4][64], acc[96];
    char q = pr->p == 'y' ? 'x' : 'y';
    kl_snprintf(from[0], sizeof from[0], "(blockIdx.%c * %lld)", pr->p, pr->tm);
    kl_snprintf(from[1], sizeof from[1], "(blockIdx.%c * %lld)", q, pr->tn);
    kl_snprintf(acc, sizeof acc, "%s[kl_i][kl_j]", pr->acc);
    char to0[16], to1[16];
    kl_snprintf(to0, sizeof to0, "blockIdx.%c", pr->p);
    kl_snprintf(to1, sizeof to1, "blockIdx.%c", q);
    tt_pair pairs[3] = {{from[0], to0}, {from[1], to1}, {acc, pr->acc}};
    char *t3 = t2 ? tt_subst(t2, 0, (uint32_t)strlen(t2), pairs, 3) : NULL;
    free(t1);
    free(t2);
    return t3;
}

typedef struct nest_find {
    const kl_rule_ctx *ctx;
    TSNode items[64];
    unsigned n;
    uint32_t skip_s[4], skip_e[4];
    unsigned nskip;
} nest_find;

static bool nest_visit(TSNode n, void *user)
{
    nest_find *f = user;
    for (unsigned i = 0; i < f->nskip; i++)
        if (ts_node_start_byte(n) >= f->skip_s[i] && ts_node_end_byte(n) <= f->skip_e[i]) return false;
    if (is_kl_loop(f->ctx, n, "kl_i") || is_kl_loop(f->ctx, n, "kl_j")) {
        if (f->n < 64) f->items[f->n++] = n;
        return false;
    }
    return true;
}

static kl_status rt_remove_edits(const kl_rule_ctx *ctx, const rb_func *f, const rt_present *pr, kl_edits *out,
                                 kl_error *err)
{
    kl_status st = KL_OK;
    char *t = NULL;
    unsigned line = ts_node_start_point(pr->decl).row + 1;
    /* the accumulator */
    int depth;
    TSNode in = nest_inner(ctx, pr->init, &depth);
    TSNode as = tt_child(in, 0);
    if (depth != 2 || !rb_is(in, "expression_statement") || !rb_is(as, "assignment_expression"))
        return kl_rule_not_applicable(err, "the accumulator %s (line %u) is not filled by a kl_i/kl_j loop", pr->acc,
                                      line);
    {
        char type[64];
        tt_copy_text(ctx, tt_field(pr->decl, "type"), type, sizeof type);
        TSNode rv = tt_field(as, "right");
        char *v = unsubst(ctx->text, ts_node_start_byte(rv), ts_node_end_byte(rv), pr);
        st = v ? kl_edits_addf(out, ts_node_start_byte(pr->decl), ts_node_end_byte(pr->init), "%s %s = %s;", type,
                               pr->acc, v)
               : KL_ERR_NOMEM;
        free(v);
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    }
    /* the product block: a compound starting with `T kl_a[TM];` */
    nest_find nf = {.ctx = ctx};
    nf.skip_s[nf.nskip] = ts_node_start_byte(pr->decl), nf.skip_e[nf.nskip++] = ts_node_end_byte(pr->init);
    TSNode prod = {0};
    {
        uint32_t ms[4], me[4];
        unsigned nm = tt_find(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), "kl_a", ms, me, 4);
        if (nm < 1) return kl_rule_not_applicable(err, "no register product (kl_a) in %s", f->name);
        TSNode root = kl_source_root(ctx->src);
        TSNode at = ts_node_descendant_for_byte_range(root, ms[0], me[0]);
        prod = rb_ancestor(at, "compound_statement");
        TSNode loop = tt_parent(prod);
        TSNode ps[8];
        unsigned np = tt_stmts(prod, ps, 8);
        if (!rb_is(loop, "for_statement") || np != 5)
            return kl_rule_not_applicable(err, "the register product at line %u is not the form this transform writes",
                                          ts_node_start_point(prod).row + 1);
        TSNode a1 = tt_child(nest_inner(ctx, ps[2], &depth), 0);
        TSNode b1 = tt_child(nest_inner(ctx, ps[3], &depth), 0);
        if (!rb_is(a1, "assignment_expression") || !rb_is(b1, "assignment_expression"))
            return kl_rule_not_applicable(err, "the register loads at line %u are not the form this transform writes",
                                          ts_node_start_point(ps[2]).row + 1);
        char *e1 = unsubst(ctx->text, ts_node_start_byte(tt_field(a1, "right")), ts_node_end_byte(tt_field(a1, "right")), pr);
        char *e2 = unsubst(ctx->text, ts_node_start_byte(tt_field(b1, "right")), ts_node_end_byte(tt_field(b1, "right")), pr);
        char ind[64];
        rb_indent_of(ctx, ts_node_start_byte(loop), ind, sizeof ind);
        st = e1 && e2 ? kl_edits_addf(out, ts_node_start_byte(prod), ts_node_end_byte(prod), "{\n%s    %s += %s * %s;\n%s}",
                                      ind, pr->acc, e1, e2, ind)
                      : KL_ERR_NOMEM;
        free(e1);
        free(e2);
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
        nf.skip_s[nf.nskip] = ts_node_start_byte(prod), nf.skip_e[nf.nskip++] = ts_node_end_byte(prod);
    }
    /* the other nests: back to one statement */
    rb_walk(f->body, nest_visit, &nf);
    uint32_t rs[72], re[72];
    unsigned nr = 0;
    for (unsigned i = 0; i < nf.nskip; i++) rs[nr] = nf.skip_s[i], re[nr++] = nf.skip_e[i];
    for (unsigned i = 0; i < nf.n && i < 64; i++) {
        TSNode s = nest_inner(ctx, nf.items[i], &depth);
        if (ts_node_is_null(s))
            return kl_rule_not_applicable(err, "the loop at line %u is not a kl_i/kl_j loop around one statement",
                                          ts_node_start_point(nf.items[i]).row + 1);
        t = unsubst(ctx->text, ts_node_start_byte(s), ts_node_end_byte(s), pr);
        char *back = t ? tt_indent_tail(t, -4 * depth) : NULL;
        uint32_t from = tt_pragma_above(ctx, ts_node_start_byte(nf.items[i]));
        st = !t ? KL_ERR_NOMEM
                : back ? kl_edits_add(out, from, ts_node_end_byte(nf.items[i]), back)
                       : kl_rule_not_applicable(err, "the loop at line %u is not indented as this transform writes it",
                                                ts_node_start_point(nf.items[i]).row + 1);
        free(t);
        free(back);
        if (st == KL_ERR_NOMEM) return kl_error_set(err, st, "out of memory");
        if (st != KL_OK) return st;
        rs[nr] = from, re[nr++] = ts_node_end_byte(nf.items[i]);
    }
    /* the block indices elsewhere */
    char q = pr->p == 'y' ? 'x' : 'y';
    for (int side = 0; side < 2; side++) {
        char pat[64], to[16];
        kl_snprintf(pat, sizeof pat, "(blockIdx.%c * %lld)", side ? q : pr->p, side ? pr->tn : pr->tm);
        kl_snprintf(to, sizeof to, "blockIdx.%c", side ? q : pr->p);
        uint32_t ms[128], me[128];
        unsigned nm = tt_find(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), pat, ms, me, 128);
        for (unsigned k = 0; k < nm && k < 128; k++)
            if (!covered(rs, re, nr, ms[k], me[k])) RT_TRY(kl_edits_add(out, ms[k], me[k], to));
    }
    /* the shared tiles: `TM * X` back to X */
    TSNode st2[MAXSTMT];
    unsigned n = tt_stmts(f->body, st2, MAXSTMT);
    unsigned shrunk = 0;
    for (unsigned i = 0; i < n && i < MAXSTMT; i++) {
        if (!tt_is_shared_decl(ctx, st2[i])) continue;
        TSNode d = tt_field(st2[i], "declarator");
        while (rb_is(d, "array_declarator")) {
            TSNode sz = tt_field(d, "size");
            TSNode l = tt_field(sz, "left"), r = tt_field(sz, "right");
            long long k;
            if (rb_is(sz, "binary_expression") && rb_text_is(ctx, tt_field(sz, "operator"), "*") &&
                rb_is(l, "number_literal") && rb_const_eval(ctx, f->def, l, &k) && (k == pr->tm || k == pr->tn)) {
                if (rb_is(r, "parenthesized_expression")) r = tt_child(r, 0);
                char *rtx = rb_text(ctx, r);
                st = rtx ? kl_edits_add(out, ts_node_start_byte(sz), ts_node_end_byte(sz), rtx) : KL_ERR_NOMEM;
                free(rtx);
                if (st != KL_OK) return kl_error_set(err, st, "out of memory");
                shrunk++;
            }
            d = tt_field(d, "declarator");
        }
    }
    if (shrunk != 2) return kl_rule_not_applicable(err, "%u shared tiles of %s are grown by the register tile, not 2",
                                                   shrunk, f->name);
    return KL_OK;
}

/* ---- the general register-tiled GEMM (any author's form) ------------------------------------------ */
/*
 * A kernel whose threads each hold a 2-D accumulator `T acc[TM][TN]`, updated by one
 * `acc[..][..] += x * y;` (an outer product of values read from two __shared__ tiles), fed by
 * exactly one guarded scalar read of each of two pointer parameters (`c ? P[X * LD + Y] : 0`)
 * and storing `C[X * LD + Y] = acc…` under guards on both coordinates (enclosing `if`s, earlier
 * `if (c) continue;` / `return;`). Whatever the tile layout (transposed, padded, quadrant-split,
 * float4 reads of the tiles, lambdas, a 1-D block), the global indices and their guards say
 * which GEMM it computes: each operand's two coordinates are bounded by two of M, N, K, the
 * bound shared by the two read operands is K, the others pair the reads with the store's row
 * and column. Remove writes that GEMM as the one-output-per-thread shared-tile kernel (16 x 16
 * tiles, a 16 x 16 block, the form smem-tile apply writes and register-tile apply takes) and
 * relaunches it on a (N + 15) / 16 x (M + 15) / 16 grid. Every element of C is computed by one
 * thread as the sum over k in order of tile products, with zeros outside A and B, so any M, N,
 * K (1, 3, 1023) is exact up to the order of the additions.
 */

#define RG_TILE 16
#define RG_MAXG 16

typedef struct rg_guard {
    char lhs[160];         /* normalised: no blanks, no outer parentheses */
    TSNode bound;
} rg_guard;

typedef struct rg_operand {
    char ptr[64];
    TSNode at;             /* the subscript P[...] */
    char x[160], y[160];   /* normalised coordinates: index = X * LD + Y */
    TSNode ld;
    char cast[48];         /* "(size_t)" when X was cast, else "" */
    TSNode bx, by;         /* their bounds */
    TSNode zero;           /* loads: the value outside */
} rg_operand;

typedef struct rg {
    TSNode acc_decl, update, fill;
    char acc[64], acc_type[64], elem[64];
    long long tm, tn;
    unsigned nshared;
    rg_operand op[3];      /* two reads (in text order), the store */
    unsigned nreads;
} rg;

static TSNode rg_strip(TSNode n)
{
    while (rb_is(n, "parenthesized_expression") && tt_child_count(n) == 1) n = tt_child(n, 0);
    return n;
}

/* The text of n without blanks and outer parentheses. */
static void rg_norm(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size)
{
    n = rg_strip(n);
    size_t k = 0;
    for (uint32_t i = ts_node_start_byte(n); i < ts_node_end_byte(n) && k + 1 < size; i++)
        if (ctx->text[i] != ' ' && ctx->text[i] != '\t' && ctx->text[i] != '\n' && ctx->text[i] != '\r')
            buf[k++] = ctx->text[i];
    buf[k] = 0;
}

/* The operands of a chain of binary `op` (through parentheses), at most max. */
static unsigned rg_flatten(const kl_rule_ctx *ctx, TSNode n, const char *op, TSNode *out, unsigned n0, unsigned max)
{
    n = rg_strip(n);
    if (rb_is(n, "binary_expression") && rb_text_is(ctx, tt_field(n, "operator"), op)) {
        n0 = rg_flatten(ctx, tt_field(n, "left"), op, out, n0, max);
        return rg_flatten(ctx, tt_field(n, "right"), op, out, n0, max);
    }
    if (n0 < max) out[n0] = n;
    return n0 + 1;
}

/* Is e the same in every thread and iteration: literals, non-pointer parameters and
 * file-level constants, combined by arithmetic? */
static bool rg_invariant(const kl_rule_ctx *ctx, const rb_func *f, TSNode e)
{
    e = rg_strip(e);
    if (rb_is(e, "number_literal")) return true;
    if (rb_is(e, "identifier")) {
        char name[64];
        long long v;
        tt_copy_text(ctx, e, name, sizeof name);
        if (!ts_node_is_null(rb_param(ctx, f, name))) return !rb_pointer_param(ctx, f, name, NULL, 0);
        return rb_const_name(ctx, f->def, name, &v);
    }
    if (rb_is(e, "binary_expression")) {
        const char *ops[] = {"+", "-", "*", "/", "%"};
        for (unsigned i = 0; i < 5; i++)
            if (rb_text_is(ctx, tt_field(e, "operator"), ops[i]))
                return rg_invariant(ctx, f, tt_field(e, "left")) && rg_invariant(ctx, f, tt_field(e, "right"));
    }
    return false;
}

/* Add the conjuncts `a < b` (`b > a`) of cond to g; negate: the disjuncts of a condition that
 * skips (`a >= b` gives a < b). Other conjuncts are ignored (a coordinate without a bound is
 * refused later). */
static void rg_add_cond(const kl_rule_ctx *ctx, TSNode cond, bool negate, rg_guard *g, unsigned *ng)
{
    if (rb_is(cond, "condition_clause")) cond = tt_field(cond, "value");
    TSNode parts[RG_MAXG];
    unsigned n = rg_flatten(ctx, cond, negate ? "||" : "&&", parts, 0, RG_MAXG);
    for (unsigned i = 0; i < n && i < RG_MAXG && *ng < RG_MAXG; i++) {
        TSNode c = parts[i];
        if (!rb_is(c, "binary_expression")) continue;
        TSNode l = tt_field(c, "left"), r = tt_field(c, "right"), o = tt_field(c, "operator");
        TSNode lhs = {0}, b = {0};
        if (rb_text_is(ctx, o, negate ? ">=" : "<")) lhs = l, b = r;
        else if (rb_text_is(ctx, o, negate ? "<=" : ">")) lhs = r, b = l;
        if (ts_node_is_null(lhs)) continue;
        rg_norm(ctx, lhs, g[*ng].lhs, sizeof g[*ng].lhs);
        g[*ng].bound = rg_strip(b);
        (*ng)++;
    }
}

/* Is s `if (c) continue;`, `if (c) break;` or `if (c) return;` (braced or not, no else)? */
static bool rg_skip_if(const kl_rule_ctx *ctx, TSNode s, TSNode *cond)
{
    if (!rb_is(s, "if_statement") || !ts_node_is_null(tt_field(s, "alternative"))) return false;
    TSNode c = tt_field(s, "consequence");
    if (rb_is(c, "compound_statement")) {
        TSNode one[2];
        if (tt_stmts(c, one, 2) != 1) return false;
        c = one[0];
    }
    if (!rb_is(c, "continue_statement") && !rb_is(c, "break_statement") &&
        !(rb_is(c, "return_statement") && tt_child_count(c) == 0))
        return false;
    (void)ctx;
    *cond = tt_field(s, "condition");
    return true;
}

/* The guards under which node n runs, up to the function body: conditions of enclosing `?:`
 * and `if`s, and the skipped cases of earlier `if (c) continue;` / `return;` in the blocks
 * around it. False when n sits in an else branch. */
static bool rg_guards(const kl_rule_ctx *ctx, TSNode n, TSNode body, rg_guard *g, unsigned *ng)
{
    *ng = 0;
    TSNode ch = n;
    for (TSNode p = tt_parent(n); !ts_node_is_null(p); ch = p, p = tt_parent(p)) {
        if (rb_is(p, "conditional_expression") || rb_is(p, "if_statement")) {
            if (ts_node_eq(ch, tt_field(p, "consequence"))) rg_add_cond(ctx, tt_field(p, "condition"), false, g, ng);
            else if (ts_node_eq(ch, tt_field(p, "alternative"))) return false;
        } else if (rb_is(p, "compound_statement")) {
            for (TSNode s = rb_prev_stmt(ch); !ts_node_is_null(s); s = rb_prev_stmt(s)) {
                TSNode c;
                if (rg_skip_if(ctx, s, &c)) rg_add_cond(ctx, c, true, g, ng);
            }
        }
        if (ts_node_eq(p, body)) break;
    }
    return true;
}

static bool rg_index_split(const kl_rule_ctx *ctx, const rb_func *f, rg_operand *o, TSNode idx, const char *extra,
                           const rg_guard *g, unsigned ng, char *why, size_t size);

/* index = X * LD + Y (X possibly cast), with X and Y bounded by guards. */
static bool rg_operand_index(const kl_rule_ctx *ctx, const rb_func *f, rg_operand *o, const rg_guard *g, unsigned ng,
                             char *why, size_t size)
{
    unsigned line = ts_node_start_point(o->at).row + 1;
    TSNode idx = tt_field(o->at, "index");
    if (ts_node_is_null(idx)) {
        TSNode ixs = tt_field(o->at, "indices");
        if (tt_child_count(ixs) != 1) {
            kl_snprintf(why, size, "the index of %s at line %u is not one expression", o->ptr, line);
            return false;
        }
        idx = tt_child(ixs, 0);
    }
    return rg_index_split(ctx, f, o, idx, NULL, g, ng, why, size);
}

/* The index expression idx (plus the constant term `extra` when not NULL: an element offset
 * from a local pointer) as X * LD + Y, X and Y bounded by guards. */
static bool rg_index_split(const kl_rule_ctx *ctx, const rb_func *f, rg_operand *o, TSNode idx, const char *extra,
                           const rg_guard *g, unsigned ng, char *why, size_t size)
{
    unsigned line = ts_node_start_point(o->at).row + 1;
    TSNode terms[16];
    unsigned nt = rg_flatten(ctx, idx, "+", terms, 0, 16);
    int prod = -1;
    TSNode x = {0};
    for (unsigned i = 0; i < nt && i < 16; i++) {
        TSNode t = terms[i];
        if (!rb_is(t, "binary_expression") || !rb_text_is(ctx, tt_field(t, "operator"), "*")) continue;
        TSNode l = tt_field(t, "left"), r = tt_field(t, "right");
        bool li = rg_invariant(ctx, f, l), ri = rg_invariant(ctx, f, r);
        if (li == ri) continue;
        if (prod >= 0) {
            kl_snprintf(why, size, "the index of %s at line %u has two strided terms", o->ptr, line);
            return false;
        }
        prod = (int)i;
        x = li ? r : l;
        o->ld = rg_strip(li ? l : r);
    }
    if (prod < 0 || nt > 16 || nt < 2) {
        kl_snprintf(why, size, "the index of %s at line %u is not `X * LD + Y` with LD the same in every thread", o->ptr,
                    line);
        return false;
    }
    x = rg_strip(x);
    o->cast[0] = 0;
    if (rb_is(x, "cast_expression")) {
        char ty[40];
        tt_copy_text(ctx, tt_field(x, "type"), ty, sizeof ty);
        kl_snprintf(o->cast, sizeof o->cast, "(%s)", ty);
        x = tt_field(x, "value");
    }
    rg_norm(ctx, x, o->x, sizeof o->x);
    o->y[0] = 0;
    for (unsigned i = 0; i < nt; i++) {
        if ((int)i == prod) continue;
        char t[160];
        rg_norm(ctx, terms[i], t, sizeof t);
        if (extra && !strcmp(t, o->ptr)) continue; /* `P + X * LD + Y`: the base of a local pointer */
        size_t k = strlen(o->y);
        kl_snprintf(o->y + k, sizeof o->y - k, "%s%s", k ? "+" : "", t);
    }
    if (extra && extra[0]) {
        size_t k = strlen(o->y);
        kl_snprintf(o->y + k, sizeof o->y - k, "%s%s", k ? "+" : "", extra);
    }
    o->bx = o->by = (TSNode){0};
    for (unsigned i = 0; i < ng; i++) {
        if (ts_node_is_null(o->bx) && !strcmp(g[i].lhs, o->x)) o->bx = g[i].bound;
        else if (ts_node_is_null(o->by) && !strcmp(g[i].lhs, o->y)) o->by = g[i].bound;
    }
    if (ts_node_is_null(o->bx) || ts_node_is_null(o->by)) {
        kl_snprintf(why, size, "the access to %s at line %u has no guard `%s < bound` (its edges are not handled)", o->ptr,
                    line, ts_node_is_null(o->bx) ? o->x : o->y);
        return false;
    }
    if (!rg_invariant(ctx, f, o->bx) || !rg_invariant(ctx, f, o->by)) {
        kl_snprintf(why, size, "a bound of %s at line %u is not the same in every thread", o->ptr, line);
        return false;
    }
    return true;
}

typedef struct rg_walk {
    const kl_rule_ctx *ctx;
    const rb_func *f;
    rg *g;
    unsigned updates, fills, others, zdims;
    bool zuse;
    TSNode bad;            /* a pointer use that is not a scalar subscript */
    TSNode subs[8];
    unsigned nsubs;
} rg_walk;

static bool rg_acc_elem(const kl_rule_ctx *ctx, TSNode n, const char *acc)
{
    int depth = 0;
    while (rb_is(n, "subscript_expression")) n = tt_field(n, "argument"), depth++;
    return depth == 2 && rb_text_is(ctx, n, acc);
}

static bool rg_zero(const kl_rule_ctx *ctx, TSNode v)
{
    v = rg_strip(v);
    if (rb_is(v, "cast_expression")) v = rg_strip(tt_field(v, "value"));
    if (!rb_is(v, "number_literal")) return false;
    char t[32];
    tt_copy_text(ctx, v, t, sizeof t);
    return strtod(t, NULL) == 0.0;
}

static bool rg_visit(TSNode n, void *user)
{
    rg_walk *w = user;
    const kl_rule_ctx *ctx = w->ctx;
    if (rb_is_builtin(ctx, n, "blockIdx", 'z') || rb_is_builtin(ctx, n, "gridDim", 'z')) w->zuse = true;
    if (rb_is(n, "assignment_expression") && rg_acc_elem(ctx, tt_field(n, "left"), w->g->acc)) {
        TSNode r = rg_strip(tt_field(n, "right"));
        if (rb_text_is(ctx, tt_field(n, "operator"), "+=") && rb_is(r, "binary_expression") &&
            rb_text_is(ctx, tt_field(r, "operator"), "*")) {
            w->updates++;
            w->g->update = n;
        } else if (rb_text_is(ctx, tt_field(n, "operator"), "=") && rg_zero(ctx, r)) {
            w->fills++;
            w->g->fill = r;
        } else {
            w->others++;
        }
    }
    if (rb_is(n, "identifier")) {
        char name[64];
        tt_copy_text(ctx, n, name, sizeof name);
        if (rb_pointer_param(ctx, w->f, name, NULL, 0)) {
            TSNode p = tt_parent(n);
            if (rb_is(p, "subscript_expression") && ts_node_eq(tt_field(p, "argument"), n) &&
                !rb_is(tt_parent(p), "subscript_expression")) {
                if (w->nsubs < 8) w->subs[w->nsubs] = p;
                w->nsubs++;
            } else if (ts_node_is_null(w->bad)) {
                w->bad = n;
            }
        }
    }
    return true;
}

/* Is there a general register tile in f (an accumulator array updated by an outer product
 * beside two shared tiles)? Fills acc_decl, acc, tm, tn. */
static bool rg_detect(const kl_rule_ctx *ctx, const rb_func *f, rg *g)
{
    memset(g, 0, sizeof *g);
    if (!f->global || ts_node_is_null(f->body)) return false;
    TSNode st[MAXSTMT];
    unsigned n = tt_stmts(f->body, st, MAXSTMT);
    for (unsigned i = 0; i < n && i < MAXSTMT; i++) {
        if (!rb_is(st[i], "declaration")) continue;
        if (tt_is_shared_decl(ctx, st[i])) {
            g->nshared++;
            continue;
        }
        TSNode d = tt_field(st[i], "declarator");
        TSNode in = tt_field(d, "declarator");
        if (!ts_node_is_null(g->acc_decl) || !rb_is(d, "array_declarator") || !rb_is(in, "array_declarator") ||
            !rb_is(tt_field(in, "declarator"), "identifier"))
            continue;
        if (!rb_const_eval(ctx, f->def, tt_field(in, "size"), &g->tm) ||
            !rb_const_eval(ctx, f->def, tt_field(d, "size"), &g->tn) || g->tm * g->tn < 2)
            continue;
        if (i + 1 < n && is_kl_loop(ctx, st[i + 1], "kl_i")) return false; /* apply's own form */
        g->acc_decl = st[i];
        tt_copy_text(ctx, tt_field(in, "declarator"), g->acc, sizeof g->acc);
        tt_copy_text(ctx, tt_field(st[i], "type"), g->acc_type, sizeof g->acc_type);
    }
    if (ts_node_is_null(g->acc_decl) || g->nshared != 2) return false;
    rg_walk w = {.ctx = ctx, .f = f, .g = g};
    rb_walk(f->body, rg_visit, &w);
    return w.updates == 1;
}

/* The full analysis of a detected tile: 1, or 0 with why. */
static int rg_analyse(const kl_rule_ctx *ctx, const rb_func *f, rg *g, char *why, size_t size)
{
    rg_walk w = {.ctx = ctx, .f = f, .g = g};
    rb_walk(f->body, rg_visit, &w);
    unsigned line = ts_node_start_point(g->acc_decl).row + 1;
    if (w.zuse) {
        kl_snprintf(why, size, "%s uses blockIdx.z / gridDim.z (a batched or split product)", f->name);
        return 0;
    }
    if (w.fills < 1 || w.others) {
        kl_snprintf(why, size, "the accumulator %s (line %u) is not zero-filled then only updated", g->acc, line);
        return 0;
    }
    if (!ts_node_is_null(w.bad)) {
        char name[64];
        tt_copy_text(ctx, w.bad, name, sizeof name);
        kl_snprintf(why, size,
                    "%s at line %u is used other than as a scalar element (a vector access or an alias): remove "
                    "vectorize first",
                    name, ts_node_start_point(w.bad).row + 1);
        return 0;
    }
    if (w.nsubs != 3) {
        kl_snprintf(why, size, "%u accesses to pointer parameters in %s, not one read of each operand and one store",
                    w.nsubs, f->name);
        return 0;
    }
    /* the shared tiles' element type */
    TSNode st[MAXSTMT];
    unsigned n = tt_stmts(f->body, st, MAXSTMT);
    g->elem[0] = 0;
    for (unsigned i = 0; i < n && i < MAXSTMT; i++) {
        if (!rb_is(st[i], "declaration") || !tt_is_shared_decl(ctx, st[i])) continue;
        char ty[64];
        tt_copy_text(ctx, tt_field(st[i], "type"), ty, sizeof ty);
        unsigned dims = 0;
        for (TSNode d = tt_field(st[i], "declarator"); rb_is(d, "array_declarator"); d = tt_field(d, "declarator")) dims++;
        if (dims != 2) {
            kl_snprintf(why, size, "the shared tile at line %u has %u dimensions, not 2 (stages: remove double-buffer first)",
                        ts_node_start_point(st[i]).row + 1, dims);
            return 0;
        }
        if (g->elem[0] && strcmp(ty, g->elem)) {
            kl_snprintf(why, size, "the shared tiles of %s hold %s and %s", f->name, g->elem, ty);
            return 0;
        }
        kl_snprintf(g->elem, sizeof g->elem, "%s", ty);
    }
    g->nreads = 0;
    bool stored = false;
    for (unsigned i = 0; i < 3; i++) {
        TSNode s = w.subs[i];
        unsigned l = ts_node_start_point(s).row + 1;
        TSNode p = tt_parent(s);
        while (rb_is(p, "parenthesized_expression")) p = tt_parent(p);
        rg_operand *o;
        rg_guard gs[RG_MAXG];
        unsigned ng = 0;
        if (rb_is(p, "assignment_expression") && ts_node_eq(tt_field(p, "left"), s)) {
            if (stored || !rb_text_is(ctx, tt_field(p, "operator"), "=") ||
                !rb_is(tt_parent(p), "expression_statement")) {
                kl_snprintf(why, size, "the write at line %u is not one plain store `C[...] = value;`", l);
                return 0;
            }
            /* the stored value: an accumulator element, directly or through a local pointer into it */
            TSNode v = rg_strip(tt_field(p, "right"));
            TSNode base = v;
            while (rb_is(base, "subscript_expression")) base = tt_field(base, "argument");
            bool ok = rb_is(v, "subscript_expression") && rb_is(base, "identifier");
            if (ok && !rb_text_is(ctx, base, g->acc)) {
                char bname[64];
                tt_copy_text(ctx, base, bname, sizeof bname);
                /* `T *v = &acc[...]` or `= acc[...]` declared once in the kernel */
                uint32_t ms[4], me[4];
                char pat[96];
                kl_snprintf(pat, sizeof pat, "* %s = &%s", bname, g->acc);
                unsigned k1 = tt_find(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), pat, ms, me, 4);
                kl_snprintf(pat, sizeof pat, "* %s = %s", bname, g->acc);
                unsigned k2 = tt_find(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), pat, ms, me, 4);
                ok = k1 + k2 == 1 && rb_count_ident(ctx, f->body, bname) >= 2;
                /* and never assigned again */
                kl_snprintf(pat, sizeof pat, "%s =", bname);
                ok = ok && tt_count(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), pat) == 1;
            }
            if (!ok) {
                kl_snprintf(why, size, "the value stored at line %u is not an element of %s", l, g->acc);
                return 0;
            }
            o = &g->op[2];
            stored = true;
            if (!rg_guards(ctx, tt_parent(p), f->body, gs, &ng)) {
                kl_snprintf(why, size, "the store at line %u sits in an else branch", l);
                return 0;
            }
        } else {
            if (g->nreads == 2) {
                kl_snprintf(why, size, "three reads of pointer parameters (line %u): not a product of two operands", l);
                return 0;
            }
            o = &g->op[g->nreads++];
            TSNode c = p;
            if (!rb_is(c, "conditional_expression") || !ts_node_eq(rg_strip(tt_field(c, "consequence")), s) ||
                !rg_zero(ctx, tt_field(c, "alternative"))) {
                kl_snprintf(why, size, "the read at line %u is not guarded as `cond ? P[...] : 0`", l);
                return 0;
            }
            o->zero = rg_strip(tt_field(c, "alternative"));
            if (!rg_guards(ctx, s, f->body, gs, &ng)) {
                kl_snprintf(why, size, "the read at line %u sits in an else branch", l);
                return 0;
            }
        }
        o->at = s;
        tt_copy_text(ctx, tt_field(s, "argument"), o->ptr, sizeof o->ptr);
        if (!rg_operand_index(ctx, f, o, gs, ng, why, size)) return 0;
    }
    if (!stored || g->nreads != 2) {
        kl_snprintf(why, size, "%s does not read two operands and store one result", f->name);
        return 0;
    }
    if (!strcmp(g->op[0].ptr, g->op[1].ptr) || !strcmp(g->op[0].ptr, g->op[2].ptr) ||
        !strcmp(g->op[1].ptr, g->op[2].ptr)) {
        kl_snprintf(why, size, "%s reads and writes the same pointer", f->name);
        return 0;
    }
    return 1;
}

/* The roles: which read is A, which coordinate of each is k, which of C is the row. */
typedef struct rg_roles {
    int a;                 /* index of the A operand in op[0..1] */
    bool a_kx, b_kx;       /* the k coordinate is X (else Y) */
    bool c_rowx;           /* C's row is X */
} rg_roles;

static bool rg_same(const kl_rule_ctx *ctx, TSNode a, TSNode b)
{
    char x[160], y[160];
    rg_norm(ctx, a, x, sizeof x);
    rg_norm(ctx, b, y, sizeof y);
    return !strcmp(x, y);
}

static int rg_solve(const kl_rule_ctx *ctx, const rg *g, rg_roles *out)
{
    int found = 0;
    for (int a = 0; a < 2; a++)
        for (int akx = 0; akx < 2; akx++)
            for (int bkx = 0; bkx < 2; bkx++)
                for (int crx = 0; crx < 2; crx++) {
                    const rg_operand *A = &g->op[a], *B = &g->op[1 - a], *C = &g->op[2];
                    TSNode ak = akx ? A->bx : A->by, am = akx ? A->by : A->bx;
                    TSNode bk = bkx ? B->bx : B->by, bn = bkx ? B->by : B->bx;
                    TSNode cm = crx ? C->bx : C->by, cn = crx ? C->by : C->bx;
                    if (!rg_same(ctx, ak, bk) || !rg_same(ctx, am, cm) || !rg_same(ctx, bn, cn)) continue;
                    /* the swap of A and B with C transposed is the same product */
                    rg_roles r = {a, akx, bkx, crx};
                    if (a == 1) r = (rg_roles){0, bkx, akx, !crx};
                    if (found && r.a == out->a && r.a_kx == out->a_kx && r.b_kx == out->b_kx && r.c_rowx == out->c_rowx) continue;
                    if (found) return 2;
                    *out = r;
                    found = 1;
                }
    return found;
}

/* A name not taken by a parameter or a file-level constant: base, else kl_<base>. */
static void rg_name(const kl_rule_ctx *ctx, const rb_func *f, const char *base, char *out, size_t size)
{
    long long v;
    bool taken = !ts_node_is_null(rb_param(ctx, f, base)) || rb_const_name(ctx, f->def, base, &v);
    kl_snprintf(out, size, "%s%s", taken ? "kl_" : "", base);
}

/* The launch argument passed for bound b (a parameter of f), or b's own text. */
static char *rg_host_bound(const kl_rule_ctx *ctx, const rb_func *f, const rb_launch *l, TSNode b)
{
    if (rb_is(b, "identifier")) {
        char name[64];
        tt_copy_text(ctx, b, name, sizeof name);
        unsigned np = tt_child_count(f->params);
        for (unsigned i = 0, k = 0; i < np; i++) {
            TSNode p = tt_child(f->params, i);
            if (!rb_is(p, "parameter_declaration")) continue;
            if (rb_text_is(ctx, rb_declarator_name(tt_field(p, "declarator")), name)) {
                TSNode arg = tt_child(l->args, k);
                if (ts_node_is_null(arg)) return NULL;
                char *t = rb_text(ctx, arg);
                if (!t || rb_is(arg, "identifier") || rb_is(arg, "number_literal")) return t;
                size_t n = strlen(t) + 3;
                char *w = malloc(n);
                if (w) kl_snprintf(w, n, "(%s)", t);
                free(t);
                return w;
            }
            k++;
        }
    }
    /* a constant: only when it names no parameter */
    return rb_text(ctx, b);
}

/* Is the local dim3 named by launch l's configuration argument `which` used only as that
 * argument of launches of f (so its extents may change)? */
static bool rg_local_only_here(const kl_rule_ctx *ctx, const rb_func *f, const rb_launch *ls, unsigned nl,
                               const rb_launch *l, int which)
{
    char name[64];
    tt_copy_text(ctx, l->cfg[which], name, sizeof name);
    unsigned uses = 0;
    for (unsigned i = 0; i < nl; i++)
        if (ts_node_eq(ls[i].host.def, l->host.def) && rb_text_is(ctx, ls[i].cfg[which], name)) uses++;
    (void)f;
    return rb_count_ident(ctx, l->host.body, name) == uses + 1;
}

static kl_status rg_relaunch(const kl_rule_ctx *ctx, const rb_func *f, TSNode Mb, TSNode Nb, bool no_smem, kl_edits *out,
                             kl_error *err);

static kl_status rg_remove_edits(const kl_rule_ctx *ctx, const rb_func *f, rg *g, kl_edits *out, kl_error *err)
{
    char why[320];
    if (!rg_analyse(ctx, f, g, why, sizeof why)) return kl_rule_not_applicable(err, "%s", why);
    rg_roles r;
    int ns = rg_solve(ctx, g, &r);
    if (ns != 1)
        return kl_rule_not_applicable(err,
                                      ns ? "the bounds of %s, %s and %s do not tell M, N and K apart (the same text "
                                           "bounds two dimensions)"
                                         : "the bounds of %s, %s and %s are not those of one product (A: M x K, B: K x N, "
                                           "C: M x N)",
                                      g->op[0].ptr, g->op[1].ptr, g->op[2].ptr);
    const rg_operand *A = &g->op[r.a], *B = &g->op[1 - r.a], *C = &g->op[2];
    TSNode Mb = r.a_kx ? A->by : A->bx, Kb = r.a_kx ? A->bx : A->by, Nb = r.b_kx ? B->by : B->bx;
    /* __launch_bounds__ must allow the new block */
    {
        uint32_t ms[2], me[2];
        TSNode hs = f->outer;
        unsigned nm = tt_find(ctx->text, ts_node_start_byte(hs), ts_node_start_byte(f->body), "__launch_bounds__", ms, me, 2);
        if (nm) {
            const char *p = ctx->text + me[0];
            while (*p == ' ' || *p == '(') p++;
            char t[64];
            size_t k = 0;
            while (k + 1 < sizeof t && p[k] && p[k] != ',' && p[k] != ')' && p[k] != ' ') t[k] = p[k], k++;
            t[k] = 0;
            long long v = -1;
            char *end = NULL;
            if (t[0] >= '0' && t[0] <= '9') v = strtoll(t, &end, 0);
            else if (!rb_const_name(ctx, f->def, t, &v)) v = -1;
            if (v < RG_TILE * RG_TILE)
                return kl_rule_not_applicable(err, "__launch_bounds__(%s) of %s does not allow the %d x %d block of one "
                                                   "output per thread", t, f->name, RG_TILE, RG_TILE);
        }
    }
    char row[32], col[32], k0[32], kk[32], as[32], bs[32];
    rg_name(ctx, f, "row", row, sizeof row);
    rg_name(ctx, f, "col", col, sizeof col);
    rg_name(ctx, f, "k0", k0, sizeof k0);
    rg_name(ctx, f, "kk", kk, sizeof kk);
    rg_name(ctx, f, "As", as, sizeof as);
    rg_name(ctx, f, "Bs", bs, sizeof bs);
    char *M = rb_text(ctx, Mb), *N = rb_text(ctx, Nb), *K = rb_text(ctx, Kb);
    char *lda = rb_text(ctx, A->ld), *ldb = rb_text(ctx, B->ld), *ldc = rb_text(ctx, C->ld);
    char *za = rb_text(ctx, A->zero), *zb = rb_text(ctx, B->zero), *zacc = rb_text(ctx, g->fill);
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_status st = KL_OK;
    if (!M || !N || !K || !lda || !ldb || !ldc || !za || !zb || !zacc) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    char ind[64];
    rb_indent_of(ctx, ts_node_start_byte(f->def), ind, sizeof ind);
    char ak[64], bk[64], aidx[400], bidx[400], cidx[400];
    kl_snprintf(ak, sizeof ak, "(%s + threadIdx.x)", k0);
    kl_snprintf(bk, sizeof bk, "(%s + threadIdx.y)", k0);
    if (r.a_kx) kl_snprintf(aidx, sizeof aidx, "%s%s * %s + %s", A->cast, ak, lda, row);
    else kl_snprintf(aidx, sizeof aidx, "%s%s * %s + %s", A->cast, row, lda, ak);
    if (r.b_kx) kl_snprintf(bidx, sizeof bidx, "%s%s * %s + %s", B->cast, bk, ldb, col);
    else kl_snprintf(bidx, sizeof bidx, "%s%s * %s + %s", B->cast, col, ldb, bk);
    if (r.c_rowx) kl_snprintf(cidx, sizeof cidx, "%s%s * %s + %s", C->cast, row, ldc, col);
    else kl_snprintf(cidx, sizeof cidx, "%s%s * %s + %s", C->cast, col, ldc, row);
    const char *i1 = ind;
    kl_strbuf_addf(&sb, "{\n%s    // smem-tile: %d x %d tiles of %s and %s in shared memory (one output per thread)\n", i1, RG_TILE,
                   RG_TILE, A->ptr, B->ptr);
    kl_strbuf_addf(&sb, "%s    __shared__ %s %s[%d][%d];\n", i1, g->elem, as, RG_TILE, RG_TILE);
    kl_strbuf_addf(&sb, "%s    __shared__ %s %s[%d][%d];\n", i1, g->elem, bs, RG_TILE, RG_TILE);
    kl_strbuf_addf(&sb, "%s    const int %s = blockIdx.y * %d + threadIdx.y;\n", i1, row, RG_TILE);
    kl_strbuf_addf(&sb, "%s    const int %s = blockIdx.x * %d + threadIdx.x;\n", i1, col, RG_TILE);
    kl_strbuf_addf(&sb, "%s    %s %s = %s;\n", i1, g->acc_type, g->acc, zacc);
    kl_strbuf_addf(&sb, "%s    for (int %s = 0; %s < %s; %s += %d) {\n", i1, k0, k0, K, k0, RG_TILE);
    kl_strbuf_addf(&sb, "%s        %s[threadIdx.y][threadIdx.x] = %s < %s && %s + threadIdx.x < %s ? %s[%s] : %s;\n", i1, as,
                   row, M, k0, K, A->ptr, aidx, za);
    kl_strbuf_addf(&sb, "%s        %s[threadIdx.y][threadIdx.x] = %s + threadIdx.y < %s && %s < %s ? %s[%s] : %s;\n", i1, bs,
                   k0, K, col, N, B->ptr, bidx, zb);
    kl_strbuf_addf(&sb, "%s        __syncthreads();\n", i1);
    kl_strbuf_addf(&sb, "%s        for (int %s = 0; %s < %d; %s++) {\n", i1, kk, kk, RG_TILE, kk);
    kl_strbuf_addf(&sb, "%s            %s += %s[threadIdx.y][%s] * %s[%s][threadIdx.x];\n", i1, g->acc, as, kk, bs, kk);
    kl_strbuf_addf(&sb, "%s        }\n%s        __syncthreads();\n%s    }\n", i1, i1, i1);
    kl_strbuf_addf(&sb, "%s    if (%s < %s && %s < %s) {\n%s        %s[%s] = %s;\n%s    }\n%s}", i1, row, M, col, N, i1,
                   C->ptr, cidx, g->acc, i1, i1);
    if (sb.failed) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    st = kl_edits_add(out, ts_node_start_byte(f->body), ts_node_end_byte(f->body), kl_strbuf_str(&sb));
    if (st != KL_OK) {
        st = kl_error_set(err, st, "out of memory");
        goto cleanup;
    }
    st = rg_relaunch(ctx, f, Mb, Nb, false, out, err);
cleanup:
    kl_strbuf_release(&sb);
    free(M), free(N), free(K), free(lda), free(ldb), free(ldc), free(za), free(zb), free(zacc);
    return st;
}

/* Every launch of f: a TILE x TILE block, a grid over C (Mb, Nb: f's bounds of C's rows and
 * columns); no_smem: a dynamic shared memory size becomes 0 (the new body declares its tiles). */
static kl_status rg_relaunch(const kl_rule_ctx *ctx, const rb_func *f, TSNode Mb, TSNode Nb, bool no_smem, kl_edits *out,
                             kl_error *err)
{
    kl_status st = KL_OK;
    rb_launch ls[16];
    unsigned nl = rb_launches(ctx, f->name, ls, 16);
    if (nl == 0 || nl > 16) return kl_rule_not_applicable(err, "%s is not launched in the file", f->name);
    uint32_t done[32];
    unsigned ndone = 0;
    for (unsigned i = 0; i < nl && st == KL_OK; i++) {
        unsigned line = ts_node_start_point(ls[i].call).row + 1;
        if (ls[i].ncfg < 2) {
            st = kl_rule_not_applicable(err, "the launch at line %u has no grid and block", line);
            break;
        }
        char *hm = rg_host_bound(ctx, f, &ls[i], Mb), *hn = rg_host_bound(ctx, f, &ls[i], Nb);
        TSNode ga[3];
        unsigned gn = 0;
        if (!hm || !hn) {
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        } else if (rb_is(ls[i].cfg[0], "identifier") && tt_dim3_args(ctx, ls[i].host.body, ls[i].cfg[0], ga, &gn) &&
                   gn >= 2 && rg_local_only_here(ctx, f, ls, nl, &ls[i], 0)) {
            /* a local dim3: its extents */
            if (gn == 3 && !rb_text_is(ctx, ga[2], "1")) {
                st = kl_rule_not_applicable(err, "the grid of the launch at line %u has a z extent", line);
            } else {
                bool seen = false;
                for (unsigned k = 0; k < ndone; k++) seen |= done[k] == ts_node_start_byte(ga[0]);
                if (!seen && ndone < 32) {
                    done[ndone++] = ts_node_start_byte(ga[0]);
                    st = kl_edits_addf(out, ts_node_start_byte(ga[0]), ts_node_end_byte(ga[0]), "(%s + %d) / %d", hn,
                                       RG_TILE - 1, RG_TILE);
                    if (st == KL_OK)
                        st = kl_edits_addf(out, ts_node_start_byte(ga[1]), ts_node_end_byte(ga[1]), "(%s + %d) / %d", hm,
                                           RG_TILE - 1, RG_TILE);
                }
            }
        } else {
            st = kl_edits_addf(out, ts_node_start_byte(ls[i].cfg[0]), ts_node_end_byte(ls[i].cfg[0]),
                               "dim3((%s + %d) / %d, (%s + %d) / %d)", hn, RG_TILE - 1, RG_TILE, hm, RG_TILE - 1, RG_TILE);
        }
        TSNode ba[3];
        unsigned bn = 0;
        if (st != KL_OK) {
        } else if (rb_is(ls[i].cfg[1], "identifier") && tt_dim3_args(ctx, ls[i].host.body, ls[i].cfg[1], ba, &bn) &&
                   bn >= 2 && rg_local_only_here(ctx, f, ls, nl, &ls[i], 1)) {
            bool seen = false;
            for (unsigned k = 0; k < ndone; k++) seen |= done[k] == ts_node_start_byte(ba[0]);
            if (!seen && ndone < 32) {
                done[ndone++] = ts_node_start_byte(ba[0]);
                if (bn == 3 && !rb_text_is(ctx, ba[2], "1"))
                    st = kl_rule_not_applicable(err, "the block of the launch at line %u has a z extent", line);
                else
                    st = kl_edits_addf(out, ts_node_start_byte(ba[0]), ts_node_end_byte(ba[1]), "%d, %d", RG_TILE, RG_TILE);
            }
        } else {
            st = kl_edits_addf(out, ts_node_start_byte(ls[i].cfg[1]), ts_node_end_byte(ls[i].cfg[1]), "dim3(%d, %d)",
                               RG_TILE, RG_TILE);
        }
        if (st == KL_OK && no_smem && ls[i].ncfg >= 3 && !ts_node_is_null(ls[i].cfg[2]) && !rb_text_is(ctx, ls[i].cfg[2], "0"))
            st = kl_edits_add(out, ts_node_start_byte(ls[i].cfg[2]), ts_node_end_byte(ls[i].cfg[2]), "0");
        if (st == KL_ERR_NOMEM) st = kl_error_set(err, st, "out of memory");
        free(hm);
        free(hn);
    }
    return st;
}

/* ---- the per-warp fragment tile (the hgemm expert after tensor-core's remove) ---------------------- */
/*
 * A kernel whose threads hold the accumulators of an mma warp tile, `float acc[FM][FN][4]`,
 * zero-filled and updated by one `acc[..][..][..] += x * y;`, its tiles loaded by one call of a
 * `__device__` helper (the pipeline gone: double-buffer first) that reads each operand once
 * element-wise, `cond ? P[X * LD + Y] : zero` (P a pointer parameter of the helper given a pointer
 * parameter of the kernel; `zero` 0 or a local holding `__float2bfloat16(0.0f)`), and storing
 * elements `cvt(v)` of the accumulator through `T* dst = C + X * LD + Y;` (`dst[0] = …`, `dst[1] =
 * …`) or `C[X * LD + Y] = …` under guards on both coordinates. What sits in the branch of an
 * `if (T)` on a template parameter with an element-wise `else` (the 16-byte cp.async copies and
 * bf16x2 stores of the aligned instance) is not read: both instances become the same kernel.
 * The bounds name the product as for the general form; remove writes it as the
 * one-output-per-thread shared-tile GEMM (16 x 16), with the operands converted to float in the
 * product and the store's conversion kept, like naive.cu.
 */

typedef struct rf {
    TSNode acc_decl, call;
    const rb_func *helper;
    char acc[64], cvt_out[64];
    rg_operand op[3];          /* A-or-B reads (in the helper), the store (in the kernel) */
    char bx[3][96], by[3][96]; /* the bounds as the kernel names them */
    TSNode kbx[3], kby[3];     /* kernel-side nodes of the bounds (null for constants of the helper) */
    char ld[3][96];            /* the strides as the kernel names them */
    char elem[64];
    unsigned nreads;
} rf;

static bool rf_is_acc3(const kl_rule_ctx *ctx, TSNode n, const char *acc)
{
    int depth = 0;
    while (rb_is(n, "subscript_expression")) n = tt_field(n, "argument"), depth++;
    return depth == 3 && rb_text_is(ctx, n, acc);
}

/* Is n inside the first branch of `if (T)` (else: inside its else branch) with T a template
 * parameter of f and an else branch? */
static bool rf_template_if(const kl_rule_ctx *ctx, const rb_func *f, TSNode n, bool in_else)
{
    if (!f->templated) return false;
    TSNode tp = tt_field(f->outer, "parameters");
    for (TSNode ch = n, p = tt_parent(n); !ts_node_is_null(p) && !ts_node_eq(ch, f->body); ch = p, p = tt_parent(p)) {
        if (!rb_is(p, "if_statement") || ts_node_is_null(tt_field(p, "alternative"))) continue;
        if (!ts_node_eq(ch, tt_field(p, in_else ? "alternative" : "consequence"))) continue;
        TSNode c = rg_strip(tt_field(tt_field(p, "condition"), "value"));
        if (ts_node_is_null(c)) c = rg_strip(tt_field(p, "condition"));
        if (!rb_is(c, "identifier")) continue;
        char name[64];
        tt_copy_text(ctx, c, name, sizeof name);
        if (!ts_node_is_null(tp) && tt_uses(ctx->text, ts_node_start_byte(tp), ts_node_end_byte(tp), name)) return true;
    }
    return false;
}

static bool rf_in_template_branch(const kl_rule_ctx *ctx, const rb_func *f, TSNode n)
{
    return rf_template_if(ctx, f, n, false);
}

/* The guards of n as rg_guards, an else branch of a template `if (T)` allowed. */
static bool rf_guards(const kl_rule_ctx *ctx, const rb_func *f, TSNode n, rg_guard *g, unsigned *ng)
{
    *ng = 0;
    TSNode ch = n;
    for (TSNode p = tt_parent(n); !ts_node_is_null(p); ch = p, p = tt_parent(p)) {
        if (rb_is(p, "conditional_expression") || rb_is(p, "if_statement")) {
            if (ts_node_eq(ch, tt_field(p, "consequence"))) rg_add_cond(ctx, tt_field(p, "condition"), false, g, ng);
            else if (ts_node_eq(ch, tt_field(p, "alternative")) && !rf_template_if(ctx, f, ch, true)) return false;
        } else if (rb_is(p, "compound_statement")) {
            for (TSNode s = rb_prev_stmt(ch); !ts_node_is_null(s); s = rb_prev_stmt(s)) {
                TSNode c;
                if (rg_skip_if(ctx, s, &c)) rg_add_cond(ctx, c, true, g, ng);
            }
        }
        if (ts_node_eq(p, f->body)) break;
    }
    return true;
}

/* A zero: a literal 0, E(0.0f), __float2bfloat16(0.0f) / __float2half(0.0f), or a local of f
 * initialised so. */
static bool rf_zero(const kl_rule_ctx *ctx, const rb_func *f, TSNode v, int depth)
{
    v = rg_strip(v);
    if (rg_zero(ctx, v)) return true;
    if (rb_is(v, "call_expression")) {
        TSNode args = tt_field(v, "arguments");
        return tt_child_count(args) == 1 && rg_zero(ctx, tt_child(args, 0));
    }
    if (rb_is(v, "identifier") && depth == 0) {
        char name[64], pat[96];
        tt_copy_text(ctx, v, name, sizeof name);
        kl_snprintf(pat, sizeof pat, "%s =", name);
        uint32_t ms[2], me[2];
        if (tt_find(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), pat, ms, me, 2) != 1) return false;
        TSNode d = tt_parent(ts_node_descendant_for_byte_range(kl_source_root(ctx->src), ms[0], ms[0] + (uint32_t)strlen(name)));
        if (!rb_is(d, "init_declarator")) return false;
        return rf_zero(ctx, f, tt_field(d, "value"), 1);
    }
    return false;
}

typedef struct rf_walk {
    const kl_rule_ctx *ctx;
    const rb_func *f;
    const char *acc;
    unsigned updates, fills, others;
    bool zuse;
} rf_walk;

static bool rf_visit(TSNode n, void *user)
{
    rf_walk *w = user;
    const kl_rule_ctx *ctx = w->ctx;
    if (rb_is_builtin(ctx, n, "blockIdx", 'z') || rb_is_builtin(ctx, n, "gridDim", 'z')) w->zuse = true;
    if (rb_is(n, "assignment_expression") && rf_is_acc3(ctx, tt_field(n, "left"), w->acc)) {
        TSNode r = rg_strip(tt_field(n, "right"));
        if (rb_text_is(ctx, tt_field(n, "operator"), "+=") && rb_is(r, "binary_expression") &&
            rb_text_is(ctx, tt_field(r, "operator"), "*"))
            w->updates++;
        else if (rb_text_is(ctx, tt_field(n, "operator"), "=") && rg_zero(ctx, r))
            w->fills++;
        else
            w->others++;
    }
    return true;
}

/* Is there a fragment tile in f? Fills acc_decl and acc. */
static bool rf_detect(const kl_rule_ctx *ctx, const rb_func *f, rf *r)
{
    memset(r, 0, sizeof *r);
    if (!f->global || ts_node_is_null(f->body)) return false;
    TSNode st[MAXSTMT];
    unsigned n = tt_stmts(f->body, st, MAXSTMT);
    for (unsigned i = 0; i < n && i < MAXSTMT; i++) {
        if (!rb_is(st[i], "declaration") || tt_is_shared_decl(ctx, st[i])) continue;
        TSNode d = tt_field(st[i], "declarator"), d2 = tt_field(d, "declarator"), d3 = tt_field(d2, "declarator");
        if (!rb_is(d, "array_declarator") || !rb_is(d2, "array_declarator") || !rb_is(d3, "array_declarator") ||
            !rb_is(tt_field(d3, "declarator"), "identifier"))
            continue;
        long long a, b, c;
        if (!rb_const_eval(ctx, f->def, tt_field(d, "size"), &c) || !rb_const_eval(ctx, f->def, tt_field(d2, "size"), &b) ||
            !rb_const_eval(ctx, f->def, tt_field(d3, "size"), &a) || c != 4)
            continue;
        r->acc_decl = st[i];
        tt_copy_text(ctx, tt_field(d3, "declarator"), r->acc, sizeof r->acc);
        break;
    }
    if (ts_node_is_null(r->acc_decl)) return false;
    rf_walk w = {.ctx = ctx, .f = f, .acc = r->acc};
    rb_walk(f->body, rf_visit, &w);
    return w.updates == 1;
}

/* The kernel-side text (and node) of a bound: a parameter of the helper becomes the argument the
 * kernel passes for it (an identifier), anything else must be a constant. */
static bool rf_bound(const kl_rule_ctx *ctx, const rb_func *h, TSNode call, TSNode b, char *out, size_t size, TSNode *kn)
{
    *kn = (TSNode){0};
    if (!h) {
        tt_copy_text(ctx, b, out, size);
        *kn = b;
        return true;
    }
    if (rb_is(b, "identifier")) {
        char name[64];
        tt_copy_text(ctx, b, name, sizeof name);
        unsigned np = tt_child_count(h->params);
        for (unsigned i = 0, k = 0; i < np; i++) {
            TSNode p = tt_child(h->params, i);
            if (!rb_is(p, "parameter_declaration")) continue;
            if (rb_text_is(ctx, rb_declarator_name(tt_field(p, "declarator")), name)) {
                TSNode arg = tt_child(tt_field(call, "arguments"), k);
                if (!rb_is(arg, "identifier")) return false;
                tt_copy_text(ctx, arg, out, size);
                *kn = arg;
                return true;
            }
            k++;
        }
    }
    long long v;
    if (!rb_const_eval(ctx, h->def, b, &v)) return false;
    tt_copy_text(ctx, b, out, size);
    return true;
}

/* The helper parameter a kernel pointer parameter is passed as in call (index of the argument
 * among the call's), or -1. */
static int rf_arg_index(const kl_rule_ctx *ctx, TSNode call, const char *name)
{
    TSNode args = tt_field(call, "arguments");
    int found = -1;
    for (unsigned i = 0; i < tt_child_count(args); i++)
        if (rb_text_is(ctx, tt_child(args, i), name)) {
            if (found >= 0) return -2;
            found = (int)i;
        }
    return found;
}

static TSNode rf_param_at(const rb_func *h, int k)
{
    unsigned np = tt_child_count(h->params);
    for (unsigned i = 0, j = 0; i < np; i++) {
        TSNode p = tt_child(h->params, i);
        if (!rb_is(p, "parameter_declaration")) continue;
        if ((int)j++ == k) return p;
    }
    return (TSNode){0};
}

typedef struct rf_uses {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode hits[16];
    unsigned n;
} rf_uses;

static bool rf_uses_visit(TSNode n, void *user)
{
    rf_uses *u = user;
    if (rb_is(n, "identifier") && rb_text_is(u->ctx, n, u->name)) {
        if (u->n < 16) u->hits[u->n] = n;
        u->n++;
    }
    return true;
}

/* The one element read of pointer `name` in function g (other uses only in a template branch):
 * into o, with its guards' bounds. */
static bool rf_read(const kl_rule_ctx *ctx, const rb_func *g, const char *name, rg_operand *o, char *why, size_t size)
{
    rf_uses u = {.ctx = ctx, .name = name};
    rb_walk(g->body, rf_uses_visit, &u);
    if (u.n > 16) {
        kl_snprintf(why, size, "%s is used %u times in %s", name, u.n, g->name);
        return false;
    }
    TSNode read = {0};
    for (unsigned i = 0; i < u.n; i++) {
        TSNode p = tt_parent(u.hits[i]);
        bool elem = rb_is(p, "subscript_expression") && ts_node_eq(tt_field(p, "argument"), u.hits[i]) &&
                    !rb_is(tt_parent(p), "subscript_expression");
        if (elem && !rf_in_template_branch(ctx, g, p)) {
            if (!ts_node_is_null(read)) {
                kl_snprintf(why, size, "%s is read twice element-wise in %s (lines %u and %u)", name, g->name,
                            ts_node_start_point(read).row + 1, ts_node_start_point(p).row + 1);
                return false;
            }
            read = p;
        } else if (!rf_in_template_branch(ctx, g, u.hits[i])) {
            kl_snprintf(why, size, "%s at line %u is used other than as a scalar element", name,
                        ts_node_start_point(u.hits[i]).row + 1);
            return false;
        }
    }
    if (ts_node_is_null(read)) {
        kl_snprintf(why, size, "%s is not read element-wise in %s", name, g->name);
        return false;
    }
    unsigned l = ts_node_start_point(read).row + 1;
    TSNode c = tt_parent(read);
    while (rb_is(c, "parenthesized_expression")) c = tt_parent(c);
    if (!rb_is(c, "conditional_expression") || !ts_node_eq(rg_strip(tt_field(c, "consequence")), read) ||
        !rf_zero(ctx, g, tt_field(c, "alternative"), 0)) {
        kl_snprintf(why, size, "the read at line %u is not guarded as `cond ? P[...] : 0`", l);
        return false;
    }
    o->at = read;
    kl_snprintf(o->ptr, sizeof o->ptr, "%s", name);
    rg_guard gs[RG_MAXG];
    unsigned ng;
    if (!rf_guards(ctx, g, read, gs, &ng)) {
        kl_snprintf(why, size, "the read at line %u sits in an else branch", l);
        return false;
    }
    return rg_operand_index(ctx, g, o, gs, ng, why, size);
}

/* The stored value: cvt(v) with v an element of acc or a local initialised with one. */
static bool rf_value(const kl_rule_ctx *ctx, const rb_func *f, const rf *r, TSNode v, char *cvt, size_t size)
{
    v = rg_strip(v);
    cvt[0] = 0;
    if (rb_is(v, "call_expression")) {
        TSNode args = tt_field(v, "arguments");
        if (tt_child_count(args) != 1 || !rb_is(tt_field(v, "function"), "identifier")) return false;
        tt_copy_text(ctx, tt_field(v, "function"), cvt, size);
        static const char *const ok[] = {"__float2bfloat16", "__float2bfloat16_rn", "__float2half", "__float2half_rn"};
        bool known = false;
        for (unsigned i = 0; i < 4; i++) known |= !strcmp(cvt, ok[i]);
        if (!known) return false;
        v = rg_strip(tt_child(args, 0));
    }
    if (rf_is_acc3(ctx, v, r->acc)) return true;
    if (!rb_is(v, "identifier")) return false;
    char name[64], pat[96];
    tt_copy_text(ctx, v, name, sizeof name);
    kl_snprintf(pat, sizeof pat, "%s =", name);
    uint32_t ms[2], me[2];
    if (tt_find(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), pat, ms, me, 2) != 1) return false;
    TSNode d = tt_parent(ts_node_descendant_for_byte_range(kl_source_root(ctx->src), ms[0], ms[0] + (uint32_t)strlen(name)));
    return rb_is(d, "init_declarator") && rf_is_acc3(ctx, rg_strip(tt_field(d, "value")), r->acc);
}

/* The stores: every element write of C in f (directly or through one local `T* d = C + idx;`),
 * all at the same X, LD, bounds and conversion; the first one's index into r->op[2]. */
static bool rf_stores(const kl_rule_ctx *ctx, const rb_func *f, rf *r, const char *C, char *why, size_t size)
{
    rf_uses u = {.ctx = ctx, .name = C};
    rb_walk(f->body, rf_uses_visit, &u);
    unsigned nstores = 0;
    for (unsigned i = 0; i < u.n && i < 16; i++) {
        TSNode h = u.hits[i], p = tt_parent(h);
        unsigned l = ts_node_start_point(h).row + 1;
        TSNode idx = {0};
        char alias[64] = "";
        if (rb_is(p, "subscript_expression") && ts_node_eq(tt_field(p, "argument"), h)) {
            idx = tt_field(p, "index");
            if (ts_node_is_null(idx)) idx = kl_ast_subscript_index(p);
        } else if (rb_is(p, "binary_expression") && rb_text_is(ctx, tt_field(p, "operator"), "+")) {
            TSNode top = p;
            while (rb_is(tt_parent(top), "binary_expression") && rb_text_is(ctx, tt_field(tt_parent(top), "operator"), "+"))
                top = tt_parent(top);
            if (!rb_is(tt_parent(top), "init_declarator")) {
                kl_snprintf(why, size, "%s at line %u is used other than as a stored element", C, l);
                return false;
            }
            idx = top;
            p = top;
            TSNode dn = tt_field(tt_parent(p), "declarator");
            while (rb_is(dn, "pointer_declarator")) dn = tt_field(dn, "declarator");
            if (!rb_is(dn, "identifier")) {
                kl_snprintf(why, size, "%s at line %u initialises something other than a local pointer", C, l);
                return false;
            }
            tt_copy_text(ctx, dn, alias, sizeof alias);
        } else {
            kl_snprintf(why, size, "%s at line %u is used other than as a stored element", C, l);
            return false;
        }
        /* the writes: P[idx] itself, or alias[e] for integer e */
        TSNode writes[8];
        char extras[8][16];
        unsigned nw = 0;
        if (!alias[0]) {
            writes[nw] = p;
            extras[nw++][0] = 0;
        } else {
            rf_uses au = {.ctx = ctx, .name = alias};
            rb_walk(f->body, rf_uses_visit, &au);
            for (unsigned k = 0; k < au.n && k < 16; k++) {
                TSNode a = au.hits[k], ap = tt_parent(a);
                if (rb_is(ap, "init_declarator") || rb_is(ap, "pointer_declarator")) continue;
                if (rf_in_template_branch(ctx, f, a)) continue;
                TSNode ei = tt_field(ap, "index");
                if (ts_node_is_null(ei)) ei = kl_ast_subscript_index(ap);
                long long e;
                if (!rb_is(ap, "subscript_expression") || !rb_is(ei, "number_literal") ||
                    !rb_const_eval(ctx, f->def, ei, &e) || e < 0 || e > 15 || nw >= 8) {
                    kl_snprintf(why, size, "%s at line %u is used other than as `%s[e] = …` (e a literal)", alias,
                                ts_node_start_point(a).row + 1, alias);
                    return false;
                }
                writes[nw] = ap;
                if (e) kl_snprintf(extras[nw], sizeof extras[0], "%lld", e);
                else extras[nw][0] = 0;
                nw++;
            }
            if (au.n > 16 || !nw) {
                kl_snprintf(why, size, "%s (line %u) is not written element-wise", alias, l);
                return false;
            }
        }
        for (unsigned k = 0; k < nw; k++) {
            TSNode w = writes[k], as = tt_parent(w);
            unsigned wl = ts_node_start_point(w).row + 1;
            if (!rb_is(as, "assignment_expression") || !ts_node_eq(tt_field(as, "left"), w) ||
                !rb_text_is(ctx, tt_field(as, "operator"), "=") || !rb_is(tt_parent(as), "expression_statement")) {
                kl_snprintf(why, size, "the write at line %u is not one plain store `C[...] = value;`", wl);
                return false;
            }
            char cvt[64];
            if (!rf_value(ctx, f, r, tt_field(as, "right"), cvt, sizeof cvt)) {
                kl_snprintf(why, size, "the value stored at line %u is not an element of %s (converted or not)", wl, r->acc);
                return false;
            }
            rg_operand o;
            memset(&o, 0, sizeof o);
            o.at = w;
            kl_snprintf(o.ptr, sizeof o.ptr, "%s", C);
            rg_guard gs[RG_MAXG];
            unsigned ng;
            if (!rf_guards(ctx, f, tt_parent(as), gs, &ng)) {
                kl_snprintf(why, size, "the store at line %u sits in an else branch", wl);
                return false;
            }
            if (!rg_index_split(ctx, f, &o, idx, extras[k], gs, ng, why, size)) return false;
            if (!nstores) {
                r->op[2] = o;
                kl_snprintf(r->cvt_out, sizeof r->cvt_out, "%s", cvt);
            } else if (strcmp(o.x, r->op[2].x) || !rg_same(ctx, o.ld, r->op[2].ld) || !rg_same(ctx, o.bx, r->op[2].bx) ||
                       !rg_same(ctx, o.by, r->op[2].by) || strcmp(cvt, r->cvt_out)) {
                kl_snprintf(why, size, "the stores at lines %u and %u differ in row, stride, bounds or conversion",
                            ts_node_start_point(r->op[2].at).row + 1, wl);
                return false;
            }
            nstores++;
        }
    }
    if (u.n > 16 || !nstores) {
        kl_snprintf(why, size, "%s is not stored element-wise", C);
        return false;
    }
    return true;
}

/* The full analysis: 1, or 0 with why. */
static int rf_analyse(const kl_rule_ctx *ctx, const rb_func *f, const rb_func *fs, unsigned nf, rf *r, char *why,
                      size_t size)
{
    unsigned line = ts_node_start_point(r->acc_decl).row + 1;
    rf_walk w = {.ctx = ctx, .f = f, .acc = r->acc};
    rb_walk(f->body, rf_visit, &w);
    if (w.zuse) {
        kl_snprintf(why, size, "%s uses blockIdx.z / gridDim.z (a batched or split product)", f->name);
        return 0;
    }
    if (w.fills < 1 || w.others) {
        kl_snprintf(why, size, "the accumulator %s (line %u) is not zero-filled then only updated", r->acc, line);
        return 0;
    }
    /* the kernel's pointer parameters: the two passed to one helper call, the one stored */
    char ptrs[3][64];
    unsigned np = 0, nparams = tt_child_count(f->params);
    for (unsigned i = 0; i < nparams && np < 4; i++) {
        TSNode p = tt_child(f->params, i);
        if (!rb_is(p, "parameter_declaration")) continue;
        char name[64];
        tt_copy_text(ctx, rb_declarator_name(tt_field(p, "declarator")), name, sizeof name);
        if (!rb_pointer_param(ctx, f, name, NULL, 0)) continue;
        if (np == 3) {
            kl_snprintf(why, size, "%s has more than three pointer parameters", f->name);
            return 0;
        }
        kl_snprintf(ptrs[np++], sizeof ptrs[0], "%s", name);
    }
    if (np != 3) {
        kl_snprintf(why, size, "%s has %u pointer parameters, not A, B and C", f->name, np);
        return 0;
    }
    int stored = -1, reads = 0;
    for (unsigned k = 0; k < 3; k++) {
        rf_uses u = {.ctx = ctx, .name = ptrs[k]};
        rb_walk(f->body, rf_uses_visit, &u);
        bool arg = u.n == 1 && rb_is(tt_parent(u.hits[0]), "argument_list");
        if (arg) {
            TSNode call = tt_parent(tt_parent(u.hits[0]));
            if (reads && !ts_node_eq(call, r->call)) {
                kl_snprintf(why, size, "the operands are loaded by two calls (lines %u and %u)", ts_node_start_point(r->call).row + 1,
                            ts_node_start_point(call).row + 1);
                return 0;
            }
            r->call = call;
            reads++;
        } else if (u.n > 1 && rb_is(tt_parent(u.hits[0]), "argument_list")) {
            kl_snprintf(why, size, "%s is passed %u times (a pipeline's prologue and prefetch): remove double-buffer first", ptrs[k],
                        u.n);
            return 0;
        } else {
            if (stored >= 0) {
                kl_snprintf(why, size, "%s and %s are both used in %s other than as arguments of the tile loads", ptrs[stored],
                            ptrs[k], f->name);
                return 0;
            }
            stored = (int)k;
        }
    }
    if (reads != 2 || stored < 0) {
        kl_snprintf(why, size, "%s does not load two operands through one call and store one result", f->name);
        return 0;
    }
    char hname[128];
    {
        const char *t = ctx->text + ts_node_start_byte(r->call);
        size_t k = 0;
        while (k + 1 < sizeof hname && (t[k] == '_' || (t[k] >= 'a' && t[k] <= 'z') || (t[k] >= 'A' && t[k] <= 'Z') ||
                                        (t[k] >= '0' && t[k] <= '9')))
            hname[k] = t[k], k++;
        hname[k] = 0;
    }
    r->helper = rb_function_named(fs, nf, hname);
    if (!r->helper || ts_node_is_null(r->helper->body) || r->helper->global) {
        kl_snprintf(why, size, "the tile loads at line %u are not a __device__ helper of the file",
                    ts_node_start_point(r->call).row + 1);
        return 0;
    }
    if (tt_uses(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), "__syncthreads") &&
        tt_count(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), hname) != 1) {
        kl_snprintf(why, size, "%s is called more than once (a pipeline): remove double-buffer first", hname);
        return 0;
    }
    r->nreads = 0;
    for (unsigned k = 0; k < 3; k++) {
        if ((int)k == stored) continue;
        int ai = rf_arg_index(ctx, r->call, ptrs[k]);
        TSNode hp = ai >= 0 ? rf_param_at(r->helper, ai) : (TSNode){0};
        if (ts_node_is_null(hp)) {
            kl_snprintf(why, size, "%s is not passed once to %s", ptrs[k], hname);
            return 0;
        }
        char hpn[64];
        tt_copy_text(ctx, rb_declarator_name(tt_field(hp, "declarator")), hpn, sizeof hpn);
        rg_operand *o = &r->op[r->nreads];
        if (!rf_read(ctx, r->helper, hpn, o, why, size)) return 0;
        kl_snprintf(o->ptr, sizeof o->ptr, "%s", ptrs[k]);
        if (!rf_bound(ctx, r->helper, r->call, o->bx, r->bx[r->nreads], sizeof r->bx[0], &r->kbx[r->nreads]) ||
            !rf_bound(ctx, r->helper, r->call, o->by, r->by[r->nreads], sizeof r->by[0], &r->kby[r->nreads])) {
            kl_snprintf(why, size, "a bound of %s in %s is not a size the kernel passes", ptrs[k], hname);
            return 0;
        }
        TSNode kn;
        if (!rf_bound(ctx, r->helper, r->call, o->ld, r->ld[r->nreads], sizeof r->ld[0], &kn)) {
            kl_snprintf(why, size, "the stride of %s in %s is not a size the kernel passes", ptrs[k], hname);
            return 0;
        }
        r->nreads++;
    }
    if (!rf_stores(ctx, f, r, ptrs[stored], why, size)) return 0;
    rg_norm(ctx, r->op[2].bx, r->bx[2], sizeof r->bx[2]);
    rg_norm(ctx, r->op[2].by, r->by[2], sizeof r->by[2]);
    tt_copy_text(ctx, r->op[2].ld, r->ld[2], sizeof r->ld[2]);
    r->kbx[2] = r->op[2].bx;
    r->kby[2] = r->op[2].by;
    for (unsigned k = 0; k < 3; k++)
        if (!rg_invariant(ctx, f, r->kbx[k]) || !rg_invariant(ctx, f, r->kby[k])) {
            kl_snprintf(why, size, "a bound of %s is not the same in every thread", r->op[k].ptr);
            return 0;
        }
    if (!rb_pointer_param(ctx, f, r->op[0].ptr, r->elem, sizeof r->elem)) return 0;
    char e2[64];
    if (!rb_pointer_param(ctx, f, r->op[1].ptr, e2, sizeof e2) || strcmp(e2, r->elem)) {
        kl_snprintf(why, size, "%s and %s hold different element types", r->op[0].ptr, r->op[1].ptr);
        return 0;
    }
    return 1;
}

/* The roles: a bound text shared by the reads is K; M pairs A with C's row, N B with C's column. */
static int rf_solve(const rf *g, rg_roles *out)
{
    int found = 0;
    for (int a = 0; a < 2; a++)
        for (int akx = 0; akx < 2; akx++)
            for (int bkx = 0; bkx < 2; bkx++)
                for (int crx = 0; crx < 2; crx++) {
                    int b = 1 - a;
                    const char *ak = akx ? g->bx[a] : g->by[a], *am = akx ? g->by[a] : g->bx[a];
                    const char *bk = bkx ? g->bx[b] : g->by[b], *bn = bkx ? g->by[b] : g->bx[b];
                    const char *cm = crx ? g->bx[2] : g->by[2], *cn = crx ? g->by[2] : g->bx[2];
                    if (strcmp(ak, bk) || strcmp(am, cm) || strcmp(bn, cn)) continue;
                    rg_roles r = {a, akx, bkx, crx};
                    if (a == 1) r = (rg_roles){0, bkx, akx, !crx};
                    if (found && r.a == out->a && r.a_kx == out->a_kx && r.b_kx == out->b_kx && r.c_rowx == out->c_rowx) continue;
                    if (found) return 2;
                    *out = r;
                    found = 1;
                }
    return found;
}

/* The conversion of a 16-bit element to float for the product ("" for float). */
static const char *rf_cvt_in(const char *elem)
{
    if (strstr(elem, "bfloat16")) return "__bfloat162float";
    if (strstr(elem, "half")) return "__half2float";
    return "";
}

static kl_status rf_remove_edits(const kl_rule_ctx *ctx, const rb_func *f, const rb_func *fs, unsigned nf, rf *g,
                                 kl_edits *out, kl_error *err)
{
    char why[320];
    if (!rf_analyse(ctx, f, fs, nf, g, why, sizeof why)) return kl_rule_not_applicable(err, "%s", why);
    rg_roles r;
    int ns = rf_solve(g, &r);
    if (ns != 1)
        return kl_rule_not_applicable(err,
                                      ns ? "the bounds of %s, %s and %s do not tell M, N and K apart (the same text "
                                           "bounds two dimensions)"
                                         : "the bounds of %s, %s and %s are not those of one product (A: M x K, B: K x N, "
                                           "C: M x N)",
                                      g->op[0].ptr, g->op[1].ptr, g->op[2].ptr);
    int ia = r.a, ib = 1 - r.a;
    const rg_operand *A = &g->op[ia], *B = &g->op[ib], *C = &g->op[2];
    const char *M = r.a_kx ? g->by[ia] : g->bx[ia], *K = r.a_kx ? g->bx[ia] : g->by[ia];
    const char *N = r.b_kx ? g->by[ib] : g->bx[ib];
    TSNode Mb = r.a_kx ? g->kby[ia] : g->kbx[ia], Nb = r.b_kx ? g->kby[ib] : g->kbx[ib];
    if (ts_node_is_null(Mb) || ts_node_is_null(Nb)) {
        Mb = r.c_rowx ? g->kbx[2] : g->kby[2];
        Nb = r.c_rowx ? g->kby[2] : g->kbx[2];
    }
    {
        uint32_t ms[2], me[2];
        if (tt_find(ctx->text, ts_node_start_byte(f->outer), ts_node_start_byte(f->body), "__launch_bounds__", ms, me, 2))
            return kl_rule_not_applicable(err, "%s has __launch_bounds__: remove launch-bounds first (the new block is %d x %d)",
                                          f->name, RG_TILE, RG_TILE);
    }
    char row[32], col[32], k0[32], kk[32], as[32], bs[32], acc[32];
    rg_name(ctx, f, "row", row, sizeof row);
    rg_name(ctx, f, "col", col, sizeof col);
    rg_name(ctx, f, "k0", k0, sizeof k0);
    rg_name(ctx, f, "kk", kk, sizeof kk);
    rg_name(ctx, f, "As", as, sizeof as);
    rg_name(ctx, f, "Bs", bs, sizeof bs);
    rg_name(ctx, f, "acc", acc, sizeof acc);
    const char *cvt = rf_cvt_in(g->elem);
    char zero[96];
    if (cvt[0]) kl_snprintf(zero, sizeof zero, "%s(0.0f)", g->elem);
    else kl_snprintf(zero, sizeof zero, "0.0f");
    char ind[64];
    rb_indent_of(ctx, ts_node_start_byte(f->def), ind, sizeof ind);
    char ak[64], bk[64], aidx[400], bidx[400], cidx[400];
    kl_snprintf(ak, sizeof ak, "(%s + threadIdx.x)", k0);
    kl_snprintf(bk, sizeof bk, "(%s + threadIdx.y)", k0);
    if (r.a_kx) kl_snprintf(aidx, sizeof aidx, "%s%s * %s + %s", A->cast, ak, g->ld[ia], row);
    else kl_snprintf(aidx, sizeof aidx, "%s%s * %s + %s", A->cast, row, g->ld[ia], ak);
    if (r.b_kx) kl_snprintf(bidx, sizeof bidx, "%s%s * %s + %s", B->cast, bk, g->ld[ib], col);
    else kl_snprintf(bidx, sizeof bidx, "%s%s * %s + %s", B->cast, col, g->ld[ib], bk);
    if (r.c_rowx) kl_snprintf(cidx, sizeof cidx, "%s%s * %s + %s", C->cast, row, g->ld[2], col);
    else kl_snprintf(cidx, sizeof cidx, "%s%s * %s + %s", C->cast, col, g->ld[2], row);
    const char *i1 = ind;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "{\n%s    // smem-tile: %d x %d tiles of %s and %s in shared memory (one output per thread)\n", i1, RG_TILE,
                   RG_TILE, A->ptr, B->ptr);
    kl_strbuf_addf(&sb, "%s    __shared__ %s %s[%d][%d];\n", i1, g->elem, as, RG_TILE, RG_TILE);
    kl_strbuf_addf(&sb, "%s    __shared__ %s %s[%d][%d];\n", i1, g->elem, bs, RG_TILE, RG_TILE);
    kl_strbuf_addf(&sb, "%s    const int %s = blockIdx.y * %d + threadIdx.y;\n", i1, row, RG_TILE);
    kl_strbuf_addf(&sb, "%s    const int %s = blockIdx.x * %d + threadIdx.x;\n", i1, col, RG_TILE);
    kl_strbuf_addf(&sb, "%s    float %s = 0.0f;\n", i1, acc);
    kl_strbuf_addf(&sb, "%s    for (int %s = 0; %s < %s; %s += %d) {\n", i1, k0, k0, K, k0, RG_TILE);
    kl_strbuf_addf(&sb, "%s        %s[threadIdx.y][threadIdx.x] = %s < %s && %s + threadIdx.x < %s ? %s[%s] : %s;\n", i1, as,
                   row, M, k0, K, A->ptr, aidx, zero);
    kl_strbuf_addf(&sb, "%s        %s[threadIdx.y][threadIdx.x] = %s + threadIdx.y < %s && %s < %s ? %s[%s] : %s;\n", i1, bs,
                   k0, K, col, N, B->ptr, bidx, zero);
    kl_strbuf_addf(&sb, "%s        __syncthreads();\n", i1);
    kl_strbuf_addf(&sb, "%s        for (int %s = 0; %s < %d; %s++) {\n", i1, kk, kk, RG_TILE, kk);
    if (cvt[0])
        kl_strbuf_addf(&sb, "%s            %s += %s(%s[threadIdx.y][%s]) * %s(%s[%s][threadIdx.x]);\n", i1, acc, cvt, as, kk, cvt,
                       bs, kk);
    else
        kl_strbuf_addf(&sb, "%s            %s += %s[threadIdx.y][%s] * %s[%s][threadIdx.x];\n", i1, acc, as, kk, bs, kk);
    kl_strbuf_addf(&sb, "%s        }\n%s        __syncthreads();\n%s    }\n", i1, i1, i1);
    kl_strbuf_addf(&sb, "%s    if (%s < %s && %s < %s) {\n%s        %s[%s] = %s%s%s%s;\n%s    }\n%s}", i1, row, M, col, N, i1,
                   C->ptr, cidx, g->cvt_out, g->cvt_out[0] ? "(" : "", acc, g->cvt_out[0] ? ")" : "", i1, i1);
    kl_status st;
    if (sb.failed) st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    else st = kl_edits_add(out, ts_node_start_byte(f->body), ts_node_end_byte(f->body), kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    if (st != KL_OK) return st == KL_ERR_NOMEM ? kl_error_set(err, st, "out of memory") : st;
    return rg_relaunch(ctx, f, Mb, Nb, true, out, err);
}

/* ---- the rule ---------------------------------------------------------------------------------------- */

static kl_status rt_find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    rb_func fs[64];
    unsigned nf = rb_functions(ctx, fs, 64);
    for (unsigned i = 0; i < nf && i < 64; i++) {
        rt *a = malloc(sizeof *a);
        if (!a) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        char why[256], id[256];
        int r = analyse(ctx, &fs[i], a, why, sizeof why);
        kl_status st = KL_OK;
        if (r != 0) {
            kl_site_id(id, sizeof id, fs[i].name, a->kloop, NULL);
            json_t *feat = json_object();
            if (r > 0) {
                json_object_set_new(feat, "accumulator", json_string(a->locals[a->acc].name));
                json_object_set_new(feat, "a_tile", json_string(a->tiles[0].side == 1 ? a->tiles[0].name : a->tiles[1].name));
                json_object_set_new(feat, "b_tile", json_string(a->tiles[0].side == 2 ? a->tiles[0].name : a->tiles[1].name));
                json_object_set_new(feat, "tile", json_integer(a->tiles[0].grow_val));
                char rows[16];
                kl_snprintf(rows, sizeof rows, "threadIdx.%c", a->p);
                json_object_set_new(feat, "rows_with", json_string(rows));
            } else {
                json_object_set_new(feat, "why_not", json_string(why));
            }
            st = kl_sites_add(out, id, KL_SITE_APPLICABLE, kl_node_span(a->kloop), fs[i].name, feat, NULL,
                              r > 0 ? "one output per thread: compute a TM x TN register tile per thread"
                                    : "one output per thread (the register tile cannot be applied as is)");
        }
        rt_present pr;
        if (st == KL_OK && find_present(ctx, &fs[i], &pr)) {
            kl_site_id(id, sizeof id, fs[i].name, pr.decl, NULL);
            json_t *feat = json_pack("{s:s, s:I, s:I}", "accumulator", pr.acc, "TM", (json_int_t)pr.tm, "TN",
                                     (json_int_t)pr.tn);
            char tm[32], tn[32];
            kl_snprintf(tm, sizeof tm, "%lld", pr.tm);
            kl_snprintf(tn, sizeof tn, "%lld", pr.tn);
            json_t *params = json_pack("{s:s, s:s}", "TM", tm, "TN", tn);
            st = kl_sites_add(out, id, KL_SITE_PRESENT, kl_node_span(pr.decl), fs[i].name, feat, params,
                              "a TM x TN register tile per thread (kl_i / kl_j loops)");
        } else if (st == KL_OK) {
            rg *g = malloc(sizeof *g);
            if (!g) {
                free(a);
                return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            }
            rf *fr = malloc(sizeof *fr);
            if (!fr) {
                free(g);
                free(a);
                return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            }
            if (rf_detect(ctx, &fs[i], fr)) {
                kl_site_id(id, sizeof id, fs[i].name, fr->acc_decl, NULL);
                json_t *feat = json_pack("{s:s, s:s}", "accumulator", fr->acc, "form", "fragment");
                if (!rf_analyse(ctx, &fs[i], fs, nf < 64 ? nf : 64, fr, why, sizeof why))
                    json_object_set_new(feat, "why_not", json_string(why));
                st = kl_sites_add(out, id, KL_SITE_PRESENT, kl_node_span(fr->acc_decl), fs[i].name, feat, NULL,
                                  "a warp's mma fragment tile held per lane (acc[FM][FN][4])");
            } else if (rg_detect(ctx, &fs[i], g)) {
                kl_site_id(id, sizeof id, fs[i].name, g->acc_decl, NULL);
                json_t *feat = json_pack("{s:s, s:I, s:I, s:s}", "accumulator", g->acc, "TM", (json_int_t)g->tm, "TN",
                                         (json_int_t)g->tn, "form", "general");
                if (!rg_analyse(ctx, &fs[i], g, why, sizeof why)) json_object_set_new(feat, "why_not", json_string(why));
                char tm[32], tn[32];
                kl_snprintf(tm, sizeof tm, "%lld", g->tm);
                kl_snprintf(tn, sizeof tn, "%lld", g->tn);
                json_t *params = json_pack("{s:s, s:s}", "TM", tm, "TN", tn);
                st = kl_sites_add(out, id, KL_SITE_PRESENT, kl_node_span(g->acc_decl), fs[i].name, feat, params,
                                  "a TM x TN register tile per thread (an outer product into a 2-D accumulator)");
            }
            free(fr);
            free(g);
        }
        free(a);
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    }
    return KL_OK;
}

static const rb_func *site_function(const kl_rule_ctx *ctx, const kl_site *site, rb_func *fs, unsigned *nf)
{
    *nf = rb_functions(ctx, fs, 64);
    return rb_function_named(fs, *nf < 64 ? *nf : 64, site->kernel);
}

static kl_status rt_apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out,
                          kl_error *err)
{
    int64_t tm = 4, tn = 4;
    kl_rule_param_int(&kl_rule_register_tile, params, "TM", &tm);
    kl_rule_param_int(&kl_rule_register_tile, params, "TN", &tn);
    rb_func fs[64];
    unsigned nf;
    const rb_func *f = site_function(ctx, site, fs, &nf);
    if (!f) return kl_rule_not_applicable(err, "no kernel %s", site->kernel);
    rt *a = malloc(sizeof *a);
    if (!a) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    char why[256];
    kl_status st = KL_OK;
    if (analyse(ctx, f, a, why, sizeof why) != 1) {
        st = kl_rule_not_applicable(err, "%s", why[0] ? why : "not a tiled product with one output per thread");
        goto cleanup;
    }
    /* the shared memory it needs */
    long long bytes = 0;
    for (unsigned k = 0; k < 2; k++) {
        long long d0, d1;
        unsigned es = rb_type_size(a->tiles[k].elem);
        if (!rb_const_eval(ctx, f->def, a->tiles[k].dims[0], &d0) || !rb_const_eval(ctx, f->def, a->tiles[k].dims[1], &d1)) {
            st = kl_rule_not_applicable(err, "the shape of %s is not a compile-time constant", a->tiles[k].name);
            goto cleanup;
        }
        bytes += d0 * d1 * (es ? es : 8) * (a->tiles[k].side == 1 ? tm : tn);
    }
    if (bytes > 48 * 1024) {
        st = kl_rule_not_applicable(err, "the grown tiles need %lld bytes of shared memory (at most 49152 static)", bytes);
        goto cleanup;
    }
    /* the registers it needs at the least: the accumulators and one row of operands per side; a
     * block whose threads cannot all have them (65536 32-bit registers per SM) does not launch */
    {
        long long tp = a->tiles[0].side == 1 ? a->tiles[0].grow_val : a->tiles[1].grow_val;
        long long tq = a->tiles[0].side == 2 ? a->tiles[0].grow_val : a->tiles[1].grow_val;
        long long words = rb_type_size(a->acc_type) == 8 ? 2 : 1;
        long long regs = tm * tn * words + tm + tn, threads = tp * tq;
        if (threads > 0 && regs * threads > 65536) {
            st = kl_rule_not_applicable(err, "TM x TN = %lld x %lld needs at least %lld registers per thread (the accumulators "
                                        "and a row of operands each way); a block of %lld threads can have at most %lld "
                                        "(65536 per SM)", (long long)tm, (long long)tn, regs, threads, 65536 / threads);
            goto cleanup;
        }
    }
    st = launch_edits(a, true, tm, tn, out, err, why, sizeof why);
    if (st == KL_ERR_NOT_APPLICABLE) st = kl_rule_not_applicable(err, "%s", why);
    if (st != KL_OK) goto cleanup;
    st = rt_apply_edits(a, tm, tn, out, err);
cleanup:
    free(a);
    return st;
}

static kl_status rt_remove(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    rb_func fs[64];
    unsigned nf;
    const rb_func *f = site_function(ctx, site, fs, &nf);
    rt_present pr;
    if (!f) return kl_rule_not_applicable(err, "no kernel %s", site->kernel);
    if (!find_present(ctx, f, &pr)) {
        rf *fr = malloc(sizeof *fr);
        if (!fr) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        if (rf_detect(ctx, f, fr)) {
            kl_status st = rf_remove_edits(ctx, f, fs, nf < 64 ? nf : 64, fr, out, err);
            free(fr);
            return st;
        }
        free(fr);
        rg *g = malloc(sizeof *g);
        if (!g) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        kl_status st = rg_detect(ctx, f, g) ? rg_remove_edits(ctx, f, g, out, err)
                                            : kl_rule_not_applicable(err, "no register tile in %s", site->kernel);
        free(g);
        return st;
    }
    RT_TRY(rt_remove_edits(ctx, f, &pr, out, err));
    /* the launches: the grid back to one output per thread */
    rt *a = calloc(1, sizeof *a);
    if (!a) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    a->ctx = ctx;
    a->f = *f;
    a->p = pr.p;
    a->q = pr.p == 'y' ? 'x' : 'y';
    char why[256];
    kl_status st = launch_edits(a, false, pr.tm, pr.tn, out, err, why, sizeof why);
    if (st == KL_ERR_NOT_APPLICABLE) st = kl_rule_not_applicable(err, "%s", why);
    free(a);
    return st;
}

const kl_rule kl_rule_register_tile = {
    NAME,
    "compute a TM x TN block of outputs per thread in registers (outer-product update) instead of one",
    rt_params,
    2,
    rt_find,
    rt_remove,
    rt_apply,
};
