/* The combining step of a shared-memory tree reduction, as tree-addressing and warp-reduce read it
 * (tree_step.c; tree_addressing.c, warp_reduce.c). */
#ifndef KL_RULES_TREE_STEP_H
#define KL_RULES_TREE_STEP_H

#include <stdbool.h>
#include <stddef.h>

#include "rewrite/rules/rules.h"

/* Is `assign` `sh[tid] += sh[tid + s]`, `sh[tid] = sh[tid] + sh[tid + s]` or
 * `sh[tid] = F(sh[tid], sh[tid + s])` (either operand first, `s + tid` too), with tid and s as
 * given (text without blanks)? The array's name into sh and the operation ("+", or F) into op;
 * false when it is not, when a name does not fit, or out of memory. */
bool kl_tree_step(const kl_rule_ctx *ctx, TSNode assign, const char *tid, const char *s, char *sh, size_t shsize, char *op,
                  size_t opsize);

#endif
