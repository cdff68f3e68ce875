//! Completion queue entries and reading them out of a CQ without blocking
//! (the CQ handle itself, its opening and its wait fd are in `ffi`).

use crate::ffi::{Cq, EAGAIN, EAVAIL, fi_error};
use ofi_sys as sys;
use rmr_api::Result;

/// One completion, translated out of `fi_cq_data_entry` / `fi_cq_err_entry`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cqe {
    pub(crate) token: u64,
    pub(crate) flags: u64,
    pub(crate) len: u64,
    pub(crate) data: u64,
    /// 0 for success, else the positive libfabric errno.
    pub(crate) err: i32,
    pub(crate) prov_errno: i32,
}

/// The most CQ entries one [`Cq::read`] returns.
pub(crate) const CQ_READ_MAX: usize = 32;

impl Cq {
    /// Reads what is there without blocking (`fi_cq_read`; an error entry
    /// with `fi_cq_readerr`), at most [`CQ_READ_MAX`] entries; returns how
    /// many were read (0: the CQ was empty).
    pub(crate) fn read(&self, out: &mut Vec<Cqe>) -> Result<usize> {
        // Not cleared first (a spinning waiter reads often): the provider
        // writes every entry it reports, and only those are read back.
        let mut buf =
            [const { std::mem::MaybeUninit::<sys::fi_cq_data_entry>::uninit() }; CQ_READ_MAX];
        // SAFETY: buf has room for 32 entries of the CQ's format (FI_CQ_FORMAT_DATA).
        let n = unsafe { sys::rfi_cq_read(self.raw(), buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            rmr_api::stages::stamp(rmr_api::stages::Stage::RxData);
            out.extend(buf[..(n as usize).min(buf.len())].iter().map(|e| {
                // SAFETY: fi_cq_read initialised the first `n` entries, and this
                // array is our own stack buffer: nothing writes it once the call
                // returned (a copy is read out, no reference kept).
                let e = unsafe { e.assume_init_read() };
                Cqe {
                    token: e.op_context as u64,
                    flags: e.flags,
                    len: e.len as u64,
                    data: e.data,
                    err: 0,
                    prov_errno: 0,
                }
            }));
            return Ok(n as usize);
        }
        if n == EAVAIL {
            let mut e = sys::fi_cq_err_entry::default();
            // SAFETY: e is a valid out-parameter (err_data lent by the provider).
            let r = unsafe { sys::rfi_cq_readerr(self.raw(), &mut e, 0) };
            if r > 0 {
                out.push(Cqe {
                    token: e.op_context as u64,
                    flags: e.flags,
                    len: e.len as u64,
                    data: e.data,
                    err: e.err.abs().max(1),
                    prov_errno: e.prov_errno,
                });
                return Ok(1);
            }
            return Ok(0);
        }
        if n == EAGAIN
            || n == -(sys::FI_ETIMEDOUT as isize)
            || n == -(sys::FI_EINTR as isize)
            || n == -(sys::FI_ECANCELED as isize)
        {
            return Ok(0);
        }
        Err(fi_error("fi_cq_read", n))
    }
}

#[cfg(test)]
mod tests {
    use crate::ffi::{Cq, CqWait};
    use crate::ia::OfiIa;

    #[test]
    fn each_wait_object_reports_only_its_own_and_an_empty_read_reads_nothing() {
        // The real tcp provider on loopback.
        let ia = OfiIa::open("tcp:127.0.0.1").expect("libfabric's tcp provider");
        let dom = &ia.sh.default_domain;
        let polled = Cq::open(dom, 64, CqWait::None).expect("a CQ without a wait object");
        // FI_GETWAIT on it would write a provider-specific struct, not an int:
        // the handle must not ask.
        assert_eq!(polled.wait_fd(), None);
        let waited = Cq::open(dom, 64, CqWait::Fd).expect("an FI_WAIT_FD CQ");
        assert!(waited.wait_fd().is_some_and(|fd| fd >= 0), "tcp's CQ has a wait fd");
        // A poll set is asked of a poll-set CQ only: FI_GETWAIT writes a
        // struct fi_wait_pollfd there, and the set holds at least its own
        // signal (entry 0) once a progress pass (a read) has run.
        let set = Cq::open(dom, 64, CqWait::PollSet).expect("an FI_WAIT_POLLFD CQ");
        assert_eq!(set.wait_fd(), None);
        let mut buf = Vec::new();
        assert_eq!(waited.poll_set(&mut buf), None);
        let mut out = Vec::new();
        assert_eq!(set.read(&mut out).expect("read"), 0);
        assert!(set.poll_set(&mut buf).is_some(), "tcp's poll-set CQ gives its set");
        assert!(buf.len() >= 2, "the set's signal and the CQ's: {}", buf.len());
        assert!(buf.iter().all(|p| p.fd >= 0));
        assert_eq!(polled.read(&mut out).expect("read"), 0);
        assert_eq!(waited.read(&mut out).expect("read"), 0);
        assert!(out.is_empty());
    }
}
