/*
 * The rules' tree helpers (`rt_`), shared by the catalog's transforms: reading a kernel's tree
 * through a rule's context (text, names, declarations, statements, lines), compile-time constants
 * (kl_const_eval's), functions and launch sites. Walking and declarator names are the syntax
 * stage's (kl_ast_walk, kl_ast_declarator_name in src/syntax/affine.h).
 *
 * The index analysis is src/syntax/affine.h's, the one for every transform: its affine forms
 * (kl_affine_of) and its polynomial view (kl_affine_poly_of: strides, what an opaque index reads,
 * the global thread index).
 */
#ifndef KL_RULES_TREE_H
#define KL_RULES_TREE_H

#include "rewrite/rules/rules.h"
#include "util/util.h"

/* ---- tree navigation ----------------------------------------------------------------------- */

TSNode rt_field(TSNode n, const char *field);
bool rt_is(TSNode n, const char *type);
/* The closest ancestor (or n itself) of the given type; a null node when none. */
TSNode rt_ancestor(TSNode n, const char *type);

/* Running one site over the functions of a file (the user of kl_rules_each_function): the site,
 * its parameters (NULL: remove), the edits it makes, the error, whether the site was met and the
 * status of its rewrite. */
typedef struct rt_run {
    const kl_site *site;
    const json_t *params;
    kl_edits *out;
    kl_error *err;
    bool done;
    kl_status st;
} rt_run;

/* The text [start,end) of a node as a new string (free()). */
char *rt_text(const kl_rule_ctx *ctx, TSNode n);
bool rt_text_is(const kl_rule_ctx *ctx, TSNode n, const char *s); /* false for a null node */
/* The first declaration or parameter declaration under `in` (document order) that declares `name`
 * — a variable, pointer, array or reference; with `functions`, a function's declaration too —
 * and its declarator; a null node when there is none. */
TSNode rt_find_decl(const kl_rule_ctx *ctx, TSNode in, const char *name, bool functions, TSNode *declarator);
/* n's text without blanks (new string; NULL when out of memory). */
char *rt_text_unblank(const kl_rule_ctx *ctx, TSNode n);
/* The same into buf (size bytes with its NUL; "" for a null node); false when it did not fit. */
bool rt_text_unblank_to(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size);
/* n's text into buf (size bytes with its NUL); false when it did not fit (buf then holds the
 * start of it) — a caller comparing names refuses rather than compare a cut one. */
bool rt_text_copy(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size);
/* a and b are the same code but for blanks (two null nodes are; one is not). */
bool rt_same_text(const kl_rule_ctx *ctx, TSNode a, TSNode b);
/* e inside its parentheses and condition clauses (`if (c)`'s `(c)`). */
TSNode rt_unparen_cond(TSNode e);
/* The last named child of n that is not a comment (a block's last statement); a null node when none. */
TSNode rt_last_stmt(TSNode n);
/* The children of declaration n in field `declarator` (`dim3 grid(…), block(16, 16);` has two), at
 * most max into out; how many. Read through a cursor: this tree-sitter's
 * ts_node_field_name_for_child names the wrong child after a comma. */
unsigned rt_declarators(TSNode n, TSNode *out, unsigned max);
/* Is name a pointer of function fn (a parameter, or a local declared `T* p`)? Its element type
 * (without qualifiers) into buf. */
bool rt_pointer_elem(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *name, char *buf, size_t size);
/* Is the pointer name __restrict__: a parameter declared so, or a local pointer initialised from one
 * (`const float* xr = x + row * cols;`)? */
bool rt_pointer_restrict(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *name);
/* Is n the CUDA builtin `b.c`, e.g. rt_is_builtin(ctx, n, "threadIdx", 'x')? c == 0: any. */
bool rt_is_builtin(const kl_rule_ctx *ctx, TSNode n, const char *b, char c);
/* Is e a binary expression with operator op? */
bool rt_op_is(const kl_rule_ctx *ctx, TSNode e, const char *op);
/* e without the parentheses and casts around it (`(long long)(B)` is B). */
TSNode rt_bare(TSNode e);
/* Does the subtree use identifier `name` (as an identifier node, not a field)? */
unsigned rt_count_ident(const kl_rule_ctx *ctx, TSNode n, const char *name);
/* A name not used in scope: base, base2, base3 … into buf. */
void rt_fresh_name(const kl_rule_ctx *ctx, TSNode scope, const char *base, char *buf, size_t size);
/* The start of the line holding byte `off`, and the indentation (spaces/tabs) of that line,
 * copied into ind (at most size-1 bytes). */
uint32_t rt_line_start(const kl_rule_ctx *ctx, uint32_t off);
void rt_indent_of(const kl_rule_ctx *ctx, uint32_t off, char *ind, size_t size);
/* The byte just past the end of the line holding `off` (past its '\n'). */
uint32_t rt_line_end(const kl_rule_ctx *ctx, uint32_t off);
/* Is the text from the line start to `off` only blank? */
bool rt_line_blank_before(const kl_rule_ctx *ctx, uint32_t off);

/* The range to delete for a statement: whole lines when the statement is alone on its lines
 * (from the line start to past its newline), else the node itself. A comment line just above
 * that mentions `marker` (may be NULL) goes with it. */
void rt_stmt_range(const kl_rule_ctx *ctx, TSNode stmt, const char *marker, uint32_t *start, uint32_t *end);
/* Re-indent text: add (delta > 0) or remove (delta < 0) |delta| spaces at the start of every
 * non-blank line. Removing fails (NULL) when a non-blank line has fewer spaces. New string. */
char *rt_reindent(const char *text, size_t len, int delta);
/* Is the statement `__syncthreads();`? */
bool rt_is_syncthreads(const kl_rule_ctx *ctx, TSNode stmt);
/* The next / previous named sibling that is not a comment (null node when none). */
TSNode rt_next_stmt(TSNode n);
TSNode rt_prev_stmt(TSNode n);

/* ---- functions and kernels ----------------------------------------------------------------- */

typedef struct rt_func {
    TSNode def;            /* function_definition */
    TSNode body;           /* compound_statement */
    TSNode params;         /* parameter_list */
    TSNode outer;          /* template_declaration when templated, else def */
    char name[128];
    bool global, device, templated;
} rt_func;

/* The functions of the file (top level and in namespaces), at most max. */
unsigned rt_functions(const kl_rule_ctx *ctx, rt_func *out, unsigned max);
/* The function (by name) or NULL. */
const rt_func *rt_function_named(const rt_func *fs, unsigned n, const char *name);
/* The parameter declaration named `name` of f, or a null node. */
TSNode rt_param(const kl_rule_ctx *ctx, const rt_func *f, const char *name);
/* Is `name` a pointer parameter of f? elem (may be NULL) receives its element type text. */
bool rt_pointer_param(const kl_rule_ctx *ctx, const rt_func *f, const char *name, char *elem, size_t size);
/* The name a call calls: `f(…)`, `f<T>(…)`, `obj.f(…)` / `p->f(…)` (a member), `S<T>::f(…)` /
 * `ns::f(…)`, into buf; false (and "") for anything else (a call through a pointer expression) or
 * a name longer than size - 1. */
bool rt_callee_name(const kl_rule_ctx *ctx, TSNode call, char *buf, size_t size);
/* The one __device__ function of the file named `name` (a free function or a struct's member); a
 * null node when there is none or several (overloads, two structs' members of one name: which one
 * a call reaches is not followed). */
TSNode rt_device_fn_named(const kl_rule_ctx *ctx, const char *name);
/* A marker comment inside [start,end) containing `word` (an expert's "// smem-pad: ..."). */
bool rt_has_marker(const kl_rule_ctx *ctx, uint32_t start, uint32_t end, const char *word);

/* ---- launches -------------------------------------------------------------------------------- */

typedef struct rt_launch {
    TSNode call;           /* call_expression holding the kernel_call_syntax */
    TSNode config;         /* kernel_call_syntax */
    TSNode cfg[4];         /* grid, block, smem, stream (null nodes where absent) */
    unsigned ncfg;
    TSNode args;           /* argument_list */
    rt_func host;          /* the function holding the launch */
} rt_launch;
/* The launches of kernel `name`, at most max. */
unsigned rt_launches(const kl_rule_ctx *ctx, const char *name, rt_launch *out, unsigned max);
/* The extents of a launch's grid or block `cfg` (l->cfg[0] or [1]) when it is `dim3(a, b[, c])` or a
 * local `dim3 g(a, b)` / `dim3 g = dim3(…)` / `dim3 g{…}` of the launching function: the list
 * holding them (a null node otherwise); rt_dim3_extent gives extent i of it. */
TSNode rt_dim3_args(const kl_rule_ctx *ctx, const rt_launch *l, TSNode cfg);
TSNode rt_dim3_extent(TSNode list, uint32_t i);

/* ---- constants ------------------------------------------------------------------------------- */

/* Evaluate an integer constant expression: literals, #define NAME value, const/constexpr
 * integer variables at file scope or in `scope` (may be a null node), sizeof of basic types,
 * + - * / % << >> & | and parentheses. */
bool rt_const_eval(const kl_rule_ctx *ctx, TSNode scope, TSNode e, long long *v);
bool rt_const_name(const kl_rule_ctx *ctx, TSNode scope, const char *name, long long *v);
/* Byte size of a scalar element type name ("float" 4, "__half" 2, ...); 0 when unknown. */
unsigned rt_type_size(const char *type);

/* The 1-D block size fn runs with, a power of two from 32 to 1024: a kernel's (its launches in the
 * file, all the same compile-time constant, else its __launch_bounds__ when the file never launches
 * it), or for a __device__ helper the largest of its calling kernels' (every caller a kernel). False
 * with why otherwise. */
bool rt_block_size(const kl_rule_ctx *ctx, TSNode fn, const char *name, int64_t *bs, char *why, size_t wn);

/* Is name a `__device__` variable of the file (top level, or in a namespace)? Its declaration
 * into *decl (may be NULL). */
bool rt_device_var(const kl_source *src, const char *name, TSNode *decl);

/* ---- the transforms (rows of the catalog, kl_rules[] in catalog.c) ---------------------------- */

extern const kl_rule kl_rule_privatize;
extern const kl_rule kl_rule_smem_pad;
extern const kl_rule kl_rule_coalesce;
extern const kl_rule kl_rule_tree_addressing;
extern const kl_rule kl_rule_two_pass;
extern const kl_rule kl_rule_accumulators;
extern const kl_rule kl_rule_coarsen;

#endif
