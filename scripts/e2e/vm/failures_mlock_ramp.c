/* An mlock ramp: locks a mapping 1 MiB at a time with mlock(2) until the kernel refuses
 * (do_mlock in mm/mlock.c: -ENOMEM once locked_vm + len passes RLIMIT_MEMLOCK without
 * CAP_IPC_LOCK) or MAX MiB are locked, printing each step, then exits after HOLD_MS (0: at once,
 * before anyone can read its /proc entry).
 *
 *   failures-mlock-ramp [MAX_MIB [HOLD_MS]]
 *   failures-mlock-ramp --loop N   mlock and munlock one page N times and print the system CPU
 *                                  time per mlock (each one an entry and a return of do_mlock:
 *                                  the cost of its probes, with the collector on)
 *
 * Exit status: 0 after a refusal with ENOMEM, 1 on any other error, 3 if MAX was reached first.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

static int loop(long n) {
    static char page[4096] __attribute__((aligned(4096)));
    struct rusage before, after;
    page[0] = 1;
    getrusage(RUSAGE_SELF, &before);
    for (long i = 0; i < n; i++) {
        if (mlock(page, sizeof page) != 0 || munlock(page, sizeof page) != 0) {
            perror("mlock");
            return 1;
        }
    }
    getrusage(RUSAGE_SELF, &after);
    double sys = (after.ru_stime.tv_sec - before.ru_stime.tv_sec)
        + (after.ru_stime.tv_usec - before.ru_stime.tv_usec) / 1e6;
    double user = (after.ru_utime.tv_sec - before.ru_utime.tv_sec)
        + (after.ru_utime.tv_usec - before.ru_utime.tv_usec) / 1e6;
    printf("mlocks %ld sys_us_per_call %.3f user_us_per_call %.3f\n", n, 1e6 * sys / n, 1e6 * user / n);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "--loop") == 0) return loop(atol(argv[2]));
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
