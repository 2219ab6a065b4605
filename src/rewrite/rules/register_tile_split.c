/* register-tile: a thread's register tile split over more blocks, one dimension at a time (remove;
 * register_tile.h).
 *
 * A kernel whose threads each hold an accumulator array `T acc[D0][D1]…` (a warp tile: WM_ITERS x
 * WN_ITERS x TM x TN, nested constexpr loops) and share nothing (no shared memory, barriers,
 * shuffles or atomics: what smem-tile's lambda form leaves) computes the outputs of each index along
 * a dimension d of acc independently. Remove takes each dimension of extent E > 1 in turn (each
 * split on the text the previous one wrote; the site's edit is the whole file) and gives each of its
 * indices to another block: the grid gets E times the blocks along y (or z when the
 * kernel uses y), each block's share `kl_sN = blockIdx.y / P % E` (P: the y extent before), every
 * loop `for (V = 0; V < E; ++V)` that indexes acc along d runs for V = kl_sN only, and acc along d
 * (and every local array indexed only by such loops along a dimension of extent E: the warp tile's
 * fragments) shrinks to 1, indexed by 0; a `#pragma unroll` above such a loop goes. Applied once per dimension, it ends at one output per
 * thread (acc[1][1]…) with the block unchanged and E0·E1·… times the blocks.
 *
 * Sound when the iterations of those loops are independent: inside them only locals of the loop
 * body, elements of the shrunk arrays at index V along d, and memory through pointers (the output
 * stores) are written; every access of a shrunk array along its dimension is such a loop's
 * variable. Each thread then computes exactly the part of its former work at V = kl_sN; the E
 * threads with the same block index along x and thread index, one per share, together do all of it,
 * each output stored once. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/register_tile.h"

#define NAME "register-tile"
#define SP_ARR 16
#define SP_LOOP 64
#define SP_DIM 6

typedef struct sp_arr {
    TSNode decl, sizes[SP_DIM];   /* the size node of each dimension, left to right */
    long long ext[SP_DIM];
    unsigned dims;
    char name[64];
    int split;                    /* the dimension shrunk (-1: none) */
    bool init;                    /* declared with a non-empty initializer list (its size is spelled out) */
} sp_arr;

typedef struct sp {
    const kl_rule_ctx *ctx;
    const rt_func *f;
    sp_arr a[SP_ARR];
    unsigned na;
    TSNode loops[SP_LOOP];
    char lvar[SP_LOOP][64];
    bool split[SP_LOOP];
    unsigned nl;
    long long E;
    char why[400];
} sp;

/* `T name[a][b]…;` declarators of local arrays with compile-time sizes, at any depth in the body */
static bool arr_visit(TSNode n, void *user)
{
    sp *s = user;
    if (!rt_is(n, "declaration") || tt_is_shared_decl(s->ctx, n)) return true;
    TSNode ds[8];
    unsigned nd = rt_declarators(n, ds, 8);
    for (unsigned i = 0; i < nd && i < 8 && s->na < SP_ARR; i++) {
        TSNode d = ds[i];
        bool init = false;
        if (rt_is(d, "init_declarator")) {
            TSNode v = tt_field(d, "value");
            init = !rt_is(v, "initializer_list") || ts_node_named_child_count(v) > 0;
            d = tt_field(d, "declarator");
        }
        if (!rt_is(d, "array_declarator")) continue;
        sp_arr *a = &s->a[s->na];
        memset(a, 0, sizeof *a);
        TSNode sz[SP_DIM];
        unsigned k = 0;
        bool ok = true;
        for (; rt_is(d, "array_declarator") && k < SP_DIM; d = tt_field(d, "declarator")) {
            sz[k] = tt_field(d, "size");
            ok &= rt_const_eval(s->ctx, s->f->def, sz[k], &a->ext[SP_DIM - 1 - k]);
            k++;
        }
        if (!ok || !rt_is(d, "identifier")) continue;
        a->dims = k;
        for (unsigned j = 0; j < k; j++) {
            a->sizes[j] = sz[k - 1 - j];
            a->ext[j] = a->ext[SP_DIM - k + j];
        }
        a->decl = n;
        a->split = -1;
        a->init = init;
        tt_copy_text(s->ctx, d, a->name, sizeof a->name);
        s->na++;
    }
    return true;
}

/* `for (int V = 0; V < B; ++V | V++ | V += 1)` with B a compile-time constant: V and B */
static bool plain_loop(const sp *s, TSNode f, char *var, size_t size, long long *trip)
{
    TSNode init = tt_field(f, "initializer"), cond = tt_field(f, "condition"), upd = tt_field(f, "update");
    TSNode d = tt_field(init, "declarator");
    long long v0;
    if (!rt_is(init, "declaration") || !rt_is(d, "init_declarator") || !rt_is(tt_field(d, "declarator"), "identifier") ||
        !rt_const_eval(s->ctx, s->f->def, tt_field(d, "value"), &v0) || v0 != 0)
        return false;
    tt_copy_text(s->ctx, tt_field(d, "declarator"), var, size);
    if (!rt_is(cond, "binary_expression") || !rt_text_is(s->ctx, tt_field(cond, "operator"), "<") ||
        !rt_text_is(s->ctx, tt_field(cond, "left"), var) || !rt_const_eval(s->ctx, s->f->def, tt_field(cond, "right"), trip))
        return false;
    if (rt_is(upd, "update_expression"))
        return rt_text_is(s->ctx, tt_field(upd, "argument"), var) && tt_uses(s->ctx->text, ts_node_start_byte(upd),
                                                                             ts_node_end_byte(upd), "+");
    long long one;
    return rt_is(upd, "assignment_expression") && rt_text_is(s->ctx, tt_field(upd, "operator"), "+=") &&
           rt_text_is(s->ctx, tt_field(upd, "left"), var) && rt_const_eval(s->ctx, s->f->def, tt_field(upd, "right"), &one) &&
           one == 1;
}

static bool loop_visit(TSNode n, void *user)
{
    sp *s = user;
    if (rt_is(n, "for_statement") && s->nl < SP_LOOP) {
        long long trip;
        if (plain_loop(s, n, s->lvar[s->nl], sizeof s->lvar[0], &trip) && trip == s->E) s->loops[s->nl++] = n;
    }
    return true;
}

/* An access `X[i0][i1]…` of a local array (the outermost subscript of the full chain): the array
 * and its indices, left to right. */
static int access_of(const sp *s, TSNode n, TSNode *idx, unsigned *k)
{
    if (!rt_is(n, "subscript_expression") || rt_is(tt_parent(n), "subscript_expression")) return -1;
    TSNode ix[SP_DIM];
    unsigned m = 0;
    TSNode b = n;
    for (; rt_is(b, "subscript_expression") && m < SP_DIM; b = tt_field(b, "argument")) {
        TSNode i = tt_field(b, "index");
        if (ts_node_is_null(i)) i = tt_child(tt_field(b, "indices"), 0);
        ix[m++] = i;
    }
    if (!rt_is(b, "identifier")) return -1;
    for (unsigned a = 0; a < s->na; a++) {
        if (!rt_text_is(s->ctx, b, s->a[a].name)) continue;
        /* the declaration in scope: the last one before n (locals of one name in two scopes) */
        *k = m;
        for (unsigned j = 0; j < m; j++) idx[j] = ix[m - 1 - j];
        return (int)a;
    }
    return -1;
}

/* The split loop (of s->loops) whose variable is the identifier e, enclosing node n; -1 when none. */
static int enclosing_split(const sp *s, TSNode e, TSNode n)
{
    e = register_tile__rg_strip(e);
    if (!rt_is(e, "identifier")) return -1;
    for (unsigned l = 0; l < s->nl; l++)
        if (s->split[l] && rt_text_is(s->ctx, e, s->lvar[l]) && ts_node_start_byte(n) >= ts_node_start_byte(s->loops[l]) &&
            ts_node_end_byte(n) <= ts_node_end_byte(s->loops[l]))
            return (int)l;
    return -1;
}

typedef struct acc_scan {
    sp *s;
    int arr;
    unsigned dim;
    bool all;        /* every access indexed along dim by an enclosing split loop's variable */
    bool any;        /* … or by the variable of any enclosing loop over the extent (hit: those loops) */
    bool hit[SP_LOOP];
    TSNode bad;
} acc_scan;

/* The loop over the extent (of s->loops) whose variable is the identifier e, enclosing n; -1 when none. */
static int enclosing_loop(const sp *s, TSNode e, TSNode n)
{
    e = register_tile__rg_strip(e);
    if (!rt_is(e, "identifier")) return -1;
    int best = -1;
    for (unsigned l = 0; l < s->nl; l++)
        if (rt_text_is(s->ctx, e, s->lvar[l]) && ts_node_start_byte(n) >= ts_node_start_byte(s->loops[l]) &&
            ts_node_end_byte(n) <= ts_node_end_byte(s->loops[l]) &&
            (best < 0 || ts_node_start_byte(s->loops[l]) > ts_node_start_byte(s->loops[best])))
            best = (int)l;
    return best;
}

/* Is n (an access whose subscript along the dimension is e) the target of `Y[…] = value;` with e a
 * literal below the extent? */
static bool const_write(const sp *s, TSNode n, TSNode e)
{
    e = register_tile__rg_strip(e);
    long long v;
    TSNode as = tt_parent(n);
    return rt_is(e, "number_literal") && rt_const_eval(s->ctx, s->f->def, e, &v) && v >= 0 && v < s->E &&
           rt_is(as, "assignment_expression") && ts_node_eq(tt_field(as, "left"), n) &&
           rt_text_is(s->ctx, tt_field(as, "operator"), "=") && rt_is(tt_parent(as), "expression_statement");
}

static bool acc_check_visit(TSNode n, void *user)
{
    acc_scan *c = user;
    TSNode idx[SP_DIM];
    unsigned k;
    int a = access_of(c->s, n, idx, &k);
    if (a != c->arr) return true;
    int l = k == c->s->a[a].dims ? (c->any ? enclosing_loop(c->s, idx[c->dim], n) : enclosing_split(c->s, idx[c->dim], n)) : -1;
    if (l >= 0) c->hit[l] = true;
    /* a fragment filled by constant subscripts, `Y[…][2] = v.z;`: kept only where the share is 2 */
    if (l < 0 && c->any && k == c->s->a[a].dims && const_write(c->s, n, idx[c->dim])) return true;
    if (l < 0) {
        if (c->all && ts_node_is_null(c->bad)) c->bad = n;
        c->all = false;
    }
    return true;
}

/* Mark the loops indexing a shrunk array along its dimension as split. */
typedef struct mark_scan {
    sp *s;
    unsigned loop;
    bool hit;
} mark_scan;

static bool mark_visit(TSNode n, void *user)
{
    mark_scan *m = user;
    TSNode idx[SP_DIM];
    unsigned k;
    int a = access_of(m->s, n, idx, &k);
    if (a < 0 || m->s->a[a].split < 0 || k != m->s->a[a].dims) return true;
    TSNode e = register_tile__rg_strip(idx[m->s->a[a].split]);
    if (rt_is(e, "identifier") && rt_text_is(m->s->ctx, e, m->s->lvar[m->loop])) m->hit = true;
    return true;
}

/* Writes inside a split loop: locals of its body, shrunk arrays at V along their dimension, memory
 * through pointers. The first other one into bad. */
typedef struct write_scan {
    sp *s;
    unsigned loop;
    TSNode bad;
} write_scan;

static bool declared_in(const kl_rule_ctx *ctx, TSNode scope, const char *name)
{
    TSNode st[MAXSTMT];
    unsigned n = rt_is(scope, "compound_statement") ? tt_stmts(scope, st, MAXSTMT) : 0;
    for (unsigned i = 0; i < n && i < MAXSTMT; i++) {
        if (rt_is(st[i], "declaration")) {
            TSNode ds[8];
            unsigned nd = rt_declarators(st[i], ds, 8);
            for (unsigned j = 0; j < nd && j < 8; j++)
                if (rt_text_is(ctx, kl_ast_declarator_name(ds[j]), name)) return true;
        }
        if (rt_is(st[i], "compound_statement") && declared_in(ctx, st[i], name)) return true;
    }
    return false;
}

static bool write_visit(TSNode n, void *user)
{
    write_scan *w = user;
    sp *s = w->s;
    TSNode t = {0};
    if (rt_is(n, "assignment_expression")) t = tt_field(n, "left");
    else if (rt_is(n, "update_expression")) t = tt_field(n, "argument");
    if (ts_node_is_null(t) || !ts_node_is_null(w->bad)) return true;
    t = register_tile__rg_strip(t);
    if (rt_is(t, "field_expression")) t = tt_field(t, "argument");
    TSNode loop = s->loops[w->loop];
    /* the loop's own variable in its header */
    if (ts_node_start_byte(n) < ts_node_start_byte(tt_field(loop, "body"))) return true;
    TSNode base = t;
    while (rt_is(base, "subscript_expression")) base = tt_field(base, "argument");
    if (!rt_is(base, "identifier")) {
        w->bad = n;
        return true;
    }
    char name[64];
    tt_copy_text(s->ctx, base, name, sizeof name);
    /* a local of a loop body or block inside this loop */
    for (TSNode p = tt_parent(n); !ts_node_is_null(p) && !ts_node_eq(p, loop); p = tt_parent(p)) {
        if (rt_is(p, "compound_statement") && declared_in(s->ctx, p, name)) return true;
        if (rt_is(p, "for_statement")) {
            char v[64];
            long long trip;
            (void)trip;
            TSNode id = tt_field(tt_field(tt_field(p, "initializer"), "declarator"), "declarator");
            if (rt_is(id, "identifier")) {
                tt_copy_text(s->ctx, id, v, sizeof v);
                if (!strcmp(v, name)) return true;
            }
        }
    }
    if (rt_is(t, "subscript_expression")) {
        TSNode idx[SP_DIM];
        unsigned k;
        int a = access_of(s, t, idx, &k);
        if (a >= 0 && s->a[a].split >= 0 && k == s->a[a].dims) {
            TSNode e = register_tile__rg_strip(idx[s->a[a].split]);
            if (rt_is(e, "identifier") && rt_text_is(s->ctx, e, s->lvar[w->loop])) return true;
        }
        /* memory through a pointer (a parameter or a local pointer): an output store */
        char elem[64];
        if (rt_pointer_param(s->ctx, s->f, name, elem, sizeof elem)) return true;
        if (a < 0) {
            /* a local pointer `T* p = …` (declared with a pointer declarator) */
            char pat[96];
            kl_snprintf(pat, sizeof pat, "* %s =", name);
            if (tt_count(s->ctx->text, ts_node_start_byte(s->f->body), ts_node_end_byte(s->f->body), pat)) return true;
        }
    }
    w->bad = n;
    return true;
}

static const char *const banned[] = {"__syncthreads", "__syncwarp", "__shfl_sync", "__shfl_xor_sync", "__shfl_down_sync",
                                     "__shfl_up_sync", "atomicAdd", "atomicCAS", "atomicMax", "atomicMin", "atomicExch",
                                     "__shared__", "cooperative_groups", "__ballot_sync"};

/* 1: a register tile of this form (why: why it cannot be split now, empty when it can); 0: none. */
static int analyse(const kl_rule_ctx *ctx, const rt_func *f, sp *s, int *acc)
{
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->f = f;
    *acc = -1;
    if (!f->global || ts_node_is_null(f->body)) return 0;
    kl_ast_walk(f->body, arr_visit, s);
    /* the accumulator: a local array of two or more dimensions updated by `+= x * y`, some extent > 1 */
    for (unsigned a = 0; a < s->na && *acc < 0; a++) {
        if (s->a[a].dims < 2) continue;
        long long prod = 1;
        for (unsigned j = 0; j < s->a[a].dims; j++) prod *= s->a[a].ext[j];
        char pat[96];
        kl_snprintf(pat, sizeof pat, "%s [", s->a[a].name);
        uint32_t b0 = ts_node_start_byte(f->body), b1 = ts_node_end_byte(f->body);
        if (prod < 2 || !tt_count(ctx->text, b0, b1, pat) || !tt_uses(ctx->text, b0, b1, "+=")) continue;
        /* updated by += of a product */
        uint32_t ms[64], me[64];
        unsigned nm = tt_find(ctx->text, b0, b1, s->a[a].name, ms, me, 64);
        for (unsigned k = 0; k < nm && k < 64 && *acc < 0; k++) {
            TSNode id = ts_node_descendant_for_byte_range(kl_source_root(ctx->src), ms[k], me[k]);
            TSNode chain = id;
            while (rt_is(tt_parent(chain), "subscript_expression") && ts_node_eq(tt_field(tt_parent(chain), "argument"), chain))
                chain = tt_parent(chain);
            TSNode as = tt_parent(chain);
            if (rt_is(as, "assignment_expression") && ts_node_eq(tt_field(as, "left"), chain) &&
                rt_text_is(ctx, tt_field(as, "operator"), "+=") &&
                tt_uses(ctx->text, ts_node_start_byte(tt_field(as, "right")), ts_node_end_byte(tt_field(as, "right")), "*"))
                *acc = (int)a;
        }
    }
    if (*acc < 0) return 0;
    sp_arr *A = &s->a[*acc];
    unsigned line = ts_node_start_point(A->decl).row + 1;
    uint32_t b0 = ts_node_start_byte(f->body), b1 = ts_node_end_byte(f->body);
    for (unsigned i = 0; i < sizeof banned / sizeof banned[0]; i++)
        if (tt_uses(ctx->text, b0, b1, banned[i])) {
            kl_snprintf(s->why, sizeof s->why,
                        "%s uses %s: its threads share work (remove smem-tile, or the reduction, first), so the register "
                        "tile %s (line %u) cannot be split over blocks",
                        f->name, banned[i], A->name, line);
            return 1;
        }
    if (A->init) {
        kl_snprintf(s->why, sizeof s->why, "%s (line %u) is declared with its elements' initial values: not shrinkable", A->name,
                    line);
        return 1;
    }
    unsigned d = 0;
    while (d < A->dims && A->ext[d] == 1) d++;
    A->split = (int)d;
    s->E = A->ext[d];
    kl_ast_walk(f->body, loop_visit, s);
    /* the loops indexing a shrunk array along its dimension; arrays indexed only by them join */
    for (int round = 0; round < 4; round++) {
        for (unsigned l = 0; l < s->nl; l++) {
            mark_scan m = {s, l, false};
            kl_ast_walk(tt_field(s->loops[l], "body"), mark_visit, &m);
            s->split[l] |= m.hit;
        }
        bool grew = false;
        for (unsigned a = 0; a < s->na; a++) {
            if (s->a[a].split >= 0 || s->a[a].init) continue;
            for (unsigned j = 0; j < s->a[a].dims && s->a[a].split < 0; j++) {
                if (s->a[a].ext[j] != s->E) continue;
                acc_scan c = {.s = s, .arr = (int)a, .dim = j, .all = true, .any = true};
                kl_ast_walk(f->body, acc_check_visit, &c);
                /* at least one access, all by the variable of a loop over the extent, one of them split
                 * already (the array holds what the split loops use: the warp tile's fragments); its
                 * other loops (filling it) are split with it */
                bool joined = false;
                for (unsigned l = 0; l < s->nl; l++) joined |= c.hit[l] && s->split[l];
                char pat[96];
                kl_snprintf(pat, sizeof pat, "%s [", s->a[a].name);
                if (c.all && joined && tt_count(ctx->text, b0, b1, pat) > 0) {
                    s->a[a].split = (int)j, grew = true;
                    for (unsigned l = 0; l < s->nl; l++) s->split[l] |= c.hit[l];
                }
            }
        }
        if (!grew) break;
    }
    acc_scan c = {.s = s, .arr = *acc, .dim = d, .all = true};
    kl_ast_walk(f->body, acc_check_visit, &c);
    if (!c.all) {
        kl_snprintf(s->why, sizeof s->why,
                    "%s at line %u is not indexed along its dimension %u (extent %lld) by a loop `for (V = 0; V < %lld; ++V)` "
                    "around it",
                    A->name, ts_node_start_point(c.bad).row + 1, d + 1, s->E, s->E);
        return 1;
    }
    for (unsigned l = 0; l < s->nl; l++) {
        if (!s->split[l]) continue;
        write_scan w = {.s = s, .loop = l};
        kl_ast_walk(s->loops[l], write_visit, &w);
        if (!ts_node_is_null(w.bad)) {
            kl_snprintf(s->why, sizeof s->why,
                        "line %u writes state that outlives an iteration of the loop over %s at line %u: its iterations are "
                        "not independent",
                        ts_node_start_point(w.bad).row + 1, s->lvar[l], ts_node_start_point(s->loops[l]).row + 1);
            return 1;
        }
    }
    return 1;
}

bool register_tile__sp_detect(const kl_rule_ctx *ctx, const rt_func *f, char *acc, size_t asize, TSNode *decl,
                              char *why, size_t wsize)
{
    sp *s = malloc(sizeof *s);
    if (!s) return false;
    int a;
    bool r = analyse(ctx, f, s, &a) == 1;
    if (r) {
        kl_snprintf(acc, asize, "%s", s->a[a].name);
        *decl = s->a[a].decl;
        kl_snprintf(why, wsize, "%s", s->why);
    }
    free(s);
    return r;
}

/* The grid axis the split uses: y when the kernel's own code does not use it (its blockIdx.y only in
 * earlier splits' shares), else z; 0 when neither is free. */
static char free_axis(const kl_rule_ctx *ctx, const rt_func *f)
{
    uint32_t b0 = ts_node_start_byte(f->body), b1 = ts_node_end_byte(f->body);
    for (char ax = 'y'; ax <= 'z'; ax++) {
        char bi[16], gd[16], ours[32];
        kl_snprintf(bi, sizeof bi, "blockIdx.%c", ax);
        kl_snprintf(gd, sizeof gd, "gridDim.%c", ax);
        kl_snprintf(ours, sizeof ours, "(int)(blockIdx.%c /", ax);
        if (!tt_count(ctx->text, b0, b1, gd) && tt_count(ctx->text, b0, b1, bi) == tt_count(ctx->text, b0, b1, ours))
            return ax;
    }
    return 0;
}

/* An element access of a shrunk array along its split dimension. */
typedef struct sp_elem {
    TSNode chain, index; /* the subscript chain, its index along the split dimension */
    bool folded;         /* taken into one statement by fold_elements */
} sp_elem;

/* The statement `chain = value;` holding an element access, or a null node. */
static TSNode element_store(TSNode chain)
{
    TSNode a = tt_parent(chain), st = tt_parent(a);
    if (!rt_is(a, "assignment_expression") || !ts_node_eq(tt_field(a, "left"), chain) || !rt_is(st, "expression_statement"))
        return (TSNode){{0}, 0, 0};
    return st;
}

/* Stores `Y[…][c] = v_c;` for c = 0 … E-1, consecutive statements of one block, the same but for c
 * and v_c = v_0 with ` + c` at one place (what a float4's removal leaves: `As(…, X)`, `As(…, X + 1)`,
 * …): the first becomes `Y[…][0] = v_0` with ` + kv` at that place, the others go (the elements
 * folded); without this each store would be guarded by `if (kv == c)`, E loads written for one. */
static kl_status fold_elements(const kl_rule_ctx *ctx, sp_elem *el, unsigned ne, long long E, const char *kv, kl_edits *out)
{
    if (E < 2 || E > 16) return KL_OK;
    for (unsigned q = 0; q < ne; q++) {
        long long c0 = -1;
        TSNode s0 = element_store(el[q].chain);
        if (ts_node_is_null(s0) || !rt_const_eval(ctx, (TSNode){{0}, 0, 0}, el[q].index, &c0) || c0 != 0 ||
            !rt_is(register_tile__rg_strip(el[q].index), "number_literal"))
            continue;
        /* the next E-1 statements: the same store at 1 … E-1 */
        unsigned at[16] = {q};
        TSNode st[16] = {s0};
        bool ok = true;
        for (long long c = 1; c < E && ok; c++) {
            st[c] = rt_next_stmt(st[c - 1]);
            ok = false;
            for (unsigned r = 0; r < ne && !ok && !ts_node_is_null(st[c]); r++) {
                long long v = -1;
                ok = !el[r].folded && ts_node_eq(element_store(el[r].chain), st[c]) &&
                     rt_is(register_tile__rg_strip(el[r].index), "number_literal") &&
                     rt_const_eval(ctx, (TSNode){{0}, 0, 0}, el[r].index, &v) && v == c;
                if (ok) at[c] = r;
            }
        }
        if (!ok) continue;
        /* the left sides equal but for the index; v_1 = v_0 with D (` + 1`) inserted at one place */
        char *l0 = rt_text(ctx, el[q].chain), *v0 = rt_text(ctx, tt_field(tt_parent(el[q].chain), "right"));
        char *v1 = rt_text(ctx, tt_field(tt_parent(el[at[1]].chain), "right"));
        char *folded = NULL;
        if (l0 && v0 && v1 && strlen(v1) > strlen(v0)) {
            size_t n0 = strlen(v0), d = strlen(v1) - n0, L = 0;
            while (L < n0 && v0[L] == v1[L]) L++;
            char dtext[32];
            bool shape = d < sizeof dtext && !strcmp(v1 + L + d, v0 + L);
            if (shape) {
                memcpy(dtext, v1 + L, d);
                dtext[d] = '\0';
                char *one = strchr(dtext, '1');
                /* D is `+ 1` (blanks aside): one `+`, one digit 1, nothing else */
                shape = one && !strchr(one + 1, '1') && strchr(dtext, '+') && strspn(dtext, " +1") == d;
                for (long long c = 2; c < E && shape; c++) {
                    size_t wl = n0 + d + 24;
                    char *want = malloc(wl), *vc = rt_text(ctx, tt_field(tt_parent(el[at[c]].chain), "right"));
                    if (want)
                        kl_snprintf(want, wl, "%.*s%.*s%lld%s%s", (int)L, v0, (int)(one - dtext), dtext, c, one + 1, v0 + L);
                    shape = want && vc && !strcmp(vc, want);
                    free(want);
                    free(vc);
                }
                /* every left side is Y[…][c] with the same other indices */
                for (long long c = 1; c < E && shape; c++) {
                    char *lc = rt_text(ctx, el[at[c]].chain);
                    uint32_t ia = ts_node_start_byte(el[at[c]].index) - ts_node_start_byte(el[at[c]].chain),
                             i0 = ts_node_start_byte(el[q].index) - ts_node_start_byte(el[q].chain);
                    shape = lc && ia == i0 && !strncmp(lc, l0, ia) &&
                            !strcmp(lc + ia + (ts_node_end_byte(el[at[c]].index) - ts_node_start_byte(el[at[c]].index)),
                                    l0 + i0 + (ts_node_end_byte(el[q].index) - ts_node_start_byte(el[q].index)));
                    free(lc);
                }
                size_t len = n0 + d + strlen(kv) + 8;
                if (shape && (folded = malloc(len)))
                    kl_snprintf(folded, len, "%.*s%.*s%s%s%s", (int)L, v0, (int)(one - dtext), dtext, kv, one + 1, v0 + L);
            }
        }
        free(l0);
        free(v0);
        free(v1);
        if (!folded) continue;
        TSNode r0 = tt_field(tt_parent(el[q].chain), "right");
        kl_status rc = kl_edits_add(out, ts_node_start_byte(r0), ts_node_end_byte(r0), folded);
        free(folded);
        if (rc == KL_OK) rc = kl_edits_add(out, ts_node_start_byte(el[q].index), ts_node_end_byte(el[q].index), "0");
        /* the others go with what separates each from the one before */
        for (long long c = 1; c < E && rc == KL_OK; c++)
            rc = kl_edits_add(out, ts_node_end_byte(st[c - 1]), ts_node_end_byte(st[c]), "");
        if (rc != KL_OK) return rc;
        for (long long c = 0; c < E; c++) el[at[c]].folded = true;
    }
    return KL_OK;
}

/* One split: the first dimension of extent > 1; its share's name into kv, the dimension into *dim and its
 * extent into *E. */
static kl_status split_once(const kl_rule_ctx *ctx, const rt_func *f, kl_edits *out, char *kv, size_t kvsize, int *dim,
                            long long *E, kl_error *err)
{
    sp *s = malloc(sizeof *s);
    if (!s) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    kl_status st = KL_OK;
    int a;
    char *lt = NULL;
    if (analyse(ctx, f, s, &a) != 1) {
        st = kl_rule_not_applicable(err, "no register tile in %s", f->name);
        goto done;
    }
    if (s->why[0]) {
        st = kl_rule_not_applicable(err, "%s", s->why);
        goto done;
    }
    char ax = free_axis(ctx, f);
    if (!ax) {
        st = kl_rule_not_applicable(err, "%s uses blockIdx.y and blockIdx.z: no grid axis left for the split", f->name);
        goto done;
    }
    /* the launches: E times the blocks along the axis; P, the extent before, the same in all */
    rt_launch ls[16];
    unsigned nl = rt_launches(ctx, f->name, ls, 16);
    if (!nl) {
        st = kl_rule_not_applicable(err, "%s is not launched in the file", f->name);
        goto done;
    }
    long long P = -1;
    unsigned ai = ax == 'y' ? 1 : 2;
    for (unsigned i = 0; i < nl && i < 16; i++) {
        TSNode list = rt_dim3_args(ctx, &ls[i], ls[i].cfg[0]);
        long long p = 1;
        char *txt = NULL;
        kl_strbuf b = KL_STRBUF_INIT;
        if (ts_node_is_null(list)) {
            char *g = rt_text(ctx, ls[i].cfg[0]);
            if (!g) goto oom;
            kl_strbuf_addf(&b, ax == 'y' ? "dim3(%s, %lld)" : "dim3(%s, 1, %lld)", g, s->E);
            free(g);
            txt = b.failed ? NULL : kl_strbuf_detach(&b, NULL);
            kl_strbuf_release(&b);
            if (!txt) goto oom;
            st = kl_edits_add(out, ts_node_start_byte(ls[i].cfg[0]), ts_node_end_byte(ls[i].cfg[0]), txt);
            free(txt);
            if (st != KL_OK) goto done;
        } else {
            TSNode e = rt_dim3_extent(list, ai);
            if (!ts_node_is_null(e)) {
                if (!rt_const_eval(ctx, ls[i].host.def, e, &p)) {
                    st = kl_rule_not_applicable(err, "the grid's %c extent at line %u is not a compile-time constant", ax,
                                                ts_node_start_point(e).row + 1);
                    goto done;
                }
                char *et = rt_text(ctx, e);
                if (!et) goto oom;
                kl_strbuf_addf(&b, "%s * %lld", et, s->E);
                free(et);
                txt = b.failed ? NULL : kl_strbuf_detach(&b, NULL);
                kl_strbuf_release(&b);
                if (!txt) goto oom;
                st = kl_edits_add(out, ts_node_start_byte(e), ts_node_end_byte(e), txt);
                free(txt);
                if (st != KL_OK) goto done;
            } else {
                /* dim3(x) or dim3(x, y): the missing extents before the closing parenthesis */
                uint32_t close = ts_node_end_byte(list) - 1;
                bool has_y = !ts_node_is_null(rt_dim3_extent(list, 1));
                if (ts_node_is_null(rt_dim3_extent(list, 0)) || (ctx->text[close] != ')' && ctx->text[close] != '}')) {
                    st = kl_rule_not_applicable(err, "the grid at line %u has no extent to extend",
                                                ts_node_start_point(ls[i].cfg[0]).row + 1);
                    goto done;
                }
                kl_strbuf_addf(&b, ai == 2 && !has_y ? ", 1, %lld" : ", %lld", s->E);
                txt = b.failed ? NULL : kl_strbuf_detach(&b, NULL);
                kl_strbuf_release(&b);
                if (!txt) goto oom;
                st = kl_edits_add(out, close, close, txt);
                free(txt);
                if (st != KL_OK) goto done;
            }
        }
        if (P >= 0 && p != P) {
            st = kl_rule_not_applicable(err, "the launches of %s have different grid %c extents", f->name, ax);
            goto done;
        }
        P = p;
    }
    /* this block's share, at the top of the body */
    rt_fresh_name(ctx, f->def, "kl_s", kv, kvsize);
    *dim = s->a[a].split;
    *E = s->E;
    {
        TSNode first = tt_child(f->body, 1);
        char ind[64];
        rt_indent_of(ctx, ts_node_start_byte(first), ind, sizeof ind);
        kl_strbuf b = KL_STRBUF_INIT;
        kl_strbuf_addf(&b, "%s// register-tile: this block's share of %s's dimension %d (extent %lld)\n", ind,
                       s->a[a].name, s->a[a].split + 1, s->E);
        if (P > 1) kl_strbuf_addf(&b, "%sconst int %s = (int)(blockIdx.%c / %lld %% %lld);\n", ind, kv, ax, P, s->E);
        else kl_strbuf_addf(&b, "%sconst int %s = (int)(blockIdx.%c / 1 %% %lld);\n", ind, kv, ax, s->E);
        lt = b.failed ? NULL : kl_strbuf_detach(&b, NULL);
        kl_strbuf_release(&b);
        if (!lt) goto oom;
        uint32_t at = rt_line_start(ctx, ts_node_start_byte(first));
        if ((st = kl_edits_add(out, at, at, lt)) != KL_OK) goto done;
    }
    /* the loops: V from the share to the share + 1 */
    for (unsigned l = 0; l < s->nl; l++) {
        if (!s->split[l]) continue;
        TSNode init = tt_field(tt_field(s->loops[l], "initializer"), "declarator");
        TSNode v = tt_field(init, "value"), bound = tt_field(tt_field(s->loops[l], "condition"), "right");
        char nb[96];
        kl_snprintf(nb, sizeof nb, "%s + 1", kv);
        if ((st = kl_edits_add(out, ts_node_start_byte(v), ts_node_end_byte(v), kv)) != KL_OK) goto done;
        if ((st = kl_edits_add(out, ts_node_start_byte(bound), ts_node_end_byte(bound), nb)) != KL_OK) goto done;
        /* a `#pragma unroll` above: nothing to unroll in a loop of one iteration */
        uint32_t ls0 = rt_line_start(ctx, ts_node_start_byte(s->loops[l])),
                 pa = rt_line_start(ctx, tt_pragma_above(ctx, ts_node_start_byte(s->loops[l])));
        if (pa < ls0 && (st = kl_edits_add(out, pa, ls0, "")) != KL_OK) goto done;
    }
    /* the shrunk arrays: extent 1, index 0 */
    for (unsigned k = 0; k < s->na; k++) {
        sp_arr *A = &s->a[k];
        if (A->split < 0) continue;
        TSNode sz = A->sizes[A->split];
        if ((st = kl_edits_add(out, ts_node_start_byte(sz), ts_node_end_byte(sz), "1")) != KL_OK) goto done;
        uint32_t ms[256], me[256];
        unsigned nm = tt_find(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), A->name, ms, me, 256);
        sp_elem el[256];
        unsigned ne = 0;
        for (unsigned q = 0; q < nm && q < 256; q++) {
            TSNode id = ts_node_descendant_for_byte_range(kl_source_root(ctx->src), ms[q], me[q]);
            TSNode chain = id;
            while (rt_is(tt_parent(chain), "subscript_expression") && ts_node_eq(tt_field(tt_parent(chain), "argument"), chain))
                chain = tt_parent(chain);
            TSNode idx[SP_DIM];
            unsigned kk;
            if (access_of(s, chain, idx, &kk) != (int)k || kk != A->dims) continue;
            el[ne++] = (sp_elem){chain, idx[A->split], false};
        }
        /* `Y[…][c] = v_c;` for every c, side by side, v_c = v_0 with ` + c` written at one place: one
         * statement `Y[…][0] = v_0 with + kl_sN there;` */
        if ((st = fold_elements(ctx, el, ne, s->E, kv, out)) != KL_OK) goto done;
        for (unsigned q = 0; q < ne; q++) {
            if (el[q].folded) continue;
            TSNode e = el[q].index;
            if (rt_is(register_tile__rg_strip(e), "number_literal")) {
                /* `Y[…][c] = v;` → `if (kl_sN == c) Y[…][0] = v;` */
                char *ct = rt_text(ctx, e);
                char guard[160];
                kl_snprintf(guard, sizeof guard, "if (%s == %s) ", kv, ct ? ct : "0");
                free(ct);
                uint32_t at = ts_node_start_byte(tt_parent(tt_parent(el[q].chain)));
                if ((st = kl_edits_add(out, at, at, guard)) != KL_OK) goto done;
            }
            if ((st = kl_edits_add(out, ts_node_start_byte(e), ts_node_end_byte(e), "0")) != KL_OK) goto done;
        }
    }
    goto done;
oom:
    st = KL_ERR_NOMEM;
done:
    free(lt);
    free(s);
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

/* ---- the lanes: the store's contiguous dimension given to consecutive threads ------------------------ */

/* Warp-level operations besides those analyse refuses: with the threads renumbered a warp holds
 * other threads than before. */
static const char *const warp_ops[] = {"__any_sync", "__all_sync", "__activemask", "__match_any_sync", "__match_all_sync",
                                       "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync", "__reduce_and_sync",
                                       "__reduce_or_sync", "__reduce_xor_sync", "asm"};

/* Is var a term of the sum that is the index of the subscript n (`P[e + var]`, `dst[var]`), named
 * nowhere else in it? Then it moves the element by one, whatever the other terms are. */
static bool plus_term(const kl_rule_ctx *ctx, TSNode n, const char *var)
{
    TSNode idx = kl_ast_subscript_index(n);
    if (ts_node_is_null(idx) || rt_count_ident(ctx, idx, var) != 1) return false;
    TSNode e = register_tile__rg_strip(idx);
    while (rt_op_is(ctx, e, "+")) {
        TSNode r = register_tile__rg_strip(tt_field(e, "right"));
        if (rt_is(r, "identifier") && rt_text_is(ctx, r, var)) return true;
        e = register_tile__rg_strip(tt_field(e, "left"));
    }
    return rt_is(e, "identifier") && rt_text_is(ctx, e, var);
}

/* The dimension of the register tile that moves the kernel's output stores by one element (`dst[j] =
 * acc[…][j];`, `C[(row + i) * n + col + j] = acc[i][j];`: j's), when the kernel's threads can be
 * renumbered: a 1-D block of compile-time size T (*block), threadIdx read only as threadIdx.x/.y/.z and only
 * in the kernel's own body (no helper or macro outside it reads threadIdx.x), no warp-level operation.
 * -1 otherwise: the splits then keep the threads as they are. */
static int lane_dim(const kl_rule_ctx *ctx, const rt_func *f, long long *block)
{
    sp *s = malloc(sizeof *s);
    int a, dim = -1;
    bool agree = true;
    kl_affine_ctx *ax = NULL;
    if (!s || analyse(ctx, f, s, &a) != 1 || s->why[0]) goto done;
    int64_t bs;
    char why[256];
    if (!rt_block_size(ctx, f->def, f->name, &bs, why, sizeof why)) goto done;
    *block = bs;
    uint32_t b0 = ts_node_start_byte(f->body), b1 = ts_node_end_byte(f->body);
    if (tt_count(ctx->text, b0, b1, "threadIdx") != tt_count(ctx->text, b0, b1, "threadIdx.x") +
                                                        tt_count(ctx->text, b0, b1, "threadIdx.y") +
                                                        tt_count(ctx->text, b0, b1, "threadIdx.z"))
        goto done;
    for (unsigned i = 0; i < sizeof warp_ops / sizeof warp_ops[0]; i++)
        if (tt_uses(ctx->text, b0, b1, warp_ops[i])) goto done;
    /* threadIdx.x elsewhere than in the bodies of the file's kernels: a helper or a macro reads it */
    unsigned outside = tt_count(ctx->text, 0, (uint32_t)ctx->len, "threadIdx.x");
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    if (nf > 64) goto done;
    for (unsigned i = 0; i < nf; i++)
        if (fs[i].global && !ts_node_is_null(fs[i].body))
            outside -= tt_count(ctx->text, ts_node_start_byte(fs[i].body), ts_node_end_byte(fs[i].body), "threadIdx.x");
    if (outside) goto done;
    if (kl_rules_affine(ctx, f->def, &ax, NULL) != KL_OK) goto done;
    /* the stores `P[e] = acc[…];` into memory (not into a local array) */
    unsigned stores = 0;
    for (unsigned i = 0; i < kl_affine_access_count(ax) && agree; i++) {
        const kl_ax_access *w = kl_affine_access(ax, i);
        TSNode as = tt_parent(w->node), idx[SP_DIM];
        unsigned k;
        if (!w->write || w->is_shared || !rt_is(as, "assignment_expression") || !ts_node_eq(tt_field(as, "left"), w->node) ||
            access_of(s, w->node, idx, &k) >= 0 || access_of(s, register_tile__rg_strip(tt_field(as, "right")), idx, &k) != a ||
            k != s->a[a].dims)
            continue;
        int here = -1;
        for (unsigned d = 0; d < k && agree; d++) {
            TSNode v = register_tile__rg_strip(idx[d]);
            int64_t c;
            char var[64];
            if (s->a[a].ext[d] < 2 || !rt_is(v, "identifier")) continue;
            tt_copy_text(ctx, v, var, sizeof var);
            if ((w->flat.ok && kl_affine_coef_int(&w->flat, var, &c) && c == 1) || plus_term(ctx, w->node, var)) {
                agree = here < 0;
                here = (int)d;
            }
        }
        agree &= here >= 0 && (dim < 0 || dim == here);
        dim = here;
        stores++;
    }
    if (!agree || !stores || *block % s->a[a].ext[dim] != 0) dim = -1;
done:
    kl_rules_affine_done(ctx, ax);
    free(s);
    return dim;
}

/* After the splits: the share of the lane dimension (`const int KV = (int)(blockIdx.y / P % E);`) goes
 * to the thread instead, `(int)(threadIdx.x % E)`, and the thread that held those E outputs before is
 * `threadIdx.x / E + share * (T / E)` (named kl_t, standing for threadIdx.x everywhere else in the
 * kernel's body): a bijection of (thread, block share) pairs, so every output is still computed once
 * and by the same arithmetic, but E consecutive threads now store E consecutive outputs where before
 * the split one thread stored them in a loop, and after it E blocks did. */
static kl_status lanes(const kl_rule_ctx *ctx, const rt_func *f, const char *kv, long long E, long long T, kl_edits *out)
{
    uint32_t b0 = ts_node_start_byte(f->body), b1 = ts_node_end_byte(f->body), ms[1], me[1];
    if (!tt_find(ctx->text, b0, b1, kv, ms, me, 1)) return KL_ERR_NOT_APPLICABLE;
    TSNode id = ts_node_descendant_for_byte_range(kl_source_root(ctx->src), ms[0], me[0]);
    TSNode d = tt_parent(id), decl = tt_parent(d), v = tt_field(d, "value");
    if (!rt_is(d, "init_declarator") || !rt_is(decl, "declaration") || ts_node_is_null(v)) return KL_ERR_NOT_APPLICABLE;
    char kt[64], ind[64], *vt = rt_text(ctx, v);
    if (!vt) return KL_ERR_NOMEM;
    rt_fresh_name(ctx, f->def, "kl_t", kt, sizeof kt);
    rt_indent_of(ctx, ts_node_start_byte(decl), ind, sizeof ind);
    kl_strbuf b = KL_STRBUF_INIT;
    kl_strbuf_addf(&b, "(int)(threadIdx.x %% %lld)", E);
    char *share = b.failed ? NULL : kl_strbuf_detach(&b, NULL);
    kl_strbuf_release(&b);
    kl_strbuf_addf(&b,
                   "\n%s// register-tile: the thread that held this thread's outputs before the split (it stands for "
                   "threadIdx.x below): consecutive threads store consecutive outputs\n%sconst unsigned %s = threadIdx.x / %lld + %s * %lld;",
                   ind, ind, kt, E, vt, T / E);
    char *held = b.failed ? NULL : kl_strbuf_detach(&b, NULL);
    kl_strbuf_release(&b);
    free(vt);
    kl_status st = share && held ? KL_OK : KL_ERR_NOMEM;
    /* the comment written above the share by the split: the thread's share now */
    uint32_t ls = rt_line_start(ctx, ts_node_start_byte(decl));
    if (st == KL_OK && ls > b0) {
        uint32_t ps = rt_line_start(ctx, ls - 1);
        const char *c = ctx->text + ps;
        while (*c == ' ' || *c == '\t') c++;
        static const char was[] = "// register-tile: this block's share";
        if (!strncmp(c, was, sizeof was - 1))
            st = kl_edits_add(out, (uint32_t)(c - ctx->text), (uint32_t)(c - ctx->text) + sizeof was - 1,
                              "// register-tile: this thread's share");
    }
    if (st == KL_OK) st = kl_edits_add(out, ts_node_start_byte(v), ts_node_end_byte(v), share);
    if (st == KL_OK) st = kl_edits_add(out, ts_node_end_byte(decl), ts_node_end_byte(decl), held);
    uint32_t xs[512], xe[512];
    unsigned nx = tt_find(ctx->text, b0, b1, "threadIdx.x", xs, xe, 512);
    if (nx > 512) st = KL_ERR_NOT_APPLICABLE;
    for (unsigned i = 0; i < nx && i < 512 && st == KL_OK; i++) st = kl_edits_add(out, xs[i], xe[i], kt);
    free(share);
    free(held);
    return st;
}

/* A step after the splits, on the text they wrote: the lanes (kv set) or the early returns (acc set). */
typedef struct sp_last {
    const char *kernel, *kv, *acc;
    long long E, T;
} sp_last;

static kl_status last_step(const kl_rule_ctx *ctx, char **text, const sp_last *a, kl_error *err)
{
    kl_source *src = NULL;
    kl_error perr = {0};
    kl_status st = KL_OK;
    if (kl_source_parse_text(kl_source_name(ctx->src), *text, strlen(*text), &src, &perr) == KL_OK) {
        kl_rule_ctx c = *ctx;
        c.src = src, c.text = *text, c.len = strlen(*text), c.memo = NULL; /* the memo is of ctx's source */
        rt_func fs[64];
        unsigned nf = rt_functions(&c, fs, 64);
        const rt_func *g = rt_function_named(fs, nf < 64 ? nf : 64, a->kernel);
        kl_edits e = {0};
        char *next = NULL;
        kl_status ls = !g ? KL_ERR_NOT_APPLICABLE
                       : a->kv ? lanes(&c, g, a->kv, a->E, a->T, &e)
                               : register_tile__sp_exit_edits(&c, g, a->acc, &e);
        if (ls == KL_OK) ls = kl_edits_apply(&e, c.text, c.len, &next, err);
        kl_edits_release(&e);
        if (ls == KL_OK) {
            free(*text);
            *text = next;
        } else if (ls == KL_ERR_NOMEM) {
            st = kl_error_set(err, ls, "out of memory");
        }
    }
    kl_source_free(src);
    return st;
}

/* Every dimension, one split after the other (each on the text the previous one wrote), as one
 * edit of the whole file: the register tile is gone (acc[1][1]…, one output per thread). A split
 * refused after the first leaves the splits before it (a sound program with a smaller tile). */
kl_status register_tile__sp_remove_edits(const kl_rule_ctx *ctx, const rt_func *f, kl_edits *out, kl_error *err)
{
    char *text = malloc(ctx->len + 1);
    if (!text) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    memcpy(text, ctx->text, ctx->len);
    text[ctx->len] = 0;
    char kernel[256];
    kl_snprintf(kernel, sizeof kernel, "%s", f->name);
    kl_status st = KL_OK;
    unsigned done = 0;
    long long T = 0, lane_E = 0;
    int lane = lane_dim(ctx, f, &T);
    char lane_kv[64] = "", acc0[64] = "";
    for (unsigned round = 0; round < SP_DIM + 2; round++) {
        kl_source *src = NULL;
        kl_rule_ctx c = *ctx;
        if (round) {
            kl_error perr = {0};
            if (kl_source_parse_text(kl_source_name(ctx->src), text, strlen(text), &src, &perr) != KL_OK) break;
            c.src = src, c.text = text, c.len = strlen(text), c.memo = NULL; /* the memo is of ctx's source */
        }
        rt_func fs[64];
        unsigned nf = rt_functions(&c, fs, 64);
        const rt_func *g = rt_function_named(fs, nf < 64 ? nf : 64, kernel);
        char acc[64], why[400];
        TSNode decl;
        if (!g || !register_tile__sp_detect(&c, g, acc, sizeof acc, &decl, why, sizeof why)) {
            kl_source_free(src);
            break;
        }
        if (!round) kl_snprintf(acc0, sizeof acc0, "%s", acc);
        kl_edits e = {0};
        kl_error serr = {0};
        char kv[64];
        int dim = -1;
        long long E = 0;
        st = split_once(&c, g, &e, kv, sizeof kv, &dim, &E, round ? &serr : err);
        if (st == KL_OK && dim == lane) {
            kl_snprintf(lane_kv, sizeof lane_kv, "%s", kv);
            lane_E = E;
        }
        char *next = NULL;
        if (st == KL_OK) st = kl_edits_apply(&e, c.text, c.len, &next, err);
        kl_edits_release(&e);
        kl_source_free(src);
        if (st != KL_OK) {
            if (round && st == KL_ERR_NOT_APPLICABLE) st = KL_OK; /* keep the splits made */
            break;
        }
        free(text);
        text = next;
        done++;
    }
    /* the lanes: the store's contiguous dimension from the threads (sound for any renumbering: the
     * threads share nothing); then the one output's tests first. Each left out where it cannot be done. */
    if (st == KL_OK && done && lane_kv[0]) {
        sp_last a = {.kernel = kernel, .kv = lane_kv, .E = lane_E, .T = T};
        st = last_step(ctx, &text, &a, err);
    }
    if (st == KL_OK && done) {
        sp_last a = {.kernel = kernel, .acc = acc0};
        st = last_step(ctx, &text, &a, err);
    }
    if (st == KL_OK && done) st = kl_edits_add(out, 0, (uint32_t)ctx->len, text);
    free(text);
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}
