/*
 * Observables of a site (private to the stages above syntax; docs/skill-card.md, "Observables").
 *
 * What a skill card's conditions are written over, computed on any kernel file:
 *  - launch(), run symbolically at one shape: which kernels it launches (through host helpers,
 *    if / else, switch, template arguments), with what grid and block, and what it passes to them;
 *  - the site (a line of a function): the element type and width of the arrays it touches, how
 *    its global access moves with threadIdx.x and along the loop at the site, the loop's trip
 *    count, whether it accumulates (a reduction) and where its atomics go;
 *  - sizes by role, found through the index analysis and evaluated at the shape: the extent of
 *    the contiguous axis, of the reduced axis, the independent rows of work, the blocks
 *    launched, the elements and bytes the arguments hold.
 *
 * Nothing here knows a task: the caller gives launch()'s arguments at a shape, by position
 * (kl_obs_inputs). Pointers passed to launch() are taken as 256-byte aligned (device
 * allocations are), so `(uintptr_t)p % 16 == 0` holds.
 */
#ifndef KL_OBSERVE_H
#define KL_OBSERVE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "syntax/syntax_int.h"

/* launch()'s parameters at one shape, by position (the task's args, in order). */
typedef struct kl_obs_inputs {
    unsigned n;
    const int64_t *value;        /* a scalar's value; a pointer's element count */
    const bool *pointer;         /* the parameter is a tensor */
    const unsigned *elem_bytes;  /* a tensor's bytes per element */
} kl_obs_inputs;

/* One kernel launch that launch() makes at the shape. */
typedef struct kl_obs_launch {
    char *kernel;                /* the kernel's name, without template arguments (owned) */
    int64_t grid[3], block[3];   /* x, y, z (1 where not given) */
    bool grid_known, block_known;
    unsigned nargs;
    int64_t *arg;                /* each argument's value where it is an integer (owned) */
    bool *arg_known;
    int *arg_origin;             /* the launch() parameter an argument passes on (a pointer), or -1 */
    unsigned ntargs;
    int64_t *targ;               /* template arguments that are integers (owned) */
    bool *targ_known;
    bool certain;                /* every condition on the way to it was decided */
} kl_obs_launch;

typedef struct kl_obs_launches {
    kl_obs_launch *items;
    unsigned count;
    bool complete;               /* every condition on the way was decided */
    char why[200];               /* else the first that was not, and why */
} kl_obs_launches;

/* Run launch() of src at the shape given by in (NULL: every size unknown, every branch taken).
 * A condition that cannot be decided takes both branches, their launches marked uncertain.
 * KL_ERR_NOT_FOUND when the file has no launch(); otherwise fails only when out of memory. */
kl_status kl_obs_run_launch(const kl_source *src, const kl_obs_inputs *in, kl_obs_launches *out, kl_error *err);
void kl_obs_launches_release(kl_obs_launches *l); /* accepts NULL */

/* Whether function fn (a kernel, or a __device__ helper through the kernels that call it) runs
 * in a run of launch(): KL_OBS_RUNS (launched on a decided path), KL_OBS_MAYBE (only on
 * undecided paths, or the file's call graph cannot say), KL_OBS_NOT_RUN. A host function runs. */
typedef enum kl_obs_runs { KL_OBS_RUNS = 0, KL_OBS_MAYBE = 1, KL_OBS_NOT_RUN = 2 } kl_obs_runs;
kl_obs_runs kl_obs_function_runs(const kl_source *src, const kl_obs_launches *run, const char *fn);

/* The observables of the site at `line` of function fn (line 0: the function as a whole) as a
 * new JSON object (json_decref): the static ones always, the sized ones when in is given
 * (docs/skill-card.md, "Observables"). KL_ERR_NOT_FOUND when the file has no function fn. */
kl_status kl_observe_site(const kl_source *src, const char *fn, unsigned line, const kl_obs_inputs *in, json_t **out,
                          kl_error *err);

#endif
