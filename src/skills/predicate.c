/* Preconditions: parse a predicate, evaluate it in an environment, match a whole card. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skills/skills_int.h"

const char *kl_truth_name(kl_truth truth)
{
    switch (truth) {
    case KL_TRUTH_HOLDS: return "holds";
    case KL_TRUTH_FAILS: return "fails";
    default: return "unknown";
    }
}

typedef struct lexer {
    const char *text, *p;
    kl_error *err;
} lexer;

static void skip_blanks(lexer *lx)
{
    while (*lx->p == ' ' || *lx->p == '\t') lx->p++;
}

static unsigned column(const lexer *lx) { return (unsigned)(lx->p - lx->text) + 1; }

static kl_status fail_at(lexer *lx, const char *what)
{
    return kl_error_set(lx->err, KL_ERR_INVALID, "\"%s\": column %u: %s", lx->text, column(lx), what);
}

/* A decimal integer with an optional sign, into *out. */
static bool read_integer(lexer *lx, int64_t *out)
{
    const char *s = lx->p;
    if (*s == '-' || *s == '+') s++;
    if (!isdigit((unsigned char)*s)) return false;
    errno = 0;
    char *end;
    long long v = strtoll(lx->p, &end, 10);
    if (errno == ERANGE) return false;
    *out = v;
    lx->p = end;
    return true;
}

kl_status kl_predicate_parse(const char *text, kl_predicate *out, kl_error *err)
{
    memset(out, 0, sizeof *out);
    if (!text) return kl_error_set(err, KL_ERR_INVALID, "predicate: expected a string");
    lexer lx = {text, text, err};
    skip_blanks(&lx);
    /* NAME */
    const char *n0 = lx.p;
    if (!(isalpha((unsigned char)*lx.p) || *lx.p == '_')) return fail_at(&lx, "expected a name (a task size or a feature)");
    while (isalnum((unsigned char)*lx.p) || *lx.p == '_' || *lx.p == '.') lx.p++;
    size_t nlen = (size_t)(lx.p - n0);
    if (nlen >= sizeof out->name) {
        lx.p = n0;
        return fail_at(&lx, "the name is longer than 63 characters");
    }
    memcpy(out->name, n0, nlen);
    out->name[nlen] = '\0';
    skip_blanks(&lx);
    /* % M */
    if (*lx.p == '%') {
        lx.p++;
        skip_blanks(&lx);
        int64_t m;
        const char *m0 = lx.p;
        if (*lx.p == '-' || *lx.p == '+' || !read_integer(&lx, &m) || m <= 0) {
            lx.p = m0;
            return fail_at(&lx, "expected a positive integer after '%'");
        }
        out->modulus = m;
        skip_blanks(&lx);
    }
    /* OP */
    const char *op0 = lx.p;
    if (!strncmp(lx.p, "==", 2)) out->op = KL_PRED_EQ, lx.p += 2;
    else if (!strncmp(lx.p, "!=", 2)) out->op = KL_PRED_NE, lx.p += 2;
    else if (!strncmp(lx.p, "<=", 2)) out->op = KL_PRED_LE, lx.p += 2;
    else if (!strncmp(lx.p, ">=", 2)) out->op = KL_PRED_GE, lx.p += 2;
    else if (*lx.p == '<') out->op = KL_PRED_LT, lx.p++;
    else if (*lx.p == '>') out->op = KL_PRED_GT, lx.p++;
    else return fail_at(&lx, "expected an operator (== != < <= > >=)");
    if (*lx.p == '=') {
        lx.p = op0;
        return fail_at(&lx, "expected an operator (== != < <= > >=)");
    }
    skip_blanks(&lx);
    /* VALUE */
    const char *v0 = lx.p;
    if (*lx.p == '"') {
        lx.p++;
        size_t k = 0;
        for (;;) {
            char c = *lx.p;
            if (c == '\0') {
                lx.p = v0;
                return fail_at(&lx, "unterminated string (a '\"' without its closing '\"')");
            }
            if (c == '"') break;
            if (c == '\\') {
                char e = lx.p[1];
                if (e != '"' && e != '\\') return fail_at(&lx, "unknown escape (only \\\" and \\\\)");
                c = e;
                lx.p++;
            }
            if (k + 1 >= sizeof out->string) {
                lx.p = v0;
                return fail_at(&lx, "the string is longer than 127 bytes");
            }
            out->string[k++] = c;
            lx.p++;
        }
        out->string[k] = '\0';
        lx.p++;
        out->kind = KL_PRED_STRING;
    } else if (!strncmp(lx.p, "true", 4) && !isalnum((unsigned char)lx.p[4]) && lx.p[4] != '_') {
        out->kind = KL_PRED_BOOL, out->boolean = true, lx.p += 4;
    } else if (!strncmp(lx.p, "false", 5) && !isalnum((unsigned char)lx.p[5]) && lx.p[5] != '_') {
        out->kind = KL_PRED_BOOL, out->boolean = false, lx.p += 5;
    } else if (read_integer(&lx, &out->integer)) {
        out->kind = KL_PRED_INT;
        if (*lx.p == '.' || *lx.p == 'e' || *lx.p == 'E') {
            lx.p = v0;
            return fail_at(&lx, "expected an integer (predicates compare integers, not reals)");
        }
    } else {
        return fail_at(&lx, "expected a value: an integer, a quoted string, true or false");
    }
    skip_blanks(&lx);
    if (*lx.p) return fail_at(&lx, "unexpected text after the value");
    if (out->kind != KL_PRED_INT && out->op != KL_PRED_EQ && out->op != KL_PRED_NE) {
        lx.p = op0;
        return fail_at(&lx, out->kind == KL_PRED_STRING ? "a string compares only with == and !="
                                                        : "a boolean compares only with == and !=");
    }
    if (out->modulus && out->kind != KL_PRED_INT) {
        lx.p = v0;
        return fail_at(&lx, "expected an integer: the remainder of '%' is compared with a number");
    }
    return KL_OK;
}

static bool compare_num(double a, kl_pred_op op, double b)
{
    switch (op) {
    case KL_PRED_EQ: return a == b;
    case KL_PRED_NE: return a != b;
    case KL_PRED_LT: return a < b;
    case KL_PRED_LE: return a <= b;
    case KL_PRED_GT: return a > b;
    default: return a >= b;
    }
}

static bool compare_int(int64_t a, kl_pred_op op, int64_t b)
{
    switch (op) {
    case KL_PRED_EQ: return a == b;
    case KL_PRED_NE: return a != b;
    case KL_PRED_LT: return a < b;
    case KL_PRED_LE: return a <= b;
    case KL_PRED_GT: return a > b;
    default: return a >= b;
    }
}

static const char *kind_of(const json_t *v)
{
    if (json_is_string(v)) return "a string";
    if (json_is_boolean(v)) return "a boolean";
    if (json_is_integer(v)) return "an integer";
    if (json_is_real(v)) return "a number";
    if (json_is_object(v)) return "an object";
    if (json_is_array(v)) return "an array";
    return "null";
}

#define WHY(...)                                                                                                       \
    do {                                                                                                               \
        if (why) kl_snprintf(why, why_size, __VA_ARGS__);                                                              \
    } while (0)

kl_truth kl_predicate_eval(const kl_predicate *pred, const json_t *env, char *why, size_t why_size)
{
    if (why && why_size) why[0] = '\0';
    json_t *v = json_is_object(env) ? json_object_get(env, pred->name) : NULL;
    if (!v || json_is_null(v)) {
        WHY("%s is not in the environment", pred->name);
        return KL_TRUTH_UNKNOWN;
    }
    bool ok;
    if (pred->modulus) {
        if (!json_is_integer(v)) {
            WHY("%s is %s, not an integer", pred->name, kind_of(v));
            return KL_TRUTH_UNKNOWN;
        }
        int64_t x = json_integer_value(v), r = x % pred->modulus;
        ok = compare_int(r, pred->op, pred->integer);
        WHY("%s = %lld, %s %% %lld = %lld", pred->name, (long long)x, pred->name, (long long)pred->modulus,
            (long long)r);
    } else if (pred->kind == KL_PRED_STRING) {
        if (!json_is_string(v)) {
            WHY("%s is %s, not a string", pred->name, kind_of(v));
            return KL_TRUTH_UNKNOWN;
        }
        bool eq = !strcmp(json_string_value(v), pred->string);
        ok = pred->op == KL_PRED_EQ ? eq : !eq;
        WHY("%s = \"%s\"", pred->name, json_string_value(v));
    } else if (pred->kind == KL_PRED_BOOL) {
        bool b;
        if (json_is_boolean(v)) b = json_is_true(v);
        else if (json_is_integer(v)) b = json_integer_value(v) != 0;
        else {
            WHY("%s is %s, not a boolean", pred->name, kind_of(v));
            return KL_TRUTH_UNKNOWN;
        }
        ok = pred->op == KL_PRED_EQ ? b == pred->boolean : b != pred->boolean;
        WHY("%s = %s", pred->name, b ? "true" : "false");
    } else {
        if (json_is_integer(v)) {
            ok = compare_int(json_integer_value(v), pred->op, pred->integer);
            WHY("%s = %lld", pred->name, (long long)json_integer_value(v));
        } else if (json_is_real(v)) {
            double d = json_real_value(v);
            if (isnan(d)) {
                WHY("%s is not a number", pred->name);
                return KL_TRUTH_UNKNOWN;
            }
            ok = compare_num(d, pred->op, (double)pred->integer);
            WHY("%s = %g", pred->name, d);
        } else if (json_is_boolean(v)) {
            ok = compare_int(json_is_true(v) ? 1 : 0, pred->op, pred->integer);
            WHY("%s = %s", pred->name, json_is_true(v) ? "true" : "false");
        } else {
            WHY("%s is %s, not a number", pred->name, kind_of(v));
            return KL_TRUTH_UNKNOWN;
        }
    }
    return ok ? KL_TRUTH_HOLDS : KL_TRUTH_FAILS;
}

/* The worse of two truths: fails over unknown over holds. */
static kl_truth worse(kl_truth a, kl_truth b)
{
    if (a == KL_TRUTH_FAILS || b == KL_TRUTH_FAILS) return KL_TRUTH_FAILS;
    if (a == KL_TRUTH_UNKNOWN || b == KL_TRUTH_UNKNOWN) return KL_TRUTH_UNKNOWN;
    return KL_TRUTH_HOLDS;
}

kl_status kl_skill_match(const kl_skill *card, const json_t *env, const char *const *present, unsigned npresent,
                         kl_skill_match_result *out, kl_error *err)
{
    memset(out, 0, sizeof *out);
    out->truth = KL_TRUTH_HOLDS;
    const json_t *pres = json_object_get(card->doc, "preconditions");
    const json_t *req = json_object_get(card->doc, "requires");
    size_t npre = json_array_size(pres), nreq = json_array_size(req);
    out->checks = calloc(npre ? npre : 1, sizeof *out->checks);
    out->missing = calloc(nreq ? nreq : 1, sizeof *out->missing);
    if (!out->checks || !out->missing) {
        kl_skill_match_release(out);
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    size_t i;
    json_t *e;
    json_array_foreach(pres, i, e) {
        const char *text = json_string_value(json_object_get(e, "predicate"));
        if (!text) continue; /* unexplained: no predicate to check */
        kl_predicate p;
        kl_error perr = {0};
        if (kl_predicate_parse(text, &p, &perr) != KL_OK) {
            kl_status st = kl_error_set(err, KL_ERR_INVALID, "skill %s: preconditions[%zu].predicate: %s", card->id, i,
                                        perr.message);
            kl_skill_match_release(out);
            return st;
        }
        kl_skill_check *c = &out->checks[out->nchecks++];
        c->predicate = text;
        c->kind = kl_sk_str(e, "kind");
        c->truth = kl_predicate_eval(&p, env, c->why, sizeof c->why);
        out->truth = worse(out->truth, c->truth);
    }
    json_array_foreach(req, i, e) {
        const char *t = json_string_value(e);
        if (!present) {
            out->requires_unknown = true;
            out->truth = worse(out->truth, KL_TRUTH_UNKNOWN);
            continue;
        }
        bool found = false;
        for (unsigned k = 0; k < npresent && !found; k++) found = present[k] && !strcmp(present[k], t);
        if (!found) {
            out->missing[out->nmissing++] = t;
            out->truth = KL_TRUTH_FAILS;
        }
    }
    return KL_OK;
}

void kl_skill_match_release(kl_skill_match_result *result)
{
    if (!result) return;
    free(result->checks);
    free((void *)result->missing);
    json_decref(result->observables);
    result->observables = NULL;
    result->checks = NULL;
    result->missing = NULL;
    result->nchecks = result->nmissing = 0;
}
