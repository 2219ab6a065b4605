/*
 * The canonical form of a kernel file (private to the stages above syntax; docs/syntax.md,
 * "The canonical form"): the same program written the one way the analyses read, so that an
 * index written through a macro, a per-batch pointer, a template size or a pointer bumped in
 * a loop is seen as the plain subscript it is. Each step is exact (the program computes what
 * it computed), keeps every line where it was (site ids stay the same), and is skipped where
 * it cannot be done exactly:
 *
 *  1. function-like macros used in function bodies are expanded as the preprocessor does
 *     (arguments expanded first, the result rescanned; macros with # or ##, variadic ones and
 *     ones defined more than once stay);
 *  2. the template parameters of a __global__ template are bound to the arguments of its
 *     launches in the file when every launch passes the same ones (`gemm<64, float>`);
 *  3. pointer locals and bumped pointers are propagated into their subscripts: a local
 *     `T *q = p + e;` (or `&p[e]`, or `p`) of a pointer parameter p, never reassigned and used
 *     only as `q[i]` / `*q`, reads as `p[e + i]`; a parameter bumped at the top of the body
 *     (`A += blockIdx.y * BM * K;`) has the bump folded into every later use; one bumped once
 *     per iteration of a `for (v = S; v < B; v += D)` loop by D (`A += BK;`), or by D * E,
 *     reads `A[(v - S) + i]` (`A[(v - S) * E + i]`) inside the loop and is not bumped (only
 *     when it is not used after the loop).
 *
 * The text of each step is parsed back; a step that would add parse errors is dropped.
 *
 * Mapping back: a rewrite computed on the canonical text is a set of byte-range edits.
 * kl_canon_map_edits maps them onto the original text when every edit starts and ends outside
 * the pieces the canonical form changed (or exactly at their ends), and every piece of a
 * coupled change (a bumped pointer: its bump and all its uses) is either wholly replaced by
 * the edits or untouched; then the user's text keeps its macros, names and bumps everywhere
 * the edits do not reach. Otherwise the rewrite can only be given on the canonical text, and
 * the caller must say so.
 */
#ifndef KL_CANON_H
#define KL_CANON_H

#include <stdbool.h>
#include <stdint.h>

#include "syntax/syntax_int.h"

typedef struct kl_canon kl_canon;

/* Build the canonical form of src (borrowed: it must outlive the result). *out is NULL when the
 * canonical text is the original (nothing to change), else the caller's (kl_canon_free).
 * Fails only when memory runs out. */
kl_status kl_canon_build(const kl_source *src, kl_canon **out, kl_error *err);
void kl_canon_free(kl_canon *c);

/* The canonical text, parsed (owned by c; named as the original). */
const kl_source *kl_canon_source(const kl_canon *c);
/* What was changed, one line ("expanded A_AT, B_AT; bound TILE = 16; propagated Ab, A += BK"). */
const char *kl_canon_summary(const kl_canon *c);

/* One edit of a text: [start, end) replaced by text (not owned here). */
typedef struct kl_canon_edit {
    uint32_t start, end;
    const char *text;
} kl_canon_edit;

/* Map n edits of the canonical text onto the original (out[i] gets edit i's range; texts are
 * the same). False when they cannot be mapped (see above), with the reason in why. */
bool kl_canon_map_edits(const kl_canon *c, const kl_canon_edit *edits, unsigned n, kl_canon_edit *out, char *why,
                        size_t why_size);

#endif
