/* row-cache: a row that several passes of a kernel read element by element is read from global
 * memory once, into registers, and the later passes read the registers.
 *
 * The site: sibling loops of one block of a kernel with the same form, `for (T c = START; c < N;
 * c += S)` (S a compile-time constant of at least 32 — the loop is spread over a warp or a block —
 * or blockDim.x when every launch gives one constant block width), and a read `P[f(c)]` (the same subscript, up to the loop variable's name) in at least two
 * of them: a mean pass and a variance pass over a row, a max, a sum of exponentials and a
 * normalised write. The apply keeps ITEMS values per thread (`items`, a parameter): before the
 * first such loop, `P[f(START + k * S)]` for k < ITEMS into `kl_rc[k]`; each loop runs over k
 * instead, reading `kl_rc[k]`, when `START >= 0 && N <= ITEMS * S` (then every c the loop would
 * visit is START + k * S for some k < ITEMS); otherwise the loops run as written. Forward only:
 * the catalog does not remove a register cache (its `remove` says so).
 *
 * Sound when nothing writes P's elements between the reads it merges: P is never written in the
 * kernel, no loop of the group writes global memory before the last one that reads P, and the last
 * one writes only at the subscript it reads (an element-wise update, in place or not). A loop body
 * with break, return, goto, a barrier or a warp collective, or that assigns its variable, is not
 * rewritten. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "syntax/affine.h"
#include "util/util.h"

static const char *const items_values[] = {"32", "16", "64", "8", NULL};
static const kl_rule_param rc_params[] = {{"items", items_values, "32"}};

#define RC_MAXLOOPS 16
#define RC_MAXKEYS 2

/* One loop of a group, and what the analysis read of it. */
typedef struct rc_loop {
    int index;          /* kl_affine_loop index */
    TSNode node;
    char var[64];
    char type[64];      /* the declared type of the variable ("int") */
} rc_loop;

/* A subscript read that the group's loops share: the array's name and the subscript's text with
 * the loop variable written '@' (spaces dropped). */
typedef struct rc_key {
    char array[64];
    char norm[256];
    unsigned loops;     /* bit i: loop i of the group reads it */
} rc_key;

typedef struct rc_group {
    rc_loop loops[RC_MAXLOOPS];
    unsigned n;
    char bound[160];
    long long stride;
    rc_key keys[RC_MAXKEYS];
    unsigned nkeys;
    unsigned first, last;   /* the first and last loop (group index) that read a key */
    char elem[64];          /* the element type of the first key's array */
} rc_group;

/* The text of n with every identifier `var` written '@' and blanks dropped, into buf; false when
 * it does not fit. */
static bool norm_text(const kl_rule_ctx *ctx, TSNode n, const char *var, char *buf, size_t size)
{
    size_t k = 0;
    uint32_t a = ts_node_start_byte(n), b = ts_node_end_byte(n);
    size_t vl = strlen(var);
    for (uint32_t i = a; i < b;) {
        char c = ctx->text[i];
        if (isalpha((unsigned char)c) || c == '_') {
            uint32_t e = i;
            while (e < b && (isalnum((unsigned char)ctx->text[e]) || ctx->text[e] == '_')) e++;
            bool member = i > a && ctx->text[i - 1] == '.';
            if (!member && e - i == vl && !memcmp(ctx->text + i, var, vl)) {
                if (k + 1 >= size) return false;
                buf[k++] = '@';
            } else {
                if (k + (e - i) >= size) return false;
                memcpy(buf + k, ctx->text + i, e - i);
                k += e - i;
            }
            i = e;
            continue;
        }
        if (!isspace((unsigned char)c)) {
            if (k + 1 >= size) return false;
            buf[k++] = c;
        }
        i++;
    }
    buf[k] = '\0';
    return true;
}

/* The width of the blocks every launch of `kernel` gives, when it is one constant (1-D blocks, or
 * dim3(W, 1[, 1])). */
static bool block_width(const kl_rule_ctx *ctx, const char *kernel, long long *w)
{
    rt_launch ls[8];
    unsigned n = rt_launches(ctx, kernel, ls, 8);
    if (n == 0 || n > 8) return false;
    long long seen = -1;
    for (unsigned i = 0; i < n; i++) {
        if (ls[i].ncfg < 2) return false;
        long long v = 0;
        TSNode list = rt_dim3_args(ctx, &ls[i], ls[i].cfg[1]);
        if (!ts_node_is_null(list)) {
            long long y = 1, z = 1;
            TSNode ex = rt_dim3_extent(list, 0), ey = rt_dim3_extent(list, 1), ez = rt_dim3_extent(list, 2);
            if (ts_node_is_null(ex) || !rt_const_eval(ctx, ls[i].host.def, ex, &v)) return false;
            if (!ts_node_is_null(ey) && !rt_const_eval(ctx, ls[i].host.def, ey, &y)) return false;
            if (!ts_node_is_null(ez) && !rt_const_eval(ctx, ls[i].host.def, ez, &z)) return false;
            if (y != 1 || z != 1) return false;
        } else if (!rt_const_eval(ctx, ls[i].host.def, ls[i].cfg[1], &v))
            return false;
        if (v <= 0 || (seen >= 0 && v != seen)) return false;
        seen = v;
    }
    *w = seen;
    return true;
}

/* The loop's stride S: an integer step, or blockDim.x read from the launches — written so, or
 * through a local assigned once (`const int stride = blockDim.x;`). */
static bool loop_stride(const kl_rule_ctx *ctx, const char *kernel, TSNode fn, const kl_ax_loop *L, long long *s)
{
    if (L->step_is_int) {
        *s = L->step_int;
        return L->step_int > 0;
    }
    if (!L->step) return false;
    if (!strcmp(L->step, "blockDim.x")) return block_width(ctx, kernel, s);
    TSNode init = kl_ast_local_init(ctx->src, fn, L->step);
    if (ts_node_is_null(init)) return false;
    if (rt_text_is(ctx, kl_ast_unparen(init), "blockDim.x")) return block_width(ctx, kernel, s);
    return rt_const_eval(ctx, fn, init, s) && *s > 0;
}

typedef struct body_scan {
    const kl_rule_ctx *ctx;
    const char *var;
    const char *why;
} body_scan;

static bool scan_body(TSNode n, void *user)
{
    body_scan *b = user;
    if (b->why) return false;
    const char *t = ts_node_type(n);
    if (!strcmp(t, "lambda_expression")) return false;
    if (!strcmp(t, "break_statement")) b->why = "a break";
    else if (!strcmp(t, "return_statement")) b->why = "a return";
    else if (!strcmp(t, "goto_statement")) b->why = "a goto";
    else if (!strcmp(t, "call_expression")) {
        TSNode f = rt_field(n, "function");
        char name[64] = "";
        if (rt_is(f, "identifier") || rt_is(f, "template_function")) {
            char *s = rt_text(b->ctx, f);
            if (s) kl_snprintf(name, sizeof name, "%s", s);
            free(s);
        }
        if (!strncmp(name, "__syncthreads", 13) || !strncmp(name, "__syncwarp", 10) || !strncmp(name, "__shfl", 6) ||
            !strncmp(name, "__ballot", 8) || !strncmp(name, "__any", 5) || !strncmp(name, "__all", 5) ||
            !strncmp(name, "__reduce", 8))
            b->why = "a barrier or a warp collective";
    } else if (!strcmp(t, "assignment_expression") || !strcmp(t, "update_expression")) {
        TSNode l = rt_field(n, !strcmp(t, "assignment_expression") ? "left" : "argument");
        if (rt_is(l, "identifier") && rt_text_is(b->ctx, l, b->var)) b->why = "an assignment to the loop variable";
    }
    return b->why == NULL;
}

/* Is no identifier of n (other than var and members) assigned in the kernel but by its
 * declaration? The loops' start, bound and subscripts must mean the same in every
 * loop. */
typedef struct inv_scan {
    const kl_rule_ctx *ctx;
    kl_affine_ctx *ax;
    const char *var;
    char bad[64];
} inv_scan;

static bool scan_invariant(TSNode n, void *user)
{
    inv_scan *s = user;
    if (s->bad[0]) return false;
    if (rt_is(n, "field_expression")) {
        scan_invariant(rt_field(n, "argument"), user);
        return false;
    }
    if (!rt_is(n, "identifier")) return true;
    char *nm = rt_text(s->ctx, n);
    /* a local's declaration counts once; a parameter is assigned only by the kernel's code */
    unsigned once = nm && kl_affine_param_index(s->ax, nm) >= 0 ? 0 : 1;
    if (nm && strcmp(nm, s->var) && kl_affine_assign_count(s->ax, nm) > once) kl_snprintf(s->bad, sizeof s->bad, "%s", nm);
    free(nm);
    return false;
}

static bool invariant(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode n, const char *var, char *bad, size_t size)
{
    inv_scan s = {ctx, ax, var, ""};
    if (!ts_node_is_null(n)) kl_ast_walk(n, scan_invariant, &s);
    if (s.bad[0]) kl_snprintf(bad, size, "%s", s.bad);
    return !s.bad[0];
}

/* The loop variable's declared type, when the loop declares it (`for (int c = …`). */
static bool loop_decl_type(const kl_rule_ctx *ctx, TSNode loop, char *type, size_t size)
{
    TSNode init = rt_field(loop, "initializer");
    if (!rt_is(init, "declaration")) return false;
    TSNode ty = rt_field(init, "type");
    if (ts_node_is_null(ty)) return false;
    uint32_t a = ts_node_start_byte(init), b = ts_node_end_byte(ty);
    if (b - a + 1 > size) return false;
    /* qualifiers before the type go with it (`const int`, `unsigned int`) */
    kl_snprintf(type, size, "%.*s", (int)(b - a), ctx->text + a);
    return true;
}

static bool is_scalar_elem(const char *t)
{
    static const char *const ok[] = {"float", "double", "int", "unsigned", "unsigned int", "long", "long long",
                                     "__half", "half", "__nv_bfloat16", "short", "char", "unsigned char",
                                     "int8_t", "uint8_t", "int16_t", "int32_t", "uint32_t", "int64_t", NULL};
    for (unsigned i = 0; ok[i]; i++)
        if (!strcmp(t, ok[i])) return true;
    return false;
}

/* The groups of fn: loops of one form, siblings in one block. why (may be empty) says, for a
 * group of at least two loops of one form that reads a row twice, why it is not a site. */
typedef kl_status (*rc_group_fn)(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax,
                                 rc_group *g, const char *why, void *user);

static unsigned popcount(unsigned x)
{
    unsigned n = 0;
    for (; x; x &= x - 1) n++;
    return n;
}

/* A store in [from, to) that the access analysis does not name (`((float*)p)[i] = …`, `*q = …`, a
 * member through a pointer, an atomic): its line, or 0 when every store there is one of ax's accesses. */
typedef struct store_scan {
    const kl_rule_ctx *ctx;
    kl_affine_ctx *ax;
    uint32_t from, to;
    unsigned line;
} store_scan;

static bool scan_stores(TSNode n, void *user)
{
    store_scan *s = user;
    if (s->line || ts_node_end_byte(n) <= s->from || ts_node_start_byte(n) >= s->to) return !s->line;
    const char *t = ts_node_type(n);
    if (!strcmp(t, "call_expression")) {
        /* an atomic writes memory the access analysis does not list as a store */
        TSNode f = rt_field(n, "function");
        uint32_t a = ts_node_start_byte(f), b = ts_node_end_byte(f);
        if (rt_is(f, "identifier") && b - a > 6 && !memcmp(s->ctx->text + a, "atomic", 6)) s->line = kl_ast_line(n);
        return !s->line;
    }
    TSNode l = !strcmp(t, "assignment_expression") ? rt_field(n, "left")
             : !strcmp(t, "update_expression")     ? rt_field(n, "argument")
                                                   : (TSNode){0};
    /* a member of a local (`acc.m = …`) is a local */
    while (!ts_node_is_null(l) && (rt_is(l, "parenthesized_expression") ||
                                   (rt_is(l, "field_expression") && !ts_node_is_null(rt_field(l, "operator")) &&
                                    !strcmp(ts_node_type(rt_field(l, "operator")), "."))))
        l = rt_is(l, "field_expression") ? rt_field(l, "argument") : ts_node_named_child(l, 0);
    if (!ts_node_is_null(l) && !rt_is(l, "identifier")) {
        bool named = false;
        for (unsigned i = 0; i < kl_affine_access_count(s->ax) && !named; i++) {
            const kl_ax_access *a = kl_affine_access(s->ax, i);
            named = a->write && ts_node_start_byte(a->node) == ts_node_start_byte(l) &&
                    ts_node_end_byte(a->node) == ts_node_end_byte(l);
        }
        if (!named) s->line = kl_ast_line(l);
    }
    return !s->line;
}

/* Fill g's keys from the accesses, check what makes the rewrite sound; NULL when it is, else why
 * not (into buf). */
static const char *analyse(const kl_rule_ctx *ctx, TSNode fn, kl_affine_ctx *ax, rc_group *g,
                           char *buf, size_t size)
{
    /* candidate keys: 1-D reads whose innermost loop is one of the group's */
    rc_key cand[32];
    unsigned ncand = 0;
    for (unsigned i = 0; i < kl_affine_access_count(ax); i++) {
        const kl_ax_access *a = kl_affine_access(ax, i);
        if (a->write || !a->read || a->is_shared || a->ndims != 1 || a->loop < 0 ||
            !rt_is(a->node, "subscript_expression"))
            continue;
        int li = -1;
        for (unsigned k = 0; k < g->n; k++)
            if (g->loops[k].index == a->loop) li = (int)k;
        if (li < 0) continue;
        char norm[256];
        if (!norm_text(ctx, kl_ast_subscript_index(a->node), g->loops[li].var, norm, sizeof norm) || !strchr(norm, '@'))
            continue;
        unsigned k = 0;
        for (; k < ncand; k++)
            if (!strcmp(cand[k].array, a->array) && !strcmp(cand[k].norm, norm)) break;
        if (k == ncand) {
            if (ncand == 32) continue;
            kl_snprintf(cand[k].array, sizeof cand[k].array, "%s", a->array);
            kl_snprintf(cand[k].norm, sizeof cand[k].norm, "%s", norm);
            cand[k].loops = 0;
            ncand++;
        }
        cand[k].loops |= 1u << li;
    }
    g->nkeys = 0;
    for (unsigned k = 0; k < ncand; k++)
        if (popcount(cand[k].loops) >= 2 && g->nkeys < RC_MAXKEYS) g->keys[g->nkeys++] = cand[k];
    if (g->nkeys == 0) {
        kl_snprintf(buf, size, "no element is read in two of its loops");
        return buf;
    }
    /* the arrays are never written, and are pointers to scalars */
    for (unsigned k = 0; k < g->nkeys; k++) {
        for (unsigned i = 0; i < kl_affine_access_count(ax); i++) {
            const kl_ax_access *a = kl_affine_access(ax, i);
            if (a->write && !strcmp(a->array, g->keys[k].array)) {
                kl_snprintf(buf, size, "'%s' is written in the kernel (line %u)", a->array,
                            ts_node_start_point(a->node).row + 1);
                return buf;
            }
        }
        char et[64] = "";
        if (!rt_pointer_elem(ctx, ax, fn, g->keys[k].array, et, sizeof et)) {
            kl_snprintf(buf, size, "the element type of '%s' is not known (not a pointer parameter or local)",
                        g->keys[k].array);
            return buf;
        }
        const char *q = et; /* the pointee without qualifiers */
        if (!is_scalar_elem(q)) {
            kl_snprintf(buf, size, "'%s' holds %s, not a scalar type", g->keys[k].array, q);
            return buf;
        }
        if (k == 0) kl_snprintf(g->elem, sizeof g->elem, "%s", q);
        else if (strcmp(g->elem, q)) {
            g->nkeys = 1; /* one register array type at a time */
            break;
        }
    }
    unsigned mask = 0;
    for (unsigned k = 0; k < g->nkeys; k++) mask |= g->keys[k].loops;
    g->first = g->last = 0;
    for (unsigned i = 0; i < g->n; i++)
        if (mask & (1u << i)) {
            if (!(mask & ((1u << i) - 1))) g->first = i;
            g->last = i;
        }
    /* the bodies of the loops it rewrites */
    for (unsigned i = 0; i < g->n; i++) {
        if (!(mask & (1u << i))) continue;
        body_scan b = {ctx, g->loops[i].var, NULL};
        kl_ast_walk(rt_field(g->loops[i].node, "body"), scan_body, &b);
        if (b.why) {
            kl_snprintf(buf, size, "the loop at line %u has %s", ts_node_start_point(g->loops[i].node).row + 1, b.why);
            return buf;
        }
    }
    /* what the subscripts, the start and the bound read means the same in every loop */
    char bad[64];
    for (unsigned i = 0; i < g->n; i++) {
        if (!(mask & (1u << i))) continue;
        TSNode L = g->loops[i].node;
        TSNode parts[2] = {rt_field(L, "initializer"), rt_field(L, "condition")};
        for (unsigned p = 0; p < 2; p++)
            if (!invariant(ctx, ax, parts[p], g->loops[i].var, bad, sizeof bad)) {
                kl_snprintf(buf, size, "'%s' (read by the loop at line %u) is assigned in the kernel", bad,
                            kl_ast_line(L));
                return buf;
            }
    }
    for (unsigned i = 0; i < kl_affine_access_count(ax); i++) {
        const kl_ax_access *a = kl_affine_access(ax, i);
        int li = -1;
        for (unsigned k = 0; k < g->n; k++)
            if (g->loops[k].index == a->loop) li = (int)k;
        if (li < 0) continue;
        bool keyed = false;
        for (unsigned k = 0; k < g->nkeys; k++) keyed |= !strcmp(a->array, g->keys[k].array);
        if (keyed && rt_is(a->node, "subscript_expression") && !invariant(ctx, ax, kl_ast_subscript_index(a->node), g->loops[li].var, bad, sizeof bad)) {
            kl_snprintf(buf, size, "'%s' (in a subscript of '%s', line %u) is assigned in the kernel", bad, a->array,
                        ts_node_start_point(a->node).row + 1);
            return buf;
        }
    }
    /* global writes: none between the first and the last loop that read the row, but in the last,
     * where only at a subscript the cache holds */
    uint32_t from = ts_node_start_byte(g->loops[g->first].node), to = ts_node_end_byte(g->loops[g->last].node);
    uint32_t last_from = ts_node_start_byte(g->loops[g->last].node);
    store_scan ss = {ctx, ax, from, to, 0};
    kl_ast_walk(rt_field(fn, "body"), scan_stores, &ss);
    if (ss.line) {
        kl_snprintf(buf, size, "a store at line %u, between the reads the cache merges, goes where the analysis "
                               "cannot follow", ss.line);
        return buf;
    }
    for (unsigned i = 0; i < kl_affine_access_count(ax); i++) {
        const kl_ax_access *a = kl_affine_access(ax, i);
        uint32_t at = ts_node_start_byte(a->node);
        if (!a->write || a->is_shared || at < from || at >= to) continue;
        unsigned line = ts_node_start_point(a->node).row + 1;
        if (at < last_from) {
            kl_snprintf(buf, size, "'%s' is written at line %u, between the reads the cache merges", a->array, line);
            return buf;
        }
        int li = -1;
        for (unsigned k = 0; k < g->n; k++)
            if (g->loops[k].index == a->loop) li = (int)k;
        char norm[256];
        bool same = li == (int)g->last && a->ndims == 1 && rt_is(a->node, "subscript_expression") &&
                    norm_text(ctx, kl_ast_subscript_index(a->node), g->loops[li].var, norm, sizeof norm);
        bool held = false;
        for (unsigned k = 0; same && k < g->nkeys; k++) held |= !strcmp(norm, g->keys[k].norm);
        /* another buffer, which cannot alias the row (__restrict__ on one side, or a task whose
         * buffers are distinct), may be written anywhere in the last loop */
        bool apart = li == (int)g->last && (ctx->task || rt_pointer_restrict(ctx, ax, fn, a->array));
        for (unsigned k = 0; apart && k < g->nkeys; k++)
            apart = strcmp(a->array, g->keys[k].array) && (ctx->task || rt_pointer_restrict(ctx, ax, fn, a->array) ||
                                                          rt_pointer_restrict(ctx, ax, fn, g->keys[k].array));
        if (!held && !apart) {
            kl_snprintf(buf, size,
                        "'%s' is written at line %u at a subscript other than the row's, and may alias it (neither is "
                        "__restrict__ and no task says the buffers are distinct)",
                        a->array, line);
            return buf;
        }
    }
    return NULL;
}

/* Every group of fn (sibling for-loops of one form), handed to cb. */
static kl_status each_group(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, rc_group_fn cb,
                            void *user)
{
    unsigned nl = kl_affine_loop_count(ax);
    bool *used = calloc(nl ? nl : 1, sizeof *used);
    if (!used) return KL_ERR_NOMEM;
    kl_status st = KL_OK;
    for (unsigned i = 0; i < nl && st == KL_OK; i++) {
        const kl_ax_loop *L = kl_affine_loop(ax, i);
        if (used[i] || L->kind != KL_LOOP_FOR || !L->var || !L->cmp || strcmp(L->cmp, "<") || !L->start || !L->bound)
            continue;
        long long s = 0;
        /* a loop spread over a warp or a block: ITEMS values per thread cover ITEMS * S elements (a
         * thread's own loop, S = 1, would be cached only for rows of a few dozen) */
        if (!loop_stride(ctx, name, fn, L, &s) || s < 32) continue;
        rc_group g;
        memset(&g, 0, sizeof g);
        g.stride = s;
        char st0[160], bd0[160];
        if (!norm_text(ctx, ts_node_child_by_field_name(rt_field(L->node, "initializer"), "declarator", 10), L->var, st0,
                       sizeof st0))
            continue;
        kl_snprintf(g.bound, sizeof g.bound, "%s", L->bound);
        if (!norm_text(ctx, rt_field(L->node, "condition"), L->var, bd0, sizeof bd0)) continue;
        TSNode parent = ts_node_parent(L->node);
        for (unsigned j = i; j < nl && g.n < RC_MAXLOOPS; j++) {
            const kl_ax_loop *M = kl_affine_loop(ax, j);
            if (used[j] || M->kind != KL_LOOP_FOR || !M->var || !ts_node_eq(ts_node_parent(M->node), parent)) continue;
            long long sm = 0;
            char stj[160], bdj[160], ty[64];
            if (!loop_stride(ctx, name, fn, M, &sm) || sm != s || !M->cmp || strcmp(M->cmp, "<")) continue;
            if (!norm_text(ctx, ts_node_child_by_field_name(rt_field(M->node, "initializer"), "declarator", 10), M->var,
                           stj, sizeof stj) ||
                strcmp(stj, st0))
                continue;
            if (!norm_text(ctx, rt_field(M->node, "condition"), M->var, bdj, sizeof bdj) || strcmp(bdj, bd0)) continue;
            if (!loop_decl_type(ctx, M->node, ty, sizeof ty)) continue;
            rc_loop *r = &g.loops[g.n++];
            r->index = (int)j;
            r->node = M->node;
            kl_snprintf(r->var, sizeof r->var, "%s", M->var);
            kl_snprintf(r->type, sizeof r->type, "%s", ty);
            used[j] = true;
        }
        if (g.n < 2) continue;
        char why[256];
        const char *w = analyse(ctx, fn, ax, &g, why, sizeof why);
        st = cb(ctx, name, fn, ax, &g, w, user);
    }
    free(used);
    return st;
}

static kl_status list_group(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, rc_group *g,
                            const char *why, void *user)
{
    (void)ctx, (void)fn, (void)ax;
    kl_sites *out = user;
    if (why && !strcmp(why, "no element is read in two of its loops")) return KL_OK;
    rc_loop *first = &g->loops[g->first];
    char id[256];
    kl_site_id(id, sizeof id, name, first->node, NULL);
    json_t *arrays = json_array();
    for (unsigned k = 0; k < g->nkeys; k++) json_array_append_new(arrays, json_string(g->keys[k].array));
    unsigned nloops = 0;
    for (unsigned i = 0; i < g->n; i++) {
        bool reads = false;
        for (unsigned k = 0; k < g->nkeys; k++) reads |= (g->keys[k].loops >> i) & 1u;
        nloops += reads;
    }
    json_t *f = json_pack("{s:o, s:I, s:I, s:s, s:s}", "arrays", arrays, "loops", (json_int_t)nloops, "stride",
                          (json_int_t)g->stride, "bound", g->bound, "dtype", g->elem);
    if (!f) return KL_ERR_NOMEM;
    char note[256];
    kl_snprintf(note, sizeof note, "'%s' read in %u loops over the same elements (stride %lld, up to %s): held in registers",
                g->keys[0].array, nloops, g->stride, g->bound);
    if (why) json_object_set_new(f, "why_not", json_string(why));
    return kl_sites_add(out, id, KL_SITE_APPLICABLE, kl_node_span(first->node), name, f, NULL, note);
}

static kl_status list_visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    return each_group(ctx, name, fn, ax, list_group, user);
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    return kl_rules_each_function(ctx, "__global__", list_visit, out, err);
}

/* ---- apply ------------------------------------------------------------------------------------ */

typedef struct rc_apply {
    const kl_site *site;
    long long items;
    kl_edits *out;
    kl_error *err;
    bool done;
} rc_apply;

/* The text of node n with the reads of g's keys inside loop li replaced by `name_k[k]`; lines after
 * the first indented by delta more. */
static char *body_text(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const rc_group *g, unsigned li, TSNode n,
                       char names[][32], const char *k, int delta)
{
    kl_edits ed = {0};
    for (unsigned i = 0; i < kl_affine_access_count(ax); i++) {
        const kl_ax_access *a = kl_affine_access(ax, i);
        if (a->loop != g->loops[li].index || a->write || !rt_is(a->node, "subscript_expression")) continue;
        char norm[256];
        if (!norm_text(ctx, kl_ast_subscript_index(a->node), g->loops[li].var, norm, sizeof norm)) continue;
        for (unsigned q = 0; q < g->nkeys; q++)
            if (!strcmp(a->array, g->keys[q].array) && !strcmp(norm, g->keys[q].norm) &&
                kl_edits_addf(&ed, ts_node_start_byte(a->node), ts_node_end_byte(a->node), "%s[%s]", names[q], k) != KL_OK) {
                kl_edits_release(&ed);
                return NULL;
            }
    }
    char *t = NULL;
    kl_error e = {0};
    kl_status st = kl_edits_apply_range(&ed, ctx->text, ts_node_start_byte(n), ts_node_end_byte(n), &t, &e);
    kl_edits_release(&ed);
    if (st != KL_OK) return NULL;
    char *nl = strchr(t, '\n');
    if (!nl) return t;
    char *rest = rt_reindent(nl + 1, strlen(nl + 1), delta);
    if (!rest) {
        free(t);
        return NULL;
    }
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_add(&sb, t, (size_t)(nl - t) + 1);
    kl_strbuf_adds(&sb, rest);
    free(rest);
    free(t);
    return kl_strbuf_detach(&sb, NULL);
}

/* The text of loop R's read of key q as the loop writes it (`xr[c]`), new string; NULL when none. */
static char *key_read(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const rc_group *g, const rc_loop *R, unsigned q)
{
    for (unsigned x = 0; x < kl_affine_access_count(ax); x++) {
        const kl_ax_access *ac = kl_affine_access(ax, x);
        char norm[256];
        if (ac->loop == R->index && rt_is(ac->node, "subscript_expression") && !strcmp(ac->array, g->keys[q].array) &&
            norm_text(ctx, kl_ast_subscript_index(ac->node), R->var, norm, sizeof norm) && !strcmp(norm, g->keys[q].norm))
            return rt_text(ctx, ac->node);
    }
    return NULL;
}

/* `if (ON) { #pragma unroll for (int K = 0; K < ITEMS; K++) { const T v = (START) + K * S;` at ind. */
static void open_cached(kl_strbuf *sb, const char *ind, const char *on, const char *k, long long items, const rc_loop *R,
                        const char *start, long long S)
{
    kl_strbuf_addf(sb, "%sif (%s) {\n%s    #pragma unroll\n%s    for (int %s = 0; %s < %lld; %s++) {\n", ind, on, ind, ind, k,
                   k, items, k);
    kl_strbuf_addf(sb, "%s        const %s %s = (%s) + %s * %lld;\n", ind, R->type, R->var, start, k, S);
}

static kl_status apply_group(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, rc_group *g,
                             const char *why, void *user)
{
    rc_apply *ra = user;
    if (ra->done || strcmp(name, ra->site->kernel) || g->n == 0) return KL_OK;
    /* the group whose first loop that reads the row is the site's */
    unsigned first = why ? 0 : g->first;
    if (why) {
        bool has = false;
        for (unsigned i = 0; i < g->n; i++) has |= ts_node_start_byte(g->loops[i].node) == ra->site->span.start;
        if (!has) return KL_OK;
        ra->done = true;
        return kl_rule_not_applicable(ra->err, "%s: %s", ra->site->id, why);
    }
    if (ts_node_start_byte(g->loops[first].node) != ra->site->span.start) return KL_OK;
    ra->done = true;
    const kl_ax_loop *L0 = kl_affine_loop(ax, (unsigned)g->loops[first].index);
    char names[RC_MAXKEYS][32], on[32], k[32];
    TSNode scope = rt_field(fn, "body");
    for (unsigned q = 0; q < g->nkeys; q++) {
        char base[32];
        kl_snprintf(base, sizeof base, q ? "kl_rc%u" : "kl_rc", q + 1);
        rt_fresh_name(ctx, scope, base, names[q], sizeof names[q]);
    }
    rt_fresh_name(ctx, scope, "kl_rc_on", on, sizeof on);
    rt_fresh_name(ctx, scope, "kl_k", k, sizeof k);
    long long items = ra->items, S = g->stride;
    kl_status st = KL_OK;
    for (unsigned i = first; i <= g->last && st == KL_OK; i++) {
        bool reads = false;
        for (unsigned q = 0; q < g->nkeys; q++) reads |= (g->keys[q].loops >> i) & 1u;
        if (!reads) continue;
        const rc_loop *R = &g->loops[i];
        const kl_ax_loop *L = kl_affine_loop(ax, (unsigned)R->index);
        uint32_t at = ts_node_start_byte(R->node);
        if (!kl_rules_starts_line(ctx, at))
            return kl_rule_not_applicable(ra->err, "%s: the loop at line %u does not start its own line", ra->site->id,
                                          kl_ast_line(R->node));
        uint32_t a = kl_ast_line_start(ctx->text, L->has_pragma_unroll ? L->pragma_start : at);
        uint32_t b = ts_node_end_byte(R->node);
        char ind[64];
        kl_rules_indent(ctx, at, ind, sizeof ind);
        kl_strbuf sb = KL_STRBUF_INIT;
        if (i == first) {
            kl_strbuf_addf(&sb, "%s// row-cache: ", ind);
            for (unsigned q = 0; q < g->nkeys; q++) {
                char *t = key_read(ctx, ax, g, R, q);
                kl_strbuf_addf(&sb, "%s%s", q ? " and " : "", t ? t : g->keys[q].array);
                free(t);
            }
            kl_strbuf_addf(&sb, " read once into registers (%lld per thread) while %s <= %lld * %lld\n", items, L0->bound,
                           items, S);
            for (unsigned q = 0; q < g->nkeys; q++) kl_strbuf_addf(&sb, "%s%s %s[%lld];\n", ind, g->elem, names[q], items);
            kl_strbuf_addf(&sb, "%sconst bool %s = (long long)(%s) >= 0 && (%s) <= %lld * %lld;\n", ind, on, L0->start, L0->bound,
                           items, S);
            open_cached(&sb, ind, on, k, items, R, L0->start, S);
            kl_strbuf_addf(&sb, "%s        if (%s < (%s)) {\n", ind, R->var, L0->bound);
            for (unsigned q = 0; q < g->nkeys; q++) {
                char *t = key_read(ctx, ax, g, R, q);
                if (t) kl_strbuf_addf(&sb, "%s            %s[%s] = %s;\n", ind, names[q], k, t);
                free(t);
            }
            kl_strbuf_addf(&sb, "%s        }\n%s    }\n%s}\n", ind, ind, ind);
        }
        char *body = body_text(ctx, ax, g, i, rt_field(R->node, "body"), names, k, 8);
        char *orig = rt_reindent(ctx->text + a, b - a, 4);
        if (!body || !orig) {
            free(body), free(orig), kl_strbuf_release(&sb);
            return kl_rule_not_applicable(ra->err, "%s: the loop at line %u is indented with tabs", ra->site->id,
                                          kl_ast_line(R->node));
        }
        open_cached(&sb, ind, on, k, items, R, L->start, S);
        kl_strbuf_addf(&sb, "%s        if (%s < (%s)) %s\n", ind, R->var, L->bound, body);
        kl_strbuf_addf(&sb, "%s    }\n%s} else {\n%s\n%s}", ind, ind, orig, ind);
        free(body), free(orig);
        if (sb.failed) {
            kl_strbuf_release(&sb);
            return kl_error_set(ra->err, KL_ERR_NOMEM, "out of memory");
        }
        char *text = kl_strbuf_detach(&sb, NULL);
        st = kl_edits_add(ra->out, a, b, text);
        free(text);
    }
    return st == KL_OK ? KL_OK : kl_error_set(ra->err, st, "out of memory");
}

static kl_status apply_visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    return each_group(ctx, name, fn, ax, apply_group, user);
}

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    int64_t items = 0;
    if (!kl_rule_param_int(&kl_rule_row_cache, params, "items", &items) || items < 1 || items > 64)
        return kl_error_set(err, KL_ERR_INVALID, "row-cache: items is one of 8, 16, 32, 64");
    rc_apply ra = {site, items, out, err, false};
    kl_status st = kl_rules_each_function(ctx, "__global__", apply_visit, &ra, err);
    if (st != KL_OK) return st;
    if (!ra.done) return kl_rule_not_applicable(err, "no loops that read one row twice at %s", site->id);
    return KL_OK;
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    (void)ctx, (void)out;
    return kl_rule_not_applicable(err, "row-cache at %s: the catalog adds a register cache of a row, it does not "
                                       "take one out",
                                  site->id);
}

const kl_rule kl_rule_row_cache = {
    "row-cache", "read a row that several passes read once, into registers (a few values per thread)",
    rc_params, 1, find, remove_site, apply,
};
