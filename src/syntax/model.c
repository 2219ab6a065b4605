/*
 * The model of a CUDA file: one walk over the tree (a TSTreeCursor and an explicit stack
 * of frames, never C recursion, so 10 000 nested blocks cost memory, not stack) that
 * collects functions, launch sites, loops, shared declarations, uses and subscripts;
 * then a pass over the text for #pragma lines, and the cross references. This file holds the
 * strings, the node kinds, the text helpers and what each kind of node adds (on_function,
 * on_loop, …); model_walk.c the walk itself, the pragmas, the cross references and finishing
 * (model_int.h).
 *
 * While building, items refer to their sub-arrays (parameters, arguments, indices) by
 * offsets into shared pools (the pools grow and move); finish() turns offsets into pointers.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "syntax/names.h"
#include "syntax/model_int.h"
#include "syntax/syntax_int.h"
#include "util/util.h"

/* ---- strings: one arena per model ------------------------------------------------------- */

static char *arena_alloc(arena *a, size_t n)
{
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        chunk *c = malloc(sizeof *c + cap);
        if (!c) {
            a->failed = true;
            return NULL;
        }
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    char *p = a->head->data + a->head->used;
    a->head->used += n;
    return p;
}

void model__arena_release(arena *a)
{
    while (a->head) {
        chunk *next = a->head->next;
        free(a->head);
        a->head = next;
    }
}

/* ---- the model ---------------------------------------------------------------------------- */

bool model__grow(void **items, unsigned *cap, unsigned need, size_t size)
{
    if (need <= *cap) return true;
    unsigned n = *cap ? *cap : 16;
    while (n < need) {
        if (n > UINT32_MAX / 2) return false;
        n *= 2;
    }
    void *p = realloc(*items, (size_t)n * size);
    if (!p) return false;
    *items = p;
    *cap = n;
    return true;
}

/* ---- node kinds ------------------------------------------------------------------------ */

/* The null node (ts_node_is_null is true of it). */
static TSNode no_node(void)
{
    TSNode n;
    memset(&n, 0, sizeof n);
    return n;
}

/* ---- text helpers ------------------------------------------------------------------------ */

const char *model__str_n(model__builder *b, const char *s, size_t n)
{
    char *p = arena_alloc(&b->m->strings, n + 1);
    if (!p) return "";
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

const char *model__str(model__builder *b, const char *s) { return model__str_n(b, s, strlen(s)); }

static uint32_t clip(const model__builder *b, uint32_t off) { return off > b->len ? (uint32_t)b->len : off; }

const char *model__node_str(model__builder *b, TSNode n)
{
    uint32_t a = clip(b, ts_node_start_byte(n)), e = clip(b, ts_node_end_byte(n));
    return model__str_n(b, b->text + a, e > a ? e - a : 0);
}

static bool node_is(const model__builder *b, TSNode n, const char *s)
{
    uint32_t a = clip(b, ts_node_start_byte(n)), e = clip(b, ts_node_end_byte(n));
    size_t k = strlen(s);
    return e >= a && e - a == k && memcmp(b->text + a, s, k) == 0;
}

/* Copy text[a..e) minus [skip_a, skip_e), whitespace runs (and comments) folded into one space. */
const char *model__collapsed(model__builder *b, uint32_t a, uint32_t e, uint32_t skip_a, uint32_t skip_e)
{
    a = clip(b, a);
    e = clip(b, e);
    char *out = arena_alloc(&b->m->strings, (e > a ? e - a : 0) + 1);
    if (!out) return "";
    size_t n = 0;
    bool space = false;
    for (uint32_t k = a; k < e; k++) {
        if (k >= skip_a && k < skip_e) {
            space = true;
            continue;
        }
        char c = b->text[k];
        if (c == '/' && k + 1 < e && b->text[k + 1] == '*') {
            const char *close = strstr(b->text + k + 2, "*/");
            k = close ? (uint32_t)(close - b->text) + 1 : e;
            space = true;
            continue;
        }
        if (c == '/' && k + 1 < e && b->text[k + 1] == '/') {
            while (k < e && b->text[k] != '\n') k++;
            space = true;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\\') {
            space = true;
            continue;
        }
        if (space && n > 0) out[n++] = ' ';
        space = false;
        out[n++] = c;
    }
    out[n] = '\0';
    return out;
}

static kl_text text_of(model__builder *b, TSNode n)
{
    if (ts_node_is_null(n)) return (kl_text){NULL, {0, 0, 0, 0}};
    return (kl_text){model__node_str(b, n), kl_node_span(n)};
}

/* The text from node first's start to node last's end. */
static kl_text text_between(model__builder *b, TSNode first, TSNode last)
{
    kl_span s = kl_node_span(first);
    s.end = ts_node_end_byte(last);
    uint32_t a = clip(b, s.start), e = clip(b, s.end);
    return (kl_text){model__str_n(b, b->text + a, e > a ? e - a : 0), s};
}

/* A node's text without a trailing ';' and blanks (a for initializer). */
static kl_text text_trimmed(model__builder *b, TSNode n)
{
    kl_text t = text_of(b, n);
    uint32_t e = clip(b, t.span.end);
    while (e > t.span.start && (b->text[e - 1] == ';' || b->text[e - 1] == ' ' || b->text[e - 1] == '\t' ||
                                b->text[e - 1] == '\n' || b->text[e - 1] == '\r'))
        e--;
    if (e != t.span.end) {
        t.span.end = e;
        t.text = model__str_n(b, b->text + t.span.start, e - t.span.start);
    }
    return t;
}

const char *model__join_guard(model__builder *b, const char *outer, const char *cond)
{
    if (!outer) return model__str(b, cond);
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_adds(&sb, outer);
    kl_strbuf_adds(&sb, " && ");
    kl_strbuf_adds(&sb, cond);
    const char *r = sb.failed ? (b->m->failed = true, "") : model__str(b, kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    return r;
}

const char *model__negated(model__builder *b, const char *cond)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "!(%s)", cond);
    const char *r = sb.failed ? (b->m->failed = true, "") : model__str(b, kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    return r;
}

/* ---- child iteration without ts_node_child (which is linear in the index) ------------------ */

typedef struct kids {
    TSTreeCursor c;
    bool started, done;
} kids;

static void kids_open(kids *k, TSNode n)
{
    k->c = ts_tree_cursor_new(n);
    k->started = false;
    k->done = false;
}
static void kids_close(kids *k) { ts_tree_cursor_delete(&k->c); }
static bool kids_next(kids *k, TSNode *out, TSFieldId *field)
{
    if (k->done) return false;
    if (!k->started) {
        k->started = true;
        if (!ts_tree_cursor_goto_first_child(&k->c)) return !(k->done = true);
    } else if (!ts_tree_cursor_goto_next_sibling(&k->c)) {
        return !(k->done = true);
    }
    *out = ts_tree_cursor_current_node(&k->c);
    if (field) *field = ts_tree_cursor_current_field_id(&k->c);
    return true;
}

/* Push the texts of n's named, non-comment children onto the text pool; returns the count. */
static unsigned push_child_texts(model__builder *b, TSNode n, unsigned *first)
{
    kl_model *m = b->m;
    *first = m->n_texts;
    unsigned count = 0;
    if (ts_node_is_null(n)) return 0;
    kids k;
    kids_open(&k, n);
    TSNode c;
    while (kids_next(&k, &c, NULL)) {
        if (!ts_node_is_named(c) || model__kind_of(b, c) == NK_COMMENT) continue;
        int i = PUSH(m, texts);
        if (i < 0) break;
        m->texts[i] = text_of(b, c);
        count++;
    }
    kids_close(&k);
    return count;
}

/* ---- functions ---------------------------------------------------------------------------- */

static void parse_param(model__builder *b, TSNode pn, kl_param *p)
{
    p->span = kl_node_span(pn);
    p->name = "";
    p->elem_type = "";
    TSNode name = no_node();
    bool have_name = false;
    kids k;
    kids_open(&k, pn);
    TSNode c;
    TSFieldId f;
    TSNode decl = no_node();
    bool have_decl = false;
    while (kids_next(&k, &c, &f)) {
        uint8_t ck = model__kind_of(b, c);
        if (f == b->f.type) p->elem_type = model__collapsed(b, ts_node_start_byte(c), ts_node_end_byte(c), 0, 0);
        else if (f == b->f.declarator) decl = c, have_decl = true;
        else if (ck == NK_TYPE_QUALIFIER) {
            if (node_is(b, c, "const")) p->is_const = true;
            else if (node_is(b, c, "__restrict__") || node_is(b, c, "__restrict") || node_is(b, c, "restrict"))
                p->is_restrict = true;
        }
    }
    kids_close(&k);
    /* walk the declarator chain: pointers, references, arrays, down to the name */
    for (unsigned guard = 0; have_decl && guard < 256; guard++) {
        uint8_t dk = model__kind_of(b, decl);
        if (dk == NK_IDENTIFIER || (ts_node_is_named(decl) && ts_node_child_count(decl) == 0)) {
            name = decl;
            have_name = true;
            break;
        }
        if (dk == NK_POINTER_DECLARATOR || dk == NK_ABSTRACT_POINTER_DECLARATOR) {
            p->pointer_depth++;
            kids_open(&k, decl);
            while (kids_next(&k, &c, &f)) {
                if (model__kind_of(b, c) != NK_TYPE_QUALIFIER) continue;
                if (node_is(b, c, "const")) p->is_const_pointer = true;
                else if (node_is(b, c, "__restrict__") || node_is(b, c, "__restrict") || node_is(b, c, "restrict"))
                    p->is_restrict = true;
            }
            kids_close(&k);
        } else if (dk == NK_REFERENCE_DECLARATOR || dk == NK_ABSTRACT_REFERENCE_DECLARATOR) {
            p->is_reference = true;
        } else if (dk == NK_ARRAY_DECLARATOR || dk == NK_ABSTRACT_ARRAY_DECLARATOR) {
            p->is_array = true;
        }
        TSNode next = ts_node_child_by_field_id(decl, b->f.declarator);
        if (ts_node_is_null(next)) {
            /* reference_declarator has no field: its one named child */
            next = ts_node_named_child_count(decl) ? ts_node_named_child(decl, ts_node_named_child_count(decl) - 1)
                                                   : next;
            if (ts_node_is_null(next) || (dk != NK_REFERENCE_DECLARATOR && dk != NK_PARENTHESIZED_DECLARATOR))
                break;
        }
        decl = next;
    }
    uint32_t skip_a = 0, skip_e = 0;
    if (have_name) {
        p->name = model__node_str(b, name);
        skip_a = ts_node_start_byte(name);
        skip_e = ts_node_end_byte(name);
    }
    p->type = model__collapsed(b, ts_node_start_byte(pn), ts_node_end_byte(pn), skip_a, skip_e);
}

/* Push the parameters of a parameter_list; returns the count. */
static unsigned push_params(model__builder *b, TSNode list, unsigned *first)
{
    kl_model *m = b->m;
    *first = m->n_params;
    unsigned count = 0;
    if (ts_node_is_null(list)) return 0;
    kids k;
    kids_open(&k, list);
    TSNode c;
    while (kids_next(&k, &c, NULL)) {
        const char *t = ts_node_type(c);
        if (!ts_node_is_named(c) || model__kind_of(b, c) == NK_COMMENT) continue;
        if (strstr(t, "parameter_declaration") == NULL && strcmp(t, "variadic_parameter") != 0) continue;
        int i = PUSH(m, params);
        if (i < 0) break;
        parse_param(b, c, &m->params[i]);
        count++;
    }
    kids_close(&k);
    return count;
}

static unsigned push_tparams(model__builder *b, TSNode list, unsigned *first)
{
    kl_model *m = b->m;
    *first = m->n_tparams;
    unsigned count = 0;
    if (ts_node_is_null(list)) return 0;
    kids k;
    kids_open(&k, list);
    TSNode c;
    while (kids_next(&k, &c, NULL)) {
        if (!ts_node_is_named(c) || model__kind_of(b, c) == NK_COMMENT) continue;
        int i = PUSH(m, tparams);
        if (i < 0) break;
        kl_tparam *t = &m->tparams[i];
        const char *type = ts_node_type(c);
        t->span = kl_node_span(c);
        t->name = "";
        t->is_pack = strstr(type, "variadic") != NULL;
        if (strstr(type, "type_parameter_declaration") || !strcmp(type, "template_template_parameter_declaration")) {
            /* typename T / class T = X / typename... Ts / template <…> class C */
            t->kind = !strcmp(type, "template_template_parameter_declaration") ? "template"
                      : (ts_node_child_count(c) && !strcmp(ts_node_type(ts_node_child(c, 0)), "class")) ? "class"
                                                                                                        : "typename";
            TSNode nm = ts_node_child_by_field_id(c, b->f.name);
            if (ts_node_is_null(nm)) {
                kids k2;
                kids_open(&k2, c);
                TSNode g;
                while (kids_next(&k2, &g, NULL))
                    if (!strcmp(ts_node_type(g), "type_identifier")) nm = g;
                kids_close(&k2);
            }
            if (!ts_node_is_null(nm)) t->name = model__node_str(b, nm);
            TSNode dv = ts_node_child_by_field_id(c, b->f.default_type);
            t->default_value = ts_node_is_null(dv) ? NULL : model__node_str(b, dv);
        } else {
            /* int N / int N = 4 / int... Ns */
            kl_param p;
            memset(&p, 0, sizeof p);
            parse_param(b, c, &p);
            t->name = p.name;
            TSNode ty = ts_node_child_by_field_id(c, b->f.type);
            t->kind = ts_node_is_null(ty) ? "" : model__collapsed(b, ts_node_start_byte(ty), ts_node_end_byte(ty), 0, 0);
            TSNode dv = ts_node_child_by_field_id(c, b->f.default_value);
            t->default_value = ts_node_is_null(dv) ? NULL : model__node_str(b, dv);
        }
        count++;
    }
    kids_close(&k);
    return count;
}

static const model__frame *parent_frame(const model__builder *b, unsigned up)
{
    return b->nstack > up + 1 ? &b->stack[b->nstack - 2 - up] : NULL;
}

void model__on_function(model__builder *b, model__frame *fr)
{
    kl_model *m = b->m;
    int fi = PUSH(m, functions);
    int ff = PUSH(m, fn_firsts);
    if (fi < 0 || ff < 0) return;
    kl_function *fn = &m->functions[fi];
    model__firsts *fs = &m->fn_firsts[ff];
    TSNode n = fr->node;
    fn->span = kl_node_span(n);
    fn->guard = fr->guard;
    fn->name = "";
    fn->return_type = "";
    const model__frame *p = parent_frame(b, 0);
    if (p && p->kind == NK_TEMPLATE_DECLARATION) {
        fn->is_template = true;
        fn->span = kl_node_span(p->node);
        fn->ntparams = push_tparams(b, ts_node_child_by_field_id(p->node, b->f.parameters), &fs->b);
    }
    for (unsigned up = 0; up < 3; up++) {
        const model__frame *q = parent_frame(b, up);
        if (!q) break;
        if (q->kind == NK_LINKAGE_SPECIFICATION) {
            TSNode v = ts_node_child_by_field_id(q->node, b->f.value);
            fn->is_extern_c = !ts_node_is_null(v) && node_is(b, v, "\"C\"");
            break;
        }
        if (q->kind != NK_DECLARATION_LIST && q->kind != NK_TEMPLATE_DECLARATION) break;
    }
    kids k;
    kids_open(&k, n);
    TSNode c, decl = no_node(), body = no_node();
    bool have_decl = false, have_body = false;
    TSFieldId f;
    while (kids_next(&k, &c, &f)) {
        uint8_t ck = model__kind_of(b, c);
        const char *t = ts_node_type(c);
        if (!ts_node_is_named(c)) {
            if (!strcmp(t, "__global__")) fn->kind = KL_FUNCTION_KERNEL;
            else if (!strcmp(t, "__device__")) fn->is_device = true;
            else if (!strcmp(t, "__host__")) fn->is_host = true;
            else if (!strcmp(t, "__forceinline__")) fn->is_forceinline = true;
            else if (!strcmp(t, "__noinline__")) fn->is_noinline = true;
            continue;
        }
        if (f == b->f.type) fn->return_type = model__collapsed(b, ts_node_start_byte(c), ts_node_end_byte(c), 0, 0);
        else if (f == b->f.declarator) decl = c, have_decl = true;
        else if (f == b->f.body) body = c, have_body = true;
        else if (ck == NK_STORAGE_CLASS) {
            if (node_is(b, c, "static")) fn->is_static = true;
            else if (node_is(b, c, "inline")) fn->is_inline = true;
        } else if (ck == NK_LAUNCH_BOUNDS) {
            fn->launch_bounds_span = kl_node_span(c);
            fn->nlaunch_bounds = push_child_texts(b, c, &fs->c);
        }
    }
    kids_close(&k);
    if (fn->kind != KL_FUNCTION_KERNEL && fn->is_device) fn->kind = KL_FUNCTION_DEVICE;
    if (have_body) fn->body_span = kl_node_span(body);
    /* the declarator: pointers / references around a function_declarator */
    for (unsigned guard = 0; have_decl && guard < 64; guard++) {
        if (model__kind_of(b, decl) == NK_FUNCTION_DECLARATOR) {
            TSNode nm = ts_node_child_by_field_id(decl, b->f.declarator);
            if (!ts_node_is_null(nm)) {
                fn->name = model__node_str(b, nm);
                fn->name_span = kl_node_span(nm);
            }
            fn->nparams = push_params(b, ts_node_child_by_field_id(decl, b->f.parameters), &fs->a);
            break;
        }
        TSNode next = ts_node_child_by_field_id(decl, b->f.declarator);
        if (ts_node_is_null(next)) {
            unsigned nc = ts_node_named_child_count(decl);
            if (!nc) break;
            next = ts_node_named_child(decl, nc - 1);
        }
        decl = next;
    }
    fr->function = fi;
    fr->loop = -1;
    fr->depth = 0;
    fr->in_lambda = false;
}

/* ---- loops ---------------------------------------------------------------------------------- */

static TSNode first_named(const model__builder *b, TSNode n)
{
    unsigned nc = ts_node_named_child_count(n);
    for (unsigned i = 0; i < nc; i++) {
        TSNode c = ts_node_named_child(n, i);
        if (model__kind_of(b, c) != NK_COMMENT) return c;
    }
    return no_node();
}

static const char *loop_var(model__builder *b, TSNode init)
{
    if (ts_node_is_null(init)) return NULL;
    uint8_t k = model__kind_of(b, init);
    if (k == NK_DECLARATION) {
        TSNode d = ts_node_child_by_field_id(init, b->f.declarator);
        if (!ts_node_is_null(d) && model__kind_of(b, d) == NK_INIT_DECLARATOR) d = ts_node_child_by_field_id(d, b->f.declarator);
        if (!ts_node_is_null(d) && model__kind_of(b, d) == NK_IDENTIFIER) return model__node_str(b, d);
    } else if (k == NK_ASSIGNMENT) {
        TSNode l = ts_node_child_by_field_id(init, b->f.left);
        if (!ts_node_is_null(l) && model__kind_of(b, l) == NK_IDENTIFIER) return model__node_str(b, l);
    }
    return NULL;
}

void model__on_loop(model__builder *b, model__frame *fr)
{
    kl_model *m = b->m;
    int li = PUSH(m, loops);
    if (li < 0) return;
    kl_loop *lp = &m->loops[li];
    TSNode n = fr->node;
    lp->span = kl_node_span(n);
    lp->parent = fr->loop;
    lp->function = fr->function;
    lp->in_lambda = fr->in_lambda;
    lp->depth = fr->depth + 1;
    lp->pragma = -1;
    TSNode body = ts_node_child_by_field_id(n, b->f.body);
    if (!ts_node_is_null(body)) lp->body_span = kl_node_span(body);
    switch (fr->kind) {
    case NK_FOR: {
        lp->kind = KL_LOOP_FOR;
        TSNode init = ts_node_child_by_field_id(n, b->f.initializer);
        if (!ts_node_is_null(init)) lp->init = text_trimmed(b, init);
        lp->var = loop_var(b, init);
        lp->cond = text_of(b, ts_node_child_by_field_id(n, b->f.condition));
        lp->step = text_of(b, ts_node_child_by_field_id(n, b->f.update));
        lp->grid_stride = lp->step.text && strstr(lp->step.text, "gridDim") != NULL;
        break;
    }
    case NK_WHILE:
    case NK_DO: {
        lp->kind = fr->kind == NK_WHILE ? KL_LOOP_WHILE : KL_LOOP_DO;
        TSNode c = ts_node_child_by_field_id(n, b->f.condition);
        if (!ts_node_is_null(c)) {
            TSNode inner = ts_node_child_by_field_id(c, b->f.value);
            if (ts_node_is_null(inner)) inner = first_named(b, c);
            lp->cond = text_of(b, ts_node_is_null(inner) ? c : inner);
        }
        break;
    }
    default: { /* range for */
        lp->kind = KL_LOOP_RANGE_FOR;
        TSNode ty = ts_node_child_by_field_id(n, b->f.type), r = ts_node_child_by_field_id(n, b->f.right);
        TSNode d = ts_node_child_by_field_id(n, b->f.declarator);
        if (!ts_node_is_null(ty) && !ts_node_is_null(r)) lp->init = text_between(b, ty, r);
        if (!ts_node_is_null(d)) {
            while (ts_node_named_child_count(d) && model__kind_of(b, d) != NK_IDENTIFIER) d = first_named(b, d);
            if (!ts_node_is_null(d) && model__kind_of(b, d) == NK_IDENTIFIER) lp->var = model__node_str(b, d);
        }
        break;
    }
    }
    fr->loop = li;
    fr->depth = lp->depth;
}

/* ---- uses ------------------------------------------------------------------------------------ */

static int add_use(model__builder *b, const model__frame *fr, kl_use_kind kind, const char *name, kl_span span)
{
    int i = PUSH(b->m, uses);
    if (i < 0) return -1;
    kl_use *u = &b->m->uses[i];
    u->kind = kind;
    u->name = name;
    u->target = -1;
    u->function = fr->function;
    u->loop = fr->loop;
    u->span = span;
    return i;
}

/* The last component of a name: after the last "::", '.' or "->", before any '<'. */
static void last_component(const char *s, size_t n, const char **out, size_t *outn)
{
    const char *lt = memchr(s, '<', n);
    if (lt) n = (size_t)(lt - s);
    size_t start = 0;
    for (size_t i = 0; i + 1 < n + 1 && i < n; i++) {
        if ((s[i] == ':' && i + 1 < n && s[i + 1] == ':') || (s[i] == '-' && i + 1 < n && s[i + 1] == '>'))
            start = i + 2;
        else if (s[i] == '.')
            start = i + 1;
    }
    *out = s + start;
    *outn = n - start;
}

/* The scope of a qualified name ("nvcuda::wmma" of "nvcuda::wmma::mma_sync<…>"), as a length. */
static size_t scope_len(const char *s, size_t n)
{
    const char *lt = memchr(s, '<', n);
    if (lt) n = (size_t)(lt - s);
    size_t end = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] == ':' && s[i + 1] == ':') end = i;
    return end;
}

static bool scope_facility(model__builder *b, const char *s, size_t n, kl_use_kind *kind)
{
    size_t sl = scope_len(s, n);
    if (!sl) return false;
    if (kl_scope_kind(s, sl, kind)) return true;
    /* the outermost scope may be an alias: namespace cg = cooperative_groups; */
    size_t first = 0;
    while (first + 1 < sl && !(s[first] == ':' && s[first + 1] == ':')) first++;
    if (first + 1 >= sl) first = sl;
    for (unsigned i = 0; i < b->naliases; i++)
        if (strlen(b->aliases[i].name) == first && !memcmp(b->aliases[i].name, s, first)) return *kind = b->aliases[i].kind, true;
    /* the customary alias, when it is defined in a header we do not see */
    if (first == 2 && !memcmp(s, "cg", 2)) return *kind = KL_USE_COOP_GROUPS, true;
    return false;
}

void model__on_qualified(model__builder *b, model__frame *fr)
{
    const model__frame *p = parent_frame(b, 0);
    if (fr->in_scoped || (p && p->kind == NK_QUALIFIED_IDENTIFIER)) return;
    uint32_t a = clip(b, ts_node_start_byte(fr->node)), e = clip(b, ts_node_end_byte(fr->node));
    kl_use_kind kind;
    if (!scope_facility(b, b->text + a, e - a, &kind)) return;
    const char *lt = memchr(b->text + a, '<', e - a);
    size_t n = lt ? (size_t)(lt - (b->text + a)) : e - a;
    add_use(b, fr, kind, model__str_n(b, b->text + a, n), kl_node_span(fr->node));
    fr->in_scoped = true;
}

void model__on_alias(model__builder *b, model__frame *fr)
{
    TSNode nm = ts_node_child_by_field_id(fr->node, b->f.name);
    if (ts_node_is_null(nm) || b->naliases >= sizeof b->aliases / sizeof b->aliases[0]) return;
    unsigned nc = ts_node_named_child_count(fr->node);
    TSNode target = nc ? ts_node_named_child(fr->node, nc - 1) : no_node();
    if (ts_node_is_null(target)) return;
    uint32_t a = clip(b, ts_node_start_byte(target)), e = clip(b, ts_node_end_byte(target));
    kl_use_kind kind;
    if (!kl_scope_kind(b->text + a, e - a, &kind)) return;
    b->aliases[b->naliases++] = (model__alias){model__node_str(b, nm), kind};
}

static void on_launch(model__builder *b, model__frame *fr, TSNode callee, TSNode config)
{
    kl_model *m = b->m;
    int li = PUSH(m, launches);
    int lf = PUSH(m, launch_firsts);
    if (li < 0 || lf < 0) return;
    kl_launch *l = &m->launches[li];
    model__firsts *fs = &m->launch_firsts[lf];
    l->span = kl_node_span(fr->node);
    l->config_span = kl_node_span(config);
    l->function = fr->function;
    l->in_lambda = fr->in_lambda;
    l->kernel_function = -1;
    uint32_t a = clip(b, ts_node_start_byte(callee)), e = clip(b, ts_node_end_byte(callee));
    const char *lt = memchr(b->text + a, '<', e - a);
    l->kernel = model__collapsed(b, a, lt ? (uint32_t)(lt - b->text) : e, 0, 0);
    /* template arguments: the template_argument_list inside the callee */
    TSNode targs = no_node();
    TSNode c = callee;
    for (unsigned guard = 0; guard < 8 && !ts_node_is_null(c); guard++) {
        uint8_t k = model__kind_of(b, c);
        if (k == NK_TEMPLATE_FUNCTION) {
            targs = ts_node_child_by_field_id(c, b->f.arguments);
            break;
        }
        if (k != NK_QUALIFIED_IDENTIFIER) break;
        c = ts_node_child_by_field_id(c, b->f.name);
    }
    fs->a = m->n_texts;
    if (!ts_node_is_null(targs)) l->ntemplate_args = push_child_texts(b, targs, &fs->a);
    unsigned first;
    kl_text cfg[4];
    memset(cfg, 0, sizeof cfg);
    unsigned ncfg = push_child_texts(b, config, &first);
    for (unsigned i = 0; i < ncfg && i < 4; i++) cfg[i] = m->texts[first + i];
    m->n_texts = first; /* the configuration lives in the launch itself */
    l->grid = cfg[0];
    l->block = cfg[1];
    l->smem = cfg[2];
    l->stream = cfg[3];
    l->nargs = push_child_texts(b, ts_node_child_by_field_id(fr->node, b->f.arguments), &fs->b);
}

void model__on_call(model__builder *b, model__frame *fr)
{
    TSNode n = fr->node;
    TSNode callee = ts_node_child_by_field_id(n, b->f.function);
    if (ts_node_is_null(callee)) return;
    /* a launch: kernel<<<…>>>(…) */
    unsigned nc = ts_node_named_child_count(n);
    for (unsigned i = 0; i < nc; i++) {
        TSNode c = ts_node_named_child(n, i);
        if (model__kind_of(b, c) == NK_KERNEL_CALL_SYNTAX) {
            on_launch(b, fr, callee, c);
            return;
        }
    }
    uint8_t ck = model__kind_of(b, callee);
    bool member = ck == NK_FIELD_EXPRESSION;
    TSNode named = callee;
    if (ck == NK_TEMPLATE_FUNCTION) named = ts_node_child_by_field_id(callee, b->f.name);
    if (ts_node_is_null(named)) return;
    if (member) named = ts_node_child_by_field_id(callee, b->f.field);
    if (ts_node_is_null(named)) return;
    if (ck != NK_IDENTIFIER && ck != NK_TEMPLATE_FUNCTION && ck != NK_QUALIFIED_IDENTIFIER && !member) return;
    uint32_t a = clip(b, ts_node_start_byte(callee)), e = clip(b, ts_node_end_byte(callee));
    const char *last;
    size_t lastn;
    last_component(b->text + a, e - a, &last, &lastn);
    kl_use_kind kind, scope_kind;
    bool scoped = ck == NK_QUALIFIED_IDENTIFIER && scope_facility(b, b->text + a, e - a, &scope_kind);
    const char *lt = memchr(b->text + a, '<', e - a);
    uint32_t name_end = lt ? (uint32_t)(lt - b->text) : e;
    if (scoped) {
        /* cg::sync(g), cg::reduce(…), cg::memcpy_async(…): the scope use is recorded apart */
        if (scope_kind == KL_USE_COOP_GROUPS) {
            if (lastn == 4 && !memcmp(last, "sync", 4)) kind = KL_USE_BARRIER;
            else if (!kl_call_kind(last, lastn, false, &kind) || kind == KL_USE_COOP_GROUPS) return;
            add_use(b, fr, kind, model__collapsed(b, a, name_end, 0, 0), kl_node_span(n));
        }
        return;
    }
    if (kl_call_kind(last, lastn, member, &kind)) {
        add_use(b, fr, kind, model__collapsed(b, a, name_end, 0, 0), kl_node_span(n));
        return;
    }
    if (!member && kl_is_vector_maker(last, lastn)) {
        add_use(b, fr, KL_USE_VECTOR_TYPE, model__str_n(b, last + 5, lastn - 5), kl_node_span(n));
        return;
    }
    if (!member) {
        /* maybe a call to a function of this file: resolved once every function is known */
        int u = add_use(b, fr, KL_USE_CALL, model__collapsed(b, a, name_end, 0, 0), kl_node_span(n));
        if (u >= 0) b->m->uses[u].target = -2;
    }
}

void model__on_type_identifier(model__builder *b, model__frame *fr)
{
    uint32_t a = clip(b, ts_node_start_byte(fr->node)), e = clip(b, ts_node_end_byte(fr->node));
    if (!kl_is_vector_type(b->text + a, e - a)) return;
    int u = add_use(b, fr, KL_USE_VECTOR_TYPE, model__str_n(b, b->text + a, e - a), kl_node_span(fr->node));
    if (u < 0) return;
    /* pointed to? reinterpret_cast<float4*>, (float4 *), float4 *p */
    const model__frame *p = parent_frame(b, 0);
    if (!p) return;
    TSNode d = ts_node_child_by_field_id(p->node, b->f.declarator);
    if (ts_node_is_null(d)) return;
    uint8_t dk = model__kind_of(b, d);
    if (dk == NK_INIT_DECLARATOR) {
        d = ts_node_child_by_field_id(d, b->f.declarator);
        dk = ts_node_is_null(d) ? NK_OTHER : model__kind_of(b, d);
    }
    b->m->uses[u].vector_pointer = dk == NK_POINTER_DECLARATOR || dk == NK_ABSTRACT_POINTER_DECLARATOR;
}

void model__on_field_expression(model__builder *b, model__frame *fr)
{
    if (fr->function < 0) return;
    TSNode arg = ts_node_child_by_field_id(fr->node, b->f.argument);
    TSNode fld = ts_node_child_by_field_id(fr->node, b->f.field);
    if (ts_node_is_null(arg) || ts_node_is_null(fld)) return;
    if (!node_is(b, arg, "threadIdx") && !node_is(b, arg, "blockIdx")) return;
    unsigned dim = node_is(b, fld, "x") ? 1 : node_is(b, fld, "y") ? 2 : node_is(b, fld, "z") ? 3 : 0;
    kl_function *fn = &b->m->functions[fr->function];
    if (dim > fn->index_dims) fn->index_dims = dim;
}

/* Inline asm: one ASM use named by its first instruction, and one use per instruction of a
 * known kind (cp.async, mma, bar.sync, shfl, atom, …). */
void model__on_asm(model__builder *b, model__frame *fr)
{
    TSNode code = ts_node_child_by_field_id(fr->node, b->f.assembly_code);
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_init(&sb, 1 << 20);
    if (!ts_node_is_null(code)) {
        /* the bodies of the string literals, as written (escapes included), one per line */
        TSNode parts[64];
        unsigned nparts = 0;
        if (model__kind_of(b, code) == NK_CONCATENATED_STRING) {
            kids k;
            kids_open(&k, code);
            TSNode c;
            while (kids_next(&k, &c, NULL) && nparts < 64)
                if (model__kind_of(b, c) == NK_STRING_LITERAL || model__kind_of(b, c) == NK_RAW_STRING_LITERAL) parts[nparts++] = c;
            kids_close(&k);
        } else {
            parts[nparts++] = code;
        }
        for (unsigned i = 0; i < nparts; i++) {
            uint32_t a = clip(b, ts_node_start_byte(parts[i])), e = clip(b, ts_node_end_byte(parts[i]));
            const char *q1 = memchr(b->text + a, '"', e - a);
            const char *q2 = NULL;
            for (const char *q = b->text + e; q > b->text + a; q--)
                if (q[-1] == '"') {
                    q2 = q - 1;
                    break;
                }
            if (q1 && q2 && q2 > q1) kl_strbuf_add(&sb, q1 + 1, (size_t)(q2 - q1 - 1));
            kl_strbuf_addc(&sb, '\n');
        }
    }
    const char *s = kl_strbuf_str(&sb);
    const char *first = NULL;
    size_t firstn = 0;
    kl_span span = kl_node_span(fr->node);
    /* statements end at ';' or a newline (escaped "\n" counts too) */
    for (const char *p = s; *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '{' || *p == '}' || *p == ';' ||
               (*p == '\\' && (p[1] == 'n' || p[1] == 't')))
            p += (*p == '\\') ? 2 : 1;
        if (!*p) break;
        if (*p == '@') { /* predicate */
            while (*p && *p != ' ' && *p != '\t') p++;
            continue;
        }
        const char *q = p;
        while ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '.' ||
               *q == '_' || *q == ':')
            q++;
        size_t n = (size_t)(q - p);
        bool label = n && p[n - 1] == ':';
        if (n && *p != '.' && !label) {
            if (!first) first = p, firstn = n;
            kl_use_kind kind;
            if (kl_ptx_kind(p, n, &kind)) add_use(b, fr, kind, model__str_n(b, p, n), span);
        }
        while (*q && *q != ';' && *q != '\n' && !(*q == '\\' && q[1] == 'n')) q++;
        p = q;
        if (p == s) break;
    }
    add_use(b, fr, KL_USE_ASM, first ? model__str_n(b, first, firstn) : "asm", span);
    kl_strbuf_release(&sb);
}

/* ---- shared declarations ---------------------------------------------------------------- */

void model__on_declaration(model__builder *b, model__frame *fr)
{
    kl_model *m = b->m;
    TSNode n = fr->node;
    bool shared = false, is_extern = false;
    TSNode type = no_node();
    kids k;
    kids_open(&k, n);
    TSNode c;
    TSFieldId f;
    while (kids_next(&k, &c, &f)) {
        uint8_t ck = model__kind_of(b, c);
        if (ck == NK_TYPE_QUALIFIER && node_is(b, c, "__shared__")) shared = true;
        else if (ck == NK_STORAGE_CLASS && node_is(b, c, "extern")) is_extern = true;
        else if (f == b->f.type) type = c;
    }
    kids_close(&k);
    if (!shared) return;
    /* __align__(N) was blanked for the grammar: find it in the text (alignas too) */
    const char *align = NULL;
    uint32_t a = clip(b, ts_node_start_byte(n)), e = clip(b, ts_node_end_byte(n));
    static const char *const align_keys[] = {"__align__", "alignas"};
    for (unsigned key = 0; key < 2 && !align; key++) {
        size_t kn = strlen(align_keys[key]);
        for (uint32_t i = a; i + kn < e && !align; i++) {
            if (memcmp(b->text + i, align_keys[key], kn) != 0) continue;
            uint32_t j = i + (uint32_t)kn;
            while (j < e && (b->text[j] == ' ' || b->text[j] == '\t')) j++;
            if (j >= e || b->text[j] != '(') continue;
            const char *close = memchr(b->text + j, ')', e - j);
            if (close) align = model__collapsed(b, j + 1, (uint32_t)(close - b->text), 0, 0);
        }
    }
    kids_open(&k, n);
    while (kids_next(&k, &c, &f)) {
        if (f != b->f.declarator) continue;
        int si = PUSH(m, shared);
        int sf = PUSH(m, shared_firsts);
        if (si < 0 || sf < 0) break;
        kl_shared_decl *s = &m->shared[si];
        s->span = kl_node_span(n);
        s->function = fr->function;
        s->is_extern = is_extern;
        s->align = align;
        s->name = "";
        s->elem_type = ts_node_is_null(type) ? "" : model__collapsed(b, ts_node_start_byte(type), ts_node_end_byte(type), 0, 0);
        if (fr->function >= 0 && b->fn_shared_owner != fr->function) {
            b->fn_shared_owner = fr->function;
            b->fn_shared_first = si;
        } else if (fr->function < 0) {
            if (!model__grow((void **)&b->file_shared, &b->cap_file_shared, b->nfile_shared + 1, sizeof *b->file_shared)) {
                m->failed = true;
                break;
            }
            b->file_shared[b->nfile_shared++] = (unsigned)si;
        }
        /* dims: array_declarator chain, outermost declarator = last [] */
        TSNode d = c;
        unsigned ndims = 0;
        for (unsigned guard = 0; guard < 64 && !ts_node_is_null(d); guard++) {
            uint8_t dk = model__kind_of(b, d);
            if (dk == NK_IDENTIFIER) {
                s->name = model__node_str(b, d);
                s->name_span = kl_node_span(d);
                break;
            }
            if (dk == NK_ARRAY_DECLARATOR) {
                int ti = PUSH(m, texts);
                if (ti < 0) break;
                TSNode size = ts_node_child_by_field_id(d, b->f.size);
                if (ts_node_is_null(size)) {
                    /* "[]": an empty text where the size would be */
                    kl_span sp = kl_node_span(d);
                    uint32_t close = clip(b, ts_node_end_byte(d));
                    sp.start = sp.end = close ? close - 1 : close;
                    m->texts[ti] = (kl_text){"", sp};
                    /* line:column of the ']' : from the declarator's end point */
                    TSPoint ep = ts_node_end_point(d);
                    m->texts[ti].span.line = ep.row + 1;
                    m->texts[ti].span.column = ep.column ? ep.column : 1;
                } else {
                    m->texts[ti] = text_of(b, size);
                }
                ndims++;
            } else if (dk != NK_INIT_DECLARATOR && dk != NK_POINTER_DECLARATOR && dk != NK_PARENTHESIZED_DECLARATOR) {
                break;
            }
            TSNode next = ts_node_child_by_field_id(d, b->f.declarator);
            if (ts_node_is_null(next) && dk == NK_PARENTHESIZED_DECLARATOR) next = first_named(b, d);
            d = next;
        }
        /* collected outermost-last: reverse into source order (none collected: texts may be NULL) */
        kl_text *t = ndims ? m->texts + m->n_texts - ndims : NULL;
        for (unsigned i = 0; i < ndims / 2; i++) {
            kl_text tmp = t[i];
            t[i] = t[ndims - 1 - i];
            t[ndims - 1 - i] = tmp;
        }
        s->ndims = ndims;
        m->shared_firsts[sf].a = m->n_texts - ndims;
    }
    kids_close(&k);
}

/* ---- subscripts ------------------------------------------------------------------------------ */

static kl_access_mode access_mode(const model__builder *b)
{
    /* climb from the subscript through (…) and .field to what uses it */
    unsigned top = b->nstack - 1;
    TSFieldId field = b->stack[top].field;
    for (unsigned i = top; i-- > 0;) {
        const model__frame *p = &b->stack[i];
        if (p->kind == NK_PARENTHESIZED || (p->kind == NK_FIELD_EXPRESSION && field == b->f.argument)) {
            field = p->field;
            continue;
        }
        if (p->kind == NK_ASSIGNMENT && field == b->f.left) {
            TSNode op = ts_node_child_by_field_id(p->node, b->f.operator_);
            return (!ts_node_is_null(op) && !node_is(b, op, "=")) ? KL_ACCESS_READ_WRITE : KL_ACCESS_WRITE;
        }
        if (p->kind == NK_UPDATE) return KL_ACCESS_READ_WRITE;
        if (p->kind == NK_POINTER_EXPRESSION) {
            TSNode op = ts_node_child_by_field_id(p->node, b->f.operator_);
            if (!ts_node_is_null(op) && node_is(b, op, "&")) return KL_ACCESS_ADDRESS;
        }
        break;
    }
    return KL_ACCESS_READ;
}

void model__on_subscript(model__builder *b, model__frame *fr)
{
    kl_model *m = b->m;
    const model__frame *p = parent_frame(b, 0);
    if (fr->function < 0) return;
    if (p && p->kind == NK_SUBSCRIPT && fr->field == b->f.argument) return; /* inside a chain t[y][x] */
    int ai = PUSH(m, accesses);
    int af = PUSH(m, access_firsts);
    if (ai < 0 || af < 0) return;
    kl_access *ac = &m->accesses[ai];
    ac->span = kl_node_span(fr->node);
    ac->function = fr->function;
    ac->loop = fr->loop;
    ac->shared = -1;
    ac->param = -1;
    TSNode n = fr->node;
    unsigned count = 0;
    for (unsigned guard = 0; guard < 64 && model__kind_of(b, n) == NK_SUBSCRIPT; guard++) {
        TSNode idx = ts_node_child_by_field_id(n, b->f.indices);
        int ti = PUSH(m, texts);
        if (ti < 0) return;
        m->texts[ti] = (kl_text){"", kl_node_span(n)};
        if (!ts_node_is_null(idx)) {
            /* from the first named child to the last, between the brackets */
            TSNode first = no_node(), last = no_node();
            bool any = false;
            kids k;
            kids_open(&k, idx);
            TSNode c;
            while (kids_next(&k, &c, NULL)) {
                if (!ts_node_is_named(c) || model__kind_of(b, c) == NK_COMMENT) continue;
                if (!any) first = c;
                last = c;
                any = true;
            }
            kids_close(&k);
            if (any) m->texts[ti] = text_between(b, first, last);
        }
        count++;
        TSNode arg = ts_node_child_by_field_id(n, b->f.argument);
        if (ts_node_is_null(arg)) break;
        n = arg;
    }
    ac = &m->accesses[ai];
    ac->base = text_of(b, n);
    ac->nindices = count;
    kl_text *t = m->texts + m->n_texts - count;
    for (unsigned i = 0; i < count / 2; i++) {
        kl_text tmp = t[i];
        t[i] = t[count - 1 - i];
        t[count - 1 - i] = tmp;
    }
    m->access_firsts[af].a = m->n_texts - count;
    ac->mode = access_mode(b);
    /* what the base names: a __shared__ array of this function or the file, a parameter */
    if (model__kind_of(b, n) == NK_IDENTIFIER && ac->base.text) {
        const char *nm = ac->base.text;
        if (b->fn_shared_owner == fr->function && b->fn_shared_first >= 0) {
            for (unsigned i = (unsigned)b->fn_shared_first; i < m->n_shared; i++)
                if (m->shared[i].function == fr->function && !strcmp(m->shared[i].name, nm)) ac->shared = (int)i;
        }
        for (unsigned i = 0; ac->shared < 0 && i < b->nfile_shared; i++)
            if (!strcmp(m->shared[b->file_shared[i]].name, nm)) ac->shared = (int)b->file_shared[i];
        const kl_function *fn = &m->functions[fr->function];
        unsigned pf = m->fn_firsts[fr->function].a;
        for (unsigned i = 0; i < fn->nparams; i++)
            if (!strcmp(m->params[pf + i].name, nm)) ac->param = (int)i;
    }
}
