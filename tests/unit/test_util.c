/* src/util: string buffers, files, hashing, child processes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/util.h"

static void strbuf_grows_and_formats(void **state)
{
    (void)state;
    kl_strbuf sb = KL_STRBUF_INIT;
    assert_string_equal(kl_strbuf_str(&sb), "");
    for (int i = 0; i < 1000; i++) kl_strbuf_addf(&sb, "%d,", i);
    assert_true(sb.len > 3000);
    assert_true(kl_str_starts(kl_strbuf_str(&sb), "0,1,2,"));
    assert_true(kl_str_ends(kl_strbuf_str(&sb), "998,999,"));
    assert_false(sb.truncated);
    kl_strbuf_release(&sb);
}

static void strbuf_respects_max(void **state)
{
    (void)state;
    kl_strbuf sb;
    kl_strbuf_init(&sb, 10);
    kl_strbuf_adds(&sb, "0123456789abcdef");
    assert_int_equal(sb.len, 10);
    assert_true(sb.truncated);
    assert_string_equal(kl_strbuf_str(&sb), "0123456789");
    kl_strbuf_release(&sb);
}

static void text_position_counts_lines(void **state)
{
    (void)state;
    const char *t = "ab\ncd\n\nef";
    unsigned l, c;
    kl_text_position(t, strlen(t), 4, &l, &c);
    assert_int_equal(l, 2);
    assert_int_equal(c, 2);
    kl_text_position(t, strlen(t), 7, &l, &c);
    assert_int_equal(l, 4);
    assert_int_equal(c, 1);
}

static void file_roundtrip_and_errors(void **state)
{
    (void)state;
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("test", &dir, &err), KL_OK);
    char *sub = kl_path_join(dir, "a/b/c");
    assert_int_equal(kl_mkdirs(sub, &err), KL_OK);
    char *f = kl_path_join(sub, "x.txt");
    assert_int_equal(kl_file_write(f, "hello", 5, &err), KL_OK);
    char *data = NULL;
    size_t len = 0;
    assert_int_equal(kl_file_read(f, 0, &data, &len, &err), KL_OK);
    assert_int_equal(len, 5);
    assert_string_equal(data, "hello");
    free(data);

    assert_int_equal(kl_file_read(f, 3, &data, &len, &err), KL_ERR_TOO_LARGE);
    assert_non_null(strstr(err.message, "x.txt"));
    assert_int_equal(kl_file_read(sub, 0, &data, &len, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "directory"));
    char *missing = kl_path_join(dir, "nope");
    assert_int_equal(kl_file_read(missing, 0, &data, &len, &err), KL_ERR_NOT_FOUND);
    assert_null(data);

    char *dn = kl_path_dirname(f);
    assert_string_equal(dn, sub);
    assert_int_equal(kl_remove_tree(dir, &err), KL_OK);
    assert_false(kl_dir_exists(dir));
    free(dn), free(missing), free(f), free(sub), free(dir);
}

static void hash_is_sha256_and_parts_are_framed(void **state)
{
    (void)state;
    char hex[KL_HASH_HEX];
    kl_hash_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    char a[KL_HASH_HEX], b[KL_HASH_HEX];
    kl_hasher *h = kl_hasher_new();
    kl_hasher_parts(h, "ab");
    kl_hasher_parts(h, "c");
    kl_hasher_finish(h, a);
    h = kl_hasher_new();
    kl_hasher_parts(h, "a");
    kl_hasher_parts(h, "bc");
    kl_hasher_finish(h, b);
    assert_string_not_equal(a, b);
}

static const char *testchild(void)
{
    const char *p = getenv("KL_TESTCHILD");
    return p ? p : "kl_testchild";
}

static void child_echoes_stdin(void **state)
{
    (void)state;
    const char *argv[] = {testchild(), "echo", NULL};
    kl_child c;
    kl_child_init(&c);
    c.argv = argv;
    c.stdin_data = "ping\n";
    c.stdin_len = 5;
    c.timeout_s = 10;
    kl_error err = {0};
    assert_int_equal(kl_child_run(&c, &err), KL_OK);
    assert_int_equal(c.exit_code, 0);
    assert_string_equal(kl_strbuf_str(&c.out), "ping\n");
    kl_child_release(&c);
}

static void child_exit_code_and_signal(void **state)
{
    (void)state;
    kl_error err = {0};
    const char *argv1[] = {testchild(), "exit", "7", NULL};
    kl_child c;
    kl_child_init(&c);
    c.argv = argv1;
    assert_int_equal(kl_child_run(&c, &err), KL_OK);
    assert_int_equal(c.exit_code, 7);
    kl_child_release(&c);

    const char *argv2[] = {testchild(), "crash", NULL};
    kl_child_init(&c);
    c.argv = argv2;
    assert_int_equal(kl_child_run(&c, &err), KL_OK);
    assert_int_equal(c.term_signal, 11);
    assert_int_equal(c.exit_code, 128 + 11);
    char d[128];
    kl_child_describe(&c, d, sizeof d);
    assert_non_null(strstr(d, "signal 11"));
    kl_child_release(&c);
}

static void child_deadline_kills(void **state)
{
    (void)state;
    const char *argv[] = {testchild(), "hang", NULL};
    kl_child c;
    kl_child_init(&c);
    c.argv = argv;
    c.timeout_s = 0.3;
    kl_error err = {0};
    double t0 = kl_now();
    assert_int_equal(kl_child_run(&c, &err), KL_OK);
    assert_true(c.timed_out);
    assert_true(kl_now() - t0 < 5.0);
    kl_child_release(&c);
}

static void child_grandchild_holding_pipes_is_killed(void **state)
{
    (void)state;
    const char *argv[] = {testchild(), "fork-hang", NULL};
    kl_child c;
    kl_child_init(&c);
    c.argv = argv;
    c.timeout_s = 30;
    kl_error err = {0};
    double t0 = kl_now();
    assert_int_equal(kl_child_run(&c, &err), KL_OK);
    assert_false(c.timed_out);
    assert_int_equal(c.exit_code, 0);
    assert_true(kl_now() - t0 < 5.0);
    assert_non_null(strstr(kl_strbuf_str(&c.out), "parent done"));
    kl_child_release(&c);
}

static void child_output_is_bounded(void **state)
{
    (void)state;
    const char *argv[] = {testchild(), "flood", "5000000", NULL};
    kl_child c;
    kl_child_init(&c);
    c.argv = argv;
    c.out_max = 1000;
    kl_error err = {0};
    assert_int_equal(kl_child_run(&c, &err), KL_OK);
    assert_int_equal(c.out.len, 1000);
    assert_true(c.out.truncated);
    assert_int_equal(c.exit_code, 0);
    kl_child_release(&c);
}

static void child_env_dir_and_missing_program(void **state)
{
    (void)state;
    kl_error err = {0};
    const char *env[] = {"KL_PROBE=42", NULL};
    const char *argv[] = {testchild(), "env", "KL_PROBE", NULL};
    kl_child c;
    kl_child_init(&c);
    c.argv = argv;
    c.env = env;
    assert_int_equal(kl_child_run(&c, &err), KL_OK);
    assert_string_equal(kl_strbuf_str(&c.out), "42\n");
    kl_child_release(&c);

    const char *argv2[] = {testchild(), "pwd", NULL};
    kl_child_init(&c);
    c.argv = argv2;
    c.dir = "/";
    assert_int_equal(kl_child_run(&c, &err), KL_OK);
    assert_string_equal(kl_strbuf_str(&c.out), "/\n");
    kl_child_release(&c);

    const char *argv3[] = {"/nonexistent/klineage-no-such-program", NULL};
    kl_child_init(&c);
    c.argv = argv3;
    assert_int_equal(kl_child_run(&c, &err), KL_ERR_CHILD);
    assert_non_null(strstr(err.message, "no-such-program"));
    kl_child_release(&c);
}

static void strerror_names_every_status(void **state)
{
    (void)state;
    for (int s = KL_OK; s <= KL_ERR_UNSUPPORTED; s++) assert_string_not_equal(kl_strerror((kl_status)s), "unknown status");
    assert_string_equal(kl_strerror((kl_status)9999), "unknown status");
}

/* alive: the process exists and is not a zombie (an orphan's zombie may wait for PID 1) */
static bool alive(pid_t pid)
{
    char path[64], buf[512];
    kl_snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

/* A child and what it starts die with the process that ran it, however that process ends
 * (here SIGKILL, which nothing can catch): the guardian of kl_child_run kills the group. */
static void children_die_with_their_parent(void **state)
{
    (void)state;
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("test-util-orphans", &dir, &err), KL_OK);
    char *pids = kl_path_join(dir, "pids");
    char script[1024];
    kl_snprintf(script, sizeof script, "sleep 300 & echo $! >> '%s'; echo $$ >> '%s'; wait", pids, pids);
    pid_t runner = fork();
    assert_true(runner >= 0);
    if (runner == 0) {
        const char *argv[] = {"sh", "-c", script, NULL};
        kl_child c;
        kl_child_init(&c);
        c.argv = argv;
        kl_child_run(&c, NULL);
        _exit(0);
    }
    int got[2] = {0, 0};
    for (int tries = 0; tries < 300; tries++) {
        FILE *f = fopen(pids, "r");
        int n = 0;
        if (f) {
            while (n < 2 && fscanf(f, "%d", &got[n]) == 1) n++;
            fclose(f);
        }
        if (n == 2) break;
        usleep(20000);
        got[0] = got[1] = 0;
    }
    assert_true(got[0] > 0 && got[1] > 0);
    assert_true(alive(got[0]) && alive(got[1]));
    kill(runner, SIGKILL);
    waitpid(runner, NULL, 0);
    bool gone = false;
    for (int tries = 0; tries < 250 && !gone; tries++) {
        gone = !alive(got[0]) && !alive(got[1]);
        if (!gone) usleep(20000);
    }
    if (!gone) { /* do not leave them behind, then fail */
        kill(got[0], SIGKILL);
        kill(got[1], SIGKILL);
    }
    assert_true(gone);
    kl_remove_tree(dir, NULL);
    free(dir);
    free(pids);
}

/* a library opened on first use: its symbols resolved; a missing file or symbol a clear error
 * naming it and the package, given again at every later call */
static double (*dl_cos)(double);
static const kl_dl_symbol libm_symbols[] = {{"cos", &dl_cos}};
static const char *const libm_sonames[] = {"libklineage-absent.so.1", "libm.so.6", NULL};
static kl_dl_lib libm_lib = KL_DL_LIB("the maths library", libm_sonames, libm_symbols, "libc6");

static void (*dl_none)(void);
static const kl_dl_symbol none_symbols[] = {{"cos", &dl_cos}, {"kl_no_such_function", &dl_none}};
static kl_dl_lib libm_lacking = KL_DL_LIB("the maths library", libm_sonames, none_symbols, "libc6");

static const char *const absent_sonames[] = {"libklineage-absent.so.1", "libklineage-absent.so.2", NULL};
static kl_dl_lib absent_lib = KL_DL_LIB("a plotter", absent_sonames, libm_symbols, "klineage-plotter");

static void dl_open_resolves_or_names_what_is_missing(void **state)
{
    (void)state;
    kl_error err = {0};
    assert_int_equal(kl_dl_open(&libm_lib, &err), KL_OK);
    assert_non_null(dl_cos);
    assert_true(dl_cos(0.0) == 1.0);
    assert_int_equal(kl_dl_open(&libm_lib, &err), KL_OK); /* once: the same answer */

    for (int i = 0; i < 2; i++) {
        assert_int_equal(kl_dl_open(&absent_lib, &err), KL_ERR_UNSUPPORTED);
        assert_non_null(strstr(err.message, "a plotter cannot be loaded"));
        assert_non_null(strstr(err.message, "libklineage-absent.so.1"));
        assert_non_null(strstr(err.message, "libklineage-absent.so.2"));
        assert_non_null(strstr(err.message, "install the package klineage-plotter"));
    }
    assert_int_equal(kl_dl_open(&libm_lacking, &err), KL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "has no kl_no_such_function"));
    assert_null(dl_none);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(strbuf_grows_and_formats),
        cmocka_unit_test(strbuf_respects_max),
        cmocka_unit_test(text_position_counts_lines),
        cmocka_unit_test(file_roundtrip_and_errors),
        cmocka_unit_test(hash_is_sha256_and_parts_are_framed),
        cmocka_unit_test(child_echoes_stdin),
        cmocka_unit_test(child_exit_code_and_signal),
        cmocka_unit_test(child_deadline_kills),
        cmocka_unit_test(child_grandchild_holding_pipes_is_killed),
        cmocka_unit_test(child_output_is_bounded),
        cmocka_unit_test(child_env_dir_and_missing_program),
        cmocka_unit_test(children_die_with_their_parent),
        cmocka_unit_test(strerror_names_every_status),
        cmocka_unit_test(dl_open_resolves_or_names_what_is_missing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
