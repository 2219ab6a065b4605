/* The model of a CUDA file (model.c, model_walk.c): what its two files share. Private to
 * src/syntax/model*.c: the names are model__*. model.c holds the strings, the model's vectors,
 * the node kinds, the text helpers and what each kind of node adds to the model (functions,
 * loops, uses, shared declarations, subscripts); model_walk.c the walk over the tree, the
 * #pragma lines, the cross references, finishing and the public accessors. */
#ifndef KL_SYNTAX_MODEL_INT_H
#define KL_SYNTAX_MODEL_INT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "syntax/syntax_int.h"

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    char data[];
} chunk;

typedef struct arena {
    chunk *head;
    bool failed;
} arena;

/* offsets of an item's sub-arrays in the pools, while building */
typedef struct model__firsts {
    unsigned a, b, c;
} model__firsts;

#define VEC(T, name)                                                                            \
    T *name;                                                                                    \
    unsigned n_##name, cap_##name

struct kl_model {
    const kl_source *src;
    arena strings;
    VEC(kl_function, functions);
    VEC(kl_launch, launches);
    VEC(kl_loop, loops);
    VEC(kl_pragma, pragmas);
    VEC(kl_shared_decl, shared);
    VEC(kl_use, uses);
    VEC(kl_access, accesses);
    /* pools */
    VEC(kl_param, params);
    VEC(kl_tparam, tparams);
    VEC(kl_text, texts);
    /* build-time offsets, parallel to functions, launches, shared, accesses */
    VEC(model__firsts, fn_firsts);
    VEC(model__firsts, launch_firsts);
    VEC(model__firsts, shared_firsts);
    VEC(model__firsts, access_firsts);
    /* function indices sorted by name, for lookups */
    unsigned *by_name;
    /* per function, the indices of its items (kl_model_items_of): item_first[w][f] ..
     * item_first[w][f + 1] in item_order[w] */
    unsigned *item_first[KL_ITEMS_COUNT];
    unsigned *item_order[KL_ITEMS_COUNT];
    bool failed;
};

/* Append a zeroed item to vector `name` of model m; evaluates to its index, or -1 on OOM. */
#define PUSH(m, name)                                                                                  \
    (model__grow((void **)&(m)->name, &(m)->cap_##name, (m)->n_##name + 1, sizeof *(m)->name)                  \
         ? (memset(&(m)->name[(m)->n_##name], 0, sizeof *(m)->name), (int)(m)->n_##name++)              \
         : ((m)->failed = true, -1))

enum nk {
    NK_OTHER = 0,
    NK_FUNCTION_DEFINITION, NK_TEMPLATE_DECLARATION, NK_LINKAGE_SPECIFICATION, NK_DECLARATION_LIST,
    NK_FOR, NK_WHILE, NK_DO, NK_RANGE_FOR,
    NK_SUBSCRIPT, NK_CALL, NK_DECLARATION, NK_TYPE_IDENTIFIER, NK_QUALIFIED_IDENTIFIER, NK_FIELD_EXPRESSION,
    NK_ASM, NK_RETURN, NK_LAMBDA, NK_PREPROC_IF, NK_PREPROC_IFDEF, NK_PREPROC_ELIF, NK_PREPROC_ELIFDEF,
    NK_PREPROC_ELSE, NK_PARENTHESIZED, NK_ASSIGNMENT, NK_UPDATE, NK_POINTER_EXPRESSION, NK_NAMESPACE_ALIAS,
    NK_COMMENT, NK_TYPE_DESCRIPTOR, NK_PARAMETER_DECLARATION, NK_FIELD_DECLARATION, NK_INIT_DECLARATOR,
    NK_POINTER_DECLARATOR, NK_ABSTRACT_POINTER_DECLARATOR, NK_REFERENCE_DECLARATOR, NK_ARRAY_DECLARATOR,
    NK_FUNCTION_DECLARATOR, NK_IDENTIFIER, NK_TEMPLATE_FUNCTION, NK_TEMPLATE_ARGUMENT_LIST,
    NK_KERNEL_CALL_SYNTAX, NK_TYPE_QUALIFIER, NK_STORAGE_CLASS, NK_LAUNCH_BOUNDS, NK_STRING_LITERAL,
    NK_CONCATENATED_STRING, NK_STRING_CONTENT, NK_RAW_STRING_LITERAL, NK_ABSTRACT_REFERENCE_DECLARATOR,
    NK_ABSTRACT_ARRAY_DECLARATOR, NK_PARENTHESIZED_DECLARATOR, NK_TEMPLATE_TYPE, NK_COUNT
};

/* A frame of the walk: the node and the context its descendants inherit. */
typedef struct model__frame {
    TSNode node;
    uint8_t kind;
    TSFieldId field;          /* the node's field in its parent */
    int function, loop;
    unsigned depth;           /* loop depth */
    bool in_lambda, in_scoped; /* in_scoped: inside a recorded wmma::/cg:: name */
    const char *guard;        /* preprocessor guard of this node */
    const char *then_guard, *else_guard; /* conditionals: for their branches */
} model__frame;

typedef struct model__alias {
    const char *name;
    kl_use_kind kind;
} model__alias;

typedef struct model__builder {
    kl_model *m;
    const char *text;
    size_t len;
    uint8_t *kinds;           /* symbol -> enum nk */
    uint32_t nsymbols;
    struct {
        TSFieldId alternative, arguments, argument, body, condition, declarator, field, function, indices,
            initializer, left, name, operator_, parameters, right, scope, size, type, update, value, assembly_code,
            default_value, default_type;
    } f;
    model__frame *stack;
    unsigned nstack, cap_stack;
    model__alias aliases[16];
    unsigned naliases;
    /* the index of the first shared declaration of the current function (-1: none yet) */
    int fn_shared_first;
    int fn_shared_owner;
    /* file-scope shared declarations */
    unsigned *file_shared;
    unsigned nfile_shared, cap_file_shared;
} model__builder;

static inline uint8_t model__kind_of(const model__builder *b, TSNode n)
{
    TSSymbol s = ts_node_symbol(n);
    return s < b->nsymbols ? b->kinds[s] : NK_OTHER;
}

/* ---- model.c ---- */

void model__arena_release(arena *a);
bool model__grow(void **items, unsigned *cap, unsigned need, size_t size);
const char *model__str_n(model__builder *b, const char *s, size_t n);
const char *model__str(model__builder *b, const char *s);
const char *model__node_str(model__builder *b, TSNode n);
const char *model__collapsed(model__builder *b, uint32_t a, uint32_t e, uint32_t skip_a, uint32_t skip_e);
const char *model__join_guard(model__builder *b, const char *outer, const char *cond);
const char *model__negated(model__builder *b, const char *cond);
void model__on_function(model__builder *b, model__frame *fr);
void model__on_loop(model__builder *b, model__frame *fr);
void model__on_qualified(model__builder *b, model__frame *fr);
void model__on_alias(model__builder *b, model__frame *fr);
void model__on_call(model__builder *b, model__frame *fr);
void model__on_type_identifier(model__builder *b, model__frame *fr);
void model__on_field_expression(model__builder *b, model__frame *fr);
void model__on_asm(model__builder *b, model__frame *fr);
void model__on_declaration(model__builder *b, model__frame *fr);
void model__on_subscript(model__builder *b, model__frame *fr);

#endif
