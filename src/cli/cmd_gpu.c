/* klineage gpu info: the device and its measured ceilings (docs/cli/gpu.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "klineage/gate.h"
#include "measure.h"

static void print_value(const cli_measure *m, const char *indent, const char *key, json_t *v)
{
    if (json_is_object(v)) {
        cli_measure_printf(m, stdout, "%s%s:", indent, key);
        const char *k;
        json_t *x;
        char deeper[32];
        snprintf(deeper, sizeof deeper, "%s  ", indent);
        json_object_foreach(v, k, x) print_value(m, deeper, k, x);
    } else if (json_is_string(v)) {
        cli_measure_printf(m, stdout, "%s%-22s %s", indent, key, json_string_value(v));
    } else if (json_is_integer(v)) {
        cli_measure_printf(m, stdout, "%s%-22s %lld", indent, key, (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
        cli_measure_printf(m, stdout, "%s%-22s %.4g", indent, key, json_real_value(v));
    } else if (json_is_boolean(v)) {
        cli_measure_printf(m, stdout, "%s%-22s %s", indent, key, json_is_true(v) ? "yes" : "no");
    }
}

static void print_gpu(const cli_measure *m, json_t *doc)
{
    static const char *const sections[] = {"device", "ceilings", "toolchain"};
    json_t *name = json_object_get(json_object_get(doc, "device"), "name");
    cli_measure_printf(m, stdout, "%s (measured %s%s)", json_is_string(name) ? json_string_value(name) : "?",
                       json_string_value(json_object_get(doc, "date")) ? json_string_value(json_object_get(doc, "date"))
                                                                       : "?",
                       m->replay ? ", recorded" : "");
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        json_t *s = json_object_get(doc, sections[i]);
        if (s) print_value(m, "", sections[i], s);
    }
}

KL_CMD(gpu)
{
    if (cli_wants_help(argc, argv, cli)) return KL_EXIT_OK;
    cli_measure m = CLI_MEASURE_INIT;
    const char *action = NULL;
    for (int i = 1; i < argc;) {
        int r = cli_measure_option(cli, argc, argv, &i, &m);
        if (r < 0) return KL_EXIT_USAGE;
        if (r > 0) continue;
        const char *a = argv[i++];
        if (a[0] == '-' && a[1]) return cli_usage_error(cli, "unknown option '%s'", a);
        if (action) return cli_usage_error(cli, "unexpected argument '%s'", a);
        action = a;
    }
    if (!action) return cli_usage_error(cli, "'gpu' needs an action: info");
    if (strcmp(action, "info") != 0) return cli_usage_error(cli, "unknown action '%s' (expected: info)", action);

    int rc = KL_EXIT_FAILED;
    kl_error err = {0};
    kl_gate *gate = NULL;
    char *json = NULL;
    json_t *doc = NULL;
    /* the one rule (measure.h): live measures now or fails; no --measure replays without a GPU */
    if ((rc = cli_measure_resolve(cli)) != KL_EXIT_OK) goto cleanup;
    m.replay = cli->measure == KL_MEASURE_REPLAY;
    if ((rc = cli_measure_open(cli, &m, NULL)) != KL_EXIT_OK) goto cleanup;
    rc = KL_EXIT_FAILED;
    kl_gate_options go = cli_measure_gate_options(cli, &m);
    if (kl_gate_open(&go, &gate, &err) != KL_OK) {
        cli_measure_error(&m, "%s", err.message);
        goto cleanup;
    }
    if (!m.replay) cli_note(cli, "measuring the device's ceilings …\n");
    if (kl_gate_gpu_info(gate, !m.replay, &json, &err) != KL_OK) {
        cli_measure_error(&m, "%s", err.message);
        goto cleanup;
    }
    json_error_t je;
    doc = json_loads(json, 0, &je);
    if (!doc) {
        cli_measure_error(&m, "the device document is not JSON: %s", je.text);
        goto cleanup;
    }
    if (cli->json) {
        if (m.replay) json_object_set_new(doc, "replayed", json_true());
        char *out = json_dumps(doc, (m.replay ? JSON_COMPACT : JSON_INDENT(2)) | JSON_SORT_KEYS);
        if (out) puts(out);
        free(out);
    } else {
        print_gpu(&m, doc);
    }
    rc = cli_measure_finish(cli, &m);
cleanup:
    json_decref(doc);
    free(json);
    kl_gate_close(gate);
    cli_measure_close(&m);
    return rc;
}
