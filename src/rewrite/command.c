/* The "command" rewriter: a user's program, given the request as JSON on stdin, answering
 * with candidate files as JSON on stdout (docs/llm.md, "The command backend"). Its answers
 * are checked exactly like a model's: size, parse, launch() signature. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/llm_int.h"
#include "rewrite/rewrite_int.h"
#include "util/util.h"

#define STDERR_MAX ((size_t)64 << 10)

typedef struct command_state {
    char **argv;               /* program, args…, NULL */
    unsigned argc;
    double timeout_s;
    size_t max_output_bytes;
} command_state;

static void command_close(void *state)
{
    command_state *s = state;
    if (!s) return;
    for (unsigned i = 0; i < s->argc; i++) free(s->argv[i]);
    free(s->argv);
    free(s);
}

static kl_status add_arg(command_state *s, const char *a, kl_error *err)
{
    char **v = realloc(s->argv, (s->argc + 2) * sizeof *v);
    if (!v) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    s->argv = v;
    if (!(v[s->argc] = kl_strdup(a))) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    v[++s->argc] = NULL;
    return KL_OK;
}

static kl_status command_open(const char *config_json, void **state, kl_error *err)
{
    kl_status st = KL_OK;
    json_t *cfg = NULL;
    *state = NULL;
    command_state *s = calloc(1, sizeof *s);
    if (!s) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    s->timeout_s = 60;
    s->max_output_bytes = (size_t)16 << 20;
    json_error_t je;
    cfg = config_json ? json_loads(config_json, 0, &je) : NULL;
    if (!config_json || !*config_json) {
        st = kl_error_set(err, KL_ERR_INVALID,
                          "command rewriter: no config: expected {\"program\": \"PATH\", \"args\": [...]}");
        goto cleanup;
    }
    if (!cfg) {
        st = kl_error_set(err, KL_ERR_PARSE, "command rewriter config: line %d, column %d: %s (expected a JSON object)",
                          je.line, je.column, je.text);
        goto cleanup;
    }
    const char *k;
    json_t *v;
    json_object_foreach(cfg, k, v) {
        if (strcmp(k, "program") && strcmp(k, "args") && strcmp(k, "timeout_s") && strcmp(k, "max_output_bytes")) {
            st = kl_error_set(err, KL_ERR_INVALID,
                              "command rewriter config: unknown key \"%s\" (expected program, args, timeout_s, "
                              "max_output_bytes)",
                              k);
            goto cleanup;
        }
    }
    const char *program = json_string_value(json_object_get(cfg, "program"));
    if (!program || !*program) {
        st = kl_error_set(err, KL_ERR_INVALID, "command rewriter config: \"program\": expected the program to run");
        goto cleanup;
    }
    KL_TRY(add_arg(s, program, err));
    json_t *args = json_object_get(cfg, "args");
    if (args && !json_is_array(args)) {
        st = kl_error_set(err, KL_ERR_INVALID, "command rewriter config: \"args\": expected an array of strings");
        goto cleanup;
    }
    size_t i;
    json_array_foreach(args, i, v) {
        if (!json_is_string(v)) {
            st = kl_error_set(err, KL_ERR_INVALID, "command rewriter config: \"args\"[%zu]: expected a string", i);
            goto cleanup;
        }
        KL_TRY(add_arg(s, json_string_value(v), err));
    }
    json_t *t = json_object_get(cfg, "timeout_s");
    if (t) {
        if (!json_is_number(t) || json_number_value(t) <= 0 || json_number_value(t) > 86400) {
            st = kl_error_set(err, KL_ERR_INVALID,
                              "command rewriter config: \"timeout_s\": expected a number of seconds, > 0 and <= 86400");
            goto cleanup;
        }
        s->timeout_s = json_number_value(t);
    }
    json_t *m = json_object_get(cfg, "max_output_bytes");
    if (m) {
        if (!json_is_integer(m) || json_integer_value(m) < 256 || json_integer_value(m) > (json_int_t)KL_SOURCE_MAX) {
            st = kl_error_set(err, KL_ERR_INVALID,
                              "command rewriter config: \"max_output_bytes\": expected an integer from 256 to %zu",
                              (size_t)KL_SOURCE_MAX);
            goto cleanup;
        }
        s->max_output_bytes = (size_t)json_integer_value(m);
    }
    *state = s;
    s = NULL;
cleanup:
    command_close(s);
    json_decref(cfg);
    return st;
}

/* The last non-empty line of the program's stderr, for a reason (new string, or NULL). */
static char *stderr_tail(const kl_child *c)
{
    const char *e = kl_strbuf_str(&c->err);
    size_t n = strlen(e);
    while (n && (e[n - 1] == '\n' || e[n - 1] == '\r' || e[n - 1] == ' ')) n--;
    if (!n) return NULL;
    size_t a = n;
    while (a && e[a - 1] != '\n') a--;
    if (n - a > 200) a = n - 200;
    return kl_strndup(e + a, n - a);
}

static kl_status rejectf(kl_candidates *out, const char *transform, const char *site, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static kl_status rejectf(kl_candidates *out, const char *transform, const char *site, const char *fmt, ...)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    va_list ap;
    va_start(ap, fmt);
    kl_strbuf_vaddf(&sb, fmt, ap);
    va_end(ap);
    kl_status st = sb.failed ? KL_ERR_NOMEM : kl_candidates_reject(out, transform, site, kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    return st;
}

/* One candidate of the answer: checked, then added or rejected. */
static kl_status take_candidate(const command_state *s, const kl_llm_check *chk, const kl_rewrite_request *req,
                                kl_candidates *out, size_t i, json_t *c)
{
    if (!json_is_object(c))
        return rejectf(out, "command", "", "malformed answer: candidates[%zu]: expected an object", i);
    const char *source = json_string_value(json_object_get(c, "source"));
    const char *transform = json_string_value(json_object_get(c, "transform"));
    const char *site = json_string_value(json_object_get(c, "site"));
    const char *note = json_string_value(json_object_get(c, "note"));
    json_t *params = json_object_get(c, "params");
    if (!transform || !*transform) transform = req->transform ? req->transform : "command";
    if (!site) site = "";
    if (!source)
        return rejectf(out, transform, site, "malformed answer: candidates[%zu]: expected a \"source\" string", i);
    if (params && !json_is_object(params))
        return rejectf(out, transform, site, "malformed answer: candidates[%zu].params: expected an object", i);
    char *reason = NULL;
    kl_status st = kl_llm_check_source(chk, source, &reason);
    if (st == KL_ERR_NOMEM) return st;
    if (st != KL_OK) {
        st = rejectf(out, transform, site, "candidates[%zu]: %s", i, reason ? reason : "out of memory");
        free(reason);
        return st;
    }
    for (unsigned j = 0; j < out->count; j++)
        if (!strcmp(out->items[j].source, source))
            return rejectf(out, transform, site, "candidates[%zu]: the same file as an earlier candidate", i);
    if (req->max_candidates && out->count >= req->max_candidates)
        return rejectf(out, transform, site, "candidates[%zu]: more candidates than asked for (max_candidates %u)", i,
                       req->max_candidates);
    char *p = params ? json_dumps(params, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    st = kl_candidates_add(out, source, transform, site, p ? p : "{}", note ? note : "proposed by the program");
    free(p);
    return st;
}

static kl_status command_propose(void *state, const kl_rewrite_request *req, kl_candidates *out, kl_error *err)
{
    command_state *s = state;
    kl_status st = KL_OK;
    json_t *doc = NULL, *answer = NULL;
    char *input = NULL, *old_sig = NULL, *tail = NULL;
    kl_source *old = NULL;
    kl_child c;
    kl_child_init(&c);

    KL_TRY(kl_llm_request_json(req, &doc, err));
    const char *name = req->source_name ? req->source_name : "<source>";
    KL_TRY(kl_source_parse_text(name, req->source, strlen(req->source), &old, err));
    old_sig = kl_llm_launch_signature(old);
    kl_llm_check chk = {req->source, old_sig, KL_SOURCE_MAX};
    input = json_dumps(doc, JSON_COMPACT);
    if (!input) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    c.argv = (const char *const *)s->argv;
    c.stdin_data = input;
    c.stdin_len = strlen(input);
    c.timeout_s = s->timeout_s;
    c.out_max = s->max_output_bytes;
    c.err_max = STDERR_MAX;
    out->requests++;
    st = kl_child_run(&c, err);
    out->wall_s = c.wall_s;
    if (st != KL_OK) {
        kl_error_prefix(err, "command rewriter");
        goto cleanup;
    }
    tail = stderr_tail(&c);
    char how[128];
    kl_child_describe(&c, how, sizeof how);
    if (c.timed_out) {
        st = rejectf(out, "command", "", "the program %s (timeout_s)%s%s", how, tail ? "; stderr: " : "",
                     tail ? tail : "");
        goto cleanup;
    }
    if (c.term_signal) {
        st = rejectf(out, "command", "", "the program crashed: %s%s%s", how, tail ? "; stderr: " : "",
                     tail ? tail : "");
        goto cleanup;
    }
    if (c.out.truncated) {
        st = rejectf(out, "command", "", "the program printed more than %zu bytes (max_output_bytes)",
                     s->max_output_bytes);
        goto cleanup;
    }
    if (c.exit_code != 0) {
        st = rejectf(out, "command", "", "the program failed: %s%s%s", how, tail ? "; stderr: " : "",
                     tail ? tail : "");
        goto cleanup;
    }
    json_error_t je;
    answer = json_loadb(kl_strbuf_str(&c.out), c.out.len, 0, &je);
    if (!answer) {
        st = rejectf(out, "command", "",
                     "malformed answer on stdout: line %d, column %d: %s (expected {\"candidates\": [...]})", je.line,
                     je.column, je.text);
        goto cleanup;
    }
    json_t *cands = json_object_get(answer, "candidates");
    if (!json_is_object(answer) || !json_is_array(cands)) {
        st = rejectf(out, "command", "", "malformed answer on stdout: expected an object {\"candidates\": [...]}");
        goto cleanup;
    }
    json_t *usage = json_object_get(answer, "usage");
    json_t *ti = json_object_get(usage, "tokens_in"), *to = json_object_get(usage, "tokens_out");
    if (json_integer_value(ti) > 0) out->tokens_in += (uint64_t)json_integer_value(ti);
    if (json_integer_value(to) > 0) out->tokens_out += (uint64_t)json_integer_value(to);
    size_t i;
    json_t *cand;
    json_array_foreach(cands, i, cand) {
        st = take_candidate(s, &chk, req, out, i, cand);
        if (st != KL_OK) break;
    }
    /* the program's own rejections, passed on */
    json_array_foreach(json_object_get(answer, "rejected"), i, cand) {
        if (st != KL_OK) break;
        const char *t = json_string_value(json_object_get(cand, "transform"));
        const char *si = json_string_value(json_object_get(cand, "site"));
        const char *why = json_string_value(json_object_get(cand, "reason"));
        st = rejectf(out, t ? t : "command", si ? si : "", "rejected by the program: %s", why ? why : "(no reason)");
    }
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
cleanup:
    if (st != KL_OK) {
        kl_candidates keep = *out;
        kl_candidates_free(out);
        out->tokens_in = keep.tokens_in, out->tokens_out = keep.tokens_out;
        out->requests = keep.requests, out->wall_s = keep.wall_s;
    }
    kl_child_release(&c);
    kl_source_free(old);
    json_decref(doc);
    json_decref(answer);
    free(input), free(old_sig), free(tail);
    return st;
}

const kl_rewriter_ops kl_rewriter_command_ops = {
    .name = "command",
    .open = command_open,
    .close = command_close,
    .propose = command_propose,
};
