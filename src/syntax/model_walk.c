/* The model of a CUDA file, its second half (model_int.h): the walk over the tree (a cursor and
 * an explicit stack of frames), the #pragma lines, the cross references, finishing and the public
 * accessors. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "syntax/model_int.h"
#include "syntax/names.h"
#include "syntax/syntax_int.h"
#include "util/util.h"

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

/* ---- the walk -------------------------------------------------------------------------------- */

static bool is_conditional(uint8_t k)
{
    return k == NK_PREPROC_IF || k == NK_PREPROC_IFDEF || k == NK_PREPROC_ELIF || k == NK_PREPROC_ELIFDEF ||
           k == NK_PREPROC_ELSE;
}

static void on_conditional(model__builder *b, model__frame *fr)
{
    const char *cond = NULL;
    if (fr->kind == NK_PREPROC_IF || fr->kind == NK_PREPROC_ELIF) {
        TSNode c = ts_node_child_by_field_id(fr->node, b->f.condition);
        if (!ts_node_is_null(c)) cond = model__collapsed(b, ts_node_start_byte(c), ts_node_end_byte(c), 0, 0);
    } else if (fr->kind == NK_PREPROC_IFDEF || fr->kind == NK_PREPROC_ELIFDEF) {
        TSNode nm = ts_node_child_by_field_id(fr->node, b->f.name);
        bool neg = ts_node_child_count(fr->node) && strstr(ts_node_type(ts_node_child(fr->node, 0)), "ndef");
        if (!ts_node_is_null(nm)) {
            kl_strbuf sb = KL_STRBUF_INIT;
            kl_strbuf_addf(&sb, "%sdefined(%s)", neg ? "!" : "", model__node_str(b, nm));
            cond = sb.failed ? "" : model__str(b, kl_strbuf_str(&sb));
            kl_strbuf_release(&sb);
        }
    }
    if (fr->kind == NK_PREPROC_ELSE) {
        fr->then_guard = fr->guard;
        fr->else_guard = fr->guard;
        return;
    }
    if (!cond) cond = "?";
    fr->then_guard = model__join_guard(b, fr->guard, cond);
    fr->else_guard = model__join_guard(b, fr->guard, model__negated(b, cond));
}

/* Enter the node under the cursor: a new frame from its parent's, then what the node records. */
static void enter(model__builder *b, TSTreeCursor *cur)
{
    if (!model__grow((void **)&b->stack, &b->cap_stack, b->nstack + 1, sizeof *b->stack)) {
        b->m->failed = true;
        return;
    }
    model__frame *fr = &b->stack[b->nstack++];
    TSNode n = ts_tree_cursor_current_node(cur);
    memset(fr, 0, sizeof *fr);
    fr->node = n;
    fr->kind = model__kind_of(b, n);
    fr->field = ts_tree_cursor_current_field_id(cur);
    const model__frame *p = b->nstack > 1 ? &b->stack[b->nstack - 2] : NULL;
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
    case NK_FUNCTION_DEFINITION: model__on_function(b, fr); break;
    case NK_FOR: case NK_WHILE: case NK_DO: case NK_RANGE_FOR: model__on_loop(b, fr); break;
    case NK_SUBSCRIPT: model__on_subscript(b, fr); break;
    case NK_CALL: model__on_call(b, fr); break;
    case NK_DECLARATION: model__on_declaration(b, fr); break;
    case NK_TYPE_IDENTIFIER: model__on_type_identifier(b, fr); break;
    case NK_QUALIFIED_IDENTIFIER: model__on_qualified(b, fr); break;
    case NK_FIELD_EXPRESSION: model__on_field_expression(b, fr); break;
    case NK_ASM: model__on_asm(b, fr); break;
    case NK_NAMESPACE_ALIAS: model__on_alias(b, fr); break;
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

static void walk(model__builder *b, TSNode root)
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

static void find_pragmas(model__builder *b)
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
                pg->text.text = model__str_n(b, b->text + hash, end - hash);
                pg->text.span = (kl_span){(uint32_t)hash, (uint32_t)end, line, (uint32_t)(hash - i) + 1};
                /* name and argument: the words after "pragma" (kl_pragma_line_end found it) */
                const char *s = b->text + hash + 1, *stop = b->text + end;
                while (s < stop && (*s == ' ' || *s == '\t')) s++;
                s = s + 6 <= stop ? s + 6 : stop;
                while (s < stop && (*s == ' ' || *s == '\t')) s++;
                const char *w = s;
                while (w < stop && *w != ' ' && *w != '\t' && *w != '(' && *w != '\\') w++;
                pg->name = model__str_n(b, s, (size_t)(w - s));
                pg->arg = NULL;
                const char *rest = model__collapsed(b, (uint32_t)(w - b->text), (uint32_t)end, 0, 0);
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

static void finish(model__builder *b)
{
    kl_model *m = b->m;
    for (unsigned i = 0; i < m->n_functions; i++) {
        kl_function *f = &m->functions[i];
        model__firsts fs = m->fn_firsts[i];
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

static bool init_builder(model__builder *b, kl_model *m)
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
    model__builder b;
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
    model__arena_release(&m->strings);
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
