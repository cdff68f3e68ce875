/* What a write+notify can cost on libfabric's msg providers, in plain
 * libfabric: three 8 B ping-pongs over one FI_EP_MSG endpoint, each side
 * busy-polling its CQ (as fi_pingpong does), in the same run.
 *
 *   msg  a send of 8 B into a posted receive (fi_pingpong's pattern);
 *   wn   an 8 B RMA write, then a send of 24 B (rmr's write+notify as two
 *        operations, what the ofi backend posted before small writes rode
 *        in its messages);
 *   wd   the same bytes as ONE operation: an RMA write of two pieces (the
 *        8 B to their target, the 24 B message into a slot of a ring the
 *        peer registered) carrying remote CQ data, which gives the peer a
 *        completion without a posted receive (how a backend-owned ring
 *        could carry a write and its notify together).
 *
 * Each mode's rounds take turns (blocks of ITERS/ROUNDS round trips), so a
 * slow spell of the host weighs on all three alike.
 *
 * Each side checks what arrived (the message's first word, the written
 * word, the CQ data) and stops with an error on a mismatch.
 *
 *   fi_wpp server PROV PORT
 *   fi_wpp client PROV HOST PORT ITERS ROUNDS
 *     -> one JSON line per mode: mean half round trip, us (median of the
 *        rounds' means)
 */
#include "bench.h"
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call) do { int _r = (int)(call); if (_r < 0) { \
    fprintf(stderr, "%s: %s\n", #call, fi_strerror(-_r)); exit(1); } } while (0)

enum { MSG, WN, WD, MODES };
static const char *names[MODES] = { "msg", "wn", "wd" };

static struct fi_info *info;
static struct fid_fabric *fab;
static struct fid_domain *dom;
static struct fid_eq *eq;
static struct fid_cq *cq;
static struct fid_ep *ep;
static struct fid_mr *mr;
/* Layout: [0, 64) the write target; [64, 192) receive buffer;
 * [256, 384) send buffer; [512, 520) write source; [1024, 1024+MSGLEN) the
 * ring slot the peer writes messages into. */
static char buf[4096] __attribute__((aligned(4096)));
#define TARGET 0
#define RECV 64
#define SEND 256
#define SRC 512
#define SLOT 1024
#define MSGLEN 24

struct peer { uint64_t addr, key; };
static struct peer peer;

static void cm_wait(uint32_t want, struct fi_eq_cm_entry *e) {
    uint32_t ev = 0;
    ssize_t n = fi_eq_sread(eq, &ev, e, sizeof *e, 10000, 0);
    if (n == -FI_EAVAIL) {
        struct fi_eq_err_entry err = { 0 };
        fi_eq_readerr(eq, &err, 0);
        fprintf(stderr, "cm error: %s\n", fi_strerror(err.err));
        exit(1);
    }
    if (n < 0) { fprintf(stderr, "cm event (want %u): %s\n", want, fi_strerror((int)-n)); exit(1); }
    if (ev != want) { fprintf(stderr, "cm event %u, want %u\n", ev, want); exit(1); }
}

static void *desc(void) { return (info->domain_attr->mr_mode & FI_MR_LOCAL) ? fi_mr_desc(mr) : NULL; }
static uint64_t raddr(size_t off) {
    return ((info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? peer.addr : 0) + off;
}

/* Waits for the next completion, which must have `want` among its flags
 * (nothing else completes here: sends and writes report nothing); returns
 * its data. */
static uint64_t wait_for(uint64_t want) {
    struct fi_cq_data_entry c;
    for (;;) {
        ssize_t k = fi_cq_read(cq, &c, 1);
        if (k == 1) {
            if (c.flags & want) return c.data;
            fprintf(stderr, "a completion with flags %#lx, want %#lx\n", (unsigned long)c.flags, (unsigned long)want);
            exit(1);
        }
        if (k == -FI_EAVAIL) {
            struct fi_cq_err_entry err = { 0 };
            fi_cq_readerr(cq, &err, 0);
            fprintf(stderr, "cq error: %s\n", fi_strerror(err.err));
            exit(1);
        }
        if (k != -FI_EAGAIN) { fprintf(stderr, "fi_cq_read: %zd\n", k); exit(1); }
    }
}

/* A small control message, copied by the provider at once (its buffer is
 * written again before any answer). */
static void send_ctl(size_t n) {
    ssize_t r;
    while ((r = fi_inject(ep, buf + SEND, n, 0)) == -FI_EAGAIN) ;
    CHECK(r);
}

static void post_recv(size_t n) {
    ssize_t r;
    while ((r = fi_recv(ep, buf + RECV, n, desc(), 0, NULL)) == -FI_EAGAIN) ;
    CHECK(r);
}

/* One side's half of a round in `mode` (the notify or message it sends). */
static void send_one(int mode, uint64_t seq) {
    ssize_t r;
    memcpy(buf + SRC, &seq, 8);
    memcpy(buf + SEND, &seq, 8);
    switch (mode) {
    case MSG:
        while ((r = fi_inject(ep, buf + SEND, 8, 0)) == -FI_EAGAIN) ;
        CHECK(r);
        break;
    case WN: {
        struct iovec iov = { buf + SRC, 8 };
        void *d = desc();
        struct fi_rma_iov rma = { raddr(TARGET), 8, peer.key };
        struct fi_msg_rma m = { &iov, &d, 1, 0, &rma, 1, NULL, 0 };
        while ((r = fi_writemsg(ep, &m, 0)) == -FI_EAGAIN) ;
        CHECK(r);
        while ((r = fi_send(ep, buf + SEND, MSGLEN, desc(), 0, NULL)) == -FI_EAGAIN) ;
        CHECK(r);
        break;
    }
    case WD: {
        struct iovec iov[2] = { { buf + SRC, 8 }, { buf + SEND, MSGLEN } };
        void *d[2] = { desc(), desc() };
        struct fi_rma_iov rma[2] = { { raddr(TARGET), 8, peer.key }, { raddr(SLOT), MSGLEN, peer.key } };
        struct fi_msg_rma m = { iov, d, 2, 0, rma, 2, NULL, seq };
        while ((r = fi_writemsg(ep, &m, FI_REMOTE_CQ_DATA)) == -FI_EAGAIN) ;
        CHECK(r);
        break;
    }
    }
}

static void check(const char *what, int mode, uint64_t got, uint64_t seq) {
    if (got != seq) {
        fprintf(stderr, "%s: %s %lu, want %lu\n", names[mode], what, (unsigned long)got, (unsigned long)seq);
        exit(1);
    }
}

/* Waits for the peer's half of a round in `mode`; checks what arrived:
 * the message's first word and, where there is one, the written word. */
static void recv_one(int mode, uint64_t seq) {
    uint64_t got;
    switch (mode) {
    case MSG:
        wait_for(FI_RECV);
        memcpy(&got, buf + RECV, 8);
        check("message", mode, got, seq);
        post_recv(MSGLEN);
        break;
    case WN:
        wait_for(FI_RECV);
        memcpy(&got, buf + RECV, 8);
        check("message", mode, got, seq);
        memcpy(&got, buf + TARGET, 8);
        check("written word", mode, got, seq);
        post_recv(MSGLEN);
        break;
    default:
        check("cq data", mode, wait_for(FI_REMOTE_CQ_DATA), seq);
        memcpy(&got, buf + SLOT, 8);
        check("message", mode, got, seq);
        memcpy(&got, buf + TARGET, 8);
        check("written word", mode, got, seq);
        break;
    }
}

static void open_common(const char *prov, const char *node, const char *port, int server) {
    struct fi_info *h = fi_allocinfo();
    h->ep_attr->type = FI_EP_MSG;
    h->caps = FI_MSG | FI_RMA;
    h->mode = FI_CONTEXT;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    h->fabric_attr->prov_name = strdup(prov);
    h->tx_attr->op_flags = 0;
    /* A write's bytes before the send that follows it: the orders rmr's
     * backend cannot do without. (On the `sockets` provider `wn` stops with
     * "got 0": the word is not there yet when the send's receive completes
     * in this program; not looked into, the scripts use `tcp` only.) */
    h->tx_attr->msg_order = FI_ORDER_SAW | FI_ORDER_SAS;
    h->rx_attr->msg_order = h->tx_attr->msg_order;
    CHECK(fi_getinfo(FI_VERSION(1, 17), node, port, server ? FI_SOURCE : 0, h, &info));
    fi_freeinfo(h);
    CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
    struct fi_eq_attr ea = { .wait_obj = FI_WAIT_UNSPEC };
    CHECK(fi_eq_open(fab, &ea, &eq, NULL));
}

static void open_ep(struct fi_info *fi) {
    CHECK(fi_domain(fab, fi, &dom, NULL));
    struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_DATA, .size = 256, .wait_obj = FI_WAIT_NONE };
    CHECK(fi_cq_open(dom, &ca, &cq, NULL));
    CHECK(fi_endpoint(dom, fi, &ep, NULL));
    CHECK(fi_ep_bind(ep, &eq->fid, 0));
    /* Sends and writes complete silently (none is waited for: each side
     * reuses a buffer only after the peer's answer); receives report. */
    CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_SELECTIVE_COMPLETION));
    CHECK(fi_ep_bind(ep, &cq->fid, FI_RECV));
    CHECK(fi_mr_reg(dom, buf, sizeof buf, FI_SEND | FI_RECV | FI_WRITE | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
    if (fi->domain_attr->mr_mode & FI_MR_ENDPOINT) {
        CHECK(fi_mr_bind(mr, &ep->fid, 0));
        CHECK(fi_mr_enable(mr));
    }
    CHECK(fi_enable(ep));
}

static void swap_keys(int server) {
    struct peer me = { (uint64_t)(uintptr_t)buf, fi_mr_key(mr) };
    memcpy(buf + SEND, &me, sizeof me);
    if (server) {
        send_ctl(sizeof me);
        wait_for(FI_RECV);
    } else {
        wait_for(FI_RECV);
        send_ctl(sizeof me);
    }
    memcpy(&peer, buf + RECV, sizeof peer);
}

int main(int argc, char **argv) {
    struct fi_eq_cm_entry e;
    int server = argc == 4 && !strcmp(argv[1], "server");
    if (!server && (argc != 7 || strcmp(argv[1], "client"))) {
        fprintf(stderr, "usage: fi_wpp server PROV PORT | client PROV HOST PORT ITERS ROUNDS\n");
        return 2;
    }
    int iters = server ? 0 : atoi(argv[5]), rounds = server ? 0 : atoi(argv[6]);
    if (!server && (rounds < 1 || iters < rounds)) {
        fprintf(stderr, "fi_wpp: ROUNDS must be at least 1 and ITERS at least ROUNDS\n");
        return 2;
    }
    if (server) {
        open_common(argv[2], NULL, argv[3], 1);
        struct fid_pep *pep;
        CHECK(fi_passive_ep(fab, info, &pep, NULL));
        CHECK(fi_pep_bind(pep, &eq->fid, 0));
        CHECK(fi_listen(pep));
        cm_wait(FI_CONNREQ, &e);
        open_ep(e.info);
        post_recv(MSGLEN);
        CHECK(fi_accept(ep, NULL, 0));
        cm_wait(FI_CONNECTED, &e);
        swap_keys(1);
        post_recv(MSGLEN);
        /* The client announces each block: mode and count, in a message. */
        for (;;) {
            wait_for(FI_RECV);
            uint64_t hdr[2];
            memcpy(hdr, buf + RECV, sizeof hdr);
            post_recv(MSGLEN);
            if (hdr[0] >= MODES) break;
            send_ctl(8); /* ready */
            for (uint64_t s = 1; s <= hdr[1]; s++) {
                recv_one((int)hdr[0], s);
                send_one((int)hdr[0], s);
            }
        }
        return 0;
    }
    open_common(argv[2], argv[3], argv[4], 0);
    open_ep(info);
    post_recv(MSGLEN);
    CHECK(fi_connect(ep, info->dest_addr, NULL, 0));
    cm_wait(FI_CONNECTED, &e);
    swap_keys(0);
    post_recv(MSGLEN);
    int block = iters / rounds;
    double *mean[MODES];
    for (int m = 0; m < MODES; m++) mean[m] = calloc(rounds, sizeof(double));
    for (int r = -1; r < rounds; r++) { /* round -1 warms up */
        for (int m = 0; m < MODES; m++) {
            uint64_t hdr[2] = { (uint64_t)m, (uint64_t)block };
            memcpy(buf + SEND, hdr, sizeof hdr);
            send_ctl(sizeof hdr);
            wait_for(FI_RECV); /* ready */
            post_recv(MSGLEN);
            double t0 = now();
            for (uint64_t s = 1; s <= (uint64_t)block; s++) {
                send_one(m, s);
                recv_one(m, s);
            }
            if (r >= 0) mean[m][r] = (now() - t0) * 1e6 / block / 2;
        }
    }
    uint64_t bye[2] = { MODES, 0 };
    memcpy(buf + SEND, bye, sizeof bye);
    send_ctl(sizeof bye);
    for (int m = 0; m < MODES; m++) {
        qsort(mean[m], rounds, sizeof(double), cmp);
        printf("{\"test\": \"fi_wpp\", \"backend\": \"fi_wpp:%s\", \"rails\": 1, \"size\": 8, \"mode\": \"%s\", "
               "\"iters\": %d, \"rounds\": %d, \"lat_mean_us\": %.3f, \"lat_mean_min_us\": %.3f, "
               "\"lat_mean_max_us\": %.3f}\n",
               argv[2], names[m], block * rounds, rounds, mean[m][rounds / 2], mean[m][0], mean[m][rounds - 1]);
    }
    fi_close(&ep->fid);
    return 0;
}
