/* vectorize, the grid-stride form (vectorize_stride.c): a loop over the whole grid
 * `for (T i = C*blockIdx.x + threadIdx.x; i < N; i += C*gridDim.x) body` whose body reads
 * const arrays at i <-> a loop over W-element vectors of those arrays (float4, uint4, uchar4 …)
 * on the same grid, the body written once per element, then the original loop as the tail
 * from the last whole vector. Used by vectorize.c (find, apply, remove dispatch there). */
#ifndef KL_VECTORIZE_STRIDE_H
#define KL_VECTORIZE_STRIDE_H

#include "rewrite/rules/rules.h"

/* Sites of kernel `name` (function_definition fn, ax its index analysis), both ways: features
 * "form": "grid-stride". */
kl_status kl_vs_find(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, kl_sites *out);
/* Apply (width W) or remove at the site whose span starts at site->span.start. */
kl_status kl_vs_apply(const kl_rule_ctx *ctx, const kl_site *site, int width, kl_edits *out, kl_error *err);
kl_status kl_vs_remove(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err);
/* Is loop the vector loop of this form's present site (the other forms leave it alone)? */
bool kl_vs_present_loop(const kl_rule_ctx *ctx, TSNode loop);
/* Is loop (in function_definition fn) the scalar fallback of a vector path: the remainder loop
 * right after a vector loop on the same array that starts where it stops, or a branch of an if
 * whose other branch is the vector path? Then why says so, naming the path's line (vectorize.c:
 * such a loop is no site, or vectorize would wrap its own fallback again and again). */
bool kl_vec_fallback(const kl_rule_ctx *ctx, TSNode fn, TSNode loop, char *why, size_t size);
/* Is the site one of this form's? */
bool kl_vs_is_site(const kl_site *site);

#endif
