/* vectorize, the thread-strided form (vectorize_lane.c): the loops a warp or a block runs over one
 * row, `for (T c = lane; c < N; c += 32)` and `for (T c = threadIdx.x; c < N; c += blockDim.x)`,
 * recognised here; vectorize.c analyses their accesses and writes the vector loop
 * `for (T v = lane; v < nv; v += 32)` over W-element vectors (each thread takes W consecutive
 * elements per step) before the original loop, which then starts at `lane + nv * W` and does the
 * rest. vectorize_stride.c reads that result back as a present site (the same layout as its
 * grid-stride form). */
#ifndef KL_VECTORIZE_LANE_H
#define KL_VECTORIZE_LANE_H

#include "rewrite/rules/rules.h"

typedef struct kl_vl_loop {
    TSNode start, stride;   /* the loop variable's first value and its step (nodes of the loop) */
    char group[8];          /* "warp": a lane index stepping by the warp's size; "block": a thread index
                               of the block stepping by the block's size */
} kl_vl_loop;

/* Is loop (a for statement of function_definition fn, over variable var) a thread-strided loop?
 * 0: not this form (L untouched beyond zeroing); 1: the form, its start and step in L, why empty;
 * 2: the step is a thread group's size but the start is not the thread's index in that group (why
 * says so). */
int kl_vl_recognise(const kl_rule_ctx *ctx, TSNode fn, TSNode loop, const char *var, kl_vl_loop *L, char *why,
                    size_t size);

/* Can the body of a thread-strided loop over var take other elements per thread, in another order?
 * Every scalar declared outside the body and assigned in it is a sum, product, min, max or bitwise
 * reduction (`s += e`, `s = fmaxf(s, e)`, `n++` …) whose e reads no such scalar, unconditionally;
 * no barrier or warp collective; the bound and every array and index the accesses use are the same
 * for every pass (not declared or assigned in the body). False with why. */
bool kl_vl_body_ok(const kl_rule_ctx *ctx, TSNode loop, const char *var, char *why, size_t size);

#endif
