/* block-size's private interface between block_size.c (the rule: sites, groups, changes) and
 * block_size_checks.c (what depends on the thread count). Not for other transforms. */
#ifndef KL_RULES_BLOCK_SIZE_H
#define KL_RULES_BLOCK_SIZE_H

#include <stdint.h>

#include "rewrite/rules/rules.h"
#include "syntax/affine.h"

/* One block size: a named constant shared by the launches that name it, or one launch's literal. */
typedef struct bs_group {
    char id[256];
    char kernel[128];
    char name[128];        /* the constant's name; "" for a literal */
    int64_t value;
    TSNode def;            /* the node holding the definition (declaration, preproc_def, literal) */
    uint32_t val_start, val_end; /* the value's text, replaced on a change */
    unsigned launches[32]; /* indices into the launch list */
    unsigned nlaunch;
    char why[300];         /* not empty: why it cannot change */
} bs_group;

/* One extent of a 2-D block: a named constant or a literal at the launch. */
typedef struct bs_dim {
    char name[128];        /* the constant's name; "" for a literal */
    char text[128];        /* the extent as written at the launch */
    int64_t value;
    TSNode def;            /* the definition (declaration, preproc_def) or the literal */
    uint32_t val_start, val_end;
} bs_dim;

/* One 2-D block shape: the launches whose block is dim3(X, Y) of the same two constants, or
 * one launch's shape when an extent is a literal. */
typedef struct bs_group2 {
    char id[256];
    char kernel[128];
    bs_dim d[2];           /* x, y */
    TSNode def;            /* what the site is about: the first constant's definition, or the launch */
    unsigned launches[32];
    unsigned nlaunch;
    char why[300];
} bs_group2;

typedef struct bs_state {
    const kl_rule_ctx *ctx;
    kl_launch_sites ls;
    bs_group *groups;
    unsigned count;
    bs_group2 *groups2;
    unsigned count2;
} bs_state;

#define BS2_NAMES 64     /* file constants followed from X and Y */

/* File constants followed from a block size: the extents' names and those derived from them. */
typedef struct bs_names {
    char v[BS2_NAMES][128];
    unsigned n;
} bs_names;

/* In a kernel: a register array sized by, or a template argument naming, a followed constant
 * (block_size__find_width, a kl_ast_walk visitor). */
typedef struct bs_width_scan {
    const kl_source *src;
    const bs_names *ns;
    TSNode hit;
    char name[128];
    const char *what;
} bs_width_scan;

/* block_size.c */
/* Does the text name `name` as a whole identifier? */
bool block_size__text_mentions(const char *t, const char *name);
/* A number literal's value (suffixes u, l allowed). */
bool block_size__number(const kl_source *src, TSNode n, int64_t *v);
/* Does the value text [a, b) of t name another identifier (a size derived from other constants)? */
bool block_size__derived(const char *t, uint32_t a, uint32_t b);

/* block_size_checks.c: the names */
bool block_size__names_has(const bs_names *ns, const char *name);
void block_size__names_add(bs_names *ns, const char *name);
/* The first of the names the text mentions, or NULL. */
const char *block_size__names_in_text(const bs_names *ns, const char *t);
/* The same for a node: the name into buf ("" when none). */
bool block_size__names_in(const kl_source *src, const bs_names *ns, TSNode n, char *buf, size_t size);
/* Constants whose definitions mention a name of ns join it, until none does: the
 * `const`/`constexpr` declarations and #defines directly under `scope`. */
void block_size__names_close(const kl_source *src, TSNode scope, bs_names *ns);
bool block_size__find_width(TSNode n, void *user);

/* block_size_checks.c: the checks */
/* The kernels named `kernel` in src (overloads and template instances), at most max. */
unsigned block_size__kernels_named(const kl_source *src, const char *kernel, TSNode *out, unsigned max);
/* Why a 1-D block of g cannot become nb threads in kernel fn (why stays "" when it can). */
void block_size__depends_1d(const kl_source *src, TSNode fn, const bs_group *g, int64_t nb, char *why, size_t size);
/* After the change e of a 2-D group: the loops of each launched kernel, old against new; why says
 * what a new extent breaks. */
kl_status block_size__check_loops(bs_state *s, const bs_group2 *g, const kl_edits *e, const int64_t ext_new[2], char *why,
                                  size_t size);

#endif
