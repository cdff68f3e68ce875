//! The data-path FFI: `fi_sendmsg`, `fi_recvmsg`, `fi_writemsg`,
//! `fi_readmsg` and the fetching atomics, built from plain segment lists.
//!
//! These are `unsafe fn`s: libfabric keeps using the buffers after the call
//! returns, until the operation completes (or the endpoint is closed).

use crate::ffi::EpH;
use ofi_sys as sys;
use smallvec::SmallVec;
use std::ffi::c_void;

/// One local segment: address, length and the MR descriptor (0 when the
/// provider does not need local registration).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Iov {
    pub(crate) addr: usize,
    pub(crate) len: usize,
    pub(crate) desc: usize,
}

/// The remote side of an RMA or atomic: address (virtual or offset, as the
/// provider's `mr_mode` says), length and key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Remote {
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) key: u64,
}

type IoVecs = SmallVec<[libc::iovec; 4]>;
type Descs = SmallVec<[*mut c_void; 4]>;

fn split(iov: &[Iov]) -> (IoVecs, Descs) {
    let v = iov
        .iter()
        .map(|s| libc::iovec { iov_base: s.addr as *mut c_void, iov_len: s.len })
        .collect();
    let d = iov.iter().map(|s| s.desc as *mut c_void).collect();
    (v, d)
}

/// `fi_sendmsg`.
///
/// # Safety
/// Every segment must stay allocated until the send completes or the
/// endpoint is closed.
pub(crate) unsafe fn send(ep: &EpH, iov: &[Iov], token: u64, data: u64, flags: u64) -> isize {
    let (mut v, mut d) = split(iov);
    let msg = sys::fi_msg {
        msg_iov: v.as_mut_ptr().cast(),
        desc: d.as_mut_ptr(),
        iov_count: v.len(),
        addr: 0,
        context: token as *mut c_void,
        data,
    };
    // SAFETY: msg and its arrays live for the call; the caller keeps the buffers alive.
    unsafe { sys::rfi_sendmsg(ep.raw(), &msg, flags) }
}

/// `fi_recvmsg`.
///
/// # Safety
/// Every segment must stay allocated until the receive completes or the
/// endpoint is closed.
pub(crate) unsafe fn recv(ep: &EpH, iov: &[Iov], token: u64, flags: u64) -> isize {
    let (mut v, mut d) = split(iov);
    let msg = sys::fi_msg {
        msg_iov: v.as_mut_ptr().cast(),
        desc: d.as_mut_ptr(),
        iov_count: v.len(),
        addr: 0,
        context: token as *mut c_void,
        data: 0,
    };
    // SAFETY: msg and its arrays live for the call; the caller keeps the buffers alive.
    unsafe { sys::rfi_recvmsg(ep.raw(), &msg, flags) }
}

/// `fi_writemsg` (`read == false`) or `fi_readmsg` (`read == true`).
///
/// # Safety
/// Every segment must stay allocated until the operation completes or the
/// endpoint is closed.
pub(crate) unsafe fn rma(
    ep: &EpH,
    read: bool,
    iov: &[Iov],
    remote: Remote,
    token: u64,
    data: u64,
    flags: u64,
) -> isize {
    let (mut v, mut d) = split(iov);
    let mut r = sys::fi_rma_iov { addr: remote.addr, len: remote.len as usize, key: remote.key };
    let msg = sys::fi_msg_rma {
        msg_iov: v.as_mut_ptr().cast(),
        desc: d.as_mut_ptr(),
        iov_count: v.len(),
        addr: 0,
        rma_iov: &mut r,
        rma_iov_count: 1,
        context: token as *mut c_void,
        data,
    };
    // SAFETY: msg and its arrays live for the call; the caller keeps the buffers alive.
    unsafe {
        if read {
            sys::rfi_readmsg(ep.raw(), &msg, flags)
        } else {
            sys::rfi_writemsg(ep.raw(), &msg, flags)
        }
    }
}

/// A 64-bit fetch-and-add (`compare == None`) or compare-and-swap.
/// `operand` is the addend or the swap value.
///
/// # Safety
/// `operand`, `compare` and `result` must stay allocated until the
/// operation completes or the endpoint is closed.
pub(crate) unsafe fn atomic(
    ep: &EpH,
    operand: *const u64,
    compare: Option<*const u64>,
    result: Iov,
    remote: Remote,
    token: u64,
    flags: u64,
) -> isize {
    let mut op_ioc = sys::fi_ioc { addr: operand as *mut c_void, count: 1 };
    let mut op_desc: *mut c_void = std::ptr::null_mut();
    let mut rma = sys::fi_rma_ioc { addr: remote.addr, count: 1, key: remote.key };
    let msg = sys::fi_msg_atomic {
        msg_iov: &mut op_ioc,
        desc: &mut op_desc,
        iov_count: 1,
        addr: 0,
        rma_iov: &mut rma,
        rma_iov_count: 1,
        datatype: sys::FI_UINT64,
        op: if compare.is_some() { sys::FI_CSWAP } else { sys::FI_SUM },
        context: token as *mut c_void,
        data: 0,
    };
    let mut res = sys::fi_ioc { addr: result.addr as *mut c_void, count: 1 };
    let mut res_desc = result.desc as *mut c_void;
    // SAFETY: msg, iocs and descriptors live for the call; the caller keeps buffers alive.
    unsafe {
        match compare {
            None => sys::rfi_fetch_atomicmsg(ep.raw(), &msg, &mut res, &mut res_desc, 1, flags),
            Some(c) => {
                let cmp = sys::fi_ioc { addr: c as *mut c_void, count: 1 };
                let mut cmp_desc: *mut c_void = std::ptr::null_mut();
                sys::rfi_compare_atomicmsg(
                    ep.raw(),
                    &msg,
                    &cmp,
                    &mut cmp_desc,
                    1,
                    &mut res,
                    &mut res_desc,
                    1,
                    flags,
                )
            }
        }
    }
}
