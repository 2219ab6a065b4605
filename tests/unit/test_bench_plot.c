/* src/bench/plot.c: the optimizer's budget curves, drawn with cairo (opened on first use). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/bench.h"
#include "kl_config.h"
#include "util/util.h"

static const char *const evaluation =
    "{\"budget\": 8, \"tasks\": ["
    "{\"task\": \"softmax\", \"policies\": {\"blind\": {\"curve\": [1, 1.2, 1.2, 1.5]},"
    " \"memory\": {\"curve\": [1, 1.1, 2.0]}, \"skills\": {\"curve\": [1, 3.0, 3.0, 4.5, 9.0]}}},"
    "{\"task\": \"gemv\", \"policies\": {\"blind\": {\"curve\": [1, 1, 1]}, \"skills\": {\"curve\": [1, 1.4]}}}]}";

static void plot_draws_an_svg_and_a_png(void **state)
{
    (void)state;
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("plot", &dir, &err), KL_OK);
    char *svg = kl_path_join(dir, "curves.svg"), *png = kl_path_join(dir, "curves.png");
    kl_status st = kl_bench_optimize_plot(evaluation, svg, png, &err);
#if KL_HAVE_CAIRO
    assert_int_equal(st, KL_OK);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(kl_file_read(svg, 0, &text, &len, &err), KL_OK);
    assert_non_null(strstr(text, "<svg"));
    assert_non_null(strstr(text, "</svg>"));
    free(text);
    assert_int_equal(kl_file_read(png, 0, &text, &len, &err), KL_OK);
    assert_true(len > 1000);
    assert_memory_equal(text, "\x89PNG\r\n\x1a\n", 8);
    free(text);
#else
    assert_int_equal(st, KL_ERR_UNSUPPORTED);
    assert_false(kl_file_exists(svg));
#endif
    /* nothing to draw: an error, no file */
    char *empty = kl_path_join(dir, "empty.svg");
    st = kl_bench_optimize_plot("{\"budget\": 8, \"tasks\": []}", empty, NULL, &err);
    assert_int_not_equal(st, KL_OK);
    assert_false(kl_file_exists(empty));
    free(empty);
    free(svg);
    free(png);
    assert_int_equal(kl_remove_tree(dir, &err), KL_OK);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plot_draws_an_svg_and_a_png),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
