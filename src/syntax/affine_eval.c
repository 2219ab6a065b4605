/* The index analysis, its evaluating part (affine_int.h): the macros and file-level constants of
 * a source, the evaluator of an index expression in a kernel — one walk that gives both views of
 * it, the affine form and the polynomial over every name (affine_poly.c holds their arithmetic) —
 * and the constant evaluator (kl_const_eval). */
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "syntax/affine.h"
#include "syntax/affine_int.h"
#include "syntax/memo.h"
#include "util/util.h"

static const TSNode null_node; /* a null node: zero-initialised */

typedef struct ce_memo ce_memo;

/* ======================================================================================
 * macros and file-level constants
 * ====================================================================================== */

static void macros_release(affine__macro_table *m)
{
    for (unsigned i = 0; i < m->count; i++) {
        free(m->items[i].name);
        for (unsigned k = 0; k < m->items[i].nparams; k++) free(m->items[i].params[k]);
        free(m->items[i].params);
        free(m->items[i].body);
    }
    free(m->items);
    memset(m, 0, sizeof *m);
}

static const affine__macro_def *macro_find(const affine__macro_table *m, const char *name)
{
    for (unsigned i = 0; i < m->count; i++)
        if (!strcmp(m->items[i].name, name)) return &m->items[i];
    return NULL;
}

typedef struct macro_collect {
    const kl_source *src;
    affine__macro_table *t;
    bool oom;
} macro_collect;

static bool collect_macro(TSNode n, void *user)
{
    macro_collect *mc = user;
    bool fl = affine__type_is(n, "preproc_function_def");
    if (!fl && !affine__type_is(n, "preproc_def")) return !affine__type_is(n, "function_definition");
    TSNode name = ts_node_child_by_field_name(n, "name", 4);
    TSNode value = ts_node_child_by_field_name(n, "value", 5);
    char *nm = kl_node_text(mc->src, name);
    if (!nm) {
        mc->oom = true;
        return false;
    }
    for (unsigned i = 0; i < mc->t->count; i++) {
        if (!strcmp(mc->t->items[i].name, nm)) {
            mc->t->items[i].defs++;
            free(nm);
            return false;
        }
    }
    affine__macro_def d;
    memset(&d, 0, sizeof d);
    d.name = nm;
    d.defs = 1;
    d.function_like = fl;
    d.body = ts_node_is_null(value) ? kl_strdup("") : kl_node_text(mc->src, value);
    if (fl) {
        TSNode ps = ts_node_child_by_field_name(n, "parameters", 10);
        uint32_t c = ts_node_named_child_count(ps);
        d.params = calloc(c ? c : 1, sizeof *d.params);
        for (uint32_t i = 0; d.params && i < c; i++) d.params[d.nparams++] = kl_node_text(mc->src, ts_node_named_child(ps, i));
    }
    affine__macro_def *items = realloc(mc->t->items, (mc->t->count + 1) * sizeof *items);
    if (!items || !d.body || (fl && !d.params)) {
        if (items) mc->t->items = items;
        free(d.name);
        free(d.body);
        for (unsigned k = 0; k < d.nparams; k++) free(d.params[k]);
        free(d.params);
        mc->oom = true;
        return false;
    }
    mc->t->items = items;
    items[mc->t->count++] = d;
    return false;
}

/* Strip trailing line comments and whitespace from a macro body. */
static char *macro_body_clean(const char *body)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    for (const char *p = body; *p; p++) {
        if (p[0] == '/' && p[1] == '/') break;
        if (p[0] == '\\' && (p[1] == '\n' || (p[1] == '\r' && p[2] == '\n'))) {
            kl_strbuf_addc(&sb, ' ');
            p += (p[1] == '\r') ? 2 : 1;
            continue;
        }
        if (p[0] == '/' && p[1] == '*') {
            const char *e = strstr(p + 2, "*/");
            if (!e) break;
            p = e + 1;
            kl_strbuf_addc(&sb, ' ');
            continue;
        }
        kl_strbuf_addc(&sb, *p);
    }
    char *s = kl_strbuf_detach(&sb, NULL);
    if (!s) return kl_strdup("");
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    size_t lead = 0;
    while (s[lead] && isspace((unsigned char)s[lead])) lead++;
    memmove(s, s + lead, n - lead + 1);
    return s;
}

/* ======================================================================================
 * the evaluator
 * ====================================================================================== */

static char *squeeze(const char *t)
{
    /* collapse whitespace: keep one space only between two word characters */
    kl_strbuf sb = KL_STRBUF_INIT;
    char prev = 0;
    bool pending = false;
    for (const char *p = t; *p; p++) {
        if (isspace((unsigned char)*p)) {
            pending = true;
            continue;
        }
        bool w = isalnum((unsigned char)*p) || *p == '_';
        bool pw = isalnum((unsigned char)prev) || prev == '_';
        if (pending && w && pw) kl_strbuf_addc(&sb, ' ');
        pending = false;
        kl_strbuf_addc(&sb, *p);
        prev = *p;
    }
    char *r = kl_strbuf_detach(&sb, NULL);
    return r ? r : kl_strdup("");
}

static const char *node_sym(kl_affine_ctx *ctx, const kl_source *s, TSNode n)
{
    char *t = kl_node_text(s, n);
    if (!t) return "";
    char *q = squeeze(t);
    free(t);
    const char *r = affine__intern(ctx, q ? q : "");
    free(q);
    return r;
}

static bool is_int_type_text(const char *t)
{
    static const char *const ok[] = {"int", "unsigned", "unsigned int", "long", "unsigned long", "long long",
                                     "unsigned long long", "size_t", "ssize_t", "ptrdiff_t", "int64_t", "uint64_t",
                                     "int32_t", "uint32_t", "short", "unsigned short", "long int", "signed",
                                     "signed int", "index_t", "uint", "const int", "const size_t", "std::size_t",
                                     "std::int64_t", "long unsigned int", "unsigned long int", "intptr_t",
                                     "uintptr_t", "int16_t", "uint16_t", NULL};
    for (int i = 0; ok[i]; i++)
        if (!strcmp(t, ok[i])) return true;
    return false;
}

static bool parse_int_literal(const char *t, int64_t *v)
{
    char *end;
    long long x;
    if (t[0] == '0' && (t[1] == 'x' || t[1] == 'X'))
        x = (long long)strtoull(t + 2, &end, 16);
    else if (t[0] == '0' && (t[1] == 'b' || t[1] == 'B'))
        x = (long long)strtoull(t + 2, &end, 2);
    else if (t[0] == '0' && t[1])
        x = (long long)strtoull(t + 1, &end, 8);
    else
        x = (long long)strtoull(t, &end, 10);
    if (end == t) return false;
    for (const char *p = end; *p; p++)
        if (!strchr("uUlL'", *p)) return false;
    *v = x;
    return true;
}

/* Parse `text` as one expression in a scratch source (cached by text). */
static bool mini_parse(kl_affine_ctx *ctx, const char *text, const kl_source **s, TSNode *expr)
{
    for (unsigned i = 0; i < ctx->nminis; i++) {
        if (!strcmp(ctx->minis[i].key, text)) {
            *s = ctx->minis[i].src;
            *expr = ctx->minis[i].expr;
            return ctx->minis[i].ok;
        }
    }
    affine__mini_src m;
    memset(&m, 0, sizeof m);
    m.key = kl_strdup(text);
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "void __kl_expr(void) { (%s); }\n", text);
    kl_error err = {0};
    if (m.key && !sb.failed &&
        kl_source_parse_text("<macro>", kl_strbuf_str(&sb), sb.len, &m.src, &err) == KL_OK && !kl_source_partial(m.src)) {
        TSNode fn = kl_ast_child_of_type(kl_source_root(m.src), "function_definition");
        TSNode body = kl_ast_function_body(fn);
        TSNode st = kl_ast_child_of_type(body, "expression_statement");
        TSNode pe = ts_node_named_child(st, 0);
        if (affine__type_is(pe, "parenthesized_expression") && ts_node_named_child_count(pe) == 1) {
            m.expr = ts_node_named_child(pe, 0);
            m.ok = true;
        }
    }
    kl_strbuf_release(&sb);
    affine__mini_src *items = realloc(ctx->minis, (ctx->nminis + 1) * sizeof *items);
    if (!items || !m.key) {
        free(m.key);
        kl_source_free(m.src);
        ctx->oom = true;
        return false;
    }
    ctx->minis = items;
    items[ctx->nminis++] = m;
    *s = m.src;
    *expr = m.expr;
    return m.ok;
}

/* Substitute a function-like macro's parameters by "(arg)" token-wise. NULL when the body
 * uses # or ## (not expanded here). */
static char *macro_expand(const affine__macro_def *d, char *const *args)
{
    char *body = macro_body_clean(d->body);
    if (!body) return NULL;
    if (strchr(body, '#')) {
        free(body);
        return NULL;
    }
    kl_strbuf sb = KL_STRBUF_INIT;
    for (const char *p = body; *p;) {
        if (isalpha((unsigned char)*p) || *p == '_') {
            const char *q = p;
            while (isalnum((unsigned char)*q) || *q == '_') q++;
            size_t n = (size_t)(q - p);
            bool done = false;
            for (unsigned i = 0; i < d->nparams; i++) {
                if (strlen(d->params[i]) == n && !memcmp(d->params[i], p, n)) {
                    kl_strbuf_addf(&sb, "(%s)", args[i]);
                    done = true;
                    break;
                }
            }
            if (!done) kl_strbuf_add(&sb, p, n);
            p = q;
        } else {
            kl_strbuf_addc(&sb, *p++);
        }
    }
    free(body);
    return kl_strbuf_detach(&sb, NULL);
}

const affine__local_var *affine__local_find(const kl_affine_ctx *ctx, const char *name)
{
    for (unsigned i = 0; i < ctx->nlocals; i++)
        if (!strcmp(ctx->locals[i].name, name)) return &ctx->locals[i];
    return NULL;
}

unsigned kl_affine_assign_count(const kl_affine_ctx *ctx, const char *name)
{
    for (unsigned i = 0; i < ctx->ncounts; i++)
        if (!strcmp(ctx->counts[i].name, name)) return ctx->counts[i].n;
    return 0;
}

bool affine__node_within(TSNode inner, TSNode outer)
{
    return ts_node_start_byte(inner) >= ts_node_start_byte(outer) && ts_node_end_byte(inner) <= ts_node_end_byte(outer);
}

/* The loop (index) whose variable is `name` and which encloses `anchor`, innermost first. */
int affine__enclosing_loop_with_var(const kl_affine_ctx *ctx, const char *name, TSNode anchor)
{
    int best = -1;
    for (unsigned i = 0; i < ctx->nloops; i++) {
        const kl_ax_loop *L = &ctx->loops[i];
        if (!L->var || strcmp(L->var, name)) continue;
        if (!affine__node_within(anchor, L->node)) continue;
        if (best < 0 || ctx->loops[i].depth > ctx->loops[best].depth) best = (int)i;
    }
    return best;
}

/* A file-level `constexpr`/`const` integer, or a const local of the kernel: its initializer. */
static TSNode global_const_init(const kl_source *s, const char *name);

static affine__form eval_identifier(kl_affine_ctx *ctx, const affine__env *e, const kl_source *s, TSNode n, TSNode anchor, int depth)
{
    char *name = kl_node_text(s, n);
    if (!name) return affine__form_bad("out of memory");
    affine__form r;
    bool atom = false; /* not affine for what the name is: in the polynomial view, a factor of its own */
    for (unsigned i = 0; i < e->nb; i++) {
        if (!strcmp(e->b[i].name, name)) {
            r = e->b[i].value;
            goto done;
        }
    }
    if (!e->in_helper) {
        int L = affine__enclosing_loop_with_var(ctx, name, anchor);
        if (L >= 0) {
            r = affine__form_var(ctx, name);
            goto done;
        }
        const affine__local_var *lv = affine__local_find(ctx, name);
        if (lv) {
            unsigned cnt = kl_affine_assign_count(ctx, name);
            atom = true;
            if (lv->is_array) {
                r = affine__form_badf(ctx, "'%s' is an array, not an index (line %u)", name, affine__line_of(n));
            } else if (cnt == 1 && !ts_node_is_null(lv->def)) {
                /* the definition must come before the use */
                if (ts_node_start_byte(lv->def) > ts_node_start_byte(anchor) && s == ctx->src)
                    r = affine__form_badf(ctx, "'%s' is used before it is assigned (line %u)", name, affine__line_of(n));
                else {
                    r = affine__eval(ctx, e, ctx->src, lv->def, lv->def, depth + 1);
                    atom = false;
                }
            } else if (cnt == 0) {
                r = affine__form_badf(ctx, "'%s' is never assigned (line %u)", name, affine__line_of(n));
            } else {
                /* a loop variable used outside its loop, or a variable updated in place */
                r = affine__form_badf(ctx, "'%s' is assigned %u times (line %u)", name, cnt, affine__line_of(n));
            }
            goto done;
        }
        int p = kl_affine_param_index(ctx, name);
        if (p >= 0) {
            atom = kl_affine_assign_count(ctx, name) > 0 || ctx->params[p].pointer;
            if (kl_affine_assign_count(ctx, name) > 0)
                r = affine__form_badf(ctx, "parameter '%s' is modified in the kernel (line %u)", name, affine__line_of(n));
            else if (ctx->params[p].pointer)
                r = affine__form_badf(ctx, "'%s' is a pointer, not an index (line %u)", name, affine__line_of(n));
            else
                r = affine__form_const(ctx, affine__poly_sym(ctx, name));
            goto done;
        }
    }
    const affine__macro_def *md = macro_find(ctx->macros, name);
    if (md) {
        atom = true;
        if (md->function_like) {
            r = affine__form_badf(ctx, "macro '%s' used without arguments (line %u)", name, affine__line_of(n));
        } else if (md->defs > 1) {
            r = affine__form_badf(ctx, "macro '%s' is defined more than once", name);
        } else {
            char *body = macro_body_clean(md->body);
            const kl_source *ms;
            TSNode me;
            if (body && mini_parse(ctx, body, &ms, &me)) {
                affine__form f = affine__eval(ctx, e, ms, me, anchor, depth + 1);
                /* an invariant macro is kept as its name: coefficients read like the source; the
                 * polynomial view is the expansion */
                int64_t v;
                if (f.ok && f.nv == 0 && !affine__poly_is_int(f.cst, &v)) {
                    r = affine__form_const(ctx, affine__poly_sym(ctx, name));
                    r.pv = f.pv;
                } else {
                    r = f;
                }
                atom = false;
            } else {
                r = affine__form_badf(ctx, "macro '%s' does not expand to a simple expression", name);
            }
            free(body);
        }
        goto done;
    }
    TSNode gi = global_const_init(ctx->src, name);
    if (!ts_node_is_null(gi)) {
        int64_t v;
        if (kl_const_eval(ctx->src, ctx->fn, gi, false, &v, NULL, 0))
            r = affine__form_const(ctx, affine__poly_int(ctx, v));
        else
            r = affine__form_const(ctx, affine__poly_sym(ctx, name));
        goto done;
    }
    /* template parameters, enumerators, other globals: launch-invariant symbols */
    r = affine__form_const(ctx, affine__poly_sym(ctx, name));
done:
    if (atom) r.pv = affine__pv_name(ctx, name);
    free(name);
    return r;
}

static bool pv_is_int(kl_poly p, int64_t *v) { return !p.opaque && affine__poly_is_int((affine__poly){p.m, p.n}, v); }

/* Invariant operand pair or the reason it is not: used for / % >> & | etc. */
static affine__form invariant_op(kl_affine_ctx *ctx, const kl_source *s, TSNode n, affine__form a, affine__form b, const char *op)
{
    if (!a.ok) return a;
    if (!b.ok) return b;
    if (a.nv == 0 && b.nv == 0) {
        int64_t x, y;
        if (affine__poly_is_int(a.cst, &x) && affine__poly_is_int(b.cst, &y)) {
            if (!strcmp(op, "/") && y != 0) return affine__form_const(ctx, affine__poly_int(ctx, x / y));
            if (!strcmp(op, "%") && y != 0) return affine__form_const(ctx, affine__poly_int(ctx, x % y));
            if (!strcmp(op, ">>") && y >= 0 && y < 63) return affine__form_const(ctx, affine__poly_int(ctx, x >> y));
            if (!strcmp(op, "&")) return affine__form_const(ctx, affine__poly_int(ctx, x & y));
            if (!strcmp(op, "|")) return affine__form_const(ctx, affine__poly_int(ctx, x | y));
            if (!strcmp(op, "^")) return affine__form_const(ctx, affine__poly_int(ctx, x ^ y));
        }
        return affine__form_const(ctx, affine__poly_sym(ctx, node_sym(ctx, s, n)));
    }
    char *t = kl_node_text(s, n);
    affine__form f = affine__form_badf(ctx, "'%.60s' is not affine: '%s' of an index (line %u)", t ? t : "", op, affine__line_of(n));
    free(t);
    return f;
}

/* The same with its polynomial view: an integer where both operands are, else opaque. */
static affine__form opaque_if_invariant(kl_affine_ctx *ctx, const kl_source *s, TSNode n, affine__form a, affine__form b, const char *op)
{
    affine__form r = invariant_op(ctx, s, n, a, b, op);
    int64_t v;
    r.pv = r.ok && !r.nv && affine__poly_is_int(r.cst, &v) ? affine__pv_of(ctx, r.cst) : affine__pv_join(ctx, a.pv, b.pv);
    return r;
}

/* The polynomial view of what is no polynomial: opaque, reading what the named children of n read. */
static kl_poly reads_of(kl_affine_ctx *ctx, const affine__env *e, const kl_source *s, TSNode n, TSNode anchor, int depth)
{
    kl_poly r = affine__pv_opaque();
    uint32_t c = ts_node_named_child_count(n);
    for (uint32_t i = 0; i < c; i++)
        r = affine__pv_join(ctx, r, affine__eval(ctx, e, s, ts_node_named_child(n, i), anchor, depth + 1).pv);
    return r;
}

static affine__form eval_call(kl_affine_ctx *ctx, const affine__env *e, const kl_source *s, TSNode n, TSNode anchor, int depth)
{
    TSNode fnode = ts_node_child_by_field_name(n, "function", 8);
    TSNode args = ts_node_child_by_field_name(n, "arguments", 9);
    if (affine__type_is(fnode, "template_function")) {
        TSNode nm = ts_node_child_by_field_name(fnode, "name", 4);
        if (kl_node_text_is(s, nm, "static_cast") && ts_node_named_child_count(args) == 1)
            return affine__eval(ctx, e, s, ts_node_named_child(args, 0), anchor, depth + 1);
    }
    char *fname = kl_node_text(s, fnode);
    if (!fname) return affine__form_bad("out of memory");
    affine__form r;
    bool opaque = true; /* the polynomial view: what the arguments read, unless expanded */
    unsigned na = ts_node_named_child_count(args);
    const affine__macro_def *md = affine__type_is(fnode, "identifier") ? macro_find(ctx->macros, fname) : NULL;
    if (md && md->function_like && md->defs == 1) {
        if (md->nparams != na) {
            r = affine__form_badf(ctx, "macro '%s' takes %u arguments, given %u (line %u)", fname, md->nparams, na, affine__line_of(n));
            goto done;
        }
        char **argv = calloc(na ? na : 1, sizeof *argv);
        bool okargs = argv != NULL;
        for (unsigned i = 0; okargs && i < na; i++) {
            argv[i] = kl_node_text(s, ts_node_named_child(args, i));
            if (!argv[i]) okargs = false;
        }
        char *exp = okargs ? macro_expand(md, argv) : NULL;
        for (unsigned i = 0; argv && i < na; i++) free(argv[i]);
        free(argv);
        const kl_source *ms;
        TSNode me;
        if (exp && mini_parse(ctx, exp, &ms, &me)) {
            r = affine__eval(ctx, e, ms, me, anchor, depth + 1);
            opaque = false;
        } else {
            r = affine__form_badf(ctx, "macro '%s' does not expand to a simple expression (line %u)", fname, affine__line_of(n));
        }
        free(exp);
        goto done;
    }
    if (!strcmp(fname, "min") || !strcmp(fname, "max") || !strcmp(fname, "umin") || !strcmp(fname, "umax")) {
        bool inv = true;
        for (unsigned i = 0; i < na; i++) {
            affine__form a = affine__eval(ctx, e, s, ts_node_named_child(args, i), anchor, depth + 1);
            if (!a.ok || a.nv) inv = false;
        }
        r = inv ? affine__form_const(ctx, affine__poly_sym(ctx, node_sym(ctx, s, n)))
                : affine__form_badf(ctx, "'%s' of an index is not affine (line %u)", fname, affine__line_of(n));
        goto done;
    }
    /* a __device__ helper whose body is one return statement */
    TSNode helper = affine__type_is(fnode, "identifier") ? kl_ast_function_named(ctx->src, fname) : null_node;
    if (!ts_node_is_null(helper) && !ts_node_eq(helper, ctx->fn)) {
        TSNode body = kl_ast_function_body(helper);
        TSNode ps = kl_ast_function_params(helper);
        unsigned np = ts_node_named_child_count(ps);
        if (ts_node_named_child_count(body) != 1 || !affine__type_is(ts_node_named_child(body, 0), "return_statement")) {
            r = affine__form_badf(ctx, "helper '%s' is more than one return statement (line %u)", fname, affine__line_of(n));
            goto done;
        }
        if (np != na) {
            r = affine__form_badf(ctx, "helper '%s' called with %u arguments, it takes %u (line %u)", fname, na, np, affine__line_of(n));
            goto done;
        }
        affine__binding *bs = affine__alloc(ctx, (np ? np : 1) * sizeof *bs);
        if (!bs) {
            r = affine__form_bad("out of memory");
            goto done;
        }
        for (unsigned i = 0; i < np; i++) {
            TSNode pd = ts_node_named_child(ps, i);
            TSNode pn = kl_ast_declarator_name(ts_node_child_by_field_name(pd, "declarator", 10));
            bs[i].name = node_sym(ctx, ctx->src, pn);
            bs[i].value = affine__eval(ctx, e, s, ts_node_named_child(args, i), anchor, depth + 1);
        }
        affine__env he = {bs, np, true};
        TSNode ret = ts_node_named_child(ts_node_named_child(body, 0), 0);
        r = affine__eval(ctx, &he, ctx->src, ret, anchor, depth + 1);
        opaque = false;
        goto done;
    }
    if (!strcmp(fname, "__ldg") || kl_str_starts(fname, "__ld"))
        r = affine__form_badf(ctx, "'%s' loads from memory (line %u)", fname, affine__line_of(n));
    else
        r = affine__form_badf(ctx, "calls '%s' (line %u)", fname, affine__line_of(n));
done:
    if (opaque) r.pv = reads_of(ctx, e, s, args, anchor, depth);
    free(fname);
    return r;
}

/* The variable an lvalue names: `d` of `d`, `d.n`, `(d).m.k`; a null node for anything else
 * (`p->n`, `a[i]`: not a write to a variable of the kernel's own). */
TSNode affine__lvalue_variable(TSNode n)
{
    for (;;) {
        if (affine__type_is(n, "parenthesized_expression")) n = ts_node_named_child(n, 0);
        else if (affine__type_is(n, "field_expression") && !ts_node_is_null(ts_node_child_by_field_name(n, "operator", 8)) &&
                 ts_node_type(ts_node_child_by_field_name(n, "operator", 8))[0] == '.')
            n = ts_node_child_by_field_name(n, "argument", 8);
        else return affine__type_is(n, "identifier") ? n : (TSNode){0};
    }
}

/* Is the field expression n (`d.n`, `d.dims.m`) a member of a kernel parameter passed by value (no
 * pointer, no `->`) that the kernel never assigns, nor any member of it, nor takes its address? */
static bool uniform_member(const kl_affine_ctx *ctx, const affine__env *e, const kl_source *s, TSNode n)
{
    if (s != ctx->src) return false;
    TSNode v = affine__lvalue_variable(n);
    if (ts_node_is_null(v)) return false;
    char *name = kl_node_text(s, v);
    bool ok = name != NULL;
    for (unsigned i = 0; ok && i < e->nb; i++) ok = strcmp(e->b[i].name, name) != 0;
    int p = ok ? kl_affine_param_index(ctx, name) : -1;
    ok = ok && p >= 0 && !ctx->params[p].pointer && kl_affine_assign_count(ctx, name) == 0 && !affine__local_find(ctx, name);
    free(name);
    return ok;
}

affine__form affine__eval(kl_affine_ctx *ctx, const affine__env *e, const kl_source *s, TSNode n, TSNode anchor, int depth)
{
    if (depth > AFFINE_MAXDEPTH) return affine__form_bad("expression nests too deeply to analyse");
    if (ctx->oom) return affine__form_bad("out of memory");
    if (ts_node_is_null(n)) return affine__form_bad("missing expression");
    const char *t = ts_node_type(n);
    if (!strcmp(t, "number_literal")) {
        char *txt = kl_node_text(s, n);
        int64_t v;
        bool ok = txt && parse_int_literal(txt, &v);
        affine__form f = ok ? affine__form_const(ctx, affine__poly_int(ctx, v))
                    : affine__form_badf(ctx, "'%s' is not an integer (line %u)", txt ? txt : "", affine__line_of(n));
        free(txt);
        return f;
    }
    if (!strcmp(t, "parenthesized_expression")) return affine__eval(ctx, e, s, ts_node_named_child(n, 0), anchor, depth + 1);
    if (!strcmp(t, "identifier")) return eval_identifier(ctx, e, s, n, anchor, depth);
    if (!strcmp(t, "field_expression")) {
        if (kl_ast_less_misparse(s, n, NULL, NULL)) {
            affine__form r = affine__form_badf(ctx, "a comparison, not an index (line %u)", affine__line_of(n));
            r.pv = affine__pv_name(ctx, node_sym(ctx, s, n));
            return r;
        }
        TSNode arg = ts_node_child_by_field_name(n, "argument", 8);
        TSNode fld = ts_node_child_by_field_name(n, "field", 5);
        char *a = kl_node_text(s, arg), *f = kl_node_text(s, fld);
        affine__form r;
        if (!a || !f) {
            r = affine__form_bad("out of memory");
        } else if ((!strcmp(a, "threadIdx") || !strcmp(a, "blockIdx")) &&
                   (!strcmp(f, "x") || !strcmp(f, "y") || !strcmp(f, "z"))) {
            char v[32];
            kl_snprintf(v, sizeof v, "%s.%s", a, f);
            r = affine__form_var(ctx, v);
        } else if ((!strcmp(a, "blockDim") || !strcmp(a, "gridDim")) &&
                   (!strcmp(f, "x") || !strcmp(f, "y") || !strcmp(f, "z"))) {
            char v[32];
            kl_snprintf(v, sizeof v, "%s.%s", a, f);
            r = affine__form_const(ctx, affine__poly_sym(ctx, v));
        } else if (!e->in_helper && uniform_member(ctx, e, s, n)) {
            /* a member of a struct passed by value and never written in the kernel (`p.n` of
             * `struct Params p`): the same for every thread, a symbol like a size parameter */
            char *v = kl_node_text(s, n), *sq = v ? squeeze(v) : NULL;
            r = sq ? affine__form_const(ctx, affine__poly_sym(ctx, sq)) : affine__form_bad("out of memory");
            free(v);
            free(sq);
        } else {
            /* a member read (`p->n`, `s.k` of a local struct): in the polynomial view a name */
            r = affine__form_badf(ctx, "reads the member '%s.%s' (line %u)", a, f, affine__line_of(n));
            r.pv = affine__pv_name(ctx, node_sym(ctx, s, n));
        }
        free(a);
        free(f);
        return r;
    }
    if (!strcmp(t, "cast_expression")) {
        TSNode ty = ts_node_child_by_field_name(n, "type", 4);
        char *tt = kl_node_text(s, ty);
        char *sq = tt ? squeeze(tt) : NULL;
        bool ok = sq && is_int_type_text(sq);
        free(tt);
        affine__form r = affine__eval(ctx, e, s, ts_node_child_by_field_name(n, "value", 5), anchor, depth + 1);
        if (!ok) {
            /* the polynomial view passes any cast */
            kl_poly pv = r.pv;
            r = affine__form_badf(ctx, "a cast to '%s' (line %u)", sq ? sq : "?", affine__line_of(n));
            r.pv = pv;
        }
        free(sq);
        return r;
    }
    if (!strcmp(t, "unary_expression")) {
        TSNode op = ts_node_child_by_field_name(n, "operator", 8);
        affine__form a = affine__eval(ctx, e, s, ts_node_child_by_field_name(n, "argument", 8), anchor, depth + 1);
        if (kl_node_text_is(s, op, "-")) {
            affine__poly m1 = affine__poly_int(ctx, -1);
            affine__form r = affine__form_scale(ctx, a, m1);
            r.pv = affine__pv_mul(ctx, a.pv, affine__pv_of(ctx, m1));
            return r;
        }
        if (kl_node_text_is(s, op, "+")) return a;
        return opaque_if_invariant(ctx, s, n, a, affine__form_const(ctx, (affine__poly){0}), "unary operator");
    }
    if (!strcmp(t, "binary_expression")) {
        TSNode op = ts_node_child_by_field_name(n, "operator", 8);
        char *o = kl_node_text(s, op);
        if (!o) return affine__form_bad("out of memory");
        affine__form a = affine__eval(ctx, e, s, ts_node_child_by_field_name(n, "left", 4), anchor, depth + 1);
        affine__form b = affine__eval(ctx, e, s, ts_node_child_by_field_name(n, "right", 5), anchor, depth + 1);
        affine__form r;
        if (!strcmp(o, "+")) {
            r = affine__form_add(ctx, a, b, 1);
            r.pv = affine__pv_add(ctx, a.pv, b.pv, 1);
        } else if (!strcmp(o, "-")) {
            r = affine__form_add(ctx, a, b, -1);
            r.pv = affine__pv_add(ctx, a.pv, b.pv, -1);
        } else if (!strcmp(o, "*")) {
            if (!a.ok)
                r = a;
            else if (!b.ok)
                r = b;
            else if (a.nv == 0)
                r = affine__form_scale(ctx, b, a.cst);
            else if (b.nv == 0)
                r = affine__form_scale(ctx, a, b.cst);
            else
                r = affine__form_badf(ctx, "a product of two indices (line %u)", affine__line_of(n));
            r.pv = affine__pv_mul(ctx, a.pv, b.pv);
        } else if (!strcmp(o, "<<")) {
            int64_t k;
            if (a.ok && b.ok && b.nv == 0 && affine__poly_is_int(b.cst, &k) && k >= 0 && k < 62)
                r = affine__form_scale(ctx, a, affine__poly_int(ctx, (int64_t)1 << k));
            else
                r = opaque_if_invariant(ctx, s, n, a, b, o);
            /* a shift by a constant multiplies in the polynomial view whatever the affine one says */
            if (pv_is_int(b.pv, &k) && k >= 0 && k < 62)
                r.pv = affine__pv_mul(ctx, a.pv, affine__pv_of(ctx, affine__poly_int(ctx, (int64_t)1 << k)));
        } else {
            r = opaque_if_invariant(ctx, s, n, a, b, o);
        }
        free(o);
        return r;
    }
    if (!strcmp(t, "call_expression")) return eval_call(ctx, e, s, n, anchor, depth);
    if (!strcmp(t, "sizeof_expression")) {
        int64_t v;
        if (kl_const_eval(s, ctx->fn, n, false, &v, NULL, 0)) return affine__form_const(ctx, affine__poly_int(ctx, v));
        return affine__form_const(ctx, affine__poly_sym(ctx, node_sym(ctx, s, n)));
    }
    if (!strcmp(t, "conditional_expression")) {
        affine__form c = affine__eval(ctx, e, s, ts_node_child_by_field_name(n, "condition", 9), anchor, depth + 1);
        affine__form a = affine__eval(ctx, e, s, ts_node_child_by_field_name(n, "consequence", 11), anchor, depth + 1);
        affine__form b = affine__eval(ctx, e, s, ts_node_child_by_field_name(n, "alternative", 11), anchor, depth + 1);
        affine__form r = c.ok && a.ok && b.ok && !c.nv && !a.nv && !b.nv
                             ? affine__form_const(ctx, affine__poly_sym(ctx, node_sym(ctx, s, n)))
                             : affine__form_badf(ctx, "a conditional expression of an index (line %u)", affine__line_of(n));
        r.pv = affine__pv_join(ctx, c.pv, affine__pv_join(ctx, a.pv, b.pv));
        return r;
    }
    if (!strcmp(t, "subscript_expression") || !strcmp(t, "pointer_expression")) {
        char *txt = kl_node_text(s, n);
        affine__form f = affine__form_badf(ctx, "'%.60s' is loaded from memory (line %u)", txt ? txt : "", affine__line_of(n));
        free(txt);
        /* a load reads its pointer and its index */
        if (!strcmp(t, "subscript_expression"))
            f.pv = affine__pv_join(ctx, affine__eval(ctx, e, s, ts_node_child_by_field_name(n, "argument", 8), anchor, depth + 1).pv,
                                   affine__eval(ctx, e, s, kl_ast_subscript_index(n), anchor, depth + 1).pv);
        else
            f.pv = reads_of(ctx, e, s, n, anchor, depth);
        return f;
    }
    if (!strcmp(t, "true") || !strcmp(t, "false")) return affine__form_const(ctx, affine__poly_int(ctx, !strcmp(t, "true")));
    affine__form f = affine__form_badf(ctx, "a %s is not analysed (line %u)", t, affine__line_of(n));
    f.pv = reads_of(ctx, e, s, n, anchor, depth);
    return f;
}

/* ======================================================================================
 * constant evaluation
 * ====================================================================================== */

typedef struct gconst_find {
    const kl_source *src;
    const char *name;
    TSNode found;
} gconst_find;

static bool decl_is_const(const kl_source *s, TSNode decl)
{
    uint32_t c = ts_node_child_count(decl);
    for (uint32_t i = 0; i < c; i++) {
        TSNode k = ts_node_child(decl, i);
        if (affine__type_is(k, "type_qualifier") &&
            (kl_node_text_is(s, k, "const") || kl_node_text_is(s, k, "constexpr") || kl_node_text_is(s, k, "__constant__")))
            return true;
        if (!ts_node_is_named(k) && (!strcmp(ts_node_type(k), "constexpr") || !strcmp(ts_node_type(k), "const")))
            return true;
    }
    return false;
}

/* The initializer of `name` in declaration decl, or null. A `dim3 name(A, B)` whose arguments
 * are all names reads as a function declaration (`dim3 name(A, B)` declaring a function taking
 * types A and B): its parameter_list is the initializer then (kl_const_eval evaluates it). */
TSNode affine__decl_init_of(const kl_source *s, TSNode decl, const char *name)
{
    TSNode none = {0};
    uint32_t c = ts_node_named_child_count(decl);
    for (uint32_t i = 0; i < c; i++) {
        TSNode k = ts_node_named_child(decl, i);
        if (affine__type_is(k, "function_declarator") && kl_node_text_is(s, ts_node_child_by_field_name(decl, "type", 4), "dim3")) {
            TSNode nm = ts_node_child_by_field_name(k, "declarator", 10);
            if (affine__type_is(nm, "identifier") && kl_node_text_is(s, nm, name))
                return ts_node_child_by_field_name(k, "parameters", 10);
            continue;
        }
        if (!affine__type_is(k, "init_declarator")) continue;
        TSNode nm = kl_ast_declarator_name(ts_node_child_by_field_name(k, "declarator", 10));
        if (!ts_node_is_null(nm) && kl_node_text_is(s, nm, name)) {
            TSNode v = ts_node_child_by_field_name(k, "value", 5);
            if (affine__type_is(v, "initializer_list") && ts_node_named_child_count(v) == 1) v = ts_node_named_child(v, 0);
            return v;
        }
    }
    return none;
}

static bool find_gconst(TSNode n, void *user)
{
    gconst_find *g = user;
    if (!ts_node_is_null(g->found)) return false;
    if (affine__type_is(n, "function_definition")) return false;
    if (affine__type_is(n, "declaration") && decl_is_const(g->src, n)) {
        TSNode v = affine__decl_init_of(g->src, n, g->name);
        if (!ts_node_is_null(v)) g->found = v;
        return false;
    }
    return true;
}

static TSNode global_const_init(const kl_source *s, const char *name)
{
    gconst_find g = {s, name, null_node};
    kl_ast_walk(kl_source_root(s), find_gconst, &g);
    return g.found;
}

typedef struct local_scan {
    const kl_source *src;
    const char *name;
    TSNode init;
    unsigned assigns;
} local_scan;

static bool scan_local(TSNode n, void *user)
{
    local_scan *ls = user;
    if (affine__type_is(n, "declaration")) {
        TSNode v = affine__decl_init_of(ls->src, n, ls->name);
        if (!ts_node_is_null(v)) {
            ls->init = v;
            ls->assigns++;
        }
    } else if (affine__type_is(n, "assignment_expression")) {
        TSNode l = ts_node_child_by_field_name(n, "left", 4);
        /* `block.x = 64` changes a dim3 as much as `block = …` does */
        if (affine__type_is(l, "field_expression")) l = ts_node_child_by_field_name(l, "argument", 8);
        if (affine__type_is(l, "identifier") && kl_node_text_is(ls->src, l, ls->name)) ls->assigns++;
    } else if (affine__type_is(n, "update_expression")) {
        TSNode a = ts_node_child_by_field_name(n, "argument", 8);
        if (affine__type_is(a, "identifier") && kl_node_text_is(ls->src, a, ls->name)) ls->assigns++;
    } else if (affine__type_is(n, "pointer_expression")) {
        TSNode a = ts_node_child_by_field_name(n, "argument", 8);
        if (affine__type_is(a, "identifier") && kl_node_text_is(ls->src, a, ls->name)) ls->assigns += 2;
    }
    return true;
}

TSNode kl_ast_local_init(const kl_source *src, TSNode fn, const char *name)
{
    local_scan ls = {src, name, null_node, 0};
    kl_ast_walk(kl_ast_function_body(fn), scan_local, &ls);
    return ls.assigns == 1 ? ls.init : null_node;
}

typedef struct ceval {
    const kl_source *src;
    TSNode scope;
    bool dim3;
    char *why;
    size_t why_size;
    int depth;
} ceval;

static bool cfail(ceval *c, TSNode n, const char *what)
{
    if (c->why && c->why_size && !c->why[0]) {
        char *t = kl_node_text(c->src, n);
        snprintf(c->why, c->why_size, "'%.60s' is not a compile-time constant (%s, line %u)", t ? t : "", what,
                 affine__line_of(n));
        free(t);
    }
    return false;
}

static bool ce(ceval *c, const kl_source *s, TSNode n, int64_t *out);
static bool ce_name(ceval *c, const char *name, TSNode at, int64_t *out);

static bool ce_text(ceval *c, const char *text, TSNode at, int64_t *out)
{
    kl_source *ms = NULL;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "void __kl_expr(void) { (%s); }\n", text);
    kl_error err = {0};
    bool ok = false;
    if (!sb.failed && kl_source_parse_text("<macro>", kl_strbuf_str(&sb), sb.len, &ms, &err) == KL_OK &&
        !kl_source_partial(ms)) {
        TSNode fn = kl_ast_child_of_type(kl_source_root(ms), "function_definition");
        TSNode st = kl_ast_child_of_type(kl_ast_function_body(fn), "expression_statement");
        TSNode pe = ts_node_named_child(st, 0);
        if (affine__type_is(pe, "parenthesized_expression")) ok = ce(c, ms, ts_node_named_child(pe, 0), out);
    } else {
        cfail(c, at, "a macro that is not an expression");
    }
    kl_source_free(ms);
    kl_strbuf_release(&sb);
    return ok;
}

static bool ce(ceval *c, const kl_source *s, TSNode n, int64_t *out)
{
    if (++c->depth > 64) return cfail(c, n, "nested too deeply");
    bool ok = false;
    const char *t = ts_node_type(n);
    if (ts_node_is_null(n)) {
        ok = false;
    } else if (!strcmp(t, "number_literal")) {
        char *txt = kl_node_text(s, n);
        ok = txt && parse_int_literal(txt, out);
        free(txt);
        if (!ok) cfail(c, n, "not an integer");
    } else if (!strcmp(t, "parenthesized_expression")) {
        ok = ce(c, s, ts_node_named_child(n, 0), out);
    } else if (!strcmp(t, "cast_expression")) {
        ok = ce(c, s, ts_node_child_by_field_name(n, "value", 5), out);
    } else if (!strcmp(t, "sizeof_expression")) {
        char *txt = kl_node_text(s, n);
        static const struct { const char *k; int v; } sz[] = {
            {"float", 4}, {"double", 8}, {"int", 4}, {"half", 2}, {"__half", 2}, {"__nv_bfloat16", 2},
            {"float4", 16}, {"float2", 8}, {"char", 1}, {"uint8_t", 1}, {"int32_t", 4}, {"long", 8},
            {"size_t", 8}, {"short", 2}, {"int64_t", 8}, {"unsigned", 4}};
        ok = false;
        for (unsigned i = 0; txt && i < sizeof sz / sizeof sz[0]; i++) {
            char pat[48];
            kl_snprintf(pat, sizeof pat, "sizeof(%s)", sz[i].k);
            char *q = squeeze(txt);
            if (q && !strcmp(q, pat)) {
                *out = sz[i].v;
                ok = true;
            }
            free(q);
            if (ok) break;
        }
        free(txt);
        if (!ok) cfail(c, n, "sizeof of an unknown type");
    } else if (!strcmp(t, "unary_expression")) {
        TSNode op = ts_node_child_by_field_name(n, "operator", 8);
        int64_t a;
        ok = ce(c, s, ts_node_child_by_field_name(n, "argument", 8), &a);
        if (ok) {
            if (kl_node_text_is(s, op, "-")) *out = -a;
            else if (kl_node_text_is(s, op, "+")) *out = a;
            else if (kl_node_text_is(s, op, "~")) *out = ~a;
            else if (kl_node_text_is(s, op, "!")) *out = !a;
            else ok = cfail(c, n, "an unknown operator");
        }
    } else if (!strcmp(t, "binary_expression")) {
        int64_t a, b;
        char *o = kl_node_text(s, ts_node_child_by_field_name(n, "operator", 8));
        ok = o && ce(c, s, ts_node_child_by_field_name(n, "left", 4), &a) &&
             ce(c, s, ts_node_child_by_field_name(n, "right", 5), &b);
        if (ok) {
            if (!strcmp(o, "+")) *out = a + b;
            else if (!strcmp(o, "-")) *out = a - b;
            else if (!strcmp(o, "*")) *out = a * b;
            else if (!strcmp(o, "/") && b) *out = a / b;
            else if (!strcmp(o, "%") && b) *out = a % b;
            else if (!strcmp(o, "<<") && b >= 0 && b < 63) *out = a << b;
            else if (!strcmp(o, ">>") && b >= 0 && b < 63) *out = a >> b;
            else if (!strcmp(o, "&")) *out = a & b;
            else if (!strcmp(o, "|")) *out = a | b;
            else if (!strcmp(o, "^")) *out = a ^ b;
            else if (!strcmp(o, "<")) *out = a < b;
            else if (!strcmp(o, ">")) *out = a > b;
            else if (!strcmp(o, "<=")) *out = a <= b;
            else if (!strcmp(o, ">=")) *out = a >= b;
            else if (!strcmp(o, "==")) *out = a == b;
            else if (!strcmp(o, "!=")) *out = a != b;
            else if (!strcmp(o, "&&")) *out = a && b;
            else if (!strcmp(o, "||")) *out = a || b;
            else ok = cfail(c, n, "division by zero or an unknown operator");
        }
        free(o);
    } else if (!strcmp(t, "conditional_expression")) {
        int64_t k;
        ok = ce(c, s, ts_node_child_by_field_name(n, "condition", 9), &k) &&
             ce(c, s, ts_node_child_by_field_name(n, k ? "consequence" : "alternative", k ? 11 : 11), out);
    } else if (!strcmp(t, "parameter_declaration")) {
        /* an argument of `dim3 block(BLOCK, BLOCK)`, read as a parameter type (decl_init_of) */
        if (!ts_node_is_null(ts_node_child_by_field_name(n, "declarator", 10)) || ts_node_named_child_count(n) != 1)
            ok = cfail(c, n, "a parameter declaration");
        else ok = ce(c, s, ts_node_child_by_field_name(n, "type", 4), out);
    } else if (!strcmp(t, "call_expression") || !strcmp(t, "argument_list") || !strcmp(t, "initializer_list") ||
               !strcmp(t, "parameter_list")) {
        TSNode args = n;
        bool isdim3 = true;
        if (!strcmp(t, "call_expression")) {
            TSNode f = ts_node_child_by_field_name(n, "function", 8);
            isdim3 = kl_node_text_is(s, f, "dim3");
            args = ts_node_child_by_field_name(n, "arguments", 9);
        }
        if (!isdim3) {
            ok = cfail(c, n, "a function call");
        } else if (!c->dim3) {
            ok = cfail(c, n, "a dim3, not a number");
        } else {
            int64_t p = 1, v;
            ok = true;
            uint32_t k = ts_node_named_child_count(args);
            for (uint32_t i = 0; ok && i < k; i++) {
                ok = ce(c, s, ts_node_named_child(args, i), &v);
                p *= v;
            }
            *out = p;
        }
    } else if (!strcmp(t, "identifier") || !strcmp(t, "type_identifier")) {
        /* (a type_identifier only where a dim3's arguments were read as parameter types) */
        char *name = kl_node_text(s, n);
        ok = name && ce_name(c, name, n, out);
        if (!name) cfail(c, n, "out of memory");
        free(name);
    } else {
        ok = cfail(c, n, t);
    }
    c->depth--;
    return ok;
}

/* The constant evaluator's memo on the source (syntax/memo.h): the file's macros, collected once,
 * and each name's value by scope, so that a name is looked up once per scope and not at every
 * use — a nest of constexpr sizes (THREADS = WARPS_M * WARPS_N * 32, …) read at every loop of a
 * kernel walked the function and the file again for each name (seconds on one 220-line file). A
 * failure keeps its reason: the nested one as text, or the kind that names the use (`at`). */
typedef struct name_memo {
    uint32_t scope_start, scope_end;
    bool dim3, ok;
    int64_t value;
    char *name;
    const char *at_kind; /* "assigned more than once" / "unknown name": said at the use */
    char *why;           /* a nested failure's reason */
} name_memo;

struct ce_memo {
    affine__macro_table macros;
    bool macros_ok;
    name_memo *names;
    size_t n, cap;
};

static void ce_memo_release(void *p)
{
    ce_memo *m = p;
    if (!m) return;
    macros_release(&m->macros);
    for (size_t i = 0; i < m->n; i++) free(m->names[i].name), free(m->names[i].why);
    free(m->names);
    free(m);
}

static ce_memo *ce_memo_of(const kl_source *src)
{
    ce_memo *m = kl_source_memo(src);
    if (m) return m;
    m = calloc(1, sizeof *m);
    if (!m) return NULL;
    macro_collect mc = {src, &m->macros, false};
    kl_ast_walk(kl_source_root(src), collect_macro, &mc);
    m->macros_ok = !mc.oom;
    kl_source_set_memo(src, m, ce_memo_release);
    return m;
}

const affine__macro_table *affine__macros_of(const kl_source *src)
{
    const ce_memo *m = ce_memo_of(src);
    return m && m->macros_ok ? &m->macros : NULL;
}

static name_memo *memo_find(ce_memo *m, TSNode scope, bool dim3, const char *name)
{
    uint32_t a = ts_node_start_byte(scope), b = ts_node_end_byte(scope);
    for (size_t i = 0; m && i < m->n; i++) {
        name_memo *e = &m->names[i];
        if (e->scope_start == a && e->scope_end == b && e->dim3 == dim3 && !strcmp(e->name, name)) return e;
    }
    return NULL;
}

static void memo_put(ce_memo *m, TSNode scope, bool dim3, const char *name, bool ok, int64_t value,
                     const char *at_kind, const char *why)
{
    if (!m) return;
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        name_memo *v = realloc(m->names, cap * sizeof *v);
        if (!v) return; /* not remembered: computed again next time */
        m->names = v, m->cap = cap;
    }
    name_memo e = {ts_node_start_byte(scope), ts_node_end_byte(scope), dim3, ok, value, kl_strdup(name), at_kind,
                   why && *why ? kl_strdup(why) : NULL};
    if (!e.name) return;
    m->names[m->n++] = e;
}

/* ce() of node n of s — or, given text, ce_text() of that macro body — with a reason buffer of its
 * own: what it says can be remembered whole, and reaches the caller's reason as before. */
static bool ce_keep_why(ceval *c, const kl_source *s, TSNode n, const char *text, int64_t *out, char *why,
                        size_t size)
{
    char *was = c->why;
    size_t was_size = c->why_size;
    why[0] = '\0';
    c->why = why, c->why_size = size;
    bool ok = text ? ce_text(c, text, n, out) : ce(c, s, n, out);
    c->why = was, c->why_size = was_size;
    if (!ok && c->why && c->why_size && !c->why[0] && why[0]) snprintf(c->why, c->why_size, "%s", why);
    return ok;
}

/* The value of a name at node `at`: a local of the scope assigned once, a macro, a file constant. */
static bool ce_name(ceval *c, const char *name, TSNode at, int64_t *out)
{
    const kl_source *src = c->src;
    if (!strcmp(name, "warpSize")) {
        /* a run-time variable to the language, 32 on every NVIDIA GPU (and what warp code assumes) */
        *out = 32;
        return true;
    }
    ce_memo *m = ce_memo_of(src);
    const name_memo *e = memo_find(m, c->scope, c->dim3, name);
    if (e) {
        if (e->ok) {
            *out = e->value;
            return true;
        }
        if (e->at_kind) return cfail(c, at, e->at_kind);
        if (e->why && c->why && c->why_size && !c->why[0]) snprintf(c->why, c->why_size, "%s", e->why);
        return false;
    }
    char why[KL_ERROR_MAX];
    int64_t v = 0;
    bool ok;
    local_scan ls = {src, name, null_node, 0};
    /* the scope: a function (its body is searched) or any node (searched as it is) */
    TSNode region = affine__type_is(c->scope, "function_definition") ? kl_ast_function_body(c->scope) : c->scope;
    if (!ts_node_is_null(region)) kl_ast_walk(region, scan_local, &ls);
    if (ls.assigns == 1 && !ts_node_is_null(ls.init)) {
        ok = ce_keep_why(c, src, ls.init, NULL, &v, why, sizeof why);
    } else if (ls.assigns > 1) {
        memo_put(m, c->scope, c->dim3, name, false, 0, "assigned more than once", NULL);
        return cfail(c, at, "assigned more than once");
    } else {
        affine__macro_table none = {0};
        const affine__macro_def *md = macro_find(m && m->macros_ok ? &m->macros : &none, name);
        if (md && !md->function_like && md->defs == 1) {
            char *body = macro_body_clean(md->body);
            ok = body && ce_keep_why(c, src, at, body, &v, why, sizeof why);
            if (!body) return cfail(c, at, "out of memory"); /* not remembered */
            free(body);
        } else {
            TSNode gi = global_const_init(src, name);
            if (ts_node_is_null(gi)) {
                memo_put(m, c->scope, c->dim3, name, false, 0, "unknown name", NULL);
                return cfail(c, at, "unknown name");
            }
            ok = ce_keep_why(c, src, gi, NULL, &v, why, sizeof why);
        }
    }
    memo_put(m, c->scope, c->dim3, name, ok, v, NULL, ok ? NULL : why);
    if (ok) *out = v;
    return ok;
}

bool kl_const_eval_name(const kl_source *src, TSNode scope, const char *name, int64_t *out, char *why, size_t why_size)
{
    if (why && why_size) why[0] = '\0';
    ceval c = {src, scope, false, why, why_size, 0};
    return ce_name(&c, name, kl_source_root(src), out);
}

bool kl_const_eval(const kl_source *src, TSNode scope, TSNode expr, bool dim3_product, int64_t *out, char *why,
                   size_t why_size)
{
    if (why && why_size) why[0] = '\0';
    ceval c = {src, scope, dim3_product, why, why_size, 0};
    /* a dim3 variable: `dim3 block(16, 16)` has its argument_list as the init value */
    return ce(&c, src, expr, out);
}

/* Does expression n (in function fn) depend on a value known only at run time? */
typedef struct rteval {
    const kl_source *src;
    TSNode fn;
    char *why;
    size_t why_size;
} rteval;

static bool rt_found(rteval *r, TSNode n, const char *what)
{
    if (r->why && r->why_size && !r->why[0]) {
        char *t = kl_node_text(r->src, n);
        snprintf(r->why, r->why_size, "'%.60s' is %s (line %u)", t ? t : "", what, affine__line_of(n));
        free(t);
    }
    return true;
}

static bool is_fn_param(const kl_source *s, TSNode fn, const char *name)
{
    TSNode ps = kl_ast_function_params(fn);
    uint32_t c = ts_node_named_child_count(ps);
    for (uint32_t i = 0; i < c; i++) {
        TSNode nm = kl_ast_declarator_name(ts_node_child_by_field_name(ts_node_named_child(ps, i), "declarator", 10));
        if (!ts_node_is_null(nm) && kl_node_text_is(s, nm, name)) return true;
    }
    return false;
}

static bool rt(rteval *r, TSNode n, int depth)
{
    if (ts_node_is_null(n) || depth > 48) return false;
    const char *t = ts_node_type(n);
    if (!strcmp(t, "identifier")) {
        char *name = kl_node_text(r->src, n);
        bool yes = false;
        if (name && is_fn_param(r->src, r->fn, name)) {
            yes = rt_found(r, n, "a parameter of the function");
        } else if (name) {
            TSNode init = kl_ast_local_init(r->src, r->fn, name);
            if (!ts_node_is_null(init)) yes = rt(r, init, depth + 1);
        }
        free(name);
        return yes;
    }
    if (!strcmp(t, "field_expression")) {
        TSNode a = ts_node_child_by_field_name(n, "argument", 8);
        if (kl_node_text_is(r->src, a, "threadIdx") || kl_node_text_is(r->src, a, "blockIdx") ||
            kl_node_text_is(r->src, a, "blockDim") || kl_node_text_is(r->src, a, "gridDim"))
            return rt_found(r, n, "a thread, block or grid coordinate");
        return rt(r, a, depth + 1);
    }
    if (!strcmp(t, "subscript_expression") || (!strcmp(t, "pointer_expression") &&
                                               kl_node_text_is(r->src, ts_node_child_by_field_name(n, "operator", 8), "*")))
        return rt_found(r, n, "a load from memory");
    uint32_t c = ts_node_named_child_count(n);
    for (uint32_t i = 0; i < c; i++)
        if (rt(r, ts_node_named_child(n, i), depth + 1)) return true;
    return false;
}

bool kl_expr_runtime(const kl_source *src, TSNode fn, TSNode expr, char *why, size_t why_size)
{
    if (why && why_size) why[0] = '\0';
    rteval r = {src, fn, why, why_size};
    return rt(&r, expr, 0);
}
