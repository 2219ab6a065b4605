/* A parsed CUDA file: text + tree-sitter tree, with its parse errors. */
#include <stdlib.h>
#include <string.h>

#include "syntax/syntax_int.h"
#include "util/util.h"

#define MAX_ERRORS 64

struct kl_source {
    char *name;
    char *text;
    size_t len;
    TSTree *tree;
    unsigned nerrors;
    TSNode errors[MAX_ERRORS];
    unsigned nerrors_total;
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

kl_status kl_source_parse_text(const char *name, const char *text, size_t len, kl_source **out, kl_error *err)
{
    *out = NULL;
    if (len > KL_SOURCE_MAX)
        return kl_error_set(err, KL_ERR_TOO_LARGE, "%s: %zu bytes, more than the limit of %zu", name, len,
                            (size_t)KL_SOURCE_MAX);
    const char *nul = memchr(text, '\0', len);
    if (nul) {
        unsigned l, c;
        kl_text_position(text, len, (size_t)(nul - text), &l, &c);
        return kl_error_set(err, KL_ERR_PARSE, "%s:%u:%u: a NUL byte: this is not a text file", name, l, c);
    }
    kl_source *src = calloc(1, sizeof *src);
    if (!src) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    src->name = kl_strdup(name);
    src->text = kl_strndup(text, len);
    src->len = len;
    if (!src->name || !src->text) {
        kl_source_free(src);
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    TSParser *parser = ts_parser_new();
    if (!parser || !ts_parser_set_language(parser, tree_sitter_cuda())) {
        ts_parser_delete(parser);
        kl_source_free(src);
        return kl_error_set(err, KL_ERR_UNSUPPORTED, "the CUDA grammar's ABI does not match the tree-sitter runtime");
    }
    /* Parsing is linear, but bound it anyway: pathological input must not hang a walk. */
    ts_parser_set_timeout_micros(parser, 20u * 1000u * 1000u);
    src->tree = ts_parser_parse_string(parser, NULL, src->text, (uint32_t)len);
    ts_parser_delete(parser);
    if (!src->tree) {
        kl_source_free(src);
        return kl_error_set(err, KL_ERR_TIMEOUT, "%s: parsing took longer than 20 s", name);
    }
    collect_errors(src);
    *out = src;
    return KL_OK;
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

void kl_source_free(kl_source *src)
{
    if (!src) return;
    if (src->tree) ts_tree_delete(src->tree);
    free(src->name);
    free(src->text);
    free(src);
}

bool kl_source_partial(const kl_source *src) { return src->nerrors_total > 0; }
unsigned kl_source_error_count(const kl_source *src) { return src->nerrors_total; }

bool kl_source_error(const kl_source *src, unsigned i, kl_span *where, char *msg, size_t msg_size)
{
    if (i >= src->nerrors) return false;
    TSNode n = src->errors[i];
    *where = kl_node_span(n);
    if (ts_node_is_missing(n)) {
        kl_snprintf(msg, msg_size, "missing '%s'", ts_node_type(n));
        return true;
    }
    /* Show the offending text, one line, at most 40 bytes. */
    uint32_t a = where->start, b = where->end;
    size_t shown = 0;
    char snippet[48];
    for (uint32_t k = a; k < b && shown < 40; k++) {
        unsigned char ch = (unsigned char)src->text[k];
        if (ch == '\n') break;
        snippet[shown++] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
    }
    snippet[shown] = '\0';
    kl_snprintf(msg, msg_size, "unexpected '%s%s'", snippet, (b - a > shown) ? "…" : "");
    return true;
}
