/* The reference for the busy-polling raw TCP ping-pong: both ends spin on a
 * non-blocking socket (TCP_NODELAY, no poll, no sleeping read), SIZE bytes
 * each way. `rmr-bench raw-tcp client --test lat` is checked against it
 * (scripts/bench-floor.sh builds it with cc).
 *
 *   busypoll_pingpong server PORT
 *   busypoll_pingpong client HOST PORT SIZE ITERS   -> median half round trip, us
 */
#include "bench.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void die(const char *m) { perror(m); exit(1); }

static void spin_io(int fd, char *b, size_t n, int rd) {
    size_t at = 0;
    while (at < n) {
        ssize_t k = rd ? read(fd, b + at, n - at) : write(fd, b + at, n - at);
        if (k > 0) at += (size_t)k;
        else if (k == 0) exit(0);
        else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) die(rd ? "read" : "write");
    }
}

static void tune(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "server")) {
        int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
        if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 16)) die("listen");
        for (;;) {
            int fd = accept(l, NULL, NULL);
            if (fd < 0) die("accept");
            if (fork() == 0) {
                unsigned long size;
                if (read(fd, &size, sizeof size) != sizeof size) exit(1);
                char *b = malloc(size ? size : 1);
                tune(fd);
                for (;;) { spin_io(fd, b, size, 1); spin_io(fd, b, size, 0); }
            }
            close(fd);
        }
    }
    if (argc < 6 || strcmp(argv[1], "client")) {
        fprintf(stderr, "usage: %s server PORT | client HOST PORT SIZE ITERS\n", argv[0]);
        return 2;
    }
    unsigned long size = strtoul(argv[4], 0, 10), iters = strtoul(argv[5], 0, 10), warm = iters / 10;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
    inet_pton(AF_INET, argv[2], &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) die("connect");
    if (write(fd, &size, sizeof size) != sizeof size) die("write");
    tune(fd);
    char *b = calloc(1, size ? size : 1);
    double *t = malloc(sizeof(double) * iters);
    for (unsigned long i = 0; i < warm + iters; i++) {
        struct timespec s, e;
        clock_gettime(CLOCK_MONOTONIC, &s);
        spin_io(fd, b, size, 0);
        spin_io(fd, b, size, 1);
        clock_gettime(CLOCK_MONOTONIC, &e);
        if (i >= warm) t[i - warm] = ((e.tv_sec - s.tv_sec) * 1e9 + (e.tv_nsec - s.tv_nsec)) / 2e3;
    }
    qsort(t, iters, sizeof *t, cmp);
    printf("%.3f\n", t[iters / 2]);
    return 0;
}
