/* Pieces of tensor_core.c's analysis that wgmma.c reads the same way (the fragment forms are
 * one family: wgmma removes to the mma.sync warp tile that tensor-core removes to scalar FMAs). */
#ifndef KL_TENSOR_CORE_H
#define KL_TENSOR_CORE_H

#include "rewrite/rules/rules.h"

/* The text of n with blanks, quotes and `\n` escapes taken out (asm operands compare as one
 * string). New string, NULL when out of memory. */
char *kl_tc_squeeze(const kl_rule_ctx *ctx, TSNode n);
/* The names of fn's parameters (at most max, 64 bytes each); returns how many there are. */
unsigned kl_tc_param_names(const kl_rule_ctx *ctx, TSNode fn, char names[][64], unsigned max);
/* `for (T v = 0; v < B; v++)` (or ++v): v (64 bytes) and B's text. */
bool kl_tc_plain_loop(const kl_rule_ctx *ctx, TSNode loop, char *v, char *bound, size_t bsize);
/* The statements of a block (comments and preprocessor lines skipped), at most max; a single
 * statement that is not a block counts as one. Returns how many there are. */
unsigned kl_tc_body_stmts(TSNode block, TSNode *out, unsigned max);
/* The kernel's lane: a declaration `lane = threadIdx.x % 32` (or `& 31`) at the top of body,
 * never assigned (64 bytes). */
bool kl_tc_find_lane(const kl_rule_ctx *ctx, TSNode body, char *lane);

#endif
