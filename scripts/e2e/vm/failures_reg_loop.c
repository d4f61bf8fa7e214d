/* Registers and deregisters one SIZE-byte host buffer with ibv_reg_mr / ibv_dereg_mr RATE times a
 * second for SECONDS (absolute deadlines, so a slow call does not lower the rate that follows),
 * then prints how many it made and the CPU it used (getrusage: user and system, the system part
 * holding the kernel's cost of any kprobe on ib_umem_get, which runs in this task). The failures
 * scenario runs it with the collector off and on to measure what the probes add.
 *
 *   failures-reg-loop DEVICE RATE SECONDS [SIZE]
 *
 * Prints "registrations N elapsed_s S user_s U sys_s Y" (elapsed: wall time, longer than
 * SECONDS when the calls cannot keep up with RATE); exit status 1 on any failed call.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double seconds(struct timeval tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s DEVICE RATE SECONDS [SIZE]\n", argv[0]);
        return 2;
    }
    const char *name = argv[1];
    long rate = atol(argv[2]), duration = atol(argv[3]);
    size_t size = argc > 4 ? (size_t)atol(argv[4]) : 4096;
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    struct ibv_context *ctx = NULL;
    for (int i = 0; list && i < n; i++)
        if (strcmp(ibv_get_device_name(list[i]), name) == 0) ctx = ibv_open_device(list[i]);
    if (!ctx) {
        fprintf(stderr, "cannot open %s\n", name);
        return 1;
    }
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    void *buf = aligned_alloc(4096, size);
    if (!pd || !buf) {
        fprintf(stderr, "ibv_alloc_pd or allocation failed\n");
        return 1;
    }
    memset(buf, 1, size);
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    long total = rate * duration, done = 0;
    long step = 1000000000L / rate;
    struct rusage before, after;
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    getrusage(RUSAGE_SELF, &before);
    for (; done < total; done++) {
        struct ibv_mr *mr = ibv_reg_mr(pd, buf, size, IBV_ACCESS_LOCAL_WRITE);
        if (!mr) {
            fprintf(stderr, "ibv_reg_mr: %s after %ld\n", strerror(errno), done);
            return 1;
        }
        if (ibv_dereg_mr(mr)) {
            fprintf(stderr, "ibv_dereg_mr failed\n");
            return 1;
        }
        next.tv_nsec += step;
        while (next.tv_nsec >= 1000000000L) {
            next.tv_nsec -= 1000000000L;
            next.tv_sec++;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    }
    getrusage(RUSAGE_SELF, &after);
    clock_gettime(CLOCK_MONOTONIC, &end);
    printf("registrations %ld elapsed_s %.3f user_s %.3f sys_s %.3f\n", done,
           (end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9,
           seconds(after.ru_utime) - seconds(before.ru_utime), seconds(after.ru_stime) - seconds(before.ru_stime));
    return 0;
}
