/* The combining step of a shared-memory tree reduction (tree_step.h). */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules_tree.h"
#include "rewrite/rules/tree_step.h"
#include "syntax/affine.h"

/* Is t (an element's text without blanks) sh[i] (j NULL) or sh[i+j]? */
static bool elem_is(const char *t, const char *sh, const char *i, const char *j)
{
    size_t n = strlen(sh);
    if (strncmp(t, sh, n) || t[n] != '[') return false;
    t += n + 1;
    n = strlen(i);
    if (strncmp(t, i, n)) return false;
    t += n;
    if (j) {
        n = strlen(j);
        if (*t != '+' || strncmp(t + 1, j, n)) return false;
        t += 1 + n;
    }
    return !strcmp(t, "]");
}

bool kl_tree_step(const kl_rule_ctx *ctx, TSNode assign, const char *tid, const char *s, char *sh, size_t shsize, char *op,
                  size_t opsize)
{
    if (!rt_is(assign, "assignment_expression")) return false;
    TSNode l = rt_field(assign, "left");
    if (!rt_is(l, "subscript_expression") || !rt_is(rt_field(l, "argument"), "identifier") ||
        !rt_text_copy(ctx, rt_field(l, "argument"), sh, shsize))
        return false;
    /* the two operands combined into l, and the operation's node (none: "+") */
    TSNode r = kl_ast_unparen(rt_field(assign, "right")), op_node = rt_field(assign, "operator"), x, y, fn = {0};
    if (rt_text_is(ctx, op_node, "+=")) {
        x = l, y = r;
    } else if (!rt_text_is(ctx, op_node, "=")) {
        return false;
    } else if (rt_is(r, "binary_expression") && rt_op_is(ctx, r, "+")) {
        x = rt_field(r, "left"), y = rt_field(r, "right");
    } else if (rt_is(r, "call_expression") && rt_is(rt_field(r, "function"), "identifier") &&
               ts_node_named_child_count(rt_field(r, "arguments")) == 2) {
        /* fmaxf, max, or the file's own combining function: the tree already relies on it being
         * associative and commutative */
        fn = rt_field(r, "function");
        x = ts_node_named_child(rt_field(r, "arguments"), 0), y = ts_node_named_child(rt_field(r, "arguments"), 1);
    } else {
        return false;
    }
    char *lt = rt_text_unblank(ctx, l), *xt = rt_text_unblank(ctx, x), *yt = rt_text_unblank(ctx, y);
    bool ok = lt && xt && yt && elem_is(lt, sh, tid, NULL) &&
              ((elem_is(xt, sh, tid, NULL) && (elem_is(yt, sh, tid, s) || elem_is(yt, sh, s, tid))) ||
               (elem_is(yt, sh, tid, NULL) && (elem_is(xt, sh, tid, s) || elem_is(xt, sh, s, tid))));
    free(lt), free(xt), free(yt);
    if (!ok) return false;
    if (ts_node_is_null(fn)) return kl_snprintf(op, opsize, "+");
    return rt_text_copy(ctx, fn, op, opsize);
}
