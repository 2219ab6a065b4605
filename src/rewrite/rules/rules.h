/*
 * The rules rewriter's catalog: one file per transform (src/rewrite/rules/<name>.c; a large one split
 * along its forms, <name>_<form>.c with a private <name>.h), most with both directions (wgmma
 * removes only, row-cache applies only). A transform finds sites — where its optimization is PRESENT (the
 * backward walk removes it) and where it COULD BE APPLIED (the optimizer adds it) — and
 * turns a site into text edits, spliced at byte ranges so the rest of the file, comments
 * included, is untouched. The result is always parsed back before it is returned.
 */
#ifndef KL_RULES_H
#define KL_RULES_H

#include <jansson.h>
#include <stdbool.h>

#include "klineage/rewrite.h"
#include "syntax/affine.h"
#include "syntax/syntax_int.h"

/* ---- edits ------------------------------------------------------------------------------ */

typedef struct kl_edit {
    uint32_t start, end;   /* byte range replaced in the ORIGINAL text */
    char *text;            /* replacement (owned) */
} kl_edit;

typedef struct kl_edits {
    kl_edit *items;
    unsigned count, cap;
} kl_edits;

/* Add an edit replacing [start, end) with text (copied). Insertions: start == end. */
kl_status kl_edits_add(kl_edits *e, uint32_t start, uint32_t end, const char *text);
kl_status kl_edits_addf(kl_edits *e, uint32_t start, uint32_t end, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void kl_edits_release(kl_edits *e);
/* Apply the edits to text (len bytes) into a new string (free()). Edits must not overlap
 * (error naming both ranges); insertions at the same point keep their order. */
kl_status kl_edits_apply(const kl_edits *e, const char *text, size_t len, char **out, kl_error *err);
/* The same for the slice [a, b) of text, every edit inside it (offsets into the whole text). */
kl_status kl_edits_apply_range(const kl_edits *e, const char *text, size_t a, size_t b, char **out, kl_error *err);

/* ---- sites and transforms ------------------------------------------------------------------ */

typedef enum kl_site_dir {
    KL_SITE_PRESENT = 0,   /* the optimization is here: remove() applies */
    KL_SITE_APPLICABLE = 1 /* it could be added here: apply() applies */
} kl_site_dir;

typedef struct kl_site {
    char *id;              /* stable within the file: "<kernel>:<line>" or "<kernel>:<line>:<what>" */
    kl_site_dir dir;
    kl_span span;          /* the construct the site is about */
    char *kernel;          /* the enclosing __global__ (or launch) function, owned */
    json_t *features;      /* static features describing the site (owned reference) */
    json_t *params;        /* present sites: the parameters found (e.g. {"width":4}); owned, may be NULL */
    char *note;            /* one line for people, owned */
} kl_site;

typedef struct kl_sites {
    kl_site *items;
    unsigned count, cap;
} kl_sites;

/* Add a site; strings are copied, json references are stolen (may be NULL). */
kl_status kl_sites_add(kl_sites *s, const char *id, kl_site_dir dir, kl_span span, const char *kernel,
                       json_t *features, json_t *params, const char *note);
void kl_sites_release(kl_sites *s);

/* The analyses of a source's functions, kept while the catalog has the source open (catalog.c). */
typedef struct kl_rules_memo kl_rules_memo;
kl_rules_memo *kl_rules_memo_new(void); /* NULL when out of memory */
void kl_rules_memo_free(kl_rules_memo *m);

/* What a transform sees. */
typedef struct kl_rule_ctx {
    const kl_source *src;
    const char *text;
    size_t len;
    const kl_task *task;   /* may be NULL: then analyses needing the task say "not applicable" */
    kl_rules_memo *memo;   /* may be NULL: then every analysis is made anew */
} kl_rule_ctx;

/* The index analysis (kl_affine_ctx_new) of function fn of ctx's source: made once per function
 * while the catalog has the source open, and shared by every transform that reads it (the analysis
 * depends on the source and the function alone; what it memoizes stays true). Give it back with
 * kl_rules_affine_done, which frees it only when ctx keeps no memo. */
kl_status kl_rules_affine(const kl_rule_ctx *ctx, TSNode fn, kl_affine_ctx **ax, kl_error *err);
void kl_rules_affine_done(const kl_rule_ctx *ctx, kl_affine_ctx *ax);

/* One parameter of a transform: its name, the values it may take (for the optimizer's
 * search) and the default. */
typedef struct kl_rule_param {
    const char *name;
    const char *const *values;  /* NULL-terminated, e.g. {"2","4","8",NULL} */
    const char *deflt;
} kl_rule_param;

typedef struct kl_rule {
    const char *name;           /* "vectorize" */
    const char *intent;         /* one line */
    const kl_rule_param *params;
    unsigned nparams;
    /* Find sites both ways. Never fails on an odd file: what it cannot analyse it skips. */
    kl_status (*find)(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err);
    /* Turn a PRESENT site into edits that remove the optimization. KL_ERR_NOT_APPLICABLE
     * with a reason in err where the analysis cannot prove the rewrite safe. */
    kl_status (*remove)(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err);
    /* Turn an APPLICABLE site into edits that apply it with params (a JSON object; missing
     * keys take defaults). KL_ERR_NOT_APPLICABLE with a reason where unsafe. */
    kl_status (*apply)(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out,
                       kl_error *err);
} kl_rule;

/* A joint preset: values of several parameters that go together, proposed at a site as one
 * try before the sweep of the first parameter (docs/rules.md, "Forward presets"). A sweep changes
 * one parameter at a time, so a point that needs several (a large pipelined tensor-core tile, a
 * register-blocked stencil) is reached only through a preset. Each is a default the hardware
 * justifies (why), never one tuned to a task. A preset that does not fit the kernel is refused
 * by the transform's own apply, with its usual reason. */
typedef struct kl_rule_preset {
    const char *name;   /* short, for notes and docs: "large-pipelined" */
    const char *params; /* "k=v k=v …": each k a parameter of the rule, each v one of its values */
    const char *when;   /* NULL, or "feature=value": proposed only at sites whose features say so */
    const char *why;    /* one line: the hardware reason */
} kl_rule_preset;

/* A transform's presets, declared in its own file beside its parameters. (A table beside
 * kl_rule rather than a field of it, so that a transform without presets needs no change.) */
typedef struct kl_rule_presets {
    const kl_rule *rule;
    const kl_rule_preset *items;
    unsigned count;
} kl_rule_presets;

extern const kl_rule_presets kl_presets_tensor_core;  /* tensor_core.c */
extern const kl_rule_presets kl_presets_smem_tile;    /* smem_tile.c */
extern const kl_rule_presets kl_presets_register_tile; /* register_tile.c */
extern const kl_rule_presets kl_presets_row_parallel; /* row_parallel.c */

/* A transform the catalog removes but does not write has no apply (NULL): what a writer would need
 * that the catalog does not have (catalog.c, a table beside the rules like the presets'). */
const char *kl_rule_no_writer(const kl_rule *rule);

/* The presets of a transform (catalog.c); NULL when it has none. */
const kl_rule_presets *kl_rule_presets_of(const kl_rule *rule);
/* A preset's parameters as a JSON object of strings (new reference); NULL with the reason in err
 * when the table is malformed (a word without '=', a name or value the rule does not declare). */
json_t *kl_rule_preset_params(const kl_rule *rule, const kl_rule_preset *p, kl_error *err);
/* Does the preset apply at a site with these features (its `when`)? */
bool kl_rule_preset_fits(const kl_rule_preset *p, const json_t *features);
/* The most parameter sets an APPLY request without parameters tries at one site: the presets
 * first, then the first parameter's values, duplicates removed. */
#define KL_RULES_TRIES_PER_SITE 6

/* The catalog (catalog.c): every transform, in a fixed order. */
extern const kl_rule *const kl_rules[];
extern const unsigned kl_rules_count;
const kl_rule *kl_rule_find(const char *name);

/* ---- transforms 1-8 (their own files) -------------------------------------------------------- */
extern const kl_rule kl_rule_unroll;        /* unroll.c */
extern const kl_rule kl_rule_launch_bounds; /* launch_bounds.c */
extern const kl_rule kl_rule_fast_math;     /* fast_math.c */
extern const kl_rule kl_rule_restrict;      /* restrict.c */
extern const kl_rule kl_rule_grid_stride;   /* grid_stride.c */
extern const kl_rule kl_rule_block_size;    /* block_size.c */
extern const kl_rule kl_rule_vectorize;     /* vectorize.c */
extern const kl_rule kl_rule_warp_reduce;   /* warp_reduce.c */
extern const kl_rule kl_rule_row_parallel;  /* row_parallel.c */
extern const kl_rule kl_rule_specialize;    /* specialize.c */
extern const kl_rule kl_rule_tensor_core;   /* tensor_core.c */
extern const kl_rule kl_rule_smem_tile;     /* smem_tile.c */
extern const kl_rule kl_rule_register_tile; /* register_tile.c */
extern const kl_rule kl_rule_double_buffer; /* double_buffer.c */
extern const kl_rule kl_rule_block_reduce;  /* block_reduce.c */
extern const kl_rule kl_rule_wgmma;         /* wgmma.c */
extern const kl_rule kl_rule_row_cache;     /* row_cache.c */
extern const kl_rule kl_rule_interior_path; /* interior_path.c */
extern const kl_rule kl_rule_const_mem;     /* const_mem.c */
/* Each is `extern const kl_rule kl_rule_<name>;` in <name>.c (docs/rules.md, "Status"). */

/* ---- helpers for transforms (catalog.c) --------------------------------------------------------- */

/* The check every result passes before it is returned: `result` parses back with no more
 * parse errors than `orig` (none if orig had none), and when orig defines extern "C"
 * launch(), the result defines it with the same parameter list (spaces ignored).
 * KL_ERR_PARSE / KL_ERR_INVALID with the reason (naming the line) otherwise. */
kl_status kl_rules_check(const kl_source *orig, const char *result, size_t len, kl_error *err);

/* A parameter's value from params (a JSON object) when it is a string there, else the rule's
 * default (numbers: kl_rule_param_int): *out is a static or params-owned string, valid while
 * params lives. False when the rule has no such parameter. */
bool kl_rule_param_str(const kl_rule *rule, const json_t *params, const char *name, const char **out);
/* The same as an integer (false when it is not one). */
bool kl_rule_param_int(const kl_rule *rule, const json_t *params, const char *name, int64_t *out);

/* Find a transform's site by id and direction (sites from rule->find). NULL when absent. */
const kl_site *kl_sites_find(const kl_sites *s, const char *id, kl_site_dir dir);
/* Not applicable with the reason when the site's features give why it cannot be rewritten
 * ("why_not": found, but refused), else KL_OK. */
kl_status kl_site_why_not(const kl_site *site, kl_error *err);

/* A site id: "<kernel>:<line>" or "<kernel>:<line>:<what>" (what may be NULL), into buf. */
void kl_site_id(char *buf, size_t size, const char *kernel, TSNode at, const char *what);

/* Set err to KL_ERR_NOT_APPLICABLE with "not applicable: <reason>" and return that status. */
kl_status kl_rule_not_applicable(kl_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Text helpers. The indentation (spaces and tabs) of the line holding off, into buf. */
void kl_rules_indent(const kl_rule_ctx *ctx, uint32_t off, char *buf, size_t size);
/* True if only blanks precede off on its line. */
bool kl_rules_starts_line(const kl_rule_ctx *ctx, uint32_t off);
/* The range deleting node n: its whole lines when it is alone on them (line start to past the
 * newline), else the node. A comment line just above starting "// <marker>" goes with it
 * (marker may be NULL). */
void kl_rules_line_range(const kl_rule_ctx *ctx, TSNode n, const char *marker, uint32_t *start, uint32_t *end);
/* Edits writing `to` for every identifier `name` in the subtree n (edit.c). */
kl_status kl_edits_rename(const kl_rule_ctx *ctx, TSNode n, const char *name, const char *to, kl_edits *out);
/* The range deleting statement st as rt_stmt_range gives it (no marker), widened over the `#pragma
 * unroll` line above it when it is a loop with one (ax: its function's analysis, may be NULL) and
 * then over a comment line above starting "// <marker>": only when st is alone on its lines. */
void kl_rules_stmt_range(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode st, const char *marker, uint32_t *start,
                         uint32_t *end);
/* The enclosing functions with the given qualifier, with an analysis each: visit calls fn
 * once per function (name, node, analysis); fn returns a status, KL_OK to go on. */
typedef kl_status (*kl_rules_fn_visit)(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax,
                                       void *user);
kl_status kl_rules_each_function(const kl_rule_ctx *ctx, const char *qualifier, kl_rules_fn_visit fn, void *user,
                                 kl_error *err);
/* The same over the __global__ functions, then the __device__ ones. */
kl_status kl_rules_each_gpu_function(const kl_rule_ctx *ctx, kl_rules_fn_visit fn, void *user, kl_error *err);
/* Run one site (r: its run state, rt_run in rules_tree.h): fn, given user (r itself or the rule's
 * state holding it), over the __global__ functions and, with device, then the __device__ ones, until
 * one sets r->done; the site's status r->st then, out of memory named in r->err, or not applicable
 * with the reason fmt (printf-style) when no function held the site. */
struct rt_run;
kl_status kl_rules_run_site(const kl_rule_ctx *ctx, kl_rules_fn_visit fn, void *user, struct rt_run *r, bool device,
                            const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#endif
