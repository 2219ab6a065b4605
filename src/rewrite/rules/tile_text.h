/*
 * Token-level text helpers shared by register-tile and double-buffer (register_tile.c,
 * double_buffer.c): substitutions of identifiers and builtins (`threadIdx.y`, `row`, `k0`)
 * inside a range of the source, done on tokens so that a misparse of the tree
 * (`threadIdx.x < K)` read as a template) cannot hide a use, and so that the inverse
 * substitutions match whatever the spacing.
 */
#ifndef KL_TILE_TEXT_H
#define KL_TILE_TEXT_H

#include <stdbool.h>
#include <stdint.h>

#include "rewrite/rules/rules_tree.h"

/* A replacement: every occurrence of the token sequence `from` ("threadIdx.y", "row",
 * "acc[kl_i][kl_j]") that is not a member (after `.` or `->`) becomes `to`. */
typedef struct tt_pair {
    const char *from;
    const char *to;
} tt_pair;

/* text[s,e) with the pairs applied left to right, first match wins (new string, free());
 * comments and spacing between the tokens that are kept are copied. NULL on OOM. */
char *tt_subst(const char *text, uint32_t s, uint32_t e, const tt_pair *pairs, unsigned n);
/* How many times `from` occurs in text[s,e) as above. */
unsigned tt_count(const char *text, uint32_t s, uint32_t e, const char *from);
/* text[s,e) with every `(X + var * R)` — X an identifier or `a.b`, R balanced — replaced by X
 * (the inverse of a stride substitution). New string, NULL on OOM. */
char *tt_unstride(const char *text, uint32_t s, uint32_t e, const char *var);
/* Re-indent every line but the first: add (delta > 0) or remove (delta < 0) spaces; NULL when
 * a line has fewer spaces to remove (or on OOM). */
char *tt_indent_tail(const char *text, int delta);
/* Does the identifier `name` occur in text[s,e) (as a token)? */
bool tt_uses(const char *text, uint32_t s, uint32_t e, const char *name);

/* A field of n, or a null node when n is null (rt_field needs a node). */
TSNode tt_field(TSNode n, const char *field);
/* ts_node_named_child / _named_child_count / _parent that accept a null node (null / 0 / null). */
TSNode tt_child(TSNode n, uint32_t i);
uint32_t tt_child_count(TSNode n);
TSNode tt_parent(TSNode n);
/* The text of node n into buf (cut to size - 1 bytes, always terminated). */
void tt_copy_text(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size);
/* Is d a declaration with the __shared__ qualifier? */
bool tt_is_shared_decl(const kl_rule_ctx *ctx, TSNode d);
/* The __shared__ declarations under n in document order, at most max of them; their count. */
unsigned tt_shared_decls(const kl_rule_ctx *ctx, TSNode n, TSNode *items, unsigned max);
/* The statements (named children that are not comments) of a compound statement, at most max;
 * also the arguments of an argument list. */
unsigned tt_stmts(TSNode compound, TSNode *out, unsigned max);
/* The `#pragma unroll` line right above byte `off` (only blanks before off on its line): the
 * offset of its '#', or off itself when there is none. */
uint32_t tt_pragma_above(const kl_rule_ctx *ctx, uint32_t off);
/* A `dim3` configuration of a launch: the arguments of `dim3(a, b)` / `dim3 g(a, b)` /
 * `dim3 g = dim3(a, b)` / `dim3 g{a, b}` (g a local of the launching function). *n receives
 * the count (at most 3). False when the expression is not such a dim3. */
bool tt_dim3_args(const kl_rule_ctx *ctx, TSNode host_body, TSNode cfg, TSNode *args, unsigned *n);
/* The byte ranges of the matches of `from` in text[s,e) (as tt_count), at most max; returns
 * how many there are. */
unsigned tt_find(const char *text, uint32_t s, uint32_t e, const char *from, uint32_t *starts, uint32_t *ends,
                 unsigned max);

#endif

