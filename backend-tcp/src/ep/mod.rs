//! The TCP endpoint: connection set-up, the post path, and the shared state
//! its reader ([`rx`]) and sender threads work on.

mod connect;
mod dial;
mod progress;
mod reader;
mod rx;
mod send;
mod shared;
mod teardown;
mod window;

use crate::domain::IaShared;
use crate::tx::{Seg, Segs};
use crate::wire::{self, F_SOLICITED, Header, Op};
pub(crate) use connect::{handshake_write, tune};
use rmr_api::provider::{Handover, check_and_place};
use rmr_api::{
    Access, DtoFlags, DtoOp, Ep, EpAttr, EpEvds, EpId, EpState, Error, Result, RmrContext, Sge,
};
use rmr_api::{CompareSwap, Cookie, RemoteAddr};
pub use shared::TcpEp;
use shared::*;
pub(crate) use shared::{EpShared, Inflight, push};
use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

impl TcpEp {
    pub(crate) fn create(ia: Arc<IaShared>, pz_id: u64, evds: EpEvds) -> Arc<dyn Ep> {
        Arc::new(TcpEp {
            sh: Arc::new(EpShared {
                id: EpId::fresh(),
                ia,
                pz_id,
                evds,
                state: AtomicU8::new(0),
                tx: OnceLock::new(),
                rx: Mutex::new(None),
                peer: OnceLock::new(),
                inflight: Mutex::new(VecDeque::new()),
                recvs: Mutex::new(VecDeque::new()),
                rx_done: AtomicU64::new(0),
                acked_sent: AtomicU64::new(0),
                acked_rcvd: AtomicU64::new(0),
                acked_applied: AtomicU64::new(0),
                completing: Mutex::new(()),
                frames: [AtomicU64::new(0), AtomicU64::new(0)],
                ended: AtomicBool::new(false),
                local_disconnect: AtomicBool::new(false),
                stalled: AtomicBool::new(false),
                stall_until: Deadline::none(),
                disconnect_until: Deadline::none(),
                ack_due: Deadline::none(),
                ack_for: AtomicU64::new(0),
                active: AtomicUsize::new(0),
                waits: AtomicU64::new(0),
                left_at: AtomicU64::new(0),
                bg_polling: AtomicBool::new(false),
                handover: Handover::new(),
                handing: AtomicBool::new(false),
                stuck_since: AtomicU64::new(0),
                stuck_seen: [AtomicU64::new(0), AtomicU64::new(0)],
                stalled_for: OnceLock::new(),
                abandoned: AtomicBool::new(false),
                slot: AtomicUsize::new(crate::engine::NO_SLOT),
                kick_pending: AtomicBool::new(false),
                sndbuf: OnceLock::new(),
                zc_off: OnceLock::new(),
            }),
        })
    }

    /// The local segments of a post, checked (registered, in this EP's PZ,
    /// holding `need`, in bounds, at most the IA's segments and frame
    /// payload) and collected, the non-empty ones, in one pass
    /// ([`check_and_place`]: this backend's own LMRs read field by field,
    /// each segment checked against its region itself, since `Lmr` is a
    /// safe trait and its own length is an implementation's word).
    fn checked(&self, local: &[Sge<'_>], need: Access) -> Result<(u64, Segs)> {
        let mut segs = Segs::new();
        let limits = (self.sh.pz_id, need, self.sh.ia.attr.max_sges);
        let total = check_and_place(
            local,
            limits,
            |l| Some(l.as_any().downcast_ref::<crate::domain::TcpLmr>()?.facts()),
            &mut segs,
            |r, off, len| (len > 0).then(|| Seg { region: r.clone(), off, len }),
        )?;
        if total > wire::MAX_PAYLOAD {
            return Err(Error::invalid(format!(
                "{total} bytes exceed the {} limit",
                wire::MAX_PAYLOAD
            )));
        }
        Ok((total, segs))
    }

    fn remote_hdr(op: Op, remote: &RmrContext, remote_offset: u64, len: u64) -> Result<Header> {
        if remote_offset.checked_add(len).is_none_or(|e| e > remote.len) {
            return Err(Error::OutOfBounds { offset: remote_offset, len, limit: remote.len });
        }
        let mut h = Header::new(op);
        h.key = remote.key();
        h.addr = remote.addr + remote_offset;
        Ok(h)
    }

    fn inflight(cookie: u64, op: DtoOp, flags: DtoFlags, bytes: u64, dest: Segs) -> Inflight {
        Inflight { seq: 0, cookie, op, signalled: !flags.contains(DtoFlags::SUPPRESS), bytes, dest }
    }

    #[allow(clippy::too_many_arguments)]
    fn atomic(
        &self,
        op: Op,
        result: Sge<'_>,
        remote: &RmrContext,
        remote_offset: u64,
        args: (u64, u64),
        cookie: u64,
        flags: DtoFlags,
    ) -> Result<()> {
        if result.len != 8 {
            return Err(Error::invalid("an atomic's result segment must be 8 bytes"));
        }
        if (remote.addr + remote_offset) % 8 != 0 {
            return Err(Error::invalid("atomic target must be 8-byte aligned"));
        }
        let (_, dest) = self.checked(&[result], Access::LOCAL_WRITE)?;
        let mut h = Self::remote_hdr(op, remote, remote_offset, 8)?;
        (h.arg0, h.arg1) = args;
        let dop = if op == Op::FetchAdd { DtoOp::FetchAdd } else { DtoOp::CmpSwap };
        let inf = Self::inflight(cookie, dop, flags, 8, dest);
        self.sh.post_request(h, Segs::new(), inf, flags)
    }
}

impl Ep for TcpEp {
    fn connect(&self, remote: &str, service: u16, pd: &[u8], timeout: Duration) -> Result<Vec<u8>> {
        self.connect_stream(remote, service, pd, timeout)
    }

    fn connect_start(
        &self,
        remote: &str,
        service: u16,
        pd: &[u8],
        timeout: Duration,
    ) -> Result<()> {
        dial::Dialer::start(&self.sh, remote, service, pd, timeout)
    }

    fn close(&self, timeout: Duration) -> Result<()> {
        self.close_within(timeout)
    }

    fn id(&self) -> EpId {
        self.sh.id
    }

    fn attr(&self) -> EpAttr {
        let a = &self.sh.ia.attr;
        EpAttr {
            max_msg_size: a.max_msg_size,
            max_dtos: self.sh.ia.cfg.max_dtos,
            max_recvs: self.sh.ia.cfg.max_recvs,
            max_sges: a.max_sges,
            notes: vec![
                ("progress".into(), self.sh.progress_note()),
                ("sndbuf".into(), self.sh.sndbuf.get().cloned().unwrap_or_else(|| "-".into())),
                ("zerocopy".into(), self.sh.zerocopy_note()),
            ],
        }
    }

    fn state(&self) -> EpState {
        self.sh.state()
    }

    fn disconnect(&self) -> Result<()> {
        self.sh.disconnect()
    }

    fn post_send(&self, local: &[Sge<'_>], cookie: Cookie, flags: DtoFlags) -> Result<()> {
        let cookie = cookie.0;
        let (total, segs) = self.checked(local, Access::empty())?;
        let mut h = Header::new(Op::Send);
        h.len = total as u32;
        if flags.contains(DtoFlags::SOLICITED) {
            h.flags |= F_SOLICITED;
        }
        let inf = Self::inflight(cookie, DtoOp::Send, flags, total, Segs::new());
        self.sh.post_request(h, segs, inf, flags)
    }

    fn post_recv(&self, local: &[Sge<'_>], cookie: Cookie, _flags: DtoFlags) -> Result<()> {
        let cookie = cookie.0;
        let (total, segs) = self.checked(local, Access::LOCAL_WRITE)?;
        match self.sh.state() {
            EpState::Disconnected | EpState::Broken => return Err(Error::NotConnected),
            _ => {}
        }
        let mut q = self.sh.recvs.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= self.sh.ia.cfg.max_recvs {
            return Err(Error::QueueFull);
        }
        q.push_back(RecvWr { cookie, segs, total });
        drop(q);
        self.sh.resume();
        Ok(())
    }

    fn post_rdma_write(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        let (total, segs) = self.checked(local, Access::empty())?;
        let mut h = Self::remote_hdr(Op::Write, remote, remote_offset, total)?;
        h.len = total as u32;
        let inf = Self::inflight(cookie, DtoOp::RdmaWrite, flags, total, Segs::new());
        self.sh.post_request(h, segs, inf, flags)
    }

    fn post_rdma_read(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        let (total, segs) = self.checked(local, Access::LOCAL_WRITE)?;
        let mut h = Self::remote_hdr(Op::ReadReq, remote, remote_offset, total)?;
        h.arg0 = total;
        let inf = Self::inflight(cookie, DtoOp::RdmaRead, flags, total, segs);
        self.sh.post_request(h, Segs::new(), inf, flags)
    }

    fn post_rdma_write_imm(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        imm: u32,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        let (total, segs) = self.checked(local, Access::empty())?;
        let mut h = Self::remote_hdr(Op::WriteImm, remote, remote_offset, total)?;
        h.len = total as u32;
        h.arg0 = u64::from(imm);
        let inf = Self::inflight(cookie, DtoOp::RdmaWrite, flags, total, Segs::new());
        self.sh.post_request(h, segs, inf, flags)
    }

    fn post_fetch_add(
        &self,
        result: Sge<'_>,
        remote: RemoteAddr<'_>,
        add: u64,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        self.atomic(Op::FetchAdd, result, remote, remote_offset, (add, 0), cookie, flags)
    }

    fn post_cmp_swap(
        &self,
        result: Sge<'_>,
        remote: RemoteAddr<'_>,
        op: CompareSwap,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        let CompareSwap { compare, swap } = op;
        self.atomic(Op::CmpSwap, result, remote, remote_offset, (compare, swap), cookie, flags)
    }

    fn peer_address(&self) -> Option<String> {
        self.sh.peer.get().map(|p| p.ip().to_string())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
