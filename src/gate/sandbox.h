/*
 * The worker's sandbox (docs/gate.md, "What a candidate can and cannot do"): applied by the
 * worker to itself before the first byte of untrusted code (a candidate's or a baseline's
 * object) is loaded, from then on for the rest of the process. Built from two well-kept
 * mechanisms of the kernel, no hand-written filter program:
 *  - Landlock (the kernel's unprivileged access control): reads only of the system's folders,
 *    the folders of the libraries already mapped, the job's own files and this process's
 *    /proc; writes only in the scratch folder; the GPU's device nodes read, written and
 *    ioctl'ed; no TCP bind or connect (ABI 4), no abstract unix socket or signal out of the
 *    sandbox (ABI 6). Each level is used as far as the running kernel offers it.
 *  - seccomp, through libseccomp (Debian's, linked statically): no new process (fork, vfork,
 *    clone without CLONE_THREAD, clone3 answers ENOSYS so threads fall back to clone), no
 *    exec, no socket but AF_UNIX, no ptrace or reading another process's memory, no signal to
 *    another process, no chmod/chown/xattr/utime (which Landlock does not cover), no mount,
 *    namespace, module, bpf, io_uring, keyring or clock call. On every thread (TSYNC).
 *  - resource limits: no core file, files it writes at most 1 GiB, at most 4096 open files.
 * Private to src/gate.
 */
#ifndef KL_GATE_SANDBOX_H
#define KL_GATE_SANDBOX_H

#include <stdbool.h>

#include "util/util.h"

typedef struct kl_sandbox_policy {
    const char *scratch;         /* the one folder it may write, create in and remove from */
    const char *const *read;     /* more files or folders to read (NULL-terminated, may be NULL) */
    const char *const *write;    /* more folders to write (NULL-terminated, may be NULL) */
    bool gpu_devices;            /* /dev/nvidia*: read, write, ioctl */
} kl_sandbox_policy;

typedef struct kl_sandbox {
    bool landlock, seccomp, rlimits; /* what is in force */
    int landlock_abi;            /* the kernel's Landlock ABI; 0: none */
    int ruleset_fd;              /* kept for threads started before that restrict themselves; -1 */
    char detail[1024];           /* what is in force and what is not, and why */
} kl_sandbox;

/* Apply the policy to this process: Landlock to the calling thread (and every thread it starts
 * after), seccomp to every thread, the limits to the process. Parts the kernel does not offer
 * are left out and said so in sb->detail (KL_OK still); errors when the policy is malformed or
 * a part that the kernel offers fails to apply. sb: kl_sandbox_release. */
kl_status kl_sandbox_apply(const kl_sandbox_policy *policy, kl_sandbox *sb, kl_error *err);
/* The calling thread, started before kl_sandbox_apply, takes the same Landlock domain. */
kl_status kl_sandbox_join(const kl_sandbox *sb, kl_error *err);
void kl_sandbox_release(kl_sandbox *sb);

#endif
