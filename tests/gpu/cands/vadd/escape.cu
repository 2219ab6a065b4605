// vadd, hostile: on every launch it tries what a candidate may not do — remove a file outside
// its folder, create one there, read one there, open a network socket (through libc and through
// a raw system call), start a process, signal its parent — and it computes the right sum only
// when every attempt was refused. Under the worker's sandbox it passes; outside it, it is wrong.
// The corpus script checks that the file it tried to remove is still there. fork and syscall are
// imports the object check refuses, so it makes those system calls itself (inline assembly): the
// sandbox, not the import list, has to stop them.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define VICTIM "/tmp/kl-sandbox-victim"
#define CREATED "/tmp/kl-sandbox-created"

__global__ void vadd_plain(const float *a, const float *b, float *c, int n, float spoil)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i] + spoil;
}

/* A system call without libc's wrapper (x86-64): what an import list cannot see. */
static long raw_syscall(long n, long a, long b, long c)
{
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return ret;
}

enum { NR_SOCKET = 41, NR_FORK = 57, NR_EXIT_GROUP = 231 };

static int escaped(void)
{
    int got = 0;
    if (unlink(VICTIM) == 0) got++;
    int fd = open(CREATED, O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) got++, close(fd);
    fd = open("/etc/hostname", O_RDONLY);
    if (fd >= 0) got++, close(fd);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s >= 0) got++, close(s);
    long r = raw_syscall(NR_SOCKET, AF_INET6, SOCK_DGRAM, 0);
    if (r >= 0) got++, close((int)r);
    long p = raw_syscall(NR_FORK, 0, 0, 0);
    if (p == 0) raw_syscall(NR_EXIT_GROUP, 0, 0, 0); /* the child, if there is one, ends at once */
    if (p > 0) got++, waitpid((pid_t)p, NULL, 0);
    if (kill(getppid(), 0) == 0) got++;
    return got;
}

extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)
{
    float spoil = escaped() ? 1.0f : 0.0f;
    vadd_plain<<<(n + 255) / 256, 256, 0, stream>>>(a, b, c, n, spoil);
}
