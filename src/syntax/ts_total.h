/*
 * The tree-sitter node API made total, for every stage above the parser.
 *
 * tree-sitter's node functions dereference the node they are given: ts_node_type,
 * ts_node_child_by_field_name, ts_node_parent, ts_node_end_byte … crash on a null node (one
 * that a failed lookup returned: a launch outside any function has no enclosing function, a
 * malformed declaration no declarator). Code that walks a tree of text nobody checked meets
 * such nodes everywhere, so here each of those functions is replaced, under its own name, by
 * one that answers for a null node as for a node with nothing in it: no type (""), no
 * children, no parent, no siblings, no fields, an empty byte range, not named, no error. A
 * cursor made on a null node has no current node and moves nowhere.
 *
 * Included by syntax_int.h after <tree_sitter/api.h>: every file that reads the tree gets them.
 */
#ifndef KL_TS_TOTAL_H
#define KL_TS_TOTAL_H

#include <string.h>
#include <tree_sitter/api.h>

static inline TSNode kl_ts_null(void)
{
    TSNode n;
    memset(&n, 0, sizeof n);
    return n;
}

static inline const char *kl_ts_node_type(TSNode n) { return ts_node_is_null(n) ? "" : ts_node_type(n); }
static inline TSSymbol kl_ts_node_symbol(TSNode n) { return ts_node_is_null(n) ? 0 : ts_node_symbol(n); }
static inline uint32_t kl_ts_node_end_byte(TSNode n) { return ts_node_is_null(n) ? ts_node_start_byte(n) : ts_node_end_byte(n); }
static inline TSPoint kl_ts_node_end_point(TSNode n)
{
    return ts_node_is_null(n) ? ts_node_start_point(n) : ts_node_end_point(n);
}
static inline bool kl_ts_node_is_named(TSNode n) { return !ts_node_is_null(n) && ts_node_is_named(n); }
static inline bool kl_ts_node_is_missing(TSNode n) { return !ts_node_is_null(n) && ts_node_is_missing(n); }
static inline bool kl_ts_node_is_extra(TSNode n) { return !ts_node_is_null(n) && ts_node_is_extra(n); }
static inline bool kl_ts_node_has_error(TSNode n) { return !ts_node_is_null(n) && ts_node_has_error(n); }
static inline uint32_t kl_ts_node_child_count(TSNode n) { return ts_node_is_null(n) ? 0 : ts_node_child_count(n); }
static inline uint32_t kl_ts_node_named_child_count(TSNode n)
{
    return ts_node_is_null(n) ? 0 : ts_node_named_child_count(n);
}
static inline TSNode kl_ts_node_child(TSNode n, uint32_t i)
{
    return ts_node_is_null(n) ? kl_ts_null() : ts_node_child(n, i);
}
static inline TSNode kl_ts_node_named_child(TSNode n, uint32_t i)
{
    return ts_node_is_null(n) ? kl_ts_null() : ts_node_named_child(n, i);
}
static inline TSNode kl_ts_node_child_by_field_name(TSNode n, const char *name, uint32_t len)
{
    return ts_node_is_null(n) ? kl_ts_null() : ts_node_child_by_field_name(n, name, len);
}
static inline TSNode kl_ts_node_child_by_field_id(TSNode n, TSFieldId id)
{
    return ts_node_is_null(n) ? kl_ts_null() : ts_node_child_by_field_id(n, id);
}
static inline TSNode kl_ts_node_parent(TSNode n) { return ts_node_is_null(n) ? kl_ts_null() : ts_node_parent(n); }
static inline TSNode kl_ts_node_next_sibling(TSNode n)
{
    return ts_node_is_null(n) ? kl_ts_null() : ts_node_next_sibling(n);
}
static inline TSNode kl_ts_node_prev_sibling(TSNode n)
{
    return ts_node_is_null(n) ? kl_ts_null() : ts_node_prev_sibling(n);
}
static inline TSNode kl_ts_node_next_named_sibling(TSNode n)
{
    return ts_node_is_null(n) ? kl_ts_null() : ts_node_next_named_sibling(n);
}
static inline TSNode kl_ts_node_prev_named_sibling(TSNode n)
{
    return ts_node_is_null(n) ? kl_ts_null() : ts_node_prev_named_sibling(n);
}
static inline TSNode kl_ts_node_descendant_for_byte_range(TSNode n, uint32_t a, uint32_t b)
{
    return ts_node_is_null(n) ? kl_ts_null() : ts_node_descendant_for_byte_range(n, a, b);
}
static inline TSNode kl_ts_node_named_descendant_for_byte_range(TSNode n, uint32_t a, uint32_t b)
{
    return ts_node_is_null(n) ? kl_ts_null() : ts_node_named_descendant_for_byte_range(n, a, b);
}
/* A cursor on a null node keeps tree == NULL: it has no current node and never moves. */
static inline TSNode kl_ts_tree_cursor_current_node(const TSTreeCursor *c)
{
    return c->tree ? ts_tree_cursor_current_node(c) : kl_ts_null();
}
static inline bool kl_ts_tree_cursor_goto_first_child(TSTreeCursor *c)
{
    return c->tree && ts_tree_cursor_goto_first_child(c);
}
static inline bool kl_ts_tree_cursor_goto_next_sibling(TSTreeCursor *c)
{
    return c->tree && ts_tree_cursor_goto_next_sibling(c);
}
static inline bool kl_ts_tree_cursor_goto_parent(TSTreeCursor *c) { return c->tree && ts_tree_cursor_goto_parent(c); }
static inline const char *kl_ts_tree_cursor_current_field_name(const TSTreeCursor *c)
{
    return c->tree ? ts_tree_cursor_current_field_name(c) : NULL;
}
static inline TSFieldId kl_ts_tree_cursor_current_field_id(const TSTreeCursor *c)
{
    return c->tree ? ts_tree_cursor_current_field_id(c) : 0;
}

#define ts_node_type(n) kl_ts_node_type(n)
#define ts_node_symbol(n) kl_ts_node_symbol(n)
#define ts_node_end_byte(n) kl_ts_node_end_byte(n)
#define ts_node_end_point(n) kl_ts_node_end_point(n)
#define ts_node_is_named(n) kl_ts_node_is_named(n)
#define ts_node_is_missing(n) kl_ts_node_is_missing(n)
#define ts_node_is_extra(n) kl_ts_node_is_extra(n)
#define ts_node_has_error(n) kl_ts_node_has_error(n)
#define ts_node_child_count(n) kl_ts_node_child_count(n)
#define ts_node_named_child_count(n) kl_ts_node_named_child_count(n)
#define ts_node_child(n, i) kl_ts_node_child(n, i)
#define ts_node_named_child(n, i) kl_ts_node_named_child(n, i)
#define ts_node_child_by_field_name(n, s, l) kl_ts_node_child_by_field_name(n, s, l)
#define ts_node_child_by_field_id(n, f) kl_ts_node_child_by_field_id(n, f)
#define ts_node_parent(n) kl_ts_node_parent(n)
#define ts_node_next_sibling(n) kl_ts_node_next_sibling(n)
#define ts_node_prev_sibling(n) kl_ts_node_prev_sibling(n)
#define ts_node_next_named_sibling(n) kl_ts_node_next_named_sibling(n)
#define ts_node_prev_named_sibling(n) kl_ts_node_prev_named_sibling(n)
#define ts_node_descendant_for_byte_range(n, a, b) kl_ts_node_descendant_for_byte_range(n, a, b)
#define ts_node_named_descendant_for_byte_range(n, a, b) kl_ts_node_named_descendant_for_byte_range(n, a, b)
#define ts_tree_cursor_current_node(c) kl_ts_tree_cursor_current_node(c)
#define ts_tree_cursor_goto_first_child(c) kl_ts_tree_cursor_goto_first_child(c)
#define ts_tree_cursor_goto_next_sibling(c) kl_ts_tree_cursor_goto_next_sibling(c)
#define ts_tree_cursor_goto_parent(c) kl_ts_tree_cursor_goto_parent(c)
#define ts_tree_cursor_current_field_name(c) kl_ts_tree_cursor_current_field_name(c)
#define ts_tree_cursor_current_field_id(c) kl_ts_tree_cursor_current_field_id(c)

#endif
