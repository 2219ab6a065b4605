/* The index analysis (affine.c, affine_eval.c): what its two files share, and the file's macro
 * table canon.c reads. Private to src/syntax/: the names are affine__*. affine.c holds the tree helpers, the launches,
 * the building of a kernel's context (loops, locals, accesses) and the public forms; affine_eval.c
 * the macros and file-level constants, the polynomials over invariant symbols and the affine forms
 * built of them, the evaluator of an index expression, and the constant evaluator. */
#ifndef KL_SYNTAX_AFFINE_INT_H
#define KL_SYNTAX_AFFINE_INT_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "syntax/affine.h"

#define AFFINE_MAXF 6     /* factors in a monomial */
#define AFFINE_MAXDEPTH 24

static inline bool affine__type_is(TSNode n, const char *t) { return !ts_node_is_null(n) && !strcmp(ts_node_type(n), t); }
static inline unsigned affine__line_of(TSNode n) { return ts_node_start_point(n).row + 1; }

typedef struct affine__macro_def {
    char *name;
    bool function_like;
    char **params;
    unsigned nparams;
    char *body;    /* the replacement text */
    unsigned defs; /* how many #defines of this name */
} affine__macro_def;

typedef struct affine__macro_table {
    affine__macro_def *items;
    unsigned count;
} affine__macro_table;

typedef struct affine__mono {
    int64_t c;
    unsigned nf;
    const char *f[AFFINE_MAXF]; /* interned symbol texts, sorted */
} affine__mono;

typedef struct affine__poly {
    affine__mono *m;
    unsigned n;
} affine__poly;

/* An internal affine form: constant + Σ coef(var) * var. Everything lives in the arena. */
typedef struct affine__form {
    bool ok;
    const char *why;
    affine__poly cst;
    unsigned nv;
    const char **vars; /* interned, sorted */
    affine__poly *coefs;
} affine__form;

typedef struct affine__arena_block {
    struct affine__arena_block *next;
    size_t used, cap;
    max_align_t data[];
} affine__arena_block;

typedef struct affine__local_var {
    char *name;
    TSNode decl;     /* declaration node */
    TSNode def;      /* the single defining expression (initializer or the right of the one `=`), or null */
    bool is_array, is_shared;
    unsigned ndims;
    int64_t dims[4];
} affine__local_var;

typedef struct affine__name_count {
    char *name;
    unsigned n;
} affine__name_count;

typedef struct affine__mini_src {
    char *key;
    kl_source *src;
    TSNode expr;
    bool ok;
} affine__mini_src;

struct kl_affine_ctx {
    const kl_source *src;
    TSNode fn;
    TSNode body;
    affine__arena_block *arena;
    bool oom;
    const affine__macro_table *macros; /* the source's, from its memo (syntax/memo.h) */
    kl_param_info *params;
    unsigned nparams;
    affine__local_var *locals;
    unsigned nlocals;
    affine__name_count *counts;
    unsigned ncounts;
    kl_ax_loop *loops;
    unsigned nloops;
    affine__form *loop_start;     /* per loop: the start as a form (ok=false if unknown) */
    affine__poly *loop_txc;       /* per loop: d(var)/d(threadIdx.x) at iteration 0 */
    bool *loop_txc_ok;
    kl_ax_access *accesses;
    unsigned naccesses;
    affine__mini_src *minis;
    unsigned nminis;
    const char **interned;
    unsigned ninterned, capinterned;
};

typedef struct affine__binding {
    const char *name;
    affine__form value;
} affine__binding;

typedef struct affine__env {
    const affine__binding *b;
    unsigned nb;
    bool in_helper;   /* inside an inlined __device__ helper: kernel locals are not visible */
} affine__env;

/* ---- affine_eval.c: polynomials, forms, the evaluator, constants ---- */

affine__poly affine__poly_int(kl_affine_ctx *ctx, int64_t v);
affine__poly affine__poly_add(kl_affine_ctx *ctx, affine__poly a, affine__poly b, int64_t sb);
bool affine__poly_mul(kl_affine_ctx *ctx, affine__poly a, affine__poly b, affine__poly *out);
bool affine__poly_is_int(affine__poly p, int64_t *v);
char *affine__poly_text(affine__poly p);
affine__form affine__form_bad(const char *why);
affine__form affine__form_add(kl_affine_ctx *ctx, affine__form a, affine__form b, int64_t sb);
affine__form affine__form_scale(kl_affine_ctx *ctx, affine__form a, affine__poly s);
affine__poly affine__form_coef(affine__form f, const char *var);
const affine__local_var *affine__local_find(const kl_affine_ctx *ctx, const char *name);
bool affine__node_within(TSNode inner, TSNode outer);
int affine__enclosing_loop_with_var(const kl_affine_ctx *ctx, const char *name, TSNode anchor);
TSNode affine__lvalue_variable(TSNode n);
affine__form affine__eval(kl_affine_ctx *ctx, const affine__env *e, const kl_source *s, TSNode n, TSNode anchor, int depth);
TSNode affine__decl_init_of(const kl_source *s, TSNode decl, const char *name);
/* The source's macros, collected once per source (its memo); NULL when out of memory. */
const affine__macro_table *affine__macros_of(const kl_source *src);

#endif
