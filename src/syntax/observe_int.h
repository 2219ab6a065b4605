/* Observables of a site (observe.c, observe_launch.c): what the two files share. Private to
 * src/syntax/observe*.c: the names are observe__*. observe_launch.c interprets launch() at a
 * shape (values, bindings, the evaluator and the statements it follows); observe.c reads a site
 * with it (accesses, sizes by role, statements, the site's record). */
#ifndef KL_SYNTAX_OBSERVE_INT_H
#define KL_SYNTAX_OBSERVE_INT_H
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "syntax/observe.h"

#define MAX_DEPTH 8
#define MAX_STEPS 20000

static inline bool observe__type_is(TSNode n, const char *t) { return !ts_node_is_null(n) && !strcmp(ts_node_type(n), t); }

/* An integer, or a dim3 (nd 3), or a pointer passed down from launch() (origin >= 0). */
typedef struct observe__val {
    bool known;
    int64_t v[3];
    unsigned nd;
    int origin;
} observe__val;

static inline observe__val observe__unknown_val(void) { return (observe__val){false, {0, 1, 1}, 1, -1}; }
static inline observe__val observe__int_val(int64_t x) { return (observe__val){true, {x, 1, 1}, 1, -1}; }

typedef struct observe__binding {
    char *name;
    observe__val v;
} observe__binding;

typedef struct observe__interp {
    const kl_source *src;
    const kl_obs_inputs *in;
    kl_obs_launches *out;
    observe__binding *b;
    unsigned n, cap, base; /* bindings; the current frame starts at base */
    TSNode fn;             /* the function being run (the scope of constants) */
    bool uncertain;        /* on a path below an undecided condition */
    unsigned depth, steps;
    bool oom;
    observe__val ret;               /* a return statement's value */
    const kl_obs_launch *launch; /* evaluating inside a kernel: its launch (blockDim, gridDim) */
    bool kernel_side;      /* evaluating inside a kernel: no host calls are followed */
    bool explore_all;      /* take every branch (each launch uncertain), sizes still known */
} observe__interp;

/* ---- observe_launch.c ---- */

bool observe__bind(observe__interp *ip, const char *name, observe__val v);
observe__binding *observe__lookup(observe__interp *ip, const char *name);
void observe__truncate_to(observe__interp *ip, unsigned n);
int observe__dim_of(const char *field);
observe__val observe__eval(observe__interp *ip, TSNode n);
unsigned observe__param_names(observe__interp *ip, TSNode def, char **names, unsigned max);
unsigned observe__template_names(observe__interp *ip, TSNode def, char **names, unsigned max);
kl_status observe__run_launch(const kl_source *src, const kl_obs_inputs *in, bool explore_all, kl_obs_launches *out,
                            kl_error *err);

#endif
