/* Observables of a site: launch() run at a shape (observe_launch.c), the site's accesses and loops,
 * sizes by role (observe.h, docs/skill-card.md "Observables"). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "syntax/affine.h"
#include "syntax/observe.h"
#include "syntax/observe_int.h"
#include "util/util.h"

static bool calls_fn(const kl_model *m, const char *k, const char *fn)
{
    int i = kl_model_find_function(m, k, KL_FUNCTION_KERNEL);
    if (i < 0) return false;
    json_t *f = kl_model_features(m, (unsigned)i);
    bool yes = false;
    size_t j;
    json_t *c;
    json_array_foreach(json_object_get(f, "calls"), j, c) if (json_is_string(c) && !strcmp(json_string_value(c), fn))
        yes = true;
    json_decref(f);
    return yes;
}

kl_obs_runs kl_obs_function_runs(const kl_source *src, const kl_obs_launches *run, const char *fn)
{
    TSNode def = kl_ast_function_named(src, fn);
    if (ts_node_is_null(def)) return KL_OBS_MAYBE;
    bool kernel = kl_ast_function_has(src, def, "__global__");
    bool device = !kernel && kl_ast_function_has(src, def, "__device__");
    if (!kernel && !device) return KL_OBS_RUNS;
    kl_model *m = NULL;
    if (device && kl_model_build(src, &m, NULL) != KL_OK) return KL_OBS_MAYBE;
    kl_obs_runs r = KL_OBS_NOT_RUN;
    for (unsigned i = 0; i < run->count; i++) {
        const kl_obs_launch *l = &run->items[i];
        bool reaches = !strcmp(l->kernel, fn) || (device && calls_fn(m, l->kernel, fn));
        if (!reaches) continue;
        if (l->certain) {
            r = KL_OBS_RUNS;
            break;
        }
        r = KL_OBS_MAYBE;
    }
    kl_model_free(m);
    return r;
}

/* ======================================================================================
 * the site
 * ====================================================================================== */

static const char *dtype_of(const char *elem, unsigned *bytes)
{
    static const struct {
        const char *c, *name;
        unsigned bytes;
    } map[] = {{"float", "f32", 4},        {"double", "f64", 8},       {"__half", "f16", 2},   {"half", "f16", 2},
               {"__nv_bfloat16", "bf16", 2}, {"nv_bfloat16", "bf16", 2}, {"int", "i32", 4},     {"int32_t", "i32", 4},
               {"unsigned", "u32", 4},     {"uint32_t", "u32", 4},     {"uint8_t", "u8", 1},   {"unsigned char", "u8", 1},
               {"char", "i8", 1},          {"int8_t", "i8", 1},        {"float4", "f32x4", 16}, {"float2", "f32x2", 8},
               {"int64_t", "i64", 8},      {"long long", "i64", 8},    {"size_t", "u64", 8}};
    *bytes = 0;
    if (!elem) return "unknown";
    for (unsigned i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(elem, map[i].c)) {
            *bytes = map[i].bytes;
            return map[i].name;
        }
    return "other";
}

/* One global access of the site, its base resolved to a kernel parameter where it was a local
 * pointer into one (`const float* xr = x + row * cols;` then `xr[c]`). */
typedef struct gaccess {
    const kl_ax_access *a;
    int param;             /* the kernel parameter it reads or writes, -1: shared or local */
    kl_affine flat;        /* the index from the parameter's start (owned) */
    bool flat_ok;
    /* how far the index moves from one lane to the next: directly (threadIdx.x in the index) and
     * through loop variables that start at threadIdx.x (`for (c = threadIdx.x; …)`) */
    bool tx_known;
    int64_t tx;
} gaccess;

typedef struct alias_find {
    const kl_source *src;
    const char *name;
    TSNode value;
} alias_find;

static bool alias_visit(TSNode n, void *user)
{
    alias_find *f = user;
    if (!ts_node_is_null(f->value)) return false;
    if (observe__type_is(n, "init_declarator")) {
        TSNode d = ts_node_child_by_field_name(n, "declarator", 10);
        TSNode nm = kl_ast_declarator_name(d);
        if (observe__type_is(d, "pointer_declarator") && !ts_node_is_null(nm) && kl_node_text_is(f->src, nm, f->name))
            f->value = ts_node_child_by_field_name(n, "value", 5);
    }
    return true;
}

/* a + b for two affine forms (b's terms added to a's; coefficients summed as text) */
static kl_status affine_add(kl_affine *a, const kl_affine *b)
{
    for (unsigned i = 0; i < b->nterms; i++) {
        const kl_affine_term *t = &b->terms[i];
        unsigned k = 0;
        while (k < a->nterms && strcmp(a->terms[k].var, t->var) != 0) k++;
        if (k < a->nterms) {
            kl_affine_term *x = &a->terms[k];
            if (x->coef_is_int && t->coef_is_int) {
                x->coef_int += t->coef_int;
                char buf[32];
                kl_snprintf(buf, sizeof buf, "%lld", (long long)x->coef_int);
                free(x->coef);
                x->coef = kl_strdup(buf);
            } else {
                kl_strbuf sb = KL_STRBUF_INIT;
                kl_strbuf_addf(&sb, "%s+%s", x->coef, t->coef);
                free(x->coef);
                x->coef = kl_strbuf_detach(&sb, NULL);
                x->coef_is_int = false;
            }
            if (!x->coef) return KL_ERR_NOMEM;
            continue;
        }
        kl_affine_term *nt = realloc(a->terms, (a->nterms + 1) * sizeof *nt);
        if (!nt) return KL_ERR_NOMEM;
        a->terms = nt;
        kl_affine_term *x = &a->terms[a->nterms];
        *x = *t;
        x->var = kl_strdup(t->var);
        x->coef = kl_strdup(t->coef);
        if (!x->var || !x->coef) return KL_ERR_NOMEM;
        a->nterms++;
    }
    return KL_OK;
}

static kl_status affine_copy(const kl_affine *a, kl_affine *out)
{
    memset(out, 0, sizeof *out);
    out->ok = a->ok;
    out->const_is_int = a->const_is_int;
    out->const_int = a->const_int;
    if (a->why) out->why = kl_strdup(a->why);
    if (a->constant) out->constant = kl_strdup(a->constant);
    return affine_add(out, a);
}

static kl_status resolve_base(kl_affine_ctx *ax, const kl_source *src, TSNode fn, const kl_ax_access *a,
                              gaccess *g);

/* The coefficient of threadIdx.x in a loop's start (`c = threadIdx.x`, `i = blockIdx.x * B +
 * threadIdx.x`): *known false when the start is not affine or its coefficient not a constant. */
static int64_t loop_start_tx(kl_affine_ctx *ax, const kl_ax_loop *l, bool *known)
{
    *known = false;
    TSNode init = ts_node_child_by_field_name(l->node, "initializer", 11);
    TSNode v = {0};
    if (observe__type_is(init, "declaration")) {
        TSNode d = kl_ast_child_of_type(init, "init_declarator");
        v = ts_node_child_by_field_name(d, "value", 5);
    } else if (observe__type_is(init, "assignment_expression")) {
        v = ts_node_child_by_field_name(init, "right", 5);
    }
    if (ts_node_is_null(v)) return 0;
    kl_affine a;
    if (kl_affine_of(ax, v, &a) != KL_OK) return 0;
    int64_t c = 0;
    if (a.ok) *known = kl_affine_coef_int(&a, "threadIdx.x", &c);
    kl_affine_release(&a);
    return c;
}

/* g->tx from g->flat: the direct coefficient of threadIdx.x plus, for each loop variable of the
 * index, its coefficient times the threadIdx.x coefficient of the loop's start. */
static void lane_stride(kl_affine_ctx *ax, gaccess *g)
{
    g->tx_known = false;
    g->tx = 0;
    if (!g->flat_ok) return;
    int64_t tx = 0;
    for (unsigned i = 0; i < g->flat.nterms; i++) {
        const kl_affine_term *t = &g->flat.terms[i];
        if (!strcmp(t->var, "threadIdx.x")) {
            if (!t->coef_is_int) return;
            tx += t->coef_int;
            continue;
        }
        for (unsigned k = 0; k < kl_affine_loop_count(ax); k++) {
            const kl_ax_loop *l = kl_affine_loop(ax, k);
            if (!l->var || strcmp(l->var, t->var) != 0) continue;
            bool known;
            int64_t c = loop_start_tx(ax, l, &known);
            if (!known) return;
            if (c && !t->coef_is_int) return;
            tx += c * (t->coef_is_int ? t->coef_int : 0);
            break;
        }
    }
    g->tx_known = true;
    g->tx = tx;
}

static kl_status resolve_access(kl_affine_ctx *ax, const kl_source *src, TSNode fn, const kl_ax_access *a, gaccess *g)
{
    kl_status st = resolve_base(ax, src, fn, a, g);
    if (st == KL_OK) lane_stride(ax, g);
    return st;
}

static kl_status resolve_base(kl_affine_ctx *ax, const kl_source *src, TSNode fn, const kl_ax_access *a, gaccess *g)
{
    memset(g, 0, sizeof *g);
    g->a = a;
    g->param = a->param;
    kl_status st = affine_copy(&a->flat, &g->flat);
    if (st != KL_OK) return st;
    g->flat_ok = a->flat.ok;
    if (a->param >= 0 || a->is_shared || !a->array) return KL_OK;
    alias_find f = {.src = src, .name = a->array};
    kl_ast_walk(kl_ast_function_body(fn), alias_visit, &f);
    TSNode v = f.value;
    while (observe__type_is(v, "parenthesized_expression")) v = ts_node_named_child(v, 0);
    TSNode base = {0}, off = {0};
    if (observe__type_is(v, "binary_expression")) {
        TSNode l = ts_node_child_by_field_name(v, "left", 4), r = ts_node_child_by_field_name(v, "right", 5);
        char *lt = kl_node_text(src, l);
        int li = lt ? kl_affine_param_index(ax, lt) : -1;
        free(lt);
        if (li >= 0 && kl_affine_param(ax, (unsigned)li)->pointer) base = l, off = r;
        else base = r, off = l;
    } else if (observe__type_is(v, "pointer_expression")) {
        TSNode s = ts_node_child_by_field_name(v, "argument", 8);
        if (observe__type_is(s, "subscript_expression")) {
            base = ts_node_child_by_field_name(s, "argument", 8);
            off = kl_ast_subscript_index(s);
        }
    } else if (observe__type_is(v, "identifier")) {
        base = v;
    }
    if (ts_node_is_null(base)) return KL_OK;
    char *bt = kl_node_text(src, base);
    int pi = bt ? kl_affine_param_index(ax, bt) : -1;
    free(bt);
    if (pi < 0 || !kl_affine_param(ax, (unsigned)pi)->pointer) return KL_OK;
    g->param = pi;
    if (ts_node_is_null(off)) return KL_OK;
    kl_affine o;
    st = kl_affine_of(ax, off, &o);
    if (st != KL_OK) return st;
    if (o.ok && g->flat_ok) st = affine_add(&g->flat, &o);
    else g->flat_ok = false;
    kl_affine_release(&o);
    return st;
}

/* How an access moves with var: "contiguous" (coefficient 1), "invariant" (0), "strided"
 * (another), "irregular" (not affine). Across lanes (var threadIdx.x), loop variables that
 * start at threadIdx.x count too. */
static const char *movement(const gaccess *g, const char *var)
{
    if (!g->flat_ok) return "irregular";
    if (!strcmp(var, "threadIdx.x") && g->tx_known)
        return g->tx == 0 ? "invariant" : g->tx == 1 || g->tx == -1 ? "contiguous" : "strided";
    for (unsigned i = 0; i < g->flat.nterms; i++) {
        const kl_affine_term *t = &g->flat.terms[i];
        if (strcmp(t->var, var) != 0) continue;
        if (t->coef_is_int && (t->coef_int == 1 || t->coef_int == -1)) return "contiguous";
        return "strided";
    }
    return "invariant";
}

/* ---- sizes: a kernel's parameters bound at the shape ---------------------------------- */

typedef struct kbind {
    const kl_obs_launch *launch;   /* the kernel's launch at the shape (NULL: none) */
    const kl_obs_inputs *in;
} kbind;

/* A kernel interpreter: its parameters bound from the launch's arguments, its template value
 * parameters from the launch's template arguments. */
static void kernel_interp(observe__interp *ip, const kl_source *src, TSNode fn, const kbind *kb)
{
    memset(ip, 0, sizeof *ip);
    ip->src = src;
    ip->fn = fn;
    ip->launch = kb->launch;
    ip->ret = observe__unknown_val();
    ip->kernel_side = true;
    if (!kb->launch) return;
    char *pn[64] = {0}, *tn[16] = {0};
    unsigned np = observe__param_names(ip, fn, pn, 64), nt = observe__template_names(ip, fn, tn, 16);
    for (unsigned i = 0; i < np; i++) {
        observe__val v = observe__unknown_val();
        if (i < kb->launch->nargs) {
            if (kb->launch->arg_known[i]) v = observe__int_val(kb->launch->arg[i]);
            v.origin = kb->launch->arg_origin[i];
        }
        if (pn[i]) observe__bind(ip, pn[i], v);
        free(pn[i]);
    }
    for (unsigned i = 0; i < nt; i++) {
        if (tn[i] && i < kb->launch->ntargs && kb->launch->targ_known[i]) observe__bind(ip, tn[i], observe__int_val(kb->launch->targ[i]));
        free(tn[i]);
    }
}

static void interp_done(observe__interp *ip)
{
    observe__truncate_to(ip, 0);
    free(ip->b);
}

/* The value of a coefficient ("256*cols", "blockDim.y*K", "cols+1"): a sum of products of
 * integers, parameters, blockDim.* and gridDim.*. */
static bool coef_value(observe__interp *ip, const char *coef, int64_t *out)
{
    int64_t sum = 0;
    const char *p = coef;
    while (*p) {
        int64_t prod = 1;
        int sign = 1;
        if (*p == '-') sign = -1, p++;
        else if (*p == '+') p++;
        for (;;) {
            const char *e = p;
            while (*e && *e != '*' && *e != '+' && !(*e == '-' && e > p)) e++;
            char f[96];
            if ((size_t)(e - p) >= sizeof f || e == p) return false;
            memcpy(f, p, (size_t)(e - p));
            f[e - p] = '\0';
            int64_t x;
            char *end;
            long long lit = strtoll(f, &end, 10);
            if (!*end) {
                x = lit;
            } else if (!strncmp(f, "blockDim.", 9) || !strncmp(f, "gridDim.", 8)) {
                int d = observe__dim_of(strchr(f, '.') + 1);
                const kl_obs_launch *l = ip->launch;
                bool blk = f[0] == 'b';
                if (!l || d < 0 || !(blk ? l->block_known : l->grid_known)) return false;
                x = blk ? l->block[d] : l->grid[d];
            } else {
                observe__binding *b = observe__lookup(ip, f);
                if (!b || !b->v.known) return false;
                x = b->v.v[0];
            }
            prod *= x;
            p = e;
            if (*p != '*') break;
            p++;
        }
        sum += sign * prod;
    }
    *out = sum;
    return true;
}

/* The elements a kernel pointer parameter holds at the shape (through the launch), or -1. */
static int64_t param_count(observe__interp *ip, const kbind *kb, unsigned param, unsigned *bytes)
{
    (void)ip;
    if (bytes) *bytes = 0;
    if (!kb->launch || !kb->in || param >= kb->launch->nargs) return -1;
    int o = kb->launch->arg_origin[param];
    if (o < 0 || (unsigned)o >= kb->in->n || !kb->in->pointer[o]) return -1;
    if (bytes) *bytes = kb->in->elem_bytes[o];
    return kb->in->value[o];
}

static int64_t size_extent(observe__interp *ip, const gaccess *g);

/* The extent of the contiguous axis of an access: the smallest coefficient that is a size
 * (names a parameter), evaluated; for an index with none (1-D), the elements of the array. */
static int64_t contiguous_extent(observe__interp *ip, const kbind *kb, const gaccess *g)
{
    int64_t e = size_extent(ip, g);
    if (e > 0) return e;
    if (g->param >= 0) return param_count(ip, kb, (unsigned)g->param, NULL);
    return -1;
}

/* The smallest coefficient of an access's index that is a size, evaluated (constant factors
 * dropped: "256*cols" is cols); -1 when none is. */
static int64_t size_extent(observe__interp *ip, const gaccess *g)
{
    int64_t best = -1;
    if (g->flat_ok)
        for (unsigned i = 0; i < g->flat.nterms; i++) {
            const kl_affine_term *t = &g->flat.terms[i];
            if (t->coef_is_int) continue;
            if (strstr(t->coef, "blockDim") || strstr(t->coef, "gridDim")) {
                /* a block or grid stride, unless a size multiplies it */
                bool size = false;
                for (const char *p = t->coef; *p; p++)
                    if (isalpha((unsigned char)*p) &&
                        (p == t->coef || !(isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '.')) &&
                        strncmp(p, "blockDim", 8) && strncmp(p, "gridDim", 7))
                        size = true;
                if (!size) continue;
            }
            int64_t v;
            if (!coef_value(ip, t->coef, &v) || v <= 0) continue;
            /* a size times a constant: the size alone */
            if (!(best < 0 || v < best)) continue;
            best = v;
        }
    if (best > 0) {
        /* drop constant factors of the smallest size coefficient ("256*cols" -> cols) */
        for (unsigned i = 0; g->flat_ok && i < g->flat.nterms; i++) {
            const kl_affine_term *t = &g->flat.terms[i];
            int64_t v;
            if (t->coef_is_int || !coef_value(ip, t->coef, &v) || v != best) continue;
            const char *star = strchr(t->coef, '*');
            char *end;
            long long lit = strtoll(t->coef, &end, 10);
            if (star && end == star && lit > 1 && best % lit == 0) best /= lit;
            break;
        }
        return best;
    }
    return -1;
}

/* The value of a loop's bound (the other side of its condition) at the shape. */
static bool loop_bound(observe__interp *ip, const kl_ax_loop *l, int64_t *out)
{
    TSNode cond = ts_node_child_by_field_name(l->node, "condition", 9);
    if (!observe__type_is(cond, "binary_expression") || !l->var) return false;
    TSNode a = ts_node_child_by_field_name(cond, "left", 4), b = ts_node_child_by_field_name(cond, "right", 5);
    TSNode bound = kl_node_text_is(ip->src, a, l->var) ? b : a;
    observe__val v = observe__eval(ip, bound);
    if (!v.known || v.nd != 1) return false;
    *out = v.v[0];
    return true;
}

/* ---- the site's statements: reductions and atomics ------------------------------------ */

typedef struct scan {
    const kl_source *src;
    bool reduction;
    unsigned atomics;
    bool atomic_uniform, atomic_data;
    kl_affine_ctx *ax;
} scan;

static bool is_accumulate_call(const kl_source *src, TSNode rhs, const char *lhs)
{
    /* acc = fmaxf(acc, …), acc = max(acc, …), acc = acc + … */
    if (observe__type_is(rhs, "call_expression")) {
        TSNode args = ts_node_child_by_field_name(rhs, "arguments", 9);
        uint32_t c = ts_node_named_child_count(args);
        for (uint32_t i = 0; i < c; i++)
            if (kl_node_text_is(src, ts_node_named_child(args, i), lhs)) return true;
    }
    if (observe__type_is(rhs, "binary_expression")) {
        TSNode l = ts_node_child_by_field_name(rhs, "left", 4), r = ts_node_child_by_field_name(rhs, "right", 5);
        if (kl_node_text_is(src, l, lhs) || kl_node_text_is(src, r, lhs)) return true;
    }
    return false;
}

static bool scan_visit(TSNode n, void *user)
{
    scan *s = user;
    if (observe__type_is(n, "assignment_expression")) {
        TSNode l = ts_node_child_by_field_name(n, "left", 4);
        TSNode o = ts_node_child_by_field_name(n, "operator", 8);
        const char *text = kl_source_text(s->src, NULL);
        bool compound = !ts_node_is_null(o) && ts_node_end_byte(o) - ts_node_start_byte(o) == 2 &&
                        text[ts_node_start_byte(o) + 1] == '=' && text[ts_node_start_byte(o)] != '=';
        /* an accumulator: not a loop's own variable (`j += 8` steps a loop, it sums nothing) */
        bool loop_var = false;
        if (observe__type_is(l, "identifier") && s->ax)
            for (unsigned i = 0; i < kl_affine_loop_count(s->ax) && !loop_var; i++) {
                const kl_ax_loop *lp = kl_affine_loop(s->ax, i);
                loop_var = lp->var && kl_node_text_is(s->src, l, lp->var);
            }
        if (!loop_var && (observe__type_is(l, "identifier") || observe__type_is(l, "field_expression"))) {
            char *lhs = kl_node_text(s->src, l);
            if (lhs && (compound || is_accumulate_call(s->src, ts_node_child_by_field_name(n, "right", 5), lhs)))
                s->reduction = true;
            free(lhs);
        }
    } else if (observe__type_is(n, "call_expression")) {
        TSNode f = ts_node_child_by_field_name(n, "function", 8);
        char *name = kl_node_text(s->src, f);
        if (name && !strncmp(name, "atomic", 6)) {
            s->atomics++;
            TSNode args = ts_node_child_by_field_name(n, "arguments", 9);
            TSNode a0 = ts_node_named_child(args, 0);
            while (observe__type_is(a0, "parenthesized_expression")) a0 = ts_node_named_child(a0, 0);
            TSNode idx = {0};
            if (observe__type_is(a0, "pointer_expression")) {
                TSNode sub = ts_node_child_by_field_name(a0, "argument", 8);
                if (observe__type_is(sub, "subscript_expression")) {
                    idx = kl_ast_subscript_index(sub);
                }
            } else if (observe__type_is(a0, "binary_expression")) {
                idx = ts_node_child_by_field_name(a0, "right", 5);
            }
            if (ts_node_is_null(idx)) {
                s->atomic_uniform = true;
            } else {
                kl_affine a;
                if (kl_affine_of(s->ax, idx, &a) == KL_OK) {
                    if (!a.ok) s->atomic_data = true;
                    else if (!kl_affine_varies(&a)) s->atomic_uniform = true;
                    kl_affine_release(&a);
                }
            }
        }
        free(name);
    }
    return true;
}

/* ---- the site ------------------------------------------------------------------------ */

static bool node_within(TSNode inner, TSNode outer)
{
    return ts_node_start_byte(inner) >= ts_node_start_byte(outer) && ts_node_end_byte(inner) <= ts_node_end_byte(outer);
}

/* The kernel whose launch sizes the site: fn itself, the first launched kernel that calls it (a
 * device helper), or the first kernel launched (host code). */
static const kl_obs_launch *site_launch(const kl_source *src, const kl_obs_launches *run, const char *fn, bool kernel,
                                        bool device)
{
    if (!run) return NULL;
    kl_model *m = NULL;
    if (device && kl_model_build(src, &m, NULL) != KL_OK) return NULL;
    const kl_obs_launch *best = NULL;
    for (int pass = 0; pass < 2 && !best; pass++)
        for (unsigned i = 0; i < run->count && !best; i++) {
            const kl_obs_launch *l = &run->items[i];
            if (pass == 0 && !l->certain) continue;
            if (kernel ? !strcmp(l->kernel, fn) : device ? calls_fn(m, l->kernel, fn) : true) best = l;
        }
    kl_model_free(m);
    return best;
}

/* The element type of a local or shared array of the function (its declaration's type, without
 * qualifiers), new string; NULL when not found. */
typedef struct type_find {
    const kl_source *src;
    const char *name;
    char *type;
} type_find;

static bool type_visit(TSNode n, void *user)
{
    type_find *f = user;
    if (f->type) return false;
    if (!observe__type_is(n, "declaration")) return true;
    uint32_t c = ts_node_named_child_count(n);
    for (uint32_t i = 0; i < c; i++) {
        TSNode nm = kl_ast_declarator_name(ts_node_named_child(n, i));
        if (ts_node_is_null(nm) || !kl_node_text_is(f->src, nm, f->name)) continue;
        f->type = kl_node_text(f->src, ts_node_child_by_field_name(n, "type", 4));
        break;
    }
    return false;
}

static char *local_type(const kl_source *src, TSNode fn, const char *name)
{
    type_find f = {src, name, NULL};
    kl_ast_walk(kl_ast_function_body(fn), type_visit, &f);
    return f.type;
}

static void set_str(json_t *o, const char *k, const char *v) { json_object_set_new(o, k, json_string(v)); }
static void set_int(json_t *o, const char *k, int64_t v) { json_object_set_new(o, k, json_integer(v)); }
static void set_bool(json_t *o, const char *k, bool v) { json_object_set_new(o, k, json_boolean(v)); }

kl_status kl_observe_site(const kl_source *src, const char *fn_name, unsigned line, const kl_obs_inputs *in,
                          json_t **out, kl_error *err)
{
    *out = NULL;
    TSNode fn = kl_ast_function_named(src, fn_name);
    if (ts_node_is_null(fn))
        return kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no function %s", kl_source_name(src), fn_name);
    bool kernel = kl_ast_function_has(src, fn, "__global__");
    bool device = !kernel && kl_ast_function_has(src, fn, "__device__");
    kl_affine_ctx *ax = NULL;
    kl_obs_launches run = {0};
    bool have_run = false;
    gaccess *acc = NULL;
    unsigned nacc = 0;
    json_t *o = json_object();
    kl_status st = KL_OK;
    KL_TRY(kl_affine_ctx_new(src, fn, &ax, err));
    set_str(o, "function_kind", kernel ? "kernel" : device ? "device" : "host");

    /* the region: the loop at the line (or whose pragma is there), the innermost loop around it,
     * or the whole function */
    int region_loop = -1;
    unsigned nl = kl_affine_loop_count(ax);
    for (unsigned i = 0; line && i < nl && region_loop < 0; i++) {
        unsigned l0 = ts_node_start_point(kl_affine_loop(ax, i)->node).row + 1;
        if (l0 == line || (l0 == line + 1 && kl_affine_loop(ax, i)->has_pragma_unroll)) region_loop = (int)i;
    }
    for (unsigned i = 0; line && i < nl && region_loop < 0; i++) {
        TSNode ln = kl_affine_loop(ax, i)->node;
        unsigned a = ts_node_start_point(ln).row + 1, b = ts_node_end_point(ln).row + 1;
        if (a <= line && line <= b) region_loop = (int)i; /* later loops are inner: keep looking */
        for (unsigned k = i + 1; k < nl; k++) {
            TSNode kn = kl_affine_loop(ax, k)->node;
            unsigned ka = ts_node_start_point(kn).row + 1, kb = ts_node_end_point(kn).row + 1;
            if (ka <= line && line <= kb && node_within(kn, ln)) region_loop = (int)k;
        }
    }
    TSNode region = region_loop >= 0 ? kl_affine_loop(ax, (unsigned)region_loop)->node : kl_ast_function_body(fn);

    /* the global accesses of the region, bases resolved */
    unsigned na = kl_affine_access_count(ax);
    acc = calloc(na ? na : 1, sizeof *acc);
    if (!acc) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (unsigned i = 0; i < na; i++) {
        const kl_ax_access *a = kl_affine_access(ax, i);
        if (!node_within(a->node, region)) continue;
        if ((st = resolve_access(ax, src, fn, a, &acc[nacc])) != KL_OK) {
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        nacc++;
    }
    /* the primary access: a global read that moves with threadIdx.x, else one that moves, else
     * any global access, else any */
    const gaccess *prim = NULL, *wr = NULL;
    for (unsigned i = 0; i < nacc && !prim; i++)
        if (acc[i].param >= 0 && acc[i].a->read && acc[i].flat_ok && kl_affine_coef(&acc[i].flat, "threadIdx.x"))
            prim = &acc[i];
    for (unsigned i = 0; i < nacc && !prim; i++)
        if (acc[i].param >= 0 && acc[i].a->read && acc[i].flat_ok && kl_affine_varies(&acc[i].flat)) prim = &acc[i];
    for (unsigned i = 0; i < nacc && !prim; i++)
        if (acc[i].param >= 0) prim = &acc[i];
    for (unsigned i = 0; i < nacc && !prim; i++) prim = &acc[i];
    for (unsigned i = 0; i < nacc && !wr; i++)
        if (acc[i].param >= 0 && acc[i].a->write) wr = &acc[i];

    unsigned bytes = 0;
    const char *dt = "none";
    if (prim) {
        char *elem = NULL;
        if (prim->param >= 0) elem = kl_strdup(kl_affine_param(ax, (unsigned)prim->param)->elem);
        else if (prim->a->array) elem = local_type(src, fn, prim->a->array);
        dt = elem ? dtype_of(elem, &bytes) : "other";
        free(elem);
    }
    set_str(o, "dtype", dt);
    set_int(o, "elem_bytes", bytes);
    set_str(o, "memory", !prim ? "none" : prim->param >= 0 ? "global" : prim->a->is_shared ? "shared" : "local");
    set_str(o, "access", prim ? movement(prim, "threadIdx.x") : "none");
    set_str(o, "write_access", wr ? movement(wr, "threadIdx.x") : "none");
    const kl_ax_loop *lp = region_loop >= 0 ? kl_affine_loop(ax, (unsigned)region_loop) : NULL;
    set_bool(o, "in_loop", lp != NULL);
    if (lp) {
        /* along the loop: contiguous when a global access of it is, else strided when one is */
        const char *along = "none";
        static const char *const order[] = {"contiguous", "strided", "irregular", "invariant"};
        for (unsigned r = 0; r < 4 && !strcmp(along, "none") && lp->var; r++)
            for (unsigned i = 0; i < nacc; i++)
                if (acc[i].param >= 0 && !strcmp(movement(&acc[i], lp->var), order[r])) {
                    along = order[r];
                    break;
                }
        set_str(o, "loop_access", along);
        set_int(o, "loop_depth", lp->depth + 1);
        set_bool(o, "trip_known", lp->trip_known);
        if (lp->trip_known) set_int(o, "trip", lp->trip);
        const char *step = !lp->step ? "other"
                           : strstr(lp->step, "gridDim") ? "grid"
                           : lp->step_is_int && lp->step_int == 1 ? "unit"
                           : strstr(lp->step, "blockDim") || (lp->start && strstr(lp->start, "threadIdx")) ? "block"
                                                                                                          : "other";
        set_str(o, "step", step);
    } else {
        set_str(o, "loop_access", "none");
        set_int(o, "loop_depth", 0);
        set_bool(o, "trip_known", false);
        set_str(o, "step", "none");
    }
    scan sc = {src, false, 0, false, false, ax};
    kl_ast_walk(region, scan_visit, &sc);
    set_bool(o, "reduction", sc.reduction || sc.atomic_uniform);
    set_str(o, "atomics", !sc.atomics ? "none" : sc.atomic_data ? "data" : sc.atomic_uniform ? "uniform" : "affine");

    /* launch(): a dispatch between kernels (two kernels, or two launches, under a condition) */
    kl_obs_launches all = {0};
    if (kl_obs_run_launch(src, NULL, &all, NULL) == KL_OK) {
        /* two launches or more, one of them under a condition on the sizes */
        bool dispatch = false;
        for (unsigned i = 0; i < all.count; i++)
            if (!all.items[i].certain && all.count >= 2) dispatch = true;
        set_bool(o, "dispatch", dispatch);
        kl_obs_launches_release(&all);
    } else {
        set_bool(o, "dispatch", false);
    }

    if (in) {
        st = kl_obs_run_launch(src, in, &run, err);
        if (st == KL_ERR_NOT_FOUND) {
            kl_error_clear(err);
            st = KL_OK;
        } else if (st != KL_OK) {
            goto cleanup;
        } else {
            have_run = true;
        }
        kbind kb = {have_run ? site_launch(src, &run, fn_name, kernel, device) : NULL, in};
        set_bool(o, "runs_at_shape", kb.launch != NULL);
        if (have_run && !kb.launch && (kernel || device)) {
            /* not launched at this shape: its sizes as launch() would give them on the path that
             * launches it (every branch taken, the sizes still known) */
            kl_obs_launches_release(&run);
            if ((st = observe__run_launch(src, in, true, &run, err)) != KL_OK) goto cleanup;
            kb.launch = site_launch(src, &run, fn_name, kernel, device);
        }
        /* inputs: elements and bytes */
        int64_t elements = 0, moved = 0;
        for (unsigned i = 0; i < in->n; i++)
            if (in->pointer[i]) {
                if (in->value[i] > elements) elements = in->value[i];
                moved += in->value[i] * (int64_t)in->elem_bytes[i];
            }
        set_int(o, "elements", elements);
        set_int(o, "bytes_moved", moved);
        if (kb.launch) {
            const kl_obs_launch *l = kb.launch;
            if (l->grid_known) set_int(o, "grid_blocks", l->grid[0] * l->grid[1] * l->grid[2]);
            if (l->block_known) set_int(o, "block_threads", l->block[0] * l->block[1] * l->block[2]);
            /* sizes of the kernel at the shape: through its launch */
            TSNode kfn = kernel ? fn : kl_ast_function_named(src, l->kernel);
            kl_affine_ctx *kax = NULL;
            observe__interp ip;
            kernel_interp(&ip, src, kernel ? fn : kfn, &kb);
            const gaccess *cprim = prim && prim->param >= 0 ? prim : NULL;
            gaccess kacc = {0}, kwr = {0};
            bool own_cprim = false, own_wr = false;
            if ((!cprim || !wr) && !ts_node_is_null(kfn) && kl_affine_ctx_new(src, kfn, &kax, NULL) == KL_OK) {
                /* outside the region (host sites, helpers): the kernel's own first read and write */
                for (unsigned i = 0; i < kl_affine_access_count(kax); i++) {
                    const kl_ax_access *a = kl_affine_access(kax, i);
                    gaccess g;
                    if (resolve_access(kax, src, kfn, a, &g) != KL_OK) {
                        kl_affine_release(&g.flat);
                        continue;
                    }
                    if (!cprim && !own_cprim && g.param >= 0 && a->read && g.flat_ok && kl_affine_varies(&g.flat)) {
                        kacc = g, own_cprim = true;
                    } else if (!wr && !own_wr && g.param >= 0 && a->write) {
                        kwr = g, own_wr = true;
                    } else {
                        kl_affine_release(&g.flat);
                    }
                }
            }
            observe__interp kip;
            bool other_fn = !kernel && !device;
            if (other_fn || (device && !ts_node_is_null(kfn))) kernel_interp(&kip, src, kfn, &kb);
            observe__interp *use = (other_fn || device) && !ts_node_is_null(kfn) ? &kip : &ip;
            const gaccess *cp = cprim ? cprim : own_cprim ? &kacc : NULL;
            const gaccess *cw = wr ? wr : own_wr ? &kwr : NULL;
            observe__interp *cpi = cprim ? &ip : use, *cwi = wr ? &ip : use;
            int64_t ce = cp ? contiguous_extent(cpi, &kb, cp) : -1;
            if (ce > 0) set_int(o, "contiguous_extent", ce);
            /* reduced: the bound of the region's loop when it accumulates, else the first loop of
             * the kernel that does; a reduction by atomics into one place reduces every element read */
            int64_t red = -1;
            if (lp && sc.reduction && loop_bound(&ip, lp, &red) && red > 0) {
            } else {
                red = -1;
                kl_affine_ctx *rax = kernel || ts_node_is_null(kfn) ? ax : kax;
                observe__interp *ri = kernel || ts_node_is_null(kfn) ? &ip : use;
                for (unsigned i = 0; rax && i < kl_affine_loop_count(rax) && red < 0; i++) {
                    const kl_ax_loop *ll = kl_affine_loop(rax, i);
                    scan s2 = {src, false, 0, false, false, rax};
                    kl_ast_walk(ts_node_child_by_field_name(ll->node, "body", 4), scan_visit, &s2);
                    int64_t b;
                    if (s2.reduction && loop_bound(ri, ll, &b) && b > 0) red = b;
                }
                if (red < 0 && sc.atomic_uniform && cp && cp->param >= 0)
                    red = param_count(cpi, &kb, (unsigned)cp->param, NULL);
                if (red < 0) red = 1;
            }
            set_int(o, "reduced_extent", red);
            /* independent rows: the rows of the written array (its elements over the extent of
             * its contiguous axis); a kernel that writes only through atomics merges all its
             * work into shared outputs: one */
            int64_t rows = -1;
            if (cw && cw->param >= 0) {
                int64_t cnt = param_count(cwi, &kb, (unsigned)cw->param, NULL);
                int64_t we = size_extent(cwi, cw);
                if (cw->flat_ok && !kl_affine_varies(&cw->flat)) rows = 1; /* every thread writes one place */
                else if (cnt > 0) rows = we > 0 ? (cnt / we > 0 ? cnt / we : 1) : cnt;
            } else if (!cw) {
                scan s3 = {src, false, 0, false, false, kernel || ts_node_is_null(kfn) ? ax : kax};
                if (s3.ax) kl_ast_walk(kernel || ts_node_is_null(kfn) ? kl_ast_function_body(fn) : kl_ast_function_body(kfn),
                                       scan_visit, &s3);
                if (s3.atomics) rows = 1;
            }
            if (rows > 0) set_int(o, "independent_rows", rows);
            if (own_cprim) kl_affine_release(&kacc.flat);
            if (own_wr) kl_affine_release(&kwr.flat);
            interp_done(&ip);
            if (other_fn || (device && !ts_node_is_null(kfn))) interp_done(&kip);
            kl_affine_ctx_free(kax);
        }
    }
cleanup:
    for (unsigned i = 0; i < nacc; i++) kl_affine_release(&acc[i].flat);
    free(acc);
    kl_affine_ctx_free(ax);
    kl_obs_launches_release(&run);
    if (st == KL_OK) *out = o;
    else json_decref(o);
    return st;
}
