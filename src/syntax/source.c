/* A parsed CUDA file: text + tree-sitter tree, with its parse errors. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "syntax/memo.h"
#include "syntax/syntax_int.h"
#include "util/util.h"

#define MAX_ERRORS 64

struct kl_source {
    char *name;
    char *text;
    size_t len;
    char *parsed; /* the text as the grammar reads it (blank_for_grammar): the base of an edited parse */
    TSTree *tree;
    unsigned nerrors;
    TSNode errors[MAX_ERRORS];
    unsigned nerrors_total;
    void *memo; /* syntax/memo.h: what analyses computed once over the tree */
    void (*memo_release)(void *memo);
};

const TSTree *kl_source_tree(const kl_source *src) { return src->tree; }
TSNode kl_source_root(const kl_source *src) { return ts_tree_root_node(src->tree); }
const char *kl_source_name(const kl_source *src) { return src->name; }

const char *kl_source_text(const kl_source *src, size_t *len)
{
    if (len) *len = src->len;
    return src->text;
}

kl_span kl_node_span(TSNode node)
{
    TSPoint p = ts_node_start_point(node);
    return (kl_span){ts_node_start_byte(node), ts_node_end_byte(node), p.row + 1, p.column + 1};
}

char *kl_node_text(const kl_source *src, TSNode node)
{
    uint32_t a = ts_node_start_byte(node), b = ts_node_end_byte(node);
    if (b > src->len) b = (uint32_t)src->len;
    if (a > b) a = b;
    return kl_strndup(src->text + a, b - a);
}

bool kl_node_text_is(const kl_source *src, TSNode node, const char *s)
{
    uint32_t a = ts_node_start_byte(node), b = ts_node_end_byte(node);
    size_t n = strlen(s);
    return b - a == n && b <= src->len && memcmp(src->text + a, s, n) == 0;
}

/* Collect ERROR and MISSING nodes, outermost first, in document order. */
static void collect_errors(kl_source *src)
{
    TSTreeCursor cur = ts_tree_cursor_new(ts_tree_root_node(src->tree));
    for (;;) {
        TSNode n = ts_tree_cursor_current_node(&cur);
        bool descend = ts_node_has_error(n);
        if (ts_node_symbol(n) == (TSSymbol)-1 || ts_node_is_missing(n)) { /* ERROR or MISSING */
            if (src->nerrors < MAX_ERRORS) src->errors[src->nerrors++] = n;
            src->nerrors_total++;
            descend = false;
        }
        if (descend && ts_tree_cursor_goto_first_child(&cur)) continue;
        while (!ts_tree_cursor_goto_next_sibling(&cur)) {
            if (!ts_tree_cursor_goto_parent(&cur)) {
                ts_tree_cursor_delete(&cur);
                return;
            }
        }
    }
}

/* ---- what the grammar does not know ------------------------------------------------------
 * tree-sitter-cuda has no rule for a #pragma between a loop header and an unbraced body
 * ("for (…)\n #pragma unroll\n for (…)" loses the outer body), nor for a few CUDA
 * attributes (__align__(16) becomes a declarator) and calling-convention macros (CUPTIAPI),
 * takes only a name as an asm output operand ("=r"(r[0]) is an error), and it reads a comparison of a member,
 * "threadIdx.x < n)", as a template method "x<n" missing its '>'. The tree is therefore
 * built from a copy of the text in which pragmas and those attributes are replaced by
 * spaces, an asm output operand by its first name ("r   "), and such a '<' by '>' (a
 * comparison of the same shape). Every byte keeps its
 * offset, so spans still index the original text; the pragmas are recovered by the model
 * (model.c). */


static void blank(char *buf, size_t a, size_t b)
{
    for (size_t k = a; k < b; k++)
        if (buf[k] != '\n') buf[k] = ' ';
}

/* If a #pragma starts the line at `i` (after blanks), its end (through continuation
 * lines, excluding the final newline); else 0. *hash is where the '#' is. */
size_t kl_pragma_line_end(const char *text, size_t len, size_t i, size_t *hash)
{
    while (i < len && (text[i] == ' ' || text[i] == '\t')) i++;
    if (i >= len || text[i] != '#') return 0;
    size_t h = i++;
    while (i < len && (text[i] == ' ' || text[i] == '\t')) i++;
    if (len - i < 6 || memcmp(text + i, "pragma", 6) != 0) return 0;
    if (i + 6 < len && kl_ident_char((unsigned char)text[i + 6])) return 0;
    size_t e = i + 6;
    while (e < len && text[e] != '\n') {
        if (text[e] == '\\' && (e + 1 < len && (text[e + 1] == '\n' || (text[e + 1] == '\r' && e + 2 < len && text[e + 2] == '\n')))) {
            e += text[e + 1] == '\n' ? 2 : 3;
            continue;
        }
        e++;
    }
    *hash = h;
    return e;
}

static const struct {
    const char *name;
    bool takes_args;
} unknown_attrs[] = {
    {"__align__", true}, {"__cluster_dims__", true}, {"__maxnreg__", true}, {"__grid_constant__", false},
    /* calling conventions of the CUDA headers, macros the grammar cannot know */
    {"CUDARTAPI", false}, {"CUDAAPI", false}, {"CUPTIAPI", false}, {"CUDART_CB", false}, {"CUDA_CB", false},
    {"NVRTC_API", false}, {"CUBLASAPI", false}, {"__stdcall", false}, {"__cdecl", false},
};

/* Skip a string or character literal starting at buf[i] (a quote); returns the index after it. */
static size_t skip_literal(const char *buf, size_t len, size_t i)
{
    char q = buf[i++];
    while (i < len && buf[i] != q && buf[i] != '\n') i += (buf[i] == '\\' && i + 1 < len) ? 2 : 1;
    return i < len ? i + 1 : len;
}

/* In "asm(… : "=r"(r[0]), "+f"(acc.x) : …)" the grammar takes only a name for an output
 * operand: keep the operand's first name, blank the rest ("r[0]" -> "r   "). */
static void fix_asm_outputs(char *buf, size_t len, size_t open)
{
    int depth = 0, section = 0;
    for (size_t i = open; i < len; i++) {
        char c = buf[i];
        if (c == '"' || c == '\'') {
            i = skip_literal(buf, len, i) - 1;
            continue;
        }
        if (c == '(') {
            depth++;
            if (depth == 2 && section == 1) {
                /* an operand's expression: find its close, keep the first identifier */
                size_t e = i + 1;
                int d = 1;
                for (; e < len && d > 0; e++) {
                    if (buf[e] == '"' || buf[e] == '\'') {
                        e = skip_literal(buf, len, e) - 1;
                        continue;
                    }
                    if (buf[e] == '(') d++;
                    else if (buf[e] == ')') d--;
                    else if (buf[e] == ';' || buf[e] == '{' || buf[e] == '}') return;
                }
                if (d != 0) return;
                size_t close = e - 1, k = i + 1;
                while (k < close && !(kl_ident_char((unsigned char)buf[k]) && !(buf[k] >= '0' && buf[k] <= '9'))) k++;
                size_t name_end = k;
                while (name_end < close && kl_ident_char((unsigned char)buf[name_end])) name_end++;
                if (k < close) {
                    blank(buf, i + 1, k);
                    blank(buf, name_end, close);
                }
                i = close;
                depth--;
            }
        } else if (c == ')') {
            if (--depth == 0) return;
        } else if (c == ':' && depth == 1) {
            if (i + 1 < len && buf[i + 1] == ':') {
                i++;
                continue;
            }
            section++;
        } else if (c == ';' || c == '{' || c == '}') {
            return;
        }
    }
}

static void fix_asm(char *buf, size_t len)
{
    for (size_t i = 0; i + 3 < len; i++) {
        if ((i > 0 && kl_ident_char((unsigned char)buf[i - 1])) || (buf[i] != 'a' && buf[i] != '_')) continue;
        size_t n = 0;
        if (!memcmp(buf + i, "asm", 3)) n = 3;
        else if (len - i >= 7 && !memcmp(buf + i, "__asm__", 7)) n = 7;
        else if (len - i >= 5 && !memcmp(buf + i, "__asm", 5)) n = 5;
        if (!n || (i + n < len && kl_ident_char((unsigned char)buf[i + n]))) continue;
        size_t k = i + n;
        for (;;) { /* blanks and qualifiers */
            while (k < len && (buf[k] == ' ' || buf[k] == '\t' || buf[k] == '\n' || buf[k] == '\r')) k++;
            size_t w = k;
            while (w < len && kl_ident_char((unsigned char)buf[w])) w++;
            if (w == k) break;
            k = w;
        }
        if (k < len && buf[k] == '(') fix_asm_outputs(buf, len, k);
        i += n - 1;
    }
}

/* buf[i] is '<' after "name" of ".name" or "->name": is it a comparison rather than the
 * start of template arguments? Template arguments close with a '>' followed by '(' or "::"
 * or '{' before any ';', brace, unbalanced ')' / ']', "&&", "||" or '?'. */
static bool member_less_is_comparison(const char *buf, size_t len, size_t i)
{
    int paren = 0, angle = 0;
    for (size_t k = i; k < len && k < i + 512; k++) {
        char c = buf[k];
        if (c == ';' || c == '{' || c == '}' || c == '?') return true;
        if ((c == '&' || c == '|') && k + 1 < len && buf[k + 1] == c) return true;
        if (c == '(' || c == '[') paren++;
        else if (c == ')' || c == ']') {
            if (--paren < 0) return true;
        } else if (paren == 0 && c == '<') {
            angle++;
        } else if (paren == 0 && c == '>') {
            if (--angle == 0) {
                size_t j = k + 1;
                while (j < len && (buf[j] == ' ' || buf[j] == '\t' || buf[j] == '\n' || buf[j] == '\r')) j++;
                return !(j < len && (buf[j] == '(' || buf[j] == '{' || (buf[j] == ':' && j + 1 < len && buf[j + 1] == ':')));
            }
        }
    }
    return true;
}

static void fix_member_comparisons(char *buf, size_t len)
{
    for (size_t i = 1; i + 1 < len; i++) {
        if (buf[i] != '<' || buf[i + 1] == '<' || buf[i + 1] == '=' || buf[i - 1] == '<') continue;
        /* back over blanks and a name */
        size_t k = i;
        while (k > 0 && (buf[k - 1] == ' ' || buf[k - 1] == '\t')) k--;
        size_t name_end = k;
        while (k > 0 && kl_ident_char((unsigned char)buf[k - 1])) k--;
        if (k == name_end || (buf[k] >= '0' && buf[k] <= '9')) continue;
        /* ... preceded by '.' or "->" */
        size_t d = k;
        while (d > 0 && (buf[d - 1] == ' ' || buf[d - 1] == '\t')) d--;
        bool member = (d >= 1 && buf[d - 1] == '.' && !(d >= 2 && buf[d - 2] >= '0' && buf[d - 2] <= '9')) ||
                      (d >= 2 && buf[d - 1] == '>' && buf[d - 2] == '-');
        if (!member) continue;
        /* "obj.template f<T>" is a template for sure */
        size_t t = d - (buf[d - 1] == '.' ? 1 : 2);
        while (t > 0 && (buf[t - 1] == ' ' || buf[t - 1] == '\t')) t--;
        if (t >= 8 && memcmp(buf + t - 8, "template", 8) == 0) continue;
        if (name_end - k == 8 && memcmp(buf + k, "template", 8) == 0) continue;
        if (member_less_is_comparison(buf, len, i)) buf[i] = '>';
    }
}

static void blank_for_grammar(char *buf, size_t len)
{
    size_t hash;
    for (size_t i = 0; i < len;) {
        size_t e = kl_pragma_line_end(buf, len, i, &hash);
        if (e) blank(buf, hash, e);
        const char *nl = memchr(buf + i, '\n', len - i);
        if (!nl) break;
        i = (size_t)(nl - buf) + 1;
    }
    for (size_t i = 0; i < len; i++) {
        if (!kl_ident_char((unsigned char)buf[i]) || (i > 0 && kl_ident_char((unsigned char)buf[i - 1]))) continue;
        if (buf[i] != '_' && buf[i] != 'C' && buf[i] != 'N') continue; /* the first letters of unknown_attrs */
        for (size_t a = 0; a < sizeof unknown_attrs / sizeof unknown_attrs[0]; a++) {
            size_t n = strlen(unknown_attrs[a].name);
            if (len - i < n || memcmp(buf + i, unknown_attrs[a].name, n) != 0) continue;
            if (i + n < len && kl_ident_char((unsigned char)buf[i + n])) continue;
            size_t end = i + n;
            if (unknown_attrs[a].takes_args) {
                size_t k = end;
                while (k < len && (buf[k] == ' ' || buf[k] == '\t')) k++;
                if (k >= len || buf[k] != '(') continue;
                /* balanced parentheses on a short stretch without ';' or braces */
                int depth = 0;
                size_t limit = k + 256 < len ? k + 256 : len;
                for (; k < limit; k++) {
                    char c = buf[k];
                    if (c == ';' || c == '{' || c == '}') break;
                    if (c == '(') depth++;
                    if (c == ')' && --depth == 0) break;
                }
                if (k >= limit || buf[k] != ')') continue;
                end = k + 1;
            }
            blank(buf, i, end);
            i = end - 1;
            break;
        }
    }
    fix_asm(buf, len);
    fix_member_comparisons(buf, len);
}

/* ---- limits (syntax.h) ---------------------------------------------------------------------
 * One pass over the text before it reaches the parser: tokens, bracket nesting and #if nesting,
 * each counted generously (an operator character is a token; a bracket counts whether it is
 * ever closed or not; a bracket in a raw string or in both arms of an #if counts as written),
 * so that what the parser sees stays inside what the runtime handles. */

static kl_status too_large(kl_error *err, const char *name, const char *text, size_t len, size_t at,
                           const char *what, unsigned limit, const char *unit)
{
    unsigned line, col;
    kl_text_position(text, len, at, &line, &col);
    return kl_error_set(err, KL_ERR_TOO_LARGE,
                        "%s:%u:%u: %s more than %u%s: klineage reads no further (docs/syntax.md, \"Limits\")", name,
                        line, col, what, limit, unit);
}

static kl_status check_limits(const char *name, const char *text, size_t len, kl_error *err)
{
    unsigned tokens = 0, brackets = 0, conds = 0;
    bool line_start = true;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\n') {
            line_start = true;
            i++;
            continue;
        }
        bool splice = c == '\\' && i + 1 < len && text[i + 1] == '\n';
        if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v' || splice) {
            i += splice ? 2 : 1;
            continue;
        }
        if (++tokens > KL_SOURCE_MAX_TOKENS)
            return too_large(err, name, text, len, i, "the file holds", KL_SOURCE_MAX_TOKENS, " tokens");
        if (c == '#' && line_start) {
            size_t k = i + 1;
            while (k < len && (text[k] == ' ' || text[k] == '\t')) k++;
            size_t w = k;
            while (w < len && kl_ident_char((unsigned char)text[w])) w++;
            size_t n = w - k;
            if ((n == 2 && !memcmp(text + k, "if", 2)) || (n == 5 && !memcmp(text + k, "ifdef", 5)) ||
                (n == 6 && !memcmp(text + k, "ifndef", 6))) {
                if (++conds > KL_SOURCE_MAX_CONDITIONALS)
                    return too_large(err, name, text, len, i, "#if/#ifdef/#ifndef nested", KL_SOURCE_MAX_CONDITIONALS,
                                     " deep");
            } else if (n == 5 && !memcmp(text + k, "endif", 5) && conds > 0) {
                conds--;
            }
            line_start = false;
            i++;
            continue;
        }
        line_start = false;
        if (c == '/' && i + 1 < len && (text[i + 1] == '/' || text[i + 1] == '*')) {
            if (text[i + 1] == '/') {
                const char *nl = memchr(text + i, '\n', len - i);
                i = nl ? (size_t)(nl - text) : len;
            } else {
                size_t k = i + 2;
                while (k + 1 < len && !(text[k] == '*' && text[k + 1] == '/')) k++;
                i = k + 1 < len ? k + 2 : len;
            }
            continue;
        }
        if (c == '"' || c == '\'') {
            i = skip_literal(text, len, i);
            continue;
        }
        if (kl_ident_char(c)) {
            while (i < len && kl_ident_char((unsigned char)text[i])) i++;
            continue;
        }
        if (c == '(' || c == '[' || c == '{') {
            if (++brackets > KL_SOURCE_MAX_BRACKETS)
                return too_large(err, name, text, len, i, "brackets nested", KL_SOURCE_MAX_BRACKETS, " deep");
        } else if ((c == ')' || c == ']' || c == '}') && brackets > 0) {
            brackets--;
        }
        i++;
    }
    return KL_OK;
}

/* After parsing: is any node deeper than KL_SOURCE_MAX_DEPTH? *where is the first such. */
static bool tree_too_deep(const TSTree *tree, TSPoint *where)
{
    TSTreeCursor cur = ts_tree_cursor_new(ts_tree_root_node(tree));
    unsigned depth = 0;
    bool deep = false;
    for (;;) {
        if (ts_tree_cursor_goto_first_child(&cur)) {
            if (++depth > KL_SOURCE_MAX_DEPTH) {
                *where = ts_node_start_point(ts_tree_cursor_current_node(&cur));
                deep = true;
                break;
            }
            continue;
        }
        while (!ts_tree_cursor_goto_next_sibling(&cur)) {
            if (!ts_tree_cursor_goto_parent(&cur)) goto done;
            depth--;
        }
    }
done:
    ts_tree_cursor_delete(&cur);
    return deep;
}

/* One parser per thread, kept: a parser's stacks and its pool of tree nodes are reused from one
 * parse to the next (the catalog parses every candidate it writes). Deleted when the thread ends. */
static pthread_key_t parser_key;
static pthread_once_t parser_once = PTHREAD_ONCE_INIT;
static bool parser_key_ok;

static void parser_delete(void *p) { ts_parser_delete(p); }
static void parser_key_make(void) { parser_key_ok = pthread_key_create(&parser_key, parser_delete) == 0; }

/* This thread's parser, set to the CUDA grammar. */
static kl_status thread_parser(TSParser **out, kl_error *err)
{
    pthread_once(&parser_once, parser_key_make);
    *out = parser_key_ok ? pthread_getspecific(parser_key) : NULL;
    if (*out) return KL_OK;
    TSParser *parser = ts_parser_new();
    if (!parser) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    if (!ts_parser_set_language(parser, tree_sitter_cuda())) {
        ts_parser_delete(parser);
        return kl_error_set(err, KL_ERR_UNSUPPORTED, "the CUDA grammar's ABI does not match the tree-sitter runtime");
    }
    if (!parser_key_ok || pthread_setspecific(parser_key, parser) != 0) {
        ts_parser_delete(parser);
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory (a thread's parser could not be kept)");
    }
    *out = parser;
    return KL_OK;
}

/* The row and byte column of offset `to` in text, counted on from p, the point of offset `from`. */
static TSPoint point_from(const char *text, size_t from, TSPoint p, size_t to)
{
    for (size_t i = from; i < to; i++) {
        if (text[i] == '\n') {
            p.row++;
            p.column = 0;
        } else {
            p.column++;
        }
    }
    return p;
}

/* base's tree, copied and told where its text became `parsed` (one edit: what lies between the
 * two texts' common beginning and common end), for an incremental parse; NULL when base is. */
static TSTree *edited_tree(const kl_source *base, const char *parsed, size_t len)
{
    if (!base || !base->tree) return NULL;
    const char *was = base->parsed;
    size_t pre = 0, max = base->len < len ? base->len : len;
    while (pre < max && was[pre] == parsed[pre]) pre++;
    size_t suf = 0;
    while (suf < max - pre && was[base->len - 1 - suf] == parsed[len - 1 - suf]) suf++;
    TSPoint start = point_from(was, 0, (TSPoint){0, 0}, pre);
    TSInputEdit e = {
        .start_byte = (uint32_t)pre,
        .old_end_byte = (uint32_t)(base->len - suf),
        .new_end_byte = (uint32_t)(len - suf),
        .start_point = start,
        .old_end_point = point_from(was, pre, start, base->len - suf),
        .new_end_point = point_from(parsed, pre, start, len - suf),
    };
    TSTree *old = ts_tree_copy(base->tree);
    if (old) ts_tree_edit(old, &e);
    return old;
}

/* Parse text; with a base, incrementally from base's tree (the same tree a fresh parse gives,
 * made from the parts of base's that the change left alone). */
static kl_status parse_text(const char *name, const char *text, size_t len, const kl_source *base, kl_source **out,
                            kl_error *err)
{
    *out = NULL;
    if (len > KL_SOURCE_MAX)
        return kl_error_set(err, KL_ERR_TOO_LARGE, "%s: %zu bytes, more than the limit of %zu", name, len,
                            (size_t)KL_SOURCE_MAX);
    const char *nul = len ? memchr(text, '\0', len) : NULL;
    if (nul) {
        unsigned l, c;
        kl_text_position(text, len, (size_t)(nul - text), &l, &c);
        return kl_error_set(err, KL_ERR_PARSE, "%s:%u:%u: a NUL byte: this is not a text file", name, l, c);
    }
    kl_status lim = check_limits(name, text, len, err);
    if (lim != KL_OK) return lim;
    kl_source *src = calloc(1, sizeof *src);
    if (!src) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    src->name = kl_strdup(name);
    src->text = kl_strndup(len ? text : "", len);
    src->len = len;
    src->parsed = kl_strndup(len ? text : "", len);
    if (!src->name || !src->text || !src->parsed) {
        kl_source_free(src);
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    blank_for_grammar(src->parsed, len);
    TSParser *parser = NULL;
    kl_status ps = thread_parser(&parser, err);
    if (ps != KL_OK) {
        kl_source_free(src);
        return ps;
    }
    /* Parsing is linear, but bound it anyway: pathological input must not hang a walk.
     * A minute, plus half a minute per MiB (a sanitizer build on a busy machine is slow). */
    uint64_t limit_s = 60 + 30 * (uint64_t)(len >> 20);
    ts_parser_set_timeout_micros(parser, limit_s * 1000u * 1000u);
    TSTree *old = edited_tree(base, src->parsed, len);
    src->tree = ts_parser_parse_string(parser, old, src->parsed, (uint32_t)len);
    if (old) ts_tree_delete(old);
    if (!src->tree) {
        ts_parser_reset(parser); /* the next parse starts afresh, not where this one stopped */
        kl_source_free(src);
        return kl_error_set(err, KL_ERR_TIMEOUT, "%s: parsing took longer than %llu s", name,
                            (unsigned long long)limit_s);
    }
    TSPoint deep;
    if (tree_too_deep(src->tree, &deep)) {
        kl_source_free(src);
        return kl_error_set(err, KL_ERR_TOO_LARGE,
                            "%s:%u:%u: the syntax tree nests more than %u levels deep here (an expression or "
                            "statements nested that far): klineage reads no further (docs/syntax.md, \"Limits\")",
                            name, deep.row + 1, deep.column + 1, KL_SOURCE_MAX_DEPTH);
    }
    collect_errors(src);
    *out = src;
    return KL_OK;
}

kl_status kl_source_parse_text(const char *name, const char *text, size_t len, kl_source **out, kl_error *err)
{
    return parse_text(name, text, len, NULL, out, err);
}

kl_status kl_source_parse_edited(const kl_source *base, const char *text, size_t len, kl_source **out, kl_error *err)
{
    return parse_text(base->name, text, len, base, out, err);
}

kl_status kl_source_parse_file(const char *path, kl_source **out, kl_error *err)
{
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    kl_status st = kl_file_read(path, KL_SOURCE_MAX, &text, &len, err);
    if (st != KL_OK) return st;
    st = kl_source_parse_text(path, text, len, out, err);
    free(text);
    return st;
}

void *kl_source_memo(const kl_source *src) { return src->memo; }

void kl_source_set_memo(const kl_source *src, void *memo, void (*release)(void *memo))
{
    /* the memo is not part of the source's value: what is derived from the tree, kept */
    kl_source *s = (kl_source *)src;
    if (s->memo && s->memo_release) s->memo_release(s->memo);
    s->memo = memo;
    s->memo_release = release;
}

void kl_source_free(kl_source *src)
{
    if (!src) return;
    if (src->memo && src->memo_release) src->memo_release(src->memo);
    if (src->tree) ts_tree_delete(src->tree);
    free(src->name);
    free(src->text);
    free(src->parsed);
    free(src);
}

bool kl_source_partial(const kl_source *src) { return src->nerrors_total > 0; }
unsigned kl_source_error_count(const kl_source *src) { return src->nerrors_total; }

char *kl_source_slice(const kl_source *src, kl_span span)
{
    size_t a = span.start, b = span.end;
    if (b > src->len) b = src->len;
    if (a > b) a = b;
    return kl_strndup(src->text + a, b - a);
}

/* Length of a valid UTF-8 sequence at s (at most n bytes), 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    size_t need;
    uint32_t cp;
    if (s[0] < 0x80) return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) need = 2, cp = s[0] & 0x1f;
    else if (s[0] >= 0xe0 && s[0] <= 0xef) need = 3, cp = s[0] & 0x0f;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4) need = 4, cp = s[0] & 0x07;
    else return 0;
    if (n < need) return 0;
    for (size_t k = 1; k < need; k++) {
        if ((s[k] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[k] & 0x3f);
    }
    if ((need == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (need == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return need;
}

size_t kl_utf8_valid_prefix(const char *s, size_t n)
{
    size_t k = 0;
    while (k < n) {
        size_t q = utf8_seq((const unsigned char *)s + k, n - k);
        if (!q) break;
        k += q;
    }
    return k;
}

bool kl_source_error(const kl_source *src, unsigned i, kl_span *where, char *msg, size_t msg_size)
{
    if (i >= src->nerrors) return false;
    TSNode n = src->errors[i];
    *where = kl_node_span(n);
    if (ts_node_is_missing(n)) {
        const char *t = ts_node_type(n);
        if (ts_node_is_named(n)) kl_snprintf(msg, msg_size, "missing %s", t);
        else kl_snprintf(msg, msg_size, "missing '%s'", t);
        return true;
    }
    uint32_t a = where->start, b = where->end;
    if (b > src->len) b = (uint32_t)src->len;
    if (a > b) a = b;
    /* A comment opened and never closed: the grammar sees a stray '/'. */
    if (b - a >= 1 && a + 1 < src->len && src->text[a] == '/' && src->text[a + 1] == '*' &&
        !strstr(src->text + a + 2, "*/")) {
        kl_snprintf(msg, msg_size, "unterminated comment: '/*' without a closing '*/'");
        return true;
    }
    /* Show the offending text, one line, at most 40 bytes, never a broken UTF-8 sequence. */
    size_t shown = 0, k = a;
    char snippet[48];
    while (k < b && shown < 40) {
        unsigned char ch = (unsigned char)src->text[k];
        if (ch == '\n' || ch == '\r') break;
        size_t q = utf8_seq((const unsigned char *)src->text + k, b - k);
        if (q > 1) {
            if (shown + q > 40) break;
            memcpy(snippet + shown, src->text + k, q);
            shown += q;
            k += q;
            continue;
        }
        snippet[shown++] = (q == 0 || ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
        k++;
    }
    snippet[shown] = '\0';
    if (a == b) kl_snprintf(msg, msg_size, "unexpected end of input");
    else kl_snprintf(msg, msg_size, "unexpected '%s%s'", snippet, k < b ? "…" : "");
    return true;
}

bool kl_source_node_at(const kl_source *src, kl_span span, TSNode *out)
{
    TSNode n = ts_node_named_descendant_for_byte_range(ts_tree_root_node(src->tree), span.start, span.end);
    if (ts_node_is_null(n) || ts_node_start_byte(n) != span.start || ts_node_end_byte(n) != span.end) return false;
    /* climb while the parent covers the same range: the outermost of equal nodes */
    for (;;) {
        TSNode p = ts_node_parent(n);
        if (ts_node_is_null(p) || ts_node_start_byte(p) != span.start || ts_node_end_byte(p) != span.end) break;
        n = p;
    }
    *out = n;
    return true;
}
