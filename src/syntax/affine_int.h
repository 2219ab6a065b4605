/* The index analysis (affine.c, affine_poly.c, affine_eval.c): what its files share, and the
 * file's macro table canon.c reads. Private to src/syntax/: the names are affine__*. affine.c holds
 * the tree helpers, the launches, the building of a kernel's context (loops, locals, accesses) and
 * the public forms; affine_poly.c the context's arena and names, the polynomials, the affine forms
 * built of them and the polynomial view with its questions; affine_eval.c the macros and
 * file-level constants, the evaluator of an index expression (both views in one walk), and the
 * constant evaluator. */
#ifndef KL_SYNTAX_AFFINE_INT_H
#define KL_SYNTAX_AFFINE_INT_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "syntax/affine.h"

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

/* A monomial: coef times interned names (affine.h's kl_poly_mono). */
typedef kl_poly_mono affine__mono;

/* A polynomial: monomials normalised (sorted by their factors, like ones merged, no zeros). */
typedef struct affine__poly {
    const affine__mono *m;
    unsigned n;
} affine__poly;

/* What the evaluator makes of an expression, in two views. The affine view: when ok, constant +
 * Σ coef(var) * var over the index variables (else why, one line); the polynomial view pv
 * (affine.h): the value over every name, or opaque, with what it reads. Everything lives in the
 * arena. */
typedef struct affine__form {
    bool ok;
    const char *why;
    affine__poly cst;
    unsigned nv;
    const char **vars; /* interned, sorted */
    affine__poly *coefs;
    kl_poly pv;
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

/* ---- affine_poly.c: the arena, polynomials, forms, the polynomial view ---- */

/* Zeroed memory of the context's arena; NULL (and ctx->oom set) when memory runs out. */
void *affine__alloc(kl_affine_ctx *ctx, size_t n);
/* The context's one copy of s ("" when memory runs out). */
const char *affine__intern(kl_affine_ctx *ctx, const char *s);
affine__poly affine__poly_int(kl_affine_ctx *ctx, int64_t v);
affine__poly affine__poly_sym(kl_affine_ctx *ctx, const char *sym);
affine__poly affine__poly_add(kl_affine_ctx *ctx, affine__poly a, affine__poly b, int64_t sb);
bool affine__poly_mul(kl_affine_ctx *ctx, affine__poly a, affine__poly b, affine__poly *out);
bool affine__poly_is_int(affine__poly p, int64_t *v);
char *affine__poly_text(affine__poly p);
/* Forms: not affine for a reason (the polynomial view opaque, reading nothing, until the caller
 * sets it); an invariant value, an index variable (both views set). */
affine__form affine__form_bad(const char *why);
affine__form affine__form_badf(kl_affine_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
affine__form affine__form_const(kl_affine_ctx *ctx, affine__poly c);
affine__form affine__form_var(kl_affine_ctx *ctx, const char *var);
/* a + sb*b and a*s in the affine view; the polynomial view of the result is the caller's to set. */
affine__form affine__form_add(kl_affine_ctx *ctx, affine__form a, affine__form b, int64_t sb);
affine__form affine__form_scale(kl_affine_ctx *ctx, affine__form a, affine__poly s);
affine__poly affine__form_coef(affine__form f, const char *var);
/* Polynomial views: opaque reading nothing; opaque reading what a and b read; the polynomial p
 * (reading its factors); one name; a + sb*b; a*b (opaque when a monomial would get more than
 * KL_POLY_MAXF factors). */
kl_poly affine__pv_opaque(void);
kl_poly affine__pv_join(kl_affine_ctx *ctx, kl_poly a, kl_poly b);
kl_poly affine__pv_of(kl_affine_ctx *ctx, affine__poly p);
kl_poly affine__pv_name(kl_affine_ctx *ctx, const char *name);
kl_poly affine__pv_add(kl_affine_ctx *ctx, kl_poly a, kl_poly b, int64_t sb);
kl_poly affine__pv_mul(kl_affine_ctx *ctx, kl_poly a, kl_poly b);

/* ---- affine_eval.c: the evaluator, constants ---- */
const affine__local_var *affine__local_find(const kl_affine_ctx *ctx, const char *name);
bool affine__node_within(TSNode inner, TSNode outer);
int affine__enclosing_loop_with_var(const kl_affine_ctx *ctx, const char *name, TSNode anchor);
TSNode affine__lvalue_variable(TSNode n);
affine__form affine__eval(kl_affine_ctx *ctx, const affine__env *e, const kl_source *s, TSNode n, TSNode anchor, int depth);
TSNode affine__decl_init_of(const kl_source *s, TSNode decl, const char *name);
/* The source's macros, collected once per source (its memo); NULL when out of memory. */
const affine__macro_table *affine__macros_of(const kl_source *src);

#endif
