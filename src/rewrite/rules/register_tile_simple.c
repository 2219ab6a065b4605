/* register-tile: the one-output-per-thread GEMM ↔ a TM x TN register tile per thread (apply and remove;
 * register_tile.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/register_tile.h"

#define NAME "register-tile"

/* ---- the one-output-per-thread form --------------------------------------------------------------- */




static bool uses_any(const kl_rule_ctx *ctx, TSNode n, const char *const *names, unsigned count)
{
    for (unsigned i = 0; i < count; i++)
        if (tt_uses(ctx->text, ts_node_start_byte(n), ts_node_end_byte(n), names[i])) return true;
    return false;
}

/* The names that move with a side's thread index ("threadIdx.p" and the locals that do), or with
 * block, that depend on its block index ("blockIdx.p" and such locals). */
static unsigned index_names(const register_tile__rt *a, int side, bool block, const char **out, unsigned max)
{
    static const char *const builtins[2][3] = {{"threadIdx.x", "threadIdx.y", "threadIdx.z"},
                                               {"blockIdx.x", "blockIdx.y", "blockIdx.z"}};
    char letter = side == 1 ? a->p : a->q;
    if (letter < 'x' || letter > 'z' || max == 0) return 0;
    unsigned n = 0;
    out[n++] = builtins[block][letter - 'x'];
    for (unsigned i = 0; i < a->nlocals && n < max; i++)
        if ((block ? a->locals[i].bside : a->locals[i].tside) == side) out[n++] = a->locals[i].name;
    return n;
}

/* The subscripts of a 2-D access of a tile within e: *count receives how many accesses of any
 * tile e holds; the last one's tile index and subscripts are returned. */
typedef struct tile_find {
    const register_tile__rt *a;
    unsigned count;
    int tile;
    TSNode idx[2];
    bool bad;
} tile_find;

static bool tile_find_visit(TSNode n, void *user)
{
    tile_find *t = user;
    if (!rt_is(n, "identifier")) return true;
    for (unsigned k = 0; k < t->a->ntiles; k++) {
        if (!rt_text_is(t->a->ctx, n, t->a->tiles[k].name)) continue;
        TSNode in = tt_parent(n);
        TSNode out = tt_parent(in);
        if (!rt_is(in, "subscript_expression") || !rt_is(out, "subscript_expression") ||
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

static int local_index(const register_tile__rt *a, const char *name)
{
    for (unsigned i = 0; i < a->nlocals; i++)
        if (!strcmp(a->locals[i].name, name)) return (int)i;
    return -1;
}

/* Macros and helpers of the file that read thread or block indices: a use of one in the
 * kernel would hide an index from the substitutions. */
static bool hidden_index(const kl_rule_ctx *ctx, const register_tile__rt *a, char *why, size_t size)
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
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
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
static bool split_kloop(register_tile__rt *a, char *why, size_t size)
{
    const kl_rule_ctx *ctx = a->ctx;
    TSNode body = tt_field(a->kloop, "body");
    unsigned line = ts_node_start_point(a->kloop).row + 1;
    TSNode st[32];
    unsigned n = rt_is(body, "compound_statement") ? tt_stmts(body, st, 32) : 0;
    if (n < 4 || n > 32) {
        kl_snprintf(why, size, "the tile loop at line %u is not loads, __syncthreads(), the product loop, "
                               "__syncthreads()", line);
        return false;
    }
    unsigned i = 0;
    a->nloads = 0;
    for (; i < n && !rt_is_syncthreads(ctx, st[i]); i++) {
        TSNode as = tt_child(st[i], 0);
        if (!rt_is(st[i], "expression_statement") || !rt_is(as, "assignment_expression") || a->nloads >= 8) {
            kl_snprintf(why, size, "line %u in the tile loop is not a load of a shared tile",
                        ts_node_start_point(st[i]).row + 1);
            return false;
        }
        a->loads[a->nloads++] = st[i];
    }
    if (i + 3 != n || !a->nloads || !rt_is(st[i + 1], "for_statement") || !rt_is_syncthreads(ctx, st[i + 2])) {
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
static bool find_update(register_tile__rt *a, char *why, size_t size)
{
    const kl_rule_ctx *ctx = a->ctx;
    TSNode b = tt_field(a->inner, "body");
    unsigned line = ts_node_start_point(a->inner).row + 1;
    if (rt_is(b, "compound_statement")) {
        TSNode one[2];
        if (tt_stmts(b, one, 2) != 1) {
            kl_snprintf(why, size, "the product loop at line %u has more than one statement", line);
            return false;
        }
        b = one[0];
    }
    TSNode as = tt_child(b, 0);
    if (!rt_is(b, "expression_statement") || !rt_is(as, "assignment_expression") ||
        !rt_text_is(ctx, tt_field(as, "operator"), "+=") || !rt_is(tt_field(as, "left"), "identifier")) {
        kl_snprintf(why, size, "the product loop at line %u is not `acc += a * b;`", line);
        return false;
    }
    TSNode r = tt_field(as, "right");
    while (rt_is(r, "parenthesized_expression")) r = tt_child(r, 0);
    if (!rt_is(r, "binary_expression") || !rt_text_is(ctx, tt_field(r, "operator"), "*")) {
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
int register_tile__analyse(const kl_rule_ctx *ctx, const rt_func *f, register_tile__rt *a, char *why, size_t size)
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
            if (a->ntiles < 2 && rt_is(d, "array_declarator") && rt_is(tt_field(d, "declarator"), "array_declarator") &&
                rt_is(tt_field(tt_field(d, "declarator"), "declarator"), "identifier")) {
                register_tile__rt_tile *t = &a->tiles[a->ntiles++];
                t->decl = s;
                t->dims[1] = tt_field(d, "size");
                t->dims[0] = tt_field(tt_field(d, "declarator"), "size");
                tt_copy_text(ctx, tt_field(tt_field(d, "declarator"), "declarator"), t->name, sizeof t->name);
                tt_copy_text(ctx, tt_field(s, "type"), t->elem, sizeof t->elem);
            }
        } else if (rt_is(s, "for_statement") &&
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
    if (kl_rules_affine(ctx, f->def, &ax, &err) != KL_OK) {
        kl_snprintf(why, size, "the index analysis failed: %s", err.message);
        return -1;
    }
    int rc = -1;
    /* the locals declared at the top level */
    for (unsigned i = 0; i < n; i++) {
        TSNode s = a->stmts[i];
        if (!rt_is(s, "declaration") || tt_is_shared_decl(ctx, s)) continue;
        if (i > a->kidx) continue;
        uint32_t c = tt_child_count(s);
        for (uint32_t k = 0; k < c; k++) {
            TSNode d = tt_child(s, k);
            TSNode id = rt_is(d, "init_declarator") ? tt_field(d, "declarator") : d;
            if (!rt_is(id, "identifier") || a->nlocals >= MAXLOCAL) continue;
            register_tile__rt_local *L = &a->locals[a->nlocals++];
            memset(L, 0, sizeof *L);
            tt_copy_text(ctx, id, L->name, sizeof L->name);
            L->decl = s;
            if (rt_is(d, "init_declarator")) L->value = tt_field(d, "value");
        }
    }
    for (unsigned i = 0; i < n; i++)
        if (i < a->kidx && !rt_is(a->stmts[i], "declaration")) {
            kl_snprintf(why, size, "line %u before the tile loop is not a declaration",
                        ts_node_start_point(a->stmts[i]).row + 1);
            goto done;
        }
    if (!split_kloop(a, why, size) || !find_update(a, why, size)) goto done;

    /* the tiles of the update: e1 reads the A tile at [threadIdx.p][k], e2 the B tile */
    tile_find t1 = {.a = a, .tile = -1}, t2 = {.a = a, .tile = -1};
    kl_ast_walk(a->e1, tile_find_visit, &t1);
    kl_ast_walk(a->e2, tile_find_visit, &t2);
    if (t1.count != 1 || t2.count != 1 || t1.bad || t2.bad || t1.tile == t2.tile) {
        kl_snprintf(why, size, "the update at line %u does not multiply an element of each shared tile",
                    ts_node_start_point(a->upd).row + 1);
        goto done;
    }
    for (int w = 0; w < 2; w++) {
        tile_find *tf = w == 0 ? &t1 : &t2;
        register_tile__rt_tile *t = &a->tiles[tf->tile];
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
        if (!rt_const_eval(ctx, f->def, t->dims[t->grow], &t->grow_val) || t->grow_val <= 0) {
            kl_snprintf(why, size, "the size of %s is not a compile-time constant", t->name);
            goto done;
        }
        TSNode g = t->dims[t->grow];
        if (rt_is(g, "identifier") || rt_is(g, "number_literal")) tt_copy_text(ctx, g, t->stride, sizeof t->stride);
        else kl_snprintf(t->stride, sizeof t->stride, "%lld", t->grow_val);
    }
    if (a->p == a->q) {
        kl_snprintf(why, size, "both tiles of the update at line %u move with threadIdx.%c",
                    ts_node_start_point(a->upd).row + 1, a->p);
        goto done;
    }
    /* classify the locals by the indices they move with */
    for (unsigned i = 0; i < a->nlocals; i++) {
        register_tile__rt_local *L = &a->locals[i];
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
        register_tile__rt_local *acc = &a->locals[a->acc];
        TSNode d = acc->decl;
        uint32_t nd = 0, c = tt_child_count(d);
        for (uint32_t k = 0; k < c; k++)
            if (rt_is(tt_child(d, k), "init_declarator") || rt_is(tt_child(d, k), "identifier"))
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
        unsigned np = index_names(a, 1, false, pn, MAXLOCAL + 2), nq = index_names(a, 2, false, qn, MAXLOCAL + 2);
        unsigned nbp = index_names(a, 1, true, pb, MAXLOCAL + 2), nbq = index_names(a, 2, true, qb, MAXLOCAL + 2);
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
            kl_ast_walk(tt_field(as, "left"), tile_find_visit, &tf);
            tile_find tr = {.a = a, .tile = -1};
            kl_ast_walk(tt_field(as, "right"), tile_find_visit, &tr);
            unsigned line = ts_node_start_point(a->loads[i]).row + 1;
            if (tf.count != 1 || tf.bad || tr.count || tr.bad || !rt_text_is(ctx, tt_field(as, "operator"), "=")) {
                kl_snprintf(why, size, "line %u in the tile loop is not a load of one shared tile", line);
                goto done;
            }
            register_tile__rt_tile *t = &a->tiles[tf.tile];
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
        if (uses_any(ctx, s, tn, 2) || rt_is(s, "declaration") ||
            tt_uses(ctx->text, ts_node_start_byte(s), ts_node_end_byte(s), "__syncthreads")) {
            kl_snprintf(why, size, "line %u after the tile loop is not a statement this transform can repeat per "
                                   "output", ts_node_start_point(s).row + 1);
            goto done;
        }
    }
    rc = 1;
done:
    kl_rules_affine_done(ctx, ax);
    return rc;
}

/* ---- launches ---------------------------------------------------------------------------------- */

static bool cfg_arg_value(const kl_rule_ctx *ctx, TSNode scope, TSNode arg, long long *v)
{
    if (rt_is(arg, "parameter_declaration")) {
        TSNode ty = tt_field(arg, "type");
        char name[64];
        tt_copy_text(ctx, ty, name, sizeof name);
        return rt_const_name(ctx, scope, name, v);
    }
    return rt_const_eval(ctx, scope, arg, v);
}

/* Check the launches of the kernel and add the grid edits (apply: wrap; remove: unwrap). */
kl_status register_tile__launch_edits(const register_tile__rt *a, bool apply, long long tm, long long tn, kl_edits *out, kl_error *err,
                              char *why, size_t size)
{
    const kl_rule_ctx *ctx = a->ctx;
    rt_launch ls[16];
    unsigned nl = rt_launches(ctx, a->f.name, ls, 16);
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
                char *gt = rt_text(ctx, rt_is(g, "parameter_declaration") ? tt_field(g, "type") : g);
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
                if (!rt_is(g, "binary_expression") || !rt_text_is(ctx, tt_field(g, "operator"), "/") ||
                    !rt_text_is(ctx, r, want_r) || !rt_is(l, "parenthesized_expression") ||
                    !rt_is(in, "binary_expression") || !rt_text_is(ctx, tt_field(in, "operator"), "+") ||
                    !rt_text_is(ctx, tt_field(in, "right"), want_k)) {
                    kl_snprintf(why, size, "the grid of the launch at line %u is not divided by the register tile", line);
                    return KL_ERR_NOT_APPLICABLE;
                }
                char *e = rt_text(ctx, tt_field(in, "left"));
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


static void subs_add(register_tile__subs *s, const char *from, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void subs_add(register_tile__subs *s, const char *from, const char *fmt, ...)
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

static void make_subs(const register_tile__rt *a, bool i, bool j, bool acc, long long tm, long long tn, register_tile__subs *s)
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
        const register_tile__rt_local *L = &a->locals[k];
        if (i && L->tside == 1) subs_add(s, L->name, "(%s + kl_i * %s)", L->name, stride_p);
        if (j && L->tside == 2) subs_add(s, L->name, "(%s + kl_j * %s)", L->name, stride_q);
    }
    if (acc) subs_add(s, a->locals[a->acc].name, "%s[kl_i][kl_j]", a->locals[a->acc].name);
}

static kl_status add_nest(const register_tile__rt *a, TSNode stmt, bool i, bool j, bool acc, long long tm, long long tn,
                          kl_edits *out, kl_error *err)
{
    const kl_rule_ctx *ctx = a->ctx;
    register_tile__subs s;
    make_subs(a, i, j, acc, tm, tn, &s);
    char ind[64];
    rt_indent_of(ctx, ts_node_start_byte(stmt), ind, sizeof ind);
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

kl_status register_tile__rt_apply_edits(const register_tile__rt *a, long long tm, long long tn, kl_edits *out, kl_error *err)
{
    const kl_rule_ctx *ctx = a->ctx;
    kl_status st = KL_OK;
    uint32_t rs[64], re[64];
    unsigned nr = 0;
    /* the tiles grow along their thread dimension */
    for (unsigned k = 0; k < 2; k++) {
        const register_tile__rt_tile *t = &a->tiles[k];
        TSNode g = t->dims[t->grow];
        char *gt = rt_text(ctx, g);
        if (!gt) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        bool simple = rt_is(g, "identifier") || rt_is(g, "number_literal");
        st = kl_edits_addf(out, ts_node_start_byte(g), ts_node_end_byte(g), simple ? "%lld * %s" : "%lld * (%s)",
                           t->side == 1 ? tm : tn, gt);
        free(gt);
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    }
    /* the accumulator */
    {
        const register_tile__rt_local *acc = &a->locals[a->acc];
        char ind[64];
        rt_indent_of(ctx, ts_node_start_byte(acc->decl), ind, sizeof ind);
        /* the initial value per output (a bias read at [row][col] moves with them) */
        register_tile__subs sv;
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
        rt_indent_of(ctx, ts_node_start_byte(a->inner), ind, sizeof ind);
        register_tile__subs si, sj;
        make_subs(a, true, false, false, tm, tn, &si);
        make_subs(a, false, true, false, tm, tn, &sj);
        char *e1 = tt_subst(ctx->text, ts_node_start_byte(a->e1), ts_node_end_byte(a->e1), si.pairs, si.n);
        char *e2 = tt_subst(ctx->text, ts_node_start_byte(a->e2), ts_node_end_byte(a->e2), sj.pairs, sj.n);
        /* the register types: a bare tile element keeps the tile's type, else the accumulator's */
        const char *ta = a->acc_type, *tb = a->acc_type;
        for (unsigned k = 0; k < 2; k++) {
            TSNode e = a->tiles[k].side == 1 ? a->e1 : a->e2;
            while (rt_is(e, "parenthesized_expression")) e = tt_child(e, 0);
            if (rt_is(e, "subscript_expression")) *(a->tiles[k].side == 1 ? &ta : &tb) = a->tiles[k].elem;
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
        unsigned np = index_names(a, 1, false, pn, MAXLOCAL + 2), nq = index_names(a, 2, false, qn, MAXLOCAL + 2);
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


/* Is the for statement `for (int <var> = 0; <var> < N; <var>++)`? */
bool register_tile__is_kl_loop(const kl_rule_ctx *ctx, TSNode f, const char *var)
{
    if (!rt_is(f, "for_statement")) return false;
    TSNode init = tt_field(f, "initializer");
    if (ts_node_is_null(init)) return false;
    TSNode d = tt_field(init, "declarator");
    return rt_is(d, "init_declarator") && rt_text_is(ctx, tt_field(d, "declarator"), var);
}

bool register_tile__find_present(const kl_rule_ctx *ctx, const rt_func *f, register_tile__rt_present *pr)
{
    memset(pr, 0, sizeof *pr);
    if (!f->global || ts_node_is_null(f->body)) return false;
    TSNode st[MAXSTMT];
    unsigned n = tt_stmts(f->body, st, MAXSTMT);
    for (unsigned i = 0; i + 1 < n && i + 1 < MAXSTMT; i++) {
        TSNode d = tt_field(st[i], "declarator");
        if (!rt_is(st[i], "declaration") || tt_is_shared_decl(ctx, st[i]) || !rt_is(d, "array_declarator")) continue;
        TSNode in = tt_field(d, "declarator");
        if (!rt_is(in, "array_declarator") || !rt_is(tt_field(in, "declarator"), "identifier")) continue;
        if (!register_tile__is_kl_loop(ctx, st[i + 1], "kl_i")) continue;
        tt_copy_text(ctx, tt_field(in, "declarator"), pr->acc, sizeof pr->acc);
        if (!rt_const_eval(ctx, f->def, tt_field(in, "size"), &pr->tm) ||
            !rt_const_eval(ctx, f->def, tt_field(d, "size"), &pr->tn))
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
    while (register_tile__is_kl_loop(ctx, f, "kl_i") || register_tile__is_kl_loop(ctx, f, "kl_j")) {
        (*depth)++;
        TSNode b = tt_field(f, "body");
        if (rt_is(b, "compound_statement")) {
            TSNode one[2];
            if (tt_stmts(b, one, 2) != 1) return (TSNode){0};
            b = one[0];
        }
        f = b;
    }
    return f;
}

/* The inverse substitutions of a piece of text (new string). */
static char *unsubst(const char *text, uint32_t s, uint32_t e, const register_tile__rt_present *pr)
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
    if (register_tile__is_kl_loop(f->ctx, n, "kl_i") || register_tile__is_kl_loop(f->ctx, n, "kl_j")) {
        if (f->n < 64) f->items[f->n++] = n;
        return false;
    }
    return true;
}

kl_status register_tile__rt_remove_edits(const kl_rule_ctx *ctx, const rt_func *f, const register_tile__rt_present *pr, kl_edits *out,
                                 kl_error *err)
{
    kl_status st = KL_OK;
    char *t = NULL;
    unsigned line = ts_node_start_point(pr->decl).row + 1;
    /* the accumulator */
    int depth;
    TSNode in = nest_inner(ctx, pr->init, &depth);
    TSNode as = tt_child(in, 0);
    if (depth != 2 || !rt_is(in, "expression_statement") || !rt_is(as, "assignment_expression"))
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
        prod = rt_ancestor(at, "compound_statement");
        TSNode loop = tt_parent(prod);
        TSNode ps[8];
        unsigned np = tt_stmts(prod, ps, 8);
        if (!rt_is(loop, "for_statement") || np != 5)
            return kl_rule_not_applicable(err, "the register product at line %u is not the form this transform writes",
                                          ts_node_start_point(prod).row + 1);
        TSNode a1 = tt_child(nest_inner(ctx, ps[2], &depth), 0);
        TSNode b1 = tt_child(nest_inner(ctx, ps[3], &depth), 0);
        if (!rt_is(a1, "assignment_expression") || !rt_is(b1, "assignment_expression"))
            return kl_rule_not_applicable(err, "the register loads at line %u are not the form this transform writes",
                                          ts_node_start_point(ps[2]).row + 1);
        char *e1 = unsubst(ctx->text, ts_node_start_byte(tt_field(a1, "right")), ts_node_end_byte(tt_field(a1, "right")), pr);
        char *e2 = unsubst(ctx->text, ts_node_start_byte(tt_field(b1, "right")), ts_node_end_byte(tt_field(b1, "right")), pr);
        char ind[64];
        rt_indent_of(ctx, ts_node_start_byte(loop), ind, sizeof ind);
        st = e1 && e2 ? kl_edits_addf(out, ts_node_start_byte(prod), ts_node_end_byte(prod), "{\n%s    %s += %s * %s;\n%s}",
                                      ind, pr->acc, e1, e2, ind)
                      : KL_ERR_NOMEM;
        free(e1);
        free(e2);
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
        nf.skip_s[nf.nskip] = ts_node_start_byte(prod), nf.skip_e[nf.nskip++] = ts_node_end_byte(prod);
    }
    /* the other nests: back to one statement */
    kl_ast_walk(f->body, nest_visit, &nf);
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
        while (rt_is(d, "array_declarator")) {
            TSNode sz = tt_field(d, "size");
            TSNode l = tt_field(sz, "left"), r = tt_field(sz, "right");
            long long k;
            if (rt_is(sz, "binary_expression") && rt_text_is(ctx, tt_field(sz, "operator"), "*") &&
                rt_is(l, "number_literal") && rt_const_eval(ctx, f->def, l, &k) && (k == pr->tm || k == pr->tn)) {
                if (rt_is(r, "parenthesized_expression")) r = tt_child(r, 0);
                char *rtx = rt_text(ctx, r);
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

