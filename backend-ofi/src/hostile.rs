//! What a hostile or broken peer does, for the backend's own tests: not
//! part of the API.

use crate::ep::OfiEp;
use crate::msg::{self, Iov};
use rmr_api::{DtoFlags, DtoOp, Result};
use std::time::Duration;

/// Connects `ep` sending `cm` as the whole connection private data
/// (rmr's header or not): what a peer that is not rmr, or a broken
/// one, sends.
///
/// # Errors
/// As [`rmr_api::Ep::connect`].
pub fn connect_with_cm_data(
    ep: &OfiEp,
    remote: &str,
    service: u16,
    cm: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>> {
    ep.sh.connect_cm(remote, service, cm, timeout)
}

/// The CM header `ep` sends: its control word's key and address.
pub fn cm_header(ep: &OfiEp) -> Vec<u8> {
    ep.sh.my_hdr().encode().to_vec()
}

/// Holds `ia`'s event-queue gate for `d` (the calling thread sleeps):
/// events that arrive meanwhile queue up unread, as they do behind a
/// slow reader, and every close of one of `ia`'s endpoints waits. Only
/// a gated queue (the `sockets` provider's) has one to hold; false for
/// others.
pub fn hold_event_queue(ia: &crate::OfiIa, d: Duration) -> bool {
    match ia.sh.eq.close_gate() {
        Some(_held) => {
            std::thread::sleep(d);
            true
        }
        None => false,
    }
}

/// Sends `payload` as one message whose remote CQ data is `data`, past
/// the backend's own framing (an rmr header or not): what a broken or
/// hostile peer sends. Suppressed.
///
/// # Errors
/// As [`rmr_api::Ep::post_send`].
pub fn send_raw(ep: &OfiEp, payload: &[u8], data: u64) -> Result<()> {
    let sh = &ep.sh;
    let mut meta =
        sh.user_meta(0, DtoOp::Send, DtoFlags::SUPPRESS, payload.len() as u64, Default::default());
    // The record keeps the bytes until the send completes.
    let bytes = payload.to_vec();
    let iov = [Iov { addr: bytes.as_ptr() as usize, len: bytes.len(), desc: 0 }];
    meta.hdr = Some(bytes);
    sh.post_tx(
        meta,
        ofi_sys::FI_REMOTE_CQ_DATA as u64,
        None,
        // SAFETY: the bytes live in the record until completion or flush.
        &mut |e, tok, fl, _, _| unsafe { msg::send(e, &iov, tok, data, fl) },
        "fi_sendmsg",
    )
}

/// The address a write to `off` in the region `ctx` names travels with on
/// `ep`'s provider (virtual, or an offset in the region).
pub fn remote_addr(ep: &OfiEp, ctx: &rmr_api::RmrContext, off: u64) -> u64 {
    if ep.sh.ia.feat.virt_addr { ctx.addr + off } else { off }
}
