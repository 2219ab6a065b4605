/* vectorize, the cast form (vectorize_cast.c): a kernel's `const float4 *V` parameter (or float2,
 * double2, int2/4, uint2/4) that every launch passes as a cast of another pointer argument of
 * the same launch, `reinterpret_cast<const float4*>(P + O)` with P and O passed too (a
 * 16-byte-aligned body of P, its unaligned head and tail left to scalar code) -> each `V[e]` read
 * as its components from P: `make_float4(P[O + 4 * e], …, P[O + 4 * e + 3])`. Remove only. Used
 * by vectorize.c (find and remove dispatch there). */
#ifndef KL_VECTORIZE_CAST_H
#define KL_VECTORIZE_CAST_H

#include "rewrite/rules/rules.h"

/* Present sites of kernel `name` (function_definition fn): features "form": "cast". */
kl_status kl_vc_find(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_sites *out);
/* Remove at the site (its id names the kernel and the parameter). */
kl_status kl_vc_remove(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err);
/* Is the site one of this form's? */
bool kl_vc_is_site(const kl_site *site);

#endif
