/* See shim.h: real symbols for libfabric's static inline calls. */
#include "shim.h"

uint32_t rfi_header_version(void)
{
	return FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
}

struct fi_info *rfi_allocinfo(void) { return fi_allocinfo(); }
int rfi_close(struct fid *fid) { return fi_close(fid); }
int rfi_control(struct fid *fid, int command, void *arg)
{
	return fi_control(fid, command, arg);
}

int rfi_domain(struct fid_fabric *fabric, struct fi_info *info,
	       struct fid_domain **domain, void *context)
{
	return fi_domain(fabric, info, domain, context);
}
int rfi_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr,
		struct fid_eq **eq, void *context)
{
	return fi_eq_open(fabric, attr, eq, context);
}
int rfi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
		struct fid_cq **cq, void *context)
{
	return fi_cq_open(domain, attr, cq, context);
}
int rfi_endpoint(struct fid_domain *domain, struct fi_info *info,
		 struct fid_ep **ep, void *context)
{
	return fi_endpoint(domain, info, ep, context);
}
int rfi_passive_ep(struct fid_fabric *fabric, struct fi_info *info,
		   struct fid_pep **pep, void *context)
{
	return fi_passive_ep(fabric, info, pep, context);
}
int rfi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags)
{
	return fi_ep_bind(ep, bfid, flags);
}
int rfi_pep_bind(struct fid_pep *pep, struct fid *bfid, uint64_t flags)
{
	return fi_pep_bind(pep, bfid, flags);
}
int rfi_enable(struct fid_ep *ep) { return fi_enable(ep); }
ssize_t rfi_cancel(struct fid *fid, void *context)
{
	return fi_cancel(fid, context);
}
int rfi_setopt(struct fid *fid, int level, int optname, const void *optval,
	       size_t optlen)
{
	return fi_setopt(fid, level, optname, optval, optlen);
}
int rfi_getopt(struct fid *fid, int level, int optname, void *optval,
	       size_t *optlen)
{
	return fi_getopt(fid, level, optname, optval, optlen);
}

int rfi_getname(struct fid *fid, void *addr, size_t *addrlen)
{
	return fi_getname(fid, addr, addrlen);
}
int rfi_getpeer(struct fid_ep *ep, void *addr, size_t *addrlen)
{
	return fi_getpeer(ep, addr, addrlen);
}
int rfi_listen(struct fid_pep *pep) { return fi_listen(pep); }
int rfi_connect(struct fid_ep *ep, const void *addr, const void *param,
		size_t paramlen)
{
	return fi_connect(ep, addr, param, paramlen);
}
int rfi_accept(struct fid_ep *ep, const void *param, size_t paramlen)
{
	return fi_accept(ep, param, paramlen);
}
int rfi_reject(struct fid_pep *pep, fid_t handle, const void *param,
	       size_t paramlen)
{
	return fi_reject(pep, handle, param, paramlen);
}
int rfi_shutdown(struct fid_ep *ep, uint64_t flags)
{
	return fi_shutdown(ep, flags);
}

ssize_t rfi_eq_read(struct fid_eq *eq, uint32_t *event, void *buf, size_t len,
		    uint64_t flags)
{
	return fi_eq_read(eq, event, buf, len, flags);
}
ssize_t rfi_eq_sread(struct fid_eq *eq, uint32_t *event, void *buf, size_t len,
		     int timeout, uint64_t flags)
{
	return fi_eq_sread(eq, event, buf, len, timeout, flags);
}
ssize_t rfi_eq_readerr(struct fid_eq *eq, struct fi_eq_err_entry *buf,
		       uint64_t flags)
{
	return fi_eq_readerr(eq, buf, flags);
}
ssize_t rfi_eq_write(struct fid_eq *eq, uint32_t event, const void *buf,
		     size_t len, uint64_t flags)
{
	return fi_eq_write(eq, event, buf, len, flags);
}

ssize_t rfi_cq_read(struct fid_cq *cq, void *buf, size_t count)
{
	return fi_cq_read(cq, buf, count);
}
ssize_t rfi_cq_sread(struct fid_cq *cq, void *buf, size_t count,
		     const void *cond, int timeout)
{
	return fi_cq_sread(cq, buf, count, cond, timeout);
}
ssize_t rfi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf,
		       uint64_t flags)
{
	return fi_cq_readerr(cq, buf, flags);
}
int rfi_cq_signal(struct fid_cq *cq) { return fi_cq_signal(cq); }
const char *rfi_cq_strerror(struct fid_cq *cq, int prov_errno,
			    const void *err_data, char *buf, size_t len)
{
	return fi_cq_strerror(cq, prov_errno, err_data, buf, len);
}
int rfi_trywait(struct fid_fabric *fabric, struct fid **fids, int count)
{
	return fi_trywait(fabric, fids, count);
}

int rfi_mr_reg(struct fid_domain *domain, const void *buf, size_t len,
	       uint64_t access, uint64_t offset, uint64_t requested_key,
	       uint64_t flags, struct fid_mr **mr, void *context)
{
	return fi_mr_reg(domain, buf, len, access, offset, requested_key, flags,
			 mr, context);
}
uint64_t rfi_mr_key(struct fid_mr *mr) { return fi_mr_key(mr); }
void *rfi_mr_desc(struct fid_mr *mr) { return fi_mr_desc(mr); }
int rfi_mr_bind(struct fid_mr *mr, struct fid *bfid, uint64_t flags)
{
	return fi_mr_bind(mr, bfid, flags);
}
int rfi_mr_enable(struct fid_mr *mr) { return fi_mr_enable(mr); }

ssize_t rfi_sendmsg(struct fid_ep *ep, const struct fi_msg *msg, uint64_t flags)
{
	return fi_sendmsg(ep, msg, flags);
}
ssize_t rfi_recvmsg(struct fid_ep *ep, const struct fi_msg *msg, uint64_t flags)
{
	return fi_recvmsg(ep, msg, flags);
}
ssize_t rfi_writemsg(struct fid_ep *ep, const struct fi_msg_rma *msg,
		     uint64_t flags)
{
	return fi_writemsg(ep, msg, flags);
}
ssize_t rfi_readmsg(struct fid_ep *ep, const struct fi_msg_rma *msg,
		    uint64_t flags)
{
	return fi_readmsg(ep, msg, flags);
}
ssize_t rfi_fetch_atomicmsg(struct fid_ep *ep, const struct fi_msg_atomic *msg,
			    struct fi_ioc *resultv, void **result_desc,
			    size_t result_count, uint64_t flags)
{
	return fi_fetch_atomicmsg(ep, msg, resultv, result_desc, result_count,
				  flags);
}
ssize_t rfi_compare_atomicmsg(struct fid_ep *ep,
			      const struct fi_msg_atomic *msg,
			      const struct fi_ioc *comparev, void **compare_desc,
			      size_t compare_count, struct fi_ioc *resultv,
			      void **result_desc, size_t result_count,
			      uint64_t flags)
{
	return fi_compare_atomicmsg(ep, msg, comparev, compare_desc,
				    compare_count, resultv, result_desc,
				    result_count, flags);
}
int rfi_fetch_atomicvalid(struct fid_ep *ep, enum fi_datatype datatype,
			  enum fi_op op, size_t *count)
{
	return fi_fetch_atomicvalid(ep, datatype, op, count);
}
int rfi_compare_atomicvalid(struct fid_ep *ep, enum fi_datatype datatype,
			    enum fi_op op, size_t *count)
{
	return fi_compare_atomicvalid(ep, datatype, op, count);
}
