/*
 * Parsing CUDA source (tree-sitter with the tree-sitter-cuda grammar), and a small model
 * of what a kernel file holds: functions (kernels, __device__ helpers, host code such as
 * launch()), launch sites, loops and their pragmas, __shared__ declarations, uses of CUDA
 * intrinsics, and array subscripts. docs/syntax.md describes the model and its JSON form.
 *
 * Two handles, both opaque:
 *   kl_source — the text and its tree (kl_source_parse_file / _text, kl_source_free);
 *   kl_model  — what was extracted from one kl_source (kl_model_build, kl_model_free).
 * Everything else is a plain value (kl_span, kl_text) or a read-only struct owned by the
 * model: valid until kl_model_free, never freed by the caller.
 *
 * Every item carries a kl_span, a byte range of the source text, so a rewrite can splice
 * new text in at exactly that place and leave the rest of the file as it was.
 */
#ifndef KLINEAGE_SYNTAX_H
#define KLINEAGE_SYNTAX_H

#include <stdbool.h>
#include "klineage/klineage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* jansson's value type; include <jansson.h> to use what the functions below return. */
struct json_t;

/* A parsed CUDA file: its text and its tree. Opaque. */
typedef struct kl_source kl_source;

/* The largest file parsed (bytes). */
#define KL_SOURCE_MAX ((size_t)64 << 20)
/* Limits checked before and after parsing (docs/syntax.md, "Limits"): text past them is
 * refused with KL_ERR_TOO_LARGE and the file and line where the limit was passed.
 *  - tokens: the tree-sitter runtime (0.20.7) keeps a node's child count in 16 bits and
 *    corrupts its heap past 65,535 children (an ERROR node can gather every token of the
 *    file); a child holds at least one token or one zero-width "missing" token placed before
 *    one, so 32,000 tokens (counted generously: every operator character is one) keep every
 *    node under that;
 *  - bracket nesting ('(', '[', '{') and conditional nesting (#if/#ifdef/#ifndef), counted
 *    before parsing, whether closed or not;
 *  - the depth of the tree, measured after parsing, so that every walk over it, recursive or
 *    not, is bounded (an expression `1+1+…+1` of 10,000 terms is 10,000 levels deep). */
#define KL_SOURCE_MAX_TOKENS 32000u
#define KL_SOURCE_MAX_BRACKETS 256u
#define KL_SOURCE_MAX_CONDITIONALS 64u
#define KL_SOURCE_MAX_DEPTH 1000u

/* Parse a file. On KL_OK, *out is owned by the caller (kl_source_free). A file that
 * parses with errors is still returned, flagged partial (kl_source_partial). Fails for a
 * missing file (KL_ERR_NOT_FOUND), a directory (KL_ERR_INVALID), a file over KL_SOURCE_MAX
 * (KL_ERR_TOO_LARGE) or one holding NUL bytes (KL_ERR_PARSE); err names the file. A file
 * past one of the limits above is KL_ERR_TOO_LARGE too, naming the file and the line. A FIFO,
 * a device or a socket is refused (KL_ERR_INVALID) without being opened for reading. */
kl_status kl_source_parse_file(const char *path, kl_source **out, kl_error *err);
/* Parse text (copied). `name` is used in messages (a path, or "<stdin>"). */
kl_status kl_source_parse_text(const char *name, const char *text, size_t len, kl_source **out, kl_error *err);
/* Parse text, a changed copy of base's, under base's name: the same source as
 * kl_source_parse_text gives, parsed incrementally from base's tree (faster when the change is
 * small: what the catalog checks after every rewrite). */
kl_status kl_source_parse_edited(const kl_source *base, const char *text, size_t len, kl_source **out, kl_error *err);
void kl_source_free(kl_source *src);

/* The name given at parse time, and the text (NUL-terminated; *len may be NULL). Owned by src. */
const char *kl_source_name(const kl_source *src);
const char *kl_source_text(const kl_source *src, size_t *len);

/* A place in the text: byte range [start, end) and the 1-based line and byte column of start. */
typedef struct kl_span {
    uint32_t start, end;
    uint32_t line, column;
} kl_span;

/* The text of a span as a new NUL-terminated string, owned by the caller (free()).
 * NULL when out of memory; a span past the end of the text is clipped to it. */
char *kl_source_slice(const kl_source *src, kl_span span);

/* Parse errors: a partial tree has ERROR or MISSING nodes. */
bool kl_source_partial(const kl_source *src);
/* How many errors were found (all of them; kl_source_error describes the first 64). */
unsigned kl_source_error_count(const kl_source *src);
/* The i-th error's place and a one-line description ("unexpected '}'", "missing ';'",
 * "unterminated comment") written into msg. Returns false if i is out of range. */
bool kl_source_error(const kl_source *src, unsigned i, kl_span *where, char *msg, size_t msg_size);

/* ---- the model ------------------------------------------------------------------------ */

/* A piece of source text: a copy of it (owned by the model) and where it is.
 * text is NULL (and span all zero) when the piece is absent. */
typedef struct kl_text {
    const char *text;
    kl_span span;
} kl_text;

typedef enum kl_function_kind {
    KL_FUNCTION_HOST = 0,   /* no CUDA qualifier, or __host__ only: launch() is one */
    KL_FUNCTION_DEVICE = 1, /* __device__ (with or without __host__) */
    KL_FUNCTION_KERNEL = 2  /* __global__ */
} kl_function_kind;

/* A function parameter. */
typedef struct kl_param {
    const char *name;        /* "" when unnamed */
    const char *type;        /* the declaration without its name, spaces collapsed: "const float* __restrict__" */
    const char *elem_type;   /* the type specifier alone: "float", "float4", "T", "cudaStream_t" */
    unsigned pointer_depth;  /* how many '*' */
    bool is_const;           /* the element is const ("const float *", "float const *") */
    bool is_const_pointer;   /* the pointer itself is const ("float *const p") */
    bool is_restrict;        /* __restrict__ / __restrict / restrict */
    bool is_reference;       /* "T &" or "T &&" */
    bool is_array;           /* declared with [] */
    kl_span span;
} kl_param;

/* A template parameter: "typename T", "int BLOCK = 256", "class... Ts". */
typedef struct kl_tparam {
    const char *name;        /* "" when unnamed */
    const char *kind;        /* "typename" or "class" for a type, "template" for a template
                                template parameter, else the value's type ("int", "bool") */
    const char *default_value; /* text after '=', or NULL */
    bool is_pack;            /* "..." */
    kl_span span;
} kl_tparam;

/* A function definition. */
typedef struct kl_function {
    const char *name;        /* as written; qualified names keep their scope ("ns::f") */
    kl_function_kind kind;
    bool is_host, is_device; /* __host__ / __device__ written */
    bool is_extern_c;        /* inside extern "C" */
    bool is_static, is_inline, is_forceinline, is_noinline;
    const char *return_type; /* spaces collapsed */
    const kl_param *params;
    unsigned nparams;
    const kl_tparam *tparams; /* of an enclosing template<...> */
    unsigned ntparams;
    bool is_template;
    const kl_text *launch_bounds; /* __launch_bounds__ arguments (max threads, min blocks, …) */
    unsigned nlaunch_bounds;      /* 0 when there is no __launch_bounds__ */
    kl_span launch_bounds_span;   /* "__launch_bounds__(…)" */
    /* The preprocessor condition under which the definition is compiled, NULL when it is
     * unconditional: "defined(FAST)", "!(defined(FAST))", joined by " && " when nested. */
    const char *guard;
    unsigned nreturns;       /* return statements in the body */
    unsigned index_dims;     /* highest dimension of threadIdx/blockIdx used: 0 none, 1 x, 2 y, 3 z */
    kl_span span;            /* the whole definition, including a template<...> prefix */
    kl_span name_span;
    kl_span body_span;       /* "{ … }" */
} kl_function;

/* A launch site: kernel<<<grid, block, smem, stream>>>(args). */
typedef struct kl_launch {
    const char *kernel;          /* the callee as written, without template arguments */
    int kernel_function;         /* index of a __global__ of that name in this file, else -1 */
    const kl_text *template_args;/* "k<16, float>": "16", "float" */
    unsigned ntemplate_args;
    kl_text grid, block, smem, stream; /* the configuration; text NULL where not given */
    kl_span config_span;         /* "<<<…>>>" */
    const kl_text *args;
    unsigned nargs;
    int function;                /* the enclosing function, -1 at file scope */
    bool in_lambda;              /* inside a lambda in that function */
    kl_span span;                /* the whole call, callee to ')' */
} kl_launch;

typedef enum kl_loop_kind {
    KL_LOOP_FOR = 0,
    KL_LOOP_WHILE = 1,
    KL_LOOP_DO = 2,
    KL_LOOP_RANGE_FOR = 3        /* for (x : range) */
} kl_loop_kind;

/* A loop. Loops are listed in document order, so a parent comes before its children. */
typedef struct kl_loop {
    kl_loop_kind kind;
    kl_text init;                /* for: "int i = 0" (no ';'); range-for: "auto &v : s" */
    kl_text cond;                /* "i < n"; while / do: the condition without parentheses */
    kl_text step;                /* for: "i += blockDim.x" */
    const char *var;             /* the variable the init declares or assigns, or NULL */
    unsigned depth;              /* 1 for a loop not inside another loop of its function */
    int parent;                  /* index of the enclosing loop, -1 if none */
    int function;                /* index of the enclosing function, -1 if none */
    bool in_lambda;
    int pragma;                  /* index of the first pragma attached to it, -1 if none */
    unsigned npragmas;           /* pragmas attached: those written just before the loop */
    bool unroll;                 /* "#pragma unroll" attached */
    const char *unroll_arg;      /* its argument ("4"), NULL when none */
    bool grid_stride;            /* the step adds a multiple of gridDim (a grid-stride loop) */
    kl_span span;                /* from the keyword to the end of the body */
    kl_span body_span;
} kl_loop;

/* A #pragma line. */
typedef struct kl_pragma {
    kl_text text;                /* "#pragma unroll 4", trailing spaces dropped */
    const char *name;            /* its first word: "unroll", "nounroll", "once" */
    const char *arg;             /* the rest, trimmed, or NULL: "4" */
    int loop;                    /* the loop it is attached to, -1 if none */
    int function;                /* the function it is in, -1 if none */
} kl_pragma;

/* One name declared __shared__ ("__shared__ float a[8], b[8];" gives two). */
typedef struct kl_shared_decl {
    const char *name;
    const char *elem_type;       /* "float", "int", "T" */
    const kl_text *dims;         /* one per [], outermost first; "" text for "[]" */
    unsigned ndims;
    bool is_extern;              /* extern __shared__: dynamic shared memory sized at launch */
    const char *align;           /* __align__(N) / alignas(N) argument, or NULL */
    int function;                /* -1 at file scope */
    kl_span span;                /* the whole declaration */
    kl_span name_span;
} kl_shared_decl;

typedef enum kl_use_kind {
    KL_USE_BARRIER = 0,        /* __syncthreads*, __syncwarp, cooperative-groups sync, bar.sync */
    KL_USE_SHUFFLE = 1,        /* __shfl_*, a group's shfl* */
    KL_USE_WARP_VOTE = 2,      /* __ballot_sync, __any_sync, __all_sync, __activemask, __reduce_*_sync, __match_* */
    KL_USE_ATOMIC = 3,         /* atomic*, PTX atom./red. */
    KL_USE_VECTOR_TYPE = 4,    /* float4, int2, half2, __nv_bfloat162, make_float4, … */
    KL_USE_ASM = 5,            /* an inline asm statement; name: its first PTX instruction */
    KL_USE_ASYNC_COPY = 6,     /* cp.async, __pipeline_memcpy_async, memcpy_async, TMA */
    KL_USE_MMA = 7,            /* wmma::*, PTX mma/wgmma/ldmatrix */
    KL_USE_MATH_INTRINSIC = 8, /* __expf, rsqrtf, __fdividef, __fmaf_rn, hexp2, … */
    KL_USE_LOAD_INTRINSIC = 9, /* __ldg and the cache-hinted loads and stores (__ldcg, __stcs, …) */
    KL_USE_COOP_GROUPS = 10,   /* cooperative_groups:: / cg:: names */
    KL_USE_FENCE = 11,         /* __threadfence* */
    KL_USE_CALL = 12           /* a call to a function defined in this file; target says which */
} kl_use_kind;
#define KL_USE_KIND_COUNT 13

/* A use of a CUDA facility (or a call to a function of this file). */
typedef struct kl_use {
    kl_use_kind kind;
    const char *name;            /* "__syncthreads", "float4", "cp.async.ca.shared.global" */
    bool vector_pointer;         /* VECTOR_TYPE: the type is pointed to ("float4 *", a reinterpret_cast<float4*>) */
    int target;                  /* CALL: the function called; else -1 */
    int function;                /* the enclosing function, -1 if none */
    int loop;                    /* the innermost enclosing loop, -1 if none */
    kl_span span;                /* the call, the type name or the asm statement */
} kl_use;

typedef enum kl_access_mode {
    KL_ACCESS_READ = 0,
    KL_ACCESS_WRITE = 1,       /* a[i] = …  (also a[i].x = …) */
    KL_ACCESS_READ_WRITE = 2,  /* a[i] += …, a[i]++ */
    KL_ACCESS_ADDRESS = 3      /* &a[i] */
} kl_access_mode;

/* An array subscript inside a function body: base[index] or base[i][j]. Nested
 * subscripts of one chain ("t[y][x]") form a single access with two indices. */
typedef struct kl_access {
    kl_text base;                /* "x", "tile", "reinterpret_cast<float4*>(x)" */
    const kl_text *indices;      /* outermost first: t[y][x] gives "y", "x" */
    unsigned nindices;
    kl_access_mode mode;
    int shared;                  /* the __shared__ declaration the base names, -1 if none */
    int param;                   /* the parameter (of the enclosing function) the base names, -1 if none */
    int function;
    int loop;                    /* the innermost enclosing loop, -1 if none */
    kl_span span;                /* the whole subscript expression */
} kl_access;

/* What was extracted from a source. Opaque. */
typedef struct kl_model kl_model;

/* Build the model of a parsed source. src is borrowed: it must outlive the model. A partial
 * source gives the model of what did parse. On KL_OK, *out is owned by the caller
 * (kl_model_free). Fails only when out of memory. */
kl_status kl_model_build(const kl_source *src, kl_model **out, kl_error *err);
void kl_model_free(kl_model *model);
const kl_source *kl_model_source(const kl_model *model);

/* The items, in document order. Each returns the array (owned by the model, NULL when
 * empty) and stores its length in *count. Indices in the items refer to these arrays. */
const kl_function *kl_model_functions(const kl_model *model, unsigned *count);
const kl_launch *kl_model_launches(const kl_model *model, unsigned *count);
const kl_loop *kl_model_loops(const kl_model *model, unsigned *count);
const kl_pragma *kl_model_pragmas(const kl_model *model, unsigned *count);
const kl_shared_decl *kl_model_shared(const kl_model *model, unsigned *count);
const kl_use *kl_model_uses(const kl_model *model, unsigned *count);
const kl_access *kl_model_accesses(const kl_model *model, unsigned *count);

/* The items of one function, as indices into the arrays above, in document order. Owned
 * by the model; NULL (and *count 0) when there are none or function is out of range. */
typedef enum kl_items {
    KL_ITEMS_USES = 0, KL_ITEMS_LOOPS = 1, KL_ITEMS_ACCESSES = 2, KL_ITEMS_SHARED = 3, KL_ITEMS_LAUNCHES = 4,
    KL_ITEMS_PRAGMAS = 5
} kl_items;
#define KL_ITEMS_COUNT 6
const unsigned *kl_model_items_of(const kl_model *model, kl_items which, unsigned function, unsigned *count);

/* The index of the first function named `name` of the given kind, or -1. */
int kl_model_find_function(const kl_model *model, const char *name, kl_function_kind kind);
/* The index of the host function launch(), or -1. */
int kl_model_launch_function(const kl_model *model);

/* Static names: "host"/"device"/"kernel", "for"/"while"/"do"/"range_for",
 * "barrier"/"shuffle"/…, "read"/"write"/"read_write"/"address". Never NULL. */
const char *kl_function_kind_name(kl_function_kind kind);
const char *kl_loop_kind_name(kl_loop_kind kind);
const char *kl_use_kind_name(kl_use_kind kind);
const char *kl_access_mode_name(kl_access_mode mode);

/* The static features of function i (docs/syntax.md, "Features"): counts and flags such as
 * uses_shared, uses_shuffle, uses_vector_loads, max_loop_depth, has_unroll_pragma. A new
 * JSON object owned by the caller (json_decref); NULL when i is out of range or out of memory. */
struct json_t *kl_model_features(const kl_model *model, unsigned function);

/* The whole model as the JSON document of docs/syntax.md (what `klineage parse --json`
 * prints for one file): a new object owned by the caller (json_decref); NULL when out of memory. */
struct json_t *kl_model_json(const kl_model *model);

#ifdef __cplusplus
}
#endif
#endif
