/*
 * Index-expression analysis over the raw tree (private to the stages above syntax): the one index
 * analysis of the project, the rules' transforms included.
 *
 * For one kernel (a __global__ function_definition) this answers:
 *  - is an expression AFFINE in the index variables — threadIdx.{x,y,z}, blockIdx.{x,y,z}
 *    and the induction variables of the loops around it — with coefficients that are
 *    launch-invariant (blockDim.*, gridDim.*, kernel parameters, integer constants,
 *    macros, constexpr values)? If so, what are the coefficients (as text) and the
 *    constant term; if not, why not (one line naming the construct);
 *  - the loops: induction variable, start, bound, step, trip count when compile-time;
 *  - the array accesses: which pointer, read or written, the affine index, which
 *    enclosing loops it varies with (an access invariant along a loop is REUSED along
 *    it), and how it moves across threadIdx.x (stride 1: coalesced);
 *  - the same expression as a POLYNOMIAL over every name, or an opaque value with the names it
 *    reads (kl_affine_poly_of, below): its stride along threadIdx.x where it is not affine, whether
 *    a `%` of it moves with threadIdx.x, whether it is the global thread index.
 *
 * What it sees through:
 *  - local variables assigned exactly once (`int row = blockIdx.y*blockDim.y + threadIdx.y;`,
 *    `size_t i = …`, `const auto k = …`), substituted by their initializer;
 *  - casts to integer types ((size_t)x, static_cast<int>(x)), parentheses, unary +/-,
 *    `<<` by a constant (a multiply), `*` where one side is launch-invariant;
 *  - object-like #defines (`#define N 256`, `#define TILE (BS*2)`) and function-like ones
 *    (`#define IDX(r,c,n) ((r)*(n)+(c))`) in the same file, expanded textually;
 *  - __device__ helpers whose body is one `return <expr>;`, inlined symbolically;
 *  - the tree-sitter-cuda misparse of `threadIdx.x < N)` as a template method with a
 *    missing '>' (kl_ast_less_misparse).
 * What stays opaque (an invariant SYMBOL when it does not depend on an index variable,
 * otherwise "not affine" with the reason): `/` and `%` (not affine; but an invariant
 * quotient such as `n/2` is a symbol), loads from memory, calls to other functions,
 * macros with conditionals, variables assigned more than once outside loop updates.
 *
 * Coefficients are polynomials over invariant symbols, printed as text in a canonical
 * order ("blockDim.y*K", "4", "-1", "2*n"), so two equal forms print equally.
 *
 * Ownership: a kl_affine_ctx owns everything it hands out (loops, accesses, strings in
 * them) until kl_affine_ctx_free. A kl_affine filled by kl_affine_of is the caller's and
 * is released with kl_affine_release. TSNodes point into the kl_source, which must
 * outlive the context.
 */
#ifndef KL_AFFINE_H
#define KL_AFFINE_H

#include <stdbool.h>
#include <stdint.h>

#include "syntax/syntax_int.h"

/* ---- tree helpers (the raw tree-sitter tree) ------------------------------------------ */

/* Every function_definition in the file whose qualifiers include `qualifier`
 * ("__global__", "__device__"), template-wrapped ones included, in document order.
 * Writes at most max nodes to out; returns how many there are in all. */
unsigned kl_ast_functions(const kl_source *src, const char *qualifier, TSNode *out, unsigned max);
/* The function named `name` (any qualifiers; the first definition), or a null node. */
TSNode kl_ast_function_named(const kl_source *src, const char *name);
/* The function_definition's name, parameter_list, body (compound_statement); null
 * nodes / NULL when absent. The name is a new string (free()). */
char *kl_ast_function_name(const kl_source *src, TSNode fn);
/* False for a function whose declarator names nothing (a conversion operator `operator T*()`):
 * kl_ast_function_name then gives NULL for that reason, not for want of memory. */
bool kl_ast_function_has_name(TSNode fn);
TSNode kl_ast_function_params(TSNode fn);
TSNode kl_ast_function_body(TSNode fn);
/* True if the function_definition carries the qualifier token ("__global__", …). */
bool kl_ast_function_has(const kl_source *src, TSNode fn, const char *qualifier);
/* n without the parentheses around it: the expression inside each parenthesized_expression (its
 * first named child that is not a comment), as long as there is one. */
TSNode kl_ast_unparen(TSNode n);
/* The initializer of local `name` of function fn when the function assigns it there only (a
 * declaration with an initializer, no other assignment, ++, -- or address taken); a null node
 * otherwise. */
TSNode kl_ast_local_init(const kl_source *src, TSNode fn, const char *name);
/* The 1-based line where n starts. */
unsigned kl_ast_line(TSNode n);
/* The index of a subscript `a[i]` (the grammar's `indices` list holds one; older grammars name it
 * `index`); a null node when n is not a subscript. */
TSNode kl_ast_subscript_index(TSNode n);
/* The identifier a declarator declares (through pointer/array/init/reference
 * declarators), or a null node. */
TSNode kl_ast_declarator_name(TSNode declarator);
/* The template_declaration wrapping fn, or fn itself: the node a whole-function edit spans. */
TSNode kl_ast_function_outer(TSNode fn);
/* The innermost enclosing __global__/__device__/host function_definition of n, or null. */
TSNode kl_ast_enclosing_function(TSNode n);
/* First named child of the given type, or a null node. */
TSNode kl_ast_child_of_type(TSNode n, const char *type);
/* Visit n and every descendant in document order; the callback returns false to skip
 * the descendants of the node it was given. */
typedef bool (*kl_ast_visit_fn)(TSNode n, void *user);
void kl_ast_walk(TSNode n, kl_ast_visit_fn fn, void *user);
/* `a.x < b)` misparsed as a field_expression whose field is a template_method `x<b>` with
 * a missing '>': true for such a node, with the comparison's pieces: *field_text is the
 * whole left side ("threadIdx.x", new string, free()) and *rhs the right operand. */
bool kl_ast_less_misparse(const kl_source *src, TSNode n, char **lhs_text, TSNode *rhs);
/* How deeply the tree under n nests (n alone: 1), counted without recursion; counting stops
 * past `limit` (then limit + 1 is returned and *deepest, when not NULL, is the node found
 * there). The rules refuse a file nested deeper than KL_AST_MAX_DEPTH: their walks recurse. */
#define KL_AST_MAX_DEPTH 400
unsigned kl_ast_depth(TSNode n, unsigned limit, TSNode *deepest);
/* The byte offset of the start of the line holding `off`, and the offset just past the
 * end of the line (after its '\n', or len). */
uint32_t kl_ast_line_start(const char *text, uint32_t off);
uint32_t kl_ast_line_end(const char *text, size_t len, uint32_t off);

/* ---- kernel launches ------------------------------------------------------------------- */

/* One `kernel<<<grid, block, smem, stream>>>(args)` in the file. */
typedef struct kl_launch_site {
    TSNode call;          /* the call_expression */
    TSNode config;        /* the kernel_call_syntax node (<<< … >>>) */
    TSNode grid, block;   /* the first two configuration expressions (null if absent) */
    TSNode smem, stream;  /* the optional third and fourth (null if absent) */
    TSNode args;          /* the argument_list */
    TSNode host_fn;       /* the function holding the launch */
    char *kernel;         /* the kernel's name without template arguments (owned) */
} kl_launch_site;

typedef struct kl_launch_sites {
    kl_launch_site *items;
    unsigned count;
} kl_launch_sites;

/* Every launch in the file, in document order. On KL_OK out is the caller's
 * (kl_launch_sites_release). */
kl_status kl_ast_launches(const kl_source *src, kl_launch_sites *out, kl_error *err);
void kl_launch_sites_release(kl_launch_sites *s);

/* Evaluate an integer constant expression: literals, + - * / % << >> & | ~ ?:, casts,
 * sizeof of scalar types, object-like #defines and `constexpr`/`const` integer variables
 * of the file (and of `scope`, a function whose locals are searched first; may be null),
 * dim3(...) yields the product of its arguments when `dim3_product` is true, else fails.
 * Returns false (with a reason in why, may be NULL) when it is not a compile-time value. */
bool kl_const_eval(const kl_source *src, TSNode scope, TSNode expr, bool dim3_product, int64_t *out, char *why,
                   size_t why_size);
/* The same for a name (a local of scope assigned once, a macro, a file constant). scope is a
 * function_definition (its body is searched) or any node (searched as it is), or null. This is
 * the one constant evaluator: the rules' rt_const_eval/rt_const_name are this. */
bool kl_const_eval_name(const kl_source *src, TSNode scope, const char *name, int64_t *out, char *why,
                        size_t why_size);

/* True when expr (in function fn, whose locals are followed to their one initializer)
 * provably depends on a value known only at run time: a parameter of fn, a thread, block or
 * grid coordinate or extent, a load from memory. Macros, constants, template parameters and
 * names it cannot follow are not (false: "not shown to be run-time"). why (may be NULL) names
 * the value found. */
bool kl_expr_runtime(const kl_source *src, TSNode fn, TSNode expr, char *why, size_t why_size);

/* ---- affine forms ---------------------------------------------------------------------- */

/* The index variables: "threadIdx.x" … "blockIdx.z", and loop induction variables by name. */
typedef struct kl_affine_term {
    char *var;            /* "threadIdx.x", "blockIdx.y", or a loop variable's name */
    char *coef;           /* the coefficient as text, e.g. "blockDim.x", "K", "4" */
    bool coef_is_int;     /* the coefficient is an integer constant … */
    int64_t coef_int;     /* … with this value */
} kl_affine_term;

typedef struct kl_affine {
    bool ok;              /* affine (then terms/constant are valid), else why says why not */
    char *why;            /* one line, e.g. "'i % n' is not affine (line 12)"; NULL when ok */
    char *constant;       /* the constant term as text ("0" when none) */
    bool const_is_int;
    int64_t const_int;
    kl_affine_term *terms;/* nonzero terms only, sorted by var name */
    unsigned nterms;
} kl_affine;

void kl_affine_release(kl_affine *a);
/* The coefficient of var (text owned by a), or NULL when it is zero. */
const char *kl_affine_coef(const kl_affine *a, const char *var);
/* The coefficient as an integer: true with *v (0 when absent) if it is a constant. */
bool kl_affine_coef_int(const kl_affine *a, const char *var, int64_t *v);
/* True if any thread/block index or loop variable appears (i.e. the value varies). */
bool kl_affine_varies(const kl_affine *a);
/* The form printed back as C ("blockDim.x*blockIdx.x + threadIdx.x"), a new string (free()). */
char *kl_affine_to_text(const kl_affine *a);

/* ---- the per-kernel context ------------------------------------------------------------ */

typedef struct kl_affine_ctx kl_affine_ctx;

/* A loop of the kernel (kl_loop_kind is syntax.h's: for, while, do). */

typedef struct kl_ax_loop {
    TSNode node;          /* for_statement / while_statement / do_statement */
    kl_loop_kind kind;
    int parent;           /* index of the enclosing loop in the kernel, -1 at top level */
    unsigned depth;       /* 0 for a top-level loop */
    char *var;            /* induction variable, NULL when none was recognised */
    char *start;          /* its initial value as text (NULL when unknown) */
    char *bound;          /* the other side of the condition, as text */
    char *cmp;            /* "<", "<=", ">", ">=", "!=" (as if the variable were on the left) */
    char *step;           /* the increment as text: "1", "-1", "blockDim.x*gridDim.x", ">>1", "*2" */
    bool step_is_int;     /* an additive integer step … */
    int64_t step_int;     /* … of this value */
    bool trip_known;      /* the trip count is a compile-time constant … */
    int64_t trip;         /* … of this value */
    bool has_pragma_unroll;   /* a `#pragma unroll` line sits right before the loop (the tree
                                 does not hold pragmas: they are read from the text) */
    uint32_t pragma_start, pragma_end; /* that line: from its '#' to its end (no newline) */
    char *pragma_arg;     /* what follows "unroll", trimmed ("4", "" for none); NULL without pragma */
    char *why;            /* when var is NULL or trip unknown: one line saying why */
} kl_ax_loop;

/* An array access in the kernel: `p[i]`, `p[i][j]` (one entry per subscript chain), or `*(p + i)`. */
typedef struct kl_ax_access {
    TSNode node;          /* the subscript_expression (outermost) or pointer_expression */
    char *array;          /* the base's name ("a", "sh") */
    int param;            /* index of the kernel parameter it is, -1 for a local/shared array */
    bool is_shared;       /* declared __shared__ in the kernel (or extern __shared__) */
    bool read, write;     /* written: left of an assignment (compound: both), ++/-- (both) */
    unsigned ndims;       /* subscripts in the chain (1 for p[i]) */
    kl_affine index[4];   /* per subscript, outermost-first (p[a][b]: index[0] = a) */
    kl_affine flat;       /* the linearised index (1-D: index[0]); ok=false for multi-dim
                             arrays of unknown extent */
    int loop;             /* innermost enclosing loop (index), -1 if none */
    uint32_t varies_mask; /* bit L set: the index varies with loop L (L < 32) */
    uint32_t reuse_mask;  /* bit L set: enclosing loop L does NOT move it (reused along L) */
    bool tx_known;        /* the coefficient of threadIdx.x in flat is an integer constant */
    int64_t tx_stride;    /* that coefficient: 1 coalesced, 0 broadcast, other: strided */
    char *tx_coef;        /* the coefficient as text (NULL when zero or unknown) */
} kl_ax_access;

/* Build the analysis of the kernel function_definition `kernel` (or of any function:
 * helpers and launch() work the same). On KL_OK *out is the caller's (kl_affine_ctx_free). */
kl_status kl_affine_ctx_new(const kl_source *src, TSNode kernel, kl_affine_ctx **out, kl_error *err);
void kl_affine_ctx_free(kl_affine_ctx *ctx);
TSNode kl_affine_ctx_function(const kl_affine_ctx *ctx);

/* Analyse an expression node that lies in the kernel. Loop variables of the loops
 * enclosing `expr` are index variables. Always fills *out (ok or why); returns
 * KL_ERR_NOMEM only when memory runs out. */
kl_status kl_affine_of(kl_affine_ctx *ctx, TSNode expr, kl_affine *out);

/* ---- the polynomial view ------------------------------------------------------------------
 * The same evaluation read as a polynomial over NAMES, for what the affine form cannot say: how
 * an expression that is not affine (a product of two indices, a pointer plus an offset) moves
 * with threadIdx.x, and which names a value that is no polynomial at all (a `%`, a load, a call)
 * depends on. The names are the CUDA builtins ("threadIdx.x", "blockDim.y", …), loop variables
 * and invariant symbols alike. It sees through what kl_affine_of sees through (locals assigned
 * once, macros, helpers, integer constants) and further:
 *  - an invariant macro is its expansion (`#define TILE (2*BS)`: 2*BS, where the affine form keeps
 *    the symbol "TILE");
 *  - a name the affine form refuses is a factor of its own: a local assigned more than once (a
 *    loop variable outside its loop), a pointer parameter (`x + row*n` is x + n*row), a member
 *    (`p->n`); casts to any type pass;
 *  - `/`, `%`, `>>`, `&`, `?:`, comparisons, loads, calls and literals that are no integers are
 *    OPAQUE, with the names they read (an operation on two integer constants is its value).
 * Monomials carry at most KL_POLY_MAXF factors; a product of more is opaque.
 *
 * Ownership: polynomials and the names in them are the context's, valid until
 * kl_affine_ctx_free. */

#define KL_POLY_MAXF 6

typedef struct kl_poly_mono {
    int64_t coef;                 /* nonzero */
    unsigned nf;                  /* factors; 0 for the constant term */
    const char *f[KL_POLY_MAXF];  /* the names, sorted by strcmp, one per power */
} kl_poly_mono;

typedef struct kl_poly {
    bool opaque;                  /* not a polynomial: m and n are empty, only deps hold */
    const kl_poly_mono *m;        /* the monomials in a canonical order (fewer factors first) */
    unsigned n;                   /* 0: the value 0 */
    const char *const *deps;      /* every name the expression reads, sorted, once each — a read
                                     that cancels out (`i - i`) still counts */
    unsigned ndeps;
} kl_poly;

/* The polynomial of expr, a node of the kernel: *out is the context's. KL_ERR_NOMEM when memory
 * runs out; *out is then an opaque value that reads nothing (never NULL). */
kl_status kl_affine_poly_of(kl_affine_ctx *ctx, TSNode expr, const kl_poly **out);
/* a + sign*b (opaque when either is, reading what both read); the context's; NULL when memory
 * runs out. */
const kl_poly *kl_affine_poly_add(kl_affine_ctx *ctx, const kl_poly *a, const kl_poly *b, int64_t sign);

/* Names in the queries below: a builtin without its field ("threadIdx") stands for its three
 * fields (threadIdx.x, .y, .z). */

/* Does p read `name`? */
bool kl_poly_depends(const kl_poly *p, const char *name);
/* Is `name` a factor of m? */
bool kl_poly_mono_has(const kl_poly_mono *m, const char *name);

/* How p moves when `name` (one name: "threadIdx.x") grows by one. */
typedef enum kl_stride {
    KL_STRIDE_ABSENT,     /* p does not read it, or its terms in it cancel */
    KL_STRIDE_UNIT,       /* linearly, coefficient 1 */
    KL_STRIDE_CONST,      /* linearly, by another integer (*k) */
    KL_STRIDE_SYMBOLIC,   /* linearly, by a coefficient with other names in it (`threadIdx.x * n`) */
    KL_STRIDE_OPAQUE      /* not linearly: p is opaque and reads it, or a power of it */
} kl_stride;
/* k (may be NULL) receives the coefficient for UNIT and CONST. */
kl_stride kl_poly_stride(const kl_poly *p, const char *name, int64_t *k);

/* The global thread index: p is exactly `C*blockIdx.x + threadIdx.x`, C = coef > 0 when sym is
 * NULL, else coef * sym with sym "blockDim.x" or a name that is no CUDA builtin (a template
 * parameter, a kernel argument). A grid of such blocks has C*gridDim.x threads. */
typedef struct kl_grid_index {
    int64_t coef;
    const char *sym;      /* NULL, "blockDim.x" or another name; the context's */
} kl_grid_index;
bool kl_poly_grid_index(const kl_poly *p, kl_grid_index *g);
/* p == u * C * gridDim.x, u grids' worth of threads of g, for an integer u >= 1: u; else 0. */
int64_t kl_poly_grid_multiple(const kl_poly *p, const kl_grid_index *g);

/* Loops, in document order (outer before inner). */
unsigned kl_affine_loop_count(const kl_affine_ctx *ctx);
const kl_ax_loop *kl_affine_loop(const kl_affine_ctx *ctx, unsigned i);
/* The index of the loop whose node is n, or -1. */
int kl_affine_loop_index(const kl_affine_ctx *ctx, TSNode n);
/* The innermost loop enclosing n (n itself excluded), or -1. */
int kl_affine_loop_enclosing(const kl_affine_ctx *ctx, TSNode n);

/* Array accesses, in document order. */
unsigned kl_affine_access_count(const kl_affine_ctx *ctx);
const kl_ax_access *kl_affine_access(const kl_affine_ctx *ctx, unsigned i);

/* Parameters: name, and whether it is a pointer; the element type text ("float",
 * "__nv_bfloat16", "T" for a template) without qualifiers; whether declared const /
 * __restrict__. Index -1 when the name is not a parameter. */
typedef struct kl_param_info {
    char *name;
    char *elem;           /* the pointee (pointer) or the type (scalar) */
    bool pointer, is_const, is_restrict;
    TSNode decl;          /* the parameter_declaration */
} kl_param_info;
unsigned kl_affine_param_count(const kl_affine_ctx *ctx);
const kl_param_info *kl_affine_param(const kl_affine_ctx *ctx, unsigned i);
int kl_affine_param_index(const kl_affine_ctx *ctx, const char *name);

/* How often the kernel assigns a local or a parameter (=, op=, ++, --, declarations with
 * an initializer count once). 0 for a name never assigned. */
unsigned kl_affine_assign_count(const kl_affine_ctx *ctx, const char *name);

#endif
