/* What an 8 B write+notify costs between two processes of one node when
 * nothing but the memory traffic of a frame ring is paid: the shm
 * backend's layout without its software. Two processes (fork) pinned to
 * CPUs 0 and 1 share a fresh anonymous mapping and ping-pong in three ways,
 * taking turns in blocks:
 *
 *   floor  an 8-byte counter on one cache line each way (benches/c/shm_floor.c);
 *   ring   a ring like the shm backend's (backend-shm/src/ring.rs): the
 *          8 B "RDMA write" stored into a word of the peer's memory, then a
 *          frame (a 64-byte header and the 24-byte notify) appended to a
 *          single-producer ring and published by a sequentially consistent
 *          store of the ring's head on its own line, after which the
 *          producer looks at the consumer's "about to sleep" flag, as the
 *          backend does; the producer rereads the shared tail only when its
 *          last look says the ring is full. The peer spins on the head,
 *          checks the header, copies the message out, reads the written
 *          word and stores the ring's tail on its own line. (The backend
 *          publishes its tail once per batch; here every frame is a batch.)
 *   lines  a leaner layout, for comparison (not the backend's): the same
 *          write and the same 24-byte notify, its 8-byte header and the
 *          message spread over the 56-byte lines of a slot (one, for 24
 *          bytes) that each end in the message's sequence number, written
 *          last; the peer spins on the stamps (no head, no tail: in a ping-pong the answer tells
 *          that a slot is free), then copies the message out and reads the
 *          written word.
 *
 * Each side checks what arrived and stops with an error on a mismatch; a
 * side left alone stops too (the child when its parent dies, both after
 * 60 s).
 * Half the round trip, in microseconds: the median of the blocks' means.
 *   ./shm_wpp [ITERS [BLOCKS]]   -> one JSON line per mode
 */
#include "bench.h"
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RING (64 << 10) /* bytes of frames per direction */
#define HDR 64
#define MSG 24
#define SLOTS 64
#define LINES ((8 + MSG + 55) / 56) /* 56-byte lines hold the 8-byte header and the message */

/* One direction: control lines, then the frames. */
struct ring {
    _Alignas(64) _Atomic uint64_t head; /* bytes published (producer) */
    _Alignas(64) _Atomic uint64_t tail; /* bytes consumed (consumer) */
    _Alignas(64) _Atomic uint64_t target; /* the word the peer "RDMA-writes" */
    _Alignas(64) _Atomic uint64_t floor; /* the floor mode's counter */
    _Alignas(64) _Atomic uint32_t want_data; /* the consumer is about to sleep (never, here) */
    _Alignas(64) unsigned char data[RING];
    /* The `lines` mode's slots: SLOTS of LINES lines, each 56 bytes of
     * message and a stamp. */
    _Alignas(64) struct line { unsigned char b[56]; _Atomic uint64_t stamp; } slot[SLOTS][LINES];
};

struct hdr { uint32_t op, len; uint64_t seq; unsigned char pad[HDR - 16]; };

static void die(const char *what, uint64_t got, uint64_t want) {
    fprintf(stderr, "shm_wpp: %s: got %lu, want %lu\n", what, (unsigned long)got, (unsigned long)want);
    exit(1);
}

/* Producer side of `out`: the write into the peer's word, then the frame.
 * `tail_seen` is the producer's last look at the consumer's tail. */
static void send_ring(struct ring *out, uint64_t *tail_seen, uint64_t seq, const unsigned char *msg) {
    atomic_store_explicit(&out->target, seq, memory_order_relaxed);
    uint64_t h = atomic_load_explicit(&out->head, memory_order_relaxed);
    if (RING - h % RING < HDR + MSG) h += RING - h % RING; /* a frame never wraps */
    while (h + HDR + MSG - *tail_seen > RING)
        *tail_seen = atomic_load_explicit(&out->tail, memory_order_acquire);
    unsigned char *f = out->data + h % RING;
    struct hdr hd = { 1, MSG, seq, { 0 } };
    memcpy(f, &hd, HDR);
    memcpy(f + HDR, msg, MSG);
    atomic_store_explicit(&out->head, h + HDR + MSG, memory_order_seq_cst);
    if (atomic_load_explicit(&out->want_data, memory_order_seq_cst) != 0) die("want_data", 1, 0);
}

/* Consumer side of `in`: the next frame, checked, its message copied out. */
static void recv_ring(struct ring *in, uint64_t *pos, uint64_t seq, unsigned char *msg) {
    uint64_t p = *pos;
    if (RING - p % RING < HDR + MSG) p += RING - p % RING;
    while (atomic_load_explicit(&in->head, memory_order_acquire) < p + HDR + MSG) {}
    const unsigned char *f = in->data + p % RING;
    struct hdr hd;
    memcpy(&hd, f, HDR);
    if (hd.op != 1 || hd.len != MSG || hd.seq != seq) die("header", hd.seq, seq);
    memcpy(msg, f + HDR, MSG);
    uint64_t w = atomic_load_explicit(&in->target, memory_order_relaxed);
    if (w != seq) die("written word", w, seq);
    uint64_t first;
    memcpy(&first, msg, 8);
    if (first != seq) die("message", first, seq);
    *pos = p + HDR + MSG;
    atomic_store_explicit(&in->tail, *pos, memory_order_release);
}

/* The `lines` mode: the write, then the header (the sequence number) and
 * the message into slot `seq % SLOTS`, each line's stamp last. */
static void send_lines(struct ring *out, uint64_t seq, const unsigned char *msg) {
    atomic_store_explicit(&out->target, seq, memory_order_relaxed);
    struct line *l = out->slot[seq % SLOTS];
    unsigned char all[LINES * 56] = { 0 };
    memcpy(all, &seq, 8);
    memcpy(all + 8, msg, MSG);
    for (int i = 0; i < LINES; i++) memcpy(l[i].b, all + 56 * i, 56);
    for (int i = 0; i < LINES; i++) atomic_store_explicit(&l[i].stamp, seq, memory_order_release);
}

static void recv_lines(struct ring *in, uint64_t seq, unsigned char *msg) {
    struct line *l = in->slot[seq % SLOTS];
    for (int i = 0; i < LINES; i++)
        while (atomic_load_explicit(&l[i].stamp, memory_order_acquire) != seq) {}
    unsigned char all[LINES * 56];
    for (int i = 0; i < LINES; i++) memcpy(all + 56 * i, l[i].b, 56);
    uint64_t h;
    memcpy(&h, all, 8);
    if (h != seq) die("lines header", h, seq);
    memcpy(msg, all + 8, MSG);
    uint64_t w = atomic_load_explicit(&in->target, memory_order_relaxed);
    if (w != seq) die("written word", w, seq);
    uint64_t first;
    memcpy(&first, msg, 8);
    if (first != seq) die("lines message", first, seq);
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 200000;
    int blocks = argc > 2 ? atoi(argv[2]) : 10;
    if (blocks < 1 || iters < blocks) {
        fprintf(stderr, "shm_wpp: BLOCKS must be at least 1 and ITERS at least BLOCKS\n");
        return 2;
    }
    alarm(60);
    long block = iters / blocks;
    struct ring *r = mmap(NULL, 2 * sizeof(struct ring), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) { perror("mmap"); return 1; }
    struct ring *ab = &r[0], *ba = &r[1]; /* a -> b and b -> a */
    long total = (long)(blocks + 1) * block; /* block 0 warms up */
    pid_t child = fork();
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1) _exit(1);
        alarm(60);
        pin(1);
        unsigned char msg[MSG];
        uint64_t pos = 0, k = 0, seen = 0;
        for (int b = 0; b <= blocks; b++) {
            for (long i = 0; i < block; i++) { /* floor */
                k++;
                while (atomic_load_explicit(&ab->floor, memory_order_acquire) != k) {}
                atomic_store_explicit(&ba->floor, k, memory_order_release);
            }
            for (long i = 0; i < block; i++) { /* ring */
                uint64_t seq = (uint64_t)b * block + i + 1;
                recv_ring(ab, &pos, seq, msg);
                send_ring(ba, &seen, seq, msg);
            }
            for (long i = 0; i < block; i++) { /* lines */
                uint64_t seq = (uint64_t)b * block + i + 1;
                recv_lines(ab, seq, msg);
                send_lines(ba, seq, msg);
            }
        }
        _exit(0);
    }
    pin(0);
    double *fl = calloc(blocks, sizeof(double)), *rg = calloc(blocks, sizeof(double));
    double *ln = calloc(blocks, sizeof(double));
    unsigned char msg[MSG], got[MSG];
    memset(msg, 0x5a, MSG);
    uint64_t pos = 0, k = 0, seen = 0;
    for (int b = 0; b <= blocks; b++) {
        double t0 = now();
        for (long i = 0; i < block; i++) {
            k++;
            atomic_store_explicit(&ab->floor, k, memory_order_release);
            while (atomic_load_explicit(&ba->floor, memory_order_acquire) != k) {}
        }
        double t1 = now();
        for (long i = 0; i < block; i++) {
            uint64_t seq = (uint64_t)b * block + i + 1;
            memcpy(msg, &seq, 8);
            send_ring(ab, &seen, seq, msg);
            recv_ring(ba, &pos, seq, got);
        }
        double t2 = now();
        for (long i = 0; i < block; i++) {
            uint64_t seq = (uint64_t)b * block + i + 1;
            memcpy(msg, &seq, 8);
            send_lines(ab, seq, msg);
            recv_lines(ba, seq, got);
        }
        double t3 = now();
        if (b > 0) {
            fl[b - 1] = (t1 - t0) / block / 2 * 1e6;
            rg[b - 1] = (t2 - t1) / block / 2 * 1e6;
            ln[b - 1] = (t3 - t2) / block / 2 * 1e6;
        }
    }
    int st = 0;
    waitpid(child, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) { fprintf(stderr, "shm_wpp: the peer failed\n"); return 1; }
    qsort(fl, blocks, sizeof(double), cmp);
    qsort(rg, blocks, sizeof(double), cmp);
    qsort(ln, blocks, sizeof(double), cmp);
    printf("{\"test\": \"shm_wpp\", \"backend\": \"shm_wpp\", \"rails\": 1, \"size\": 8, \"mode\": \"floor\", \"iters\": %ld, \"lat_us\": %.3f}\n",
           total - block, fl[blocks / 2]);
    printf("{\"test\": \"shm_wpp\", \"backend\": \"shm_wpp\", \"rails\": 1, \"size\": 8, \"mode\": \"ring\", \"iters\": %ld, \"lat_us\": %.3f}\n",
           total - block, rg[blocks / 2]);
    printf("{\"test\": \"shm_wpp\", \"backend\": \"shm_wpp\", \"rails\": 1, \"size\": 8, \"mode\": \"lines\", \"iters\": %ld, \"lat_us\": %.3f}\n",
           total - block, ln[blocks / 2]);
    return 0;
}
