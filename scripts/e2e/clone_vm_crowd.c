/* A crowd of processes sharing one mm (clone(CLONE_VM)), for scripts/e2e/fairshare.sh (issue 33):
 * mlocks 8 MiB once, then starts N children that share the address space, so each one's VmLck
 * and smaps_rollup "Locked:" show the 8 MiB (one map each: the pages' map count is 1) while the
 * host holds 8 MiB once. Prints "clonevm ready N" and holds until stdin closes; the children die
 * with it (PR_SET_PDEATHSIG) and are killed at the end.
 *
 *     cc -O2 -o clone_vm_crowd clone_vm_crowd.c && ./clone_vm_crowd 8300
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define STACK (64 * 1024)

static int child(void *unused)
{
    (void)unused;
    /* Raw syscalls only: the stack and errno are shared with every other task of the mm. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (;;)
        pause();
    return 0;
}

int main(int argc, char **argv)
{
    int wanted = argc > 1 ? atoi(argv[1]) : 0;
    size_t size = 8 << 20;
    char *locked = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *stacks = mmap(NULL, (size_t)wanted * STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    pid_t *pids = calloc((size_t)wanted, sizeof(pid_t));
    if (locked == MAP_FAILED || stacks == MAP_FAILED || !pids) {
        perror("mmap");
        return 1;
    }
    if (mlock(locked, size) != 0) {
        perror("mlock");
        return 1;
    }
    prctl(PR_SET_NAME, "crowd-clonevm");
    int started = 0;
    for (; started < wanted; started++) {
        pid_t pid = clone(child, stacks + (size_t)(started + 1) * STACK, CLONE_VM | SIGCHLD, NULL);
        if (pid < 0) {
            perror("clone");
            break;
        }
        pids[started] = pid;
    }
    printf("clonevm ready %d\n", started);
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0)
        ;
    for (int i = 0; i < started; i++)
        kill(pids[i], SIGKILL);
    for (int i = 0; i < started; i++)
        waitpid(pids[i], NULL, 0);
    printf("done\n");
    return started == wanted ? 0 : 1;
}
