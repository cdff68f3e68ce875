/* The plain-libfabric bandwidth baseline beside rmr's ofi backend: a
 * FI_EP_MSG endpoint, RMA writes of SIZE bytes in samples of 20 (the
 * window `rmr-bench client --test bw` uses: 20 writes, then a notify the
 * peer answers), same sizes, same provider. fi_pingpong's MB/s is not a
 * bandwidth figure and Debian has no fabtests, so scripts/bench-lab.sh
 * builds this with cc and runs it in the same run as rmr's rows.
 *
 *   fi_rma_bw server PROV PORT MAXSIZE
 *   fi_rma_bw client PROV HOST PORT SIZE ITERS
 *     -> one JSON line: median and slowest sample, Mbit/s (10^6 bit/s)
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

#define WINDOW 20
#define CHECK(call) do { int _r = (int)(call); if (_r < 0) { \
    fprintf(stderr, "%s: %s\n", #call, fi_strerror(-_r)); exit(1); } } while (0)

static struct fi_info *info;
static struct fid_fabric *fab;
static struct fid_domain *dom;
static struct fid_eq *eq;
static struct fid_cq *cq;
static struct fid_ep *ep;
static struct fid_mr *mr;
static char *buf;   /* data, then 64 B of control at the end */
static size_t len;

struct peer { uint64_t addr, key; };

static void cm_wait(uint32_t want, struct fi_eq_cm_entry *e) {
    uint32_t ev;
    ssize_t n = fi_eq_sread(eq, &ev, e, sizeof *e, 10000, 0);
    if (n < 0 || ev != want) { fprintf(stderr, "cm event %u (want %u): %zd\n", ev, want, n); exit(1); }
}

/* Reaps `n` completions (any kind). */
static void reap(int n) {
    struct fi_cq_entry c[16];
    while (n > 0) {
        ssize_t k = fi_cq_read(cq, c, n < 16 ? n : 16);
        if (k > 0) n -= (int)k;
        else if (k != -FI_EAGAIN) { fprintf(stderr, "fi_cq_read: %zd\n", k); exit(1); }
    }
}

static void *desc(void) { return (info->domain_attr->mr_mode & FI_MR_LOCAL) ? fi_mr_desc(mr) : NULL; }
static char *ctl(void) { return buf + len; }
static void post_recv(void) { while (fi_recv(ep, ctl(), 64, desc(), 0, NULL) == -FI_EAGAIN) reap(0); }
static void send_ctl(size_t n) {
    ssize_t r;
    while ((r = fi_send(ep, ctl() + 32, n, desc(), 0, NULL)) == -FI_EAGAIN) ;
    CHECK(r);
}

static void open_common(const char *prov, const char *node, const char *port, int server) {
    struct fi_info *h = fi_allocinfo();
    h->ep_attr->type = FI_EP_MSG;
    h->caps = FI_MSG | FI_RMA;
    h->mode = FI_CONTEXT;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    h->fabric_attr->prov_name = strdup(prov);
    CHECK(fi_getinfo(FI_VERSION(1, 17), node, port, server ? FI_SOURCE : 0, h, &info));
    fi_freeinfo(h);
    CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
    struct fi_eq_attr ea = { .wait_obj = FI_WAIT_UNSPEC };
    CHECK(fi_eq_open(fab, &ea, &eq, NULL));
}

static void open_ep(struct fi_info *fi) {
    CHECK(fi_domain(fab, fi, &dom, NULL));
    struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_CONTEXT, .size = 256, .wait_obj = FI_WAIT_NONE };
    CHECK(fi_cq_open(dom, &ca, &cq, NULL));
    CHECK(fi_endpoint(dom, fi, &ep, NULL));
    CHECK(fi_ep_bind(ep, &eq->fid, 0));
    CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    buf = aligned_alloc(4096, (len + 64 + 4095) / 4096 * 4096);
    memset(buf, 0, len + 64);
    CHECK(fi_mr_reg(dom, buf, len + 64, FI_SEND | FI_RECV | FI_WRITE | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
    if (fi->domain_attr->mr_mode & FI_MR_ENDPOINT) {
        CHECK(fi_mr_bind(mr, &ep->fid, 0));
        CHECK(fi_mr_enable(mr));
    }
    CHECK(fi_enable(ep));
}

int main(int argc, char **argv) {
    struct fi_eq_cm_entry e;
    if (argc == 5 && !strcmp(argv[1], "server")) {
        len = strtoull(argv[4], 0, 0);
        open_common(argv[2], NULL, argv[3], 1);
        struct fid_pep *pep;
        CHECK(fi_passive_ep(fab, info, &pep, NULL));
        CHECK(fi_pep_bind(pep, &eq->fid, 0));
        CHECK(fi_listen(pep));
        cm_wait(FI_CONNREQ, &e);
        open_ep(e.info);
        post_recv();
        CHECK(fi_accept(ep, NULL, 0));
        cm_wait(FI_CONNECTED, &e);
        struct peer me = {
            (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)buf : 0, fi_mr_key(mr) };
        memcpy(ctl() + 32, &me, sizeof me);
        send_ctl(sizeof me);
        reap(1);
        /* Every notify gets an ack; the client's close ends the loop. */
        for (;;) {
            struct fi_cq_entry c;
            ssize_t k;
            while ((k = fi_cq_read(cq, &c, 1)) == -FI_EAGAIN) {
                uint32_t ev;
                if (fi_eq_read(eq, &ev, &e, sizeof e, 0) > 0 && ev == FI_SHUTDOWN) return 0;
            }
            if (k < 0) return 0;
            if (c.op_context != NULL) continue; /* never: every op has a NULL context */
            /* A receive or our own ack's send completed: only receives carry a tag byte. */
            if (ctl()[0] == 'N') {
                ctl()[0] = 0;
                post_recv();
                ctl()[32] = 'A';
                send_ctl(8);
            }
        }
    }
    if (argc != 7 || strcmp(argv[1], "client")) {
        fprintf(stderr, "usage: fi_rma_bw server PROV PORT MAXSIZE | client PROV HOST PORT SIZE ITERS\n");
        return 2;
    }
    len = strtoull(argv[5], 0, 0);
    int iters = atoi(argv[6]), warm = iters / 10 + 2;
    open_common(argv[2], argv[3], argv[4], 0);
    open_ep(info);
    post_recv();
    CHECK(fi_connect(ep, info->dest_addr, NULL, 0));
    cm_wait(FI_CONNECTED, &e);
    reap(1); /* the server's address and key */
    struct peer p;
    memcpy(&p, ctl(), sizeof p);
    double *rate = malloc(sizeof(double) * iters);
    for (int i = 0; i < warm + iters; i++) {
        post_recv();
        double t0 = now();
        for (int w = 0; w < WINDOW; w++) {
            ssize_t r;
            while ((r = fi_write(ep, buf, len, desc(), 0, p.addr, p.key, NULL)) == -FI_EAGAIN) reap(0);
            CHECK(r);
        }
        ctl()[32] = 'N';
        send_ctl(8);
        reap(WINDOW + 2); /* the writes, the notify, the ack's receive */
        double t = now() - t0;
        if (ctl()[0] != 'A') { fprintf(stderr, "no ack\n"); return 1; }
        ctl()[0] = 0;
        if (i >= warm) rate[i - warm] = WINDOW * len * 8.0 / t / 1e6;
    }
    qsort(rate, iters, sizeof *rate, cmp);
    printf("{\"test\": \"fi_rma_bw\", \"backend\": \"fi_rma_bw:%s\", \"rails\": 1, \"size\": %zu, \"iters\": %d, "
           "\"mbps\": %.3f, \"mbps_min\": %.3f}\n", argv[2], len, iters, rate[iters / 2], rate[0]);
    fi_close(&ep->fid);
    return 0;
}
