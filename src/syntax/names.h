/* Private to src/syntax: which names are CUDA facilities (names.c). */
#ifndef KL_SYNTAX_NAMES_H
#define KL_SYNTAX_NAMES_H

#include <stdbool.h>
#include <stddef.h>

#include "klineage/syntax.h"

/* Classify a called name (the last component: "sync" of "block.sync", "mma_sync" of
 * "wmma::mma_sync"). `member` is true for a call through '.' or '->'. Returns true and
 * sets *kind when the name is a CUDA facility. Names of the wmma and cooperative-groups
 * namespaces are recognised by their scope elsewhere (kl_scope_kind). */
bool kl_call_kind(const char *name, size_t len, bool member, kl_use_kind *kind);

/* A scope ("wmma", "nvcuda::wmma", "cooperative_groups") naming a facility: MMA or COOP. */
bool kl_scope_kind(const char *scope, size_t len, kl_use_kind *kind);

/* True if name[0..len) is a CUDA vector type: float4, int2, uchar4, double2, half2, __half2,
 * __nv_bfloat162, … (the 2-, 3- and 4-wide ones). */
bool kl_is_vector_type(const char *name, size_t len);

/* True for a vector maker such as "make_float4"; its type ("float4") starts at name + 5. */
bool kl_is_vector_maker(const char *name, size_t len);

/* Classify a PTX instruction mnemonic ("cp.async.ca.shared.global", "mma.sync.aligned…"). */
bool kl_ptx_kind(const char *op, size_t len, kl_use_kind *kind);

#endif
