/*
 * double-buffer — a one-stage shared-memory tile loop
 *
 *     for (k0 = 0; k0 < K; k0 += T) { loads of the tiles; __syncthreads(); compute; __syncthreads(); }
 *
 * ↔ two stages of every tile the loop loads (`As[2][…]`), so that the next tile is fetched while
 * the current one is used, with one barrier per tile:
 *  - via=regs: a prologue loads the first tile into stage 0 (the original loads in a block with
 *    `k0` bound to its start); in the loop the next tile's elements are loaded into registers
 *    (`kl_rN`) before the compute on stage kl_cur, stored into stage kl_cur ^ 1 after it, then
 *    one barrier. Stage kl_cur ^ 1 was last read before the previous barrier, so it is free.
 *  - via=cp.async (f32 tiles loaded from f32 pointers, guarded `c ? p[i] : 0` or plain): the
 *    loads become `__pipeline_memcpy_async` (zero-filled where the guard fails); in the loop:
 *    wait for this thread's copies, one barrier (the tile is complete and the other stage free),
 *    issue the next tile into the other stage, commit, compute.
 * The loads may be the kl_i / kl_j loops that register-tile writes: the registers get one
 * element per iteration.
 * Remove: the inverse on those forms, and on the expert form of tasks/sgemm (a stage index
 * `cur = kt & 1`, a prologue `load(0); store(0); __syncthreads();`, in the loop
 * `if (next) load(kt + 1); … if (next) store(cur ^ 1); __syncthreads();`): that one becomes
 * `load(kt); store(0); __syncthreads(); … __syncthreads();` with the stage dimension dropped;
 * and on the ring of tasks/hgemm (a prologue of STAGES - 1 cp.async loads, in the loop wait,
 * barrier, prefetch of tile kt + STAGES - 1 into stage (next % STAGES), commit, compute on stage
 * (kt % STAGES)): that one becomes `load(kt) into stage 0; commit; wait(0); __syncthreads();
 * compute; __syncthreads();` (see find_ring).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/tile_text.h"

#define NAME "double-buffer"
#define MAXSTMT 64

#define DB_TRY(expr)                                                                                 \
    do {                                                                                             \
        kl_status s_ = (expr);                                                                       \
        if (s_ != KL_OK) return s_ == KL_ERR_NOMEM ? kl_error_set(err, s_, "out of memory") : s_;    \
    } while (0)

static const char *const stage_values[] = {"2", NULL};
static const char *const via_values[] = {"regs", "cp.async", NULL};
static const kl_rule_param db_params[] = {{"via", via_values, "regs"}, {"stages", stage_values, "2"}};

typedef struct db_array {
    TSNode decl, ident, first;   /* the declaration, its name, the outermost array declarator's size */
    char name[64], elem[64];
} db_array;

typedef struct db_load {
    TSNode stmt;                 /* the statement of the loop body (a kl_i / kl_j nest or the assignment) */
    TSNode inner;                /* the innermost expression statement */
    TSNode assign;
    int arr;                     /* the shared array written */
    char vars[2][32];
    long long trips[2];
    unsigned nvars;
} db_load;

typedef struct db {
    const kl_rule_ctx *ctx;
    rt_func f;
    TSNode loop, body, cond, sync1, sync2;
    TSNode st[MAXSTMT];
    unsigned n, isync1;
    db_array arrs[8];
    unsigned narrs;
    db_load loads[8];
    unsigned nloads;
    char var[64], vtype[64], start[64], step[64];
} db;

/* The shared arrays declared at the top level of the kernel. */
static void shared_arrays(const kl_rule_ctx *ctx, TSNode body, db_array *arrs, unsigned *n)
{
    TSNode st[MAXSTMT];
    unsigned k = tt_stmts(body, st, MAXSTMT);
    *n = 0;
    for (unsigned i = 0; i < k && i < MAXSTMT && *n < 8; i++) {
        if (!tt_is_shared_decl(ctx, st[i])) continue;
        TSNode d = tt_field(st[i], "declarator");
        if (!rt_is(d, "array_declarator")) continue;
        TSNode first = d;
        while (rt_is(tt_field(first, "declarator"), "array_declarator")) first = tt_field(first, "declarator");
        TSNode id = tt_field(first, "declarator");
        if (!rt_is(id, "identifier")) continue;
        db_array *a = &arrs[(*n)++];
        a->decl = st[i];
        a->ident = id;
        a->first = tt_field(first, "size");
        tt_copy_text(ctx, id, a->name, sizeof a->name);
        tt_copy_text(ctx, tt_field(st[i], "type"), a->elem, sizeof a->elem);
    }
}

static int array_index(const db *d, const char *name)
{
    for (unsigned i = 0; i < d->narrs; i++)
        if (!strcmp(d->arrs[i].name, name)) return (int)i;
    return -1;
}

/* `for (int v = 0; v < CONST; v++)` with a single statement body: its variable and trip count. */
static bool const_loop(const kl_rule_ctx *ctx, TSNode scope, TSNode f, char *var, size_t size, long long *trip,
                       TSNode *body)
{
    if (!rt_is(f, "for_statement")) return false;
    TSNode init = tt_field(f, "initializer"), cond = tt_field(f, "condition"), upd = tt_field(f, "update");
    TSNode d = tt_field(init, "declarator");
    if (!rt_is(d, "init_declarator") || !rt_is(tt_field(d, "declarator"), "identifier")) return false;
    long long s;
    if (!rt_const_eval(ctx, scope, tt_field(d, "value"), &s) || s != 0) return false;
    tt_copy_text(ctx, tt_field(d, "declarator"), var, size);
    if (!rt_is(cond, "binary_expression") || !rt_text_is(ctx, tt_field(cond, "operator"), "<") ||
        !rt_text_is(ctx, tt_field(cond, "left"), var) || !rt_const_eval(ctx, scope, tt_field(cond, "right"), trip))
        return false;
    if (!rt_is(upd, "update_expression") || !tt_uses(ctx->text, ts_node_start_byte(upd), ts_node_end_byte(upd), var) ||
        !tt_uses(ctx->text, ts_node_start_byte(upd), ts_node_end_byte(upd), "+"))
        return false;
    TSNode b = tt_field(f, "body");
    if (rt_is(b, "compound_statement")) {
        TSNode one[2];
        if (tt_stmts(b, one, 2) != 1) return false;
        b = one[0];
    }
    *body = b;
    return true;
}

/* A load: `X[..] = v;` of a shared array X, possibly inside constant loops (at most two). */
static bool parse_load(db *d, TSNode s, db_load *L)
{
    const kl_rule_ctx *ctx = d->ctx;
    memset(L, 0, sizeof *L);
    L->stmt = s;
    TSNode b;
    while (rt_is(s, "for_statement")) {
        if (L->nvars >= 2) return false;
        if (!const_loop(ctx, d->f.def, s, L->vars[L->nvars], sizeof L->vars[0], &L->trips[L->nvars], &b)) return false;
        L->nvars++;
        s = b;
    }
    TSNode as = tt_child(s, 0);
    if (!rt_is(s, "expression_statement") || !rt_is(as, "assignment_expression") ||
        !rt_text_is(ctx, tt_field(as, "operator"), "="))
        return false;
    TSNode l = tt_field(as, "left");
    while (rt_is(l, "subscript_expression")) l = tt_field(l, "argument");
    if (!rt_is(l, "identifier") || !rt_is(tt_field(as, "left"), "subscript_expression")) return false;
    char name[64];
    tt_copy_text(ctx, l, name, sizeof name);
    L->arr = array_index(d, name);
    L->inner = s;
    L->assign = as;
    return L->arr >= 0;
}

/* Is the array `name` written in [s,e)? (an assignment or ++/-- whose target is an element) */
typedef struct write_find {
    const kl_rule_ctx *ctx;
    const char *name;
    bool hit;
} write_find;

static bool write_visit(TSNode n, void *user)
{
    write_find *w = user;
    TSNode target = {0};
    if (rt_is(n, "assignment_expression")) target = tt_field(n, "left");
    else if (rt_is(n, "update_expression")) target = tt_field(n, "argument");
    if (ts_node_is_null(target)) return true;
    while (rt_is(target, "subscript_expression") || rt_is(target, "parenthesized_expression"))
        target = rt_is(target, "subscript_expression") ? tt_field(target, "argument") : tt_child(target, 0);
    if (rt_is(target, "identifier") && rt_text_is(w->ctx, target, w->name)) w->hit = true;
    return true;
}

/* Analyse the one-stage form. 0: no tile loop; 1: applicable; -1: a tile loop, with why. */
static int analyse(const kl_rule_ctx *ctx, const rt_func *f, db *d, char *why, size_t size)
{
    memset(d, 0, sizeof *d);
    d->ctx = ctx;
    d->f = *f;
    why[0] = '\0';
    if (!f->global || ts_node_is_null(f->body)) return 0;
    shared_arrays(ctx, f->body, d->arrs, &d->narrs);
    if (!d->narrs) return 0;
    TSNode st[MAXSTMT];
    unsigned n = tt_stmts(f->body, st, MAXSTMT);
    for (unsigned i = 0; i < n && i < MAXSTMT && ts_node_is_null(d->loop); i++) {
        if (!rt_is(st[i], "for_statement")) continue;
        TSNode b = tt_field(st[i], "body");
        TSNode bs[MAXSTMT];
        unsigned bn = rt_is(b, "compound_statement") ? tt_stmts(b, bs, MAXSTMT) : 0;
        for (unsigned k = 0; k < bn && k < MAXSTMT; k++)
            if (rt_is_syncthreads(ctx, bs[k])) d->loop = st[i];
    }
    if (ts_node_is_null(d->loop)) return 0;
    unsigned line = ts_node_start_point(d->loop).row + 1;
    if (tt_uses(ctx->text, ts_node_start_byte(d->loop), ts_node_end_byte(d->loop), "kl_cur")) return 0;
    d->body = tt_field(d->loop, "body");
    d->n = tt_stmts(d->body, d->st, MAXSTMT);
    if (d->n > MAXSTMT) {
        kl_snprintf(why, size, "the tile loop at line %u is too long", line);
        return -1;
    }
    /* the header: T v = 0; v < bound; v += step | v++ */
    TSNode init = tt_field(d->loop, "initializer"), cond = tt_field(d->loop, "condition"),
           upd = tt_field(d->loop, "update");
    TSNode id = tt_field(tt_field(init, "declarator"), "declarator");
    long long v0;
    if (!rt_is(init, "declaration") || !rt_is(id, "identifier") ||
        !rt_const_eval(ctx, f->def, tt_field(tt_field(init, "declarator"), "value"), &v0) || v0 != 0) {
        kl_snprintf(why, size, "the tile loop at line %u does not declare its variable starting at 0", line);
        return -1;
    }
    tt_copy_text(ctx, id, d->var, sizeof d->var);
    tt_copy_text(ctx, tt_field(init, "type"), d->vtype, sizeof d->vtype);
    tt_copy_text(ctx, tt_field(tt_field(init, "declarator"), "value"), d->start, sizeof d->start);
    if (!rt_is(cond, "binary_expression") || !rt_text_is(ctx, tt_field(cond, "operator"), "<") ||
        !rt_text_is(ctx, tt_field(cond, "left"), d->var)) {
        kl_snprintf(why, size, "the condition of the tile loop at line %u is not `%s < bound`", line, d->var);
        return -1;
    }
    d->cond = cond;
    long long sv;
    if (rt_is(upd, "update_expression") && tt_uses(ctx->text, ts_node_start_byte(upd), ts_node_end_byte(upd), "+")) {
        kl_snprintf(d->step, sizeof d->step, "1");
    } else if (rt_is(upd, "assignment_expression") && rt_text_is(ctx, tt_field(upd, "operator"), "+=") &&
               rt_text_is(ctx, tt_field(upd, "left"), d->var) && rt_const_eval(ctx, f->def, tt_field(upd, "right"), &sv) &&
               sv > 0) {
        tt_copy_text(ctx, tt_field(upd, "right"), d->step, sizeof d->step);
    } else {
        kl_snprintf(why, size, "the tile loop at line %u does not step by a compile-time constant", line);
        return -1;
    }
    /* the body: loads; __syncthreads(); compute; __syncthreads(); */
    unsigned i = 0;
    for (; i < d->n && !rt_is_syncthreads(ctx, d->st[i]); i++) {
        if (d->nloads >= 8 || !parse_load(d, d->st[i], &d->loads[d->nloads])) {
            kl_snprintf(why, size, "line %u of the tile loop is not a load of a shared array",
                        ts_node_start_point(d->st[i]).row + 1);
            return -1;
        }
        d->nloads++;
    }
    if (!d->nloads || i + 2 > d->n || !rt_is_syncthreads(ctx, d->st[d->n - 1])) {
        kl_snprintf(why, size, "the tile loop at line %u is not loads, __syncthreads(), compute, __syncthreads()", line);
        return -1;
    }
    d->isync1 = i;
    d->sync1 = d->st[i];
    d->sync2 = d->st[d->n - 1];
    uint32_t cs = ts_node_end_byte(d->sync1), ce = ts_node_start_byte(d->sync2);
    if (tt_uses(ctx->text, cs, ce, "__syncthreads") || tt_uses(ctx->text, cs, ce, "return") ||
        tt_uses(ctx->text, cs, ce, "break") || tt_uses(ctx->text, cs, ce, "continue")) {
        kl_snprintf(why, size, "the compute of the tile loop at line %u has a barrier, break, continue or return", line);
        return -1;
    }
    /* the loaded arrays: read only by the compute, nowhere else */
    for (unsigned k = 0; k < d->nloads; k++) {
        const db_array *a = &d->arrs[d->loads[k].arr];
        TSNode r = tt_field(d->loads[k].assign, "right");
        for (unsigned m = 0; m < d->narrs; m++)
            if (tt_uses(ctx->text, ts_node_start_byte(r), ts_node_end_byte(r), d->arrs[m].name)) {
                kl_snprintf(why, size, "the load at line %u reads the shared array %s",
                            ts_node_start_point(d->loads[k].stmt).row + 1, d->arrs[m].name);
                return -1;
            }
        write_find w = {ctx, a->name, false};
        for (unsigned m = i + 1; m + 1 < d->n; m++) rt_walk(d->st[m], write_visit, &w);
        if (w.hit) {
            kl_snprintf(why, size, "the compute of the tile loop at line %u writes %s", line, a->name);
            return -1;
        }
        unsigned all = tt_count(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), a->name);
        unsigned in = tt_count(ctx->text, ts_node_start_byte(d->loop), ts_node_end_byte(d->loop), a->name);
        if (all != in + 1) {
            kl_snprintf(why, size, "%s is used outside the tile loop at line %u", a->name, line);
            return -1;
        }
        if (ts_node_is_null(a->first)) {
            kl_snprintf(why, size, "%s has no size", a->name);
            return -1;
        }
    }
    if (tt_uses(ctx->text, ts_node_start_byte(d->loop), ts_node_end_byte(d->loop), "kl_r0")) {
        kl_snprintf(why, size, "the tile loop at line %u already uses kl_r0", line);
        return -1;
    }
    /* the shared memory, twice */
    long long bytes = 0;
    for (unsigned k = 0; k < d->narrs; k++) {
        bool staged = false;
        for (unsigned m = 0; m < d->nloads; m++) staged |= d->loads[m].arr == (int)k;
        long long sz = rt_type_size(d->arrs[k].elem);
        if (!sz) sz = 8;
        TSNode dd = tt_field(d->arrs[k].decl, "declarator");
        while (rt_is(dd, "array_declarator")) {
            long long v;
            if (!rt_const_eval(ctx, f->def, tt_field(dd, "size"), &v)) {
                kl_snprintf(why, size, "the size of %s is not a compile-time constant", d->arrs[k].name);
                return -1;
            }
            sz *= v;
            dd = tt_field(dd, "declarator");
        }
        bytes += staged ? 2 * sz : sz;
    }
    if (bytes > 48 * 1024) {
        kl_snprintf(why, size, "two stages need %lld bytes of shared memory (at most 49152 static)", bytes);
        return -1;
    }
    return 1;
}

/* ---- text builders ------------------------------------------------------------------------------ */

/* The statement text of a load, with the innermost assignment replaced by `inner` (first line
 * unindented). */
static char *load_with(const db *d, const db_load *L, const char *inner)
{
    const kl_rule_ctx *ctx = d->ctx;
    kl_strbuf sb = KL_STRBUF_INIT;
    uint32_t s = tt_pragma_above(ctx, ts_node_start_byte(L->stmt)), is = ts_node_start_byte(L->inner),
             ie = ts_node_end_byte(L->inner);
    kl_strbuf_add(&sb, ctx->text + s, is - s);
    kl_strbuf_adds(&sb, inner);
    kl_strbuf_add(&sb, ctx->text + ie, ts_node_end_byte(L->stmt) - ie);
    if (sb.failed) {
        kl_strbuf_release(&sb);
        return NULL;
    }
    return kl_strbuf_detach(&sb, NULL);
}

/* The load's value (its right side) with the loop variable advanced one tile: new string. */
static char *next_text(const db *d, TSNode e)
{
    char to[160];
    kl_snprintf(to, sizeof to, "(%s + %s)", d->var, d->step);
    tt_pair p = {d->var, to};
    return tt_subst(d->ctx->text, ts_node_start_byte(e), ts_node_end_byte(e), &p, 1);
}

/* The register subscript of a load: "[kl_i][kl_j]" (empty without loops). */
static void reg_index(const db_load *L, char *buf, size_t size)
{
    buf[0] = '\0';
    size_t k = 0;
    for (unsigned v = 0; v < L->nvars; v++) if (k < size) k += (size_t)snprintf(buf + k, size - k, "[%s]", L->vars[v]);
}

/* The element reference `X[stage]…` of the load's target, `X` replaced by `X[stage]`. */
static char *target_with_stage(const db *d, const db_load *L, const char *stage)
{
    TSNode l = tt_field(L->assign, "left");
    char to[128];
    kl_snprintf(to, sizeof to, "%s[%s]", d->arrs[L->arr].name, stage);
    tt_pair p = {d->arrs[L->arr].name, to};
    return tt_subst(d->ctx->text, ts_node_start_byte(l), ts_node_end_byte(l), &p, 1);
}

/* cp.async of one element: the target at stage, the value v (its text already advanced when
 * next), from the load's right side: `c ? P[i] : 0` or `P[i]`. */
static char *cp_async_text(const db *d, const db_load *L, const char *stage, bool next)
{
    const kl_rule_ctx *ctx = d->ctx;
    TSNode r = tt_field(L->assign, "right");
    char *tgt = target_with_stage(d, L, stage);
    char *out = NULL;
    if (!tgt) return NULL;
    TSNode cond = {0}, src = r;
    if (rt_is(r, "conditional_expression")) {
        cond = tt_field(r, "condition");
        src = tt_field(r, "consequence");
    }
    TSNode base = tt_field(src, "argument");
    char *ct = NULL, *st = NULL, *bt = NULL;
    if (!ts_node_is_null(cond)) ct = next ? next_text(d, cond) : rt_text(ctx, cond);
    st = next ? next_text(d, src) : rt_text(ctx, src);
    bt = rt_text(ctx, base);
    kl_strbuf sb = KL_STRBUF_INIT;
    if (st && bt && (ts_node_is_null(cond) || ct)) {
        if (ct)
            kl_strbuf_addf(&sb, "__pipeline_memcpy_async(&%s, %s ? &%s : %s, sizeof(float), %s ? 0 : sizeof(float));", tgt,
                           ct, st, bt, ct);
        else
            kl_strbuf_addf(&sb, "__pipeline_memcpy_async(&%s, &%s, sizeof(float));", tgt, st);
        if (!sb.failed) out = kl_strbuf_detach(&sb, NULL);
    }
    kl_strbuf_release(&sb);
    free(tgt);
    free(ct);
    free(st);
    free(bt);
    return out;
}

/* Can cp.async do this load: an f32 array loaded from an f32 pointer, `c ? P[i] : 0` or `P[i]`? */
static bool cp_async_ok(const db *d, const db_load *L, char *why, size_t size)
{
    const kl_rule_ctx *ctx = d->ctx;
    unsigned line = ts_node_start_point(L->inner).row + 1;
    if (strcmp(d->arrs[L->arr].elem, "float")) {
        kl_snprintf(why, size, "cp.async: %s holds %s, not f32", d->arrs[L->arr].name, d->arrs[L->arr].elem);
        return false;
    }
    TSNode r = tt_field(L->assign, "right"), src = r;
    if (rt_is(r, "conditional_expression")) {
        TSNode z = tt_field(r, "alternative");
        char zt[32];
        tt_copy_text(ctx, z, zt, sizeof zt);
        if (!rt_is(z, "number_literal") || (strcmp(zt, "0") && strcmp(zt, "0.0f") && strcmp(zt, "0.f") &&
                                            strcmp(zt, "0.0"))) {
            kl_snprintf(why, size, "cp.async: the load at line %u does not fall back to zero", line);
            return false;
        }
        src = tt_field(r, "consequence");
    }
    TSNode base = tt_field(src, "argument");
    char elem[64] = "";
    char name[64];
    if (rt_is(base, "identifier")) tt_copy_text(ctx, base, name, sizeof name);
    if (!rt_is(src, "subscript_expression") || !rt_is(base, "identifier") ||
        !rt_pointer_param(ctx, &d->f, name, elem, sizeof elem) || strcmp(elem, "float")) {
        kl_snprintf(why, size, "cp.async: the load at line %u is not an element of an f32 pointer parameter", line);
        return false;
    }
    return true;
}

/* ---- apply ---------------------------------------------------------------------------------------- */

static kl_status db_apply_edits(const db *d, bool cp, kl_edits *out, kl_error *err)
{
    const kl_rule_ctx *ctx = d->ctx;
    char ind[64], ind2[64];
    rt_indent_of(ctx, ts_node_start_byte(d->loop), ind, sizeof ind);
    rt_indent_of(ctx, ts_node_start_byte(d->st[0]), ind2, sizeof ind2);
    kl_strbuf pro = KL_STRBUF_INIT, head = KL_STRBUF_INIT, tail = KL_STRBUF_INIT;
    kl_status st = KL_OK;
    char cur[160], next[256];
    if (!strcmp(d->step, "1")) kl_snprintf(cur, sizeof cur, "%s & 1", d->var);
    else kl_snprintf(cur, sizeof cur, "(%s / %s) & 1", d->var, d->step);
    {
        char *c = next_text(d, d->cond);
        kl_snprintf(next, sizeof next, "%s", c ? c : "");
        free(c);
    }
    /* the prologue: the loads of the first tile into stage 0 */
    kl_strbuf_addf(&pro, "{\n%s    const %s %s = %s;\n", ind, d->vtype, d->var, d->start);
    for (unsigned k = 0; k < d->nloads; k++) {
        const db_load *L = &d->loads[k];
        char *one = NULL;
        if (cp) {
            char *c = cp_async_text(d, L, "0", false);
            one = c ? load_with(d, L, c) : NULL;
            free(c);
        } else {
            char to[128];
            kl_snprintf(to, sizeof to, "%s[0]", d->arrs[L->arr].name);
            tt_pair p = {d->arrs[L->arr].name, to};
            one = tt_subst(ctx->text, tt_pragma_above(ctx, ts_node_start_byte(L->stmt)), ts_node_end_byte(L->stmt), &p, 1);
        }
        if (!one) goto oom;
        kl_strbuf_addf(&pro, "%s    %s\n", ind, one);
        free(one);
    }
    kl_strbuf_addf(&pro, "%s}\n%s%s\n%s", ind, ind, cp ? "__pipeline_commit();" : "__syncthreads();", ind);
    /* the head of the loop body */
    kl_strbuf_addf(&head, "const int kl_cur = %s;\n", cur);
    if (cp) {
        kl_strbuf_addf(&head, "%s__pipeline_wait_prior(0);\n%s__syncthreads();\n%sif (%s) {\n", ind2, ind2, ind2, next);
        for (unsigned k = 0; k < d->nloads; k++) {
            char *c = cp_async_text(d, &d->loads[k], "kl_cur ^ 1", true);
            char *one = c ? load_with(d, &d->loads[k], c) : NULL;
            char *re = one ? tt_indent_tail(one, 4) : NULL;
            free(c);
            free(one);
            if (!re) goto oom;
            kl_strbuf_addf(&head, "%s    %s\n", ind2, re);
            free(re);
        }
        kl_strbuf_addf(&head, "%s}\n%s__pipeline_commit();", ind2, ind2);
    } else {
        for (unsigned k = 0; k < d->nloads; k++) {
            const db_load *L = &d->loads[k];
            kl_strbuf_addf(&head, "%s%s kl_r%u", ind2, d->arrs[L->arr].elem, k);
            for (unsigned v = 0; v < L->nvars; v++) kl_strbuf_addf(&head, "[%lld]", L->trips[v]);
            kl_strbuf_adds(&head, ";\n");
        }
        kl_strbuf_addf(&head, "%sif (%s) {\n", ind2, next);
        kl_strbuf_addf(&tail, "if (%s) {\n", next);
        for (unsigned k = 0; k < d->nloads; k++) {
            const db_load *L = &d->loads[k];
            char ri[80], reg[96];
            reg_index(L, ri, sizeof ri);
            kl_snprintf(reg, sizeof reg, "kl_r%u%s", k, ri);
            char *v = next_text(d, tt_field(L->assign, "right"));
            char *tgt = target_with_stage(d, L, "kl_cur ^ 1");
            kl_strbuf a = KL_STRBUF_INIT, b = KL_STRBUF_INIT;
            kl_strbuf_addf(&a, "%s = %s;", reg, v ? v : "");
            kl_strbuf_addf(&b, "%s = %s;", tgt ? tgt : "", reg);
            char *la = !v || !tgt || a.failed || b.failed ? NULL : load_with(d, L, kl_strbuf_str(&a));
            char *lb = la ? load_with(d, L, kl_strbuf_str(&b)) : NULL;
            char *ra = la ? tt_indent_tail(la, 4) : NULL, *rb = lb ? tt_indent_tail(lb, 4) : NULL;
            if (ra && rb) {
                kl_strbuf_addf(&head, "%s    %s\n", ind2, ra);
                kl_strbuf_addf(&tail, "%s    %s\n", ind2, rb);
            }
            bool ok = ra && rb;
            free(v), free(tgt), free(la), free(lb), free(ra), free(rb);
            kl_strbuf_release(&a);
            kl_strbuf_release(&b);
            if (!ok) goto oom;
        }
        kl_strbuf_addf(&head, "%s}", ind2);
        kl_strbuf_addf(&tail, "%s}\n%s__syncthreads();", ind2, ind2);
    }
    if (pro.failed || head.failed || tail.failed) goto oom;
    uint32_t at = tt_pragma_above(ctx, ts_node_start_byte(d->loop));
    if ((st = kl_edits_add(out, at, at, kl_strbuf_str(&pro))) != KL_OK) goto done;
    if ((st = kl_edits_add(out, tt_pragma_above(ctx, ts_node_start_byte(d->st[0])), ts_node_end_byte(d->sync1),
                           kl_strbuf_str(&head))) != KL_OK)
        goto done;
    if (cp) {
        /* the trailing barrier goes: the next iteration's barrier protects the stage */
        uint32_t s, e;
        rt_stmt_range(ctx, d->sync2, NULL, &s, &e);
        TSNode prev = rt_prev_stmt(d->sync2);
        if (rt_line_blank_before(ctx, ts_node_start_byte(d->sync2)) && !ts_node_is_null(prev)) {
            s = ts_node_end_byte(prev);
            e = ts_node_end_byte(d->sync2);
        }
        if ((st = kl_edits_add(out, s, e, "")) != KL_OK) goto done;
    } else if ((st = kl_edits_add(out, ts_node_start_byte(d->sync2), ts_node_end_byte(d->sync2), kl_strbuf_str(&tail))) !=
               KL_OK) {
        goto done;
    }
    /* the compute reads the current stage */
    for (unsigned k = 0; k < d->narrs; k++) {
        bool staged = false;
        for (unsigned m = 0; m < d->nloads; m++) staged |= d->loads[m].arr == (int)k;
        if (!staged) continue;
        uint32_t ms[128], me[128];
        unsigned nm = tt_find(ctx->text, ts_node_end_byte(d->sync1), ts_node_start_byte(d->sync2), d->arrs[k].name, ms, me, 128);
        if (nm > 128) {
            st = kl_rule_not_applicable(err, "%s is read more than 128 times", d->arrs[k].name);
            goto done;
        }
        for (unsigned m = 0; m < nm; m++)
            if ((st = kl_edits_addf(out, ms[m], me[m], "%s[kl_cur]", d->arrs[k].name)) != KL_OK) goto done;
        if ((st = kl_edits_add(out, ts_node_end_byte(d->arrs[k].ident), ts_node_end_byte(d->arrs[k].ident), "[2]")) != KL_OK)
            goto done;
    }
    if (cp && !strstr(ctx->text, "cuda_pipeline.h")) {
        if ((st = kl_edits_add(out, 0, 0, "#include <cuda_pipeline.h>\n")) != KL_OK) goto done;
    }
    goto done;
oom:
    st = KL_ERR_NOMEM;
done:
    kl_strbuf_release(&pro);
    kl_strbuf_release(&head);
    kl_strbuf_release(&tail);
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

/* ---- the present forms -------------------------------------------------------------------------------- */

typedef enum db_form { DB_NONE, DB_REGS, DB_CP, DB_EXPERT, DB_RING } db_form;

typedef struct db_present {
    db_form form;
    TSNode loop, body, pro, prosync, curdecl, pre, post, sync;
    TSNode st[MAXSTMT];
    unsigned n;
    char var[64], cur[64];
    /* the ring (DB_RING): the wait, the prefetch's call, the commit; the ring depth and the
     * local naming the tile the prefetch fetches */
    TSNode wait, call, commit, fence;
    unsigned icompute;
    char why[240];   /* a ring recognized but not removable (its reader is asynchronous) */
    char depth[64], next[64];
    db_array arrs[8];
    unsigned narrs;
    bool staged[8];
} db_present;

/* `const int C = <expr>;` : its name into C. */
static bool decl_named(const kl_rule_ctx *ctx, TSNode s, char *name, size_t size, TSNode *value)
{
    TSNode d = tt_field(s, "declarator");
    if (!rt_is(s, "declaration") || !rt_is(d, "init_declarator") || !rt_is(tt_field(d, "declarator"), "identifier"))
        return false;
    tt_copy_text(ctx, tt_field(d, "declarator"), name, size);
    *value = tt_field(d, "value");
    return true;
}

/* ---- the ring of the hgemm expert --------------------------------------------------------------- */
/*
 *     for (int s = 0; s < STAGES - 1; s++) { if (s < k_tiles) load(…s…); commit(); }
 *     for (int kt = 0; kt < k_tiles; kt++) {
 *         wait<STAGES - 2>();  __syncthreads();
 *         const int next = kt + STAGES - 1;
 *         if (next < k_tiles) load(… (next % STAGES) …, next * BK);
 *         commit();
 *         compute on the stage (kt % STAGES)
 *     }
 * where wait and commit are cp.async's (`cp.async.wait_group` / `cp.async.commit_group` in a
 * helper of the file, or __pipeline_wait_prior / __pipeline_commit) and load is any call.
 */

/* Does text[0,len) contain the string w? */
static bool has_text(const char *text, size_t len, const char *w)
{
    size_t wl = strlen(w);
    for (size_t i = 0; i + wl <= len; i++)
        if (!memcmp(text + i, w, wl)) return true;
    return false;
}

/* The called name of an expression statement `f(…);` / `f<…>(…);` (text up to `<` or `(`), or
 * false. */
static bool call_name(const kl_rule_ctx *ctx, TSNode s, char *name, size_t size)
{
    if (rt_is(s, "compound_statement")) {
        TSNode one[2];
        if (tt_stmts(s, one, 2) != 1) return false;
        s = one[0];
    }
    if (!rt_is(s, "expression_statement") || !rt_is(tt_child(s, 0), "call_expression")) return false;
    const char *t = ctx->text + ts_node_start_byte(s);
    size_t k = 0;
    while (k + 1 < size && (t[k] == '_' || t[k] == ':' || (t[k] >= 'a' && t[k] <= 'z') || (t[k] >= 'A' && t[k] <= 'Z') ||
                            (t[k] >= '0' && t[k] <= '9')))
        name[k] = t[k], k++;
    name[k] = '\0';
    return k > 0;
}

/* 1: a cp.async wait, 2: a commit, 0: another call or none. */
static int async_kind(const kl_rule_ctx *ctx, TSNode s)
{
    char name[128];
    if (!call_name(ctx, s, name, sizeof name)) return 0;
    if (!strcmp(name, "__pipeline_wait_prior")) return 1;
    if (!strcmp(name, "__pipeline_commit")) return 2;
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    const rt_func *h = rt_function_named(fs, nf < 64 ? nf : 64, name);
    if (!h || ts_node_is_null(h->body) || h->global) return 0;
    const char *b = ctx->text + ts_node_start_byte(h->body);
    size_t len = ts_node_end_byte(h->body) - ts_node_start_byte(h->body);
    if (has_text(b, len, "cp.async.wait_group") || has_text(b, len, "cp.async.wait_all")) return 1;
    if (has_text(b, len, "cp.async.commit_group")) return 2;
    return 0;
}

/* The depth D of a prefetch `if (next < bound) load(… (next % D) …);` whose prologue fetches `ahead`
 * tiles: D an identifier, ahead a compile-time constant with 0 < ahead < D. */
static bool ring_depth_of(const kl_rule_ctx *ctx, const rt_func *f, TSNode pre, TSNode ahead, char *depth, size_t size)
{
    const char *t = ctx->text + ts_node_start_byte(pre);
    size_t len = ts_node_end_byte(pre) - ts_node_start_byte(pre);
    const char *pct = memchr(t, '%', len);
    if (!pct) return false;
    const char *q = pct + 1;
    while (q < t + len && *q == ' ') q++;
    size_t k = 0;
    while (q + k < t + len && k + 1 < size && (q[k] == '_' || (q[k] >= 'a' && q[k] <= 'z') || (q[k] >= 'A' && q[k] <= 'Z') ||
                                             (q[k] >= '0' && q[k] <= '9')))
        k++;
    if (!k || q + k >= t + len || q[k] != ')') return false;
    kl_snprintf(depth, size, "%.*s", (int)k, q);
    /* both constants: the depth an identifier of the file, ahead below it */
    long long a = 0, d = 0;
    TSNode root = ts_tree_root_node(kl_source_tree(ctx->src));
    TSNode dn = ts_node_descendant_for_byte_range(root, (uint32_t)(q - ctx->text), (uint32_t)(q - ctx->text + k));
    return rt_const_eval(ctx, f->def, ahead, &a) && rt_is(dn, "identifier") && rt_const_eval(ctx, f->def, dn, &d) && a > 0 &&
           a < d;
}

/* A statement calling a helper of the file whose body holds a fence.proxy.async (what a wgmma or
 * bulk-copy reader of shared memory needs after ordinary writes). */
static bool proxy_fence_stmt(const kl_rule_ctx *ctx, TSNode s)
{
    char name[128];
    if (!call_name(ctx, s, name, sizeof name)) return false;
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    const rt_func *h = rt_function_named(fs, nf < 64 ? nf : 64, name);
    if (!h || ts_node_is_null(h->body) || h->global) return false;
    const char *b = ctx->text + ts_node_start_byte(h->body);
    return has_text(b, ts_node_end_byte(h->body) - ts_node_start_byte(h->body), "fence.proxy.async");
}

/* Does the compute of the ring call a helper of the file holding wgmma? */
static bool computes_with_wgmma(const kl_rule_ctx *ctx, const db_present *p)
{
    if (p->icompute >= p->n) return false;
    uint32_t cs = ts_node_start_byte(p->st[p->icompute]), ce = ts_node_end_byte(p->st[p->n - 1]);
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    for (unsigned i = 0; i < nf && i < 64; i++) {
        if (ts_node_is_null(fs[i].body) || fs[i].global || !fs[i].name[0]) continue;
        const char *b = ctx->text + ts_node_start_byte(fs[i].body);
        if (has_text(b, ts_node_end_byte(fs[i].body) - ts_node_start_byte(fs[i].body), "wgmma.") &&
            tt_uses(ctx->text, cs, ce, fs[i].name))
            return true;
    }
    return false;
}

static bool find_ring(const kl_rule_ctx *ctx, const rt_func *f, TSNode *st, unsigned n, db_present *p)
{
    for (unsigned i = 1; i < n && i < MAXSTMT; i++) {
        TSNode loop = st[i], pro = st[i - 1];
        if (!rt_is(loop, "for_statement") || !rt_is(pro, "for_statement")) continue;
        TSNode body = tt_field(loop, "body");
        if (!rt_is(body, "compound_statement")) continue;
        p->n = tt_stmts(body, p->st, MAXSTMT);
        if (p->n < 5 || p->n > MAXSTMT) continue;
        TSNode id = tt_field(tt_field(tt_field(loop, "initializer"), "declarator"), "declarator");
        if (!rt_is(id, "identifier")) continue;
        /* wait; [proxy fence;] __syncthreads(); [const int next = …;] if (next < bound) load(…); commit(); */
        if (async_kind(ctx, p->st[0]) != 1) continue;
        unsigned b = proxy_fence_stmt(ctx, p->st[1]) ? 2 : 1;
        if (!rt_is_syncthreads(ctx, p->st[b])) continue;
        unsigned k = b + 1;
        if (rt_is(p->st[k], "declaration")) k++;
        if (k + 1 >= p->n || !rt_is(p->st[k], "if_statement") || async_kind(ctx, p->st[k + 1]) != 2) continue;
        /* the prologue: `for (s = 0; s < DEPTH - 1; s++)`, or `s < AHEAD` (a constant below the
         * depth, which the prefetch's stage `(next % DEPTH)` names: a ring that keeps more stages than
         * it fetches ahead, e.g. one whose readers finish a tile late) */
        TSNode pc = tt_field(pro, "condition"), pr = kl_ast_unparen(tt_field(pc, "right"));
        if (!rt_is(pc, "binary_expression")) continue;
        memset(p->depth, 0, sizeof p->depth);
        if (rt_is(pr, "binary_expression") && rt_text_is(ctx, tt_field(pr, "operator"), "-") &&
            rt_text_is(ctx, tt_field(pr, "right"), "1")) {
            tt_copy_text(ctx, tt_field(pr, "left"), p->depth, sizeof p->depth);
        } else if (!ring_depth_of(ctx, f, p->st[k], pr, p->depth, sizeof p->depth)) {
            continue;
        }
        tt_copy_text(ctx, id, p->var, sizeof p->var);
        p->loop = loop;
        p->body = body;
        p->pro = pro;
        p->wait = p->st[0];
        p->fence = b == 2 ? p->st[1] : (TSNode){0};
        p->sync = p->st[b];
        p->pre = p->st[k];
        p->commit = p->st[k + 1];
        p->icompute = k + 2;
        p->curdecl = k == b + 2 ? p->st[b + 1] : (TSNode){0};
        p->form = DB_RING;
        /* wgmma reads the stage asynchronously: a group still in flight after the compute would
         * read the one stage while the next tile is copied into it */
        if (!ts_node_is_null(p->fence) || computes_with_wgmma(ctx, p))
            kl_snprintf(p->why, sizeof p->why,
                        "the tiles of the ring at line %u are read by wgmma, asynchronously across the barrier: remove "
                        "wgmma first",
                        ts_node_start_point(loop).row + 1);
        return true;
    }
    return false;
}

static bool find_present(const kl_rule_ctx *ctx, const rt_func *f, db_present *p)
{
    memset(p, 0, sizeof *p);
    if (!f->global || ts_node_is_null(f->body)) return false;
    shared_arrays(ctx, f->body, p->arrs, &p->narrs);
    long long two;
    for (unsigned k = 0; k < p->narrs; k++)
        p->staged[k] = rt_const_eval(ctx, f->def, p->arrs[k].first, &two) && two == 2 &&
                       rt_is(tt_field(p->arrs[k].decl, "declarator"), "array_declarator") &&
                       !ts_node_eq(tt_field(p->arrs[k].decl, "declarator"), tt_parent(p->arrs[k].ident));
    TSNode st[MAXSTMT];
    unsigned n = tt_stmts(f->body, st, MAXSTMT);
    if (find_ring(ctx, f, st, n, p)) return true;
    p->n = 0;
    for (unsigned i = 0; i < n && i < MAXSTMT; i++) {
        if (!rt_is(st[i], "for_statement")) continue;
        TSNode body = tt_field(st[i], "body");
        if (!rt_is(body, "compound_statement")) continue;
        p->n = tt_stmts(body, p->st, MAXSTMT);
        if (p->n < 3 || p->n > MAXSTMT) continue;
        TSNode id = tt_field(tt_field(tt_field(st[i], "initializer"), "declarator"), "declarator");
        if (!rt_is(id, "identifier")) continue;
        tt_copy_text(ctx, id, p->var, sizeof p->var);
        TSNode v;
        p->loop = st[i];
        p->body = body;
        if (decl_named(ctx, p->st[0], p->cur, sizeof p->cur, &v) && !strcmp(p->cur, "kl_cur")) {
            /* ours: the prologue block and its barrier/commit before the loop */
            if (i < 2 || !rt_is(st[i - 2], "compound_statement")) continue;
            p->pro = st[i - 2];
            p->prosync = st[i - 1];
            p->curdecl = p->st[0];
            p->form = tt_uses(ctx->text, ts_node_start_byte(body), ts_node_end_byte(body), "__pipeline_commit") ? DB_CP
                                                                                                              : DB_REGS;
            return true;
        }
        /* the expert's: `const int cur = <var> & 1;` somewhere in the body */
        for (unsigned k = 0; k < p->n; k++) {
            TSNode val;
            if (!decl_named(ctx, p->st[k], p->cur, sizeof p->cur, &val)) continue;
            char want[96];
            kl_snprintf(want, sizeof want, "%s & 1", p->var);
            char *vt = rt_text(ctx, val);
            bool is = vt && tt_count(vt, 0, (uint32_t)strlen(vt), want) == 1 && rt_is(val, "binary_expression");
            free(vt);
            if (!is) continue;
            p->curdecl = p->st[k];
            p->form = DB_EXPERT;
            return true;
        }
    }
    return false;
}

/* The range of a statement with the comment lines right above it (and its whole lines). */
static void stmt_with_comments(const kl_rule_ctx *ctx, TSNode s, uint32_t *start, uint32_t *end)
{
    rt_stmt_range(ctx, s, NULL, start, end);
    TSNode prev = ts_node_prev_named_sibling(s);
    while (rt_is(prev, "comment") && rt_line_blank_before(ctx, ts_node_start_byte(prev)) &&
           rt_line_end(ctx, ts_node_end_byte(prev)) == *start && *start != ts_node_start_byte(s)) {
        *start = rt_line_start(ctx, ts_node_start_byte(prev));
        prev = ts_node_prev_named_sibling(prev);
    }
}

/* Drop the stage dimension: the `[2]` of each staged array's declaration, and a whole-line
 * `// double-buffer …` comment among the comment lines right above the first of them. */
static kl_status drop_stage_decls(const kl_rule_ctx *ctx, const db_present *p, kl_edits *out, kl_error *err)
{
    unsigned dropped = 0;
    for (unsigned k = 0; k < p->narrs; k++) {
        if (!p->staged[k]) continue;
        for (TSNode c = ts_node_prev_named_sibling(p->arrs[k].decl); !dropped && rt_is(c, "comment");
             c = ts_node_prev_named_sibling(c)) {
            if (!rt_line_blank_before(ctx, ts_node_start_byte(c)) ||
                !kl_str_starts(ctx->text + ts_node_start_byte(c), "// double-buffer"))
                continue;
            DB_TRY(kl_edits_add(out, rt_line_start(ctx, ts_node_start_byte(c)), rt_line_end(ctx, ts_node_end_byte(c)), ""));
        }
        TSNode first = tt_parent(p->arrs[k].ident);
        DB_TRY(kl_edits_add(out, ts_node_end_byte(p->arrs[k].ident), ts_node_end_byte(first), ""));
        dropped++;
    }
    if (!dropped) return kl_rule_not_applicable(err, "no shared array with two stages in the kernel");
    return KL_OK;
}

/* ours (regs / cp.async): the original loads come back from the prologue */
static kl_status remove_ours(const kl_rule_ctx *ctx, const rt_func *f, const db_present *p, kl_edits *out, kl_error *err)
{
    (void)f;
    unsigned line = ts_node_start_point(p->loop).row + 1;
    char ind2[64];
    rt_indent_of(ctx, ts_node_start_byte(p->st[0]), ind2, sizeof ind2);
    TSNode ps[16];
    unsigned np = tt_stmts(p->pro, ps, 16);
    if (np < 2 || np > 16) return kl_rule_not_applicable(err, "the prologue before line %u is not the loads of the first tile", line);
    /* the loads of the loop, from the prologue's statements (stage 0 dropped) */
    kl_strbuf loads = KL_STRBUF_INIT;
    for (unsigned k = 1; k < np; k++) {
        char *one = NULL;
        if (p->form == DB_CP) {
            /* __pipeline_memcpy_async(&X[0][..], c ? &P[i] : P, sizeof(float)[, c ? 0 : sizeof(float)]); */
            TSNode s = ps[k], call = {0};
            TSNode wrap_s = s;
            while (rt_is(s, "for_statement")) {
                TSNode b = tt_field(s, "body");
                if (rt_is(b, "compound_statement")) {
                    TSNode one1[2];
                    if (tt_stmts(b, one1, 2) != 1) break;
                    b = one1[0];
                }
                s = b;
            }
            call = tt_child(s, 0);
            TSNode args[4];
            unsigned na = 0;
            TSNode al = tt_field(call, "arguments");
            uint32_t c = tt_child_count(al);
            for (uint32_t m = 0; m < c && na < 4; m++)
                if (!rt_is(tt_child(al, m), "comment")) args[na++] = tt_child(al, m);
            if (!rt_is(call, "call_expression") || !rt_text_is(ctx, tt_field(call, "function"), "__pipeline_memcpy_async") ||
                na < 3 || !rt_is(args[0], "pointer_expression")) {
                kl_strbuf_release(&loads);
                return kl_rule_not_applicable(err, "line %u of the prologue is not a cp.async of one element",
                                              ts_node_start_point(ps[k]).row + 1);
            }
            TSNode tgt = tt_field(args[0], "argument");
            kl_strbuf a = KL_STRBUF_INIT;
            char *t = NULL;
            {
                /* drop the [0] right after the array name */
                TSNode in = tgt;
                while (rt_is(tt_field(in, "argument"), "subscript_expression")) in = tt_field(in, "argument");
                uint32_t ns = ts_node_start_byte(in), ne = ts_node_end_byte(tt_field(in, "argument"));
                kl_strbuf_add(&a, ctx->text + ns, ne - ns);
                kl_strbuf_add(&a, ctx->text + ts_node_end_byte(in), ts_node_end_byte(tgt) - ts_node_end_byte(in));
            }
            TSNode src = args[1];
            if (rt_is(src, "conditional_expression")) {
                TSNode cons = tt_field(src, "consequence");
                char *ct = rt_text(ctx, tt_field(src, "condition"));
                char *st = rt_is(cons, "pointer_expression") ? rt_text(ctx, tt_field(cons, "argument")) : NULL;
                kl_strbuf_addf(&a, " = %s ? %s : 0.0f;", ct ? ct : "", st ? st : "");
                free(ct);
                free(st);
            } else {
                char *st = rt_is(src, "pointer_expression") ? rt_text(ctx, tt_field(src, "argument")) : NULL;
                kl_strbuf_addf(&a, " = %s;", st ? st : "");
                free(st);
            }
            if (!a.failed) {
                kl_strbuf w = KL_STRBUF_INIT;
                uint32_t ws = tt_pragma_above(ctx, ts_node_start_byte(wrap_s)), is = ts_node_start_byte(s),
                         ie = ts_node_end_byte(s);
                kl_strbuf_add(&w, ctx->text + ws, is - ws);
                kl_strbuf_adds(&w, kl_strbuf_str(&a));
                kl_strbuf_add(&w, ctx->text + ie, ts_node_end_byte(wrap_s) - ie);
                t = w.failed ? NULL : kl_strbuf_detach(&w, NULL);
                kl_strbuf_release(&w);
            }
            kl_strbuf_release(&a);
            one = t;
        } else {
            tt_pair pairs[8];
            char from[8][80];
            unsigned npair = 0;
            for (unsigned m = 0; m < p->narrs && npair < 8; m++) {
                if (!p->staged[m]) continue;
                kl_snprintf(from[npair], sizeof from[0], "%s[0]", p->arrs[m].name);
                pairs[npair].from = from[npair];
                pairs[npair].to = p->arrs[m].name;
                npair++;
            }
            one = tt_subst(ctx->text, tt_pragma_above(ctx, ts_node_start_byte(ps[k])), ts_node_end_byte(ps[k]), pairs,
                           npair);
        }
        if (!one) {
            kl_strbuf_release(&loads);
            return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        }
        kl_strbuf_addf(&loads, "%s%s", k > 1 ? "\n" : "", k > 1 ? ind2 : "");
        kl_strbuf_adds(&loads, one);
        free(one);
    }
    kl_strbuf_addf(&loads, "\n%s__syncthreads();", ind2);
    kl_status st = KL_OK;
    /* the prologue goes (up to where the loop, or its pragma, starts) */
    uint32_t at = tt_pragma_above(ctx, ts_node_start_byte(p->loop));
    if ((st = kl_edits_add(out, ts_node_start_byte(p->pro), at, "")) != KL_OK) goto done;
    /* the head of the body: up to the prefetch `if` (regs) or the commit (cp.async) */
    unsigned ihead = 0;
    for (unsigned k = 0; k < p->n; k++) {
        bool end = p->form == DB_CP ? tt_uses(ctx->text, ts_node_start_byte(p->st[k]), ts_node_end_byte(p->st[k]),
                                              "__pipeline_commit")
                                    : rt_is(p->st[k], "if_statement");
        if (end) {
            ihead = k;
            break;
        }
    }
    if (!ihead || ihead + 2 > p->n) {
        st = kl_rule_not_applicable(err, "the tile loop at line %u is not the form this transform writes", line);
        goto done;
    }
    if ((st = kl_edits_add(out, ts_node_start_byte(p->st[0]), ts_node_end_byte(p->st[ihead]), kl_strbuf_str(&loads))) !=
        KL_OK)
        goto done;
    /* the tail: the store `if` and the barrier (regs), or nothing (cp.async: the barrier comes back) */
    TSNode last = p->st[p->n - 1];
    if (p->form == DB_REGS) {
        TSNode store = p->st[p->n - 2];
        if (!rt_is_syncthreads(ctx, last) || !rt_is(store, "if_statement")) {
            st = kl_rule_not_applicable(err, "the tile loop at line %u does not end with the store and a barrier", line);
            goto done;
        }
        if ((st = kl_edits_add(out, ts_node_start_byte(store), ts_node_end_byte(last), "__syncthreads();")) != KL_OK) goto done;
    } else {
        if ((st = kl_edits_addf(out, ts_node_end_byte(last), ts_node_end_byte(last), "\n%s__syncthreads();", ind2)) != KL_OK)
            goto done;
    }
    /* the compute: X[kl_cur] → X */
    for (unsigned m = 0; m < p->narrs; m++) {
        if (!p->staged[m]) continue;
        char pat[96];
        kl_snprintf(pat, sizeof pat, "%s[kl_cur]", p->arrs[m].name);
        uint32_t ms[128], me[128];
        uint32_t ce = p->form == DB_CP ? ts_node_end_byte(last) : ts_node_start_byte(last);
        unsigned nm = tt_find(ctx->text, ts_node_end_byte(p->st[ihead]), ce, pat, ms, me, 128);
        for (unsigned k = 0; k < nm && k < 128; k++)
            if ((st = kl_edits_add(out, ms[k], me[k], p->arrs[m].name)) != KL_OK) goto done;
    }
    /* the include apply put first, when nothing else uses the pipeline */
    static const char inc[] = "#include <cuda_pipeline.h>\n";
    if (p->form == DB_CP && !strncmp(ctx->text, inc, sizeof inc - 1)) {
        uint32_t s0 = ts_node_start_byte(p->pro), e0 = ts_node_end_byte(p->loop);
        bool others = false;
        static const char *const calls[] = {"__pipeline_memcpy_async", "__pipeline_commit", "__pipeline_wait_prior"};
        for (unsigned k = 0; k < 3; k++)
            others |= tt_count(ctx->text, 0, (uint32_t)ctx->len, calls[k]) != tt_count(ctx->text, s0, e0, calls[k]);
        if (!others && (st = kl_edits_add(out, 0, sizeof inc - 1, "")) != KL_OK) goto done;
    }
    st = drop_stage_decls(ctx, p, out, err);
done:
    kl_strbuf_release(&loads);
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

/* The names of the functions (lambdas) called by the statements of an if's body. */
static unsigned called_names(const kl_rule_ctx *ctx, TSNode s, char names[][64], unsigned max)
{
    unsigned n = 0;
    TSNode b = tt_field(s, "consequence");
    TSNode st[8];
    unsigned k = rt_is(b, "compound_statement") ? tt_stmts(b, st, 8) : (st[0] = b, 1u);
    for (unsigned i = 0; i < k && i < 8 && n < max; i++) {
        TSNode c = tt_child(st[i], 0);
        if (rt_is(st[i], "expression_statement") && rt_is(c, "call_expression"))
            tt_copy_text(ctx, tt_field(c, "function"), names[n++], 64);
    }
    return n;
}

/* The expert's form: see the top of the file. */
static kl_status remove_expert(const kl_rule_ctx *ctx, const rt_func *f, const db_present *p, kl_edits *out,
                               kl_error *err)
{
    unsigned line = ts_node_start_point(p->loop).row + 1;
    char ind2[64];
    rt_indent_of(ctx, ts_node_start_byte(p->curdecl), ind2, sizeof ind2);
    /* the prefetch (first `if` after the stage index) and the store (the `if` naming cur ^ 1) */
    char curx[96];
    kl_snprintf(curx, sizeof curx, "%s ^ 1", p->cur);
    TSNode pre = {0}, post = {0};
    unsigned ipre = 0, ipost = 0;
    for (unsigned k = 0; k < p->n; k++) {
        if (!rt_is(p->st[k], "if_statement")) continue;
        bool names_next = tt_uses(ctx->text, ts_node_start_byte(p->st[k]), ts_node_end_byte(p->st[k]), curx);
        if (names_next && ts_node_is_null(post)) post = p->st[k], ipost = k;
        else if (!names_next && ts_node_is_null(pre)) pre = p->st[k], ipre = k;
    }
    TSNode last = p->st[p->n - 1];
    if (ts_node_is_null(pre) || ts_node_is_null(post) || ipre > ipost || ipost + 2 != p->n || !rt_is_syncthreads(ctx, last) ||
        !rt_is_syncthreads(ctx, rt_prev_stmt(p->loop)))
        return kl_rule_not_applicable(err, "the tile loop at line %u is not `if (next) load(next); compute; "
                                           "if (next) store(%s ^ 1); __syncthreads();` after a prologue and a barrier",
                                      line, p->cur);
    /* the next tile's expression in the prefetch: `var + 1` or `var + step` */
    TSNode upd = tt_field(p->loop, "update");
    char step[64] = "1";
    if (rt_is(upd, "assignment_expression")) tt_copy_text(ctx, tt_field(upd, "right"), step, sizeof step);
    char nx2[160];
    kl_snprintf(nx2, sizeof nx2, "%s + %s", p->var, step);
    TSNode pb = tt_field(pre, "consequence");
    /* `(kt + 1)` only as a parenthesized expression: `load(kt + 1)` keeps its call parentheses */
    tt_pair np[1] = {{nx2, p->var}};
    char *loads = tt_subst(ctx->text, ts_node_start_byte(pb), ts_node_end_byte(pb), np, 1);
    TSNode sb = tt_field(post, "consequence");
    tt_pair sp[1] = {{curx, "0"}};
    char *stores = tt_subst(ctx->text, ts_node_start_byte(sb), ts_node_end_byte(sb), sp, 1);
    kl_status st = KL_OK;
    if (!loads || !stores) {
        st = KL_ERR_NOMEM;
        goto done;
    }
    /* the prologue: the barrier before the loop and the calls before it that the loop makes too */
    char names[16][64];
    unsigned nn = called_names(ctx, pre, names, 8);
    nn += called_names(ctx, post, names + nn, 8);
    TSNode bar = rt_prev_stmt(p->loop), first = bar;
    for (TSNode s = rt_prev_stmt(bar); !ts_node_is_null(s); s = rt_prev_stmt(s)) {
        TSNode c = tt_child(s, 0);
        if (!rt_is(s, "expression_statement") || !rt_is(c, "call_expression")) break;
        bool known = false;
        for (unsigned k = 0; k < nn; k++) known |= rt_text_is(ctx, tt_field(c, "function"), names[k]);
        if (!known) break;
        first = s;
    }
    if (ts_node_eq(first, bar)) {
        st = kl_rule_not_applicable(err, "no prologue loading the first tile before line %u", line);
        goto done;
    }
    uint32_t a0, a1, b0, b1;
    stmt_with_comments(ctx, first, &a0, &a1);
    rt_stmt_range(ctx, bar, NULL, &b0, &b1);
    if ((st = kl_edits_add(out, a0, b1, "")) != KL_OK) goto done;
    /* the stage index and the prefetch become the loads of this tile, the stores and a barrier */
    {
        uint32_t c0, c1;
        stmt_with_comments(ctx, p->curdecl, &c0, &c1);
        c0 = rt_line_blank_before(ctx, ts_node_start_byte(p->curdecl)) ? c0 : ts_node_start_byte(p->curdecl);
        if (!rt_is(pb, "expression_statement") || !rt_is(sb, "expression_statement")) {
            st = kl_rule_not_applicable(err, "the prefetch and the store at line %u are not single statements",
                                        ts_node_start_point(pre).row + 1);
            goto done;
        }
        kl_strbuf b = KL_STRBUF_INIT;
        kl_strbuf_addf(&b, "%s%s\n%s%s\n%s__syncthreads();\n", ind2, loads, ind2, stores, ind2);
        char *txt = b.failed ? NULL : kl_strbuf_detach(&b, NULL);
        kl_strbuf_release(&b);
        if (!txt) {
            st = KL_ERR_NOMEM;
            goto done;
        }
        uint32_t p0, p1;
        rt_stmt_range(ctx, pre, NULL, &p0, &p1);
        if (c0 != rt_line_start(ctx, ts_node_start_byte(p->curdecl)) || p1 != rt_line_end(ctx, ts_node_end_byte(pre))) {
            free(txt);
            st = kl_rule_not_applicable(err, "the stage index and the prefetch at line %u do not sit on lines of their own",
                                        ts_node_start_point(p->curdecl).row + 1);
            goto done;
        }
        if (!ts_node_eq(rt_next_stmt(p->curdecl), pre)) {
            free(txt);
            st = kl_rule_not_applicable(err, "the stage index at line %u is not right before the prefetch",
                                        ts_node_start_point(p->curdecl).row + 1);
            goto done;
        }
        st = kl_edits_add(out, c0, p1, txt);
        free(txt);
        if (st != KL_OK) goto done;
        uint32_t s0, s1;
        stmt_with_comments(ctx, post, &s0, &s1);
        if ((st = kl_edits_add(out, s0, s1, "")) != KL_OK) goto done;
    }
    /* every staged array loses its first subscript: As[cur][k][m] → As[k][m] (lambdas too) */
    for (unsigned m = 0; m < p->narrs; m++) {
        if (!p->staged[m]) continue;
        uint32_t ms[256], me[256];
        unsigned nm = tt_find(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), p->arrs[m].name, ms, me, 256);
        for (unsigned k = 0; k < nm && k < 256; k++) {
            if (ms[k] == ts_node_start_byte(p->arrs[m].ident)) continue;
            TSNode id = ts_node_descendant_for_byte_range(kl_source_root(ctx->src), ms[k], me[k]);
            TSNode sub = tt_parent(id);
            if (!rt_is(sub, "subscript_expression") || !ts_node_eq(tt_field(sub, "argument"), id) ||
                !rt_is(tt_parent(sub), "subscript_expression")) {
                st = kl_rule_not_applicable(err, "%s at line %u is not indexed by stage, row and column", p->arrs[m].name,
                                            ts_node_start_point(id).row + 1);
                goto done;
            }
            if ((st = kl_edits_add(out, me[k], ts_node_end_byte(sub), "")) != KL_OK) goto done;
        }
    }
    st = drop_stage_decls(ctx, p, out, err);
done:
    free(loads);
    free(stores);
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

/* The ranges that take the stage index `pat` ("(kt % STAGES)") out of text[s,e): ` + (kt % S) * X`
 * goes whole (a stage pointer becomes the base pointer), any other match becomes `0` (zero[k]). */
static unsigned stage_ranges(const char *text, uint32_t s, uint32_t e, const char *pat, uint32_t *rs, uint32_t *re,
                             bool *zero, unsigned max)
{
    uint32_t ms[64], me[64];
    unsigned nm = tt_find(text, s, e, pat, ms, me, 64), k = 0;
    for (unsigned i = 0; i < nm && i < 64 && k < max; i++) {
        uint32_t a = ms[i], b = me[i];
        while (a > s && (text[a - 1] == ' ' || text[a - 1] == '\t')) a--;
        bool plus = a > s && text[a - 1] == '+';
        if (plus) {
            a--;
            while (a > s && (text[a - 1] == ' ' || text[a - 1] == '\t')) a--;
        }
        while (b < e && (text[b] == ' ' || text[b] == '\t')) b++;
        bool times = b < e && text[b] == '*';
        if (times) {
            b++;
            while (b < e && (text[b] == ' ' || text[b] == '\t')) b++;
            uint32_t b0 = b;
            while (b < e && (text[b] == '_' || (text[b] >= 'a' && text[b] <= 'z') || (text[b] >= 'A' && text[b] <= 'Z') ||
                             (text[b] >= '0' && text[b] <= '9')))
                b++;
            times = b > b0;
        }
        if (plus && times) rs[k] = a, re[k] = b, zero[k] = false;
        else rs[k] = ms[i], re[k] = me[i], zero[k] = true;
        k++;
    }
    return nm > max ? max + 1 : k;
}

/* The ring (see find_ring): one stage, `load(this tile); commit; wait(0); __syncthreads();
 * compute; __syncthreads();`, the prologue gone. */
static kl_status remove_ring(const kl_rule_ctx *ctx, const rt_func *f, const db_present *p, kl_edits *out, kl_error *err)
{
    (void)f;
    unsigned line = ts_node_start_point(p->loop).row + 1;
    char ind2[64], pat[160], name[128], wname[128];
    rt_indent_of(ctx, ts_node_start_byte(p->wait), ind2, sizeof ind2);
    /* the prefetch: `if (next < bound) load(…);`, next declared right before it (or the bound's
     * own local) */
    TSNode pc = kl_ast_unparen(tt_field(tt_field(p->pre, "condition"), "value"));
    if (ts_node_is_null(pc)) pc = kl_ast_unparen(tt_field(p->pre, "condition"));
    TSNode lc = tt_field(p->loop, "condition"), call = tt_field(p->pre, "consequence");
    if (!ts_node_is_null(tt_field(p->pre, "alternative")) || !rt_is(pc, "binary_expression") ||
        !rt_text_is(ctx, tt_field(pc, "operator"), "<") || !rt_is(tt_field(pc, "left"), "identifier") ||
        !rt_is(lc, "binary_expression") || !rt_text_is(ctx, tt_field(lc, "operator"), "<") ||
        !rt_text_is(ctx, tt_field(lc, "left"), p->var))
        return kl_rule_not_applicable(err, "the prefetch at line %u is not `if (next < bound) load(…);`",
                                      ts_node_start_point(p->pre).row + 1);
    char bound[160], lbound[160], next[64];
    tt_copy_text(ctx, tt_field(pc, "right"), bound, sizeof bound);
    tt_copy_text(ctx, tt_field(lc, "right"), lbound, sizeof lbound);
    tt_copy_text(ctx, tt_field(pc, "left"), next, sizeof next);
    if (strcmp(bound, lbound))
        return kl_rule_not_applicable(err, "the prefetch at line %u is bounded by %s, the tile loop by %s",
                                      ts_node_start_point(p->pre).row + 1, bound, lbound);
    if (rt_is(call, "compound_statement")) {
        TSNode one[2];
        if (tt_stmts(call, one, 2) != 1)
            return kl_rule_not_applicable(err, "the prefetch at line %u is not one call", ts_node_start_point(p->pre).row + 1);
        call = one[0];
    }
    if (!call_name(ctx, call, name, sizeof name) || async_kind(ctx, call))
        return kl_rule_not_applicable(err, "the prefetch at line %u is not one call", ts_node_start_point(p->pre).row + 1);
    if (!ts_node_is_null(p->curdecl)) {
        char dn[64];
        TSNode v;
        if (!decl_named(ctx, p->curdecl, dn, sizeof dn, &v) || strcmp(dn, next))
            return kl_rule_not_applicable(err, "line %u between the barrier and the prefetch does not declare %s",
                                          ts_node_start_point(p->curdecl).row + 1, next);
    }
    /* the prologue: only the same load (guarded or not) and the commit */
    {
        TSNode pb = tt_field(p->pro, "body"), ps[8];
        unsigned np = rt_is(pb, "compound_statement") ? tt_stmts(pb, ps, 8) : 0;
        bool ok = np >= 1 && np <= 8, loads = false;
        for (unsigned k = 0; ok && k < np; k++) {
            TSNode c = ps[k];
            char nm[128];
            if (rt_is(c, "if_statement") && ts_node_is_null(tt_field(c, "alternative"))) c = tt_field(c, "consequence");
            if (async_kind(ctx, c) == 2) continue;
            ok = call_name(ctx, c, nm, sizeof nm) && !strcmp(nm, name);
            loads |= ok;
        }
        if (!ok || !loads)
            return kl_rule_not_applicable(err, "the loop before line %u is not the prologue of the ring (%s and a commit)", line,
                                          name);
    }
    /* the compute: no barrier, no other stage traffic, no exit */
    uint32_t cs = ts_node_start_byte(p->st[p->icompute]), ce = ts_node_end_byte(p->st[p->n - 1]);
    if (p->icompute >= p->n)
        return kl_rule_not_applicable(err, "the tile loop at line %u computes nothing after the prefetch", line);
    static const char *const banned[] = {"__syncthreads", "return", "break", "continue", "__pipeline_commit",
                                         "__pipeline_wait_prior"};
    for (unsigned k = 0; k < sizeof banned / sizeof *banned; k++)
        if (tt_uses(ctx->text, cs, ce, banned[k]))
            return kl_rule_not_applicable(err, "the compute of the tile loop at line %u has %s", line, banned[k]);
    if (tt_uses(ctx->text, cs, ce, name) || tt_uses(ctx->text, cs, ce, next))
        return kl_rule_not_applicable(err, "the compute of the tile loop at line %u uses %s", line,
                                      tt_uses(ctx->text, cs, ce, name) ? name : next);
    for (unsigned k = p->icompute; k < p->n; k++)
        if (async_kind(ctx, p->st[k]))
            return kl_rule_not_applicable(err, "line %u of the compute waits or commits",
                                          ts_node_start_point(p->st[k]).row + 1);
    /* the load of this tile: the prefetch with (next % DEPTH) taken out and next -> var */
    kl_strbuf sb = KL_STRBUF_INIT;
    char *loadt = NULL, *moved = NULL;
    kl_status st = KL_OK;
    uint32_t rs[32], re[32];
    bool zero[32];
    uint32_t a = ts_node_start_byte(call), b = ts_node_end_byte(call);
    kl_snprintf(pat, sizeof pat, "(%s %% %s)", next, p->depth);
    unsigned nr = stage_ranges(ctx->text, a, b, pat, rs, re, zero, 32);
    if (nr > 32) {
        st = kl_rule_not_applicable(err, "the prefetch at line %u names its stage too often", ts_node_start_point(call).row + 1);
        goto done;
    }
    for (unsigned k = 0; k < nr; k++) {
        kl_strbuf_add(&sb, ctx->text + a, rs[k] - a);
        if (zero[k]) kl_strbuf_adds(&sb, "0");
        a = re[k];
    }
    kl_strbuf_add(&sb, ctx->text + a, b - a);
    if (sb.failed) {
        st = KL_ERR_NOMEM;
        goto done;
    }
    {
        const char *t0 = kl_strbuf_str(&sb);
        tt_pair np[1] = {{next, p->var}};
        loadt = tt_subst(t0, 0, (uint32_t)strlen(t0), np, 1);
        if (!loadt) {
            st = KL_ERR_NOMEM;
            goto done;
        }
        char stagepat[96];
        kl_snprintf(stagepat, sizeof stagepat, "%% %s", p->depth);
        if (tt_count(loadt, 0, (uint32_t)strlen(loadt), stagepat)) {
            st = kl_rule_not_applicable(err, "the prefetch at line %u names a stage other than (%s %% %s)",
                                        ts_node_start_point(call).row + 1, next, p->depth);
            goto done;
        }
        /* one level less indented when it sat under the if */
        char ci[64], ii[64];
        rt_indent_of(ctx, ts_node_start_byte(call), ci, sizeof ci);
        rt_indent_of(ctx, ts_node_start_byte(p->pre), ii, sizeof ii);
        if (strlen(ci) > strlen(ii) && rt_line_blank_before(ctx, ts_node_start_byte(call))) {
            moved = tt_indent_tail(loadt, -(int)(strlen(ci) - strlen(ii)));
            if (moved) {
                free(loadt);
                loadt = moved;
                moved = NULL;
            }
        }
    }
    /* the head of the loop: load, commit, wait for everything, barrier */
    {
        char *commit = rt_text(ctx, p->commit);
        if (!commit) {
            st = KL_ERR_NOMEM;
            goto done;
        }
        call_name(ctx, p->wait, wname, sizeof wname);
        const char *after = ctx->text + ts_node_start_byte(p->wait) + strlen(wname);
        while (*after == ' ') after++;
        kl_strbuf h = KL_STRBUF_INIT;
        kl_strbuf_addf(&h, "%s%s\n%s%s\n%s%s%s;\n%s__syncthreads();\n", ind2, loadt, ind2, commit, ind2, wname,
                       *after == '<' ? "<0>()" : "(0)", ind2);
        free(commit);
        uint32_t w0, w1, c0, c1;
        stmt_with_comments(ctx, p->wait, &w0, &w1);
        rt_stmt_range(ctx, p->commit, NULL, &c0, &c1);
        if (w0 != rt_line_start(ctx, ts_node_start_byte(p->wait)) && w0 == ts_node_start_byte(p->wait)) {
            kl_strbuf_release(&h);
            st = kl_rule_not_applicable(err, "the wait at line %u does not sit on a line of its own",
                                        ts_node_start_point(p->wait).row + 1);
            goto done;
        }
        if (c1 != rt_line_end(ctx, ts_node_end_byte(p->commit))) {
            kl_strbuf_release(&h);
            st = kl_rule_not_applicable(err, "the commit at line %u does not sit on a line of its own",
                                        ts_node_start_point(p->commit).row + 1);
            goto done;
        }
        st = h.failed ? KL_ERR_NOMEM : kl_edits_add(out, w0, c1, kl_strbuf_str(&h));
        kl_strbuf_release(&h);
        if (st != KL_OK) goto done;
    }
    /* the compute reads stage 0; a barrier after it */
    kl_snprintf(pat, sizeof pat, "(%s %% %s)", p->var, p->depth);
    nr = stage_ranges(ctx->text, cs, ce, pat, rs, re, zero, 32);
    if (nr > 32) {
        st = kl_rule_not_applicable(err, "the compute of the tile loop at line %u names its stage too often", line);
        goto done;
    }
    {
        char stagepat[96];
        kl_snprintf(stagepat, sizeof stagepat, "%% %s", p->depth);
        if (tt_count(ctx->text, cs, ce, stagepat) != nr) {
            st = kl_rule_not_applicable(err, "the compute of the tile loop at line %u names a stage other than (%s %% %s)", line,
                                        p->var, p->depth);
            goto done;
        }
    }
    for (unsigned k = 0; k < nr && st == KL_OK; k++) st = kl_edits_add(out, rs[k], re[k], zero[k] ? "0" : "");
    if (st == KL_OK) st = kl_edits_addf(out, ce, ce, "\n%s__syncthreads();", ind2);
    if (st != KL_OK) goto done;
    /* the prologue goes, with its comment lines (and one of the blank lines around it) */
    {
        uint32_t a0, a1;
        stmt_with_comments(ctx, p->pro, &a0, &a1);
        /* a `#pragma unroll` above it, and the comment lines above that */
        uint32_t pg = tt_pragma_above(ctx, ts_node_start_byte(p->pro));
        if (pg != ts_node_start_byte(p->pro) && a0 == rt_line_start(ctx, ts_node_start_byte(p->pro))) {
            a0 = rt_line_start(ctx, pg);
            while (a0 > 0) {
                uint32_t l0 = rt_line_start(ctx, a0 - 1), k = l0;
                while (k < a0 && (ctx->text[k] == ' ' || ctx->text[k] == '\t')) k++;
                if (k + 1 >= a0 || ctx->text[k] != '/' || ctx->text[k + 1] != '/') break;
                a0 = l0;
            }
        }
        if (a0 == rt_line_start(ctx, a0) && a0 >= 2 && ctx->text[a0 - 1] == '\n' && ctx->text[a0 - 2] == '\n' &&
            a1 < ctx->len && ctx->text[a1] == '\n')
            a1++;
        st = kl_edits_add(out, a0, a1, "");
    }
done:
    kl_strbuf_release(&sb);
    free(loadt);
    free(moved);
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

/* ---- the rule -------------------------------------------------------------------------------------- */

static kl_status db_find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    for (unsigned i = 0; i < nf && i < 64; i++) {
        db *d = malloc(sizeof *d);
        if (!d) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        char why[256], id[256];
        kl_status st = KL_OK;
        int r = analyse(ctx, &fs[i], d, why, sizeof why);
        db_present *p = malloc(sizeof *p);
        if (!p) {
            free(d);
            return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        }
        bool present = find_present(ctx, &fs[i], p);
        /* a loop already in two stages is only a site to remove */
        if (r != 0 && present && ts_node_eq(p->loop, d->loop)) r = 0;
        if (r != 0) {
            kl_site_id(id, sizeof id, fs[i].name, d->loop, NULL);
            json_t *feat = json_object();
            if (r > 0) {
                json_t *arr = json_array();
                for (unsigned k = 0; k < d->nloads; k++) json_array_append_new(arr, json_string(d->arrs[d->loads[k].arr].name));
                json_object_set_new(feat, "tiles", arr);
                json_object_set_new(feat, "loads", json_integer(d->nloads));
                json_object_set_new(feat, "loop_var", json_string(d->var));
                bool cp = true;
                char w2[256];
                for (unsigned k = 0; k < d->nloads && cp; k++) cp = cp_async_ok(d, &d->loads[k], w2, sizeof w2);
                json_object_set_new(feat, "cp_async", json_boolean(cp));
            } else {
                json_object_set_new(feat, "why_not", json_string(why));
            }
            st = kl_sites_add(out, id, KL_SITE_APPLICABLE, kl_node_span(d->loop), fs[i].name, feat, NULL,
                              r > 0 ? "one-stage tile loop: prefetch the next tile while computing on this one"
                                    : "one-stage tile loop (two stages cannot be applied as is)");
        }
        if (st == KL_OK && present) {
            kl_site_id(id, sizeof id, fs[i].name, p->loop, NULL);
            const char *via = p->form == DB_CP || p->form == DB_RING ? "cp.async" : "regs";
            const char *form = p->form == DB_EXPERT ? "expert" : p->form == DB_RING ? "ring" : "ours";
            json_t *feat = json_pack("{s:s, s:s, s:s}", "form", form, "stage_index", p->form == DB_RING ? p->depth : p->cur,
                                     "via", via);
            if (p->why[0]) json_object_set_new(feat, "why_not", json_string(p->why));
            json_t *params = json_pack("{s:s, s:s}", "via", via, "stages", "2");
            st = kl_sites_add(out, id, KL_SITE_PRESENT, kl_node_span(p->loop), fs[i].name, feat, params,
                              "two shared stages: the next tile is fetched while this one is used");
        }
        free(p);
        free(d);
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    }
    return KL_OK;
}

static const rt_func *site_function(const kl_rule_ctx *ctx, const kl_site *site, rt_func *fs)
{
    unsigned nf = rt_functions(ctx, fs, 64);
    return rt_function_named(fs, nf < 64 ? nf : 64, site->kernel);
}

static kl_status db_apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out,
                          kl_error *err)
{
    const char *via = "regs";
    kl_rule_param_str(&kl_rule_double_buffer, params, "via", &via);
    bool cp = !strcmp(via, "cp.async");
    rt_func fs[64];
    const rt_func *f = site_function(ctx, site, fs);
    if (!f) return kl_rule_not_applicable(err, "no kernel %s", site->kernel);
    db *d = malloc(sizeof *d);
    if (!d) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    char why[256];
    kl_status st;
    if (analyse(ctx, f, d, why, sizeof why) != 1) {
        st = kl_rule_not_applicable(err, "%s", why[0] ? why : "no one-stage tile loop");
        goto cleanup;
    }
    for (unsigned k = 0; cp && k < d->nloads; k++)
        if (!cp_async_ok(d, &d->loads[k], why, sizeof why)) {
            st = kl_rule_not_applicable(err, "%s", why);
            goto cleanup;
        }
    st = db_apply_edits(d, cp, out, err);
cleanup:
    free(d);
    return st;
}

static kl_status db_remove(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    rt_func fs[64];
    const rt_func *f = site_function(ctx, site, fs);
    db_present *p = malloc(sizeof *p);
    if (!p) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    kl_status st;
    if (!f || !find_present(ctx, f, p)) st = kl_rule_not_applicable(err, "no two-stage tile loop in %s", site->kernel);
    else if (p->form == DB_EXPERT) st = remove_expert(ctx, f, p, out, err);
    else if (p->form == DB_RING && p->why[0]) st = kl_rule_not_applicable(err, "%s", p->why);
    else if (p->form == DB_RING) st = remove_ring(ctx, f, p, out, err);
    else st = remove_ours(ctx, f, p, out, err);
    free(p);
    return st;
}

const kl_rule kl_rule_double_buffer = {
    NAME,
    "two shared-memory stages: fetch the next tile (into registers or with cp.async) while computing on this one",
    db_params,
    2,
    db_find,
    db_remove,
    db_apply,
};
