/* An Alertmanager webhook receiver for the VM, where there is no Python: appends one JSON line
 * per notification to OUT, in scripts/e2e/webhook_receiver.py's format ({"received": Unix
 * seconds, "payload": the body}), so the host's checks read both alike. Writes the port it bound
 * on 127.0.0.1 to PORTFILE (PORT 0, the default, lets the kernel pick).
 *
 *   webhook-sink OUT PORTFILE [PORT]
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_REQUEST (10 * 1024 * 1024)

static void serve(int conn, const char *out_path) {
    static char buf[MAX_REQUEST + 1];
    size_t used = 0;
    char *body = NULL;
    long length = -1;
    for (;;) {
        ssize_t got = read(conn, buf + used, MAX_REQUEST - used);
        if (got <= 0)
            return;
        used += (size_t)got;
        buf[used] = 0;
        if (!body) {
            char *end = strstr(buf, "\r\n\r\n");
            if (!end)
                continue;
            body = end + 4;
            for (char *line = strstr(buf, "\r\n"); line && line < end; line = strstr(line + 2, "\r\n"))
                if (strncasecmp(line + 2, "Content-Length:", 15) == 0)
                    length = strtol(line + 17, NULL, 10);
            if (length < 0)
                length = 0;
        }
        if ((long)(buf + used - body) >= length || used == MAX_REQUEST)
            break;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    size_t body_len = (size_t)(buf + used - body);
    if ((long)body_len > length)
        body_len = (size_t)length;
    /* One notification a line: Alertmanager's JSON has no raw newlines except a trailing one. */
    for (size_t i = 0; i < body_len; i++)
        if (body[i] == '\n' || body[i] == '\r')
            body[i] = ' ';
    FILE *out = fopen(out_path, "a");
    if (out) {
        fprintf(out, "{\"received\": %ld.%06ld, \"payload\": %.*s}\n", (long)now.tv_sec, now.tv_nsec / 1000,
                (int)body_len, body_len ? body : "null");
        fclose(out);
    }
    static const char reply[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    if (write(conn, reply, sizeof reply - 1) < 0)
        perror("webhook-sink: write");
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: webhook-sink OUT PORTFILE [PORT]\n");
        return 2;
    }
    int sock = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(argc > 3 ? atoi(argv[3]) : 0)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bind(sock, (struct sockaddr *)&addr, sizeof addr) || listen(sock, 16) ||
        getsockname(sock, (struct sockaddr *)&addr, &len)) {
        perror("webhook-sink: bind");
        return 1;
    }
    FILE *port = fopen(argv[2], "w");
    if (!port) {
        perror(argv[2]);
        return 1;
    }
    fprintf(port, "%d\n", ntohs(addr.sin_port));
    fclose(port);
    for (;;) {
        int conn = accept(sock, NULL, NULL);
        if (conn < 0)
            continue;
        serve(conn, argv[1]);
        close(conn);
    }
}
