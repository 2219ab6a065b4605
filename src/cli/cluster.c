/* The global options of where judgements run and who judges (docs/cluster.md): --judge,
 * --gpus, --executor, --spool and --slurm-*; and what they need of the process (a store of its
 * own for the stand-in judge, SIGTERM treated as Ctrl-C, what the executor has to say at the end). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

static int set_judge(kl_cli *cli, const char *v)
{
    if (!strcmp(v, "gate")) cli->stand_in = false;
    else if (!strcmp(v, "stand-in")) cli->stand_in = true;
    else return cli_usage_error(cli, "--judge takes gate or stand-in, not '%s'", v), -1;
    return 1;
}

static int set_executor(kl_cli *cli, const char *v)
{
    if (!strcmp(v, "local")) cli->exec.kind = KL_EXECUTOR_LOCAL;
    else if (!strcmp(v, "slurm")) cli->exec.kind = KL_EXECUTOR_SLURM;
    else return cli_usage_error(cli, "--executor takes local or slurm, not '%s'", v), -1;
    cli->exec_given = true;
    return 1;
}

static int set_gpus(kl_cli *cli, const char *v)
{
    if (strcmp(v, "all") && (!*v || strspn(v, "0123456789,") != strlen(v) || strstr(v, ",,") || v[0] == ',' ||
                             v[strlen(v) - 1] == ','))
        return cli_usage_error(cli, "--gpus takes all or a list of GPU indices such as 0,2, not '%s'", v), -1;
    cli->exec.gpus = v;
    cli->exec_given = true;
    return 1;
}

void cli_cluster_env(kl_cli *cli)
{
    const char *j = env_or("KLINEAGE_JUDGE", NULL);
    if (j && set_judge(cli, j) < 0) cli->stand_in = false;
    const char *g = env_or("KLINEAGE_GPUS", NULL);
    if (g && set_gpus(cli, g) < 0) cli->exec.gpus = NULL;
    const char *x = env_or("KLINEAGE_EXECUTOR", NULL);
    if (x && set_executor(cli, x) < 0) cli->exec.kind = KL_EXECUTOR_LOCAL;
    cli->exec.spool = env_or("KLINEAGE_SPOOL", NULL);
}

int cli_cluster_option(kl_cli *cli, int argc, char **argv, int *i)
{
    static const char *const names[] = {"--judge", "--gpus", "--executor", "--spool", "--slurm-partition",
                                        "--slurm-account", "--slurm-time", "--slurm-gres", "--slurm-args"};
    const char *a = argv[*i];
    for (unsigned k = 0; k < sizeof names / sizeof names[0]; k++) {
        size_t n = strlen(names[k]);
        if (strncmp(a, names[k], n) || (a[n] != '\0' && a[n] != '=')) continue;
        const char *v;
        if (a[n] == '=') {
            v = a + n + 1;
        } else if (*i + 1 < argc) {
            v = argv[++*i];
        } else {
            cli_usage_error(cli, "option %s needs a value", names[k]);
            return -1;
        }
        if (!*v && k != 8) {
            cli_usage_error(cli, "option %s needs a non-empty value", names[k]);
            return -1;
        }
        switch (k) {
        case 0: return set_judge(cli, v);
        case 1: return set_gpus(cli, v);
        case 2: return set_executor(cli, v);
        case 3: cli->exec.spool = v; break;
        case 4: cli->exec.partition = v; break;
        case 5: cli->exec.account = v; break;
        case 6: cli->exec.time_limit = v; break;
        case 7: cli->exec.gres = v; break;
        default: cli->exec.sbatch_args = v; break;
        }
        return 1;
    }
    return 0;
}

static void term_as_interrupt(int sig)
{
    (void)sig;
    raise(SIGINT); /* the command's Ctrl-C handling: stop between judgements, cancel the jobs */
}

void cli_cluster_report(const kl_cli *cli, kl_gate *gate)
{
    char *notes = kl_gate_executor_report(gate); /* GPUs dropped, Slurm tasks resubmitted */
    if (notes && !cli->quiet) fprintf(stderr, "%s%s", cli->stand_in ? "[stand-in] " : "", notes);
    free(notes);
}

int cli_cluster_setup(kl_cli *cli, const char *default_db)
{
    if (cli->exec_given && cli->exec.kind == KL_EXECUTOR_SLURM && cli->exec.gpus)
        return cli_usage_error(cli, "--gpus chooses GPUs of this machine; with --executor slurm the cluster chooses "
                                    "them (--slurm-gres)"),
               -1;
    if (cli->exec.kind != KL_EXECUTOR_SLURM && (cli->exec.partition || cli->exec.account || cli->exec.time_limit ||
                                                cli->exec.gres || cli->exec.sbatch_args))
        return cli_usage_error(cli, "the --slurm-* options need --executor slurm"), -1;
    if (cli->stand_in && cli->db_path == default_db) cli->db_path = "klineage-stand-in.db";
    if (cli->exec_given) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = term_as_interrupt;
        sigaction(SIGTERM, &sa, NULL);
    }
    return 0;
}
