/* tests/cluster/pause.c - the one program of the two local images of
 * tests/cluster/kubelet.py's real node (no registry is reachable here), built
 * with gcc -static at test time.
 *
 * As the sandbox image (registry.k8s.io/pause:3.10, containerd's
 * sandbox_image) it runs with no arguments: the sandbox's init, it reaps its
 * children and waits until SIGTERM or SIGINT. As the test image it is given
 * paths: it first copies each file to stdout (a NUL as a newline, so
 * /proc/self/environ reads as lines) under a "==> PATH <==" header, or
 * "==> PATH <== error: ..." when it cannot open one, then waits the same
 * way. The test reads what it printed with kubectl logs: what the container
 * saw of the node agent's mounts and of its own process. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig)
{
    (void)sig;
    _exit(0);
}

static void reap(int sig)
{
    int saved = errno;

    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

static void show(const char *path)
{
    FILE *f = fopen(path, "r");
    int c, last = '\n';

    if (f == NULL) {
        printf("==> %s <== error: %s\n", path, strerror(errno));
        return;
    }
    printf("==> %s <==\n", path);
    while ((c = getc(f)) != EOF) {
        last = c == '\0' ? '\n' : c;
        putchar(last);
    }
    if (last != '\n')
        putchar('\n');
    fclose(f);
}

int main(int argc, char **argv)
{
    signal(SIGINT, quit);
    signal(SIGTERM, quit);
    signal(SIGCHLD, reap);
    for (int i = 1; i < argc; i++)
        show(argv[i]);
    fflush(stdout);
    for (;;)
        pause();
}
