/*
 * rmr ofi-sys shim: libfabric implements most of its API as `static inline`
 * functions that jump through a provider's ops tables. Rust cannot call
 * those, so each one is re-exported here as a real function named
 * `rfi_<name>` with the same parameters.
 */
#ifndef RMR_OFI_SHIM_H
#define RMR_OFI_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_atomic.h>

/* FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION) of the headers built against. */
uint32_t rfi_header_version(void);

struct fi_info *rfi_allocinfo(void);
int rfi_close(struct fid *fid);
int rfi_control(struct fid *fid, int command, void *arg);

int rfi_domain(struct fid_fabric *fabric, struct fi_info *info,
	       struct fid_domain **domain, void *context);
int rfi_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr,
		struct fid_eq **eq, void *context);
int rfi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
		struct fid_cq **cq, void *context);
int rfi_endpoint(struct fid_domain *domain, struct fi_info *info,
		 struct fid_ep **ep, void *context);
int rfi_passive_ep(struct fid_fabric *fabric, struct fi_info *info,
		   struct fid_pep **pep, void *context);
int rfi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags);
int rfi_pep_bind(struct fid_pep *pep, struct fid *bfid, uint64_t flags);
int rfi_enable(struct fid_ep *ep);
ssize_t rfi_cancel(struct fid *fid, void *context);
int rfi_setopt(struct fid *fid, int level, int optname, const void *optval,
	       size_t optlen);
int rfi_getopt(struct fid *fid, int level, int optname, void *optval,
	       size_t *optlen);

int rfi_getname(struct fid *fid, void *addr, size_t *addrlen);
int rfi_getpeer(struct fid_ep *ep, void *addr, size_t *addrlen);
int rfi_listen(struct fid_pep *pep);
int rfi_connect(struct fid_ep *ep, const void *addr, const void *param,
		size_t paramlen);
int rfi_accept(struct fid_ep *ep, const void *param, size_t paramlen);
int rfi_reject(struct fid_pep *pep, fid_t handle, const void *param,
	       size_t paramlen);
int rfi_shutdown(struct fid_ep *ep, uint64_t flags);

ssize_t rfi_eq_read(struct fid_eq *eq, uint32_t *event, void *buf, size_t len,
		    uint64_t flags);
ssize_t rfi_eq_sread(struct fid_eq *eq, uint32_t *event, void *buf, size_t len,
		     int timeout, uint64_t flags);
ssize_t rfi_eq_readerr(struct fid_eq *eq, struct fi_eq_err_entry *buf,
		       uint64_t flags);
ssize_t rfi_eq_write(struct fid_eq *eq, uint32_t event, const void *buf,
		     size_t len, uint64_t flags);

ssize_t rfi_cq_read(struct fid_cq *cq, void *buf, size_t count);
ssize_t rfi_cq_sread(struct fid_cq *cq, void *buf, size_t count,
		     const void *cond, int timeout);
ssize_t rfi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf,
		       uint64_t flags);
int rfi_cq_signal(struct fid_cq *cq);
const char *rfi_cq_strerror(struct fid_cq *cq, int prov_errno,
			    const void *err_data, char *buf, size_t len);
int rfi_trywait(struct fid_fabric *fabric, struct fid **fids, int count);

int rfi_mr_reg(struct fid_domain *domain, const void *buf, size_t len,
	       uint64_t access, uint64_t offset, uint64_t requested_key,
	       uint64_t flags, struct fid_mr **mr, void *context);
uint64_t rfi_mr_key(struct fid_mr *mr);
void *rfi_mr_desc(struct fid_mr *mr);
int rfi_mr_bind(struct fid_mr *mr, struct fid *bfid, uint64_t flags);
int rfi_mr_enable(struct fid_mr *mr);

ssize_t rfi_sendmsg(struct fid_ep *ep, const struct fi_msg *msg, uint64_t flags);
ssize_t rfi_recvmsg(struct fid_ep *ep, const struct fi_msg *msg, uint64_t flags);
ssize_t rfi_writemsg(struct fid_ep *ep, const struct fi_msg_rma *msg,
		     uint64_t flags);
ssize_t rfi_readmsg(struct fid_ep *ep, const struct fi_msg_rma *msg,
		    uint64_t flags);
ssize_t rfi_fetch_atomicmsg(struct fid_ep *ep, const struct fi_msg_atomic *msg,
			    struct fi_ioc *resultv, void **result_desc,
			    size_t result_count, uint64_t flags);
ssize_t rfi_compare_atomicmsg(struct fid_ep *ep,
			      const struct fi_msg_atomic *msg,
			      const struct fi_ioc *comparev, void **compare_desc,
			      size_t compare_count, struct fi_ioc *resultv,
			      void **result_desc, size_t result_count,
			      uint64_t flags);
int rfi_fetch_atomicvalid(struct fid_ep *ep, enum fi_datatype datatype,
			  enum fi_op op, size_t *count);
int rfi_compare_atomicvalid(struct fid_ep *ep, enum fi_datatype datatype,
			    enum fi_op op, size_t *count);

#endif
