/* klineage: the command table, global options and dispatch. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "measure.h"

typedef struct cli_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv, kl_cli *cli);
} cli_command;

/* The table: only subcommands that exist. Keep docs/cli/<name>.md beside each. */
static const cli_command commands[] = {
    {"help", "show help for klineage or one subcommand", cmd_help},
    {"parse", "kernels, launches, loops, shared memory and features of CUDA files", cmd_parse},
    {"version", "print the version", cmd_version},
    {"task", "validate a task: task check TASK_DIR", cmd_task},
    {"gate", "judge one kernel: compile, correct, profile", cmd_gate},
    {"gpu", "the device and its measured ceilings: gpu info", cmd_gpu},
    {"optimize", "make a kernel faster with the skill cards, every step gated", cmd_optimize},
    {"lineage", "walk an expert kernel backward; extract skill cards", cmd_lineage},
    {"bench", "the suite's naive and expert kernels against the vendor", cmd_bench},
    {"rewrite", "list, apply or remove the rules catalog's transforms in a file", cmd_rewrite},
    {"skills", "the skill library: list, show, export, import, match against a kernel", cmd_skills},
};

static const cli_command *find_command(const char *name)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(commands[i].name, name)) return &commands[i];
    return NULL;
}

int cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return KL_EXIT_FAILED;
}

int cli_usage_error(const kl_cli *cli, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (cli && cli->cmd)
        fprintf(stderr, "hint: see 'klineage %s --help'\n", cli->cmd);
    else
        fprintf(stderr, "hint: see 'klineage help'\n");
    return KL_EXIT_USAGE;
}

void cli_note(const kl_cli *cli, const char *fmt, ...)
{
    if (cli->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

bool cli_is_help(const char *s) { return !strcmp(s, "-h") || !strcmp(s, "--help"); }

bool cli_print_help(const char *cmd, FILE *f)
{
    for (unsigned i = 0; i < cli_help_count; i++) {
        if (!strcmp(cli_help_texts[i].name, cmd)) {
            fputs(cli_help_texts[i].text, f);
            return true;
        }
    }
    return false;
}

bool cli_wants_help(int argc, char **argv, const kl_cli *cli)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) break;
        if (cli_is_help(argv[i])) {
            cli_print_help(cli->cmd, stdout);
            return true;
        }
    }
    return false;
}

static void print_overview(FILE *f)
{
    cli_print_help("klineage", f);
    fputs("\nsubcommands:\n", f);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fputs("\nSee 'klineage help SUBCOMMAND' for one subcommand.\n", f);
}

KL_CMD(help)
{
    if (cli_wants_help(argc, argv, cli)) return KL_EXIT_OK;
    if (argc < 2) {
        print_overview(stdout);
        return KL_EXIT_OK;
    }
    if (!find_command(argv[1])) return cli_usage_error(cli, "unknown subcommand '%s'", argv[1]);
    if (!cli_print_help(argv[1], stdout)) return cli_error("no help for '%s'", argv[1]);
    return KL_EXIT_OK;
}

KL_CMD(version)
{
    if (cli_wants_help(argc, argv, cli)) return KL_EXIT_OK;
    if (argc > 1) return cli_usage_error(cli, "'version' takes no arguments");
    printf("klineage %s\n", kl_version());
    return KL_EXIT_OK;
}

/* Remove the global options from argv (anywhere before "--"); returns new argc or -1. */
static int take_globals(int argc, char **argv, kl_cli *cli)
{
    int out = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        if (!strcmp(a, "--")) {
            while (i < argc) argv[out++] = argv[i++];
            break;
        }
        int cr = cli_cluster_option(cli, argc, argv, &i); /* --judge, --gpus, --executor … (cluster.c) */
        if (cr < 0) return -1;
        if (cr > 0) continue;
        /* options that take a value: --opt VALUE or --opt=VALUE */
        static const char *const valued[] = {"--db", "--measure", "--jobs"};
        int which = -1;
        for (int k = 0; k < 3; k++) {
            size_t n = strlen(valued[k]);
            if (!strncmp(a, valued[k], n) && (a[n] == '\0' || a[n] == '=')) {
                which = k;
                if (a[n] == '=') {
                    val = a + n + 1;
                } else if (i + 1 < argc) {
                    val = argv[++i];
                } else {
                    cli_usage_error(cli, "option %s needs a value", valued[k]);
                    return -1;
                }
                break;
            }
        }
        if (which == 0) {
            if (!*val) {
                cli_usage_error(cli, "option --db needs a file name");
                return -1;
            }
            cli->db_path = val;
            cli->db_given = true;
        } else if (which == 1) {
            if (!strcmp(val, "live")) cli->measure = KL_MEASURE_LIVE;
            else if (!strcmp(val, "replay")) cli->measure = KL_MEASURE_REPLAY;
            else if (!strcmp(val, "record")) cli->measure = KL_MEASURE_RECORD;
            else {
                cli_usage_error(cli, "--measure takes live, replay or record, not '%s'", val);
                return -1;
            }
            cli->measure_given = true;
        } else if (which == 2) {
            char *end;
            errno = 0;
            long j = strtol(val, &end, 10);
            if (errno || *end || j < 1 || j > 1024) {
                cli_usage_error(cli, "--jobs takes a number from 1 to 1024, not '%s'", val);
                return -1;
            }
            cli->jobs = (int)j;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            cli->quiet = true;
        } else if (!strcmp(a, "--json")) {
            cli->json = true;
        } else {
            argv[out++] = argv[i];
        }
    }
    argv[out] = NULL;
    return out;
}

/* The per-user store: $XDG_DATA_HOME/klineage/klineage.db, else ~/.local/share/klineage/klineage.db
 * (never the folder the user stands in). Static storage. */
static const char *default_db(void)
{
    static char path[4096];
    const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0] == '/') snprintf(path, sizeof path, "%s/klineage/klineage.db", xdg);
    else if (home && *home) snprintf(path, sizeof path, "%s/.local/share/klineage/klineage.db", home);
    else snprintf(path, sizeof path, "klineage.db");
    return path;
}

int main(int argc, char **argv)
{
    kl_cli cli = {0};
    cli.prog = "klineage";
    const char *env_db = getenv("KLINEAGE_DB");
    cli.db_path = env_db && *env_db ? env_db : default_db();
    cli.db_given = env_db && *env_db;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    cli.jobs = ncpu > 0 ? (int)ncpu : 1;
    if (getenv("KLINEAGE_MEASURE")) {
        const char *m = getenv("KLINEAGE_MEASURE");
        cli.measure = !strcmp(m, "replay") ? KL_MEASURE_REPLAY : !strcmp(m, "record") ? KL_MEASURE_RECORD : KL_MEASURE_LIVE;
        cli.measure_given = true;
    }

    const char *default_db = cli.db_path;
    cli_cluster_env(&cli);
    argc = take_globals(argc, argv, &cli);
    if (argc < 0 || cli_cluster_setup(&cli, default_db) < 0) return KL_EXIT_USAGE;
    if (argc < 2) {
        print_overview(stderr);
        return KL_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--version") || !strcmp(name, "-V")) {
        printf("klineage %s\n", kl_version());
        return KL_EXIT_OK;
    }
    if (cli_is_help(name)) {
        print_overview(stdout);
        return KL_EXIT_OK;
    }
    if (name[0] == '-') return cli_usage_error(&cli, "unknown option '%s'", name);
    const cli_command *cmd = find_command(name);
    if (!cmd) return cli_usage_error(&cli, "'%s' is not a klineage subcommand", name);
    cli.cmd = cmd->name;
    /* a store in a folder that does not exist is a mistake, said before anything runs; the
     * default store's folder is made (skills reads and writes it too) */
    bool uses_store = strcmp(cmd->name, "help") && strcmp(cmd->name, "version") && strcmp(cmd->name, "parse") &&
                      strcmp(cmd->name, "rewrite");
    if (uses_store && cli_store_ready(&cli) != KL_EXIT_OK)
        return KL_EXIT_FAILED;
    return cmd->run(argc - 1, argv + 1, &cli);
}
