/* Index-expression analysis: affine forms, loops and accesses of a kernel (affine.h). This half:
 * the tree helpers, the launches, the building of a kernel's context and the public forms;
 * affine_eval.c evaluates (affine_int.h). */
#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "syntax/affine.h"
#include "syntax/affine_int.h"
#include "syntax/memo.h"
#include "util/util.h"

static const TSNode null_node; /* a null node: zero-initialised */

/* ======================================================================================
 * tree helpers
 * ====================================================================================== */

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

/* Cursors kept per thread and per depth of nested walks (a visitor may walk a subtree itself):
 * a cursor's stack is allocated once per thread, not at every walk. Freed when the thread ends. */
#define WALK_CURSORS 16
typedef struct walk_cursors {
    TSTreeCursor cur[WALK_CURSORS];
    unsigned made, depth;
} walk_cursors;
static pthread_key_t walk_key;
static pthread_once_t walk_once = PTHREAD_ONCE_INIT;
static bool walk_key_ok;

static void walk_cursors_free(void *p)
{
    walk_cursors *w = p;
    for (unsigned i = 0; i < w->made; i++) ts_tree_cursor_delete(&w->cur[i]);
    free(w);
}

static void walk_key_make(void) { walk_key_ok = pthread_key_create(&walk_key, walk_cursors_free) == 0; }

static walk_cursors *thread_cursors(void)
{
    pthread_once(&walk_once, walk_key_make);
    if (!walk_key_ok) return NULL;
    walk_cursors *w = pthread_getspecific(walk_key);
    if (w) return w;
    w = calloc(1, sizeof *w);
    if (w && pthread_setspecific(walk_key, w) != 0) {
        free(w);
        w = NULL;
    }
    return w;
}

void kl_ast_walk(TSNode n, kl_ast_visit_fn fn, void *user)
{
    if (ts_node_is_null(n)) return;
    walk_cursors *w = thread_cursors();
    TSTreeCursor own, *cur = &own;
    bool pooled = w && w->depth < WALK_CURSORS;
    if (pooled) {
        unsigned d = w->depth++;
        if (d < w->made) {
            ts_tree_cursor_reset(&w->cur[d], n);
        } else {
            w->cur[d] = ts_tree_cursor_new(n);
            w->made++;
        }
        cur = &w->cur[d];
    } else {
        own = ts_tree_cursor_new(n);
    }
    for (;;) {
        TSNode c = ts_tree_cursor_current_node(cur);
        bool descend = fn(c, user);
        if (descend && ts_tree_cursor_goto_first_child(cur)) continue;
        for (;;) {
            if (ts_node_eq(ts_tree_cursor_current_node(cur), n)) goto done;
            if (ts_tree_cursor_goto_next_sibling(cur)) break;
            if (!ts_tree_cursor_goto_parent(cur)) goto done;
        }
    }
done:
    if (pooled)
        w->depth--;
    else
        ts_tree_cursor_delete(&own);
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
        if (affine__type_is(k, "function_declarator") || affine__type_is(k, "compound_statement")) break;
        /* qualifiers may also sit in a storage/type qualifier node */
        if (ts_node_is_named(k) && kl_node_text_is(src, k, qualifier)) return true;
    }
    return false;
}

static TSNode function_declarator(TSNode fn)
{
    TSNode d = ts_node_child_by_field_name(fn, "declarator", 10);
    while (!ts_node_is_null(d) && !affine__type_is(d, "function_declarator")) {
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
    while (affine__type_is(n, "parenthesized_expression")) {
        TSNode in = {0};
        uint32_t k = ts_node_named_child_count(n);
        for (uint32_t i = 0; i < k && ts_node_is_null(in); i++)
            if (!affine__type_is(ts_node_named_child(n, i), "comment")) in = ts_node_named_child(n, i);
        if (ts_node_is_null(in)) break;
        n = in;
    }
    return n;
}

unsigned kl_ast_line(TSNode n) { return ts_node_start_point(n).row + 1; }

TSNode kl_ast_subscript_index(TSNode n)
{
    if (!affine__type_is(n, "subscript_expression")) return (TSNode){0};
    TSNode idx = ts_node_child_by_field_name(n, "indices", 7);
    if (affine__type_is(idx, "subscript_argument_list")) idx = ts_node_named_child(idx, 0);
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
    return affine__type_is(p, "template_declaration") ? p : fn;
}

TSNode kl_ast_enclosing_function(TSNode n)
{
    TSNode p = ts_node_parent(n);
    while (!ts_node_is_null(p) && !affine__type_is(p, "function_definition")) p = ts_node_parent(p);
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
    if (!affine__type_is(n, "function_definition")) return true;
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
    if (!affine__type_is(n, "field_expression")) return false;
    TSNode field = ts_node_child_by_field_name(n, "field", 5);
    if (!affine__type_is(field, "template_method")) return false;
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
    if (!affine__type_is(n, "call_expression")) return true;
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
    if (affine__type_is(f, "template_function")) f = ts_node_child_by_field_name(f, "name", 4);
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
    affine__name_count *nc = realloc(ctx->counts, (ctx->ncounts + 1) * sizeof *nc);
    if (!nc) return KL_ERR_NOMEM;
    ctx->counts = nc;
    nc[ctx->ncounts].name = kl_strdup(name);
    if (!nc[ctx->ncounts].name) return KL_ERR_NOMEM;
    nc[ctx->ncounts++].n = by;
    return KL_OK;
}

static kl_status bump_node(kl_affine_ctx *ctx, TSNode id, unsigned by)
{
    if (!ts_node_is_null(id) && affine__type_is(id, "field_expression")) id = affine__lvalue_variable(id); /* d.n = …: d changes */
    if (ts_node_is_null(id) || !affine__type_is(id, "identifier")) return KL_OK;
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
    affine__local_var lv;
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
    if (affine__type_is(d, "init_declarator")) d = ts_node_child_by_field_name(d, "declarator", 10);
    TSNode dimsn[4];
    unsigned nd = 0;
    while (affine__type_is(d, "array_declarator")) {
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
    affine__local_var *items = realloc(ctx->locals, (ctx->nlocals + 1) * sizeof *items);
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
                if (affine__type_is(v, "initializer_list") && ts_node_named_child_count(v) == 1) v = ts_node_named_child(v, 0);
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
        if (affine__type_is(l, "field_expression")) ss->st = bump_node(ctx, l, 1);
        if (affine__type_is(l, "identifier")) {
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
        if (!affine__type_is(pd, "parameter_declaration")) continue;
        kl_param_info *p = &ctx->params[ctx->nparams];
        p->decl = pd;
        TSNode d = ts_node_child_by_field_name(pd, "declarator", 10);
        TSNode nm = kl_ast_declarator_name(d);
        p->name = ts_node_is_null(nm) ? kl_strdup("") : kl_node_text(ctx->src, nm);
        TSNode ty = ts_node_child_by_field_name(pd, "type", 4);
        p->elem = kl_node_text(ctx->src, ty);
        if (!p->name || !p->elem) return KL_ERR_NOMEM;
        for (TSNode k = d; !ts_node_is_null(k); k = ts_node_child_by_field_name(k, "declarator", 10)) {
            if (affine__type_is(k, "pointer_declarator") || affine__type_is(k, "array_declarator")) p->pointer = true;
            if (affine__type_is(k, "identifier")) break;
        }
        char *all = kl_node_text(ctx->src, pd);
        if (!all) return KL_ERR_NOMEM;
        p->is_restrict = strstr(all, "__restrict__") || strstr(all, "__restrict") || strstr(all, "restrict");
        /* const qualifying the pointee: `const float *p` or `float const *p` (not `float *const p`) */
        uint32_t kc = ts_node_child_count(pd);
        for (uint32_t k = 0; k < kc; k++) {
            TSNode q = ts_node_child(pd, k);
            if (affine__type_is(q, "type_qualifier") && kl_node_text_is(ctx->src, q, "const")) p->is_const = true;
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
    if (affine__type_is(cond, "condition_clause")) cond = ts_node_named_child(cond, 0);
    while (affine__type_is(cond, "parenthesized_expression")) cond = ts_node_named_child(cond, 0);
    *bound_text = NULL;
    if (affine__type_is(cond, "binary_expression")) {
        TSNode o = ts_node_child_by_field_name(cond, "operator", 8);
        static const char *const ops[] = {"<", "<=", ">", ">=", "!=", NULL};
        const char *which = NULL;
        for (int i = 0; ops[i]; i++)
            if (kl_node_text_is(s, o, ops[i])) which = ops[i];
        if (!which) return false;
        TSNode l = ts_node_child_by_field_name(cond, "left", 4), r = ts_node_child_by_field_name(cond, "right", 5);
        if (affine__type_is(l, "identifier") && kl_node_text_is(s, l, var)) {
            *op = which;
            *bound = r;
        } else if (affine__type_is(r, "identifier") && kl_node_text_is(s, r, var)) {
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
    if (affine__type_is(up, "update_expression")) {
        TSNode a = ts_node_child_by_field_name(up, "argument", 8);
        TSNode o = ts_node_child_by_field_name(up, "operator", 8);
        if (!affine__type_is(a, "identifier")) return false;
        *var = kl_node_text(s, a);
        bool inc = kl_node_text_is(s, o, "++");
        *step = kl_strdup(inc ? "1" : "-1");
        *is_int = true;
        *v = inc ? 1 : -1;
        return *var && *step;
    }
    if (affine__type_is(up, "assignment_expression")) {
        TSNode l = ts_node_child_by_field_name(up, "left", 4);
        TSNode o = ts_node_child_by_field_name(up, "operator", 8);
        TSNode r = ts_node_child_by_field_name(up, "right", 5);
        if (!affine__type_is(l, "identifier")) return false;
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
            if (affine__type_is(r, "binary_expression")) {
                TSNode rl = ts_node_child_by_field_name(r, "left", 4);
                TSNode ro = ts_node_child_by_field_name(r, "operator", 8);
                TSNode rr = ts_node_child_by_field_name(r, "right", 5);
                if (affine__type_is(rl, "identifier") && kl_node_text_is(s, rl, *var) && kl_node_text_is(s, ro, "+")) {
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
    if (affine__type_is(up, "comma_expression")) return false;
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
        if (affine__node_within(n, items[i].node)) {
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
        if (affine__type_is(init, "declaration")) {
            start = affine__decl_init_of(s, init, uvar);
        } else if (affine__type_is(init, "assignment_expression")) {
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
        TSNode c = affine__type_is(cond, "condition_clause") ? ts_node_named_child(cond, 0) : cond;
        while (affine__type_is(c, "parenthesized_expression")) c = ts_node_named_child(c, 0);
        if (affine__type_is(c, "binary_expression")) {
            TSNode l = ts_node_child_by_field_name(c, "left", 4);
            if (affine__type_is(l, "identifier")) {
                char *var = kl_node_text(s, l);
                TSNode body = ts_node_child_by_field_name(n, "body", 4);
                /* the update: a top-level expression statement of the body */
                uint32_t bc = ts_node_named_child_count(body);
                unsigned found = 0;
                TSNode up = {0};
                for (uint32_t i = 0; var && i < bc; i++) {
                    TSNode st = ts_node_named_child(body, i);
                    if (!affine__type_is(st, "expression_statement")) continue;
                    TSNode ex = ts_node_named_child(st, 0);
                    TSNode target = affine__type_is(ex, "update_expression")       ? ts_node_child_by_field_name(ex, "argument", 8)
                                    : affine__type_is(ex, "assignment_expression") ? ts_node_child_by_field_name(ex, "left", 4)
                                                                           : null_node;
                    if (affine__type_is(target, "identifier") && kl_node_text_is(s, target, var)) {
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
                    const affine__local_var *lv = affine__local_find(ctx, uvar);
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

static kl_status affine_export(kl_affine_ctx *ctx, affine__form f, kl_affine *out);

static kl_status add_access(kl_affine_ctx *ctx, TSNode n)
{
    /* collect the subscript chain, outermost first */
    TSNode chain[4];
    unsigned nd = 0;
    TSNode base = n;
    while (affine__type_is(base, "subscript_expression")) {
        if (nd < 4) chain[nd++] = base;
        base = ts_node_child_by_field_name(base, "argument", 8);
    }
    if (!affine__type_is(base, "identifier") || nd == 0 || nd > 4) return KL_OK;
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
    const affine__local_var *lv = affine__local_find(ctx, A->array);
    A->is_shared = lv && lv->is_shared;
    A->ndims = nd;
    /* read / write */
    TSNode p = ts_node_parent(n);
    A->read = true;
    if (affine__type_is(p, "assignment_expression") && ts_node_eq(ts_node_child_by_field_name(p, "left", 4), n)) {
        A->write = true;
        A->read = !kl_node_text_is(ctx->src, ts_node_child_by_field_name(p, "operator", 8), "=");
    } else if (affine__type_is(p, "update_expression")) {
        A->write = true;
    }
    affine__form forms[4];
    for (unsigned i = 0; i < nd; i++) {
        /* chain[0] is the outermost subscript, i.e. the LAST index: reverse */
        TSNode sub = chain[nd - 1 - i];
        TSNode idx = kl_ast_subscript_index(sub);
        affine__env e0 = {NULL, 0, false};
        forms[i] = affine__eval(ctx, &e0, ctx->src, idx, n, 0);
        kl_status st = affine_export(ctx, forms[i], &A->index[i]);
        if (st != KL_OK) return st;
    }
    affine__form flat;
    if (nd == 1) {
        flat = forms[0];
    } else if (lv && lv->is_array && lv->ndims == nd) {
        flat = forms[0];
        for (unsigned i = 1; i < nd; i++) {
            if (lv->dims[i] < 0) {
                flat = affine__form_bad("an array dimension is not a compile-time constant");
                break;
            }
            flat = affine__form_add(ctx, affine__form_scale(ctx, flat, affine__poly_int(ctx, lv->dims[i])), forms[i], 1);
        }
    } else {
        flat = affine__form_bad("a multi-dimensional access of an array of unknown extent");
    }
    kl_status st = affine_export(ctx, flat, &A->flat);
    if (st != KL_OK) return st;
    /* loops */
    int inner = -1;
    for (unsigned L = 0; L < ctx->nloops; L++) {
        if (!affine__node_within(n, ctx->loops[L].node)) continue;
        if (inner < 0 || ctx->loops[L].depth > ctx->loops[inner].depth) inner = (int)L;
        if (L >= 32) continue;
        bool varies = true;
        if (flat.ok && ctx->loops[L].var) varies = affine__form_coef(flat, ctx->loops[L].var).n != 0;
        if (varies)
            A->varies_mask |= 1u << L;
        else
            A->reuse_mask |= 1u << L;
    }
    A->loop = inner;
    /* threadIdx.x: direct coefficient + loop variables' start dependence */
    if (flat.ok) {
        affine__poly tx = affine__form_coef(flat, "threadIdx.x");
        bool known = true;
        for (unsigned i = 0; i < flat.nv; i++) {
            int L = affine__enclosing_loop_with_var(ctx, flat.vars[i], n);
            if (L < 0) continue;
            if (!ctx->loop_txc_ok[L]) {
                known = false;
                break;
            }
            affine__poly add;
            if (!affine__poly_mul(ctx, flat.coefs[i], ctx->loop_txc[L], &add)) {
                known = false;
                break;
            }
            tx = affine__poly_add(ctx, tx, add, 1);
        }
        if (known) {
            A->tx_known = affine__poly_is_int(tx, &A->tx_stride);
            if (tx.n) {
                A->tx_coef = affine__poly_text(tx);
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
    if (affine__type_is(n, "subscript_expression")) {
        ss->st = add_access(ss->ctx, n);
        /* the chain's inner subscripts are part of this access; their indices may hold more */
        TSNode base = n;
        while (affine__type_is(base, "subscript_expression")) {
            TSNode idx = ts_node_child_by_field_name(base, "indices", 7);
            kl_ast_walk(idx, scan_accesses, ss);
            base = ts_node_child_by_field_name(base, "argument", 8);
        }
        if (!affine__type_is(base, "identifier")) kl_ast_walk(base, scan_accesses, ss);
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
                          affine__line_of(kernel));
        goto cleanup;
    }
    ctx->macros = affine__macros_of(src); /* the file's macros, collected once per source */
    if (!ctx->macros) goto oom;
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
        ctx->loop_start[L] = affine__form_bad("unknown start");
        if (!li->var || !li->start) continue;
        TSNode sn = {0};
        if (li->kind == KL_LOOP_FOR) {
            TSNode init = ts_node_child_by_field_name(li->node, "initializer", 11);
            sn = affine__type_is(init, "declaration") ? affine__decl_init_of(src, init, li->var)
                                               : ts_node_child_by_field_name(init, "right", 5);
        } else {
            const affine__local_var *lv = affine__local_find(ctx, li->var);
            if (lv) sn = lv->def;
        }
        if (ts_node_is_null(sn)) continue;
        affine__env e0 = {NULL, 0, false};
        /* the start is evaluated outside the loop itself: anchor at the loop node's parent */
        ctx->loop_start[L] = affine__eval(ctx, &e0, src, sn, ts_node_parent(li->node), 0);
        affine__form f = ctx->loop_start[L];
        if (!f.ok) continue;
        /* a step depending on threadIdx.x would break the picture: steps are text; accept
         * invariant-looking steps only (no threadIdx in their text) */
        if (li->step && strstr(li->step, "threadIdx")) continue;
        affine__poly tx = affine__form_coef(f, "threadIdx.x");
        bool ok = true;
        for (unsigned i = 0; i < f.nv; i++) {
            int P = affine__enclosing_loop_with_var(ctx, f.vars[i], li->node);
            if (P < 0 || P == (int)L) continue;
            if (!ctx->loop_txc_ok[P]) {
                ok = false;
                break;
            }
            affine__poly add;
            if (!affine__poly_mul(ctx, f.coefs[i], ctx->loop_txc[P], &add)) {
                ok = false;
                break;
            }
            tx = affine__poly_add(ctx, tx, add, 1);
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
        affine__arena_block *n = ctx->arena->next;
        free(ctx->arena);
        ctx->arena = n;
    }
    free(ctx);
}

TSNode kl_affine_ctx_function(const kl_affine_ctx *ctx) { return ctx->fn; }

/* ======================================================================================
 * public forms
 * ====================================================================================== */

static kl_status affine_export(kl_affine_ctx *ctx, affine__form f, kl_affine *out)
{
    memset(out, 0, sizeof *out);
    (void)ctx;
    if (!f.ok) {
        out->why = kl_strdup(f.why ? f.why : "not affine");
        return out->why ? KL_OK : KL_ERR_NOMEM;
    }
    out->ok = true;
    out->constant = affine__poly_text(f.cst);
    out->const_is_int = affine__poly_is_int(f.cst, &out->const_int);
    if (!out->constant) return KL_ERR_NOMEM;
    if (f.nv) {
        out->terms = calloc(f.nv, sizeof *out->terms);
        if (!out->terms) return KL_ERR_NOMEM;
    }
    for (unsigned i = 0; i < f.nv; i++) {
        kl_affine_term *t = &out->terms[out->nterms++];
        t->var = kl_strdup(f.vars[i]);
        t->coef = affine__poly_text(f.coefs[i]);
        t->coef_is_int = affine__poly_is_int(f.coefs[i], &t->coef_int);
        if (!t->var || !t->coef) return KL_ERR_NOMEM;
    }
    return KL_OK;
}

kl_status kl_affine_of(kl_affine_ctx *ctx, TSNode expr, kl_affine *out)
{
    affine__env e0 = {NULL, 0, false};
    affine__form f = affine__eval(ctx, &e0, ctx->src, expr, expr, 0);
    if (ctx->oom) {
        memset(out, 0, sizeof *out);
        return KL_ERR_NOMEM;
    }
    kl_status st = affine_export(ctx, f, out);
    if (st != KL_OK) kl_affine_release(out);
    return st;
}

kl_status kl_affine_poly_of(kl_affine_ctx *ctx, TSNode expr, const kl_poly **out)
{
    static const kl_poly unknown = {.opaque = true};
    affine__env e0 = {NULL, 0, false};
    affine__form f = affine__eval(ctx, &e0, ctx->src, expr, expr, 0);
    kl_poly *p = affine__alloc(ctx, sizeof *p);
    *out = &unknown;
    if (!p || ctx->oom) return KL_ERR_NOMEM;
    *p = f.pv;
    *out = p;
    return KL_OK;
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
        if (ts_node_eq(ctx->loops[i].node, n) || !affine__node_within(n, ctx->loops[i].node)) continue;
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
