/*
 * privatize — global atomics into a small table (`atomicAdd(&hist[v], 1)`) ↔ a per-block
 * `__shared__` copy, zero-initialised, updated with shared-memory atomics and merged at the
 * end with one global atomic per non-zero entry.
 *
 * Applicable: a pointer parameter P of a kernel whose every use is the address of an
 * atomicAdd (`&P[i]` or `P + i`), with a table size proven at compile time: the task gives
 * P a constant shape, every index is a byte (`x[i]` of a uint8_t/unsigned char array) or
 * masked (`v & (C-1)`). Early returns in the kernel are kept working by running the
 * original body in a local lambda so that every thread reaches the merge.
 * Present: a 1-D `__shared__` array S updated by atomics and merged into a global
 * pointer parameter G by `atomicAdd(&G[i], S[i])` in a statement of its own.
 */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules_tree.h"
#include "rewrite/rules/tile_text.h"

#define NAME "privatize"
#define SMEM_LIMIT (48 * 1024)

static const char *const atomic_names[] = {"atomicAdd", "atomicAdd_block", NULL};

static bool is_atomic_add(const kl_rule_ctx *ctx, TSNode call)
{
    if (!rt_is(call, "call_expression")) return false;
    TSNode fn = rt_field(call, "function");
    for (int i = 0; atomic_names[i]; i++)
        if (rt_text_is(ctx, fn, atomic_names[i])) return true;
    return false;
}

/* The table pointer and index of an atomic's address: `&P[i]` or `P + i` / `i + P`. */
static bool atomic_target(const kl_rule_ctx *ctx, TSNode call, TSNode *ptr, TSNode *index)
{
    TSNode args = rt_field(call, "arguments");
    if (ts_node_named_child_count(args) != 2) return false;
    TSNode addr = ts_node_named_child(args, 0);
    while (rt_is(addr, "parenthesized_expression")) addr = ts_node_named_child(addr, 0);
    if (rt_is(addr, "pointer_expression") && rt_text_is(ctx, rt_field(addr, "operator"), "&")) {
        TSNode s = rt_field(addr, "argument");
        if (!rt_is(s, "subscript_expression")) return false;
        TSNode base = rt_field(s, "argument");
        TSNode idx = rt_field(s, "indices");
        if (!rt_is(base, "identifier") || ts_node_is_null(idx) || ts_node_named_child_count(idx) != 1) return false;
        *ptr = base;
        *index = ts_node_named_child(idx, 0);
        return true;
    }
    if (rt_is(addr, "binary_expression") && rt_text_is(ctx, rt_field(addr, "operator"), "+")) {
        TSNode l = rt_field(addr, "left"), r = rt_field(addr, "right");
        if (rt_is(l, "identifier")) {
            *ptr = l;
            *index = r;
            return true;
        }
        if (rt_is(r, "identifier")) {
            *ptr = r;
            *index = l;
            return true;
        }
    }
    return false;
}

typedef struct scan {
    const kl_rule_ctx *ctx;
    const char *name;        /* the table */
    unsigned atomics;        /* uses that are atomic targets */
    unsigned uses;           /* all identifier uses */
    TSNode atomic_nodes[64];
    TSNode index_nodes[64];
    TSNode other_use;        /* first use that is not an atomic target */
    unsigned returns;
} scan;

static bool scan_visit(TSNode n, void *user)
{
    scan *s = user;
    if (rt_is(n, "return_statement")) s->returns++;
    if (rt_is(n, "lambda_expression")) return true;
    if (rt_is(n, "call_expression") && is_atomic_add(s->ctx, n)) {
        TSNode p, i;
        if (atomic_target(s->ctx, n, &p, &i) && rt_text_is(s->ctx, p, s->name)) {
            if (s->atomics < 64) {
                s->atomic_nodes[s->atomics] = p;
                s->index_nodes[s->atomics] = i;
            }
            s->atomics++;
            s->uses++;
            /* the index and value may still use the name: count those as other uses */
            TSNode args = rt_field(n, "arguments");
            s->uses += rt_count_ident(s->ctx, i, s->name) + rt_count_ident(s->ctx, ts_node_named_child(args, 1), s->name);
            TSNode val = ts_node_named_child(args, 1);
            if (ts_node_is_null(s->other_use) && rt_count_ident(s->ctx, i, s->name)) s->other_use = i;
            if (ts_node_is_null(s->other_use) && rt_count_ident(s->ctx, val, s->name)) s->other_use = val;
            return false;
        }
    }
    if (rt_is(n, "identifier") && rt_text_is(s->ctx, n, s->name)) {
        s->uses++;
        if (ts_node_is_null(s->other_use)) s->other_use = n;
    }
    return true;
}

typedef struct local_once {
    const kl_rule_ctx *ctx;
    const char *nm;
    TSNode def;
    unsigned defs, assigns;
} local_once;

static bool local_once_visit(TSNode n, void *user)
{
    local_once *lo = user;
    if (rt_is(n, "init_declarator")) {
        TSNode d = rt_field(n, "declarator");
        if (rt_is(d, "identifier") && rt_text_is(lo->ctx, d, lo->nm)) {
            lo->defs++;
            lo->def = rt_field(n, "value");
        }
    } else if (rt_is(n, "assignment_expression")) {
        TSNode l = rt_field(n, "left");
        if (rt_is(l, "identifier") && rt_text_is(lo->ctx, l, lo->nm)) lo->assigns++;
    } else if (rt_is(n, "update_expression")) {
        TSNode l = rt_field(n, "argument");
        if (rt_is(l, "identifier") && rt_text_is(lo->ctx, l, lo->nm)) lo->assigns++;
    }
    return true;
}

typedef struct uses_yz {
    const kl_rule_ctx *ctx;
    bool yes;
} uses_yz;

static bool uses_yz_visit(TSNode n, void *user)
{
    uses_yz *u = user;
    if (rt_is_builtin(u->ctx, n, "threadIdx", 'y') || rt_is_builtin(u->ctx, n, "threadIdx", 'z')) u->yes = true;
    return !u->yes;
}

/* Is an index provably in [0, bins)? Sets *bins when it proves a bound on its own. */
static bool index_bound(const kl_rule_ctx *ctx, const rt_func *f, TSNode idx, long long *bins)
{
    while (rt_is(idx, "parenthesized_expression") || rt_is(idx, "cast_expression"))
        idx = rt_is(idx, "cast_expression") ? rt_field(idx, "value") : ts_node_named_child(idx, 0);
    if (rt_is(idx, "subscript_expression")) {
        TSNode base = rt_field(idx, "argument");
        char elem[64];
        if (rt_is(base, "identifier")) {
            char *nm = rt_text(ctx, base);
            bool ptr = nm && rt_pointer_param(ctx, f, nm, elem, sizeof elem);
            free(nm);
            if (ptr && (strstr(elem, "uint8_t") || strstr(elem, "unsigned char"))) {
                *bins = 256;
                return true;
            }
        }
        return false;
    }
    if (rt_is(idx, "binary_expression") && rt_text_is(ctx, rt_field(idx, "operator"), "&")) {
        long long m;
        if (rt_const_eval(ctx, f->body, rt_field(idx, "right"), &m) ||
            rt_const_eval(ctx, f->body, rt_field(idx, "left"), &m)) {
            if (m >= 0 && m < (1 << 20)) {
                *bins = m + 1;
                return true;
            }
        }
    }
    if (rt_is(idx, "identifier")) {
        /* a local defined once, never reassigned, from a bounded expression */
        char *nm = rt_text(ctx, idx);
        if (!nm) return false;
        local_once lo = {.ctx = ctx, .nm = nm};
        kl_ast_walk(f->body, local_once_visit, &lo);
        free(nm);
        if (lo.defs == 1 && !lo.assigns && !ts_node_is_null(lo.def)) return index_bound(ctx, f, lo.def, bins);
    }
    return false;
}

/* The table size from the task: the argument named `name` with a constant shape. */
static bool task_bins(const kl_rule_ctx *ctx, const char *name, long long *bins)
{
    if (!ctx->task) return false;
    for (unsigned i = 0; i < ctx->task->nargs; i++) {
        const kl_arg *a = &ctx->task->args[i];
        if (!a->name || strcmp(a->name, name) || !a->shape) continue;
        char *end = NULL;
        long long v = strtoll(a->shape, &end, 10);
        while (end && *end == ' ') end++;
        if (end && end != a->shape && !*end && v > 0) {
            *bins = v;
            return true;
        }
    }
    return false;
}

typedef struct table {
    char name[64];
    char elem[64];
    long long bins;          /* 0: not proven */
    const char *bins_from;   /* "task", "u8 index", "mask" */
    unsigned atomics, returns;
    TSNode first_atomic;
    char why_not[256];       /* non-empty: apply is not applicable */
} table;

static void analyse_table(const kl_rule_ctx *ctx, const rt_func *f, const char *name, table *t)
{
    memset(t, 0, sizeof *t);
    kl_snprintf(t->name, sizeof t->name, "%s", name);
    rt_pointer_param(ctx, f, name, t->elem, sizeof t->elem);
    scan s = {.ctx = ctx, .name = name};
    kl_ast_walk(f->body, scan_visit, &s);
    t->atomics = s.atomics;
    t->returns = s.returns;
    if (s.atomics) t->first_atomic = s.atomic_nodes[0];
    if (!ts_node_is_null(s.other_use)) {
        kl_span sp = kl_node_span(s.other_use);
        kl_snprintf(t->why_not, sizeof t->why_not,
                    "%s:%u:%u: '%s' is used other than as the address of an atomicAdd; a private copy would "
                    "not see that use",
                    kl_source_name(ctx->src), sp.line, sp.column, name);
        return;
    }
    if (s.atomics > 64) {
        kl_snprintf(t->why_not, sizeof t->why_not, "%s: more than 64 atomics into '%s'", f->name, name);
        return;
    }
    long long bins = 0;
    if (task_bins(ctx, name, &bins)) t->bins_from = "task";
    else {
        for (unsigned i = 0; i < s.atomics; i++) {
            long long b = 0;
            if (!index_bound(ctx, f, s.index_nodes[i], &b)) {
                kl_span sp = kl_node_span(s.index_nodes[i]);
                kl_snprintf(t->why_not, sizeof t->why_not,
                            "%s:%u:%u: cannot bound the index into '%s' by a compile-time constant (expected a "
                            "byte, a mask `v & (C-1)`, or a task whose '%s' has a constant shape)",
                            kl_source_name(ctx->src), sp.line, sp.column, name, name);
                return;
            }
            if (b > bins) bins = b;
        }
        t->bins_from = "index";
    }
    t->bins = bins;
    unsigned esz = rt_type_size(t->elem);
    if (!esz) {
        kl_snprintf(t->why_not, sizeof t->why_not, "%s: the element type '%s' of '%s' is not a known scalar",
                    f->name, t->elem, name);
        return;
    }
    if (bins * (long long)esz > SMEM_LIMIT) {
        kl_snprintf(t->why_not, sizeof t->why_not,
                    "%s: a private copy of '%s' needs %lld bytes of shared memory, more than %d", f->name, name,
                    bins * (long long)esz, SMEM_LIMIT);
        return;
    }
}

/* ---- present sites ---------------------------------------------------------------------------- */

typedef struct present {
    TSNode decl;            /* __shared__ T S[N]; */
    char shared[64];
    char global[64];
    TSNode init, init_sync; /* zero-fill statement and the barrier after it */
    TSNode merge, merge_sync;
    TSNode lambda_stmt;     /* `[&]() { ... }();` wrapping the body, or null */
    TSNode block;           /* the compound statement holding decl/init/merge */
} present;

/* Does statement st only zero-fill S (`S[..] = 0` inside a for/if, or on its own)? */
typedef struct zf {
    const kl_rule_ctx *ctx;
    const char *s;
    unsigned zero_assigns, other;
} zf;

static bool zf_visit(TSNode n, void *user)
{
    zf *z = user;
    if (rt_is(n, "assignment_expression")) {
        TSNode l = rt_field(n, "left"), r = rt_field(n, "right");
        if (rt_is(l, "subscript_expression") && rt_text_is(z->ctx, rt_field(l, "argument"), z->s)) {
            long long v;
            if (rt_text_is(z->ctx, rt_field(n, "operator"), "=") && rt_const_eval(z->ctx, (TSNode){0}, r, &v) && !v)
                z->zero_assigns++;
            else z->other++;
            return false;
        }
    }
    if (rt_is(n, "call_expression")) z->other++;
    return true;
}

/* Is statement st a merge `atomicAdd(&G[i], S[i])` (possibly in a for/if)? Sets global. */
typedef struct mg {
    const kl_rule_ctx *ctx;
    const rt_func *f;
    const char *s;
    char global[64];
    unsigned merges, other_calls;
} mg;

static bool mg_visit(TSNode n, void *user)
{
    mg *m = user;
    if (rt_is(n, "call_expression")) {
        TSNode p, i;
        if (is_atomic_add(m->ctx, n) && atomic_target(m->ctx, n, &p, &i)) {
            TSNode val = ts_node_named_child(rt_field(n, "arguments"), 1);
            char *g = rt_text(m->ctx, p);
            /* the value is S[i] or a local read from it: the statement as a whole reads S */
            (void)val;
            if (g && rt_pointer_param(m->ctx, m->f, g, NULL, 0) && strcmp(g, m->s)) {
                kl_snprintf(m->global, sizeof m->global, "%s", g);
                m->merges++;
            } else m->other_calls++;
            free(g);
            return false;
        }
        m->other_calls++;
    }
    return true;
}

static bool find_present(const kl_rule_ctx *ctx, const rt_func *f, TSNode decl, present *p)
{
    memset(p, 0, sizeof *p);
    TSNode d = rt_field(decl, "declarator");
    if (!rt_is(d, "array_declarator") || rt_is(rt_field(d, "declarator"), "array_declarator")) return false;
    TSNode id = kl_ast_declarator_name(d);
    if (ts_node_is_null(id)) return false;
    uint32_t a = ts_node_start_byte(id), b = ts_node_end_byte(id);
    if (b - a >= sizeof p->shared) return false;
    memcpy(p->shared, ctx->text + a, b - a);
    p->shared[b - a] = '\0';
    p->decl = decl;
    p->block = ts_node_parent(decl);
    uint32_t c = ts_node_named_child_count(p->block);
    for (uint32_t i = 0; i < c; i++) {
        TSNode st = ts_node_named_child(p->block, i);
        if (ts_node_eq(st, decl) || rt_is(st, "comment")) continue;
        if (!rt_count_ident(ctx, st, p->shared)) continue;
        if (ts_node_is_null(p->init)) {
            zf z = {.ctx = ctx, .s = p->shared};
            kl_ast_walk(st, zf_visit, &z);
            if (z.zero_assigns && !z.other) {
                p->init = st;
                TSNode nx = rt_next_stmt(st);
                if (rt_is_syncthreads(ctx, nx)) p->init_sync = nx;
                continue;
            }
        }
        mg m = {.ctx = ctx, .f = f, .s = p->shared};
        kl_ast_walk(st, mg_visit, &m);
        if (m.merges && !m.other_calls && (rt_is(st, "for_statement") || rt_is(st, "if_statement") ||
                                           rt_is(st, "expression_statement"))) {
            p->merge = st;
            kl_snprintf(p->global, sizeof p->global, "%s", m.global);
            TSNode pv = rt_prev_stmt(st);
            if (rt_is_syncthreads(ctx, pv)) p->merge_sync = pv;
        }
    }
    if (ts_node_is_null(p->init) || ts_node_is_null(p->merge) || ts_node_is_null(p->init_sync) ||
        ts_node_is_null(p->merge_sync))
        return false;
    /* the body between, when apply wrapped it in a lambda */
    TSNode between = rt_next_stmt(p->init_sync);
    if (rt_is(between, "expression_statement") && ts_node_eq(rt_next_stmt(between), p->merge_sync)) {
        TSNode call = ts_node_named_child(between, 0);
        if (rt_is(call, "call_expression") && rt_is(rt_field(call, "function"), "lambda_expression") &&
            ts_node_named_child_count(rt_field(call, "arguments")) == 0)
            p->lambda_stmt = between;
    }
    return true;
}

/* ---- interleaved replicas: `__shared__ T S[N * R]`, a lane's copy through an alias
 * `T* A = S + threadIdx.x % R`, atomics `&A[e * R]` (here or in a __device__ helper the
 * alias is passed to), merged by summing the R copies of each entry ---------------------------- */

typedef struct replicas {
    TSNode alias;            /* the declaration `T* A = S + lane;` */
    char name[64];           /* A */
    long long copies;        /* R */
} replicas;

/* Is e the lane expression `threadIdx.x % R` / `threadIdx.x & (R-1)`? Sets *r. */
static bool lane_expr(const kl_rule_ctx *ctx, TSNode scope, TSNode e, long long *r)
{
    while (rt_is(e, "parenthesized_expression")) e = ts_node_named_child(e, 0);
    if (!rt_is(e, "binary_expression")) return false;
    TSNode l = rt_field(e, "left"), rt = rt_field(e, "right");
    while (rt_is(l, "parenthesized_expression")) l = ts_node_named_child(l, 0);
    if (!rt_is_builtin(ctx, l, "threadIdx", 'x')) return false;
    long long v;
    if (!rt_const_eval(ctx, scope, rt, &v)) return false;
    if (rt_text_is(ctx, rt_field(e, "operator"), "%") && v >= 2) {
        *r = v;
        return true;
    }
    if (rt_text_is(ctx, rt_field(e, "operator"), "&") && v >= 1 && ((v + 1) & v) == 0) {
        *r = v + 1;
        return true;
    }
    return false;
}

/* The alias of shared table s in the kernel body: `T* A = s + lane;` or `T* A = &s[lane];`. */
static bool find_replicas(const kl_rule_ctx *ctx, const rt_func *f, const present *p, replicas *rep)
{
    memset(rep, 0, sizeof *rep);
    uint32_t c = ts_node_named_child_count(p->block);
    for (uint32_t i = 0; i < c; i++) {
        TSNode st = ts_node_named_child(p->block, i);
        if (!rt_is(st, "declaration") || ts_node_named_child_count(st) < 2) continue;
        TSNode d = rt_field(st, "declarator");
        if (!rt_is(d, "init_declarator") || !rt_is(rt_field(d, "declarator"), "pointer_declarator")) continue;
        TSNode v = rt_field(d, "value");
        while (rt_is(v, "parenthesized_expression")) v = ts_node_named_child(v, 0);
        TSNode lane = {0};
        if (rt_is(v, "binary_expression") && rt_text_is(ctx, rt_field(v, "operator"), "+")) {
            if (rt_text_is(ctx, rt_field(v, "left"), p->shared)) lane = rt_field(v, "right");
            else if (rt_text_is(ctx, rt_field(v, "right"), p->shared)) lane = rt_field(v, "left");
        } else if (rt_is(v, "pointer_expression") && rt_text_is(ctx, rt_field(v, "operator"), "&")) {
            TSNode s = rt_field(v, "argument");
            TSNode idx = rt_field(s, "indices");
            if (rt_is(s, "subscript_expression") && rt_text_is(ctx, rt_field(s, "argument"), p->shared) &&
                !ts_node_is_null(idx) && ts_node_named_child_count(idx) == 1)
                lane = ts_node_named_child(idx, 0);
        }
        if (ts_node_is_null(lane) || !lane_expr(ctx, f->body, lane, &rep->copies)) continue;
        TSNode id = kl_ast_declarator_name(d);
        uint32_t a = ts_node_start_byte(id), b = ts_node_end_byte(id);
        if (ts_node_is_null(id) || b - a >= sizeof rep->name) continue;
        memcpy(rep->name, ctx->text + a, b - a);
        rep->name[b - a] = '\0';
        rep->alias = st;
        return true;
    }
    return false;
}

/* Is idx `e * R` / `R * e`? *e receives e. */
static bool times_copies(const kl_rule_ctx *ctx, TSNode scope, TSNode idx, long long r, TSNode *e)
{
    while (rt_is(idx, "parenthesized_expression")) idx = ts_node_named_child(idx, 0);
    if (!rt_is(idx, "binary_expression") || !rt_text_is(ctx, rt_field(idx, "operator"), "*")) return false;
    long long v;
    if (rt_const_eval(ctx, scope, rt_field(idx, "right"), &v) && v == r) {
        *e = rt_field(idx, "left");
        return true;
    }
    if (rt_const_eval(ctx, scope, rt_field(idx, "left"), &v) && v == r) {
        *e = rt_field(idx, "right");
        return true;
    }
    return false;
}

typedef struct rep_walk {
    const kl_rule_ctx *ctx;
    const rt_func *fs;
    unsigned nf;
    TSNode scope;            /* for constants */
    const char *ptr;         /* the name whose uses are checked (the alias or a helper's parameter) */
    const char *to;          /* its replacement in an atomic target (NULL: keep the name) */
    long long copies;
    TSNode skip;             /* the alias declaration */
    kl_edits *out;
    kl_status st;
    TSNode bad;              /* first use that is neither an atomic target `&ptr[e * R]` nor a helper argument */
    const rt_func *helpers[8];
    unsigned helper_arg[8], nhelpers, calls;
} rep_walk;

static bool rep_visit(TSNode n, void *user)
{
    rep_walk *w = user;
    if (!ts_node_is_null(w->bad) || w->st != KL_OK) return false;
    if (!ts_node_is_null(w->skip) && ts_node_eq(n, w->skip)) return false;
    if (rt_is(n, "call_expression") && is_atomic_add(w->ctx, n)) {
        TSNode args = rt_field(n, "arguments");
        TSNode addr = ts_node_named_child(args, 0);
        while (rt_is(addr, "parenthesized_expression")) addr = ts_node_named_child(addr, 0);
        TSNode p, i, e;
        if (atomic_target(w->ctx, n, &p, &i) && rt_text_is(w->ctx, p, w->ptr) && rt_is(addr, "pointer_expression")) {
            if (!times_copies(w->ctx, w->scope, i, w->copies, &e)) {
                w->bad = i;
                return false;
            }
            char *et = rt_text(w->ctx, e);
            if (!et) {
                w->st = KL_ERR_NOMEM;
                return false;
            }
            w->st = kl_edits_addf(w->out, ts_node_start_byte(addr), ts_node_end_byte(addr), "&%s[%s]",
                                  w->to ? w->to : w->ptr, et);
            free(et);
            if (rt_count_ident(w->ctx, e, w->ptr) || rt_count_ident(w->ctx, ts_node_named_child(args, 1), w->ptr))
                w->bad = e;
            return false;
        }
    }
    if (rt_is(n, "call_expression") && w->to) {
        /* the alias passed whole to a __device__ helper */
        TSNode fn = rt_field(n, "function");
        TSNode args = rt_field(n, "arguments");
        char *nm = rt_is(fn, "identifier") ? rt_text(w->ctx, fn) : NULL;
        const rt_func *h = nm ? rt_function_named(w->fs, w->nf, nm) : NULL;
        free(nm);
        uint32_t na = ts_node_named_child_count(args);
        for (uint32_t k = 0; h && h->device && !h->global && k < na; k++) {
            TSNode a = ts_node_named_child(args, k);
            if (!rt_text_is(w->ctx, a, w->ptr)) continue;
            unsigned j = 0;
            while (j < w->nhelpers && !(w->helpers[j] == h && w->helper_arg[j] == k)) j++;
            if (j == w->nhelpers && j < 8) {
                w->helpers[j] = h;
                w->helper_arg[j] = k;
                w->nhelpers++;
            }
            w->calls++;
            w->st = kl_edits_add(w->out, ts_node_start_byte(a), ts_node_end_byte(a), w->to);
            /* the other arguments must not use the alias */
            for (uint32_t o = 0; o < na; o++)
                if (o != k) kl_ast_walk(ts_node_named_child(args, o), rep_visit, w);
            return false;
        }
    }
    if (rt_is(n, "identifier") && rt_text_is(w->ctx, n, w->ptr)) w->bad = n;
    return true;
}

/* The merge sums the R copies: every read of s is `s[b * R + x]`, inside a loop of R steps. */
typedef struct merge_check {
    const kl_rule_ctx *ctx;
    TSNode scope;
    const char *s;
    long long copies;
    unsigned reads, good;
} merge_check;

static bool merge_visit(TSNode n, void *user)
{
    merge_check *m = user;
    if (!rt_is(n, "subscript_expression") || !rt_text_is(m->ctx, rt_field(n, "argument"), m->s)) return true;
    m->reads++;
    TSNode idx = rt_field(n, "indices");
    if (ts_node_is_null(idx) || ts_node_named_child_count(idx) != 1) return false;
    TSNode e = ts_node_named_child(idx, 0), base;
    if (!rt_is(e, "binary_expression") || !rt_text_is(m->ctx, rt_field(e, "operator"), "+")) return false;
    if (!times_copies(m->ctx, m->scope, rt_field(e, "left"), m->copies, &base) &&
        !times_copies(m->ctx, m->scope, rt_field(e, "right"), m->copies, &base))
        return false;
    /* inside a `for (... l = 0; l < R; l++)` */
    for (TSNode p = ts_node_parent(n); !ts_node_is_null(p); p = ts_node_parent(p)) {
        if (!rt_is(p, "for_statement")) continue;
        TSNode cond = rt_field(p, "condition");
        long long v;
        if (rt_is(cond, "binary_expression") && rt_text_is(m->ctx, rt_field(cond, "operator"), "<") &&
            rt_const_eval(m->ctx, m->scope, rt_field(cond, "right"), &v) && v == m->copies) {
            m->good++;
            break;
        }
    }
    return false;
}

static const char *norm_type(const char *t)
{
    while (!strncmp(t, "const ", 6)) t += 6;
    if (!strcmp(t, "int32_t")) return "int";
    if (!strcmp(t, "uint32_t") || !strcmp(t, "unsigned")) return "unsigned int";
    if (!strcmp(t, "unsigned long long int")) return "unsigned long long";
    return t;
}

typedef struct count_other {
    const kl_rule_ctx *ctx;
    const char *s;
    TSNode skip[4];
    TSNode first;
} count_other;

static bool count_other_visit(TSNode n, void *user)
{
    count_other *c = user;
    for (int i = 0; i < 4; i++)
        if (!ts_node_is_null(c->skip[i]) && ts_node_eq(n, c->skip[i])) return false;
    if (rt_is(n, "identifier") && rt_text_is(c->ctx, n, c->s) && ts_node_is_null(c->first)) c->first = n;
    return ts_node_is_null(c->first);
}

/* Remove R interleaved replicas: atomics go to the global table directly, the alias, the
 * table, its fill and the merge go. */
static kl_status remove_replicas(const kl_rule_ctx *ctx, const rt_func *fs, unsigned nf, const rt_func *f,
                                 const present *p, const replicas *rep, kl_edits *out, kl_error *err)
{
    const char *file = kl_source_name(ctx->src);
    count_other co = {.ctx = ctx, .s = p->shared, .skip = {p->decl, p->init, p->merge, rep->alias}};
    kl_ast_walk(f->body, count_other_visit, &co);
    if (!ts_node_is_null(co.first)) {
        kl_span sp = kl_node_span(co.first);
        return kl_rule_not_applicable(err,
                                      "%s:%u:%u: '%s' is used other than through its lane copy '%s'; dropping the "
                                      "copies would change that use",
                                      file, sp.line, sp.column, p->shared, rep->name);
    }
    merge_check mc = {.ctx = ctx, .scope = f->body, .s = p->shared, .copies = rep->copies};
    kl_ast_walk(p->merge, merge_visit, &mc);
    if (!mc.reads || mc.good != mc.reads) {
        kl_span sp = kl_node_span(p->merge);
        return kl_rule_not_applicable(err,
                                      "%s:%u: the merge does not sum the %lld copies of an entry (expected reads "
                                      "%s[b * %lld + ...] in a loop of %lld steps)",
                                      file, sp.line, rep->copies, p->shared, rep->copies, rep->copies);
    }
    char gelem[64] = "";
    rt_pointer_param(ctx, f, p->global, gelem, sizeof gelem);
    rep_walk w = {.ctx = ctx, .fs = fs, .nf = nf, .scope = f->body, .ptr = rep->name, .to = p->global,
                  .copies = rep->copies, .skip = rep->alias, .out = out, .st = KL_OK};
    kl_ast_walk(f->body, rep_visit, &w);
    if (w.st != KL_OK) return kl_error_set(err, w.st, "out of memory");
    if (!ts_node_is_null(w.bad)) {
        kl_span sp = kl_node_span(w.bad);
        return kl_rule_not_applicable(err,
                                      "%s:%u:%u: '%s' is used other than as an atomicAdd target `&%s[e * %lld]` or "
                                      "an argument of a __device__ helper",
                                      file, sp.line, sp.column, rep->name, rep->name, rep->copies);
    }
    TSNode root = f->outer;
    while (!ts_node_is_null(ts_node_parent(root))) root = ts_node_parent(root);
    for (unsigned j = 0; j < w.nhelpers; j++) {
        const rt_func *h = w.helpers[j];
        for (unsigned o = 0; o < w.nhelpers; o++)
            if (o != j && w.helpers[o] == h)
                return kl_rule_not_applicable(err, "%s: '%s' is passed to %s in more than one place", file, rep->name,
                                              h->name);
        /* every call of the helper passes the alias: changing it changes no other caller */
        unsigned mentions = rt_count_ident(ctx, root, h->name);
        if (w.nhelpers != 1 || mentions != w.calls + 1)
            return kl_rule_not_applicable(err, "%s: %s is also called other than with '%s'", file, h->name,
                                          rep->name);
        TSNode prm = ts_node_named_child(h->params, w.helper_arg[j]);
        TSNode pid = kl_ast_declarator_name(rt_field(prm, "declarator"));
        char *pn = ts_node_is_null(pid) ? NULL : rt_text(ctx, pid);
        char pelem[64] = "";
        if (!pn || !rt_pointer_param(ctx, h, pn, pelem, sizeof pelem)) {
            free(pn);
            return kl_rule_not_applicable(err, "%s: parameter %u of %s is not a pointer", file, w.helper_arg[j] + 1,
                                          h->name);
        }
        if (strcmp(norm_type(pelem), norm_type(gelem))) {
            free(pn);
            return kl_rule_not_applicable(err, "%s: %s takes '%s *', '%s' holds '%s'", file, h->name, pelem,
                                          p->global, gelem);
        }
        rep_walk hw = {.ctx = ctx, .fs = fs, .nf = nf, .scope = h->body, .ptr = pn, .to = NULL,
                       .copies = rep->copies, .out = out, .st = KL_OK};
        kl_ast_walk(h->body, rep_visit, &hw);
        free(pn);
        if (hw.st != KL_OK) return kl_error_set(err, hw.st, "out of memory");
        if (!ts_node_is_null(hw.bad)) {
            kl_span sp = kl_node_span(hw.bad);
            return kl_rule_not_applicable(err,
                                          "%s:%u:%u: in %s, the table is used other than as an atomicAdd target "
                                          "`&p[e * %lld]`",
                                          file, sp.line, sp.column, h->name, rep->copies);
        }
    }
    kl_status st = KL_OK;
    TSNode drop[5] = {p->decl, p->init, p->init_sync, rep->alias, p->merge_sync};
    for (int i = 0; i < 5; i++) {
        uint32_t a, b;
        rt_stmt_range(ctx, drop[i], NAME, &a, &b);
        KL_TRY(kl_edits_add(out, a, b, ""));
    }
    uint32_t a, b;
    rt_stmt_range(ctx, p->merge, "Merge", &a, &b);
    KL_TRY(kl_edits_add(out, a, b, ""));
cleanup:
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    kl_status st = KL_OK;
    for (unsigned k = 0; k < nf; k++) {
        const rt_func *f = &fs[k];
        if (!f->global) continue;
        /* present: shared tables merged into a global one */
        TSNode decls[32];
        unsigned nd = tt_shared_decls(ctx, f->body, decls, 32);
        for (unsigned i = 0; i < nd; i++) {
            present p;
            if (!find_present(ctx, f, decls[i], &p)) continue;
            kl_span sp = kl_node_span(p.decl);
            char id[256], note[256];
            kl_snprintf(id, sizeof id, "%s:%u:%s", f->name, sp.line, p.shared);
            replicas rep;
            long long copies = find_replicas(ctx, f, &p, &rep) ? rep.copies : 1;
            if (copies > 1)
                kl_snprintf(note, sizeof note, "per-block copy '%s' of '%s', %lld interleaved copies through '%s', merged at the end",
                            p.shared, p.global, copies, rep.name);
            else kl_snprintf(note, sizeof note, "per-block copy '%s' of '%s', merged at the end", p.shared, p.global);
            json_t *feat = json_pack("{s:s, s:s, s:b, s:b, s:I}", "shared", p.shared, "global", p.global, "wrapped_body",
                                     !ts_node_is_null(p.lambda_stmt), "marker",
                                     rt_has_marker(ctx, ts_node_start_byte(f->body), ts_node_end_byte(f->body), NAME),
                                     "copies", (json_int_t)copies);
            KL_TRY(kl_sites_add(out, id, KL_SITE_PRESENT, sp, f->name, feat, json_pack("{s:I}", "copies", (json_int_t)copies), note));
        }
        /* applicable: pointer parameters used as atomicAdd targets */
        uint32_t np = ts_node_is_null(f->params) ? 0 : ts_node_named_child_count(f->params);
        for (uint32_t i = 0; i < np; i++) {
            TSNode id = kl_ast_declarator_name(rt_field(ts_node_named_child(f->params, i), "declarator"));
            if (ts_node_is_null(id)) continue;
            char *name = rt_text(ctx, id);
            if (!name) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            table t;
            if (rt_pointer_param(ctx, f, name, NULL, 0)) analyse_table(ctx, f, name, &t);
            else t.atomics = 0;
            free(name);
            if (!t.atomics) continue;
            kl_span sp = kl_node_span(t.first_atomic);
            char sid[256], note[320];
            kl_snprintf(sid, sizeof sid, "%s:%u:%s", f->name, sp.line, t.name);
            if (t.why_not[0]) kl_snprintf(note, sizeof note, "not applicable: %s", t.why_not);
            else kl_snprintf(note, sizeof note, "%u global atomic(s) into '%s' (%lld entries)", t.atomics, t.name, t.bins);
            json_t *feat = json_pack("{s:s, s:s, s:I, s:s, s:i, s:b}", "table", t.name, "dtype", t.elem, "bins",
                                     (json_int_t)t.bins, "bins_from", t.bins_from ? t.bins_from : "unknown",
                                     "atomics", (int)t.atomics, "early_return", t.returns > 0);
            KL_TRY(kl_sites_add(out, sid, KL_SITE_APPLICABLE, sp, f->name, feat, NULL, note));
        }
    }
cleanup:
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

static const rt_func *site_func(const kl_rule_ctx *ctx, const kl_site *site, rt_func *fs, unsigned *nf)
{
    *nf = rt_functions(ctx, fs, 64);
    return rt_function_named(fs, *nf, site->kernel);
}

/* The table name: the site id's last part. */
static const char *site_what(const kl_site *site)
{
    const char *c = strrchr(site->id, ':');
    return c ? c + 1 : site->id;
}

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out,
                       kl_error *err)
{
    rt_func fs[64];
    unsigned nf;
    const rt_func *f = site_func(ctx, site, fs, &nf);
    if (!f) return kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no kernel '%s'", kl_source_name(ctx->src), site->kernel);
    table t;
    if (!rt_pointer_param(ctx, f, site_what(site), NULL, 0))
        return kl_error_set(err, KL_ERR_NOT_FOUND, "%s: kernel '%s' has no pointer parameter '%s'",
                            kl_source_name(ctx->src), f->name, site_what(site));
    analyse_table(ctx, f, site_what(site), &t);
    if (!t.atomics)
        return kl_rule_not_applicable(err, "%s: '%s' in kernel '%s' is not an atomicAdd target",
                            kl_source_name(ctx->src), t.name, f->name);
    if (t.why_not[0]) return kl_rule_not_applicable(err, "%s", t.why_not);
    /* the private copy's name must be free */
    char priv[96];
    kl_snprintf(priv, sizeof priv, "%s_priv", t.name);
    if (rt_count_ident(ctx, f->outer, priv))
        return kl_rule_not_applicable(err, "%s: kernel '%s' already uses the name '%s'",
                            kl_source_name(ctx->src), f->name, priv);
    /* blocks of more than one dimension need a linear thread index */
    uses_yz yz = {ctx, false};
    kl_ast_walk(f->body, uses_yz_visit, &yz);
    bool multi_dim = yz.yes;
    const char *tid = multi_dim ? "threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)" : "threadIdx.x";
    const char *nthreads = multi_dim ? "blockDim.x * blockDim.y * blockDim.z" : "blockDim.x";
    /* the copy holds values: drop a const qualifier */
    const char *elem = t.elem;
    while (!strncmp(elem, "const ", 6)) elem += 6;
    char ind[64];
    TSNode first = ts_node_named_child(f->body, 0);
    if (ts_node_is_null(first))
        return kl_rule_not_applicable(err, "%s: kernel '%s' is empty", kl_source_name(ctx->src), f->name);
    rt_indent_of(ctx, ts_node_start_byte(first), ind, sizeof ind);
    kl_status st = KL_OK;
    uint32_t open = ts_node_start_byte(f->body) + 1;
    uint32_t close = ts_node_end_byte(f->body) - 1;
    uint32_t body_start = rt_line_end(ctx, open);
    uint32_t body_end = rt_line_start(ctx, close);
    if (body_end < body_start || !rt_line_blank_before(ctx, close))
        return kl_rule_not_applicable(err,
                            "%s: kernel '%s': expected its body's braces on lines of their own",
                            kl_source_name(ctx->src), f->name);
    int64_t copies = 1;
    if (!kl_rule_param_int(&kl_rule_privatize, params, "copies", &copies) || copies < 1 || copies > 32 ||
        (copies & (copies - 1)))
        return kl_error_set(err, KL_ERR_INVALID, "%s: copies must be 1, 4, 8, 16 or 32", kl_source_name(ctx->src));
    char lane[96] = "";
    if (copies > 1) {
        /* the copies live in 48 KiB of static shared memory at most */
        long long bytes = t.bins * copies * (long long)rt_type_size(elem);
        if (!rt_type_size(elem) || bytes > 48 * 1024)
            return kl_rule_not_applicable(err,
                                          "%s: %lld copies of the %lld entries of '%s' (%s) take %lld bytes of shared "
                                          "memory, over the 48 KiB a block can declare",
                                          kl_source_name(ctx->src), (long long)copies, t.bins, t.name, elem, bytes);
        kl_snprintf(lane, sizeof lane, "%s_lane", t.name);
        if (rt_count_ident(ctx, f->outer, lane))
            return kl_rule_not_applicable(err, "%s: kernel '%s' already uses the name '%s'", kl_source_name(ctx->src),
                                          f->name, lane);
    }
    char size[64];
    if (copies > 1) kl_snprintf(size, sizeof size, "%lld * %lld", t.bins, (long long)copies);
    else kl_snprintf(size, sizeof size, "%lld", t.bins);
    if (copies > 1)
        KL_TRY(kl_edits_addf(out, body_start, body_start,
                             "%s// privatize: %lld per-block copies of '%s' in shared memory, interleaved (entry e of "
                             "copy c at e * %lld + c; lane l of a warp uses copy l %% %lld), merged once per entry\n"
                             "%s__shared__ %s %s[%s];\n"
                             "%sfor (int kl_i = %s; kl_i < %s; kl_i += %s) %s[kl_i] = 0;\n"
                             "%s__syncthreads();\n"
                             "%s%s* %s = %s + threadIdx.x %% %lld;\n",
                             ind, (long long)copies, t.name, (long long)copies, (long long)copies, ind, elem, priv, size,
                             ind, tid, size, nthreads, priv, ind, ind, elem, lane, priv, (long long)copies));
    else
        KL_TRY(kl_edits_addf(out, body_start, body_start,
                             "%s// privatize: a per-block copy of '%s' in shared memory, merged once per entry\n"
                             "%s__shared__ %s %s[%s];\n"
                             "%sfor (int kl_i = %s; kl_i < %s; kl_i += %s) %s[kl_i] = 0;\n"
                             "%s__syncthreads();\n",
                             ind, t.name, ind, elem, priv, size, ind, tid, size, nthreads, priv, ind));
    /* the atomic targets: P -> the copy; with several copies, P[i] -> lane[(i) * C] */
    scan s = {.ctx = ctx, .name = t.name};
    kl_ast_walk(f->body, scan_visit, &s);
    if (s.atomics > 64)
        return kl_rule_not_applicable(err, "%s: kernel '%s' has %u atomics into '%s', more than 64",
                                      kl_source_name(ctx->src), f->name, s.atomics, t.name);
    kl_edits targets = {0};
    for (unsigned i = 0; i < s.atomics && st == KL_OK; i++) {
        st = kl_edits_add(&targets, ts_node_start_byte(s.atomic_nodes[i]), ts_node_end_byte(s.atomic_nodes[i]),
                          copies > 1 ? lane : priv);
        if (st == KL_OK && copies > 1) {
            TSNode ix = s.index_nodes[i];
            uint32_t a = ts_node_start_byte(ix), b = ts_node_end_byte(ix);
            bool atom = rt_is(ix, "identifier") || rt_is(ix, "number_literal") || rt_is(ix, "subscript_expression") ||
                        rt_is(ix, "call_expression") || rt_is(ix, "parenthesized_expression");
            st = kl_edits_addf(&targets, a, b, atom ? "%.*s * %lld" : "(%.*s) * %lld", (int)(b - a), ctx->text + a,
                               (long long)copies);
        }
    }
    if (st == KL_OK && t.returns) {
        /* every thread must reach the merge: run the body in a lambda, where return leaves it;
         * the moved text with the atomic targets rewritten, indented one level deeper */
        char *text = NULL;
        st = kl_edits_apply_range(&targets, ctx->text, body_start, body_end, &text, err);
        char *moved = st == KL_OK ? rt_reindent(text, strlen(text), 4) : NULL;
        free(text);
        if (st == KL_OK)
            st = moved ? kl_edits_addf(out, body_start, body_end, "%s[&]() {\n%s%s}();\n", ind, moved, ind) : KL_ERR_NOMEM;
        free(moved);
    } else
        for (unsigned i = 0; i < targets.count && st == KL_OK; i++)
            st = kl_edits_add(out, targets.items[i].start, targets.items[i].end, targets.items[i].text);
    kl_edits_release(&targets);
    KL_TRY(st);
    if (copies > 1)
        /* thread e sums entry e's copies starting at copy e % C, so a warp's reads hit C banks */
        KL_TRY(kl_edits_addf(out, body_end, body_end,
                             "%s__syncthreads();\n"
                             "%sfor (int kl_i = %s; kl_i < %lld; kl_i += %s) {\n"
                             "%s    %s kl_sum = 0;\n"
                             "%s    for (int kl_c = 0; kl_c < %lld; kl_c++) kl_sum += %s[kl_i * %lld + (kl_c + kl_i) %% %lld];\n"
                             "%s    if (kl_sum != 0) atomicAdd(&%s[kl_i], kl_sum);\n"
                             "%s}\n",
                             ind, ind, tid, t.bins, nthreads, ind, elem, ind, (long long)copies, priv, (long long)copies,
                             (long long)copies, ind, t.name, ind));
    else
        KL_TRY(kl_edits_addf(out, body_end, body_end,
                             "%s__syncthreads();\n"
                             "%sfor (int kl_i = %s; kl_i < %lld; kl_i += %s)\n"
                             "%s    if (%s[kl_i] != 0) atomicAdd(&%s[kl_i], %s[kl_i]);\n",
                             ind, ind, tid, t.bins, nthreads, ind, priv, t.name, priv));
cleanup:
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

typedef struct rename_collect {
    const kl_rule_ctx *ctx;
    const char *s;
    kl_edits *out;
    const char *g;
    TSNode skip[4];
    kl_status st;
    TSNode other;
} rename_collect;

static bool rename_visit(TSNode n, void *user)
{
    rename_collect *r = user;
    for (int i = 0; i < 4; i++)
        if (!ts_node_is_null(r->skip[i]) && ts_node_eq(n, r->skip[i])) return false;
    if (rt_is(n, "call_expression") && is_atomic_add(r->ctx, n)) {
        TSNode p, i;
        if (atomic_target(r->ctx, n, &p, &i) && rt_text_is(r->ctx, p, r->s)) {
            if (r->st == KL_OK) r->st = kl_edits_add(r->out, ts_node_start_byte(p), ts_node_end_byte(p), r->g);
            /* the index and the value are ordinary uses */
            kl_ast_walk(i, rename_visit, r);
            kl_ast_walk(ts_node_named_child(rt_field(n, "arguments"), 1), rename_visit, r);
            return false;
        }
    }
    if (rt_is(n, "identifier") && rt_text_is(r->ctx, n, r->s) && ts_node_is_null(r->other)) r->other = n;
    return true;
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    rt_func fs[64];
    unsigned nf;
    const rt_func *f = site_func(ctx, site, fs, &nf);
    if (!f) return kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no kernel '%s'", kl_source_name(ctx->src), site->kernel);
    TSNode decls[32];
    unsigned nd = tt_shared_decls(ctx, f->body, decls, 32);
    present p;
    bool found = false;
    for (unsigned i = 0; i < nd && !found; i++)
        if (find_present(ctx, f, decls[i], &p) && !strcmp(p.shared, site_what(site))) found = true;
    if (!found)
        return kl_rule_not_applicable(err,
                            "%s: kernel '%s': no shared table '%s' zero-filled, synchronised and merged into a "
                            "global one",
                            kl_source_name(ctx->src), f->name, site_what(site));
    replicas rep;
    if (find_replicas(ctx, f, &p, &rep)) return remove_replicas(ctx, fs, nf, f, &p, &rep, out, err);
    kl_status st = KL_OK;
    /* every other use of the shared table must be an atomicAdd target */
    rename_collect r = {.ctx = ctx, .s = p.shared, .out = out, .g = p.global, .skip = {p.decl, p.init, p.merge}, .st = KL_OK};
    kl_ast_walk(f->body, rename_visit, &r);
    if (r.st != KL_OK) return kl_error_set(err, r.st, "out of memory");
    if (!ts_node_is_null(r.other)) {
        kl_span sp = kl_node_span(r.other);
        return kl_rule_not_applicable(err,
                            "%s:%u:%u: '%s' is used other than as an atomicAdd target; dropping the private copy "
                            "would change that use",
                            kl_source_name(ctx->src), sp.line, sp.column, p.shared);
    }
    TSNode drop[4] = {p.decl, p.init, p.init_sync, p.merge_sync};
    for (int i = 0; i < 4; i++) {
        uint32_t a, b;
        rt_stmt_range(ctx, drop[i], NAME, &a, &b);
        KL_TRY(kl_edits_add(out, a, b, ""));
    }
    uint32_t a, b;
    rt_stmt_range(ctx, p.merge, NULL, &a, &b);
    KL_TRY(kl_edits_add(out, a, b, ""));
    if (!ts_node_is_null(p.lambda_stmt)) {
        /* unwrap `[&]() {` ... `}();`, moving the body back out by 4 columns */
        TSNode call = ts_node_named_child(p.lambda_stmt, 0);
        TSNode lam = rt_field(call, "function");
        TSNode body = rt_field(lam, "body");
        uint32_t s0, s1;
        rt_stmt_range(ctx, p.lambda_stmt, NULL, &s0, &s1);
        uint32_t in0 = rt_line_end(ctx, ts_node_start_byte(body));
        uint32_t in1 = rt_line_start(ctx, ts_node_end_byte(body) - 1);
        if (in1 < in0 || s0 == ts_node_start_byte(p.lambda_stmt))
            return kl_rule_not_applicable(err, "%s: kernel '%s': the wrapped body is not laid out one statement a line",
                                kl_source_name(ctx->src), f->name);
        /* the renames inside the lambda were recorded as edits on the original text;
         * rebuild the inner text with them, then dedent */
        kl_strbuf sb = KL_STRBUF_INIT;
        uint32_t pos = in0;
        kl_edits keep = {0};
        for (unsigned i = 0; i < out->count; i++) {
            kl_edit *e = &out->items[i];
            if (e->start >= in0 && e->end <= in1) {
                kl_strbuf_add(&sb, ctx->text + pos, e->start - pos);
                kl_strbuf_adds(&sb, e->text);
                pos = e->end;
            } else if (kl_edits_add(&keep, e->start, e->end, e->text) != KL_OK) {
                kl_strbuf_release(&sb);
                kl_edits_release(&keep);
                return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            }
        }
        kl_strbuf_add(&sb, ctx->text + pos, in1 - pos);
        char *inner = sb.failed ? NULL : rt_reindent(kl_strbuf_str(&sb), sb.len, -4);
        kl_strbuf_release(&sb);
        if (!inner) {
            kl_edits_release(&keep);
            return kl_rule_not_applicable(err,
                                "%s: kernel '%s': the wrapped body is not indented by 4 spaces", kl_source_name(ctx->src),
                                f->name);
        }
        kl_edits_release(out);
        *out = keep;
        st = kl_edits_add(out, s0, s1, inner);
        free(inner);
        KL_TRY(st);
    }
cleanup:
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

static const char *const copies_values[] = {"1", "4", "8", "16", "32", NULL};
static const kl_rule_param privatize_params[] = {{"copies", copies_values, "1"}};

const kl_rule kl_rule_privatize = {
    NAME,
    "global atomics into a small table -> a per-block shared copy merged with one atomic per entry",
    privatize_params,
    sizeof privatize_params / sizeof privatize_params[0],
    find,
    remove_site,
    apply,
};
