/* An mlock ramp: locks a mapping 1 MiB at a time with mlock(2) until the kernel refuses
 * (do_mlock in mm/mlock.c: -ENOMEM once locked_vm + len passes RLIMIT_MEMLOCK without
 * CAP_IPC_LOCK) or MAX MiB are locked, printing each step, then exits after HOLD_MS (0: at once,
 * before anyone can read its /proc entry).
 *
 *   failures-mlock-ramp [MAX_MIB [HOLD_MS]]
 *
 * Exit status: 0 after a refusal with ENOMEM, 1 on any other error, 3 if MAX was reached first.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long max = argc > 1 ? atol(argv[1]) : 64;
    long hold_ms = argc > 2 ? atol(argv[2]) : 0;
    size_t mib = 1 << 20;
    char *map = mmap(NULL, max * mib, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    printf("pid %d\n", (int)getpid());
    for (long i = 0; i < max; i++) {
        if (mlock(map + i * mib, mib) != 0) {
            int e = errno;
            printf("refused at %ld MiB: %s\n", i + 1, e == ENOMEM ? "ENOMEM" : strerror(e));
            fflush(stdout);
            usleep(hold_ms * 1000);
            return e == ENOMEM ? 0 : 1;
        }
        printf("locked %ld MiB\n", i + 1);
        fflush(stdout);
    }
    return 3;
}
