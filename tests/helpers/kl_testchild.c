/* A child for process tests: kl_testchild MODE [ARG]
 *   echo       copy stdin to stdout          exit N     exit with status N
 *   hang       sleep forever                 crash      SIGSEGV
 *   flood N    write N bytes to stdout       stderr     write "to-stderr" on stderr
 *   fork-hang  leave a grandchild holding the pipes, then exit 0
 *   env NAME   print $NAME                   pwd        print the working directory
 *   junk       read stdin, print text that is not JSON, exit 0 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2) return 2;
    const char *m = argv[1];
    if (!strcmp(m, "echo")) {
        int c;
        while ((c = getchar()) != EOF) putchar(c);
        return 0;
    }
    if (!strcmp(m, "exit")) return argc > 2 ? atoi(argv[2]) : 0;
    if (!strcmp(m, "hang")) {
        for (;;) pause();
    }
    if (!strcmp(m, "crash")) {
        raise(SIGSEGV);
        return 1;
    }
    if (!strcmp(m, "flood")) {
        long n = argc > 2 ? atol(argv[2]) : 1000000;
        for (long i = 0; i < n; i++) putchar('x');
        return 0;
    }
    if (!strcmp(m, "stderr")) {
        fputs("to-stderr", stderr);
        return 0;
    }
    if (!strcmp(m, "fork-hang")) {
        if (fork() == 0) {
            for (;;) pause();
        }
        puts("parent done");
        return 0;
    }
    if (!strcmp(m, "env")) {
        const char *v = argc > 2 ? getenv(argv[2]) : NULL;
        puts(v ? v : "(unset)");
        return 0;
    }
    if (!strcmp(m, "junk")) {
        while (getchar() != EOF) {}
        puts("Sure! Here is my answer: {candidates: [oops");
        return 0;
    }
    if (!strcmp(m, "pwd")) {
        char buf[4096];
        puts(getcwd(buf, sizeof buf) ? buf : "?");
        return 0;
    }
    return 2;
}
