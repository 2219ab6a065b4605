/* A parsed source's memo: what an analysis computes once over the source's tree and reuses
 * (syntax/affine.c: the file's macros, the values of constant names by scope). The memo belongs
 * to the source and is released with it (kl_source_free); the tree never changes after the parse,
 * so nothing in it goes stale. Not for sharing a source between threads. */
#ifndef KL_SYNTAX_MEMO_H
#define KL_SYNTAX_MEMO_H

#include "klineage/syntax.h"

void *kl_source_memo(const kl_source *src);
/* Replaces the memo (releasing the one before with its own function). */
void kl_source_set_memo(const kl_source *src, void *memo, void (*release)(void *memo));

#endif
