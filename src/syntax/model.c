/*
 * The model of a CUDA file: one walk over the tree (a TSTreeCursor and an explicit stack
 * of frames, never C recursion, so 10 000 nested blocks cost memory, not stack) that
 * collects functions, launch sites, loops, shared declarations, uses and subscripts;
 * then a pass over the text for #pragma lines, and the cross references.
 *
 * While building, items refer to their sub-arrays (parameters, arguments, indices) by
 * offsets into shared pools (the pools grow and move); finish() turns offsets into pointers.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "syntax/names.h"
#include "syntax/syntax_int.h"
#include "util/util.h"

/* ---- strings: one arena per model ------------------------------------------------------- */

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    char data[];
} chunk;

typedef struct arena {
    chunk *head;
    bool failed;
} arena;

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

static void arena_release(arena *a)
{
    while (a->head) {
        chunk *next = a->head->next;
        free(a->head);
        a->head = next;
    }
}

/* ---- the model ---------------------------------------------------------------------------- */

/* offsets of an item's sub-arrays in the pools, while building */
typedef struct firsts {
    unsigned a, b, c;
} firsts;

#define VEC(T, name)                                                                            \
    T *name;                                                                                    \
    unsigned n_##name, cap_##name

struct kl_model {
    const kl_source *src;
    arena strings;
    VEC(kl_function, functions);
    VEC(kl_launch, launches);
    VEC(kl_loop, loops);
    VEC(kl_pragma, pragmas);
    VEC(kl_shared_decl, shared);
    VEC(kl_use, uses);
    VEC(kl_access, accesses);
    /* pools */
    VEC(kl_param, params);
    VEC(kl_tparam, tparams);
    VEC(kl_text, texts);
    /* build-time offsets, parallel to functions, launches, shared, accesses */
    VEC(firsts, fn_firsts);
    VEC(firsts, launch_firsts);
    VEC(firsts, shared_firsts);
    VEC(firsts, access_firsts);
    /* function indices sorted by name, for lookups */
    unsigned *by_name;
    /* per function, the indices of its items (kl_model_items_of): item_first[w][f] ..
     * item_first[w][f + 1] in item_order[w] */
    unsigned *item_first[KL_ITEMS_COUNT];
    unsigned *item_order[KL_ITEMS_COUNT];
    bool failed;
};

static bool grow(void **items, unsigned *cap, unsigned need, size_t size)
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

/* Append a zeroed item to vector `name` of model m; evaluates to its index, or -1 on OOM. */
#define PUSH(m, name)                                                                                  \
    (grow((void **)&(m)->name, &(m)->cap_##name, (m)->n_##name + 1, sizeof *(m)->name)                  \
         ? (memset(&(m)->name[(m)->n_##name], 0, sizeof *(m)->name), (int)(m)->n_##name++)              \
         : ((m)->failed = true, -1))

/* ---- node kinds ------------------------------------------------------------------------ */

enum nk {
    NK_OTHER = 0,
    NK_FUNCTION_DEFINITION, NK_TEMPLATE_DECLARATION, NK_LINKAGE_SPECIFICATION, NK_DECLARATION_LIST,
    NK_FOR, NK_WHILE, NK_DO, NK_RANGE_FOR,
    NK_SUBSCRIPT, NK_CALL, NK_DECLARATION, NK_TYPE_IDENTIFIER, NK_QUALIFIED_IDENTIFIER, NK_FIELD_EXPRESSION,
    NK_ASM, NK_RETURN, NK_LAMBDA, NK_PREPROC_IF, NK_PREPROC_IFDEF, NK_PREPROC_ELIF, NK_PREPROC_ELIFDEF,
    NK_PREPROC_ELSE, NK_PARENTHESIZED, NK_ASSIGNMENT, NK_UPDATE, NK_POINTER_EXPRESSION, NK_NAMESPACE_ALIAS,
    NK_COMMENT, NK_TYPE_DESCRIPTOR, NK_PARAMETER_DECLARATION, NK_FIELD_DECLARATION, NK_INIT_DECLARATOR,
    NK_POINTER_DECLARATOR, NK_ABSTRACT_POINTER_DECLARATOR, NK_REFERENCE_DECLARATOR, NK_ARRAY_DECLARATOR,
    NK_FUNCTION_DECLARATOR, NK_IDENTIFIER, NK_TEMPLATE_FUNCTION, NK_TEMPLATE_ARGUMENT_LIST,
    NK_KERNEL_CALL_SYNTAX, NK_TYPE_QUALIFIER, NK_STORAGE_CLASS, NK_LAUNCH_BOUNDS, NK_STRING_LITERAL,
    NK_CONCATENATED_STRING, NK_STRING_CONTENT, NK_RAW_STRING_LITERAL, NK_ABSTRACT_REFERENCE_DECLARATOR,
    NK_ABSTRACT_ARRAY_DECLARATOR, NK_PARENTHESIZED_DECLARATOR, NK_TEMPLATE_TYPE, NK_COUNT
};

static const char *const nk_names[NK_COUNT] = {
    [NK_FUNCTION_DEFINITION] = "function_definition", [NK_TEMPLATE_DECLARATION] = "template_declaration",
    [NK_LINKAGE_SPECIFICATION] = "linkage_specification", [NK_DECLARATION_LIST] = "declaration_list",
    [NK_FOR] = "for_statement", [NK_WHILE] = "while_statement", [NK_DO] = "do_statement",
    [NK_RANGE_FOR] = "for_range_loop", [NK_SUBSCRIPT] = "subscript_expression", [NK_CALL] = "call_expression",
    [NK_DECLARATION] = "declaration", [NK_TYPE_IDENTIFIER] = "type_identifier",
    [NK_QUALIFIED_IDENTIFIER] = "qualified_identifier", [NK_FIELD_EXPRESSION] = "field_expression",
    [NK_ASM] = "gnu_asm_expression", [NK_RETURN] = "return_statement", [NK_LAMBDA] = "lambda_expression",
    [NK_PREPROC_IF] = "preproc_if", [NK_PREPROC_IFDEF] = "preproc_ifdef", [NK_PREPROC_ELIF] = "preproc_elif",
    [NK_PREPROC_ELIFDEF] = "preproc_elifdef", [NK_PREPROC_ELSE] = "preproc_else",
    [NK_PARENTHESIZED] = "parenthesized_expression", [NK_ASSIGNMENT] = "assignment_expression",
    [NK_UPDATE] = "update_expression", [NK_POINTER_EXPRESSION] = "pointer_expression",
    [NK_NAMESPACE_ALIAS] = "namespace_alias_definition", [NK_COMMENT] = "comment",
    [NK_TYPE_DESCRIPTOR] = "type_descriptor", [NK_PARAMETER_DECLARATION] = "parameter_declaration",
    [NK_FIELD_DECLARATION] = "field_declaration", [NK_INIT_DECLARATOR] = "init_declarator",
    [NK_POINTER_DECLARATOR] = "pointer_declarator", [NK_ABSTRACT_POINTER_DECLARATOR] = "abstract_pointer_declarator",
    [NK_REFERENCE_DECLARATOR] = "reference_declarator", [NK_ARRAY_DECLARATOR] = "array_declarator",
    [NK_FUNCTION_DECLARATOR] = "function_declarator", [NK_IDENTIFIER] = "identifier",
    [NK_TEMPLATE_FUNCTION] = "template_function", [NK_TEMPLATE_ARGUMENT_LIST] = "template_argument_list",
    [NK_KERNEL_CALL_SYNTAX] = "kernel_call_syntax", [NK_TYPE_QUALIFIER] = "type_qualifier",
    [NK_STORAGE_CLASS] = "storage_class_specifier", [NK_LAUNCH_BOUNDS] = "launch_bounds",
    [NK_STRING_LITERAL] = "string_literal", [NK_CONCATENATED_STRING] = "concatenated_string",
    [NK_STRING_CONTENT] = "string_content", [NK_RAW_STRING_LITERAL] = "raw_string_literal",
    [NK_ABSTRACT_REFERENCE_DECLARATOR] = "abstract_reference_declarator",
    [NK_ABSTRACT_ARRAY_DECLARATOR] = "abstract_array_declarator",
    [NK_PARENTHESIZED_DECLARATOR] = "parenthesized_declarator", [NK_TEMPLATE_TYPE] = "template_type",
};

/* A frame of the walk: the node and the context its descendants inherit. */
typedef struct frame {
    TSNode node;
    uint8_t kind;
    TSFieldId field;          /* the node's field in its parent */
    int function, loop;
    unsigned depth;           /* loop depth */
    bool in_lambda, in_scoped; /* in_scoped: inside a recorded wmma::/cg:: name */
    const char *guard;        /* preprocessor guard of this node */
    const char *then_guard, *else_guard; /* conditionals: for their branches */
} frame;

typedef struct alias {
    const char *name;
    kl_use_kind kind;
} alias;

typedef struct builder {
    kl_model *m;
    const char *text;
    size_t len;
    uint8_t *kinds;           /* symbol -> enum nk */
    uint32_t nsymbols;
    struct {
        TSFieldId alternative, arguments, argument, body, condition, declarator, field, function, indices,
            initializer, left, name, operator_, parameters, right, scope, size, type, update, value, assembly_code,
            default_value, default_type;
    } f;
    frame *stack;
    unsigned nstack, cap_stack;
    alias aliases[16];
    unsigned naliases;
    /* the index of the first shared declaration of the current function (-1: none yet) */
    int fn_shared_first;
    int fn_shared_owner;
    /* file-scope shared declarations */
    unsigned *file_shared;
    unsigned nfile_shared, cap_file_shared;
} builder;

/* The null node (ts_node_is_null is true of it). */
static TSNode no_node(void)
{
    TSNode n;
    memset(&n, 0, sizeof n);
    return n;
}

static uint8_t kind_of(const builder *b, TSNode n)
{
    TSSymbol s = ts_node_symbol(n);
    return s < b->nsymbols ? b->kinds[s] : NK_OTHER;
}

/* ---- text helpers ------------------------------------------------------------------------ */

static const char *str_n(builder *b, const char *s, size_t n)
{
    char *p = arena_alloc(&b->m->strings, n + 1);
    if (!p) return "";
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static const char *str(builder *b, const char *s) { return str_n(b, s, strlen(s)); }

static uint32_t clip(const builder *b, uint32_t off) { return off > b->len ? (uint32_t)b->len : off; }

static const char *node_str(builder *b, TSNode n)
{
    uint32_t a = clip(b, ts_node_start_byte(n)), e = clip(b, ts_node_end_byte(n));
    return str_n(b, b->text + a, e > a ? e - a : 0);
}

static bool node_is(const builder *b, TSNode n, const char *s)
{
    uint32_t a = clip(b, ts_node_start_byte(n)), e = clip(b, ts_node_end_byte(n));
    size_t k = strlen(s);
    return e >= a && e - a == k && memcmp(b->text + a, s, k) == 0;
}

/* Copy text[a..e) minus [skip_a, skip_e), whitespace runs (and comments) folded into one space. */
static const char *collapsed(builder *b, uint32_t a, uint32_t e, uint32_t skip_a, uint32_t skip_e)
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

static kl_text text_of(builder *b, TSNode n)
{
    if (ts_node_is_null(n)) return (kl_text){NULL, {0, 0, 0, 0}};
    return (kl_text){node_str(b, n), kl_node_span(n)};
}

/* The text from node first's start to node last's end. */
static kl_text text_between(builder *b, TSNode first, TSNode last)
{
    kl_span s = kl_node_span(first);
    s.end = ts_node_end_byte(last);
    uint32_t a = clip(b, s.start), e = clip(b, s.end);
    return (kl_text){str_n(b, b->text + a, e > a ? e - a : 0), s};
}

/* A node's text without a trailing ';' and blanks (a for initializer). */
static kl_text text_trimmed(builder *b, TSNode n)
{
    kl_text t = text_of(b, n);
    uint32_t e = clip(b, t.span.end);
    while (e > t.span.start && (b->text[e - 1] == ';' || b->text[e - 1] == ' ' || b->text[e - 1] == '\t' ||
                                b->text[e - 1] == '\n' || b->text[e - 1] == '\r'))
        e--;
    if (e != t.span.end) {
        t.span.end = e;
        t.text = str_n(b, b->text + t.span.start, e - t.span.start);
    }
    return t;
}

static const char *join_guard(builder *b, const char *outer, const char *cond)
{
    if (!outer) return str(b, cond);
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_adds(&sb, outer);
    kl_strbuf_adds(&sb, " && ");
    kl_strbuf_adds(&sb, cond);
    const char *r = sb.failed ? (b->m->failed = true, "") : str(b, kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    return r;
}

static const char *negated(builder *b, const char *cond)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "!(%s)", cond);
    const char *r = sb.failed ? (b->m->failed = true, "") : str(b, kl_strbuf_str(&sb));
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
static unsigned push_child_texts(builder *b, TSNode n, unsigned *first)
{
    kl_model *m = b->m;
    *first = m->n_texts;
    unsigned count = 0;
    if (ts_node_is_null(n)) return 0;
    kids k;
    kids_open(&k, n);
    TSNode c;
    while (kids_next(&k, &c, NULL)) {
        if (!ts_node_is_named(c) || kind_of(b, c) == NK_COMMENT) continue;
        int i = PUSH(m, texts);
        if (i < 0) break;
        m->texts[i] = text_of(b, c);
        count++;
    }
    kids_close(&k);
    return count;
}

/* ---- functions ---------------------------------------------------------------------------- */

static void parse_param(builder *b, TSNode pn, kl_param *p)
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
        uint8_t ck = kind_of(b, c);
        if (f == b->f.type) p->elem_type = collapsed(b, ts_node_start_byte(c), ts_node_end_byte(c), 0, 0);
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
        uint8_t dk = kind_of(b, decl);
        if (dk == NK_IDENTIFIER || (ts_node_is_named(decl) && ts_node_child_count(decl) == 0)) {
            name = decl;
            have_name = true;
            break;
        }
        if (dk == NK_POINTER_DECLARATOR || dk == NK_ABSTRACT_POINTER_DECLARATOR) {
            p->pointer_depth++;
            kids_open(&k, decl);
            while (kids_next(&k, &c, &f)) {
                if (kind_of(b, c) != NK_TYPE_QUALIFIER) continue;
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
        p->name = node_str(b, name);
        skip_a = ts_node_start_byte(name);
        skip_e = ts_node_end_byte(name);
    }
    p->type = collapsed(b, ts_node_start_byte(pn), ts_node_end_byte(pn), skip_a, skip_e);
}

/* Push the parameters of a parameter_list; returns the count. */
static unsigned push_params(builder *b, TSNode list, unsigned *first)
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
        if (!ts_node_is_named(c) || kind_of(b, c) == NK_COMMENT) continue;
        if (strstr(t, "parameter_declaration") == NULL && strcmp(t, "variadic_parameter") != 0) continue;
        int i = PUSH(m, params);
        if (i < 0) break;
        parse_param(b, c, &m->params[i]);
        count++;
    }
    kids_close(&k);
    return count;
}

static unsigned push_tparams(builder *b, TSNode list, unsigned *first)
{
    kl_model *m = b->m;
    *first = m->n_tparams;
    unsigned count = 0;
    if (ts_node_is_null(list)) return 0;
    kids k;
    kids_open(&k, list);
    TSNode c;
    while (kids_next(&k, &c, NULL)) {
        if (!ts_node_is_named(c) || kind_of(b, c) == NK_COMMENT) continue;
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
            if (!ts_node_is_null(nm)) t->name = node_str(b, nm);
            TSNode dv = ts_node_child_by_field_id(c, b->f.default_type);
            t->default_value = ts_node_is_null(dv) ? NULL : node_str(b, dv);
        } else {
            /* int N / int N = 4 / int... Ns */
            kl_param p;
            memset(&p, 0, sizeof p);
            parse_param(b, c, &p);
            t->name = p.name;
            TSNode ty = ts_node_child_by_field_id(c, b->f.type);
            t->kind = ts_node_is_null(ty) ? "" : collapsed(b, ts_node_start_byte(ty), ts_node_end_byte(ty), 0, 0);
            TSNode dv = ts_node_child_by_field_id(c, b->f.default_value);
            t->default_value = ts_node_is_null(dv) ? NULL : node_str(b, dv);
        }
        count++;
    }
    kids_close(&k);
    return count;
}

static const frame *parent_frame(const builder *b, unsigned up)
{
    return b->nstack > up + 1 ? &b->stack[b->nstack - 2 - up] : NULL;
}

static void on_function(builder *b, frame *fr)
{
    kl_model *m = b->m;
    int fi = PUSH(m, functions);
    int ff = PUSH(m, fn_firsts);
    if (fi < 0 || ff < 0) return;
    kl_function *fn = &m->functions[fi];
    firsts *fs = &m->fn_firsts[ff];
    TSNode n = fr->node;
    fn->span = kl_node_span(n);
    fn->guard = fr->guard;
    fn->name = "";
    fn->return_type = "";
    const frame *p = parent_frame(b, 0);
    if (p && p->kind == NK_TEMPLATE_DECLARATION) {
        fn->is_template = true;
        fn->span = kl_node_span(p->node);
        fn->ntparams = push_tparams(b, ts_node_child_by_field_id(p->node, b->f.parameters), &fs->b);
    }
    for (unsigned up = 0; up < 3; up++) {
        const frame *q = parent_frame(b, up);
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
        uint8_t ck = kind_of(b, c);
        const char *t = ts_node_type(c);
        if (!ts_node_is_named(c)) {
            if (!strcmp(t, "__global__")) fn->kind = KL_FUNCTION_KERNEL;
            else if (!strcmp(t, "__device__")) fn->is_device = true;
            else if (!strcmp(t, "__host__")) fn->is_host = true;
            else if (!strcmp(t, "__forceinline__")) fn->is_forceinline = true;
            else if (!strcmp(t, "__noinline__")) fn->is_noinline = true;
            continue;
        }
        if (f == b->f.type) fn->return_type = collapsed(b, ts_node_start_byte(c), ts_node_end_byte(c), 0, 0);
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
        if (kind_of(b, decl) == NK_FUNCTION_DECLARATOR) {
            TSNode nm = ts_node_child_by_field_id(decl, b->f.declarator);
            if (!ts_node_is_null(nm)) {
                fn->name = node_str(b, nm);
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

static TSNode first_named(const builder *b, TSNode n)
{
    unsigned nc = ts_node_named_child_count(n);
    for (unsigned i = 0; i < nc; i++) {
        TSNode c = ts_node_named_child(n, i);
        if (kind_of(b, c) != NK_COMMENT) return c;
    }
    return no_node();
}

static const char *loop_var(builder *b, TSNode init)
{
    if (ts_node_is_null(init)) return NULL;
    uint8_t k = kind_of(b, init);
    if (k == NK_DECLARATION) {
        TSNode d = ts_node_child_by_field_id(init, b->f.declarator);
        if (!ts_node_is_null(d) && kind_of(b, d) == NK_INIT_DECLARATOR) d = ts_node_child_by_field_id(d, b->f.declarator);
        if (!ts_node_is_null(d) && kind_of(b, d) == NK_IDENTIFIER) return node_str(b, d);
    } else if (k == NK_ASSIGNMENT) {
        TSNode l = ts_node_child_by_field_id(init, b->f.left);
        if (!ts_node_is_null(l) && kind_of(b, l) == NK_IDENTIFIER) return node_str(b, l);
    }
    return NULL;
}

static void on_loop(builder *b, frame *fr)
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
            while (ts_node_named_child_count(d) && kind_of(b, d) != NK_IDENTIFIER) d = first_named(b, d);
            if (!ts_node_is_null(d) && kind_of(b, d) == NK_IDENTIFIER) lp->var = node_str(b, d);
        }
        break;
    }
    }
    fr->loop = li;
    fr->depth = lp->depth;
}

/* ---- uses ------------------------------------------------------------------------------------ */

static int add_use(builder *b, const frame *fr, kl_use_kind kind, const char *name, kl_span span)
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

static bool scope_facility(builder *b, const char *s, size_t n, kl_use_kind *kind)
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

static void on_qualified(builder *b, frame *fr)
{
    const frame *p = parent_frame(b, 0);
    if (fr->in_scoped || (p && p->kind == NK_QUALIFIED_IDENTIFIER)) return;
    uint32_t a = clip(b, ts_node_start_byte(fr->node)), e = clip(b, ts_node_end_byte(fr->node));
    kl_use_kind kind;
    if (!scope_facility(b, b->text + a, e - a, &kind)) return;
    const char *lt = memchr(b->text + a, '<', e - a);
    size_t n = lt ? (size_t)(lt - (b->text + a)) : e - a;
    add_use(b, fr, kind, str_n(b, b->text + a, n), kl_node_span(fr->node));
    fr->in_scoped = true;
}

static void on_alias(builder *b, frame *fr)
{
    TSNode nm = ts_node_child_by_field_id(fr->node, b->f.name);
    if (ts_node_is_null(nm) || b->naliases >= sizeof b->aliases / sizeof b->aliases[0]) return;
    unsigned nc = ts_node_named_child_count(fr->node);
    TSNode target = nc ? ts_node_named_child(fr->node, nc - 1) : no_node();
    if (ts_node_is_null(target)) return;
    uint32_t a = clip(b, ts_node_start_byte(target)), e = clip(b, ts_node_end_byte(target));
    kl_use_kind kind;
    if (!kl_scope_kind(b->text + a, e - a, &kind)) return;
    b->aliases[b->naliases++] = (alias){node_str(b, nm), kind};
}

static void on_launch(builder *b, frame *fr, TSNode callee, TSNode config)
{
    kl_model *m = b->m;
    int li = PUSH(m, launches);
    int lf = PUSH(m, launch_firsts);
    if (li < 0 || lf < 0) return;
    kl_launch *l = &m->launches[li];
    firsts *fs = &m->launch_firsts[lf];
    l->span = kl_node_span(fr->node);
    l->config_span = kl_node_span(config);
    l->function = fr->function;
    l->in_lambda = fr->in_lambda;
    l->kernel_function = -1;
    uint32_t a = clip(b, ts_node_start_byte(callee)), e = clip(b, ts_node_end_byte(callee));
    const char *lt = memchr(b->text + a, '<', e - a);
    l->kernel = collapsed(b, a, lt ? (uint32_t)(lt - b->text) : e, 0, 0);
    /* template arguments: the template_argument_list inside the callee */
    TSNode targs = no_node();
    TSNode c = callee;
    for (unsigned guard = 0; guard < 8 && !ts_node_is_null(c); guard++) {
        uint8_t k = kind_of(b, c);
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

static void on_call(builder *b, frame *fr)
{
    TSNode n = fr->node;
    TSNode callee = ts_node_child_by_field_id(n, b->f.function);
    if (ts_node_is_null(callee)) return;
    /* a launch: kernel<<<…>>>(…) */
    unsigned nc = ts_node_named_child_count(n);
    for (unsigned i = 0; i < nc; i++) {
        TSNode c = ts_node_named_child(n, i);
        if (kind_of(b, c) == NK_KERNEL_CALL_SYNTAX) {
            on_launch(b, fr, callee, c);
            return;
        }
    }
    uint8_t ck = kind_of(b, callee);
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
            add_use(b, fr, kind, collapsed(b, a, name_end, 0, 0), kl_node_span(n));
        }
        return;
    }
    if (kl_call_kind(last, lastn, member, &kind)) {
        add_use(b, fr, kind, collapsed(b, a, name_end, 0, 0), kl_node_span(n));
        return;
    }
    if (!member && kl_is_vector_maker(last, lastn)) {
        add_use(b, fr, KL_USE_VECTOR_TYPE, str_n(b, last + 5, lastn - 5), kl_node_span(n));
        return;
    }
    if (!member) {
        /* maybe a call to a function of this file: resolved once every function is known */
        int u = add_use(b, fr, KL_USE_CALL, collapsed(b, a, name_end, 0, 0), kl_node_span(n));
        if (u >= 0) b->m->uses[u].target = -2;
    }
}

static void on_type_identifier(builder *b, frame *fr)
{
    uint32_t a = clip(b, ts_node_start_byte(fr->node)), e = clip(b, ts_node_end_byte(fr->node));
    if (!kl_is_vector_type(b->text + a, e - a)) return;
    int u = add_use(b, fr, KL_USE_VECTOR_TYPE, str_n(b, b->text + a, e - a), kl_node_span(fr->node));
    if (u < 0) return;
    /* pointed to? reinterpret_cast<float4*>, (float4 *), float4 *p */
    const frame *p = parent_frame(b, 0);
    if (!p) return;
    TSNode d = ts_node_child_by_field_id(p->node, b->f.declarator);
    if (ts_node_is_null(d)) return;
    uint8_t dk = kind_of(b, d);
    if (dk == NK_INIT_DECLARATOR) {
        d = ts_node_child_by_field_id(d, b->f.declarator);
        dk = ts_node_is_null(d) ? NK_OTHER : kind_of(b, d);
    }
    b->m->uses[u].vector_pointer = dk == NK_POINTER_DECLARATOR || dk == NK_ABSTRACT_POINTER_DECLARATOR;
}

static void on_field_expression(builder *b, frame *fr)
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
static void on_asm(builder *b, frame *fr)
{
    TSNode code = ts_node_child_by_field_id(fr->node, b->f.assembly_code);
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_init(&sb, 1 << 20);
    if (!ts_node_is_null(code)) {
        /* the bodies of the string literals, as written (escapes included), one per line */
        TSNode parts[64];
        unsigned nparts = 0;
        if (kind_of(b, code) == NK_CONCATENATED_STRING) {
            kids k;
            kids_open(&k, code);
            TSNode c;
            while (kids_next(&k, &c, NULL) && nparts < 64)
                if (kind_of(b, c) == NK_STRING_LITERAL || kind_of(b, c) == NK_RAW_STRING_LITERAL) parts[nparts++] = c;
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
            if (kl_ptx_kind(p, n, &kind)) add_use(b, fr, kind, str_n(b, p, n), span);
        }
        while (*q && *q != ';' && *q != '\n' && !(*q == '\\' && q[1] == 'n')) q++;
        p = q;
        if (p == s) break;
    }
    add_use(b, fr, KL_USE_ASM, first ? str_n(b, first, firstn) : "asm", span);
    kl_strbuf_release(&sb);
}

/* ---- shared declarations ---------------------------------------------------------------- */

static void on_declaration(builder *b, frame *fr)
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
        uint8_t ck = kind_of(b, c);
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
            if (close) align = collapsed(b, j + 1, (uint32_t)(close - b->text), 0, 0);
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
        s->elem_type = ts_node_is_null(type) ? "" : collapsed(b, ts_node_start_byte(type), ts_node_end_byte(type), 0, 0);
        if (fr->function >= 0 && b->fn_shared_owner != fr->function) {
            b->fn_shared_owner = fr->function;
            b->fn_shared_first = si;
        } else if (fr->function < 0) {
            if (!grow((void **)&b->file_shared, &b->cap_file_shared, b->nfile_shared + 1, sizeof *b->file_shared)) {
                m->failed = true;
                break;
            }
            b->file_shared[b->nfile_shared++] = (unsigned)si;
        }
        /* dims: array_declarator chain, outermost declarator = last [] */
        TSNode d = c;
        unsigned ndims = 0;
        for (unsigned guard = 0; guard < 64 && !ts_node_is_null(d); guard++) {
            uint8_t dk = kind_of(b, d);
            if (dk == NK_IDENTIFIER) {
                s->name = node_str(b, d);
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

static kl_access_mode access_mode(const builder *b)
{
    /* climb from the subscript through (…) and .field to what uses it */
    unsigned top = b->nstack - 1;
    TSFieldId field = b->stack[top].field;
    for (unsigned i = top; i-- > 0;) {
        const frame *p = &b->stack[i];
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

static void on_subscript(builder *b, frame *fr)
{
    kl_model *m = b->m;
    const frame *p = parent_frame(b, 0);
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
    for (unsigned guard = 0; guard < 64 && kind_of(b, n) == NK_SUBSCRIPT; guard++) {
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
                if (!ts_node_is_named(c) || kind_of(b, c) == NK_COMMENT) continue;
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
    if (kind_of(b, n) == NK_IDENTIFIER && ac->base.text) {
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

/* ---- the walk -------------------------------------------------------------------------------- */

static bool is_conditional(uint8_t k)
{
    return k == NK_PREPROC_IF || k == NK_PREPROC_IFDEF || k == NK_PREPROC_ELIF || k == NK_PREPROC_ELIFDEF ||
           k == NK_PREPROC_ELSE;
}

static void on_conditional(builder *b, frame *fr)
{
    const char *cond = NULL;
    if (fr->kind == NK_PREPROC_IF || fr->kind == NK_PREPROC_ELIF) {
        TSNode c = ts_node_child_by_field_id(fr->node, b->f.condition);
        if (!ts_node_is_null(c)) cond = collapsed(b, ts_node_start_byte(c), ts_node_end_byte(c), 0, 0);
    } else if (fr->kind == NK_PREPROC_IFDEF || fr->kind == NK_PREPROC_ELIFDEF) {
        TSNode nm = ts_node_child_by_field_id(fr->node, b->f.name);
        bool neg = ts_node_child_count(fr->node) && strstr(ts_node_type(ts_node_child(fr->node, 0)), "ndef");
        if (!ts_node_is_null(nm)) {
            kl_strbuf sb = KL_STRBUF_INIT;
            kl_strbuf_addf(&sb, "%sdefined(%s)", neg ? "!" : "", node_str(b, nm));
            cond = sb.failed ? "" : str(b, kl_strbuf_str(&sb));
            kl_strbuf_release(&sb);
        }
    }
    if (fr->kind == NK_PREPROC_ELSE) {
        fr->then_guard = fr->guard;
        fr->else_guard = fr->guard;
        return;
    }
    if (!cond) cond = "?";
    fr->then_guard = join_guard(b, fr->guard, cond);
    fr->else_guard = join_guard(b, fr->guard, negated(b, cond));
}

/* Enter the node under the cursor: a new frame from its parent's, then what the node records. */
static void enter(builder *b, TSTreeCursor *cur)
{
    if (!grow((void **)&b->stack, &b->cap_stack, b->nstack + 1, sizeof *b->stack)) {
        b->m->failed = true;
        return;
    }
    frame *fr = &b->stack[b->nstack++];
    TSNode n = ts_tree_cursor_current_node(cur);
    memset(fr, 0, sizeof *fr);
    fr->node = n;
    fr->kind = kind_of(b, n);
    fr->field = ts_tree_cursor_current_field_id(cur);
    const frame *p = b->nstack > 1 ? &b->stack[b->nstack - 2] : NULL;
    if (p) {
        fr->function = p->function;
        fr->loop = p->loop;
        fr->depth = p->depth;
        fr->in_lambda = p->in_lambda;
        fr->in_scoped = p->in_scoped;
        fr->guard = is_conditional(p->kind) ? (fr->field == b->f.alternative ? p->else_guard : p->then_guard) : p->guard;
    } else {
        fr->function = -1;
        fr->loop = -1;
    }
    if (!ts_node_is_named(n)) return;
    switch (fr->kind) {
    case NK_FUNCTION_DEFINITION: on_function(b, fr); break;
    case NK_FOR: case NK_WHILE: case NK_DO: case NK_RANGE_FOR: on_loop(b, fr); break;
    case NK_SUBSCRIPT: on_subscript(b, fr); break;
    case NK_CALL: on_call(b, fr); break;
    case NK_DECLARATION: on_declaration(b, fr); break;
    case NK_TYPE_IDENTIFIER: on_type_identifier(b, fr); break;
    case NK_QUALIFIED_IDENTIFIER: on_qualified(b, fr); break;
    case NK_FIELD_EXPRESSION: on_field_expression(b, fr); break;
    case NK_ASM: on_asm(b, fr); break;
    case NK_NAMESPACE_ALIAS: on_alias(b, fr); break;
    case NK_LAMBDA: fr->in_lambda = true; break;
    case NK_RETURN:
        if (fr->function >= 0 && !fr->in_lambda) b->m->functions[fr->function].nreturns++;
        break;
    case NK_PREPROC_IF: case NK_PREPROC_IFDEF: case NK_PREPROC_ELIF: case NK_PREPROC_ELIFDEF: case NK_PREPROC_ELSE:
        on_conditional(b, fr);
        break;
    default: break;
    }
}

static void walk(builder *b, TSNode root)
{
    TSTreeCursor cur = ts_tree_cursor_new(root);
    enter(b, &cur);
    while (!b->m->failed) {
        if (ts_tree_cursor_goto_first_child(&cur)) {
            enter(b, &cur);
            continue;
        }
        bool done = false;
        for (;;) {
            if (ts_tree_cursor_goto_next_sibling(&cur)) {
                b->nstack--;
                enter(b, &cur);
                break;
            }
            if (!ts_tree_cursor_goto_parent(&cur)) {
                done = true;
                break;
            }
            b->nstack--;
        }
        if (done) break;
    }
    ts_tree_cursor_delete(&cur);
}

/* ---- pragmas ------------------------------------------------------------------------------------ */

/* Skip blanks, comments and further pragma lines from i; the offset of the next token. */
static size_t next_token(const char *t, size_t len, size_t i)
{
    while (i < len) {
        char c = t[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            i++;
        } else if (c == '/' && i + 1 < len && t[i + 1] == '/') {
            while (i < len && t[i] != '\n') i++;
        } else if (c == '/' && i + 1 < len && t[i + 1] == '*') {
            const char *e = strstr(t + i + 2, "*/");
            i = e ? (size_t)(e - t) + 2 : len;
        } else if (c == '#') {
            size_t hash, e = kl_pragma_line_end(t, len, i, &hash);
            if (!e) return i;
            i = e;
        } else {
            return i;
        }
    }
    return i;
}

/* Binary search: the index of the item whose span starts at pos, or -1. */
#define FIND_START(arr, n, pos, out)                                                                           \
    do {                                                                                                       \
        unsigned lo_ = 0, hi_ = (n);                                                                           \
        (out) = -1;                                                                                            \
        while (lo_ < hi_) {                                                                                    \
            unsigned mid_ = lo_ + (hi_ - lo_) / 2;                                                             \
            if ((arr)[mid_].span.start < (pos)) lo_ = mid_ + 1;                                                \
            else hi_ = mid_;                                                                                   \
        }                                                                                                      \
        if (lo_ < (n) && (arr)[lo_].span.start == (pos)) (out) = (int)lo_;                                     \
    } while (0)

static int function_containing(const kl_model *m, size_t pos)
{
    unsigned lo = 0, hi = m->n_functions;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if (m->functions[mid].span.start <= pos) lo = mid + 1;
        else hi = mid;
    }
    for (unsigned i = lo; i-- > 0;) {
        if (m->functions[i].span.end > pos) return (int)i;
        if (lo - i > 8) break;
    }
    return -1;
}

static void find_pragmas(builder *b)
{
    kl_model *m = b->m;
    TSNode root = kl_source_root(m->src);
    unsigned line = 1;
    for (size_t i = 0; i < b->len;) {
        size_t hash, e = kl_pragma_line_end(b->text, b->len, i, &hash);
        if (e) {
            /* not inside a comment or a string */
            TSNode at = ts_node_descendant_for_byte_range(root, (uint32_t)hash, (uint32_t)hash + 1);
            const char *t = ts_node_is_null(at) ? "" : ts_node_type(at);
            bool hidden = !strcmp(t, "comment") || strstr(t, "string") || !strcmp(t, "char_literal");
            if (!hidden) {
                int pi = PUSH(m, pragmas);
                if (pi < 0) return;
                kl_pragma *pg = &m->pragmas[pi];
                size_t end = e;
                while (end > hash && (b->text[end - 1] == ' ' || b->text[end - 1] == '\t' || b->text[end - 1] == '\r'))
                    end--;
                pg->text.text = str_n(b, b->text + hash, end - hash);
                pg->text.span = (kl_span){(uint32_t)hash, (uint32_t)end, line, (uint32_t)(hash - i) + 1};
                /* name and argument: the words after "pragma" (kl_pragma_line_end found it) */
                const char *s = b->text + hash + 1, *stop = b->text + end;
                while (s < stop && (*s == ' ' || *s == '\t')) s++;
                s = s + 6 <= stop ? s + 6 : stop;
                while (s < stop && (*s == ' ' || *s == '\t')) s++;
                const char *w = s;
                while (w < stop && *w != ' ' && *w != '\t' && *w != '(' && *w != '\\') w++;
                pg->name = str_n(b, s, (size_t)(w - s));
                pg->arg = NULL;
                const char *rest = collapsed(b, (uint32_t)(w - b->text), (uint32_t)end, 0, 0);
                if (*rest) pg->arg = rest;
                pg->loop = -1;
                pg->function = function_containing(m, hash);
                size_t next = next_token(b->text, b->len, e);
                int li;
                FIND_START(m->loops, m->n_loops, next, li);
                if (li >= 0) {
                    pg->loop = li;
                    kl_loop *lp = &m->loops[li];
                    if (lp->pragma < 0) lp->pragma = pi;
                    lp->npragmas++;
                    if (!strcmp(pg->name, "unroll")) {
                        lp->unroll = true;
                        lp->unroll_arg = pg->arg;
                    }
                }
            }
        }
        /* next line: continuation lines of a pragma are part of it */
        size_t stop = e ? e : i;
        for (size_t k = i; k < stop; k++)
            if (b->text[k] == '\n') line++;
        const char *nl = memchr(b->text + stop, '\n', b->len - stop);
        if (!nl) break;
        line++;
        i = (size_t)(nl - b->text) + 1;
    }
}

/* ---- cross references and finishing ------------------------------------------------------------ */

static const kl_model *sort_model;
static int by_name(const void *x, const void *y)
{
    unsigned a = *(const unsigned *)x, b = *(const unsigned *)y;
    int c = strcmp(sort_model->functions[a].name, sort_model->functions[b].name);
    return c ? c : (a > b) - (a < b);
}

/* The first function named exactly `name` (of `kind`, or any kind when kind < 0). */
static int lookup_exact(const kl_model *m, const char *name, int kind)
{
    unsigned lo = 0, hi = m->n_functions;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if (strcmp(m->functions[m->by_name[mid]].name, name) < 0) lo = mid + 1;
        else hi = mid;
    }
    for (unsigned i = lo; i < m->n_functions; i++) {
        const kl_function *f = &m->functions[m->by_name[i]];
        if (strcmp(f->name, name) != 0) break;
        if (kind < 0 || (int)f->kind == kind) return (int)m->by_name[i];
    }
    return -1;
}

/* Counting sort of items by their function (stable: document order within a function). */
static bool index_items(kl_model *m, kl_items w, const void *items, unsigned n, size_t stride, size_t off)
{
    unsigned nf = m->n_functions;
    unsigned *first = calloc((size_t)nf + 2, sizeof *first);
    unsigned *order = malloc((n ? n : 1) * sizeof *order);
    if (!first || !order) {
        free(first);
        free(order);
        return false;
    }
    for (unsigned i = 0; i < n; i++) {
        int f = *(const int *)((const char *)items + (size_t)i * stride + off);
        if (f >= 0 && (unsigned)f < nf) first[f + 2]++;
    }
    for (unsigned f = 0; f < nf; f++) first[f + 2] += first[f + 1];
    for (unsigned i = 0; i < n; i++) {
        int f = *(const int *)((const char *)items + (size_t)i * stride + off);
        if (f >= 0 && (unsigned)f < nf) order[first[f + 1]++] = i;
    }
    m->item_first[w] = first;
    m->item_order[w] = order;
    return true;
}

const unsigned *kl_model_items_of(const kl_model *m, kl_items which, unsigned function, unsigned *count)
{
    *count = 0;
    if ((unsigned)which >= KL_ITEMS_COUNT || function >= m->n_functions || !m->item_first[which]) return NULL;
    const unsigned *first = m->item_first[which];
    *count = first[function + 1] - first[function];
    return *count ? m->item_order[which] + first[function] : NULL;
}

/* By name; a qualified name ("ops::zero") that is not found exactly is looked up by its
 * last component: functions are recorded with the name as written in their definition,
 * which inside "namespace ops { … }" is "zero". */
static int lookup(const kl_model *m, const char *name, int kind)
{
    int i = lookup_exact(m, name, kind);
    if (i >= 0) return i;
    const char *colons = NULL;
    for (const char *p = strstr(name, "::"); p; p = strstr(p + 2, "::")) colons = p;
    return colons && colons[2] ? lookup_exact(m, colons + 2, kind) : -1;
}

static void finish(builder *b)
{
    kl_model *m = b->m;
    for (unsigned i = 0; i < m->n_functions; i++) {
        kl_function *f = &m->functions[i];
        firsts fs = m->fn_firsts[i];
        f->params = f->nparams ? m->params + fs.a : NULL;
        f->tparams = f->ntparams ? m->tparams + fs.b : NULL;
        f->launch_bounds = f->nlaunch_bounds ? m->texts + fs.c : NULL;
    }
    for (unsigned i = 0; i < m->n_launches; i++) {
        kl_launch *l = &m->launches[i];
        l->template_args = l->ntemplate_args ? m->texts + m->launch_firsts[i].a : NULL;
        l->args = l->nargs ? m->texts + m->launch_firsts[i].b : NULL;
    }
    for (unsigned i = 0; i < m->n_shared; i++)
        m->shared[i].dims = m->shared[i].ndims ? m->texts + m->shared_firsts[i].a : NULL;
    for (unsigned i = 0; i < m->n_accesses; i++)
        m->accesses[i].indices = m->accesses[i].nindices ? m->texts + m->access_firsts[i].a : NULL;

    m->by_name = malloc((m->n_functions ? m->n_functions : 1) * sizeof *m->by_name);
    if (!m->by_name) {
        m->failed = true;
        return;
    }
    for (unsigned i = 0; i < m->n_functions; i++) m->by_name[i] = i;
    sort_model = m;
    qsort(m->by_name, m->n_functions, sizeof *m->by_name, by_name);
    sort_model = NULL;

    for (unsigned i = 0; i < m->n_launches; i++)
        m->launches[i].kernel_function = lookup(m, m->launches[i].kernel, KL_FUNCTION_KERNEL);
    /* calls: keep those that name a function of this file (not the caller itself) */
    unsigned out = 0;
    for (unsigned i = 0; i < m->n_uses; i++) {
        kl_use u = m->uses[i];
        if (u.kind == KL_USE_CALL && u.target == -2) {
            u.target = lookup(m, u.name, KL_FUNCTION_DEVICE);
            if (u.target < 0) u.target = lookup(m, u.name, -1);
            if (u.target < 0 || u.target == u.function) continue;
        }
        m->uses[out++] = u;
    }
    m->n_uses = out;
    if (!index_items(m, KL_ITEMS_USES, m->uses, m->n_uses, sizeof *m->uses, offsetof(kl_use, function)) ||
        !index_items(m, KL_ITEMS_LOOPS, m->loops, m->n_loops, sizeof *m->loops, offsetof(kl_loop, function)) ||
        !index_items(m, KL_ITEMS_ACCESSES, m->accesses, m->n_accesses, sizeof *m->accesses,
                     offsetof(kl_access, function)) ||
        !index_items(m, KL_ITEMS_SHARED, m->shared, m->n_shared, sizeof *m->shared, offsetof(kl_shared_decl, function)) ||
        !index_items(m, KL_ITEMS_LAUNCHES, m->launches, m->n_launches, sizeof *m->launches,
                     offsetof(kl_launch, function)) ||
        !index_items(m, KL_ITEMS_PRAGMAS, m->pragmas, m->n_pragmas, sizeof *m->pragmas, offsetof(kl_pragma, function)))
        m->failed = true;
}

/* ---- public ---------------------------------------------------------------------------------- */

static bool init_builder(builder *b, kl_model *m)
{
    const TSLanguage *lang = tree_sitter_cuda();
    b->m = m;
    b->text = kl_source_text(m->src, &b->len);
    b->nsymbols = ts_language_symbol_count(lang);
    b->kinds = calloc(b->nsymbols ? b->nsymbols : 1, 1);
    if (!b->kinds) return false;
    for (uint32_t s = 0; s < b->nsymbols; s++) {
        if (ts_language_symbol_type(lang, (TSSymbol)s) != TSSymbolTypeRegular) continue;
        const char *name = ts_language_symbol_name(lang, (TSSymbol)s);
        for (unsigned k = 1; k < NK_COUNT; k++)
            if (nk_names[k] && !strcmp(nk_names[k], name)) {
                b->kinds[s] = (uint8_t)k;
                break;
            }
    }
#define FIELD(member, name) b->f.member = ts_language_field_id_for_name(lang, name, (uint32_t)strlen(name))
    FIELD(alternative, "alternative");
    FIELD(arguments, "arguments");
    FIELD(argument, "argument");
    FIELD(body, "body");
    FIELD(condition, "condition");
    FIELD(declarator, "declarator");
    FIELD(field, "field");
    FIELD(function, "function");
    FIELD(indices, "indices");
    FIELD(initializer, "initializer");
    FIELD(left, "left");
    FIELD(name, "name");
    FIELD(operator_, "operator");
    FIELD(parameters, "parameters");
    FIELD(right, "right");
    FIELD(scope, "scope");
    FIELD(size, "size");
    FIELD(type, "type");
    FIELD(update, "update");
    FIELD(value, "value");
    FIELD(assembly_code, "assembly_code");
    FIELD(default_value, "default_value");
    FIELD(default_type, "default_type");
#undef FIELD
    b->fn_shared_first = -1;
    b->fn_shared_owner = -1;
    return true;
}

kl_status kl_model_build(const kl_source *src, kl_model **out, kl_error *err)
{
    *out = NULL;
    kl_model *m = calloc(1, sizeof *m);
    if (!m) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    m->src = src;
    builder b;
    memset(&b, 0, sizeof b);
    if (!init_builder(&b, m)) {
        m->failed = true;
    } else {
        walk(&b, kl_source_root(src));
        if (!m->failed) find_pragmas(&b);
        if (!m->failed) finish(&b);
    }
    free(b.kinds);
    free(b.stack);
    free(b.file_shared);
    if (m->failed || m->strings.failed) {
        kl_model_free(m);
        return kl_error_set(err, KL_ERR_NOMEM, "%s: out of memory building the model", kl_source_name(src));
    }
    *out = m;
    return KL_OK;
}

void kl_model_free(kl_model *m)
{
    if (!m) return;
    arena_release(&m->strings);
    free(m->functions);
    free(m->launches);
    free(m->loops);
    free(m->pragmas);
    free(m->shared);
    free(m->uses);
    free(m->accesses);
    free(m->params);
    free(m->tparams);
    free(m->texts);
    free(m->fn_firsts);
    free(m->launch_firsts);
    free(m->shared_firsts);
    free(m->access_firsts);
    free(m->by_name);
    for (unsigned w = 0; w < KL_ITEMS_COUNT; w++) {
        free(m->item_first[w]);
        free(m->item_order[w]);
    }
    free(m);
}

const kl_source *kl_model_source(const kl_model *m) { return m->src; }

#define ACCESSOR(T, fn, name)                                                                          \
    const T *fn(const kl_model *m, unsigned *count)                                                    \
    {                                                                                                  \
        if (count) *count = m->n_##name;                                                               \
        return m->n_##name ? m->name : NULL;                                                           \
    }
ACCESSOR(kl_function, kl_model_functions, functions)
ACCESSOR(kl_launch, kl_model_launches, launches)
ACCESSOR(kl_loop, kl_model_loops, loops)
ACCESSOR(kl_pragma, kl_model_pragmas, pragmas)
ACCESSOR(kl_shared_decl, kl_model_shared, shared)
ACCESSOR(kl_use, kl_model_uses, uses)
ACCESSOR(kl_access, kl_model_accesses, accesses)

int kl_model_find_function(const kl_model *m, const char *name, kl_function_kind kind)
{
    return lookup(m, name, (int)kind);
}

int kl_model_launch_function(const kl_model *m) { return lookup(m, "launch", KL_FUNCTION_HOST); }

const char *kl_function_kind_name(kl_function_kind k)
{
    return k == KL_FUNCTION_KERNEL ? "kernel" : k == KL_FUNCTION_DEVICE ? "device" : "host";
}

const char *kl_loop_kind_name(kl_loop_kind k)
{
    static const char *const names[] = {"for", "while", "do", "range_for"};
    return (unsigned)k < 4 ? names[k] : "unknown";
}

const char *kl_use_kind_name(kl_use_kind k)
{
    static const char *const names[KL_USE_KIND_COUNT] = {
        "barrier", "shuffle", "warp_vote", "atomic", "vector_type", "asm", "async_copy",
        "mma", "math_intrinsic", "load_intrinsic", "cooperative_groups", "fence", "call"};
    return (unsigned)k < KL_USE_KIND_COUNT ? names[k] : "unknown";
}

const char *kl_access_mode_name(kl_access_mode k)
{
    static const char *const names[] = {"read", "write", "read_write", "address"};
    return (unsigned)k < 4 ? names[k] : "unknown";
}
