/* Private to the stages above syntax: the raw tree, for analyses and rewrites. */
#ifndef KL_SYNTAX_INT_H
#define KL_SYNTAX_INT_H

#include <tree_sitter/api.h>

#include "klineage/syntax.h"

const TSLanguage *tree_sitter_cuda(void);

/* The tree of a parsed source (owned by src). */
const TSTree *kl_source_tree(const kl_source *src);
TSNode kl_source_root(const kl_source *src);

/* The node's text as a new string (free()), and its span. */
char *kl_node_text(const kl_source *src, TSNode node);
kl_span kl_node_span(TSNode node);
/* Compare the node's text with s without allocating. */
bool kl_node_text_is(const kl_source *src, TSNode node, const char *s);

#endif
