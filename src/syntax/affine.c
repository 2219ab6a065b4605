/* Index-expression analysis: affine forms, loops and accesses of a kernel (affine.h). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "syntax/affine.h"
#include "syntax/memo.h"
#include "util/util.h"

static const TSNode null_node; /* a null node: zero-initialised */

/* ======================================================================================
 * tree helpers
 * ====================================================================================== */

static bool type_is(TSNode n, const char *t) { return !ts_node_is_null(n) && !strcmp(ts_node_type(n), t); }

TSNode kl_ast_child_of_type(TSNode n, const char *type)
{
    TSNode none = {0};
    if (ts_node_is_null(n)) return none;
    uint32_t c = ts_node_named_child_count(n);
    for (uint32_t i = 0; i < c; i++) {
        TSNode k = ts_node_named_child(n, i);
        if (!strcmp(ts_node_type(k), type)) return k;
    }
    return none;
}

void kl_ast_walk(TSNode n, kl_ast_visit_fn fn, void *user)
{
    if (ts_node_is_null(n)) return;
    TSTreeCursor cur = ts_tree_cursor_new(n);
    for (;;) {
        TSNode c = ts_tree_cursor_current_node(&cur);
        bool descend = fn(c, user);
        if (descend && ts_tree_cursor_goto_first_child(&cur)) continue;
        for (;;) {
            if (ts_node_eq(ts_tree_cursor_current_node(&cur), n)) {
                ts_tree_cursor_delete(&cur);
                return;
            }
            if (ts_tree_cursor_goto_next_sibling(&cur)) break;
            if (!ts_tree_cursor_goto_parent(&cur)) {
                ts_tree_cursor_delete(&cur);
                return;
            }
        }
    }
}

unsigned kl_ast_depth(TSNode n, unsigned limit, TSNode *deepest)
{
    if (ts_node_is_null(n)) return 0;
    TSTreeCursor cur = ts_tree_cursor_new(n);
    unsigned depth = 1, max = 1;
    for (;;) {
        if (depth > limit) {
            if (deepest) *deepest = ts_tree_cursor_current_node(&cur);
            max = depth;
            break;
        }
        if (ts_tree_cursor_goto_first_child(&cur)) {
            if (++depth > max) max = depth;
            continue;
        }
        while (!ts_tree_cursor_goto_next_sibling(&cur)) {
            if (!ts_tree_cursor_goto_parent(&cur)) goto done;
            depth--;
        }
    }
done:
    ts_tree_cursor_delete(&cur);
    return max;
}

bool kl_ast_function_has(const kl_source *src, TSNode fn, const char *qualifier)
{
    uint32_t c = ts_node_child_count(fn);
    for (uint32_t i = 0; i < c; i++) {
        TSNode k = ts_node_child(fn, i);
        if (!ts_node_is_named(k) && !strcmp(ts_node_type(k), qualifier)) return true;
        if (type_is(k, "function_declarator") || type_is(k, "compound_statement")) break;
        /* qualifiers may also sit in a storage/type qualifier node */
        if (ts_node_is_named(k) && kl_node_text_is(src, k, qualifier)) return true;
    }
    return false;
}

static TSNode function_declarator(TSNode fn)
{
    TSNode d = ts_node_child_by_field_name(fn, "declarator", 10);
    while (!ts_node_is_null(d) && !type_is(d, "function_declarator")) {
        TSNode in = ts_node_child_by_field_name(d, "declarator", 10);
        if (ts_node_is_null(in)) in = kl_ast_child_of_type(d, "function_declarator");
        d = in;
    }
    if (ts_node_is_null(d)) d = kl_ast_child_of_type(fn, "function_declarator");
    return d;
}

TSNode kl_ast_function_params(TSNode fn)
{
    TSNode d = function_declarator(fn);
    TSNode none = {0};
    if (ts_node_is_null(d)) return none;
    return ts_node_child_by_field_name(d, "parameters", 10);
}

TSNode kl_ast_unparen(TSNode n)
{
    while (type_is(n, "parenthesized_expression")) {
        TSNode in = {0};
        uint32_t k = ts_node_named_child_count(n);
        for (uint32_t i = 0; i < k && ts_node_is_null(in); i++)
            if (!type_is(ts_node_named_child(n, i), "comment")) in = ts_node_named_child(n, i);
        if (ts_node_is_null(in)) break;
        n = in;
    }
    return n;
}

unsigned kl_ast_line(TSNode n) { return ts_node_start_point(n).row + 1; }

TSNode kl_ast_subscript_index(TSNode n)
{
    if (!type_is(n, "subscript_expression")) return (TSNode){0};
    TSNode idx = ts_node_child_by_field_name(n, "indices", 7);
    if (type_is(idx, "subscript_argument_list")) idx = ts_node_named_child(idx, 0);
    if (ts_node_is_null(idx)) idx = ts_node_child_by_field_name(n, "index", 5);
    return idx;
}

TSNode kl_ast_function_body(TSNode fn) { return ts_node_child_by_field_name(fn, "body", 4); }

bool kl_ast_function_has_name(TSNode fn)
{
    TSNode d = function_declarator(fn);
    return !ts_node_is_null(d) && !ts_node_is_null(ts_node_child_by_field_name(d, "declarator", 10));
}

char *kl_ast_function_name(const kl_source *src, TSNode fn)
{
    TSNode d = function_declarator(fn);
    if (ts_node_is_null(d)) return NULL;
    TSNode name = ts_node_child_by_field_name(d, "declarator", 10);
    if (ts_node_is_null(name)) return NULL;
    return kl_node_text(src, name);
}

TSNode kl_ast_function_outer(TSNode fn)
{
    TSNode p = ts_node_parent(fn);
    return type_is(p, "template_declaration") ? p : fn;
}

TSNode kl_ast_enclosing_function(TSNode n)
{
    TSNode p = ts_node_parent(n);
    while (!ts_node_is_null(p) && !type_is(p, "function_definition")) p = ts_node_parent(p);
    return p;
}

TSNode kl_ast_declarator_name(TSNode d)
{
    TSNode none = {0};
    for (int guard = 0; guard < 16 && !ts_node_is_null(d); guard++) {
        const char *t = ts_node_type(d);
        if (!strcmp(t, "identifier") || !strcmp(t, "field_identifier")) return d;
        TSNode in = ts_node_child_by_field_name(d, "declarator", 10);
        if (ts_node_is_null(in)) {
            /* reference_declarator and friends keep the name as a plain child */
            uint32_t c = ts_node_named_child_count(d);
            for (uint32_t i = 0; i < c; i++) {
                TSNode k = ts_node_named_child(d, i);
                const char *kt = ts_node_type(k);
                if (!strcmp(kt, "identifier") || strstr(kt, "declarator")) {
                    in = k;
                    break;
                }
            }
        }
        d = in;
    }
    return none;
}

typedef struct fn_collect {
    const kl_source *src;
    const char *qual;
    const char *name;
    TSNode *out;
    unsigned max, n;
} fn_collect;

static bool collect_fn(TSNode n, void *user)
{
    fn_collect *fc = user;
    if (!type_is(n, "function_definition")) return true;
    bool take = false;
    if (fc->name) {
        char *nm = kl_ast_function_name(fc->src, n);
        take = nm && !strcmp(nm, fc->name);
        free(nm);
    } else {
        take = kl_ast_function_has(fc->src, n, fc->qual);
    }
    if (take) {
        if (fc->n < fc->max) fc->out[fc->n] = n;
        fc->n++;
    }
    return false; /* no functions inside functions */
}

unsigned kl_ast_functions(const kl_source *src, const char *qualifier, TSNode *out, unsigned max)
{
    fn_collect fc = {src, qualifier, NULL, out, max, 0};
    kl_ast_walk(kl_source_root(src), collect_fn, &fc);
    return fc.n;
}

TSNode kl_ast_function_named(const kl_source *src, const char *name)
{
    TSNode found = {0};
    fn_collect fc = {src, NULL, name, &found, 1, 0};
    kl_ast_walk(kl_source_root(src), collect_fn, &fc);
    return found;
}

bool kl_ast_less_misparse(const kl_source *src, TSNode n, char **lhs_text, TSNode *rhs)
{
    if (!type_is(n, "field_expression")) return false;
    TSNode field = ts_node_child_by_field_name(n, "field", 5);
    if (!type_is(field, "template_method")) return false;
    TSNode args = ts_node_child_by_field_name(field, "arguments", 9);
    if (ts_node_is_null(args) || ts_node_child_count(args) == 0) return false;
    TSNode last = ts_node_child(args, ts_node_child_count(args) - 1);
    if (!ts_node_is_missing(last)) return false;
    if (ts_node_named_child_count(args) != 1) return false;
    TSNode arg = ts_node_child_by_field_name(n, "argument", 8);
    TSNode name = ts_node_child_by_field_name(field, "name", 4);
    if (lhs_text) {
        char *a = kl_node_text(src, arg), *b = kl_node_text(src, name);
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_strbuf_addf(&sb, "%s.%s", a ? a : "", b ? b : "");
        free(a);
        free(b);
        *lhs_text = kl_strbuf_detach(&sb, NULL);
    }
    if (rhs) *rhs = ts_node_named_child(args, 0);
    return true;
}

uint32_t kl_ast_line_start(const char *text, uint32_t off)
{
    while (off > 0 && text[off - 1] != '\n') off--;
    return off;
}

uint32_t kl_ast_line_end(const char *text, size_t len, uint32_t off)
{
    while (off < len && text[off] != '\n') off++;
    return off < len ? off + 1 : off;
}

/* ---- launches ---------------------------------------------------------------------------- */

typedef struct launch_collect {
    const kl_source *src;
    kl_launch_sites *out;
    bool oom;
} launch_collect;

static bool collect_launch(TSNode n, void *user)
{
    launch_collect *lc = user;
    if (!type_is(n, "call_expression")) return true;
    TSNode cfg = kl_ast_child_of_type(n, "kernel_call_syntax");
    if (ts_node_is_null(cfg)) return true;
    kl_launch_site s;
    memset(&s, 0, sizeof s);
    s.call = n;
    s.config = cfg;
    uint32_t nc = ts_node_named_child_count(cfg);
    TSNode parts[4] = {null_node, null_node, null_node, null_node};
    for (uint32_t i = 0; i < nc && i < 4; i++) parts[i] = ts_node_named_child(cfg, i);
    s.grid = parts[0], s.block = parts[1], s.smem = parts[2], s.stream = parts[3];
    s.args = ts_node_child_by_field_name(n, "arguments", 9);
    s.host_fn = kl_ast_enclosing_function(n);
    TSNode f = ts_node_child_by_field_name(n, "function", 8);
    if (type_is(f, "template_function")) f = ts_node_child_by_field_name(f, "name", 4);
    s.kernel = kl_node_text(lc->src, f);
    if (!s.kernel) {
        lc->oom = true;
        return false;
    }
    kl_launch_site *items = realloc(lc->out->items, (lc->out->count + 1) * sizeof *items);
    if (!items) {
        free(s.kernel);
        lc->oom = true;
        return false;
    }
    lc->out->items = items;
    items[lc->out->count++] = s;
    return true;
}

kl_status kl_ast_launches(const kl_source *src, kl_launch_sites *out, kl_error *err)
{
    memset(out, 0, sizeof *out);
    launch_collect lc = {src, out, false};
    kl_ast_walk(kl_source_root(src), collect_launch, &lc);
    if (lc.oom) {
        kl_launch_sites_release(out);
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    return KL_OK;
}

void kl_launch_sites_release(kl_launch_sites *s)
{
    if (!s) return;
    for (unsigned i = 0; i < s->count; i++) free(s->items[i].kernel);
    free(s->items);
    memset(s, 0, sizeof *s);
}

/* ======================================================================================
 * macros and file-level constants
 * ====================================================================================== */

typedef struct macro_def {
    char *name;
    bool function_like;
    char **params;
    unsigned nparams;
    char *body;    /* the replacement text */
    unsigned defs; /* how many #defines of this name */
} macro_def;

typedef struct macro_table {
    macro_def *items;
    unsigned count;
} macro_table;

static void macros_release(macro_table *m)
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

static const macro_def *macro_find(const macro_table *m, const char *name)
{
    for (unsigned i = 0; i < m->count; i++)
        if (!strcmp(m->items[i].name, name)) return &m->items[i];
    return NULL;
}

typedef struct macro_collect {
    const kl_source *src;
    macro_table *t;
    bool oom;
} macro_collect;

static bool collect_macro(TSNode n, void *user)
{
    macro_collect *mc = user;
    bool fl = type_is(n, "preproc_function_def");
    if (!fl && !type_is(n, "preproc_def")) return !type_is(n, "function_definition");
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
    macro_def d;
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
    macro_def *items = realloc(mc->t->items, (mc->t->count + 1) * sizeof *items);
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
 * polynomials over invariant symbols
 * ====================================================================================== */

#define MAXF 6     /* factors in a monomial */
#define MAXDEPTH 24

typedef struct mono {
    int64_t c;
    unsigned nf;
    const char *f[MAXF]; /* interned symbol texts, sorted */
} mono;

typedef struct poly {
    mono *m;
    unsigned n;
} poly;

/* An internal affine form: constant + Σ coef(var) * var. Everything lives in the arena. */
typedef struct form {
    bool ok;
    const char *why;
    poly cst;
    unsigned nv;
    const char **vars; /* interned, sorted */
    poly *coefs;
} form;

typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    max_align_t data[];
} arena_block;

typedef struct local_var {
    char *name;
    TSNode decl;     /* declaration node */
    TSNode def;      /* the single defining expression (initializer or the right of the one `=`), or null */
    bool is_array, is_shared;
    unsigned ndims;
    int64_t dims[4];
} local_var;

typedef struct name_count {
    char *name;
    unsigned n;
} name_count;

typedef struct mini_src {
    char *key;
    kl_source *src;
    TSNode expr;
    bool ok;
} mini_src;

typedef struct ce_memo ce_memo;
static ce_memo *ce_memo_of(const kl_source *src);

struct kl_affine_ctx {
    const kl_source *src;
    TSNode fn;
    TSNode body;
    arena_block *arena;
    bool oom;
    const macro_table *macros; /* the source's, from its memo (syntax/memo.h) */
    kl_param_info *params;
    unsigned nparams;
    local_var *locals;
    unsigned nlocals;
    name_count *counts;
    unsigned ncounts;
    kl_ax_loop *loops;
    unsigned nloops;
    form *loop_start;     /* per loop: the start as a form (ok=false if unknown) */
    poly *loop_txc;       /* per loop: d(var)/d(threadIdx.x) at iteration 0 */
    bool *loop_txc_ok;
    kl_ax_access *accesses;
    unsigned naccesses;
    mini_src *minis;
    unsigned nminis;
    const char **interned;
    unsigned ninterned, capinterned;
};

static void *aalloc(kl_affine_ctx *ctx, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (n == 0) n = sizeof(max_align_t);
    arena_block *b = ctx->arena;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 16384 ? n : 16384;
        b = malloc(sizeof *b + cap);
        if (!b) {
            ctx->oom = true;
            return NULL;
        }
        b->next = ctx->arena;
        b->used = 0;
        b->cap = cap;
        ctx->arena = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

static const char *intern(kl_affine_ctx *ctx, const char *s)
{
    for (unsigned i = 0; i < ctx->ninterned; i++)
        if (!strcmp(ctx->interned[i], s)) return ctx->interned[i];
    size_t n = strlen(s);
    char *copy = aalloc(ctx, n + 1);
    if (!copy) return "";
    memcpy(copy, s, n + 1);
    if (ctx->ninterned == ctx->capinterned) {
        unsigned cap = ctx->capinterned ? ctx->capinterned * 2 : 64;
        const char **nw = realloc(ctx->interned, cap * sizeof *nw);
        if (!nw) {
            ctx->oom = true;
            return copy;
        }
        ctx->interned = nw;
        ctx->capinterned = cap;
    }
    ctx->interned[ctx->ninterned++] = copy;
    return copy;
}

static int mono_cmp_factors(const mono *a, const mono *b)
{
    if (a->nf != b->nf) return a->nf < b->nf ? -1 : 1;
    for (unsigned i = 0; i < a->nf; i++) {
        int c = strcmp(a->f[i], b->f[i]);
        if (c) return c;
    }
    return 0;
}

static int mono_qsort_cmp(const void *x, const void *y) { return mono_cmp_factors(x, y); }

/* Normalise: sort, merge like monomials, drop zeros. In place. */
static void poly_norm(poly *p)
{
    if (p->n > 1) qsort(p->m, p->n, sizeof *p->m, mono_qsort_cmp);
    unsigned w = 0;
    for (unsigned i = 0; i < p->n; i++) {
        if (w > 0 && mono_cmp_factors(&p->m[w - 1], &p->m[i]) == 0) {
            p->m[w - 1].c += p->m[i].c;
        } else {
            p->m[w++] = p->m[i];
        }
    }
    unsigned z = 0;
    for (unsigned i = 0; i < w; i++)
        if (p->m[i].c != 0) p->m[z++] = p->m[i];
    p->n = z;
}

static poly poly_int(kl_affine_ctx *ctx, int64_t v)
{
    poly p = {0};
    if (v == 0) return p;
    p.m = aalloc(ctx, sizeof *p.m);
    if (!p.m) return p;
    p.m[0].c = v;
    p.n = 1;
    return p;
}

static poly poly_sym(kl_affine_ctx *ctx, const char *sym)
{
    poly p = {0};
    p.m = aalloc(ctx, sizeof *p.m);
    if (!p.m) return p;
    p.m[0].c = 1;
    p.m[0].nf = 1;
    p.m[0].f[0] = intern(ctx, sym);
    p.n = 1;
    return p;
}

static poly poly_add(kl_affine_ctx *ctx, poly a, poly b, int64_t sb)
{
    poly p = {0};
    if (a.n + b.n == 0) return p;
    p.m = aalloc(ctx, (a.n + b.n) * sizeof *p.m);
    if (!p.m) return p;
    for (unsigned i = 0; i < a.n; i++) p.m[p.n++] = a.m[i];
    for (unsigned i = 0; i < b.n; i++) {
        p.m[p.n] = b.m[i];
        p.m[p.n++].c *= sb;
    }
    poly_norm(&p);
    return p;
}

static int str_qsort_cmp(const void *x, const void *y) { return strcmp(*(const char *const *)x, *(const char *const *)y); }

/* Product; false when a monomial would get more than MAXF factors. */
static bool poly_mul(kl_affine_ctx *ctx, poly a, poly b, poly *out)
{
    poly p = {0};
    if (a.n == 0 || b.n == 0) {
        *out = p;
        return true;
    }
    p.m = aalloc(ctx, a.n * b.n * sizeof *p.m);
    if (!p.m) {
        *out = p;
        return true;
    }
    for (unsigned i = 0; i < a.n; i++) {
        for (unsigned k = 0; k < b.n; k++) {
            mono m = a.m[i];
            if (m.nf + b.m[k].nf > MAXF) return false;
            for (unsigned f = 0; f < b.m[k].nf; f++) m.f[m.nf++] = b.m[k].f[f];
            qsort(m.f, m.nf, sizeof m.f[0], str_qsort_cmp);
            m.c *= b.m[k].c;
            p.m[p.n++] = m;
        }
    }
    poly_norm(&p);
    *out = p;
    return true;
}

static bool poly_is_int(poly p, int64_t *v)
{
    if (p.n == 0) {
        *v = 0;
        return true;
    }
    if (p.n == 1 && p.m[0].nf == 0) {
        *v = p.m[0].c;
        return true;
    }
    return false;
}

/* Text: monomials joined with " + " / " - ", factors with "*", constant first. */
static void poly_print(kl_strbuf *sb, poly p)
{
    if (p.n == 0) {
        kl_strbuf_adds(sb, "0");
        return;
    }
    for (unsigned i = 0; i < p.n; i++) {
        int64_t c = p.m[i].c;
        if (i > 0) {
            kl_strbuf_adds(sb, c < 0 ? " - " : " + ");
            if (c < 0) c = -c;
        }
        bool need_c = p.m[i].nf == 0 || (c != 1 && c != -1);
        if (c == -1 && p.m[i].nf > 0) kl_strbuf_adds(sb, "-");
        if (need_c) kl_strbuf_addf(sb, "%lld", (long long)c);
        for (unsigned f = 0; f < p.m[i].nf; f++) {
            const char *s = p.m[i].f[f];
            bool simple = true;
            for (const char *q = s; *q; q++)
                if (!(isalnum((unsigned char)*q) || *q == '_' || *q == '.')) simple = false;
            if (need_c || f > 0) kl_strbuf_adds(sb, "*");
            if (simple)
                kl_strbuf_adds(sb, s);
            else
                kl_strbuf_addf(sb, "(%s)", s);
        }
    }
}

static char *poly_text(poly p)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    poly_print(&sb, p);
    return kl_strbuf_detach(&sb, NULL);
}

/* ---- forms -------------------------------------------------------------------------------- */

static form form_bad(const char *why)
{
    form f;
    memset(&f, 0, sizeof f);
    f.why = why;
    return f;
}

static form form_badf(kl_affine_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static form form_badf(kl_affine_ctx *ctx, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return form_bad(intern(ctx, buf));
}

static form form_const(poly c)
{
    form f;
    memset(&f, 0, sizeof f);
    f.ok = true;
    f.cst = c;
    return f;
}

static form form_var(kl_affine_ctx *ctx, const char *var)
{
    form f = form_const((poly){0});
    f.vars = aalloc(ctx, sizeof *f.vars);
    f.coefs = aalloc(ctx, sizeof *f.coefs);
    if (!f.vars || !f.coefs) return form_bad("out of memory");
    f.vars[0] = intern(ctx, var);
    f.coefs[0] = poly_int(ctx, 1);
    f.nv = 1;
    return f;
}

/* a + sb*b */
static form form_add(kl_affine_ctx *ctx, form a, form b, int64_t sb)
{
    if (!a.ok) return a;
    if (!b.ok) return b;
    form f = form_const(poly_add(ctx, a.cst, b.cst, sb));
    unsigned cap = a.nv + b.nv;
    if (cap) {
        f.vars = aalloc(ctx, cap * sizeof *f.vars);
        f.coefs = aalloc(ctx, cap * sizeof *f.coefs);
        if (!f.vars || !f.coefs) return form_bad("out of memory");
    }
    unsigned i = 0, k = 0;
    while (i < a.nv || k < b.nv) {
        int c = i >= a.nv ? 1 : k >= b.nv ? -1 : strcmp(a.vars[i], b.vars[k]);
        poly p;
        const char *v;
        if (c < 0) {
            v = a.vars[i];
            p = a.coefs[i++];
        } else if (c > 0) {
            v = b.vars[k];
            p = poly_add(ctx, (poly){0}, b.coefs[k++], sb);
        } else {
            v = a.vars[i];
            p = poly_add(ctx, a.coefs[i++], b.coefs[k++], sb);
        }
        if (p.n == 0) continue;
        f.vars[f.nv] = v;
        f.coefs[f.nv++] = p;
    }
    return f;
}

static form form_scale(kl_affine_ctx *ctx, form a, poly s)
{
    if (!a.ok) return a;
    form f = form_const((poly){0});
    if (!poly_mul(ctx, a.cst, s, &f.cst)) return form_bad("coefficients too large to track");
    if (a.nv) {
        f.vars = aalloc(ctx, a.nv * sizeof *f.vars);
        f.coefs = aalloc(ctx, a.nv * sizeof *f.coefs);
        if (!f.vars || !f.coefs) return form_bad("out of memory");
    }
    for (unsigned i = 0; i < a.nv; i++) {
        poly p;
        if (!poly_mul(ctx, a.coefs[i], s, &p)) return form_bad("coefficients too large to track");
        if (p.n == 0) continue;
        f.vars[f.nv] = a.vars[i];
        f.coefs[f.nv++] = p;
    }
    return f;
}

static poly form_coef(form f, const char *var)
{
    for (unsigned i = 0; i < f.nv; i++)
        if (!strcmp(f.vars[i], var)) return f.coefs[i];
    return (poly){0};
}

/* ======================================================================================
 * the evaluator
 * ====================================================================================== */

typedef struct binding {
    const char *name;
    form value;
} binding;

typedef struct env {
    const binding *b;
    unsigned nb;
    bool in_helper;   /* inside an inlined __device__ helper: kernel locals are not visible */
} env;

static form eval(kl_affine_ctx *ctx, const env *e, const kl_source *s, TSNode n, TSNode anchor, int depth);

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
    const char *r = intern(ctx, q ? q : "");
    free(q);
    return r;
}

static unsigned line_of(TSNode n) { return ts_node_start_point(n).row + 1; }

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
    mini_src m;
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
        if (type_is(pe, "parenthesized_expression") && ts_node_named_child_count(pe) == 1) {
            m.expr = ts_node_named_child(pe, 0);
            m.ok = true;
        }
    }
    kl_strbuf_release(&sb);
    mini_src *items = realloc(ctx->minis, (ctx->nminis + 1) * sizeof *items);
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
static char *macro_expand(const macro_def *d, char *const *args)
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

static const local_var *local_find(const kl_affine_ctx *ctx, const char *name)
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

static bool node_within(TSNode inner, TSNode outer)
{
    return ts_node_start_byte(inner) >= ts_node_start_byte(outer) && ts_node_end_byte(inner) <= ts_node_end_byte(outer);
}

/* The loop (index) whose variable is `name` and which encloses `anchor`, innermost first. */
static int enclosing_loop_with_var(const kl_affine_ctx *ctx, const char *name, TSNode anchor)
{
    int best = -1;
    for (unsigned i = 0; i < ctx->nloops; i++) {
        const kl_ax_loop *L = &ctx->loops[i];
        if (!L->var || strcmp(L->var, name)) continue;
        if (!node_within(anchor, L->node)) continue;
        if (best < 0 || ctx->loops[i].depth > ctx->loops[best].depth) best = (int)i;
    }
    return best;
}

/* A file-level `constexpr`/`const` integer, or a const local of the kernel: its initializer. */
static TSNode global_const_init(const kl_source *s, const char *name);

static form eval_identifier(kl_affine_ctx *ctx, const env *e, const kl_source *s, TSNode n, TSNode anchor, int depth)
{
    char *name = kl_node_text(s, n);
    if (!name) return form_bad("out of memory");
    form r;
    for (unsigned i = 0; i < e->nb; i++) {
        if (!strcmp(e->b[i].name, name)) {
            r = e->b[i].value;
            goto done;
        }
    }
    if (!e->in_helper) {
        int L = enclosing_loop_with_var(ctx, name, anchor);
        if (L >= 0) {
            r = form_var(ctx, name);
            goto done;
        }
        const local_var *lv = local_find(ctx, name);
        if (lv) {
            unsigned cnt = kl_affine_assign_count(ctx, name);
            if (lv->is_array) {
                r = form_badf(ctx, "'%s' is an array, not an index (line %u)", name, line_of(n));
            } else if (cnt == 1 && !ts_node_is_null(lv->def)) {
                /* the definition must come before the use */
                if (ts_node_start_byte(lv->def) > ts_node_start_byte(anchor) && s == ctx->src)
                    r = form_badf(ctx, "'%s' is used before it is assigned (line %u)", name, line_of(n));
                else
                    r = eval(ctx, e, ctx->src, lv->def, lv->def, depth + 1);
            } else if (cnt == 0) {
                r = form_badf(ctx, "'%s' is never assigned (line %u)", name, line_of(n));
            } else {
                /* a loop variable used outside its loop, or a variable updated in place */
                r = form_badf(ctx, "'%s' is assigned %u times (line %u)", name, cnt, line_of(n));
            }
            goto done;
        }
        int p = kl_affine_param_index(ctx, name);
        if (p >= 0) {
            if (kl_affine_assign_count(ctx, name) > 0)
                r = form_badf(ctx, "parameter '%s' is modified in the kernel (line %u)", name, line_of(n));
            else if (ctx->params[p].pointer)
                r = form_badf(ctx, "'%s' is a pointer, not an index (line %u)", name, line_of(n));
            else
                r = form_const(poly_sym(ctx, name));
            goto done;
        }
    }
    const macro_def *md = macro_find(ctx->macros, name);
    if (md) {
        if (md->function_like) {
            r = form_badf(ctx, "macro '%s' used without arguments (line %u)", name, line_of(n));
        } else if (md->defs > 1) {
            r = form_badf(ctx, "macro '%s' is defined more than once", name);
        } else {
            char *body = macro_body_clean(md->body);
            const kl_source *ms;
            TSNode me;
            if (body && mini_parse(ctx, body, &ms, &me)) {
                form f = eval(ctx, e, ms, me, anchor, depth + 1);
                /* an invariant macro is kept as its name: coefficients read like the source */
                int64_t v;
                if (f.ok && f.nv == 0 && !poly_is_int(f.cst, &v))
                    r = form_const(poly_sym(ctx, name));
                else
                    r = f;
            } else {
                r = form_badf(ctx, "macro '%s' does not expand to a simple expression", name);
            }
            free(body);
        }
        goto done;
    }
    TSNode gi = global_const_init(ctx->src, name);
    if (!ts_node_is_null(gi)) {
        int64_t v;
        if (kl_const_eval(ctx->src, ctx->fn, gi, false, &v, NULL, 0))
            r = form_const(poly_int(ctx, v));
        else
            r = form_const(poly_sym(ctx, name));
        goto done;
    }
    /* template parameters, enumerators, other globals: launch-invariant symbols */
    r = form_const(poly_sym(ctx, name));
done:
    free(name);
    return r;
}

/* Invariant operand pair or the reason it is not: used for / % >> & | etc. */
static form opaque_if_invariant(kl_affine_ctx *ctx, const kl_source *s, TSNode n, form a, form b, const char *op)
{
    if (!a.ok) return a;
    if (!b.ok) return b;
    if (a.nv == 0 && b.nv == 0) {
        int64_t x, y;
        if (poly_is_int(a.cst, &x) && poly_is_int(b.cst, &y)) {
            if (!strcmp(op, "/") && y != 0) return form_const(poly_int(ctx, x / y));
            if (!strcmp(op, "%") && y != 0) return form_const(poly_int(ctx, x % y));
            if (!strcmp(op, ">>") && y >= 0 && y < 63) return form_const(poly_int(ctx, x >> y));
            if (!strcmp(op, "&")) return form_const(poly_int(ctx, x & y));
            if (!strcmp(op, "|")) return form_const(poly_int(ctx, x | y));
            if (!strcmp(op, "^")) return form_const(poly_int(ctx, x ^ y));
        }
        return form_const(poly_sym(ctx, node_sym(ctx, s, n)));
    }
    char *t = kl_node_text(s, n);
    form f = form_badf(ctx, "'%.60s' is not affine: '%s' of an index (line %u)", t ? t : "", op, line_of(n));
    free(t);
    return f;
}

static form eval_call(kl_affine_ctx *ctx, const env *e, const kl_source *s, TSNode n, TSNode anchor, int depth)
{
    TSNode fnode = ts_node_child_by_field_name(n, "function", 8);
    TSNode args = ts_node_child_by_field_name(n, "arguments", 9);
    if (type_is(fnode, "template_function")) {
        TSNode nm = ts_node_child_by_field_name(fnode, "name", 4);
        if (kl_node_text_is(s, nm, "static_cast") && ts_node_named_child_count(args) == 1)
            return eval(ctx, e, s, ts_node_named_child(args, 0), anchor, depth + 1);
    }
    char *fname = kl_node_text(s, fnode);
    if (!fname) return form_bad("out of memory");
    form r;
    unsigned na = ts_node_named_child_count(args);
    const macro_def *md = type_is(fnode, "identifier") ? macro_find(ctx->macros, fname) : NULL;
    if (md && md->function_like && md->defs == 1) {
        if (md->nparams != na) {
            r = form_badf(ctx, "macro '%s' takes %u arguments, given %u (line %u)", fname, md->nparams, na, line_of(n));
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
        if (exp && mini_parse(ctx, exp, &ms, &me))
            r = eval(ctx, e, ms, me, anchor, depth + 1);
        else
            r = form_badf(ctx, "macro '%s' does not expand to a simple expression (line %u)", fname, line_of(n));
        free(exp);
        goto done;
    }
    if (!strcmp(fname, "min") || !strcmp(fname, "max") || !strcmp(fname, "umin") || !strcmp(fname, "umax")) {
        bool inv = true;
        for (unsigned i = 0; i < na; i++) {
            form a = eval(ctx, e, s, ts_node_named_child(args, i), anchor, depth + 1);
            if (!a.ok || a.nv) inv = false;
        }
        r = inv ? form_const(poly_sym(ctx, node_sym(ctx, s, n)))
                : form_badf(ctx, "'%s' of an index is not affine (line %u)", fname, line_of(n));
        goto done;
    }
    /* a __device__ helper whose body is one return statement */
    TSNode helper = type_is(fnode, "identifier") ? kl_ast_function_named(ctx->src, fname) : null_node;
    if (!ts_node_is_null(helper) && !ts_node_eq(helper, ctx->fn)) {
        TSNode body = kl_ast_function_body(helper);
        TSNode ps = kl_ast_function_params(helper);
        unsigned np = ts_node_named_child_count(ps);
        if (ts_node_named_child_count(body) != 1 || !type_is(ts_node_named_child(body, 0), "return_statement")) {
            r = form_badf(ctx, "helper '%s' is more than one return statement (line %u)", fname, line_of(n));
            goto done;
        }
        if (np != na) {
            r = form_badf(ctx, "helper '%s' called with %u arguments, it takes %u (line %u)", fname, na, np, line_of(n));
            goto done;
        }
        binding *bs = aalloc(ctx, (np ? np : 1) * sizeof *bs);
        if (!bs) {
            r = form_bad("out of memory");
            goto done;
        }
        for (unsigned i = 0; i < np; i++) {
            TSNode pd = ts_node_named_child(ps, i);
            TSNode pn = kl_ast_declarator_name(ts_node_child_by_field_name(pd, "declarator", 10));
            bs[i].name = node_sym(ctx, ctx->src, pn);
            bs[i].value = eval(ctx, e, s, ts_node_named_child(args, i), anchor, depth + 1);
        }
        env he = {bs, np, true};
        TSNode ret = ts_node_named_child(ts_node_named_child(body, 0), 0);
        r = eval(ctx, &he, ctx->src, ret, anchor, depth + 1);
        goto done;
    }
    if (!strcmp(fname, "__ldg") || kl_str_starts(fname, "__ld"))
        r = form_badf(ctx, "'%s' loads from memory (line %u)", fname, line_of(n));
    else
        r = form_badf(ctx, "calls '%s' (line %u)", fname, line_of(n));
done:
    free(fname);
    return r;
}

/* The variable an lvalue names: `d` of `d`, `d.n`, `(d).m.k`; a null node for anything else
 * (`p->n`, `a[i]`: not a write to a variable of the kernel's own). */
static TSNode lvalue_variable(TSNode n)
{
    for (;;) {
        if (type_is(n, "parenthesized_expression")) n = ts_node_named_child(n, 0);
        else if (type_is(n, "field_expression") && !ts_node_is_null(ts_node_child_by_field_name(n, "operator", 8)) &&
                 ts_node_type(ts_node_child_by_field_name(n, "operator", 8))[0] == '.')
            n = ts_node_child_by_field_name(n, "argument", 8);
        else return type_is(n, "identifier") ? n : (TSNode){0};
    }
}

/* Is the field expression n (`d.n`, `d.dims.m`) a member of a kernel parameter passed by value (no
 * pointer, no `->`) that the kernel never assigns, nor any member of it, nor takes its address? */
static bool uniform_member(const kl_affine_ctx *ctx, const env *e, const kl_source *s, TSNode n)
{
    if (s != ctx->src) return false;
    TSNode v = lvalue_variable(n);
    if (ts_node_is_null(v)) return false;
    char *name = kl_node_text(s, v);
    bool ok = name != NULL;
    for (unsigned i = 0; ok && i < e->nb; i++) ok = strcmp(e->b[i].name, name) != 0;
    int p = ok ? kl_affine_param_index(ctx, name) : -1;
    ok = ok && p >= 0 && !ctx->params[p].pointer && kl_affine_assign_count(ctx, name) == 0 && !local_find(ctx, name);
    free(name);
    return ok;
}

static form eval(kl_affine_ctx *ctx, const env *e, const kl_source *s, TSNode n, TSNode anchor, int depth)
{
    if (depth > MAXDEPTH) return form_bad("expression nests too deeply to analyse");
    if (ctx->oom) return form_bad("out of memory");
    if (ts_node_is_null(n)) return form_bad("missing expression");
    const char *t = ts_node_type(n);
    if (!strcmp(t, "number_literal")) {
        char *txt = kl_node_text(s, n);
        int64_t v;
        bool ok = txt && parse_int_literal(txt, &v);
        form f = ok ? form_const(poly_int(ctx, v))
                    : form_badf(ctx, "'%s' is not an integer (line %u)", txt ? txt : "", line_of(n));
        free(txt);
        return f;
    }
    if (!strcmp(t, "parenthesized_expression")) return eval(ctx, e, s, ts_node_named_child(n, 0), anchor, depth + 1);
    if (!strcmp(t, "identifier")) return eval_identifier(ctx, e, s, n, anchor, depth);
    if (!strcmp(t, "field_expression")) {
        if (kl_ast_less_misparse(s, n, NULL, NULL)) return form_badf(ctx, "a comparison, not an index (line %u)", line_of(n));
        TSNode arg = ts_node_child_by_field_name(n, "argument", 8);
        TSNode fld = ts_node_child_by_field_name(n, "field", 5);
        char *a = kl_node_text(s, arg), *f = kl_node_text(s, fld);
        form r;
        if (!a || !f) {
            r = form_bad("out of memory");
        } else if ((!strcmp(a, "threadIdx") || !strcmp(a, "blockIdx")) &&
                   (!strcmp(f, "x") || !strcmp(f, "y") || !strcmp(f, "z"))) {
            char v[32];
            kl_snprintf(v, sizeof v, "%s.%s", a, f);
            r = form_var(ctx, v);
        } else if ((!strcmp(a, "blockDim") || !strcmp(a, "gridDim")) &&
                   (!strcmp(f, "x") || !strcmp(f, "y") || !strcmp(f, "z"))) {
            char v[32];
            kl_snprintf(v, sizeof v, "%s.%s", a, f);
            r = form_const(poly_sym(ctx, v));
        } else if (!e->in_helper && uniform_member(ctx, e, s, n)) {
            /* a member of a struct passed by value and never written in the kernel (`p.n` of
             * `struct Params p`): the same for every thread, a symbol like a size parameter */
            char *v = kl_node_text(s, n), *sq = v ? squeeze(v) : NULL;
            r = sq ? form_const(poly_sym(ctx, sq)) : form_bad("out of memory");
            free(v);
            free(sq);
        } else {
            r = form_badf(ctx, "reads the member '%s.%s' (line %u)", a, f, line_of(n));
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
        form r = ok ? eval(ctx, e, s, ts_node_child_by_field_name(n, "value", 5), anchor, depth + 1)
                    : form_badf(ctx, "a cast to '%s' (line %u)", sq ? sq : "?", line_of(n));
        free(sq);
        return r;
    }
    if (!strcmp(t, "unary_expression")) {
        TSNode op = ts_node_child_by_field_name(n, "operator", 8);
        form a = eval(ctx, e, s, ts_node_child_by_field_name(n, "argument", 8), anchor, depth + 1);
        if (kl_node_text_is(s, op, "-")) return form_scale(ctx, a, poly_int(ctx, -1));
        if (kl_node_text_is(s, op, "+")) return a;
        return opaque_if_invariant(ctx, s, n, a, form_const((poly){0}), "unary operator");
    }
    if (!strcmp(t, "binary_expression")) {
        TSNode op = ts_node_child_by_field_name(n, "operator", 8);
        char *o = kl_node_text(s, op);
        if (!o) return form_bad("out of memory");
        form a = eval(ctx, e, s, ts_node_child_by_field_name(n, "left", 4), anchor, depth + 1);
        form b = eval(ctx, e, s, ts_node_child_by_field_name(n, "right", 5), anchor, depth + 1);
        form r;
        if (!strcmp(o, "+")) {
            r = form_add(ctx, a, b, 1);
        } else if (!strcmp(o, "-")) {
            r = form_add(ctx, a, b, -1);
        } else if (!strcmp(o, "*")) {
            if (!a.ok)
                r = a;
            else if (!b.ok)
                r = b;
            else if (a.nv == 0)
                r = form_scale(ctx, b, a.cst);
            else if (b.nv == 0)
                r = form_scale(ctx, a, b.cst);
            else
                r = form_badf(ctx, "a product of two indices (line %u)", line_of(n));
        } else if (!strcmp(o, "<<")) {
            int64_t k;
            if (a.ok && b.ok && b.nv == 0 && poly_is_int(b.cst, &k) && k >= 0 && k < 62)
                r = form_scale(ctx, a, poly_int(ctx, (int64_t)1 << k));
            else
                r = opaque_if_invariant(ctx, s, n, a, b, o);
        } else {
            r = opaque_if_invariant(ctx, s, n, a, b, o);
        }
        free(o);
        return r;
    }
    if (!strcmp(t, "call_expression")) return eval_call(ctx, e, s, n, anchor, depth);
    if (!strcmp(t, "sizeof_expression")) {
        int64_t v;
        if (kl_const_eval(s, ctx->fn, n, false, &v, NULL, 0)) return form_const(poly_int(ctx, v));
        return form_const(poly_sym(ctx, node_sym(ctx, s, n)));
    }
    if (!strcmp(t, "conditional_expression")) {
        form c = eval(ctx, e, s, ts_node_child_by_field_name(n, "condition", 9), anchor, depth + 1);
        form a = eval(ctx, e, s, ts_node_child_by_field_name(n, "consequence", 11), anchor, depth + 1);
        form b = eval(ctx, e, s, ts_node_child_by_field_name(n, "alternative", 11), anchor, depth + 1);
        if (c.ok && a.ok && b.ok && !c.nv && !a.nv && !b.nv) return form_const(poly_sym(ctx, node_sym(ctx, s, n)));
        return form_badf(ctx, "a conditional expression of an index (line %u)", line_of(n));
    }
    if (!strcmp(t, "subscript_expression") || !strcmp(t, "pointer_expression")) {
        char *txt = kl_node_text(s, n);
        form f = form_badf(ctx, "'%.60s' is loaded from memory (line %u)", txt ? txt : "", line_of(n));
        free(txt);
        return f;
    }
    if (!strcmp(t, "true") || !strcmp(t, "false")) return form_const(poly_int(ctx, !strcmp(t, "true")));
    return form_badf(ctx, "a %s is not analysed (line %u)", t, line_of(n));
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
        if (type_is(k, "type_qualifier") &&
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
static TSNode decl_init_of(const kl_source *s, TSNode decl, const char *name)
{
    TSNode none = {0};
    uint32_t c = ts_node_named_child_count(decl);
    for (uint32_t i = 0; i < c; i++) {
        TSNode k = ts_node_named_child(decl, i);
        if (type_is(k, "function_declarator") && kl_node_text_is(s, ts_node_child_by_field_name(decl, "type", 4), "dim3")) {
            TSNode nm = ts_node_child_by_field_name(k, "declarator", 10);
            if (type_is(nm, "identifier") && kl_node_text_is(s, nm, name))
                return ts_node_child_by_field_name(k, "parameters", 10);
            continue;
        }
        if (!type_is(k, "init_declarator")) continue;
        TSNode nm = kl_ast_declarator_name(ts_node_child_by_field_name(k, "declarator", 10));
        if (!ts_node_is_null(nm) && kl_node_text_is(s, nm, name)) {
            TSNode v = ts_node_child_by_field_name(k, "value", 5);
            if (type_is(v, "initializer_list") && ts_node_named_child_count(v) == 1) v = ts_node_named_child(v, 0);
            return v;
        }
    }
    return none;
}

static bool find_gconst(TSNode n, void *user)
{
    gconst_find *g = user;
    if (!ts_node_is_null(g->found)) return false;
    if (type_is(n, "function_definition")) return false;
    if (type_is(n, "declaration") && decl_is_const(g->src, n)) {
        TSNode v = decl_init_of(g->src, n, g->name);
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
    if (type_is(n, "declaration")) {
        TSNode v = decl_init_of(ls->src, n, ls->name);
        if (!ts_node_is_null(v)) {
            ls->init = v;
            ls->assigns++;
        }
    } else if (type_is(n, "assignment_expression")) {
        TSNode l = ts_node_child_by_field_name(n, "left", 4);
        /* `block.x = 64` changes a dim3 as much as `block = …` does */
        if (type_is(l, "field_expression")) l = ts_node_child_by_field_name(l, "argument", 8);
        if (type_is(l, "identifier") && kl_node_text_is(ls->src, l, ls->name)) ls->assigns++;
    } else if (type_is(n, "update_expression")) {
        TSNode a = ts_node_child_by_field_name(n, "argument", 8);
        if (type_is(a, "identifier") && kl_node_text_is(ls->src, a, ls->name)) ls->assigns++;
    } else if (type_is(n, "pointer_expression")) {
        TSNode a = ts_node_child_by_field_name(n, "argument", 8);
        if (type_is(a, "identifier") && kl_node_text_is(ls->src, a, ls->name)) ls->assigns += 2;
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
                 line_of(n));
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
        if (type_is(pe, "parenthesized_expression")) ok = ce(c, ms, ts_node_named_child(pe, 0), out);
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
    macro_table macros;
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
    TSNode region = type_is(c->scope, "function_definition") ? kl_ast_function_body(c->scope) : c->scope;
    if (!ts_node_is_null(region)) kl_ast_walk(region, scan_local, &ls);
    if (ls.assigns == 1 && !ts_node_is_null(ls.init)) {
        ok = ce_keep_why(c, src, ls.init, NULL, &v, why, sizeof why);
    } else if (ls.assigns > 1) {
        memo_put(m, c->scope, c->dim3, name, false, 0, "assigned more than once", NULL);
        return cfail(c, at, "assigned more than once");
    } else {
        macro_table none = {0};
        const macro_def *md = macro_find(m && m->macros_ok ? &m->macros : &none, name);
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
        snprintf(r->why, r->why_size, "'%.60s' is %s (line %u)", t ? t : "", what, line_of(n));
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

/* ======================================================================================
 * building the context
 * ====================================================================================== */

static kl_status counts_bump(kl_affine_ctx *ctx, const char *name, unsigned by)
{
    for (unsigned i = 0; i < ctx->ncounts; i++) {
        if (!strcmp(ctx->counts[i].name, name)) {
            ctx->counts[i].n += by;
            return KL_OK;
        }
    }
    name_count *nc = realloc(ctx->counts, (ctx->ncounts + 1) * sizeof *nc);
    if (!nc) return KL_ERR_NOMEM;
    ctx->counts = nc;
    nc[ctx->ncounts].name = kl_strdup(name);
    if (!nc[ctx->ncounts].name) return KL_ERR_NOMEM;
    nc[ctx->ncounts++].n = by;
    return KL_OK;
}

static kl_status bump_node(kl_affine_ctx *ctx, TSNode id, unsigned by)
{
    if (!ts_node_is_null(id) && type_is(id, "field_expression")) id = lvalue_variable(id); /* d.n = …: d changes */
    if (ts_node_is_null(id) || !type_is(id, "identifier")) return KL_OK;
    char *nm = kl_node_text(ctx->src, id);
    if (!nm) return KL_ERR_NOMEM;
    kl_status st = counts_bump(ctx, nm, by);
    free(nm);
    return st;
}

static kl_status add_local(kl_affine_ctx *ctx, TSNode decl, TSNode declarator, TSNode value)
{
    TSNode nm = kl_ast_declarator_name(declarator);
    if (ts_node_is_null(nm)) return KL_OK;
    local_var lv;
    memset(&lv, 0, sizeof lv);
    lv.name = kl_node_text(ctx->src, nm);
    if (!lv.name) return KL_ERR_NOMEM;
    lv.decl = decl;
    lv.def = value;
    char *dt = kl_node_text(ctx->src, decl);
    lv.is_shared = dt && strstr(dt, "__shared__");
    free(dt);
    /* array dims: walk array_declarators from the outside in */
    TSNode d = declarator;
    if (type_is(d, "init_declarator")) d = ts_node_child_by_field_name(d, "declarator", 10);
    TSNode dimsn[4];
    unsigned nd = 0;
    while (type_is(d, "array_declarator")) {
        if (nd < 4) dimsn[nd++] = ts_node_child_by_field_name(d, "size", 4);
        d = ts_node_child_by_field_name(d, "declarator", 10);
    }
    if (nd) {
        lv.is_array = true;
        lv.ndims = nd;
        /* the outermost array_declarator holds the LAST dimension: reverse */
        for (unsigned i = 0; i < nd; i++) {
            int64_t v = -1;
            TSNode sz = dimsn[nd - 1 - i];
            if (ts_node_is_null(sz) || !kl_const_eval(ctx->src, ctx->fn, sz, false, &v, NULL, 0)) v = -1;
            lv.dims[i] = v;
        }
    }
    local_var *items = realloc(ctx->locals, (ctx->nlocals + 1) * sizeof *items);
    if (!items) {
        free(lv.name);
        return KL_ERR_NOMEM;
    }
    ctx->locals = items;
    /* a second declaration of the same name: keep the first, count both */
    for (unsigned i = 0; i < ctx->nlocals; i++) {
        if (!strcmp(items[i].name, lv.name)) {
            free(lv.name);
            return KL_OK;
        }
    }
    items[ctx->nlocals++] = lv;
    return KL_OK;
}

typedef struct scan_state {
    kl_affine_ctx *ctx;
    kl_status st;
} scan_state;

static bool scan_body(TSNode n, void *user)
{
    scan_state *ss = user;
    kl_affine_ctx *ctx = ss->ctx;
    if (ss->st != KL_OK) return false;
    const char *t = ts_node_type(n);
    if (!strcmp(t, "declaration")) {
        uint32_t c = ts_node_named_child_count(n);
        for (uint32_t i = 0; i < c; i++) {
            TSNode k = ts_node_named_child(n, i);
            const char *kt = ts_node_type(k);
            if (!strcmp(kt, "init_declarator")) {
                TSNode v = ts_node_child_by_field_name(k, "value", 5);
                if (type_is(v, "initializer_list") && ts_node_named_child_count(v) == 1) v = ts_node_named_child(v, 0);
                ss->st = add_local(ctx, n, k, v);
                if (ss->st == KL_OK) ss->st = bump_node(ctx, kl_ast_declarator_name(k), 1);
            } else if (!strcmp(kt, "identifier") || !strcmp(kt, "array_declarator") ||
                       !strcmp(kt, "pointer_declarator") || !strcmp(kt, "reference_declarator")) {
                if (ts_node_eq(k, ts_node_child_by_field_name(n, "type", 4))) continue;
                ss->st = add_local(ctx, n, k, null_node);
                if (ss->st == KL_OK && (!strcmp(kt, "identifier") || !strcmp(kt, "pointer_declarator")))
                    ss->st = bump_node(ctx, kl_ast_declarator_name(k), 0);
            }
        }
    } else if (!strcmp(t, "assignment_expression")) {
        TSNode l = ts_node_child_by_field_name(n, "left", 4);
        if (type_is(l, "field_expression")) ss->st = bump_node(ctx, l, 1);
        if (type_is(l, "identifier")) {
            ss->st = bump_node(ctx, l, 1);
            /* a local declared without initializer and assigned once by `=`: its definition */
            char *nm = kl_node_text(ctx->src, l);
            TSNode op = ts_node_child_by_field_name(n, "operator", 8);
            if (nm && kl_node_text_is(ctx->src, op, "=")) {
                for (unsigned i = 0; i < ctx->nlocals; i++)
                    if (!strcmp(ctx->locals[i].name, nm) && ts_node_is_null(ctx->locals[i].def))
                        ctx->locals[i].def = ts_node_child_by_field_name(n, "right", 5);
            }
            free(nm);
        }
    } else if (!strcmp(t, "update_expression")) {
        ss->st = bump_node(ctx, ts_node_child_by_field_name(n, "argument", 8), 1);
    } else if (!strcmp(t, "pointer_expression")) {
        TSNode op = ts_node_child_by_field_name(n, "operator", 8);
        if (kl_node_text_is(ctx->src, op, "&")) ss->st = bump_node(ctx, ts_node_child_by_field_name(n, "argument", 8), 2);
    }
    return true;
}

static kl_status load_params(kl_affine_ctx *ctx)
{
    TSNode ps = kl_ast_function_params(ctx->fn);
    uint32_t c = ts_node_named_child_count(ps);
    ctx->params = calloc(c ? c : 1, sizeof *ctx->params);
    if (!ctx->params) return KL_ERR_NOMEM;
    for (uint32_t i = 0; i < c; i++) {
        TSNode pd = ts_node_named_child(ps, i);
        if (!type_is(pd, "parameter_declaration")) continue;
        kl_param_info *p = &ctx->params[ctx->nparams];
        p->decl = pd;
        TSNode d = ts_node_child_by_field_name(pd, "declarator", 10);
        TSNode nm = kl_ast_declarator_name(d);
        p->name = ts_node_is_null(nm) ? kl_strdup("") : kl_node_text(ctx->src, nm);
        TSNode ty = ts_node_child_by_field_name(pd, "type", 4);
        p->elem = kl_node_text(ctx->src, ty);
        if (!p->name || !p->elem) return KL_ERR_NOMEM;
        for (TSNode k = d; !ts_node_is_null(k); k = ts_node_child_by_field_name(k, "declarator", 10)) {
            if (type_is(k, "pointer_declarator") || type_is(k, "array_declarator")) p->pointer = true;
            if (type_is(k, "identifier")) break;
        }
        char *all = kl_node_text(ctx->src, pd);
        if (!all) return KL_ERR_NOMEM;
        p->is_restrict = strstr(all, "__restrict__") || strstr(all, "__restrict") || strstr(all, "restrict");
        /* const qualifying the pointee: `const float *p` or `float const *p` (not `float *const p`) */
        uint32_t kc = ts_node_child_count(pd);
        for (uint32_t k = 0; k < kc; k++) {
            TSNode q = ts_node_child(pd, k);
            if (type_is(q, "type_qualifier") && kl_node_text_is(ctx->src, q, "const")) p->is_const = true;
        }
        free(all);
        ctx->nparams++;
    }
    return KL_OK;
}

static const char *loop_kind_cmp_flip(const char *op)
{
    if (!strcmp(op, "<")) return ">";
    if (!strcmp(op, ">")) return "<";
    if (!strcmp(op, "<=")) return ">=";
    if (!strcmp(op, ">=")) return "<=";
    return op;
}

/* From a condition, the comparison `var OP bound` (var on either side). */
static bool read_cmp(const kl_source *s, TSNode cond, const char *var, const char **op, TSNode *bound, char **bound_text)
{
    if (type_is(cond, "condition_clause")) cond = ts_node_named_child(cond, 0);
    while (type_is(cond, "parenthesized_expression")) cond = ts_node_named_child(cond, 0);
    *bound_text = NULL;
    if (type_is(cond, "binary_expression")) {
        TSNode o = ts_node_child_by_field_name(cond, "operator", 8);
        static const char *const ops[] = {"<", "<=", ">", ">=", "!=", NULL};
        const char *which = NULL;
        for (int i = 0; ops[i]; i++)
            if (kl_node_text_is(s, o, ops[i])) which = ops[i];
        if (!which) return false;
        TSNode l = ts_node_child_by_field_name(cond, "left", 4), r = ts_node_child_by_field_name(cond, "right", 5);
        if (type_is(l, "identifier") && kl_node_text_is(s, l, var)) {
            *op = which;
            *bound = r;
        } else if (type_is(r, "identifier") && kl_node_text_is(s, r, var)) {
            *op = loop_kind_cmp_flip(which);
            *bound = l;
        } else {
            return false;
        }
        *bound_text = kl_node_text(s, *bound);
        return *bound_text != NULL;
    }
    return false;
}

/* The variable a for-loop's update changes and its step. */
static bool read_update(kl_affine_ctx *ctx, TSNode up, char **var, char **step, bool *is_int, int64_t *v)
{
    const kl_source *s = ctx->src;
    *is_int = false;
    if (type_is(up, "update_expression")) {
        TSNode a = ts_node_child_by_field_name(up, "argument", 8);
        TSNode o = ts_node_child_by_field_name(up, "operator", 8);
        if (!type_is(a, "identifier")) return false;
        *var = kl_node_text(s, a);
        bool inc = kl_node_text_is(s, o, "++");
        *step = kl_strdup(inc ? "1" : "-1");
        *is_int = true;
        *v = inc ? 1 : -1;
        return *var && *step;
    }
    if (type_is(up, "assignment_expression")) {
        TSNode l = ts_node_child_by_field_name(up, "left", 4);
        TSNode o = ts_node_child_by_field_name(up, "operator", 8);
        TSNode r = ts_node_child_by_field_name(up, "right", 5);
        if (!type_is(l, "identifier")) return false;
        *var = kl_node_text(s, l);
        char *rt = kl_node_text(s, r);
        char *ot = kl_node_text(s, o);
        if (!*var || !rt || !ot) {
            free(rt);
            free(ot);
            return false;
        }
        int64_t k;
        bool kc = kl_const_eval(s, ctx->fn, r, false, &k, NULL, 0);
        kl_strbuf sb = KL_STRBUF_INIT;
        if (!strcmp(ot, "+=")) {
            kl_strbuf_adds(&sb, rt);
            if (kc) *is_int = true, *v = k;
        } else if (!strcmp(ot, "-=")) {
            kl_strbuf_addf(&sb, "-(%s)", rt);
            if (kc) *is_int = true, *v = -k;
        } else if (!strcmp(ot, "=")) {
            /* i = i + e */
            if (type_is(r, "binary_expression")) {
                TSNode rl = ts_node_child_by_field_name(r, "left", 4);
                TSNode ro = ts_node_child_by_field_name(r, "operator", 8);
                TSNode rr = ts_node_child_by_field_name(r, "right", 5);
                if (type_is(rl, "identifier") && kl_node_text_is(s, rl, *var) && kl_node_text_is(s, ro, "+")) {
                    char *e = kl_node_text(s, rr);
                    kl_strbuf_adds(&sb, e ? e : "");
                    free(e);
                    if (kl_const_eval(s, ctx->fn, rr, false, &k, NULL, 0)) *is_int = true, *v = k;
                }
            }
        } else {
            /* >>= /= *= <<= : multiplicative steps */
            kl_strbuf_addf(&sb, "%.*s%s", (int)(strlen(ot) - 1), ot, rt);
        }
        free(rt);
        free(ot);
        if (sb.len == 0) {
            kl_strbuf_release(&sb);
            return false;
        }
        *step = kl_strbuf_detach(&sb, NULL);
        return *step != NULL;
    }
    if (type_is(up, "comma_expression")) return false;
    return false;
}

static bool eval_trip(kl_affine_ctx *ctx, kl_ax_loop *L, TSNode start, TSNode bound)
{
    int64_t s, b;
    char why[160];
    if (ts_node_is_null(start) || !kl_const_eval(ctx->src, ctx->fn, start, false, &s, why, sizeof why)) {
        free(L->why);
        L->why = kl_strdup(ts_node_is_null(start) ? "the start is unknown" : why);
        return false;
    }
    if (!kl_const_eval(ctx->src, ctx->fn, bound, false, &b, why, sizeof why)) {
        free(L->why);
        L->why = kl_strdup(why);
        return false;
    }
    const char *op = L->cmp;
    if (L->step_is_int) {
        int64_t st = L->step_int;
        if (st == 0) return false;
        int64_t n = -1;
        if (!strcmp(op, "<") && st > 0) n = b > s ? (b - s + st - 1) / st : 0;
        else if (!strcmp(op, "<=") && st > 0) n = b >= s ? (b - s) / st + 1 : 0;
        else if (!strcmp(op, ">") && st < 0) n = s > b ? (s - b + (-st) - 1) / (-st) : 0;
        else if (!strcmp(op, ">=") && st < 0) n = s >= b ? (s - b) / (-st) + 1 : 0;
        else if (!strcmp(op, "!=") && (b - s) % st == 0 && (b - s) / st >= 0) n = (b - s) / st;
        if (n < 0) return false;
        L->trip_known = true;
        L->trip = n;
        return true;
    }
    /* multiplicative steps: simulate (at most 64 iterations) */
    if (!L->step) return false;
    char kind = L->step[0];
    int64_t k;
    char *end;
    const char *num = L->step + ((kind == '>' || kind == '<') ? 2 : 1);
    k = strtoll(num, &end, 10);
    if (*end || k <= 0) return false;
    int64_t v = s, n = 0;
    for (; n < 65; n++) {
        bool cond = !strcmp(op, "<") ? v < b : !strcmp(op, "<=") ? v <= b : !strcmp(op, ">") ? v > b
                  : !strcmp(op, ">=") ? v >= b : v != b;
        if (!cond) break;
        if (kind == '>') v >>= k;
        else if (kind == '<') v <<= k;
        else if (kind == '/') v /= k;
        else if (kind == '*') v *= k;
        else return false;
    }
    if (n >= 65) return false;
    L->trip_known = true;
    L->trip = n;
    return true;
}

static kl_status add_loop(kl_affine_ctx *ctx, TSNode n, kl_loop_kind kind)
{
    kl_ax_loop *items = realloc(ctx->loops, (ctx->nloops + 1) * sizeof *items);
    if (!items) return KL_ERR_NOMEM;
    ctx->loops = items;
    kl_ax_loop *L = &items[ctx->nloops];
    memset(L, 0, sizeof *L);
    L->node = n;
    L->kind = kind;
    L->parent = -1;
    for (int i = (int)ctx->nloops - 1; i >= 0; i--) {
        if (node_within(n, items[i].node)) {
            L->parent = i;
            L->depth = items[i].depth + 1;
            break;
        }
    }
    ctx->nloops++;
    const kl_source *s = ctx->src;
    /* #pragma unroll on the lines right before (pragmas are blanked out of the tree) */
    {
        const char *tx = kl_source_text(s, NULL);
        uint32_t ls = kl_ast_line_start(tx, ts_node_start_byte(n));
        bool only_blank = true;
        for (uint32_t k = ls; k < ts_node_start_byte(n); k++)
            if (tx[k] != ' ' && tx[k] != '\t') only_blank = false;
        while (only_blank && ls > 0) {
            uint32_t pe = ls - 1; /* the previous line's newline */
            uint32_t ps = kl_ast_line_start(tx, pe);
            uint32_t h = ps;
            while (h < pe && (tx[h] == ' ' || tx[h] == '\t')) h++;
            if (h >= pe || tx[h] != '#') break;
            uint32_t k = h + 1;
            while (k < pe && (tx[k] == ' ' || tx[k] == '\t')) k++;
            if (pe - k < 6 || memcmp(tx + k, "pragma", 6)) break;
            k += 6;
            while (k < pe && (tx[k] == ' ' || tx[k] == '\t')) k++;
            if (pe - k >= 6 && !memcmp(tx + k, "unroll", 6) && (k + 6 == pe || tx[k + 6] == ' ' || tx[k + 6] == '\t' ||
                                                               tx[k + 6] == '\r' || tx[k + 6] == '(')) {
                uint32_t a = k + 6, b = pe;
                while (a < b && (tx[a] == ' ' || tx[a] == '\t')) a++;
                while (b > a && (tx[b - 1] == ' ' || tx[b - 1] == '\t' || tx[b - 1] == '\r')) b--;
                L->has_pragma_unroll = true;
                L->pragma_start = h;
                L->pragma_end = pe;
                L->pragma_arg = kl_strndup(tx + a, b - a);
                if (!L->pragma_arg) return KL_ERR_NOMEM;
                break;
            }
            ls = ps; /* another pragma line: keep looking above it */
        }
    }
    TSNode start = {0}, bound = {0};
    if (kind == KL_LOOP_FOR) {
        TSNode init = ts_node_child_by_field_name(n, "initializer", 11);
        TSNode cond = ts_node_child_by_field_name(n, "condition", 9);
        TSNode up = ts_node_child_by_field_name(n, "update", 6);
        char *uvar = NULL, *step = NULL;
        if (ts_node_is_null(up) || !read_update(ctx, up, &uvar, &step, &L->step_is_int, &L->step_int)) {
            free(uvar);
            free(step);
            L->why = kl_strdup("the update is not `i++`, `i += step`, `i = i + step` or a shift");
            return L->why ? KL_OK : KL_ERR_NOMEM;
        }
        L->var = uvar;
        L->step = step;
        /* start */
        if (type_is(init, "declaration")) {
            start = decl_init_of(s, init, uvar);
        } else if (type_is(init, "assignment_expression")) {
            TSNode l = ts_node_child_by_field_name(init, "left", 4);
            if (kl_node_text_is(s, l, uvar)) start = ts_node_child_by_field_name(init, "right", 5);
        }
        if (!ts_node_is_null(start)) L->start = kl_node_text(s, start);
        const char *op = NULL;
        char *bt = NULL;
        if (!ts_node_is_null(cond) && read_cmp(s, cond, uvar, &op, &bound, &bt)) {
            L->bound = bt;
            L->cmp = kl_strdup(op);
        } else {
            free(bt);
            L->why = kl_strdup("the condition does not compare the induction variable");
            return L->why ? KL_OK : KL_ERR_NOMEM;
        }
    } else {
        /* while / do: the variable compared in the condition and updated once in the body */
        TSNode cond = ts_node_child_by_field_name(n, "condition", 9);
        TSNode c = type_is(cond, "condition_clause") ? ts_node_named_child(cond, 0) : cond;
        while (type_is(c, "parenthesized_expression")) c = ts_node_named_child(c, 0);
        if (type_is(c, "binary_expression")) {
            TSNode l = ts_node_child_by_field_name(c, "left", 4);
            if (type_is(l, "identifier")) {
                char *var = kl_node_text(s, l);
                TSNode body = ts_node_child_by_field_name(n, "body", 4);
                /* the update: a top-level expression statement of the body */
                uint32_t bc = ts_node_named_child_count(body);
                unsigned found = 0;
                TSNode up = {0};
                for (uint32_t i = 0; var && i < bc; i++) {
                    TSNode st = ts_node_named_child(body, i);
                    if (!type_is(st, "expression_statement")) continue;
                    TSNode ex = ts_node_named_child(st, 0);
                    TSNode target = type_is(ex, "update_expression")       ? ts_node_child_by_field_name(ex, "argument", 8)
                                    : type_is(ex, "assignment_expression") ? ts_node_child_by_field_name(ex, "left", 4)
                                                                           : null_node;
                    if (type_is(target, "identifier") && kl_node_text_is(s, target, var)) {
                        found++;
                        up = ex;
                    }
                }
                char *uvar = NULL, *step = NULL;
                if (found == 1 && read_update(ctx, up, &uvar, &step, &L->step_is_int, &L->step_int)) {
                    L->var = uvar;
                    L->step = step;
                    const char *op;
                    char *bt = NULL;
                    if (read_cmp(s, cond, uvar, &op, &bound, &bt)) {
                        L->bound = bt;
                        L->cmp = kl_strdup(op);
                    }
                    /* the start: the variable's single definition before the loop */
                    const local_var *lv = local_find(ctx, uvar);
                    if (lv && !ts_node_is_null(lv->def) && ts_node_start_byte(lv->def) < ts_node_start_byte(n) &&
                        kl_affine_assign_count(ctx, uvar) == 2) {
                        start = lv->def;
                        L->start = kl_node_text(s, start);
                    }
                } else {
                    free(uvar);
                    free(step);
                }
                free(var);
            }
        }
        if (!L->var) {
            L->why = kl_strdup("no induction variable: the condition's variable is not updated exactly once at the "
                               "top level of the body");
            return L->why ? KL_OK : KL_ERR_NOMEM;
        }
    }
    if (L->cmp && !ts_node_is_null(bound)) eval_trip(ctx, L, start, bound);
    return KL_OK;
}

static bool scan_loops(TSNode n, void *user)
{
    scan_state *ss = user;
    if (ss->st != KL_OK) return false;
    const char *t = ts_node_type(n);
    if (!strcmp(t, "for_statement")) ss->st = add_loop(ss->ctx, n, KL_LOOP_FOR);
    else if (!strcmp(t, "while_statement")) ss->st = add_loop(ss->ctx, n, KL_LOOP_WHILE);
    else if (!strcmp(t, "do_statement")) ss->st = add_loop(ss->ctx, n, KL_LOOP_DO);
    return true;
}

static kl_status affine_export(kl_affine_ctx *ctx, form f, kl_affine *out);

static kl_status add_access(kl_affine_ctx *ctx, TSNode n)
{
    /* collect the subscript chain, outermost first */
    TSNode chain[4];
    unsigned nd = 0;
    TSNode base = n;
    while (type_is(base, "subscript_expression")) {
        if (nd < 4) chain[nd++] = base;
        base = ts_node_child_by_field_name(base, "argument", 8);
    }
    if (!type_is(base, "identifier") || nd == 0 || nd > 4) return KL_OK;
    kl_ax_access *items = realloc(ctx->accesses, (ctx->naccesses + 1) * sizeof *items);
    if (!items) return KL_ERR_NOMEM;
    ctx->accesses = items;
    kl_ax_access *A = &items[ctx->naccesses];
    memset(A, 0, sizeof *A);
    A->node = n;
    A->array = kl_node_text(ctx->src, base);
    if (!A->array) return KL_ERR_NOMEM;
    ctx->naccesses++;
    A->param = kl_affine_param_index(ctx, A->array);
    const local_var *lv = local_find(ctx, A->array);
    A->is_shared = lv && lv->is_shared;
    A->ndims = nd;
    /* read / write */
    TSNode p = ts_node_parent(n);
    A->read = true;
    if (type_is(p, "assignment_expression") && ts_node_eq(ts_node_child_by_field_name(p, "left", 4), n)) {
        A->write = true;
        A->read = !kl_node_text_is(ctx->src, ts_node_child_by_field_name(p, "operator", 8), "=");
    } else if (type_is(p, "update_expression")) {
        A->write = true;
    }
    form forms[4];
    for (unsigned i = 0; i < nd; i++) {
        /* chain[0] is the outermost subscript, i.e. the LAST index: reverse */
        TSNode sub = chain[nd - 1 - i];
        TSNode idx = kl_ast_subscript_index(sub);
        env e0 = {NULL, 0, false};
        forms[i] = eval(ctx, &e0, ctx->src, idx, n, 0);
        kl_status st = affine_export(ctx, forms[i], &A->index[i]);
        if (st != KL_OK) return st;
    }
    form flat;
    if (nd == 1) {
        flat = forms[0];
    } else if (lv && lv->is_array && lv->ndims == nd) {
        flat = forms[0];
        for (unsigned i = 1; i < nd; i++) {
            if (lv->dims[i] < 0) {
                flat = form_bad("an array dimension is not a compile-time constant");
                break;
            }
            flat = form_add(ctx, form_scale(ctx, flat, poly_int(ctx, lv->dims[i])), forms[i], 1);
        }
    } else {
        flat = form_bad("a multi-dimensional access of an array of unknown extent");
    }
    kl_status st = affine_export(ctx, flat, &A->flat);
    if (st != KL_OK) return st;
    /* loops */
    int inner = -1;
    for (unsigned L = 0; L < ctx->nloops; L++) {
        if (!node_within(n, ctx->loops[L].node)) continue;
        if (inner < 0 || ctx->loops[L].depth > ctx->loops[inner].depth) inner = (int)L;
        if (L >= 32) continue;
        bool varies = true;
        if (flat.ok && ctx->loops[L].var) varies = form_coef(flat, ctx->loops[L].var).n != 0;
        if (varies)
            A->varies_mask |= 1u << L;
        else
            A->reuse_mask |= 1u << L;
    }
    A->loop = inner;
    /* threadIdx.x: direct coefficient + loop variables' start dependence */
    if (flat.ok) {
        poly tx = form_coef(flat, "threadIdx.x");
        bool known = true;
        for (unsigned i = 0; i < flat.nv; i++) {
            int L = enclosing_loop_with_var(ctx, flat.vars[i], n);
            if (L < 0) continue;
            if (!ctx->loop_txc_ok[L]) {
                known = false;
                break;
            }
            poly add;
            if (!poly_mul(ctx, flat.coefs[i], ctx->loop_txc[L], &add)) {
                known = false;
                break;
            }
            tx = poly_add(ctx, tx, add, 1);
        }
        if (known) {
            A->tx_known = poly_is_int(tx, &A->tx_stride);
            if (tx.n) {
                A->tx_coef = poly_text(tx);
                if (!A->tx_coef) return KL_ERR_NOMEM;
            }
        }
    }
    return KL_OK;
}

static bool scan_accesses(TSNode n, void *user)
{
    scan_state *ss = user;
    if (ss->st != KL_OK) return false;
    if (type_is(n, "subscript_expression")) {
        ss->st = add_access(ss->ctx, n);
        /* the chain's inner subscripts are part of this access; their indices may hold more */
        TSNode base = n;
        while (type_is(base, "subscript_expression")) {
            TSNode idx = ts_node_child_by_field_name(base, "indices", 7);
            kl_ast_walk(idx, scan_accesses, ss);
            base = ts_node_child_by_field_name(base, "argument", 8);
        }
        if (!type_is(base, "identifier")) kl_ast_walk(base, scan_accesses, ss);
        return false;
    }
    return true;
}

kl_status kl_affine_ctx_new(const kl_source *src, TSNode kernel, kl_affine_ctx **out, kl_error *err)
{
    *out = NULL;
    kl_affine_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    ctx->src = src;
    ctx->fn = kernel;
    ctx->body = kl_ast_function_body(kernel);
    kl_status st = KL_OK;
    if (ts_node_is_null(ctx->body)) {
        st = kl_error_set(err, KL_ERR_INVALID, "%s:%u: not a function definition with a body", kl_source_name(src),
                          line_of(kernel));
        goto cleanup;
    }
    const ce_memo *memo = ce_memo_of(src); /* the file's macros, collected once per source */
    if (!memo || !memo->macros_ok) goto oom;
    ctx->macros = &memo->macros;
    if (load_params(ctx) != KL_OK) goto oom;
    scan_state ss = {ctx, KL_OK};
    kl_ast_walk(ctx->body, scan_body, &ss);
    if (ss.st != KL_OK) goto oom;
    kl_ast_walk(ctx->body, scan_loops, &ss);
    if (ss.st != KL_OK) goto oom;
    /* loop starts as forms, and their threadIdx.x dependence (outer loops first) */
    ctx->loop_start = calloc(ctx->nloops + 1, sizeof *ctx->loop_start);
    ctx->loop_txc = calloc(ctx->nloops + 1, sizeof *ctx->loop_txc);
    ctx->loop_txc_ok = calloc(ctx->nloops + 1, sizeof *ctx->loop_txc_ok);
    if (!ctx->loop_start || !ctx->loop_txc || !ctx->loop_txc_ok) goto oom;
    for (unsigned L = 0; L < ctx->nloops; L++) {
        kl_ax_loop *li = &ctx->loops[L];
        ctx->loop_start[L] = form_bad("unknown start");
        if (!li->var || !li->start) continue;
        TSNode sn = {0};
        if (li->kind == KL_LOOP_FOR) {
            TSNode init = ts_node_child_by_field_name(li->node, "initializer", 11);
            sn = type_is(init, "declaration") ? decl_init_of(src, init, li->var)
                                               : ts_node_child_by_field_name(init, "right", 5);
        } else {
            const local_var *lv = local_find(ctx, li->var);
            if (lv) sn = lv->def;
        }
        if (ts_node_is_null(sn)) continue;
        env e0 = {NULL, 0, false};
        /* the start is evaluated outside the loop itself: anchor at the loop node's parent */
        ctx->loop_start[L] = eval(ctx, &e0, src, sn, ts_node_parent(li->node), 0);
        form f = ctx->loop_start[L];
        if (!f.ok) continue;
        /* a step depending on threadIdx.x would break the picture: steps are text; accept
         * invariant-looking steps only (no threadIdx in their text) */
        if (li->step && strstr(li->step, "threadIdx")) continue;
        poly tx = form_coef(f, "threadIdx.x");
        bool ok = true;
        for (unsigned i = 0; i < f.nv; i++) {
            int P = enclosing_loop_with_var(ctx, f.vars[i], li->node);
            if (P < 0 || P == (int)L) continue;
            if (!ctx->loop_txc_ok[P]) {
                ok = false;
                break;
            }
            poly add;
            if (!poly_mul(ctx, f.coefs[i], ctx->loop_txc[P], &add)) {
                ok = false;
                break;
            }
            tx = poly_add(ctx, tx, add, 1);
        }
        ctx->loop_txc[L] = tx;
        ctx->loop_txc_ok[L] = ok;
    }
    kl_ast_walk(ctx->body, scan_accesses, &ss);
    if (ss.st != KL_OK || ctx->oom) goto oom;
    *out = ctx;
    return KL_OK;
oom:
    st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
cleanup:
    kl_affine_ctx_free(ctx);
    return st;
}

void kl_affine_ctx_free(kl_affine_ctx *ctx)
{
    if (!ctx) return;
    for (unsigned i = 0; i < ctx->nparams; i++) {
        free(ctx->params[i].name);
        free(ctx->params[i].elem);
    }
    free(ctx->params);
    for (unsigned i = 0; i < ctx->nlocals; i++) free(ctx->locals[i].name);
    free(ctx->locals);
    for (unsigned i = 0; i < ctx->ncounts; i++) free(ctx->counts[i].name);
    free(ctx->counts);
    for (unsigned i = 0; i < ctx->nloops; i++) {
        kl_ax_loop *L = &ctx->loops[i];
        free(L->var), free(L->start), free(L->bound), free(L->cmp), free(L->step), free(L->why), free(L->pragma_arg);
    }
    free(ctx->loops);
    free(ctx->loop_start);
    free(ctx->loop_txc);
    free(ctx->loop_txc_ok);
    for (unsigned i = 0; i < ctx->naccesses; i++) {
        kl_ax_access *A = &ctx->accesses[i];
        free(A->array);
        for (unsigned k = 0; k < A->ndims && k < 4; k++) kl_affine_release(&A->index[k]);
        kl_affine_release(&A->flat);
        free(A->tx_coef);
    }
    free(ctx->accesses);
    for (unsigned i = 0; i < ctx->nminis; i++) {
        free(ctx->minis[i].key);
        kl_source_free(ctx->minis[i].src);
    }
    free(ctx->minis);
    free(ctx->interned);
    while (ctx->arena) {
        arena_block *n = ctx->arena->next;
        free(ctx->arena);
        ctx->arena = n;
    }
    free(ctx);
}

TSNode kl_affine_ctx_function(const kl_affine_ctx *ctx) { return ctx->fn; }

/* ======================================================================================
 * public forms
 * ====================================================================================== */

static kl_status affine_export(kl_affine_ctx *ctx, form f, kl_affine *out)
{
    memset(out, 0, sizeof *out);
    (void)ctx;
    if (!f.ok) {
        out->why = kl_strdup(f.why ? f.why : "not affine");
        return out->why ? KL_OK : KL_ERR_NOMEM;
    }
    out->ok = true;
    out->constant = poly_text(f.cst);
    out->const_is_int = poly_is_int(f.cst, &out->const_int);
    if (!out->constant) return KL_ERR_NOMEM;
    if (f.nv) {
        out->terms = calloc(f.nv, sizeof *out->terms);
        if (!out->terms) return KL_ERR_NOMEM;
    }
    for (unsigned i = 0; i < f.nv; i++) {
        kl_affine_term *t = &out->terms[out->nterms++];
        t->var = kl_strdup(f.vars[i]);
        t->coef = poly_text(f.coefs[i]);
        t->coef_is_int = poly_is_int(f.coefs[i], &t->coef_int);
        if (!t->var || !t->coef) return KL_ERR_NOMEM;
    }
    return KL_OK;
}

kl_status kl_affine_of(kl_affine_ctx *ctx, TSNode expr, kl_affine *out)
{
    env e0 = {NULL, 0, false};
    form f = eval(ctx, &e0, ctx->src, expr, expr, 0);
    if (ctx->oom) {
        memset(out, 0, sizeof *out);
        return KL_ERR_NOMEM;
    }
    kl_status st = affine_export(ctx, f, out);
    if (st != KL_OK) kl_affine_release(out);
    return st;
}

void kl_affine_release(kl_affine *a)
{
    if (!a) return;
    free(a->why);
    free(a->constant);
    for (unsigned i = 0; i < a->nterms; i++) {
        free(a->terms[i].var);
        free(a->terms[i].coef);
    }
    free(a->terms);
    memset(a, 0, sizeof *a);
}

const char *kl_affine_coef(const kl_affine *a, const char *var)
{
    for (unsigned i = 0; a->ok && i < a->nterms; i++)
        if (!strcmp(a->terms[i].var, var)) return a->terms[i].coef;
    return NULL;
}

bool kl_affine_coef_int(const kl_affine *a, const char *var, int64_t *v)
{
    *v = 0;
    if (!a->ok) return false;
    for (unsigned i = 0; i < a->nterms; i++) {
        if (!strcmp(a->terms[i].var, var)) {
            *v = a->terms[i].coef_int;
            return a->terms[i].coef_is_int;
        }
    }
    return true;
}

bool kl_affine_varies(const kl_affine *a) { return a->ok && a->nterms > 0; }

char *kl_affine_to_text(const kl_affine *a)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    if (!a->ok) {
        kl_strbuf_adds(&sb, "<not affine>");
        return kl_strbuf_detach(&sb, NULL);
    }
    for (unsigned i = 0; i < a->nterms; i++) {
        if (i) kl_strbuf_adds(&sb, " + ");
        if (a->terms[i].coef_is_int && a->terms[i].coef_int == 1)
            kl_strbuf_adds(&sb, a->terms[i].var);
        else if (strchr(a->terms[i].coef, ' '))
            kl_strbuf_addf(&sb, "(%s)*%s", a->terms[i].coef, a->terms[i].var);
        else
            kl_strbuf_addf(&sb, "%s*%s", a->terms[i].coef, a->terms[i].var);
    }
    if (!a->const_is_int || a->const_int != 0 || a->nterms == 0) {
        if (a->nterms) kl_strbuf_adds(&sb, " + ");
        kl_strbuf_adds(&sb, a->constant);
    }
    return kl_strbuf_detach(&sb, NULL);
}

unsigned kl_affine_loop_count(const kl_affine_ctx *ctx) { return ctx->nloops; }
const kl_ax_loop *kl_affine_loop(const kl_affine_ctx *ctx, unsigned i) { return i < ctx->nloops ? &ctx->loops[i] : NULL; }

int kl_affine_loop_index(const kl_affine_ctx *ctx, TSNode n)
{
    for (unsigned i = 0; i < ctx->nloops; i++)
        if (ts_node_eq(ctx->loops[i].node, n)) return (int)i;
    return -1;
}

int kl_affine_loop_enclosing(const kl_affine_ctx *ctx, TSNode n)
{
    int best = -1;
    for (unsigned i = 0; i < ctx->nloops; i++) {
        if (ts_node_eq(ctx->loops[i].node, n) || !node_within(n, ctx->loops[i].node)) continue;
        if (best < 0 || ctx->loops[i].depth > ctx->loops[best].depth) best = (int)i;
    }
    return best;
}

unsigned kl_affine_access_count(const kl_affine_ctx *ctx) { return ctx->naccesses; }
const kl_ax_access *kl_affine_access(const kl_affine_ctx *ctx, unsigned i)
{
    return i < ctx->naccesses ? &ctx->accesses[i] : NULL;
}

unsigned kl_affine_param_count(const kl_affine_ctx *ctx) { return ctx->nparams; }
const kl_param_info *kl_affine_param(const kl_affine_ctx *ctx, unsigned i) { return i < ctx->nparams ? &ctx->params[i] : NULL; }

int kl_affine_param_index(const kl_affine_ctx *ctx, const char *name)
{
    for (unsigned i = 0; i < ctx->nparams; i++)
        if (!strcmp(ctx->params[i].name, name)) return (int)i;
    return -1;
}
