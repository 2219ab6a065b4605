/* The rules' tree helpers (rules_tree.h): tree navigation, constants, launches. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules_tree.h"

/* ---- tree navigation ----------------------------------------------------------------------- */

TSNode rt_field(TSNode n, const char *field)
{
    return ts_node_child_by_field_name(n, field, (uint32_t)strlen(field));
}

bool rt_is(TSNode n, const char *type) { return !ts_node_is_null(n) && !strcmp(ts_node_type(n), type); }

TSNode rt_ancestor(TSNode n, const char *type)
{
    while (!ts_node_is_null(n) && !rt_is(n, type)) n = ts_node_parent(n);
    return n;
}

/* ctx->text is ctx->src's text (catalog.c's view_open): the syntax stage's readers serve */
char *rt_text(const kl_rule_ctx *ctx, TSNode n) { return kl_node_text(ctx->src, n); }

bool rt_text_is(const kl_rule_ctx *ctx, TSNode n, const char *s)
{
    return !ts_node_is_null(n) && kl_node_text_is(ctx->src, n, s);
}

typedef struct decl_find {
    const kl_rule_ctx *ctx;
    const char *name;
    bool functions;
    TSNode decl, declarator;
} decl_find;

static bool decl_find_visit(TSNode n, void *user)
{
    decl_find *d = user;
    if (!ts_node_is_null(d->decl)) return false;
    if (!rt_is(n, "declaration") && !rt_is(n, "parameter_declaration")) return true;
    uint32_t c = ts_node_named_child_count(n);
    for (uint32_t i = 0; i < c; i++) {
        TSNode k = ts_node_named_child(n, i);
        bool fn = rt_is(k, "function_declarator");
        if (!rt_is(k, "init_declarator") && !rt_is(k, "identifier") && !rt_is(k, "pointer_declarator") &&
            !rt_is(k, "array_declarator") && !rt_is(k, "reference_declarator") && !(fn && d->functions))
            continue;
        TSNode nm = rt_is(k, "identifier") ? k : fn ? rt_field(k, "declarator") : kl_ast_declarator_name(k);
        if (rt_text_is(d->ctx, nm, d->name)) {
            d->decl = n;
            d->declarator = k;
            return false;
        }
    }
    return true;
}

TSNode rt_find_decl(const kl_rule_ctx *ctx, TSNode in, const char *name, bool functions, TSNode *declarator)
{
    decl_find d = {ctx, name, functions, {{0}, 0, 0}, {{0}, 0, 0}};
    kl_ast_walk(in, decl_find_visit, &d);
    if (declarator) *declarator = d.declarator;
    return d.decl;
}

bool rt_text_copy(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size)
{
    uint32_t a = ts_node_start_byte(n), b = ts_node_end_byte(n);
    if (b > ctx->len) a = b = 0;
    kl_snprintf(buf, size, "%.*s", (int)(b - a), ctx->text + a);
    return (size_t)(b - a) < size;
}

bool rt_text_unblank_to(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size)
{
    size_t k = 0;
    bool fit = true;
    if (!size) return false;
    if (!ts_node_is_null(n))
        for (uint32_t i = ts_node_start_byte(n); i < ts_node_end_byte(n) && i < ctx->len; i++) {
            if (isspace((unsigned char)ctx->text[i])) continue;
            if (k + 1 >= size) {
                fit = false;
                break;
            }
            buf[k++] = ctx->text[i];
        }
    buf[k] = '\0';
    return fit;
}

char *rt_text_unblank(const kl_rule_ctx *ctx, TSNode n)
{
    char *t = rt_text(ctx, n);
    char *u = t ? kl_str_unblank(t) : NULL;
    free(t);
    return u;
}

bool rt_same_text(const kl_rule_ctx *ctx, TSNode a, TSNode b)
{
    if (ts_node_is_null(a) || ts_node_is_null(b)) return ts_node_is_null(a) && ts_node_is_null(b);
    char *x = rt_text_unblank(ctx, a), *y = rt_text_unblank(ctx, b);
    bool same = x && y && !strcmp(x, y);
    free(x);
    free(y);
    return same;
}

TSNode rt_unparen_cond(TSNode e)
{
    while (rt_is(e, "parenthesized_expression") || rt_is(e, "condition_clause")) {
        TSNode in = rt_is(e, "condition_clause") ? rt_field(e, "value") : ts_node_named_child(e, 0);
        if (ts_node_is_null(in)) break;
        e = in;
    }
    return e;
}

typedef struct ptr_find {
    const kl_rule_ctx *ctx;
    const char *name;
    int found;            /* 0 not yet, 1 a pointer, -1 declared but not a pointer */
    char type[64];
    char base[64];        /* the first identifier of its initializer (`x + row * cols`: x) */
} ptr_find;

static bool ptr_visit(TSNode n, void *user)
{
    ptr_find *f = user;
    if (f->found) return false;
    if (!rt_is(n, "declaration")) return true;
    for (uint32_t k = 0; k < ts_node_named_child_count(n); k++) {
        TSNode dc = ts_node_named_child(n, k);
        TSNode nm = kl_ast_declarator_name(dc);
        if (!rt_text_is(f->ctx, nm, f->name)) continue;
        TSNode inner = rt_is(dc, "init_declarator") ? rt_field(dc, "declarator") : dc;
        f->found = rt_is(inner, "pointer_declarator") ? 1 : -1;
        TSNode v = rt_is(dc, "init_declarator") ? rt_field(dc, "value") : (TSNode){{0}, 0, 0};
        while (!ts_node_is_null(v) && !rt_is(v, "identifier") && ts_node_named_child_count(v) > 0)
            v = ts_node_named_child(v, 0);
        if (rt_is(v, "identifier")) {
            char *b = rt_text(f->ctx, v);
            kl_snprintf(f->base, sizeof f->base, "%s", b ? b : "");
            free(b);
        }
        char *t = rt_text(f->ctx, rt_field(n, "type"));
        kl_snprintf(f->type, sizeof f->type, "%s", t ? t : "");
        free(t);
        return false;
    }
    return true;
}

/* Is the pointer name __restrict__: a parameter declared so, or a local pointer initialised
 * from one (`const float* xr = x + row * cols;`)? */
bool rt_pointer_restrict(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *name)
{
    int pi = kl_affine_param_index(ax, name);
    if (pi >= 0) return kl_affine_param(ax, (unsigned)pi)->is_restrict;
    ptr_find f = {ctx, name, 0, "", ""};
    kl_ast_walk(kl_ast_function_body(fn), ptr_visit, &f);
    if (f.found != 1 || !f.base[0]) return false;
    pi = kl_affine_param_index(ax, f.base);
    return pi >= 0 && kl_affine_param(ax, (unsigned)pi)->is_restrict;
}

/* Is name a pointer (a parameter, or a local declared `T* p`)? Its element type into buf. */
bool rt_pointer_elem(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *name, char *buf, size_t size)
{
    int pi = kl_affine_param_index(ax, name);
    if (pi >= 0) {
        const kl_param_info *p = kl_affine_param(ax, (unsigned)pi);
        kl_snprintf(buf, size, "%s", p->pointer ? p->elem : "");
        return p->pointer;
    }
    ptr_find f = {ctx, name, 0, "", ""};
    kl_ast_walk(kl_ast_function_body(fn), ptr_visit, &f);
    kl_snprintf(buf, size, "%s", f.type);
    return f.found == 1;
}

unsigned rt_declarators(TSNode n, TSNode *out, unsigned max)
{
    unsigned k = 0;
    TSTreeCursor c = ts_tree_cursor_new(n);
    if (ts_tree_cursor_goto_first_child(&c)) {
        do {
            const char *f = ts_tree_cursor_current_field_name(&c);
            if (f && !strcmp(f, "declarator") && k < max) out[k++] = ts_tree_cursor_current_node(&c);
        } while (ts_tree_cursor_goto_next_sibling(&c));
    }
    ts_tree_cursor_delete(&c);
    return k;
}

bool rt_is_builtin(const kl_rule_ctx *ctx, TSNode n, const char *b, char c)
{
    if (!rt_is(n, "field_expression")) return false;
    TSNode arg = rt_field(n, "argument"), fld = rt_field(n, "field");
    if (!rt_is(arg, "identifier") || !rt_text_is(ctx, arg, b) || ts_node_is_null(fld)) return false;
    if (!c) return true;
    char s[2] = {c, 0};
    return rt_text_is(ctx, fld, s);
}

typedef struct count_ident {
    const kl_rule_ctx *ctx;
    const char *name;
    unsigned n;
} count_ident;

static bool count_ident_visit(TSNode n, void *user)
{
    count_ident *c = user;
    if (rt_is(n, "identifier") && rt_text_is(c->ctx, n, c->name)) c->n++;
    return true;
}

unsigned rt_count_ident(const kl_rule_ctx *ctx, TSNode n, const char *name)
{
    count_ident c = {.ctx = ctx, .name = name};
    kl_ast_walk(n, count_ident_visit, &c);
    return c.n;
}

uint32_t rt_line_start(const kl_rule_ctx *ctx, uint32_t off) { return kl_ast_line_start(ctx->text, off); }

uint32_t rt_line_end(const kl_rule_ctx *ctx, uint32_t off) { return kl_ast_line_end(ctx->text, ctx->len, off); }

TSNode rt_last_stmt(TSNode n)
{
    for (uint32_t i = ts_node_named_child_count(n); i-- > 0;) {
        TSNode k = ts_node_named_child(n, i);
        if (!rt_is(k, "comment")) return k;
    }
    return (TSNode){0};
}

void rt_indent_of(const kl_rule_ctx *ctx, uint32_t off, char *ind, size_t size)
{
    uint32_t s = rt_line_start(ctx, off);
    size_t k = 0;
    while (s + k < ctx->len && (ctx->text[s + k] == ' ' || ctx->text[s + k] == '\t') && k + 1 < size) {
        ind[k] = ctx->text[s + k];
        k++;
    }
    ind[k] = '\0';
}

bool rt_line_blank_before(const kl_rule_ctx *ctx, uint32_t off)
{
    for (uint32_t s = rt_line_start(ctx, off); s < off; s++)
        if (ctx->text[s] != ' ' && ctx->text[s] != '\t') return false;
    return true;
}

/* ---- functions ----------------------------------------------------------------------------- */

static void func_from_def(const kl_rule_ctx *ctx, TSNode def, TSNode outer, rt_func *f)
{
    memset(f, 0, sizeof *f);
    f->def = def;
    f->outer = outer;
    f->templated = !ts_node_eq(def, outer);
    f->body = rt_field(def, "body");
    TSNode d = rt_field(def, "declarator");
    while (!ts_node_is_null(d) && !rt_is(d, "function_declarator")) d = rt_field(d, "declarator");
    if (!ts_node_is_null(d)) {
        f->params = rt_field(d, "parameters");
        TSNode nm = rt_field(d, "declarator");
        if (!ts_node_is_null(nm)) {
            uint32_t a = ts_node_start_byte(nm), b = ts_node_end_byte(nm);
            size_t k = b - a < sizeof f->name - 1 ? b - a : sizeof f->name - 1;
            memcpy(f->name, ctx->text + a, k);
            f->name[k] = '\0';
        }
    }
    /* qualifiers are anonymous children before the type */
    uint32_t c = ts_node_child_count(def);
    for (uint32_t i = 0; i < c; i++) {
        TSNode ch = ts_node_child(def, i);
        if (rt_is(ch, "__global__") || rt_text_is(ctx, ch, "__global__")) f->global = true;
        if (rt_is(ch, "__device__") || rt_text_is(ctx, ch, "__device__")) f->device = true;
    }
}

typedef struct func_collect {
    const kl_rule_ctx *ctx;
    rt_func *out;
    unsigned n, max;
} func_collect;

static bool func_visit(TSNode n, void *user)
{
    func_collect *fc = user;
    if (rt_is(n, "function_definition")) {
        if (fc->n < fc->max) {
            TSNode p = ts_node_parent(n);
            func_from_def(fc->ctx, n, rt_is(p, "template_declaration") ? p : n, &fc->out[fc->n]);
            if (fc->out[fc->n].name[0] && !ts_node_is_null(fc->out[fc->n].body)) fc->n++;
        }
        return false;
    }
    return true;
}

unsigned rt_functions(const kl_rule_ctx *ctx, rt_func *out, unsigned max)
{
    func_collect fc = {.ctx = ctx, .out = out, .max = max};
    kl_ast_walk(kl_source_root(ctx->src), func_visit, &fc);
    return fc.n;
}

const rt_func *rt_function_named(const rt_func *fs, unsigned n, const char *name)
{
    for (unsigned i = 0; i < n; i++)
        if (!strcmp(fs[i].name, name)) return &fs[i];
    return NULL;
}

TSNode rt_param(const kl_rule_ctx *ctx, const rt_func *f, const char *name)
{
    if (ts_node_is_null(f->params)) return (TSNode){0};
    uint32_t c = ts_node_named_child_count(f->params);
    for (uint32_t i = 0; i < c; i++) {
        TSNode p = ts_node_named_child(f->params, i);
        TSNode id = kl_ast_declarator_name(rt_field(p, "declarator"));
        if (!ts_node_is_null(id) && rt_text_is(ctx, id, name)) return p;
    }
    return (TSNode){0};
}

bool rt_pointer_param(const kl_rule_ctx *ctx, const rt_func *f, const char *name, char *elem, size_t size)
{
    TSNode p = rt_param(ctx, f, name);
    if (ts_node_is_null(p)) return false;
    TSNode d = rt_field(p, "declarator");
    if (!rt_is(d, "pointer_declarator")) return false;
    if (elem) {
        TSNode t = rt_field(p, "type");
        char *s = ts_node_is_null(t) ? NULL : rt_text(ctx, t);
        kl_snprintf(elem, size, "%s", s ? s : "");
        free(s);
    }
    return true;
}

/* The name a call calls: `f(…)`, `f<T>(…)`, `obj.f(…)` / `p->f(…)` (a member), `S<T>::f(…)` /
 * `ns::f(…)`, into buf; false (and "") for anything else (a call through a pointer expression). */
bool rt_callee_name(const kl_rule_ctx *ctx, TSNode call, char *buf, size_t size)
{
    buf[0] = '\0';
    TSNode f = rt_field(call, "function");
    for (int guard = 0; guard < 8 && !ts_node_is_null(f); guard++) {
        if (rt_is(f, "identifier") || rt_is(f, "field_identifier")) {
            uint32_t a = ts_node_start_byte(f), b = ts_node_end_byte(f);
            if (b - a + 1 > size) return false;
            char *t = rt_text(ctx, f);
            kl_snprintf(buf, size, "%s", t ? t : "");
            free(t);
            return t != NULL;
        }
        if (rt_is(f, "template_function") || rt_is(f, "qualified_identifier") || rt_is(f, "template_method"))
            f = rt_field(f, "name");
        else if (rt_is(f, "field_expression"))
            f = rt_field(f, "field");
        else
            return false;
    }
    return false;
}

/* The one __device__ function of the file named `name` (a free function or a struct's member); a
 * null node when there is none or several (overloads, two structs' members of one name: which one
 * a call reaches is not followed). */
TSNode rt_device_fn_named(const kl_rule_ctx *ctx, const char *name)
{
    TSNode none = {{0}, 0, 0}, found = none;
    TSNode fs[256];
    unsigned n = kl_ast_functions(ctx->src, "__device__", fs, 256);
    if (n > 256) return none;
    for (unsigned i = 0; i < n; i++) {
        char *fname = kl_ast_function_name(ctx->src, fs[i]);
        bool same = fname && !strcmp(fname, name);
        free(fname);
        if (!same) continue;
        if (!ts_node_is_null(found)) return none;
        found = fs[i];
    }
    return found;
}

bool rt_has_marker(const kl_rule_ctx *ctx, uint32_t start, uint32_t end, const char *word)
{
    size_t k = strlen(word);
    for (uint32_t i = start; i + 2 < end; i++) {
        if (ctx->text[i] != '/' || (ctx->text[i + 1] != '/' && ctx->text[i + 1] != '*')) continue;
        uint32_t e = i + 2;
        while (e < end && ctx->text[e] != '\n') e++;
        for (uint32_t j = i + 2; j + k <= e; j++)
            if (!strncasecmp(ctx->text + j, word, k)) return true;
        i = e;
    }
    return false;
}

/* ---- launches ------------------------------------------------------------------------------- */

typedef struct launch_collect {
    const kl_rule_ctx *ctx;
    const char *name;
    rt_launch *out;
    unsigned n, max;
    const rt_func *host;
} launch_collect;

static bool launch_visit(TSNode n, void *user)
{
    launch_collect *lc = user;
    if (!rt_is(n, "call_expression")) return true;
    TSNode fn = rt_field(n, "function");
    TSNode cfg = (TSNode){0};
    uint32_t c = ts_node_named_child_count(n);
    for (uint32_t i = 0; i < c; i++)
        if (rt_is(ts_node_named_child(n, i), "kernel_call_syntax")) cfg = ts_node_named_child(n, i);
    if (ts_node_is_null(cfg)) return true;
    if (rt_is(fn, "template_function")) fn = rt_field(fn, "name");
    if (!rt_text_is(lc->ctx, fn, lc->name) || lc->n >= lc->max) return true;
    rt_launch *l = &lc->out[lc->n++];
    memset(l, 0, sizeof *l);
    l->call = n;
    l->config = cfg;
    l->args = rt_field(n, "arguments");
    l->host = *lc->host;
    uint32_t k = ts_node_named_child_count(cfg);
    for (uint32_t i = 0; i < k && l->ncfg < 4; i++) l->cfg[l->ncfg++] = ts_node_named_child(cfg, i);
    return true;
}

unsigned rt_launches(const kl_rule_ctx *ctx, const char *name, rt_launch *out, unsigned max)
{
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    launch_collect lc = {.ctx = ctx, .name = name, .out = out, .max = max};
    for (unsigned i = 0; i < nf; i++) {
        lc.host = &fs[i];
        kl_ast_walk(fs[i].body, launch_visit, &lc);
    }
    return lc.n;
}

/* ---- constants ------------------------------------------------------------------------------ */

unsigned rt_type_size(const char *t)
{
    static const struct {
        const char *name;
        unsigned size;
    } types[] = {{"float", 4}, {"int", 4}, {"unsigned", 4}, {"unsigned int", 4}, {"int32_t", 4},
                 {"uint32_t", 4}, {"double", 8}, {"long long", 8}, {"int64_t", 8}, {"uint64_t", 8},
                 {"size_t", 8}, {"__half", 2}, {"half", 2}, {"__nv_bfloat16", 2}, {"nv_bfloat16", 2},
                 {"short", 2}, {"char", 1}, {"unsigned char", 1}, {"uint8_t", 1}, {"int8_t", 1},
                 {"float2", 8}, {"float4", 16}, {"unsigned long long", 8}};
    if (!t) return 0;
    while (!strncmp(t, "const ", 6)) t += 6;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(types[i].name, t)) return types[i].size;
    return 0;
}

/* The one constant evaluator (kl_const_eval, syntax/affine.c). */
bool rt_const_eval(const kl_rule_ctx *ctx, TSNode scope, TSNode e, long long *v)
{
    int64_t x = 0;
    if (!kl_const_eval(ctx->src, scope, e, false, &x, NULL, 0)) return false;
    *v = (long long)x;
    return true;
}

bool rt_const_name(const kl_rule_ctx *ctx, TSNode scope, const char *name, long long *v)
{
    int64_t x = 0;
    if (!kl_const_eval_name(ctx->src, scope, name, &x, NULL, 0)) return false;
    *v = (long long)x;
    return true;
}

/* ---- statements ----------------------------------------------------------------------------- */

void rt_stmt_range(const kl_rule_ctx *ctx, TSNode stmt, const char *marker, uint32_t *start, uint32_t *end)
{
    uint32_t a = ts_node_start_byte(stmt), b = ts_node_end_byte(stmt);
    uint32_t le = rt_line_end(ctx, b);
    bool after_blank = true;
    for (uint32_t k = b; k < le; k++)
        if (ctx->text[k] != ' ' && ctx->text[k] != '\t' && ctx->text[k] != '\n' && ctx->text[k] != '\r')
            after_blank = false;
    if (!rt_line_blank_before(ctx, a) || !after_blank) {
        *start = a;
        *end = b;
        return;
    }
    a = rt_line_start(ctx, a);
    b = le;
    if (marker) {
        TSNode prev = ts_node_prev_named_sibling(stmt);
        if (rt_is(prev, "comment") && rt_line_blank_before(ctx, ts_node_start_byte(prev)) &&
            rt_line_end(ctx, ts_node_end_byte(prev)) == a &&
            rt_has_marker(ctx, ts_node_start_byte(prev), ts_node_end_byte(prev), marker))
            a = rt_line_start(ctx, ts_node_start_byte(prev));
    }
    *start = a;
    *end = b;
}

char *rt_reindent(const char *text, size_t len, int delta)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    size_t i = 0;
    while (i < len) {
        size_t e = i;
        while (e < len && text[e] != '\n') e++;
        bool blank = true;
        for (size_t k = i; k < e; k++)
            if (text[k] != ' ' && text[k] != '\t' && text[k] != '\r') blank = false;
        if (blank) {
            /* keep blank lines empty */
        } else if (delta >= 0) {
            for (int k = 0; k < delta; k++) kl_strbuf_addc(&sb, ' ');
            kl_strbuf_add(&sb, text + i, e - i);
        } else {
            size_t drop = (size_t)-delta, lead = 0;
            while (i + lead < e && (text[i + lead] == ' ' || text[i + lead] == '\t')) lead++;
            /* a preprocessor line (`#pragma unroll` at column 0 is common) keeps what it has */
            if (i + lead < e && text[i + lead] == '#' && lead < drop) drop = 0;
            for (size_t k = 0; k < drop; k++)
                if (i + k >= e || text[i + k] != ' ') {
                    kl_strbuf_release(&sb);
                    return NULL;
                }
            kl_strbuf_add(&sb, text + i + drop, e - i - drop);
        }
        if (e < len) kl_strbuf_addc(&sb, '\n');
        i = e + 1;
    }
    if (sb.failed) {
        kl_strbuf_release(&sb);
        return NULL;
    }
    if (!sb.buf) return kl_strdup("");
    return kl_strbuf_detach(&sb, NULL);
}

bool rt_is_syncthreads(const kl_rule_ctx *ctx, TSNode stmt)
{
    if (!rt_is(stmt, "expression_statement")) return false;
    TSNode c = ts_node_named_child(stmt, 0);
    return rt_is(c, "call_expression") && rt_text_is(ctx, rt_field(c, "function"), "__syncthreads");
}

TSNode rt_next_stmt(TSNode n)
{
    do n = ts_node_next_named_sibling(n);
    while (rt_is(n, "comment"));
    return n;
}

TSNode rt_prev_stmt(TSNode n)
{
    do n = ts_node_prev_named_sibling(n);
    while (rt_is(n, "comment"));
    return n;
}

/* The x, y, z extents of a launch configuration expression (a literal dim3(…), or a local dim3 of
 * the launching function): the list node holding them, or a null node. */
TSNode rt_dim3_args(const kl_rule_ctx *ctx, const rt_launch *l, TSNode cfg)
{
    if (rt_is(cfg, "call_expression") && rt_text_is(ctx, rt_field(cfg, "function"), "dim3"))
        return rt_field(cfg, "arguments");
    if (!rt_is(cfg, "identifier")) return (TSNode){0};
    TSNode found = {0};
    uint32_t c = ts_node_named_child_count(l->host.body);
    for (uint32_t i = 0; i < c; i++) {
        TSNode d = ts_node_named_child(l->host.body, i);
        if (!rt_is(d, "declaration") || !rt_text_is(ctx, rt_field(d, "type"), "dim3")) continue;
        TSNode dd = rt_field(d, "declarator");
        TSNode id = rt_is(dd, "function_declarator") ? rt_field(dd, "declarator") : kl_ast_declarator_name(dd);
        char *a = rt_text(ctx, id), *b = rt_text(ctx, cfg);
        bool same = a && b && !strcmp(a, b);
        free(a);
        free(b);
        if (!same) continue;
        if (rt_is(dd, "function_declarator")) found = rt_field(dd, "parameters");
        else if (rt_is(dd, "init_declarator")) {
            TSNode v = rt_field(dd, "value");
            if (rt_is(v, "argument_list") || rt_is(v, "initializer_list")) found = v;
            else if (rt_is(v, "call_expression") && rt_text_is(ctx, rt_field(v, "function"), "dim3"))
                found = rt_field(v, "arguments");
        }
    }
    return found;
}

/* An extent of a dim3 list: the expression (a parameter_declaration holds it as its type). */
TSNode rt_dim3_extent(TSNode list, uint32_t i)
{
    TSNode a = ts_node_named_child(list, i);
    if (rt_is(a, "parameter_declaration")) a = rt_field(a, "type");
    return a;
}

bool rt_op_is(const kl_rule_ctx *ctx, TSNode e, const char *op)
{
    return rt_is(e, "binary_expression") && rt_text_is(ctx, rt_field(e, "operator"), op);
}

TSNode rt_bare(TSNode e)
{
    for (;;) {
        e = kl_ast_unparen(e);
        if (!rt_is(e, "cast_expression")) return e;
        e = rt_field(e, "value");
    }
}

void rt_fresh_name(const kl_rule_ctx *ctx, TSNode scope, const char *base, char *buf, size_t size)
{
    for (unsigned k = 1; k < 100; k++) {
        if (k == 1) kl_snprintf(buf, size, "%s", base);
        else kl_snprintf(buf, size, "%s%u", base, k);
        if (!rt_count_ident(ctx, scope, buf)) return;
    }
}

/* ---- the block size a kernel or a __device__ helper runs with (warp-reduce, tree-addressing) ---- */

static bool rt_kernel_block_(const kl_rule_ctx *ctx, TSNode fn, const char *name, int64_t *bs, char *why, size_t wn)
{
    /* the launches of the file first (they give the block exactly, and show a 2-D one); the
     * __launch_bounds__ only when the file never launches the kernel (it is an upper bound) */
    TSNode lb = kl_ast_child_of_type(fn, "launch_bounds");
    char w[200] = "";
    kl_launch_sites ls;
    if (kl_ast_launches(ctx->src, &ls, NULL) != KL_OK) {
        kl_snprintf(why, wn, "out of memory");
        return false;
    }
    bool ok = true;
    unsigned n = 0;
    for (unsigned i = 0; i < ls.count && ok; i++) {
        const kl_launch_site *l = &ls.items[i];
        if (strcmp(l->kernel, name)) continue;
        int64_t v;
        if (ts_node_is_null(l->block) || !kl_const_eval(ctx->src, l->host_fn, l->block, false, &v, w, sizeof w)) {
            kl_snprintf(why, wn, "the block size of %s at line %u is not a 1-D compile-time constant (%s)", name,
                        kl_ast_line(l->call), ts_node_is_null(l->block) ? "absent" : w);
            ok = false;
        } else if (n++ && v != *bs) {
            kl_snprintf(why, wn, "launches of %s use different block sizes (%lld and %lld)", name, (long long)*bs,
                        (long long)v);
            ok = false;
        } else {
            *bs = v;
        }
    }
    kl_launch_sites_release(&ls);
    if (ok && n == 0) {
        if (!ts_node_is_null(lb) && ts_node_named_child_count(lb) >= 1 &&
            kl_const_eval(ctx->src, fn, ts_node_named_child(lb, 0), false, bs, w, sizeof w))
            return true;
        kl_snprintf(why, wn, "%s has no __launch_bounds__ and the file never launches it: the block size is unknown",
                    name);
        ok = false;
    }
    return ok;
}

typedef struct rt_caller_find {
    const kl_rule_ctx *ctx;
    const char *name;
    unsigned calls;
} rt_caller_find;

static bool rt_caller_visit_(TSNode n, void *user)
{
    rt_caller_find *c = user;
    char callee[128];
    if (rt_is(n, "call_expression") && rt_callee_name(c->ctx, n, callee, sizeof callee) && !strcmp(callee, c->name))
        c->calls++;
    return true;
}

static bool rt_pow2_block_(int64_t bs, const char *where, char *why, size_t wn)
{
    if (bs < 32 || bs > 1024 || (bs & (bs - 1))) {
        kl_snprintf(why, wn, "the block size of %s is %lld, not a power of two from 32 to 1024", where, (long long)bs);
        return false;
    }
    return true;
}

/* The block size fn runs with: its own (a kernel), or the largest of the kernels calling it (a
 * __device__ helper: every caller must be a kernel with a known power-of-two block). */
bool rt_block_size(const kl_rule_ctx *ctx, TSNode fn, const char *name, int64_t *bs, char *why, size_t wn)
{
    if (kl_ast_function_has(ctx->src, fn, "__global__"))
        return rt_kernel_block_(ctx, fn, name, bs, why, wn) && rt_pow2_block_(*bs, name, why, wn);
    TSNode fs[256];
    unsigned n = kl_ast_functions(ctx->src, "__device__", fs, 256);
    for (unsigned i = 0; i < n && i < 256; i++) {
        rt_caller_find c = {ctx, name, 0};
        kl_ast_walk(kl_ast_function_body(fs[i]), rt_caller_visit_, &c);
        if (c.calls && !ts_node_eq(fs[i], fn)) {
            char *cn = kl_ast_function_name(ctx->src, fs[i]);
            kl_snprintf(why, wn, "%s is called from the __device__ function %s (only calls from kernels are followed)",
                        name, cn ? cn : "?");
            free(cn);
            return false;
        }
    }
    n = kl_ast_functions(ctx->src, "__global__", fs, 256);
    unsigned callers = 0;
    *bs = 0;
    for (unsigned i = 0; i < n && i < 256; i++) {
        rt_caller_find c = {ctx, name, 0};
        kl_ast_walk(kl_ast_function_body(fs[i]), rt_caller_visit_, &c);
        if (!c.calls) continue;
        char *kn = kl_ast_function_name(ctx->src, fs[i]);
        int64_t v = 0;
        bool ok = kn && rt_kernel_block_(ctx, fs[i], kn, &v, why, wn) && rt_pow2_block_(v, kn, why, wn);
        free(kn);
        if (!ok) return false;
        if (v > *bs) *bs = v;
        callers++;
    }
    if (!callers) {
        kl_snprintf(why, wn, "no kernel in the file calls %s: the block size is unknown", name);
        return false;
    }
    return true;
}

bool rt_device_var(const kl_source *src, const char *name, TSNode *decl)
{
    TSNode stack[8] = {kl_source_root(src)};
    unsigned ns = 1;
    while (ns) {
        TSNode scope = stack[--ns];
        for (uint32_t i = 0; i < ts_node_named_child_count(scope); i++) {
            TSNode d = ts_node_named_child(scope, i);
            if (rt_is(d, "namespace_definition") && ns < 8) {
                stack[ns++] = ts_node_child_by_field_name(d, "body", 4);
                continue;
            }
            if (!rt_is(d, "declaration")) continue;
            char *dt = kl_node_text(src, d);
            bool dev = dt && strstr(dt, "__device__");
            free(dt);
            if (!dev) continue;
            for (uint32_t k = 0; k < ts_node_named_child_count(d); k++) {
                TSNode nm = kl_ast_declarator_name(ts_node_named_child(d, k));
                if (!ts_node_is_null(nm) && kl_node_text_is(src, nm, name)) {
                    if (decl) *decl = d;
                    return true;
                }
            }
        }
    }
    return false;
}
