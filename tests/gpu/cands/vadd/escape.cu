// vadd, hostile: on every launch it tries what a candidate may not do — remove a file outside
// its folder, create one there, read one there, open a network socket (through libc and through
// a raw system call), start a process, signal its parent — and it computes the right sum only
// when every attempt was refused. Under the worker's sandbox it passes; outside it, it is wrong.
// The corpus script checks that the file it tried to remove is still there.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define VICTIM "/tmp/kl-sandbox-victim"
#define CREATED "/tmp/kl-sandbox-created"

__global__ void vadd_plain(const float *a, const float *b, float *c, int n, float spoil)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i] + spoil;
}

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
    long r = syscall(SYS_socket, AF_INET6, SOCK_DGRAM, 0);
    if (r >= 0) got++, close((int)r);
    pid_t p = fork();
    if (p == 0) _exit(0);
    if (p > 0) got++, waitpid(p, NULL, 0);
    if (kill(getppid(), 0) == 0) got++;
    return got;
}

extern "C" void launch(const float *a, const float *b, float *c, int n, cudaStream_t stream)
{
    float spoil = escaped() ? 1.0f : 0.0f;
    vadd_plain<<<(n + 255) / 256, 256, 0, stream>>>(a, b, c, n, spoil);
}
