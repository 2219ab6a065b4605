/* Private to the stages above syntax: the raw tree, for analyses and rewrites. */
#ifndef KL_SYNTAX_INT_H
#define KL_SYNTAX_INT_H

#include <tree_sitter/api.h>

#include "syntax/ts_total.h" /* the node API made total: a null node answers as an empty one */

#include "klineage/syntax.h"

const TSLanguage *tree_sitter_cuda(void);

/* The tree of a parsed source (owned by src).
 *
 * The tree is built from a copy of the text adjusted, byte for byte, where the grammar
 * falls short: every "#pragma" line, the CUDA attributes it lacks (__align__(…),
 * __cluster_dims__(…), __maxnreg__(…), __grid_constant__) and the headers' calling-convention
 * macros (CUDARTAPI, CUPTIAPI, …) become spaces; an asm output operand keeps only its first
 * name ("=r"(r[0]) is seen as "=r"(r   )); and a '<' comparing a member ("threadIdx.x < n",
 * which the grammar would take for template arguments) is seen as '>'. Offsets and
 * line:column are those of the original text (kl_source_text), so:
 *  - pragmas are NOT nodes of the tree: use kl_model_pragmas;
 *  - read an operator from the text (kl_node_text), never from ts_node_type;
 *  - subscripts inside asm output operands are not in the tree (nor in kl_model_accesses). */
const TSTree *kl_source_tree(const kl_source *src);
TSNode kl_source_root(const kl_source *src);

/* The node's text as a new string (free()), and its span. */
char *kl_node_text(const kl_source *src, TSNode node);
kl_span kl_node_span(TSNode node);
/* Compare the node's text with s without allocating. */
bool kl_node_text_is(const kl_source *src, TSNode node, const char *s);

/* The smallest named node whose byte range is exactly span's [start, end) — every span of
 * the model that is a node's span finds it (a for init without its ';' does not). When
 * several nested nodes share the range, the outermost. False when there is none. */
bool kl_source_node_at(const kl_source *src, kl_span span, TSNode *out);

/* If a "#pragma" line starts at byte i of text (after blanks), the end of the directive
 * (continuation lines included, the final newline not), with *hash set to the '#'; else 0. */
size_t kl_pragma_line_end(const char *text, size_t len, size_t i, size_t *hash);

/* The length of the longest prefix of s[0..n) that is valid UTF-8. */
size_t kl_utf8_valid_prefix(const char *s, size_t n);

/* kl_model_features with caller-provided scratch: seen (one byte per function, zeroed) and
 * stack (one unsigned per function); for computing the features of many functions. */
struct json_t *kl_features_with(const kl_model *model, unsigned function, unsigned char *seen, unsigned *stack);

#endif
