/* The worker's sandbox: Landlock rules, a seccomp filter through libseccomp, resource limits
 * (sandbox.h; docs/gate.md says what a candidate can and cannot do). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <seccomp.h>

#include "gate/sandbox.h"

/* ---- Landlock: the kernel's ABI (linux/landlock.h), spelled out so that the build does not
 * depend on how recent the build machine's headers are; the values are fixed by the kernel. */

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif

#define LL_CREATE_RULESET_VERSION (1U << 0)
#define LL_RULE_PATH_BENEATH 1

#define LL_FS_EXECUTE (1ULL << 0)
#define LL_FS_WRITE_FILE (1ULL << 1)
#define LL_FS_READ_FILE (1ULL << 2)
#define LL_FS_READ_DIR (1ULL << 3)
#define LL_FS_REMOVE_DIR (1ULL << 4)
#define LL_FS_REMOVE_FILE (1ULL << 5)
#define LL_FS_MAKE_CHAR (1ULL << 6)
#define LL_FS_MAKE_DIR (1ULL << 7)
#define LL_FS_MAKE_REG (1ULL << 8)
#define LL_FS_MAKE_SOCK (1ULL << 9)
#define LL_FS_MAKE_FIFO (1ULL << 10)
#define LL_FS_MAKE_BLOCK (1ULL << 11)
#define LL_FS_MAKE_SYM (1ULL << 12)
#define LL_FS_REFER (1ULL << 13)     /* ABI 2 */
#define LL_FS_TRUNCATE (1ULL << 14)  /* ABI 3 */
#define LL_FS_IOCTL_DEV (1ULL << 15) /* ABI 5 */
#define LL_NET_BIND_TCP (1ULL << 0)  /* ABI 4 */
#define LL_NET_CONNECT_TCP (1ULL << 1)
#define LL_SCOPE_ABSTRACT_UNIX (1ULL << 0) /* ABI 6 */
#define LL_SCOPE_SIGNAL (1ULL << 1)

struct ll_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

struct ll_path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

#define LL_READ (LL_FS_READ_FILE | LL_FS_READ_DIR)
#define LL_FILE_RIGHTS (LL_FS_EXECUTE | LL_FS_WRITE_FILE | LL_FS_READ_FILE | LL_FS_TRUNCATE | LL_FS_IOCTL_DEV)

static void note(kl_sandbox *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(kl_sandbox *sb, const char *fmt, ...)
{
    size_t n = strlen(sb->detail);
    if (n + 2 >= sizeof sb->detail) return;
    if (n) sb->detail[n++] = ';', sb->detail[n++] = ' ';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sb->detail + n, sizeof sb->detail - n, fmt, ap);
    va_end(ap);
}

/* Allow `access` beneath path (a folder) or on it (a file: only the file rights apply). A path
 * that does not exist is left out. */
static kl_status ll_allow(int ruleset, const char *path, uint64_t access, uint64_t handled, kl_error *err)
{
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) return KL_OK; /* nothing there to allow */
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return KL_OK;
    }
    uint64_t allowed = access & handled;
    if (!S_ISDIR(st.st_mode)) allowed &= LL_FILE_RIGHTS;
    struct ll_path_beneath_attr rule = {allowed, fd};
    long rc = allowed ? syscall(SYS_landlock_add_rule, ruleset, LL_RULE_PATH_BENEATH, &rule, 0) : 0;
    int e = errno;
    close(fd);
    if (rc != 0) return kl_error_set(err, KL_ERR_IO, "landlock: cannot allow %s: %s", path, strerror(e));
    return KL_OK;
}

/* The folders of every file mapped into this process now (the harness's libraries, wherever
 * the system keeps them): readable, so that later lazy loads beside them still work. */
static kl_status ll_allow_mapped(int ruleset, uint64_t handled, kl_error *err)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) return KL_OK;
    char line[4608], last[4096] = "";
    kl_status st = KL_OK;
    while (st == KL_OK && fgets(line, sizeof line, f)) {
        char *path = strchr(line, '/');
        if (!path) continue;
        path[strcspn(path, "\n")] = '\0';
        char *slash = strrchr(path, '/');
        if (!slash || slash == path) continue;
        *slash = '\0';
        if (!strcmp(path, last)) continue;
        snprintf(last, sizeof last, "%s", path);
        if (!strncmp(path, "/dev", 4) || !strncmp(path, "/proc", 5) || !strncmp(path, "/memfd", 6)) continue;
        st = ll_allow(ruleset, path, LL_READ, handled, err);
    }
    fclose(f);
    return st;
}

static kl_status landlock_apply(const kl_sandbox_policy *p, kl_sandbox *sb, kl_error *err)
{
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
    if (abi < 1) {
        note(sb, "Landlock not in force: the kernel does not offer it (%s)", strerror(errno));
        return KL_OK;
    }
    sb->landlock_abi = (int)abi;
    struct ll_ruleset_attr attr = {0};
    attr.handled_access_fs = (LL_FS_MAKE_SYM << 1) - 1; /* ABI 1: EXECUTE .. MAKE_SYM */
    if (abi >= 2) attr.handled_access_fs |= LL_FS_REFER;
    if (abi >= 3) attr.handled_access_fs |= LL_FS_TRUNCATE;
    if (abi >= 5) attr.handled_access_fs |= LL_FS_IOCTL_DEV;
    if (abi >= 4) attr.handled_access_net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP; /* no rule: none allowed */
    if (abi >= 6) attr.scoped = LL_SCOPE_ABSTRACT_UNIX | LL_SCOPE_SIGNAL;
    uint64_t h = attr.handled_access_fs;
    int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (rs < 0) return kl_error_set(err, KL_ERR_IO, "landlock: cannot create a ruleset (ABI %ld): %s", abi, strerror(errno));
    kl_status st = KL_OK;
    /* reads: the system's folders, this process's own /proc, the GPU driver's /proc, the
     * libraries mapped now, and the job's files */
    static const char *const system_reads[] = {"/usr", "/lib", "/lib64", "/lib32", "/libx32", "/opt", "/sys",
                                               "/proc/driver", "/proc/sys", "/proc/cpuinfo", "/proc/meminfo",
                                               "/proc/stat", "/etc/ld.so.cache", "/etc/ld.so.conf",
                                               "/etc/ld.so.conf.d", "/etc/localtime", NULL};
    for (const char *const *r = system_reads; st == KL_OK && *r; r++) st = ll_allow(rs, *r, LL_READ, h, err);
    /* /dev is listed, not read: its files are the devices below, one by one */
    if (st == KL_OK) st = ll_allow(rs, "/dev", LL_FS_READ_DIR, h, err);
    char self[64];
    snprintf(self, sizeof self, "/proc/%ld", (long)getpid());
    if (st == KL_OK) st = ll_allow(rs, self, LL_READ, h, err);
    if (st == KL_OK) st = ll_allow_mapped(rs, h, err);
    for (const char *const *r = p->read; st == KL_OK && r && *r; r++) st = ll_allow(rs, *r, LL_READ, h, err);
    /* writes: the scratch folder (and what the policy adds) */
    uint64_t rw = LL_READ | LL_FS_WRITE_FILE | LL_FS_TRUNCATE | LL_FS_MAKE_REG | LL_FS_MAKE_DIR | LL_FS_REMOVE_FILE |
                  LL_FS_REMOVE_DIR | LL_FS_MAKE_SOCK | LL_FS_MAKE_FIFO | LL_FS_MAKE_SYM | LL_FS_REFER;
    if (st == KL_OK) st = ll_allow(rs, p->scratch, rw, h, err);
    for (const char *const *w = p->write; st == KL_OK && w && *w; w++) st = ll_allow(rs, *w, rw, h, err);
    /* the device nodes: the GPU's, and the harmless ones */
    static const char *const devices[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/urandom", "/dev/random", NULL};
    uint64_t dev = LL_FS_READ_FILE | LL_FS_WRITE_FILE | LL_FS_IOCTL_DEV;
    for (const char *const *d = devices; st == KL_OK && *d; d++) st = ll_allow(rs, *d, dev, h, err);
    if (st == KL_OK && p->gpu_devices) {
        DIR *dir = opendir("/dev");
        struct dirent *e;
        while (st == KL_OK && dir && (e = readdir(dir)) != NULL) {
            if (strncmp(e->d_name, "nvidia", 6) != 0) continue;
            char path[300];
            snprintf(path, sizeof path, "/dev/%s", e->d_name);
            st = ll_allow(rs, path, dev | LL_READ, h, err); /* /dev/nvidia-caps is a folder */
        }
        if (dir) closedir(dir);
    }
    if (st == KL_OK && syscall(SYS_landlock_restrict_self, rs, 0) != 0)
        st = kl_error_set(err, KL_ERR_IO, "landlock: cannot restrict the worker: %s", strerror(errno));
    if (st != KL_OK) {
        close(rs);
        return st;
    }
    sb->ruleset_fd = rs;
    sb->landlock = true;
    note(sb, "Landlock ABI %ld: files%s%s", abi, abi >= 4 ? ", TCP" : " (no TCP rules before ABI 4)",
         abi >= 6 ? ", abstract unix sockets and signals" : "");
    return KL_OK;
}

/* ---- seccomp ----------------------------------------------------------------------------- */

static kl_status seccomp_apply(kl_sandbox *sb, kl_error *err)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx) return kl_error_set(err, KL_ERR_NOMEM, "seccomp: cannot start a filter");
    int rc = 0;
    const uint32_t deny = SCMP_ACT_ERRNO(EPERM);
    /* no new process and no exec; threads (clone with CLONE_THREAD) stay allowed */
    static const int no_process[] = {SCMP_SYS(fork), SCMP_SYS(vfork), SCMP_SYS(execve), SCMP_SYS(execveat)};
    for (size_t i = 0; !rc && i < sizeof no_process / sizeof no_process[0]; i++)
        rc = seccomp_rule_add(ctx, deny, no_process[i], 0);
    if (!rc) rc = seccomp_rule_add(ctx, deny, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
    /* clone3's flags are in memory a filter cannot read: ENOSYS, and glibc falls back to clone */
    if (!rc) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    /* no network: sockets of the local (unix) family only */
    if (!rc) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_NE, AF_UNIX));
    /* signals to this process only */
    long pid = (long)getpid();
    if (!rc) rc = seccomp_rule_add(ctx, deny, SCMP_SYS(kill), 1, SCMP_A0(SCMP_CMP_NE, (scmp_datum_t)pid));
    if (!rc) rc = seccomp_rule_add(ctx, deny, SCMP_SYS(tgkill), 1, SCMP_A0(SCMP_CMP_NE, (scmp_datum_t)pid));
    if (!rc) rc = seccomp_rule_add(ctx, deny, SCMP_SYS(tkill), 0);
    if (!rc) rc = seccomp_rule_add(ctx, deny, SCMP_SYS(rt_sigqueueinfo), 1, SCMP_A0(SCMP_CMP_NE, (scmp_datum_t)pid));
    if (!rc) rc = seccomp_rule_add(ctx, deny, SCMP_SYS(rt_tgsigqueueinfo), 1, SCMP_A0(SCMP_CMP_NE, (scmp_datum_t)pid));
    if (!rc) rc = seccomp_rule_add(ctx, deny, SCMP_SYS(pidfd_send_signal), 0);
    /* what Landlock does not cover (metadata, other processes) and what a kernel is for */
    static const int no_call[] = {
        SCMP_SYS(chmod), SCMP_SYS(fchmod), SCMP_SYS(fchmodat), SCMP_SYS(chown), SCMP_SYS(fchown),
        SCMP_SYS(lchown), SCMP_SYS(fchownat), SCMP_SYS(utime), SCMP_SYS(utimes), SCMP_SYS(futimesat),
        SCMP_SYS(utimensat), SCMP_SYS(setxattr), SCMP_SYS(lsetxattr), SCMP_SYS(fsetxattr),
        SCMP_SYS(removexattr), SCMP_SYS(lremovexattr), SCMP_SYS(fremovexattr), SCMP_SYS(ptrace),
        SCMP_SYS(process_vm_readv), SCMP_SYS(process_vm_writev), SCMP_SYS(pidfd_getfd), SCMP_SYS(mount),
        SCMP_SYS(umount2), SCMP_SYS(pivot_root), SCMP_SYS(chroot), SCMP_SYS(unshare), SCMP_SYS(setns),
        SCMP_SYS(init_module), SCMP_SYS(finit_module), SCMP_SYS(delete_module), SCMP_SYS(kexec_load),
        SCMP_SYS(kexec_file_load), SCMP_SYS(bpf), SCMP_SYS(io_uring_setup), SCMP_SYS(io_uring_enter),
        SCMP_SYS(io_uring_register), SCMP_SYS(keyctl), SCMP_SYS(add_key), SCMP_SYS(request_key),
        SCMP_SYS(swapon), SCMP_SYS(swapoff), SCMP_SYS(reboot), SCMP_SYS(settimeofday),
        SCMP_SYS(clock_settime), SCMP_SYS(clock_adjtime), SCMP_SYS(adjtimex), SCMP_SYS(syslog),
        SCMP_SYS(acct), SCMP_SYS(quotactl), SCMP_SYS(open_by_handle_at), SCMP_SYS(name_to_handle_at),
        SCMP_SYS(userfaultfd), SCMP_SYS(perf_event_open), SCMP_SYS(sethostname), SCMP_SYS(setdomainname),
        SCMP_SYS(mknod), SCMP_SYS(mknodat)};
    for (size_t i = 0; !rc && i < sizeof no_call / sizeof no_call[0]; i++)
        rc = seccomp_rule_add(ctx, deny, no_call[i], 0);
    /* on every thread of the process, the CUDA driver's and the pool's too */
    if (!rc) rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
    if (!rc) rc = seccomp_load(ctx);
    seccomp_release(ctx);
    if (rc) return kl_error_set(err, KL_ERR_IO, "seccomp: cannot apply the filter: %s", strerror(-rc));
    sb->seccomp = true;
    note(sb, "seccomp: no process, exec, network socket, ptrace, signal out, chmod/chown/xattr");
    return KL_OK;
}

/* ---- resource limits ------------------------------------------------------------------------ */

static void lower(int what, rlim_t value, bool *ok)
{
    struct rlimit r;
    if (getrlimit(what, &r) != 0) {
        *ok = false;
        return;
    }
    if (r.rlim_max != RLIM_INFINITY && r.rlim_max < value) value = r.rlim_max;
    if (r.rlim_cur != RLIM_INFINITY && r.rlim_cur < value) value = r.rlim_cur;
    r.rlim_cur = r.rlim_max = value;
    if (setrlimit(what, &r) != 0) *ok = false;
}

static void limits_apply(kl_sandbox *sb)
{
    bool ok = true;
    lower(RLIMIT_CORE, 0, &ok);
    lower(RLIMIT_FSIZE, (rlim_t)1 << 30, &ok);
    lower(RLIMIT_NOFILE, 4096, &ok);
    sb->rlimits = ok;
    note(sb, ok ? "limits: no core file, files of at most 1 GiB, 4096 open files" : "limits: not all could be set");
}

/* ---- together ------------------------------------------------------------------------------- */

kl_status kl_sandbox_apply(const kl_sandbox_policy *p, kl_sandbox *sb, kl_error *err)
{
    memset(sb, 0, sizeof *sb);
    sb->ruleset_fd = -1;
    if (!p || !p->scratch || p->scratch[0] != '/')
        return kl_error_set(err, KL_ERR_INVALID, "sandbox: the scratch folder must be an absolute path");
    struct stat st;
    if (stat(p->scratch, &st) != 0 || !S_ISDIR(st.st_mode))
        return kl_error_set(err, KL_ERR_INVALID, "sandbox: the scratch folder %s is not a folder", p->scratch);
    /* both mechanisms need it; it also keeps setuid programs from gaining anything */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return kl_error_set(err, KL_ERR_IO, "sandbox: prctl(PR_SET_NO_NEW_PRIVS): %s", strerror(errno));
    limits_apply(sb);
    kl_status s = landlock_apply(p, sb, err);
    if (s == KL_OK) s = seccomp_apply(sb, err);
    if (s != KL_OK) kl_sandbox_release(sb);
    return s;
}

kl_status kl_sandbox_join(const kl_sandbox *sb, kl_error *err)
{
    if (!sb || sb->ruleset_fd < 0) return KL_OK;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || syscall(SYS_landlock_restrict_self, sb->ruleset_fd, 0) != 0)
        return kl_error_set(err, KL_ERR_IO, "landlock: a thread cannot restrict itself: %s", strerror(errno));
    return KL_OK;
}

void kl_sandbox_release(kl_sandbox *sb)
{
    if (sb && sb->ruleset_fd >= 0) close(sb->ruleset_fd);
    if (sb) sb->ruleset_fd = -1;
}
