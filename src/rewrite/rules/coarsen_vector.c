/* coarsen, the vector form: W consecutive elements per thread, gathered into a float4 (float2) by
 * scalar loads — what vectorize's removal leaves of a load through a float4 pointer —
 *     acc += squares(make_float4(x[b + 4 * j], x[b + 4 * j + 1], x[b + 4 * j + 2], x[b + 4 * j + 3]));
 * and consumed only by a sum over its components, one term per component that differs from the
 * others only by the component it reads (inline, `v.x + v.y + v.z + v.w`, or the body of a
 * __device__ function of the vector, `return v.x * v.x + v.y * v.y + …;`). Removed, a thread takes
 * one element, x[b + j], and adds its term alone (the function gets a scalar overload); the kernel's
 * item count — the one parameter the gathers' indices are compared with — is passed W times larger
 * and each launch has W times the blocks, so item j of the new kernel is element b + j, and every
 * element is still taken by exactly one thread wherever the old grid covered the old items (the
 * guards and strides compare blocks times threads with the count, both W times larger now).
 * What a thread adds up must reach memory by sums only (grid_stride__partials_by_sums): the sum's
 * order changes, and which thread holds an element. Remove only. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/coarsen.h"
#include "rewrite/rules/grid_stride.h"
#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "syntax/affine.h"
#include "util/util.h"

static const char comps[] = "xyzw";

/* The expression holding n once the parentheses around n are taken into account. */
static TSNode lift(TSNode n)
{
    TSNode p = ts_node_parent(n);
    while (rt_is(p, "parenthesized_expression")) n = p, p = ts_node_parent(n);
    return n;
}

/* ---- sums over a vector's components ------------------------------------------------------------ */

/* text with every `P.c` (P whole on its left, c a component letter whole on its right) written rep
 * (rep NULL: `P.x`), a new string; *bad: P stands somewhere not followed by a component, *seen: the
 * components met (bit i for comps[i]). NULL when out of memory. */
static char *member_subst(const char *text, const char *p, const char *rep, bool *bad, unsigned *seen)
{
    size_t pl = strlen(p), n = strlen(text);
    size_t cap = n + 1 + (rep ? (strlen(rep) + 2) * (n / (pl + 2) + 1) : 0);
    char *out = malloc(cap), *o = out;
    if (!out) return NULL;
    for (const char *s = text; *s;) {
        bool left = s == text || (!kl_ident_char(s[-1]) && s[-1] != '.');
        if (left && !strncmp(s, p, pl) && (!kl_ident_char(p[pl - 1]) || !kl_ident_char(s[pl]))) {
            const char *c = s[pl] == '.' ? strchr(comps, s[pl + 1]) : NULL;
            if (c && s[pl + 1] && !kl_ident_char(s[pl + 2])) {
                *seen |= 1u << (c - comps);
                const char *r = rep ? rep : p;
                size_t rl = strlen(r);
                memcpy(o, r, rl);
                o += rl;
                if (!rep) *o++ = '.', *o++ = 'x';
                s += pl + 2;
                continue;
            }
            *bad = true;
        }
        *o++ = *s++;
    }
    *o = '\0';
    return out;
}

/* The terms of a sum (through parentheses), at most max; false when there are more. */
static bool sum_terms(const kl_rule_ctx *ctx, TSNode e, TSNode *out, unsigned *n, unsigned max)
{
    e = kl_ast_unparen(e);
    if (rt_op_is(ctx, e, "+")) return sum_terms(ctx, rt_field(e, "left"), out, n, max) && sum_terms(ctx, rt_field(e, "right"), out, n, max);
    if (*n == max) return false;
    out[(*n)++] = e;
    return true;
}

/* Is e a sum over the components of P, one term per component (W of them), the terms equal but for
 * the component? Then *term0 is the first term's text with P.x written rep (a new string). */
static bool separable(const kl_rule_ctx *ctx, TSNode e, const char *p, unsigned w, const char *rep, char **term0)
{
    TSNode t[4];
    unsigned n = 0;
    *term0 = NULL;
    if (!sum_terms(ctx, e, t, &n, 4) || n != w) return false;
    char *first = NULL;
    bool ok = true;
    unsigned all = 0;
    for (unsigned c = 0; c < n && ok; c++) {
        char *s = rt_text_unblank(ctx, t[c]);
        bool bad = false;
        unsigned seen = 0;
        char *x = s ? member_subst(s, p, NULL, &bad, &seen) : NULL;
        ok = x && !bad && seen == 1u << c;
        all |= seen;
        if (ok && !c) first = x, x = NULL;
        else if (ok) ok = !strcmp(first, x);
        free(s);
        free(x);
    }
    if (ok && all == (1u << w) - 1) {
        char *s = rt_text(ctx, t[0]);
        bool bad = false;
        unsigned seen = 0;
        *term0 = s ? member_subst(s, p, rep, &bad, &seen) : NULL;
        free(s);
    }
    free(first);
    return *term0 != NULL;
}

/* A __device__ function of one float<w> parameter whose body returns a separable sum over it: its
 * definition, and the scalar overload's text (a new string). */
static char *scalar_overload(const kl_rule_ctx *ctx, const char *name, unsigned w, TSNode *def_out)
{
    TSNode def = rt_device_fn_named(ctx, name);
    *def_out = def;
    if (ts_node_is_null(def) || rt_is(ts_node_parent(def), "template_declaration")) return NULL;
    TSNode params = kl_ast_function_params(def), body = kl_ast_function_body(def);
    if (ts_node_named_child_count(params) != 1 || ts_node_named_child_count(body) != 1) return NULL;
    TSNode pd = ts_node_named_child(params, 0), ret = ts_node_named_child(body, 0);
    char type[64], want[16];
    kl_snprintf(want, sizeof want, "float%u", w);
    if (!rt_is(pd, "parameter_declaration") || !rt_text_unblank_to(ctx, rt_field(pd, "type"), type, sizeof type) ||
        strcmp(type, want) || !rt_is(ret, "return_statement") || ts_node_named_child_count(ret) != 1)
        return NULL;
    TSNode decl = rt_field(pd, "declarator");
    while (rt_is(decl, "reference_declarator")) decl = ts_node_named_child(decl, 0);
    char p[64];
    if (!rt_is(decl, "identifier") || !rt_text_copy(ctx, decl, p, sizeof p)) return NULL;
    char *term = NULL;
    if (!separable(ctx, ts_node_named_child(ret, 0), p, w, p, &term)) return NULL;
    /* the definition up to its parameter list, the scalar parameter, the term */
    TSNode fd = rt_field(def, "declarator");
    while (!ts_node_is_null(fd) && !rt_is(fd, "function_declarator")) fd = rt_field(fd, "declarator");
    if (ts_node_is_null(fd)) {
        free(term);
        return NULL;
    }
    uint32_t a = ts_node_start_byte(def), b = ts_node_start_byte(rt_field(fd, "parameters"));
    size_t len = (b - a) + strlen(p) + strlen(term) + 64;
    char *out = malloc(len);
    if (out) kl_snprintf(out, len, "\n%.*s(float %s) { return %s; }", (int)(b - a), ctx->text + a, p, term);
    free(term);
    return out;
}

/* ---- the form ------------------------------------------------------------------------------------ */

#define CV_MAX 16

typedef struct cv_edit {
    uint32_t a, b;
    char *text;
} cv_edit;

typedef struct cv_form {
    unsigned w;
    TSNode first;                 /* the first gather */
    char array[64];               /* the array they read */
    unsigned ngather;
    char idents[CV_MAX][64];      /* identifiers of the gathers' item indices */
    unsigned nidents;
    char vars[4][64];             /* float<w> locals the gathers are stored to */
    unsigned nvars;
    char *accs[GS_MAXACCUM];      /* what the terms are added to */
    unsigned naccs;
    uint32_t ra[CV_MAX], rb[CV_MAX]; /* the statements adding them */
    unsigned nr;
    char fns[2][64];              /* separable functions used, and their definitions */
    TSNode fdefs[2];
    char *overloads[2];
    unsigned nfns;
    char count[64];               /* N, the item count */
    int count_param;              /* its position among the kernel's parameters */
    cv_edit edits[3 * CV_MAX];
    unsigned nedits;
    char why[300];
} cv_form;

static void form_release(cv_form *f)
{
    for (unsigned i = 0; i < f->nedits; i++) free(f->edits[i].text);
    for (unsigned i = 0; i < f->naccs; i++) free(f->accs[i]);
    for (unsigned i = 0; i < f->nfns; i++) free(f->overloads[i]);
}

static void add_edit(cv_form *f, uint32_t a, uint32_t b, char *text)
{
    if (!text || f->nedits == sizeof f->edits / sizeof f->edits[0]) {
        if (!f->why[0]) kl_snprintf(f->why, sizeof f->why, text ? "too many places to edit" : "out of memory");
        free(text);
        return;
    }
    f->edits[f->nedits++] = (cv_edit){a, b, text};
}

typedef struct id_scan {
    const kl_rule_ctx *ctx;
    cv_form *f;
} id_scan;

static bool id_visit(TSNode n, void *user)
{
    id_scan *s = user;
    char t[64];
    if (rt_is(n, "identifier") && rt_text_copy(s->ctx, n, t, sizeof t) && !coarsen__in_list(s->f->idents, s->f->nidents, t) &&
        s->f->nidents < CV_MAX)
        kl_snprintf(s->f->idents[s->f->nidents++], 64, "%s", t);
    return true;
}

/* `make_floatW(X[I], X[I + 1], …)` with I = `b + W * E` or `W * E`: true with f->array, and E's
 * node and b's text (a new string, "" for none) into *e and *base. */
static bool gather(const kl_rule_ctx *ctx, TSNode call, unsigned *w, char *array, TSNode *e, char **base)
{
    char callee[32];
    if (!rt_is(call, "call_expression") || !rt_callee_name(ctx, call, callee, sizeof callee)) return false;
    unsigned wv = !strcmp(callee, "make_float4") ? 4 : !strcmp(callee, "make_float2") ? 2 : 0;
    TSNode args = rt_field(call, "arguments");
    if (!wv || ts_node_named_child_count(args) != wv) return false;
    char arr[64];
    TSNode i0 = {{0}, 0, 0};
    *base = NULL;
    for (unsigned c = 0; c < wv; c++) {
        TSNode a = rt_bare(ts_node_named_child(args, c));
        TSNode base_arr = rt_bare(rt_field(a, "argument")); /* a named array: not an element of one (`acc[o][0]`) */
        if (!rt_is(a, "subscript_expression") || !rt_is(base_arr, "identifier") || !rt_text_copy(ctx, base_arr, arr, sizeof arr))
            goto no;
        if (!c) kl_snprintf(array, 64, "%s", arr);
        else if (strcmp(arr, array)) goto no;
        TSNode idx = rt_field(a, "indices");
        if (rt_is(idx, "subscript_argument_list")) idx = ts_node_named_child(idx, 0);
        if (!c) {
            i0 = idx;
            /* b + W * E, or W * E */
            TSNode x = kl_ast_unparen(idx), prod = x;
            if (rt_op_is(ctx, x, "+")) prod = kl_ast_unparen(rt_field(x, "right"));
            char wt[8];
            kl_snprintf(wt, sizeof wt, "%u", wv);
            if (!rt_op_is(ctx, prod, "*") || !rt_text_is(ctx, rt_field(prod, "left"), wt)) goto no;
            *e = rt_field(prod, "right");
            *base = ts_node_eq(prod, x) ? kl_strdup("") : rt_text(ctx, rt_field(x, "left"));
            if (!*base) goto no;
        } else {
            /* I + c: the first element's index as written, plus the literal c */
            TSNode x = kl_ast_unparen(idx);
            int64_t v = 0;
            if (!rt_op_is(ctx, x, "+") || !rt_is(rt_field(x, "right"), "number_literal") ||
                !kl_const_eval(ctx->src, (TSNode){{0}, 0, 0}, rt_field(x, "right"), false, &v, NULL, 0) || v != c ||
                !rt_same_text(ctx, rt_field(x, "left"), i0))
                goto no;
        }
    }
    *w = wv;
    return true;
no:
    free(*base);
    *base = NULL;
    return false;
}

/* The statement `A += …` (A a name or an element of one) holding n: A into f->accs and the
 * statement's range into f->ra/rb; else why. */
static void adds_to(const kl_rule_ctx *ctx, cv_form *f, TSNode n)
{
    TSNode s = n;
    while (!ts_node_is_null(s) && !rt_is(s, "expression_statement")) s = ts_node_parent(s);
    TSNode a = ts_node_is_null(s) ? s : ts_node_named_child(s, 0);
    TSNode l = rt_is(a, "assignment_expression") ? rt_bare(rt_field(a, "left")) : (TSNode){{0}, 0, 0};
    if (rt_is(l, "subscript_expression")) l = rt_bare(rt_field(l, "argument"));
    char name[64];
    if (!rt_is(a, "assignment_expression") || !rt_text_is(ctx, rt_field(a, "operator"), "+=") || !rt_is(l, "identifier") ||
        !rt_text_copy(ctx, l, name, sizeof name)) {
        kl_snprintf(f->why, sizeof f->why, "line %u uses the vector's components other than in a sum added to a local",
                    kl_ast_line(n));
        return;
    }
    bool seen = false;
    for (unsigned i = 0; i < f->naccs && !seen; i++) seen = !strcmp(f->accs[i], name);
    if (!seen && f->naccs == GS_MAXACCUM) {
        kl_snprintf(f->why, sizeof f->why, "the vectors' sums go to more than %d locals", GS_MAXACCUM);
        return;
    }
    if (!seen && !(f->accs[f->naccs++] = kl_strdup(name))) {
        f->naccs--;
        kl_snprintf(f->why, sizeof f->why, "out of memory");
        return;
    }
    if (f->nr == CV_MAX) {
        kl_snprintf(f->why, sizeof f->why, "more than %d sums of vectors", CV_MAX);
        return;
    }
    f->ra[f->nr] = ts_node_start_byte(s), f->rb[f->nr++] = ts_node_end_byte(s);
}

/* A use of the vector v (text vt: `v`, `v[u]`) at node at (the whole vector expression): the
 * argument of a separable function, or a component inside a separable sum. */
static void consume(const kl_rule_ctx *ctx, cv_form *f, TSNode at, const char *vt)
{
    TSNode up = lift(at), p = ts_node_parent(up);
    unsigned line = kl_ast_line(at);
    if (rt_is(p, "argument_list") && ts_node_named_child_count(p) == 1 && rt_is(ts_node_parent(p), "call_expression")) {
        char name[64];
        TSNode call = ts_node_parent(p);
        if (!rt_callee_name(ctx, call, name, sizeof name)) {
            kl_snprintf(f->why, sizeof f->why, "line %u passes the vector to a call not followed", line);
            return;
        }
        if (!coarsen__in_list(f->fns, f->nfns, name)) {
            TSNode def;
            char *ov = f->nfns < 2 ? scalar_overload(ctx, name, f->w, &def) : NULL;
            if (!ov) {
                kl_snprintf(f->why, sizeof f->why,
                            "line %u passes the vector to %s, which is not one function returning a sum over its components",
                            line, name);
                return;
            }
            kl_snprintf(f->fns[f->nfns], 64, "%s", name);
            f->fdefs[f->nfns] = def;
            f->overloads[f->nfns++] = ov;
        }
        adds_to(ctx, f, call);
        return;
    }
    /* v.c inside a sum: the innermost expression around the member that is one */
    if (rt_is(p, "field_expression")) {
        for (TSNode s = ts_node_parent(p); rt_is(s, "binary_expression") || rt_is(s, "parenthesized_expression") ||
                                           rt_is(s, "unary_expression") || rt_is(s, "call_expression") ||
                                           rt_is(s, "argument_list") || rt_is(s, "field_expression");
             s = ts_node_parent(s)) {
            char *term = NULL;
            if (!rt_op_is(ctx, s, "+") || !separable(ctx, s, vt, f->w, vt, &term)) continue;
            add_edit(f, ts_node_start_byte(s), ts_node_end_byte(s), term);
            adds_to(ctx, f, s);
            return;
        }
    }
    kl_snprintf(f->why, sizeof f->why, "line %u uses the vector other than by a sum over its components", line);
}

typedef struct cv_scan {
    const kl_rule_ctx *ctx;
    cv_form *f;
    TSNode fn;
    int pass; /* 0: the gathers; 1: the uses of the vector locals */
} cv_scan;

static bool gather_visit(TSNode n, void *user)
{
    cv_scan *sc = user;
    cv_form *f = sc->f;
    const kl_rule_ctx *ctx = sc->ctx;
    if (f->why[0]) return false;
    if (sc->pass == 1) {
        /* every use of a vector local: its declaration, a store of a gather (edited already), a consumer */
        char name[64];
        if (!rt_is(n, "identifier") || !rt_text_copy(ctx, n, name, sizeof name) || !coarsen__in_list(f->vars, f->nvars, name))
            return true;
        TSNode p = ts_node_parent(n);
        if (rt_is(p, "array_declarator") || rt_is(p, "init_declarator") || rt_is(p, "declaration")) return true;
        for (unsigned i = 0; i < f->nedits; i++) /* inside a sum already taken apart */
            if (ts_node_start_byte(n) >= f->edits[i].a && ts_node_end_byte(n) <= f->edits[i].b) return true;
        TSNode whole = rt_is(p, "subscript_expression") && ts_node_eq(rt_field(p, "argument"), n) ? p : n;
        TSNode q = ts_node_parent(lift(whole));
        if (rt_is(q, "assignment_expression") && ts_node_eq(rt_bare(rt_field(q, "left")), whole) &&
            rt_text_is(ctx, rt_field(q, "operator"), "=")) {
            char a[64];
            TSNode r = rt_bare(rt_field(q, "right"));
            unsigned w;
            TSNode e;
            char *b = NULL;
            bool g = gather(ctx, r, &w, a, &e, &b);
            free(b);
            if (g && w == f->w && !strcmp(a, f->array)) return true;
            kl_snprintf(f->why, sizeof f->why, "line %u stores to the vector %s other than a gather", kl_ast_line(n), name);
            return false;
        }
        char *vt = rt_text_unblank(ctx, whole);
        if (!vt) kl_snprintf(f->why, sizeof f->why, "out of memory");
        else consume(ctx, f, whole, vt);
        free(vt);
        return !f->why[0];
    }
    unsigned w;
    char array[64];
    TSNode e;
    char *base = NULL;
    if (!gather(ctx, n, &w, array, &e, &base)) return true;
    if (!f->ngather) {
        f->w = w, f->first = n;
        kl_snprintf(f->array, sizeof f->array, "%s", array);
    } else if (w != f->w || strcmp(array, f->array)) {
        kl_snprintf(f->why, sizeof f->why, "line %u gathers another width or array than line %u", kl_ast_line(n),
                    kl_ast_line(f->first));
        free(base);
        return false;
    }
    f->ngather++;
    id_scan is = {ctx, f};
    kl_ast_walk(e, id_visit, &is);
    char *et = rt_text(ctx, e);
    size_t len = strlen(array) + strlen(base) + (et ? strlen(et) : 0) + 16;
    char *rep = et ? malloc(len) : NULL;
    if (rep) kl_snprintf(rep, len, base[0] ? "%s[%s + %s]" : "%s[%s%s]", array, base, et);
    add_edit(f, ts_node_start_byte(n), ts_node_end_byte(n), rep);
    free(et);
    free(base);
    /* the gather's consumer: a separable call or sum right here, or a float<w> local stored to */
    TSNode up = lift(n), p = ts_node_parent(up);
    TSNode target = (TSNode){{0}, 0, 0};
    if (rt_is(p, "assignment_expression") && ts_node_eq(rt_field(p, "right"), up)) target = rt_bare(rt_field(p, "left"));
    else if (rt_is(p, "init_declarator")) target = rt_field(p, "declarator");
    if (ts_node_is_null(target)) {
        consume(ctx, f, n, "");
        return !f->why[0];
    }
    if (rt_is(target, "subscript_expression")) target = rt_bare(rt_field(target, "argument"));
    char name[64];
    TSNode decl = rt_is(target, "identifier") && rt_text_copy(ctx, target, name, sizeof name)
                      ? rt_find_decl(ctx, kl_ast_function_body(sc->fn), name, false, NULL)
                      : (TSNode){{0}, 0, 0};
    char type[32], want[16];
    kl_snprintf(want, sizeof want, "float%u", f->w);
    TSNode dcls[2];
    if (ts_node_is_null(decl) || !rt_is(decl, "declaration") || !rt_text_unblank_to(ctx, rt_field(decl, "type"), type, sizeof type) ||
        strcmp(type, want) || rt_declarators(decl, dcls, 2) != 1) {
        kl_snprintf(f->why, sizeof f->why, "line %u stores the gather to something not a local %s declared alone",
                    kl_ast_line(n), want);
        return false;
    }
    if (!coarsen__in_list(f->vars, f->nvars, name)) {
        if (f->nvars == 4) {
            kl_snprintf(f->why, sizeof f->why, "more than 4 vector locals");
            return false;
        }
        kl_snprintf(f->vars[f->nvars++], 64, "%s", name);
        TSNode t = rt_field(decl, "type");
        add_edit(f, ts_node_start_byte(t), ts_node_end_byte(t), kl_strdup("float"));
    }
    return true;
}

/* The kernel's item count: the one parameter compared with an expression holding a gather's index,
 * used in the kernel by comparisons only. */
typedef struct cnt_scan {
    const kl_rule_ctx *ctx;
    cv_form *f;
    kl_affine_ctx *ax;
    char found[4][64];
    unsigned nfound;
} cnt_scan;

static bool is_cmp(const kl_rule_ctx *ctx, TSNode e)
{
    return rt_op_is(ctx, e, "<") || rt_op_is(ctx, e, "<=") || rt_op_is(ctx, e, ">") || rt_op_is(ctx, e, ">=");
}

static bool has_index(const kl_rule_ctx *ctx, const cv_form *f, TSNode e)
{
    for (unsigned i = 0; i < f->nidents; i++)
        if (rt_count_ident(ctx, e, f->idents[i])) return true;
    return false;
}

static bool cnt_visit(TSNode n, void *user)
{
    cnt_scan *s = user;
    if (!is_cmp(s->ctx, n)) return true;
    for (int side = 0; side < 2; side++) {
        TSNode a = rt_bare(rt_field(n, side ? "left" : "right")), b = rt_field(n, side ? "right" : "left");
        char name[64];
        if (rt_is(a, "identifier") && rt_text_copy(s->ctx, a, name, sizeof name) && kl_affine_param_index(s->ax, name) >= 0 &&
            has_index(s->ctx, s->f, b) && !coarsen__in_list(s->found, s->nfound, name) && s->nfound < 4)
            kl_snprintf(s->found[s->nfound++], 64, "%s", name);
    }
    return true;
}

typedef struct use_scan {
    const kl_rule_ctx *ctx;
    const char *name;
    unsigned bad;
} use_scan;

static bool cmp_use_visit(TSNode n, void *user)
{
    use_scan *u = user;
    if (u->bad || !rt_is(n, "identifier") || !rt_text_is(u->ctx, n, u->name)) return !u->bad;
    TSNode p = ts_node_parent(lift(n));
    while (rt_is(p, "cast_expression")) p = ts_node_parent(lift(p));
    if (!is_cmp(u->ctx, p)) u->bad = kl_ast_line(n);
    return true;
}

static void find_count(const kl_rule_ctx *ctx, TSNode body, kl_affine_ctx *ax, cv_form *f)
{
    cnt_scan s = {ctx, f, ax, {{0}}, 0};
    kl_ast_walk(body, cnt_visit, &s);
    if (s.nfound != 1) {
        kl_snprintf(f->why, sizeof f->why, s.nfound ? "the gathers' indices are compared with %u parameters" :
                                                      "the gathers' indices are compared with no parameter (the item count)",
                    s.nfound);
        return;
    }
    kl_snprintf(f->count, sizeof f->count, "%s", s.found[0]);
    use_scan u = {ctx, f->count, 0};
    kl_ast_walk(body, cmp_use_visit, &u);
    if (u.bad) {
        kl_snprintf(f->why, sizeof f->why, "line %u uses the item count %s other than in a comparison", u.bad, f->count);
        return;
    }
    f->count_param = kl_affine_param_index(ax, f->count);
}

/* The vector form in kernel fn: true when there are gathers (f->why says why they cannot be taken
 * apart, if so); f is the caller's to release (form_release). */
static bool analyse(const kl_rule_ctx *ctx, TSNode fn, kl_affine_ctx *ax, cv_form *f)
{
    memset(f, 0, sizeof *f);
    TSNode body = kl_ast_function_body(fn);
    cv_scan sc = {ctx, f, fn, 0};
    kl_ast_walk(body, gather_visit, &sc);
    if (!f->ngather) return false;
    if (f->why[0]) return true;
    sc.pass = 1;
    kl_ast_walk(body, gather_visit, &sc);
    if (f->why[0]) return true;
    find_count(ctx, body, ax, f);
    if (f->why[0]) return true;
    if (!f->naccs) kl_snprintf(f->why, sizeof f->why, "the vectors' sums are added to nothing");
    else grid_stride__partials_by_sums(ctx, fn, ax, f->accs, f->naccs, f->ra, f->rb, f->nr, f->why, sizeof f->why);
    return true;
}

/* The launches: the count's argument W * (N), the grid W * (G). */
static kl_status launch_edits(const kl_rule_ctx *ctx, const char *kernel, const cv_form *f, kl_edits *out, kl_error *err)
{
    rt_launch ls[16];
    unsigned n = rt_launches(ctx, kernel, ls, 16);
    for (unsigned i = 0; i < n && i < 16; i++) {
        TSNode a = ts_node_named_child(ls[i].args, (uint32_t)f->count_param);
        if (f->count_param < 0 || ts_node_is_null(a))
            return kl_rule_not_applicable(err, "the launch at line %u passes no item count", kl_ast_line(ls[i].call));
        char *t = rt_text(ctx, a);
        kl_status st = t ? kl_edits_addf(out, ts_node_start_byte(a), ts_node_end_byte(a), "%u * (%s)", f->w, t) : KL_ERR_NOMEM;
        free(t);
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    }
    return coarsen__grid_edits(ctx, kernel, f->w, 0, out, err);
}

kl_status coarsen__vector_visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, kl_sites *sites,
                                const kl_site *site, kl_edits *edits, kl_error *err, bool *found)
{
    cv_form f;
    if (!analyse(ctx, fn, ax, &f)) {
        form_release(&f);
        return KL_OK;
    }
    char id[256];
    kl_site_id(id, sizeof id, name, f.first, f.array);
    kl_status st = KL_OK;
    if (site) {
        if (strcmp(id, site->id)) {
            form_release(&f);
            return KL_OK;
        }
        *found = true;
        if (f.why[0]) st = kl_rule_not_applicable(err, "%s", f.why);
        for (unsigned i = 0; i < f.nedits && st == KL_OK; i++)
            st = kl_edits_add(edits, f.edits[i].a, f.edits[i].b, f.edits[i].text);
        for (unsigned i = 0; i < f.nfns && st == KL_OK; i++) {
            uint32_t end = ts_node_end_byte(f.fdefs[i]);
            st = kl_edits_add(edits, end, end, f.overloads[i]);
        }
        if (st == KL_ERR_NOMEM) st = kl_error_set(err, st, "out of memory");
        if (st == KL_OK) st = launch_edits(ctx, name, &f, edits, err);
        form_release(&f);
        return st;
    }
    json_t *feat = json_pack("{s:s, s:I, s:s, s:s}", "array", f.array, "elements", (json_int_t)f.w, "count",
                             f.count[0] ? f.count : "", "form", "vector");
    if (!feat) {
        form_release(&f);
        return KL_ERR_NOMEM;
    }
    if (f.why[0]) json_object_set_new(feat, "why_not", json_string(f.why));
    char note[400];
    if (f.why[0]) kl_snprintf(note, sizeof note, "%s", f.why);
    else
        kl_snprintf(note, sizeof note, "%u consecutive elements of %s per thread, gathered into a float%u and summed", f.w,
                    f.array, f.w);
    st = kl_sites_add(sites, id, KL_SITE_PRESENT, kl_node_span(f.first), name, feat, NULL, note);
    form_release(&f);
    return st;
}
