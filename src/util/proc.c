/* Child processes with a deadline: pipes pumped with poll, the process group killed, and
 * nothing left running when klineage dies (child_guard). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

#define DEFAULT_OUT_MAX ((size_t)16 << 20)

double kl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void kl_utc_stamp(char *buf, size_t size)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void kl_child_init(kl_child *c)
{
    memset(c, 0, sizeof *c);
    c->exit_code = -1;
}

void kl_child_release(kl_child *c)
{
    if (!c) return;
    kl_strbuf_release(&c->out);
    kl_strbuf_release(&c->err);
}

static void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

static void close_pair(int p[2])
{
    if (p[0] >= 0) close(p[0]);
    if (p[1] >= 0) close(p[1]);
    p[0] = p[1] = -1;
}

/* The environment with c->env's entries added or replacing, built in the parent: after a fork
 * in a process with threads the child may call only async-signal-safe functions (setenv
 * allocates, and can deadlock on an allocator lock another thread held). NULL when out of memory. */
static char **child_environ(const char *const *add)
{
    size_t n = 0, k = 0;
    for (char **e = environ; e && *e; e++) n++;
    for (const char *const *a = add; *a; a++) n++;
    char **env = calloc(n + 1, sizeof *env);
    if (!env) return NULL;
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) + 1 : strlen(*e);
        bool replaced = false;
        for (const char *const *a = add; *a && !replaced; a++) replaced = !strncmp(*a, *e, len);
        if (!replaced) env[k++] = *e;
    }
    for (const char *const *a = add; *a; a++)
        if (strchr(*a, '=')) env[k++] = (char *)*a;
    env[k] = NULL;
    return env;
}

/* In the program's process, after the second fork: never returns. Reports exec failure's errno
 * on `report`. envp: the environment built in the parent (NULL: this process's). */
static void program_exec(const kl_child *c, int in[2], int out[2], int errp[2], int report, char **envp)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* dies with its guardian */
    signal(SIGPIPE, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (in[0] >= 0) {
        dup2(in[0], 0);
    } else {
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0) dup2(null, 0);
    }
    dup2(out[1], 1);
    dup2(c->merge_stderr ? out[1] : errp[1], 2);
    if (c->dir && chdir(c->dir) != 0) {
        int e = errno;
        if (write(report, &e, sizeof e) < 0) _exit(127);
        _exit(127);
    }
    if (envp) execvpe(c->argv[0], (char *const *)c->argv, envp);
    else execvp(c->argv[0], (char *const *)c->argv);
    int e = errno;
    if (write(report, &e, sizeof e) < 0) _exit(127);
    _exit(127);
}

/* The guardian's answer to its parent's death (PR_SET_PDEATHSIG): the whole group goes,
 * itself included. Async-signal-safe. */
static void guardian_parent_died(int sig)
{
    (void)sig;
    kill(0, SIGKILL);
    _exit(128 + SIGKILL);
}

/* In the child, after fork: the guardian of the program's process group. Never returns.
 *
 * The kernel's PR_SET_PDEATHSIG reaches one process, not what it starts (nvcc's cicc and
 * ptxas, gcc's cc1): so the first child leads a new process group, asks for SIGTERM when
 * klineage dies (however it dies: a signal, exit, or SIGKILL), forks the program into the
 * group and waits for it. On SIGTERM it kills the whole group. When the program ends, the
 * guardian ends the same way (its exit code, or the same signal), so the caller sees the
 * program's status. */
static void child_guard(const kl_child *c, pid_t parent, int in[2], int out[2], int errp[2], int report,
                        char **envp)
{
    setpgid(0, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = guardian_parent_died;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) guardian_parent_died(SIGTERM); /* it died before prctl */
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        if (write(report, &e, sizeof e) < 0) _exit(127);
        _exit(127);
    }
    if (pid == 0) program_exec(c, in, out, errp, report, envp);
    /* The guardian holds no file: the caller sees EOF when the program's side closes, and a
     * pipe another thread was creating at the fork is not held open here either. */
    if (close_range(0, ~0u, 0) != 0) {
        long max = sysconf(_SC_OPEN_MAX);
        for (long fd = 0; fd < (max > 0 ? max : 1024); fd++) close((int)fd);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) _exit(127);
    if (WIFEXITED(status)) _exit(WEXITSTATUS(status));
    int sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
    /* end by the same signal, without a core file and without any handler this process inherited */
    struct rlimit nocore = {0, 0};
    setrlimit(RLIMIT_CORE, &nocore);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
    prctl(PR_SET_PDEATHSIG, 0);
    kill(getpid(), sig);
    _exit(128 + sig);
}

static void pump(int *fd, kl_strbuf *sb)
{
    char buf[65536];
    for (;;) {
        ssize_t n = read(*fd, buf, sizeof buf);
        if (n > 0) {
            kl_strbuf_add(sb, buf, (size_t)n);
            continue;
        }
        if (n < 0 && (errno == EINTR)) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        close(*fd); /* EOF or error */
        *fd = -1;
        return;
    }
}

kl_status kl_child_run(kl_child *c, kl_error *err)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1}, report[2] = {-1, -1};
    kl_strbuf_init(&c->out, c->out_max ? c->out_max : DEFAULT_OUT_MAX);
    kl_strbuf_init(&c->err, c->err_max ? c->err_max : DEFAULT_OUT_MAX);
    c->timed_out = false;
    c->term_signal = 0;
    c->exit_code = -1;
    if (!c->argv || !c->argv[0]) return kl_error_set(err, KL_ERR_INVALID, "no program to run");

    if ((c->stdin_data && pipe2(in, O_CLOEXEC) != 0) || pipe2(out, O_CLOEXEC) != 0 ||
        pipe2(errp, O_CLOEXEC) != 0 || pipe2(report, O_CLOEXEC) != 0) {
        kl_status st = kl_error_set(err, KL_ERR_CHILD, "%s: cannot create pipes: %s", c->argv[0], strerror(errno));
        close_pair(in), close_pair(out), close_pair(errp), close_pair(report);
        return st;
    }
    char **envp = c->env ? child_environ(c->env) : NULL;
    if (c->env && !envp) {
        close_pair(in), close_pair(out), close_pair(errp), close_pair(report);
        return kl_error_set(err, KL_ERR_NOMEM, "%s: out of memory for its environment", c->argv[0]);
    }
    double start = kl_now();
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        kl_status st = kl_error_set(err, KL_ERR_CHILD, "%s: cannot fork: %s", c->argv[0], strerror(errno));
        free(envp);
        close_pair(in), close_pair(out), close_pair(errp), close_pair(report);
        return st;
    }
    if (pid == 0) child_guard(c, parent, in, out, errp, report[1], envp);
    free(envp); /* the child has its copy */

    setpgid(pid, pid); /* also in the parent, so the group exists before any kill */
    close(report[1]);
    report[1] = -1;
    int exec_errno = 0;
    ssize_t rn;
    do {
        rn = read(report[0], &exec_errno, sizeof exec_errno);
    } while (rn < 0 && errno == EINTR);
    close(report[0]);
    report[0] = -1;
    if (rn == (ssize_t)sizeof exec_errno) {
        waitpid(pid, NULL, 0);
        close_pair(in), close_pair(out), close_pair(errp);
        return kl_error_set(err, KL_ERR_CHILD, "%s: cannot run: %s", c->argv[0], strerror(exec_errno));
    }

    if (in[0] >= 0) close(in[0]), in[0] = -1;
    close(out[1]), out[1] = -1;
    close(errp[1]), errp[1] = -1;
    int wfd = in[1];
    int ofd = out[0], efd = errp[0];
    set_nonblock(ofd);
    set_nonblock(efd);
    if (wfd >= 0) set_nonblock(wfd);
    size_t written = 0;
    if (wfd >= 0 && c->stdin_len == 0) close(wfd), wfd = -1;

    void (*old_pipe)(int) = signal(SIGPIPE, SIG_IGN);
    double deadline = c->timeout_s > 0 ? start + c->timeout_s : 0;
    int status = 0;
    bool reaped = false;
    double reaped_at = 0;
    while (ofd >= 0 || efd >= 0 || wfd >= 0) {
        struct pollfd fds[3];
        int nf = 0;
        if (ofd >= 0) fds[nf++] = (struct pollfd){ofd, POLLIN, 0};
        if (efd >= 0) fds[nf++] = (struct pollfd){efd, POLLIN, 0};
        if (wfd >= 0) fds[nf++] = (struct pollfd){wfd, POLLOUT, 0};
        int wait_ms = 100;
        if (deadline > 0 && !c->timed_out) {
            double left = deadline - kl_now();
            if (left <= 0) {
                kill(-pid, SIGKILL);
                c->timed_out = true;
            } else if (left * 1000 < wait_ms) {
                wait_ms = (int)(left * 1000) + 1;
            }
        }
        int r = poll(fds, (nfds_t)nf, wait_ms);
        if (r < 0 && errno != EINTR) break;
        if (ofd >= 0) pump(&ofd, &c->out);
        if (efd >= 0) pump(&efd, c->merge_stderr ? &c->out : &c->err);
        if (wfd >= 0) {
            ssize_t n = write(wfd, c->stdin_data + written, c->stdin_len - written);
            if (n > 0) written += (size_t)n;
            if ((n < 0 && errno != EAGAIN && errno != EINTR) || written == c->stdin_len) close(wfd), wfd = -1;
        }
        /* The child may exit while something it started still holds the pipes. */
        if (!reaped && waitpid(pid, &status, WNOHANG) == pid) {
            reaped = true;
            reaped_at = kl_now();
            kill(-pid, SIGKILL); /* whatever it left in its group goes with it */
        }
        if (reaped && kl_now() - reaped_at > 1.0) break; /* a stray holder outside the group */
    }
    if (ofd >= 0) close(ofd);
    if (efd >= 0) close(efd);
    if (wfd >= 0) close(wfd);
    if (!reaped) {
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        kill(-pid, SIGKILL);
    }
    signal(SIGPIPE, old_pipe);
    c->wall_s = kl_now() - start;
    if (WIFEXITED(status)) {
        c->exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        c->term_signal = WTERMSIG(status);
        c->exit_code = 128 + c->term_signal;
    }
    return KL_OK;
}

void kl_child_describe(const kl_child *c, char *buf, size_t size)
{
    if (c->timed_out)
        kl_snprintf(buf, size, "timed out after %.1f s", c->timeout_s);
    else if (c->term_signal)
        kl_snprintf(buf, size, "killed by signal %d (%s)", c->term_signal, strsignal(c->term_signal));
    else
        kl_snprintf(buf, size, "exit %d", c->exit_code);
}
