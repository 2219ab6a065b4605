/*
 * Parsing CUDA source (tree-sitter with the tree-sitter-cuda grammar).
 */
#ifndef KLINEAGE_SYNTAX_H
#define KLINEAGE_SYNTAX_H

#include <stdbool.h>
#include "klineage/klineage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A parsed CUDA file: its text and its tree. Opaque. */
typedef struct kl_source kl_source;

/* The largest file parsed (bytes). */
#define KL_SOURCE_MAX ((size_t)64 << 20)

/* Parse a file. On KL_OK, *out is owned by the caller (kl_source_free). A file that
 * parses with errors is still returned, flagged partial (kl_source_partial). Fails for a
 * missing file, a directory, a file over KL_SOURCE_MAX or one holding NUL bytes. */
kl_status kl_source_parse_file(const char *path, kl_source **out, kl_error *err);
/* Parse text (copied). `name` is used in messages (a path, or "<stdin>"). */
kl_status kl_source_parse_text(const char *name, const char *text, size_t len, kl_source **out, kl_error *err);
void kl_source_free(kl_source *src);

/* The name given at parse time, and the text (NUL-terminated; *len may be NULL). Owned by src. */
const char *kl_source_name(const kl_source *src);
const char *kl_source_text(const kl_source *src, size_t *len);

/* A place in the text: byte range [start, end) and the 1-based line:column of start. */
typedef struct kl_span {
    uint32_t start, end;
    uint32_t line, column;
} kl_span;

/* Parse errors: a partial tree has ERROR or MISSING nodes. */
bool kl_source_partial(const kl_source *src);
unsigned kl_source_error_count(const kl_source *src);
/* The i-th error's place and a one-line description ("unexpected '}'", "missing ';'")
 * written into msg. Returns false if i is out of range. */
bool kl_source_error(const kl_source *src, unsigned i, kl_span *where, char *msg, size_t msg_size);

#ifdef __cplusplus
}
#endif
#endif
