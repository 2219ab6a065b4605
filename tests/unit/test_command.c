/* src/rewrite/command.c: a user's program as a rewriter — the sample in examples/, and
 * programs that hang, crash, print junk, print too much, or fail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "klineage/rewrite.h"
#include "util/util.h"

static char *kernel, *simplified, *simplified2, *signature, *tmp;

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
    kernel = data_file("kernel.cu");
    simplified = data_file("simplified.cu");
    simplified2 = data_file("simplified2.cu");
    signature = data_file("signature.cu");
    kl_error err = {0};
    if (kl_tempdir("test-command", &tmp, &err) != KL_OK) return -1;
    return kernel && simplified && simplified2 && signature && getenv("KL_SAMPLE_REWRITER") && getenv("KL_TESTCHILD")
               ? 0
               : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    kl_error err = {0};
    if (tmp) kl_remove_tree(tmp, &err);
    free(kernel), free(simplified), free(simplified2), free(signature), free(tmp);
    return 0;
}

/* {"program": PROGRAM, "args": [ARGS…], EXTRA} with the strings JSON-escaped. */
static char *config(const char *program, const char *const *args, const char *extra)
{
    json_t *cfg = json_pack("{s:s}", "program", program);
    json_t *a = json_array();
    for (const char *const *p = args; p && *p; p++) json_array_append_new(a, json_string(*p));
    json_object_set_new(cfg, "args", a);
    if (extra) {
        json_t *more = json_loads(extra, 0, NULL);
        json_object_update(cfg, more);
        json_decref(more);
    }
    char *s = json_dumps(cfg, JSON_COMPACT);
    json_decref(cfg);
    return s;
}

static kl_status run(const char *cfg, const kl_rewrite_request *req, kl_candidates *out, kl_error *err)
{
    kl_rewriter *rw = NULL;
    kl_status st = kl_rewriter_open("command", cfg, &rw, err);
    if (st != KL_OK) return st;
    assert_string_equal(kl_rewriter_name(rw), "command");
    st = kl_rewriter_propose(rw, req, out, err);
    kl_rewriter_free(rw);
    return st;
}

static kl_rewrite_request request(kl_request_kind kind, const char *source)
{
    kl_rewrite_request req = {0};
    req.kind = kind;
    req.source = source;
    req.source_name = "kernel.cu";
    return req;
}

/* A program (a shell script in tmp) that prints `answer` after saving its stdin. */
static char *script(const char *name, const char *answer)
{
    char *answer_path = kl_path_join(tmp, "answer.json");
    char *req_path = kl_path_join(tmp, "request.json");
    char *path = kl_path_join(tmp, name);
    kl_error err = {0};
    assert_int_equal(kl_file_write(answer_path, answer, strlen(answer), &err), KL_OK);
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "#!/bin/sh\ncat > '%s'\ncat '%s'\n", req_path, answer_path);
    assert_int_equal(kl_file_write(path, sb.buf, sb.len, &err), KL_OK);
    kl_strbuf_release(&sb);
    chmod(path, 0755);
    free(answer_path), free(req_path);
    return path;
}

/* Exactly one rejection, no candidates, the reason holding `needle`. */
static void expect_rejection(const char *cfg, const char *needle)
{
    kl_rewrite_request req = request(KL_REQ_SIMPLIFY, kernel);
    kl_candidates c;
    kl_error err = {0};
    assert_int_equal(run(cfg, &req, &c, &err), KL_OK);
    assert_int_equal(c.count, 0);
    assert_int_equal(c.nrejected, 1);
    if (!strstr(c.rejected[0].reason, needle))
        fail_msg("expected a rejection mentioning \"%s\", got \"%s\"", needle, c.rejected[0].reason);
    assert_string_equal(c.rejected[0].transform, "command");
    kl_candidates_free(&c);
}

/* ---- the sample ---------------------------------------------------------------------------------- */

static void sample_simplifies(void **state)
{
    (void)state;
    char *cfg = config(getenv("KL_SAMPLE_REWRITER"), NULL, NULL);
    kl_rewrite_request req = request(KL_REQ_SIMPLIFY, kernel);
    kl_candidates c;
    kl_error err = {0};
    assert_int_equal(run(cfg, &req, &c, &err), KL_OK);
    assert_int_equal(c.count, 2);
    assert_string_equal(c.items[0].transform, "unroll");
    assert_string_equal(c.items[0].site, "line 7");
    assert_string_equal(c.items[0].source, simplified);
    assert_string_equal(c.items[1].transform, "restrict");
    assert_string_equal(c.items[1].source, simplified2);
    assert_string_equal(c.items[1].params_json, "{}");
    assert_non_null(strstr(c.items[1].note, "removed __restrict__"));
    assert_int_equal(c.nrejected, 0);
    assert_int_equal(c.requests, 1);
    assert_true(c.wall_s > 0);
    kl_candidates_free(&c);

    /* nothing left to remove: the sample says so, and that is passed on */
    char *bare = data_file("simplified.cu");
    for (char *q; (q = strstr(bare, "__restrict__")) != NULL;) memset(q, ' ', 12);
    req.source = bare;
    assert_int_equal(run(cfg, &req, &c, &err), KL_OK);
    assert_int_equal(c.count, 0);
    assert_int_equal(c.nrejected, 2);
    assert_string_equal(c.rejected[0].reason, "rejected by the program: no #pragma unroll to remove");
    kl_candidates_free(&c);
    free(bare);
    free(cfg);
}

static void sample_applies(void **state)
{
    (void)state;
    char *cfg = config(getenv("KL_SAMPLE_REWRITER"), NULL, NULL);
    kl_rewrite_request req = request(KL_REQ_APPLY, simplified2);
    req.transform = "restrict";
    kl_candidates c;
    kl_error err = {0};
    assert_int_equal(run(cfg, &req, &c, &err), KL_OK);
    assert_int_equal(c.count, 1);
    assert_string_equal(c.items[0].source, kernel); /* the exact inverse of the simplification */
    kl_candidates_free(&c);

    req.source = simplified;
    req.transform = NULL;
    req.skill_json = "{\"id\": \"unroll-1\", \"transform\": \"unroll\", \"intent\": \"unroll the short loop\"}";
    assert_int_equal(run(cfg, &req, &c, &err), KL_OK);
    assert_int_equal(c.count, 1);
    assert_string_equal(c.items[0].transform, "unroll");
    assert_non_null(strstr(c.items[0].source, "    #pragma unroll\n    for (int k = 0; k < 4; k++)"));
    kl_candidates_free(&c);
    free(cfg);
}

/* ---- the request a program gets --------------------------------------------------------------------- */

static void request_follows_the_schema(void **state)
{
    (void)state;
    char *prog = script("capture.sh", "{\"candidates\": []}");
    char *cfg = config(prog, NULL, NULL);
    const char *sizes[] = {"n"};
    kl_arg args[] = {
        {.name = "x", .dtype = KL_DTYPE_F32, .shape = "n", .role = KL_ROLE_IN},
        {.name = "y", .dtype = KL_DTYPE_F32, .shape = "n", .role = KL_ROLE_INOUT},
        {.name = "n", .dtype = KL_DTYPE_NONE, .value = "n"},
    };
    kl_task task = {.name = "saxpy", .summary = "y = 2x + y", .sizes = sizes, .nsizes = 1, .args = args,
                    .nargs = 3, .rel_l2 = 1e-6, .max_abs = -1};
    kl_rewrite_request req = request(KL_REQ_APPLY, kernel);
    req.task = &task;
    req.skill_json = "{\"id\": \"s\", \"transform\": \"vectorize\"}";
    req.features_json = "[{\"transform\": \"unroll\", \"site\": \"saxpy4:7\"}]";
    req.rejected_json = "[{\"transform\": \"vectorize\", \"site\": \"saxpy4:9\", \"reason\": \"wrong at n=3\"}]";
    req.max_candidates = 2;
    kl_candidates c;
    kl_error err = {0};
    assert_int_equal(run(cfg, &req, &c, &err), KL_OK);
    assert_int_equal(c.count + c.nrejected, 0);
    kl_candidates_free(&c);

    char *req_path = kl_path_join(tmp, "request.json");
    json_error_t je;
    json_t *doc = json_load_file(req_path, 0, &je);
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(doc, "kind")), "apply");
    assert_string_equal(json_string_value(json_object_get(doc, "source")), kernel);
    assert_string_equal(json_string_value(json_object_get(doc, "source_name")), "kernel.cu");
    assert_string_equal(json_string_value(json_object_get(doc, "launch")),
                        "extern \"C\" void launch(const float*,float*,int,cudaStream_t)");
    json_t *t = json_object_get(doc, "task");
    assert_string_equal(json_string_value(json_object_get(t, "name")), "saxpy");
    json_t *a1 = json_array_get(json_object_get(t, "args"), 1);
    assert_string_equal(json_string_value(json_object_get(a1, "type")), "f32*");
    assert_string_equal(json_string_value(json_object_get(a1, "role")), "inout");
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(t, "args"), 2), "type")),
                        "int");
    assert_string_equal(json_string_value(json_object_get(json_object_get(doc, "skill"), "transform")), "vectorize");
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(doc, "features"), 0), "site")),
                        "saxpy4:7");
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(json_object_get(doc, "rejected"), 0), "reason")),
        "wrong at n=3");
    assert_int_equal(json_integer_value(json_object_get(doc, "max_candidates")), 2);
    json_decref(doc);

    /* a simplify request without task or skill: nulls, an empty rejected list */
    req = request(KL_REQ_SIMPLIFY, kernel);
    assert_int_equal(run(cfg, &req, &c, &err), KL_OK);
    kl_candidates_free(&c);
    doc = json_load_file(req_path, 0, &je);
    assert_string_equal(json_string_value(json_object_get(doc, "kind")), "simplify");
    assert_true(json_is_null(json_object_get(doc, "task")));
    assert_true(json_is_null(json_object_get(doc, "skill")));
    assert_true(json_is_null(json_object_get(doc, "features")));
    assert_int_equal(json_array_size(json_object_get(doc, "rejected")), 0);
    json_decref(doc);

    /* a malformed field of the request is the caller's error, named */
    req.features_json = "[1, 2";
    assert_int_equal(run(cfg, &req, &c, &err), KL_ERR_PARSE);
    assert_non_null(strstr(err.message, "features_json: line 1"));
    kl_candidates_free(&c);
    free(req_path);
    free(cfg);
    free(prog);
}

/* ---- answers are checked ----------------------------------------------------------------------------- */

static void candidates_are_checked(void **state)
{
    (void)state;
    json_t *ans = json_pack("{s:[{s:s, s:s, s:s, s:{s:i}, s:s}, {s:s, s:s}, {s:s}, {s:s, s:s}, {s:s, s:i}, {s:s, s:s, "
                            "s:i}], s:[{s:s, s:s}], s:{s:i, s:i}}",
                            "candidates",
                            /* 0: good */
                            "source", simplified, "transform", "unroll", "site", "saxpy4:7", "params", "factor", 4,
                            "note", "dropped the pragma",
                            /* 1: changed signature */
                            "source", signature, "transform", "widen",
                            /* 2: no source */
                            "transform", "nothing",
                            /* 3: the same as 0 */
                            "source", simplified, "transform", "again",
                            /* 4: params not an object */
                            "source", simplified2, "params", 3,
                            /* 5: the request's own file */
                            "source", kernel, "transform", "noop", "extra", 1,
                            "rejected", "transform", "vectorize", "reason", "no contiguous loads here",
                            "usage", "tokens_in", 500, "tokens_out", 80);
    char *text = json_dumps(ans, JSON_COMPACT);
    json_decref(ans);
    char *prog = script("answer.sh", text);
    free(text);
    char *cfg = config(prog, NULL, NULL);
    kl_rewrite_request req = request(KL_REQ_SIMPLIFY, kernel);
    kl_candidates c;
    kl_error err = {0};
    assert_int_equal(run(cfg, &req, &c, &err), KL_OK);
    assert_int_equal(c.count, 1);
    assert_string_equal(c.items[0].source, simplified);
    assert_string_equal(c.items[0].site, "saxpy4:7");
    assert_string_equal(c.items[0].params_json, "{\"factor\":4}");
    assert_string_equal(c.items[0].note, "dropped the pragma");
    assert_int_equal(c.nrejected, 6);
    assert_non_null(strstr(c.rejected[0].reason, "candidates[1]: the launch() signature changed"));
    assert_string_equal(c.rejected[0].transform, "widen");
    assert_non_null(strstr(c.rejected[1].reason, "candidates[2]: expected a \"source\" string"));
    assert_non_null(strstr(c.rejected[2].reason, "candidates[3]: the same file as an earlier candidate"));
    assert_non_null(strstr(c.rejected[3].reason, "candidates[4].params: expected an object"));
    assert_non_null(strstr(c.rejected[4].reason, "candidates[5]: the proposed file is the current file"));
    assert_string_equal(c.rejected[5].reason, "rejected by the program: no contiguous loads here");
    assert_string_equal(c.rejected[5].transform, "vectorize");
    assert_int_equal(c.tokens_in, 500);
    assert_int_equal(c.tokens_out, 80);
    kl_candidates_free(&c);

    /* max_candidates is a bound */
    free(prog);
    free(cfg);
    ans = json_pack("{s:[{s:s}, {s:s}]}", "candidates", "source", simplified, "source", simplified2);
    text = json_dumps(ans, JSON_COMPACT);
    json_decref(ans);
    prog = script("two.sh", text);
    free(text);
    cfg = config(prog, NULL, NULL);
    req.max_candidates = 1;
    assert_int_equal(run(cfg, &req, &c, &err), KL_OK);
    assert_int_equal(c.count, 1);
    assert_int_equal(c.nrejected, 1);
    assert_non_null(strstr(c.rejected[0].reason, "more candidates than asked for"));
    kl_candidates_free(&c);
    free(prog);
    free(cfg);

    /* an answer that is JSON but not the expected object */
    prog = script("array.sh", "[1, 2, 3]");
    cfg = config(prog, NULL, NULL);
    expect_rejection(cfg, "expected an object {\"candidates\": [...]}");
    free(prog);
    free(cfg);
}

/* ---- programs that misbehave ------------------------------------------------------------------------------ */

static void bad_programs_are_rejections(void **state)
{
    (void)state;
    const char *child = getenv("KL_TESTCHILD");
    const char *hang[] = {"hang", NULL}, *crash[] = {"crash", NULL}, *junk[] = {"junk", NULL},
               *flood[] = {"flood", "100000", NULL}, *fail[] = {"exit", "3", NULL}, *echo[] = {"echo", NULL};
    char *cfg;

    double t0 = kl_now();
    cfg = config(child, hang, "{\"timeout_s\": 1}");
    expect_rejection(cfg, "the program timed out after 1.0 s (timeout_s)");
    assert_true(kl_now() - t0 < 5);
    free(cfg);

    cfg = config(child, crash, NULL);
    kl_rewrite_request creq = request(KL_REQ_SIMPLIFY, kernel);
    kl_candidates cc;
    kl_error cerr = {0};
    assert_int_equal(run(cfg, &creq, &cc, &cerr), KL_OK);
    assert_int_equal(cc.count, 0);
    assert_int_equal(cc.nrejected, 1);
    /* under AddressSanitizer the helper's SIGSEGV becomes ASan's report and exit 1 */
    assert_true(strstr(cc.rejected[0].reason, "the program crashed: killed by signal 11") ||
                strstr(cc.rejected[0].reason, "the program failed: exit 1; stderr: "));
    kl_candidates_free(&cc);
    free(cfg);

    /* a program no sanitizer catches, killed by a signal */
    char *segv = kl_path_join(tmp, "segv.sh");
    const char *segv_body = "#!/bin/sh\ncat > /dev/null\nkill -SEGV $$\n";
    assert_int_equal(kl_file_write(segv, segv_body, strlen(segv_body), &cerr), KL_OK);
    chmod(segv, 0755);
    cfg = config(segv, NULL, NULL);
    expect_rejection(cfg, "the program crashed: killed by signal 11");
    free(cfg);
    free(segv);

    cfg = config(child, junk, NULL);
    expect_rejection(cfg, "malformed answer on stdout: line 1, column 4: '[' or '{' expected near 'Sure'");
    free(cfg);

    cfg = config(child, flood, "{\"max_output_bytes\": 4096}");
    expect_rejection(cfg, "printed more than 4096 bytes (max_output_bytes)");
    free(cfg);

    cfg = config(child, fail, NULL);
    expect_rejection(cfg, "the program failed: exit 3");
    free(cfg);

    /* the request itself, echoed: JSON, but no candidates */
    cfg = config(child, echo, NULL);
    expect_rejection(cfg, "expected an object {\"candidates\": [...]}");
    free(cfg);

    /* stderr is quoted in the reason */
    char *prog = kl_path_join(tmp, "stderr.sh");
    const char *body = "#!/bin/sh\ncat > /dev/null\necho 'model quota exhausted' >&2\nexit 2\n";
    kl_error err = {0};
    assert_int_equal(kl_file_write(prog, body, strlen(body), &err), KL_OK);
    chmod(prog, 0755);
    cfg = config(prog, NULL, NULL);
    expect_rejection(cfg, "exit 2; stderr: model quota exhausted");
    free(cfg);
    free(prog);

    /* a program that cannot be started is an error, not a rejection */
    cfg = config("/nonexistent/rewriter", NULL, NULL);
    kl_rewrite_request req = request(KL_REQ_SIMPLIFY, kernel);
    kl_candidates c;
    assert_int_equal(run(cfg, &req, &c, &err), KL_ERR_CHILD);
    assert_non_null(strstr(err.message, "/nonexistent/rewriter: cannot run"));
    assert_int_equal(c.count + c.nrejected, 0);
    kl_candidates_free(&c);
    free(cfg);
}

static void config_is_checked(void **state)
{
    (void)state;
    kl_rewriter *rw = NULL;
    kl_error err = {0};
    assert_int_equal(kl_rewriter_open("command", NULL, &rw, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "expected {\"program\""));
    assert_int_equal(kl_rewriter_open("command", "{\"args\": []}", &rw, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "\"program\": expected the program to run"));
    assert_int_equal(kl_rewriter_open("command", "{\"program\": \"x\", \"args\": \"-v\"}", &rw, &err),
                     KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "\"args\": expected an array"));
    assert_int_equal(kl_rewriter_open("command", "{\"program\": \"x\", \"args\": [1]}", &rw, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "\"args\"[0]: expected a string"));
    assert_int_equal(kl_rewriter_open("command", "{\"program\": \"x\", \"timeout\": 3}", &rw, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "unknown key \"timeout\""));
    assert_int_equal(kl_rewriter_open("command", "{\"program\": \"x\", \"timeout_s\": -1}", &rw, &err),
                     KL_ERR_INVALID);
    assert_int_equal(kl_rewriter_open("command", "{\"program\": \"x\", \"max_output_bytes\": 10}", &rw, &err),
                     KL_ERR_INVALID);
    assert_int_equal(kl_rewriter_open("command", "{\"program\": ", &rw, &err), KL_ERR_PARSE);
    assert_non_null(strstr(err.message, "line 1"));
    assert_null(rw);
    assert_int_equal(kl_rewriter_open("nope", NULL, &rw, &err), KL_ERR_INVALID);
}

/* Proposals that would have crashed the parser (deep unclosed nesting: tree-sitter 0.20.7's
 * 16-bit child count) or overflowed a recursive walk: each is a rejection naming the limit,
 * never the end of the walk (docs/syntax.md, "Limits"). */
static void pathological_proposals_are_rejections(void **state)
{
    (void)state;
    static const struct {
        const char *unit;
        unsigned n;
        const char *head, *tail, *needle;
    } cases[] = {
        {"(", 65535, "", "", "brackets nested more than 256 deep"},
        {"{", 70000, "", "", "brackets nested more than 256 deep"},
        {"#if 1\n", 100000, "", "", "#if/#ifdef/#ifndef nested more than 64 deep"},
        {"+1", 100000, "__global__ void k(int *a) { a[0] = 1", "; }\n", "more than 32000 tokens"},
        {"+1", 3000, "__global__ void k(int *a) { a[0] = 1", "; }\n", "nests more than 1000 levels deep"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        kl_strbuf src = KL_STRBUF_INIT;
        kl_strbuf_adds(&src, cases[k].head);
        for (unsigned i = 0; i < cases[k].n; i++) kl_strbuf_adds(&src, cases[k].unit);
        kl_strbuf_adds(&src, cases[k].tail);
        json_t *ans = json_pack("{s:[{s:s, s:s}]}", "candidates", "source", kl_strbuf_str(&src), "transform", "deep");
        kl_strbuf_release(&src);
        char *text = json_dumps(ans, JSON_COMPACT);
        json_decref(ans);
        char *prog = script("deep.sh", text);
        free(text);
        char *cfg = config(prog, NULL, NULL);
        kl_rewrite_request req = request(KL_REQ_SIMPLIFY, kernel);
        kl_candidates c;
        kl_error err = {0};
        assert_int_equal(run(cfg, &req, &c, &err), KL_OK);
        assert_int_equal(c.count, 0);
        assert_int_equal(c.nrejected, 1);
        if (!strstr(c.rejected[0].reason, cases[k].needle))
            fail_msg("case %zu: expected a rejection mentioning \"%s\", got \"%s\"", k, cases[k].needle,
                     c.rejected[0].reason);
        assert_string_equal(c.rejected[0].transform, "deep");
        kl_candidates_free(&c);
        free(prog);
        free(cfg);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sample_simplifies),
        cmocka_unit_test(sample_applies),
        cmocka_unit_test(request_follows_the_schema),
        cmocka_unit_test(candidates_are_checked),
        cmocka_unit_test(bad_programs_are_rejections),
        cmocka_unit_test(config_is_checked),
        cmocka_unit_test(pathological_proposals_are_rejections),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
