/* The seed's failure in miniature: registers host buffers with ibv_reg_mr, STEP MiB at a time
 * every INTERVAL ms, until the kernel refuses (ib_umem_get in drivers/infiniband/core/umem.c
 * returns -ENOMEM once pinned_vm would pass RLIMIT_MEMLOCK without CAP_IPC_LOCK) or MAX MiB are
 * registered. Every line starts with the Unix time it was printed, so the host can compare it
 * with Alertmanager's notifications. After the refusal it keeps its MRs until HOLD_FILE exists
 * (or HOLD seconds pass), so the scenario can compare the exporter with `rdma resource show mr`.
 *
 *   mr-ramp [--device NAME] [--step-mib N] [--interval-ms N] [--max-mib N]
 *           [--hold-seconds N] [--release-file PATH]
 *
 * Exit status: 0 after a refusal with ENOMEM, 1 on any other error, 3 if MAX was reached first.
 */
#include <errno.h>
#include <stdarg.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void say(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    printf("%.3f ", now());
    vprintf(fmt, args);
    printf("\n");
    fflush(stdout);
    va_end(args);
}

int main(int argc, char **argv) {
    const char *device = NULL, *release = NULL;
    long step = 1, interval_ms = 1000, max = 64, hold = 30;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--device"))
            device = argv[i + 1];
        else if (!strcmp(argv[i], "--step-mib"))
            step = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--interval-ms"))
            interval_ms = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--max-mib"))
            max = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--hold-seconds"))
            hold = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--release-file"))
            release = argv[i + 1];
        else {
            fprintf(stderr, "mr-ramp: unknown option %s\n", argv[i]);
            return 1;
        }
    }
    int count = 0;
    struct ibv_device **list = ibv_get_device_list(&count);
    if (!list || count == 0) {
        fprintf(stderr, "mr-ramp: no verbs device (ibv_get_device_list: %s)\n", strerror(errno));
        return 1;
    }
    struct ibv_device *dev = list[0];
    for (int i = 0; device && i < count; i++)
        if (!strcmp(ibv_get_device_name(list[i]), device))
            dev = list[i];
    struct ibv_context *ctx = ibv_open_device(dev);
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    if (!pd) {
        fprintf(stderr, "mr-ramp: cannot open %s: %s\n", ibv_get_device_name(dev), strerror(errno));
        return 1;
    }
    say("opened %s, pid %ld", ibv_get_device_name(dev), (long)getpid());
    size_t bytes = (size_t)step << 20;
    long registered = 0;
    int rc = 3;
    while (registered + step <= max) {
        void *buf = NULL;
        if (posix_memalign(&buf, 4096, bytes)) {
            say("ERROR posix_memalign failed after %ld MiB", registered);
            return 1;
        }
        memset(buf, 1, bytes);
        struct ibv_mr *mr = ibv_reg_mr(pd, buf, bytes, IBV_ACCESS_LOCAL_WRITE);
        if (!mr) {
            int err = errno;
            if (err == ENOMEM)
                say("ENOMEM ibv_reg_mr refused after %ld MiB registered: %s", registered, strerror(err));
            else
                say("ERROR ibv_reg_mr failed after %ld MiB registered: %s", registered, strerror(err));
            rc = err == ENOMEM ? 0 : 1;
            break;
        }
        registered += step;
        say("registered %ld MiB in %ld MRs", registered, registered / step);
        usleep((useconds_t)interval_ms * 1000);
    }
    struct stat st;
    for (long waited = 0; waited < hold * 10 && !(release && stat(release, &st) == 0); waited++)
        usleep(100000);
    say("released %ld MiB", registered);
    return rc;
}
