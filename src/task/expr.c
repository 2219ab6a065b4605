/* Integer size expressions: + - * / % ( ), unary minus, integer literals, size names.
 * A recursive-descent parser that evaluates as it goes, on int64 with C semantics. */
#include <string.h>

#include "task/task_int.h"
#include "util/util.h"

#define EXPR_MAX_DEPTH 64

typedef struct expr_parser {
    const char *text;
    size_t pos;
    const char *const *names;
    const int64_t *values;
    unsigned n;
    unsigned depth;
    kl_error *err;
} expr_parser;

static kl_status fail_at(expr_parser *p, size_t pos, const char *what)
{
    return kl_error_set(p->err, KL_ERR_PARSE, "column %zu: %s", pos + 1, what);
}

/* Arithmetic faults (overflow, division by zero) depend on the sizes: KL_ERR_INVALID. */
static kl_status arith_at(expr_parser *p, size_t pos, const char *what)
{
    return kl_error_set(p->err, KL_ERR_INVALID, "column %zu: %s", pos + 1, what);
}

static void skip_space(expr_parser *p)
{
    while (p->text[p->pos] == ' ' || p->text[p->pos] == '\t' || p->text[p->pos] == '\n' || p->text[p->pos] == '\r')
        p->pos++;
}

static bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static kl_status parse_expr(expr_parser *p, int64_t *out);

static kl_status parse_primary(expr_parser *p, int64_t *out)
{
    skip_space(p);
    size_t start = p->pos;
    char c = p->text[start];
    if (is_digit(c)) {
        int64_t v = 0;
        while (is_digit(p->text[p->pos])) {
            int d = p->text[p->pos] - '0';
            if (__builtin_mul_overflow(v, (int64_t)10, &v) || __builtin_add_overflow(v, (int64_t)d, &v))
                return fail_at(p, start, "integer literal overflows int64");
            p->pos++;
        }
        if (is_ident_start(p->text[p->pos]) || p->text[p->pos] == '.')
            return fail_at(p, p->pos, "expected an integer literal (digits only)");
        *out = v;
        return KL_OK;
    }
    if (is_ident_start(c)) {
        while (is_ident_start(p->text[p->pos]) || is_digit(p->text[p->pos])) p->pos++;
        size_t len = p->pos - start;
        for (unsigned i = 0; i < p->n; i++) {
            if (strlen(p->names[i]) == len && !memcmp(p->names[i], p->text + start, len)) {
                *out = p->values[i];
                return KL_OK;
            }
        }
        return kl_error_set(p->err, KL_ERR_PARSE, "column %zu: '%.*s' is not a size (sizes are declared in \"sizes\")",
                            start + 1, (int)len, p->text + start);
    }
    if (c == '(') {
        p->pos++;
        kl_status st = parse_expr(p, out);
        if (st != KL_OK) return st;
        skip_space(p);
        if (p->text[p->pos] != ')') return fail_at(p, p->pos, "expected ')'");
        p->pos++;
        return KL_OK;
    }
    if (c == '\0') return fail_at(p, start, "expected a number, a size or '(' but the expression ended");
    return kl_error_set(p->err, KL_ERR_PARSE, "column %zu: expected a number, a size or '(', not '%c'", start + 1, c);
}

static kl_status parse_unary(expr_parser *p, int64_t *out)
{
    skip_space(p);
    size_t start = p->pos;
    char c = p->text[start];
    if (c == '-' || c == '+') {
        if (++p->depth > EXPR_MAX_DEPTH) return fail_at(p, start, "expression nested too deeply");
        p->pos++;
        int64_t v;
        kl_status st = parse_unary(p, &v);
        p->depth--;
        if (st != KL_OK) return st;
        if (c == '-') {
            if (__builtin_sub_overflow((int64_t)0, v, out)) return arith_at(p, start, "negation overflows int64");
        } else {
            *out = v;
        }
        return KL_OK;
    }
    if (c == '(') {
        if (++p->depth > EXPR_MAX_DEPTH) return fail_at(p, start, "expression nested too deeply");
        kl_status st = parse_primary(p, out);
        p->depth--;
        return st;
    }
    return parse_primary(p, out);
}

static kl_status parse_term(expr_parser *p, int64_t *out)
{
    int64_t acc;
    kl_status st = parse_unary(p, &acc);
    if (st != KL_OK) return st;
    for (;;) {
        skip_space(p);
        char op = p->text[p->pos];
        if (op != '*' && op != '/' && op != '%') break;
        size_t at = p->pos++;
        int64_t rhs;
        st = parse_unary(p, &rhs);
        if (st != KL_OK) return st;
        if (op == '*') {
            if (__builtin_mul_overflow(acc, rhs, &acc)) return arith_at(p, at, "multiplication overflows int64");
        } else {
            if (rhs == 0) return arith_at(p, at, op == '/' ? "division by zero" : "remainder by zero");
            if (acc == INT64_MIN && rhs == -1) return arith_at(p, at, "division overflows int64");
            acc = op == '/' ? acc / rhs : acc % rhs;
        }
    }
    *out = acc;
    return KL_OK;
}

static kl_status parse_expr(expr_parser *p, int64_t *out)
{
    int64_t acc;
    kl_status st = parse_term(p, &acc);
    if (st != KL_OK) return st;
    for (;;) {
        skip_space(p);
        char op = p->text[p->pos];
        if (op != '+' && op != '-') break;
        size_t at = p->pos++;
        int64_t rhs;
        st = parse_term(p, &rhs);
        if (st != KL_OK) return st;
        bool ovf = op == '+' ? __builtin_add_overflow(acc, rhs, &acc) : __builtin_sub_overflow(acc, rhs, &acc);
        if (ovf) return arith_at(p, at, op == '+' ? "addition overflows int64" : "subtraction overflows int64");
    }
    *out = acc;
    return KL_OK;
}

kl_status kl_expr_eval(const char *expr, const char *const *names, const int64_t *values, unsigned n, int64_t *out,
                       kl_error *err)
{
    if (!expr) return kl_error_set(err, KL_ERR_INVALID, "no expression");
    expr_parser p = {expr, 0, names, values, n, 0, err};
    int64_t v = 0;
    kl_status st = parse_expr(&p, &v);
    if (st != KL_OK) return st;
    skip_space(&p);
    if (p.text[p.pos] != '\0') {
        char c = p.text[p.pos];
        if (c == ')') return fail_at(&p, p.pos, "unbalanced ')'");
        return kl_error_set(err, KL_ERR_PARSE, "column %zu: expected an operator (+ - * / %%) or the end, not '%c'",
                            p.pos + 1, c);
    }
    *out = v;
    return KL_OK;
}
