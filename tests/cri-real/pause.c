/* The sandbox ("pause") process of the real-containerd test's locally built image: the test
 * has no registry, so tests/cri-real/setup.sh compiles this statically and packs it as an OCI
 * image. Like Kubernetes' pause: wait for signals, exit 0 on SIGINT/SIGTERM, reap children. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(void) {
    struct sigaction q = {.sa_handler = quit}, r = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
    sigaction(SIGINT, &q, NULL);
    sigaction(SIGTERM, &q, NULL);
    sigaction(SIGCHLD, &r, NULL);
    for (;;) pause();
}
