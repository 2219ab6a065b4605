/* specialize's private interface between specialize.c (the rule: dispatch sites, find, apply) and
 * specialize_remove.c (the remove direction). Not for other transforms. */
#ifndef KL_RULES_SPECIALIZE_H
#define KL_RULES_SPECIALIZE_H

#include <stdint.h>

#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "util/util.h"

#define SP_MAXFN 64
#define SP_MAXITEM 256
#define SP_MAXBR 32
#define SP_MAXRANGE 64

/* Identifier tokens of a text (comments, strings and numbers skipped). */
typedef struct tok {
    uint32_t start, end;
} tok;

typedef struct toks {
    tok *items;
    unsigned n, cap;
} toks;

/* Byte ranges. */
typedef struct ranges {
    uint32_t a[SP_MAXRANGE], b[SP_MAXRANGE];
    unsigned n;
} ranges;

/* The file's functions, which are kernels, and which kernels each host function reaches. */
typedef struct fileinfo {
    rt_func fs[SP_MAXFN];
    unsigned nf;
    int kernel_of[SP_MAXFN];    /* bit index of a __global__ function, -1 otherwise */
    uint64_t reach[SP_MAXFN];   /* host functions: the kernels they launch, through file helpers */
} fileinfo;

/* A dispatch: an if / else-if chain or a switch whose branches reach different kernels. */
typedef enum { FORM_RETURN, FORM_CHAIN, FORM_SWITCH } sp_form;

typedef struct branch {
    TSNode cond;     /* null for else / rest / default */
    TSNode body;     /* the statement (a compound, a single statement, a case_statement); null: rest */
    uint64_t mask;
} branch;

typedef struct dispatch {
    sp_form form;
    TSNode stmt;             /* the if / switch */
    const rt_func *host;
    branch br[SP_MAXBR];
    unsigned nbr;
    int general;             /* branch index, -1 when undecided */
    char why[300];
} dispatch;

/* specialize.c */
bool specialize__is_id(char c);
/* The identifier tokens of s[0, len) into out (false: out of memory). */
bool specialize__tokenize(const char *s, size_t len, toks *out);
bool specialize__tok_is(const char *text, const tok *t, const char *name);
bool specialize__ranges_add(ranges *r, uint32_t a, uint32_t b);
bool specialize__ranges_has(const ranges *r, uint32_t off);
/* Is the line starting at `ls` blank? */
bool specialize__line_blank(const kl_rule_ctx *ctx, uint32_t ls);
/* Does the line starting at `ls` hold only a `//` comment? */
bool specialize__line_comment(const kl_rule_ctx *ctx, uint32_t ls);
/* The whole lines of [a, b) when only blanks (and a trailing `//` comment) surround it. */
bool specialize__whole_lines(const kl_rule_ctx *ctx, uint32_t a, uint32_t b, uint32_t *ra, uint32_t *rb);
/* A line start moved up over the `//` comment lines just above it (not into the file's header). */
uint32_t specialize__comments_above(const kl_rule_ctx *ctx, uint32_t ls);
/* [a, b) (trimmed) re-indented at `indent`, the other lines kept relative to the least indented. */
void specialize__emit_block(const kl_rule_ctx *ctx, uint32_t a, uint32_t b, const char *indent, kl_strbuf *sb);
void specialize__file_info(const kl_rule_ctx *ctx, fileinfo *fi);
/* Recognise a dispatch at statement s of host h. False: not one (kernels not different). */
bool specialize__dispatch_at(const kl_rule_ctx *ctx, const fileinfo *fi, const rt_func *h, TSNode s, dispatch *d);

/* specialize_remove.c */
kl_status specialize__remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err);

#endif
