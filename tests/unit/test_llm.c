/* src/rewrite/llm*.c: the llm rewriter against a mock OpenAI-compatible server on 127.0.0.1
 * (tests/helpers/mock_llm.c), its prompts, its answer checks, its cache and replay. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "klineage/rewrite.h"
#include "klineage/store.h"
#include "rewrite/llm_int.h"
#include "util/util.h"

/* A key nobody could mistake: every message, rejection and stored document is scanned for it. */
#define KEY "sk-KLTEST-7f3a9c0e5b2d4e6f8a1c3b5d7e9f0a2c"
#define KEY_ENV "KL_TEST_LLM_KEY"

static pid_t mock_pid;
static unsigned mock_port;
static char *kernel, *simplified, *simplified2;

/* ---- the mock server ------------------------------------------------------------------------- */

static pid_t start_mock(unsigned *port)
{
    const char *mock = getenv("KL_MOCK_LLM");
    const char *data = getenv("KL_TEST_DATA");
    if (!mock || !data) return -1;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/llm", data);
    int p[2];
    if (pipe(p) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execl(mock, mock, "--data", dir, "--key", KEY, "--lifetime", "300", (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char line[32] = "";
    size_t n = 0;
    double until = kl_now() + 20;
    while (n < sizeof line - 1 && !strchr(line, '\n') && kl_now() < until) {
        struct pollfd pf = {p[0], POLLIN, 0};
        if (poll(&pf, 1, 100) <= 0) continue;
        ssize_t r = read(p[0], line + n, sizeof line - 1 - n);
        if (r <= 0) break;
        n += (size_t)r;
        line[n] = '\0';
    }
    close(p[0]);
    *port = (unsigned)atoi(line);
    if (!*port) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}

static void stop_mock(pid_t pid)
{
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

static char *data_file(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/llm/%s", getenv("KL_TEST_DATA"), name);
    char *text = NULL;
    size_t len;
    kl_error err = {0};
    if (kl_file_read(path, 0, &text, &len, &err) != KL_OK) return NULL;
    return text;
}

static int group_setup(void **state)
{
    (void)state;
    setenv(KEY_ENV, KEY, 1);
    unsetenv("KLINEAGE_LLM_BASE_URL");
    unsetenv("KLINEAGE_LLM_MODEL");
    unsetenv("KLINEAGE_PROMPTS");
    kernel = data_file("kernel.cu");
    simplified = data_file("simplified.cu");
    simplified2 = data_file("simplified2.cu");
    mock_pid = start_mock(&mock_port);
    return (mock_pid > 0 && kernel && simplified && simplified2) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    stop_mock(mock_pid);
    free(kernel), free(simplified), free(simplified2);
    return 0;
}

/* ---- helpers ------------------------------------------------------------------------------------ */

/* A config for the mock: short limits, fast back-off, the test key; `extra` is spliced in. */
static char *config_for(unsigned port, const char *model, const char *extra)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb,
                   "{\"base_url\": \"http://127.0.0.1:%u/v1/\", \"model\": \"%s\", \"api_key_env\": \"" KEY_ENV "\", "
                   "\"timeout_s\": 2, \"connect_timeout_s\": 1, \"max_retries\": 2, \"backoff_s\": 0.05, "
                   "\"max_wait_s\": 5%s%s}",
                   port, model, extra ? ", " : "", extra ? extra : "");
    return kl_strbuf_detach(&sb, NULL);
}

static kl_rewrite_request simplify_request(void)
{
    kl_rewrite_request req = {0};
    req.kind = KL_REQ_SIMPLIFY;
    req.source = kernel;
    req.source_name = "kernel.cu";
    return req;
}

/* No string the rewriter handed back holds the key. */
static void assert_no_key(const kl_candidates *c, const kl_error *err)
{
    if (err) assert_null(strstr(err->message, KEY));
    for (unsigned i = 0; c && i < c->count; i++) {
        assert_null(strstr(c->items[i].source, KEY));
        assert_null(strstr(c->items[i].transform, KEY));
        assert_null(strstr(c->items[i].site, KEY));
        assert_null(strstr(c->items[i].params_json, KEY));
        assert_null(strstr(c->items[i].note, KEY));
    }
    for (unsigned i = 0; c && i < c->nrejected; i++) {
        assert_null(strstr(c->rejected[i].transform, KEY));
        assert_null(strstr(c->rejected[i].site, KEY));
        assert_null(strstr(c->rejected[i].reason, KEY));
    }
}

/* Open a rewriter on the shared mock with model `model`, propose `req`, return the status. */
static kl_status ask(const char *model, const char *extra, const kl_rewrite_request *req, kl_candidates *out,
                     kl_error *err)
{
    char *cfg = config_for(mock_port, model, extra);
    kl_rewriter *rw = NULL;
    kl_status st = kl_rewriter_open("llm", cfg, &rw, err);
    free(cfg);
    assert_int_equal(st, KL_OK);
    assert_string_equal(kl_rewriter_name(rw), "llm");
    st = kl_rewriter_propose(rw, req, out, err);
    assert_no_key(out, err);
    kl_rewriter_free(rw);
    return st;
}

/* Exactly one rejection, no candidate, and the reason holds `needle`. */
static void expect_rejection(const char *model, const char *extra, const char *needle)
{
    kl_rewrite_request req = simplify_request();
    kl_candidates c;
    kl_error err = {0};
    assert_int_equal(ask(model, extra, &req, &c, &err), KL_OK);
    assert_int_equal(c.count, 0);
    assert_int_equal(c.nrejected, 1);
    if (!strstr(c.rejected[0].reason, needle))
        fail_msg("%s: expected a rejection mentioning \"%s\", got \"%s\"", model, needle, c.rejected[0].reason);
    kl_candidates_free(&c);
}

/* ---- answers ------------------------------------------------------------------------------------- */

static void good_answer_is_a_candidate(void **state)
{
    (void)state;
    kl_rewrite_request req = simplify_request();
    kl_candidates c;
    kl_error err = {0};
    assert_int_equal(ask("good:1", NULL, &req, &c, &err), KL_OK);
    assert_int_equal(c.count, 1);
    assert_int_equal(c.nrejected, 0);
    assert_string_equal(c.items[0].source, simplified);
    assert_string_equal(c.items[0].transform, "unroll");
    assert_string_equal(c.items[0].site, "saxpy4:7");
    assert_string_equal(c.items[0].params_json, "{}");
    assert_non_null(strstr(c.items[0].note, "removed it"));
    assert_int_equal(c.tokens_in, 1200);
    assert_int_equal(c.tokens_out, 300);
    assert_int_equal(c.requests, 1);
    assert_int_equal(c.cached, 0);
    assert_true(c.wall_s > 0);
    kl_candidates_free(&c);
}

static void several_choices_each_checked(void **state)
{
    (void)state;
    kl_rewrite_request req = simplify_request();
    kl_candidates c;
    kl_error err = {0};
    assert_int_equal(ask("multi:1", "\"n\": 4", &req, &c, &err), KL_OK);
    /* simplified, simplified2; a changed signature and a duplicate are refused */
    assert_int_equal(c.count, 2);
    assert_string_equal(c.items[0].source, simplified);
    assert_string_equal(c.items[1].source, simplified2);
    assert_string_equal(c.items[1].transform, "restrict");
    assert_int_equal(c.nrejected, 2);
    assert_non_null(strstr(c.rejected[0].reason, "choice 2: the launch() signature changed"));
    assert_non_null(strstr(c.rejected[1].reason, "choice 3: the same file"));
    assert_int_equal(c.tokens_out, 1200);
    kl_candidates_free(&c);

    /* max_candidates lowers n */
    req.max_candidates = 2;
    assert_int_equal(ask("multi:2", "\"n\": 4", &req, &c, &err), KL_OK);
    assert_int_equal(c.count, 2);
    assert_int_equal(c.nrejected, 0);
    kl_candidates_free(&c);
}

static void rate_limit_is_retried_after_its_wait(void **state)
{
    (void)state;
    kl_rewrite_request req = simplify_request();
    kl_candidates c;
    kl_error err = {0};
    double t0 = kl_now();
    assert_int_equal(ask("retry429:1", NULL, &req, &c, &err), KL_OK);
    double took = kl_now() - t0;
    assert_int_equal(c.count, 1);
    assert_true(took >= 0.95); /* Retry-After: 1, though back-off alone would be 0.05 s */
    assert_true(took < 10);
    kl_candidates_free(&c);
}

static void server_error_is_retried(void **state)
{
    (void)state;
    kl_rewrite_request req = simplify_request();
    kl_candidates c;
    kl_error err = {0};
    assert_int_equal(ask("retry5xx:1", NULL, &req, &c, &err), KL_OK);
    assert_int_equal(c.count, 1);
    kl_candidates_free(&c);

    /* with no retry allowed, the 503 is the answer */
    assert_int_equal(ask("retry5xx:2", "\"max_retries\": 0", &req, &c, &err), KL_ERR_NETWORK);
    assert_non_null(strstr(err.message, "HTTP 503 after 1 attempt"));
    kl_candidates_free(&c);
}

static void retries_run_out(void **state)
{
    (void)state;
    kl_rewrite_request req = simplify_request();
    kl_candidates c;
    kl_error err = {0};
    assert_int_equal(ask("always503:1", NULL, &req, &c, &err), KL_ERR_NETWORK);
    assert_non_null(strstr(err.message, "HTTP 503 after 3 attempt(s) (retries spent)"));
    assert_non_null(strstr(err.message, "overloaded, always"));
    assert_int_equal(c.count, 0);
    kl_candidates_free(&c);

    /* a Retry-After past max_wait_s is not waited for */
    double t0 = kl_now();
    assert_int_equal(ask("bigwait:1", NULL, &req, &c, &err), KL_ERR_NETWORK);
    assert_true(kl_now() - t0 < 3);
    assert_non_null(strstr(err.message, "HTTP 429 after 1 attempt"));
    kl_candidates_free(&c);
}

static void slow_answer_times_out(void **state)
{
    (void)state;
    kl_rewrite_request req = simplify_request();
    kl_candidates c;
    kl_error err = {0};
    double t0 = kl_now();
    assert_int_equal(ask("slow:1", "\"timeout_s\": 1", &req, &c, &err), KL_ERR_TIMEOUT);
    double took = kl_now() - t0;
    assert_true(took >= 0.9 && took < 4);
    assert_non_null(strstr(err.message, "within 1.0 s (timeout_s)"));
    assert_int_equal(c.count, 0);
    assert_true(c.wall_s >= 0.9);
    kl_candidates_free(&c);
}

static void nothing_listening_is_a_network_error(void **state)
{
    (void)state;
    unsigned port = 0;
    pid_t pid = start_mock(&port);
    assert_true(pid > 0);
    stop_mock(pid); /* the port is free now: nothing answers there */
    char *cfg = config_for(port, "good:1", NULL);
    kl_rewriter *rw = NULL;
    kl_error err = {0};
    assert_int_equal(kl_rewriter_open("llm", cfg, &rw, &err), KL_OK);
    kl_rewrite_request req = simplify_request();
    kl_candidates c;
    assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_ERR_NETWORK);
    assert_non_null(strstr(err.message, "127.0.0.1"));
    kl_candidates_free(&c);
    kl_rewriter_free(rw);
    free(cfg);
}

static void garbage_is_rejected(void **state)
{
    (void)state;
    expect_rejection("garbage:1", NULL, "malformed answer: not JSON");

    kl_rewrite_request req = simplify_request();
    kl_candidates c;
    kl_error err = {0};
    assert_int_equal(ask("rawgarbage:1", NULL, &req, &c, &err), KL_ERR_NETWORK);
    assert_int_equal(c.count, 0);
    kl_candidates_free(&c);
}

static void truncated_answers_are_rejected(void **state)
{
    (void)state;
    expect_rejection("truncated:1", NULL, "malformed answer: truncated JSON");
    expect_rejection("cutoff:1", NULL, "truncated answer: the connection closed");
    expect_rejection("unterminated:1", NULL, "an unterminated code block");
}

static void answers_without_usable_code_are_rejected(void **state)
{
    (void)state;
    expect_rejection("nocode:1", NULL, "no code in the answer: \"The kernel is already");
    expect_rejection("refusal:1", NULL, "a refusal: \"I'm sorry, but I can't");
    expect_rejection("refusalfield:1", NULL, "a refusal: \"I can't assist");
    expect_rejection("signature:1", NULL,
                     "the launch() signature changed: expected `extern \"C\" void launch(const float*,float*,int,"
                     "cudaStream_t)`, got `extern \"C\" void launch(const float*,float*,long,cudaStream_t)`");
    expect_rejection("parsefail:1", NULL, "does not parse: 1 error(s), the first at line 9");
}

static void answer_over_the_limit_is_rejected(void **state)
{
    (void)state;
    expect_rejection("huge:1", "\"max_answer_bytes\": 65536", "over the size limit of 65536 bytes");
}

/* ---- the key ------------------------------------------------------------------------------------ */

static bool doc_has_key(const char *key, const char *json, void *user)
{
    (void)key;
    unsigned *n = user;
    assert_null(strstr(json, KEY));
    (*n)++;
    return true;
}

static void key_never_leaks(void **state)
{
    (void)state;
    kl_store *store = NULL;
    kl_error err = {0};
    assert_int_equal(kl_store_open(":memory:", &store, &err), KL_OK);
    kl_rewrite_request req = simplify_request();
    kl_candidates c;
    const char *models[] = {"leak:1", "unauth:1", "good:key", "nocode:key", "garbage:key"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char *cfg = config_for(mock_port, models[i], NULL);
        kl_rewriter *rw = NULL;
        assert_int_equal(kl_rewriter_open_ex("llm", cfg, store, &rw, &err), KL_OK);
        kl_status st = kl_rewriter_propose(rw, &req, &c, &err);
        assert_no_key(&c, st == KL_OK ? NULL : &err);
        if (!strcmp(models[i], "unauth:1")) {
            /* the server echoed the header back: it comes out redacted */
            assert_int_equal(st, KL_ERR_NETWORK);
            assert_non_null(strstr(err.message, "HTTP 401"));
            assert_non_null(strstr(err.message, "Bearer [redacted]"));
        } else if (!strcmp(models[i], "leak:1")) {
            assert_int_equal(st, KL_OK);
            assert_int_equal(c.count, 1);
            assert_non_null(strstr(c.items[0].source, "// Bearer [redacted]"));
        }
        kl_candidates_free(&c);
        kl_rewriter_free(rw);
        free(cfg);
    }
    unsigned docs = 0;
    assert_int_equal(kl_store_each(store, "llm", NULL, doc_has_key, &docs, &err), KL_OK);
    assert_int_equal(docs, 4); /* every 200 answer was recorded; the 401 was not */
    kl_store_close(store);

    /* a wrong key, echoed back in the 401, does not come out either */
    setenv("KL_TEST_WRONG_KEY", "sk-WRONG-c0ffee-1234567890", 1);
    char *cfg = config_for(mock_port, "good:wrong", "\"api_key_env\": \"KL_TEST_WRONG_KEY\"");
    /* the later api_key_env wins in jansson's object: it is the wrong key that is sent */
    kl_rewriter *rw = NULL;
    assert_int_equal(kl_rewriter_open("llm", cfg, &rw, &err), KL_OK);
    assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_ERR_NETWORK);
    assert_non_null(strstr(err.message, "HTTP 401"));
    assert_null(strstr(err.message, "sk-WRONG-c0ffee-1234567890"));
    kl_candidates_free(&c);
    kl_rewriter_free(rw);
    free(cfg);

    /* no key at all: the server refuses, and says so */
    cfg = config_for(mock_port, "good:nokey", "\"api_key_env\": \"KL_TEST_NO_SUCH_VARIABLE\"");
    unsetenv("KL_TEST_NO_SUCH_VARIABLE");
    assert_int_equal(kl_rewriter_open("llm", cfg, &rw, &err), KL_OK);
    assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_ERR_NETWORK);
    assert_non_null(strstr(err.message, "bad credentials: got ''"));
    kl_candidates_free(&c);
    kl_rewriter_free(rw);
    free(cfg);

    /* a key in the config string itself is refused, and not repeated */
    assert_int_equal(kl_rewriter_open("llm", "{\"base_url\": \"http://127.0.0.1:1\", \"model\": \"m\", "
                                             "\"api_key\": \"" KEY "\"}",
                                      &rw, &err),
                     KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "\"api_key\" is not accepted"));
    assert_null(strstr(err.message, KEY));
}

/* ---- cache and replay ---------------------------------------------------------------------------- */

static void replays_with_no_endpoint(void **state)
{
    (void)state;
    unsigned port = 0;
    pid_t pid = start_mock(&port);
    assert_true(pid > 0);
    kl_store *store = NULL;
    kl_error err = {0};
    assert_int_equal(kl_store_open(":memory:", &store, &err), KL_OK);
    kl_rewrite_request req = simplify_request();
    req.rejected_json = "[{\"transform\": \"restrict\", \"site\": \"saxpy4:4\", \"reason\": \"slower\"}]";
    kl_candidates c;

    /* record: live, through the store */
    char *cfg = config_for(port, "good:record", NULL);
    kl_rewriter *rw = NULL;
    assert_int_equal(kl_rewriter_open_ex("llm", cfg, store, &rw, &err), KL_OK);
    assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_OK);
    assert_int_equal(c.count, 1);
    assert_int_equal(c.cached, 0);
    kl_candidates_free(&c);
    kl_rewriter_free(rw);
    free(cfg);
    /* and an answer that was rejected */
    cfg = config_for(port, "nocode:record", NULL);
    assert_int_equal(kl_rewriter_open_ex("llm", cfg, store, &rw, &err), KL_OK);
    assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_OK);
    assert_int_equal(c.nrejected, 1);
    char *reason = kl_strdup(c.rejected[0].reason);
    kl_candidates_free(&c);
    kl_rewriter_free(rw);
    free(cfg);

    stop_mock(pid); /* no endpoint from here on */

    /* replay: the same answers, no network */
    cfg = config_for(port, "good:record", "\"replay\": true");
    assert_int_equal(kl_rewriter_open_ex("llm", cfg, store, &rw, &err), KL_OK);
    assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_OK);
    assert_int_equal(c.count, 1);
    assert_int_equal(c.cached, 1);
    assert_string_equal(c.items[0].source, simplified);
    assert_int_equal(c.tokens_in, 1200); /* as recorded */
    kl_candidates_free(&c);

    /* a request never made: an explicit miss, never a network call */
    req.rejected_json = NULL;
    assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "no recorded answer for this request"));
    kl_rewriter_usage u;
    kl_rewriter_usage_get(rw, &u);
    assert_int_equal(u.proposals, 2);
    assert_int_equal(u.requests, 2);
    assert_int_equal(u.cached, 1);
    assert_int_equal(u.tokens_in, 1200);
    assert_int_equal(u.tokens_out, 300);
    kl_candidates_free(&c);
    kl_rewriter_free(rw);
    free(cfg);

    /* the rejection replays too */
    req.rejected_json = "[{\"transform\": \"restrict\", \"site\": \"saxpy4:4\", \"reason\": \"slower\"}]";
    cfg = config_for(port, "nocode:record", "\"replay\": true");
    assert_int_equal(kl_rewriter_open_ex("llm", cfg, store, &rw, &err), KL_OK);
    assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_OK);
    assert_int_equal(c.nrejected, 1);
    assert_string_equal(c.rejected[0].reason, reason);
    kl_candidates_free(&c);
    kl_rewriter_free(rw);
    free(cfg);
    free(reason);

    /* live mode answers from the cache too, when it has the answer */
    cfg = config_for(port, "good:record", NULL);
    assert_int_equal(kl_rewriter_open_ex("llm", cfg, store, &rw, &err), KL_OK);
    assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_OK);
    assert_int_equal(c.cached, 1);
    assert_int_equal(c.count, 1);
    kl_candidates_free(&c);
    kl_rewriter_free(rw);
    free(cfg);

    /* replay with no store: said so */
    cfg = config_for(port, "good:record", "\"replay\": true");
    assert_int_equal(kl_rewriter_open("llm", cfg, &rw, &err), KL_OK);
    assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "replay needs a store"));
    kl_candidates_free(&c);
    kl_rewriter_free(rw);
    free(cfg);
    kl_store_close(store);
}

static void cache_key_covers_the_parameters(void **state)
{
    (void)state;
    kl_store *store = NULL;
    kl_error err = {0};
    assert_int_equal(kl_store_open(":memory:", &store, &err), KL_OK);
    kl_rewrite_request req = simplify_request();
    kl_candidates c;
    const char *extras[] = {NULL, "\"temperature\": 0.9", "\"n\": 2", NULL};
    for (size_t i = 0; i < 4; i++) {
        char *cfg = config_for(mock_port, "good:params", extras[i]);
        kl_rewriter *rw = NULL;
        assert_int_equal(kl_rewriter_open_ex("llm", cfg, store, &rw, &err), KL_OK);
        assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_OK);
        assert_int_equal(c.cached, i == 3 ? 1 : 0); /* only the repeat of the first is a hit */
        kl_candidates_free(&c);
        kl_rewriter_free(rw);
        free(cfg);
    }
    kl_store_close(store);
}

/* ---- config ------------------------------------------------------------------------------------- */

static void config_is_checked(void **state)
{
    (void)state;
    kl_rewriter *rw = NULL;
    kl_error err = {0};
    assert_int_equal(kl_rewriter_open("llm", "{\"model\": \"m\"}", &rw, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "KLINEAGE_LLM_BASE_URL"));
    assert_int_equal(kl_rewriter_open("llm", "{\"base_url\": \"http://127.0.0.1:1\"}", &rw, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "KLINEAGE_LLM_MODEL"));
    assert_int_equal(kl_rewriter_open("llm", "{\"base_url\": \"ftp://x\", \"model\": \"m\"}", &rw, &err),
                     KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "expected an http:// or https:// URL"));
    assert_int_equal(kl_rewriter_open("llm", "{\"base_url\": \"http://x\", \"model\": \"m\", \"tempreature\": 1}", &rw,
                                      &err),
                     KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "unknown key \"tempreature\""));
    assert_int_equal(kl_rewriter_open("llm", "{\"base_url\": \"http://x\", \"model\": \"m\", \"n\": 0}", &rw, &err),
                     KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "\"n\": 0 is out of range"));
    assert_int_equal(kl_rewriter_open("llm", "{\"base_url\": \"http://x\",\n \"model\": }", &rw, &err), KL_ERR_PARSE);
    assert_non_null(strstr(err.message, "line 2"));
    assert_int_equal(kl_rewriter_open("llm", "{\"base_url\": \"http://x\", \"model\": \"m\", \"prompts_dir\": "
                                             "\"/nonexistent/prompts\"}",
                                      &rw, &err),
                     KL_ERR_NOT_FOUND);
    assert_non_null(strstr(err.message, "/nonexistent/prompts: no such folder"));
    assert_null(rw);

    /* the environment, when the config says nothing */
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/v1", mock_port);
    setenv("KLINEAGE_LLM_BASE_URL", url, 1);
    setenv("KLINEAGE_LLM_MODEL", "good:env", 1);
    setenv("KLINEAGE_LLM_API_KEY", KEY, 1);
    assert_int_equal(kl_rewriter_open("llm", NULL, &rw, &err), KL_OK);
    kl_rewrite_request req = simplify_request();
    kl_candidates c;
    assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_OK);
    assert_int_equal(c.count, 1);
    kl_candidates_free(&c);
    kl_rewriter_free(rw);
    unsetenv("KLINEAGE_LLM_BASE_URL");
    unsetenv("KLINEAGE_LLM_MODEL");
    unsetenv("KLINEAGE_LLM_API_KEY");
}

/* ---- prompts ------------------------------------------------------------------------------------- */

static const char *card =
    "{\"id\": \"vectorize-3fa2c1\", \"transform\": \"vectorize\", \"intent\": \"16-byte vector loads of f32\","
    " \"params\": {\"width\": 4},"
    " \"anchor\": {\"kernel\": \"softmax_kernel\", \"before\": \"m = fmaxf(m, x[j]);\", \"after\": \"float4 v = "
    "x4[j];\"},"
    " \"preconditions\": [{\"predicate\": \"cols % 4 == 0\", \"kind\": \"probed\"}],"
    " \"risks\": [{\"shape\": {\"cols\": 1023}, \"broke\": \"wrong\", \"detail\": \"rel_l2 0.41\"}]}";

static void prompts_carry_the_request(void **state)
{
    (void)state;
    kl_llm_prompts *p = NULL;
    kl_error err = {0};
    assert_int_equal(kl_llm_prompts_load(NULL, &p, &err), KL_OK);
    const char *sizes[] = {"n"};
    kl_arg args[] = {
        {.name = "x", .dtype = KL_DTYPE_F32, .shape = "n", .role = KL_ROLE_IN},
        {.name = "y", .dtype = KL_DTYPE_F32, .shape = "n", .role = KL_ROLE_INOUT},
        {.name = "n", .dtype = KL_DTYPE_NONE, .value = "n"},
    };
    int64_t bench[] = {1 << 24};
    kl_task task = {.name = "saxpy", .summary = "y = 2x + y", .sizes = sizes, .nsizes = 1, .args = args,
                    .nargs = 3, .rel_l2 = 1e-6, .max_abs = -1, .bench = {.label = "bench", .values = bench}};
    kl_rewrite_request req = simplify_request();
    req.task = &task;
    req.features_json = "[{\"transform\": \"unroll\", \"site\": \"saxpy4:7\"}]";
    req.rejected_json = "[{\"transform\": \"restrict\", \"site\": \"saxpy4:4\", \"reason\": \"slower by 3%\"}]";
    char *sys = NULL, *user = NULL;
    assert_int_equal(kl_llm_prompts_render(p, &req, &sys, &user, &err), KL_OK);
    assert_non_null(strstr(sys, "extern \"C\" void launch"));
    assert_non_null(strstr(user, "remove exactly ONE optimization"));
    assert_non_null(strstr(user, "**saxpy**: y = 2x + y"));
    assert_non_null(strstr(user, "- `y`: f32*, n elements, inout"));
    assert_non_null(strstr(user, "n=16777216"));
    assert_non_null(strstr(user, "\"site\": \"saxpy4:7\""));
    assert_non_null(strstr(user, "- restrict at saxpy4:4: slower by 3%"));
    assert_non_null(strstr(user, kernel));
    assert_non_null(strstr(user, "`extern \"C\" void launch(const float*,float*,int,cudaStream_t)`"));
    assert_null(strstr(user, "{{"));
    free(sys), free(user);

    req.kind = KL_REQ_APPLY;
    req.skill_json = card;
    assert_int_equal(kl_llm_prompts_render(p, &req, &sys, &user, &err), KL_OK);
    assert_non_null(strstr(user, "apply this optimization"));
    assert_non_null(strstr(user, "Intent: 16-byte vector loads of f32"));
    assert_non_null(strstr(user, "m = fmaxf(m, x[j]);"));
    assert_non_null(strstr(user, "float4 v = x4[j];"));
    assert_non_null(strstr(user, "- `cols % 4 == 0` (probed)"));
    assert_non_null(strstr(user, "- wrong at {\"cols\":1023}: rel_l2 0.41"));
    assert_non_null(strstr(user, "Transform: vectorize"));
    free(sys), free(user);

    req.skill_json = "{\"id\": ";
    assert_int_equal(kl_llm_prompts_render(p, &req, &sys, &user, &err), KL_ERR_PARSE);
    assert_non_null(strstr(err.message, "skill_json: line 1"));
    kl_llm_prompts_free(p);
}

static void prompts_folder_overrides(void **state)
{
    (void)state;
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("llm-prompts", &dir, &err), KL_OK);
    char *f = kl_path_join(dir, "simplify.md");
    const char *mine = "Simplify {{source_name}} please.\n";
    assert_int_equal(kl_file_write(f, mine, strlen(mine), &err), KL_OK);
    kl_llm_prompts *p = NULL;
    assert_int_equal(kl_llm_prompts_load(dir, &p, &err), KL_OK);
    kl_rewrite_request req = simplify_request();
    char *sys = NULL, *user = NULL;
    assert_int_equal(kl_llm_prompts_render(p, &req, &sys, &user, &err), KL_OK);
    assert_string_equal(user, "Simplify kernel.cu please.\n");
    assert_non_null(strstr(sys, "expert CUDA engineer")); /* the built-in one: no system.md there */
    free(sys), free(user);
    kl_llm_prompts_free(p);

    const char *bad = "line one\nthen {{sourse}} here\n";
    assert_int_equal(kl_file_write(f, bad, strlen(bad), &err), KL_OK);
    assert_int_equal(kl_llm_prompts_load(dir, &p, &err), KL_OK);
    assert_int_equal(kl_llm_prompts_render(p, &req, &sys, &user, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "simplify.md:2:6: unknown placeholder {{sourse}}"));
    kl_llm_prompts_free(p);

    /* through the rewriter's config: the prompt the endpoint gets is the folder's */
    char *cfg = NULL;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "\"prompts_dir\": \"%s\"", dir);
    cfg = config_for(mock_port, "good:prompts", kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    kl_rewriter *rw = NULL;
    assert_int_equal(kl_rewriter_open("llm", cfg, &rw, &err), KL_OK);
    kl_candidates c;
    assert_int_equal(kl_rewriter_propose(rw, &req, &c, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "unknown placeholder"));
    kl_candidates_free(&c);
    kl_rewriter_free(rw);
    free(cfg);
    assert_int_equal(kl_remove_tree(dir, &err), KL_OK);
    free(f);
    free(dir);
}

/* ---- answer parsing ---------------------------------------------------------------------------- */

static void code_is_taken_from_the_right_block(void **state)
{
    (void)state;
    const char *why = NULL;
    char *code = kl_llm_extract_code("Here:\n```text\nnot this, it is longer than the code block below\n```\n"
                                     "```cuda\n__global__ void k() {}\n```\nand\n```cpp\nint x;\n```\n",
                                     &why);
    assert_string_equal(code, "__global__ void k() {}\n");
    free(code);
    code = kl_llm_extract_code("```\nint a;\n```\n", &why);
    assert_string_equal(code, "int a;\n");
    free(code);
    code = kl_llm_extract_code("#include <cuda.h>\n__global__ void k() {}\n", &why);
    assert_string_equal(code, "#include <cuda.h>\n__global__ void k() {}\n");
    free(code);
    assert_null(kl_llm_extract_code("Just words.", &why));
    assert_string_equal(why, "no code in the answer");
    assert_null(kl_llm_extract_code("```cuda\nint a;\n", &why));
    assert_non_null(strstr(why, "unterminated"));
    assert_null(kl_llm_extract_code("", &why));

    assert_true(kl_llm_is_refusal("  I can't help with that."));
    assert_true(kl_llm_is_refusal("**I’m sorry**, no."));
    assert_false(kl_llm_is_refusal("Here is the kernel: I cannot see a problem"));

    char *t, *s, *n;
    kl_llm_answer_fields("**Transform:** `vectorize`\nSite: k:3\n```cuda\nNote: in code\n```\nNote: done\n", &t, &s, &n);
    assert_string_equal(t, "vectorize");
    assert_string_equal(s, "k:3");
    assert_string_equal(n, "done");
    free(t), free(s), free(n);
}

static char *signature_of(const char *text)
{
    kl_source *src = NULL;
    kl_error err = {0};
    assert_int_equal(kl_source_parse_text("t.cu", text, strlen(text), &src, &err), KL_OK);
    char *sig = kl_llm_launch_signature(src);
    kl_source_free(src);
    return sig;
}

static void launch_signature_ignores_names_and_spacing(void **state)
{
    (void)state;
    char *a = signature_of("extern \"C\" void launch(const float *x, float* y, int n, cudaStream_t s) {}\n");
    char *b = signature_of("extern \"C\" {\nvoid launch(const  float* in,\n float *out, int, cudaStream_t stream)\n{ }\n}\n");
    char *c = signature_of("extern \"C\" void launch(const float *x, float *y, unsigned n, cudaStream_t s) {}\n");
    char *d = signature_of("void launch(const float *x, float *y, int n, cudaStream_t s) {}\n");
    char *e = signature_of("__global__ void k() {}\n");
    assert_string_equal(a, "extern \"C\" void launch(const float*,float*,int,cudaStream_t)");
    assert_string_equal(a, b);
    assert_string_not_equal(a, c);
    assert_string_equal(d, "void launch(const float*,float*,int,cudaStream_t)");
    assert_null(e);
    free(a), free(b), free(c), free(d), free(e);

    kl_llm_check chk = {kernel, "extern \"C\" void launch(const float*,float*,int,cudaStream_t)", 100000};
    char *reason = NULL;
    assert_int_equal(kl_llm_check_source(&chk, simplified, &reason), KL_OK);
    assert_int_equal(kl_llm_check_source(&chk, kernel, &reason), KL_ERR_INVALID);
    assert_non_null(strstr(reason, "unchanged"));
    free(reason);
    assert_int_equal(kl_llm_check_source(&chk, "__global__ void k() {}\n", &reason), KL_ERR_INVALID);
    assert_non_null(strstr(reason, "has no launch()"));
    free(reason);
    chk.max_bytes = 100;
    assert_int_equal(kl_llm_check_source(&chk, simplified, &reason), KL_ERR_INVALID);
    assert_non_null(strstr(reason, "over the limit of 100"));
    free(reason);
}

static void retry_after_and_backoff(void **state)
{
    (void)state;
    assert_true(kl_http_retry_after("1", 0) == 1.0);
    assert_true(kl_http_retry_after(" 120 ", 0) == 120.0);
    assert_true(kl_http_retry_after("soon", 0) < 0);
    assert_true(kl_http_retry_after("-3", 0) < 0);
    assert_true(kl_http_retry_after(NULL, 0) < 0);
    /* 1994-11-06 08:49:37 UTC is 784111777 */
    double w = kl_http_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 784111777.0 - 30);
    assert_true(w > 29.9 && w < 30.1);
    assert_true(kl_http_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 784111777.0 + 30) == 0);

    uint64_t rng = 42;
    double lo = 1e9, hi = 0;
    for (int i = 0; i < 200; i++) {
        double b = kl_http_backoff(1.0, 3, -1, &rng); /* base 4 s, jittered to [2, 4) */
        assert_true(b >= 2.0 && b < 4.0);
        if (b < lo) lo = b;
        if (b > hi) hi = b;
    }
    assert_true(hi - lo > 0.5); /* it really jitters */
    assert_true(kl_http_backoff(0.05, 1, 7.0, &rng) == 7.0); /* never below Retry-After */
}

static void scrub_replaces_every_copy(void **state)
{
    (void)state;
    char *s = kl_llm_scrub(kl_strdup("a " KEY " b " KEY), KEY);
    assert_string_equal(s, "a [redacted] b [redacted]");
    s = kl_llm_scrub(s, NULL);
    assert_string_equal(s, "a [redacted] b [redacted]");
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(good_answer_is_a_candidate),
        cmocka_unit_test(several_choices_each_checked),
        cmocka_unit_test(rate_limit_is_retried_after_its_wait),
        cmocka_unit_test(server_error_is_retried),
        cmocka_unit_test(retries_run_out),
        cmocka_unit_test(slow_answer_times_out),
        cmocka_unit_test(nothing_listening_is_a_network_error),
        cmocka_unit_test(garbage_is_rejected),
        cmocka_unit_test(truncated_answers_are_rejected),
        cmocka_unit_test(answers_without_usable_code_are_rejected),
        cmocka_unit_test(answer_over_the_limit_is_rejected),
        cmocka_unit_test(key_never_leaks),
        cmocka_unit_test(replays_with_no_endpoint),
        cmocka_unit_test(cache_key_covers_the_parameters),
        cmocka_unit_test(config_is_checked),
        cmocka_unit_test(prompts_carry_the_request),
        cmocka_unit_test(prompts_folder_overrides),
        cmocka_unit_test(code_is_taken_from_the_right_block),
        cmocka_unit_test(launch_signature_ignores_names_and_spacing),
        cmocka_unit_test(retry_after_and_backoff),
        cmocka_unit_test(scrub_replaces_every_copy),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
