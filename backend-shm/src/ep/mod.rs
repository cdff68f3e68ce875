//! [`ShmEp`], an endpoint of the shm backend, in files by concern:
//! `shared` (the state every thread works on), `post` (the send side),
//! `rx` (the receive side), `conn` (set-up, teardown, the driver).

mod conn;
mod post;
mod rx;
mod shared;

pub(crate) use conn::{Kind, MAX_PRIVATE, Msg, recv_msg, send_msg, socket_name};
pub(crate) use shared::EpShared;

use crate::domain::IaShared;
use post::Req;
use rmr_api::{Access, CompareSwap, Cookie, DtoFlags, DtoOp, Ep, EpAttr, EpEvds, EpId, EpState};
use rmr_api::{Error, RemoteAddr, Result, Sge};
use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An endpoint of the shm backend: one connection to a process on this
/// node, over a pair of shared rings.
pub struct ShmEp {
    pub(crate) sh: Arc<EpShared>,
}

impl ShmEp {
    pub(crate) fn create(ia: Arc<IaShared>, pz_id: u64, evds: EpEvds) -> Arc<dyn Ep> {
        Arc::new(ShmEp { sh: Arc::new(EpShared::new(ia, pz_id, evds)) })
    }

    /// How RDMA writes and reads move on this connection: `"cma"`
    /// (cross-memory attach), `"ring: <why>"` (copied through the rings),
    /// or `None` before it is connected.
    pub fn mode(&self) -> Option<String> {
        self.sh.link.get().map(|l| match &l.cma {
            Ok(()) => "cma".to_string(),
            Err(why) => format!("ring: {why}"),
        })
    }

    fn req<'a>(
        &self,
        op: DtoOp,
        local: &'a [Sge<'a>],
        remote: Option<RemoteAddr<'a>>,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Req<'a> {
        Req { op, local, remote, cookie, flags, imm: None, args: (0, 0) }
    }
}

impl Ep for ShmEp {
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
            notes: self
                .mode()
                .map(|m| ("rdma".to_string(), m))
                .into_iter()
                .chain(self.sh.link.get().map(|_| {
                    // The peer's shared regions this side copies into directly.
                    ("shared_files_mapped".to_string(), self.sh.tx().files.note())
                }))
                .collect(),
        }
    }

    fn state(&self) -> EpState {
        self.sh.state()
    }

    fn connect(
        &self,
        remote: &str,
        service: u16,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        self.sh.connect(remote, service, private_data, timeout)
    }

    fn disconnect(&self) -> Result<()> {
        self.sh.disconnect()
    }

    fn post_send(&self, local: &[Sge<'_>], cookie: Cookie, flags: DtoFlags) -> Result<()> {
        self.sh.post(self.req(DtoOp::Send, local, None, cookie, flags))
    }

    fn post_recv(&self, local: &[Sge<'_>], cookie: Cookie, _flags: DtoFlags) -> Result<()> {
        let sh = &self.sh;
        if matches!(sh.state(), EpState::Disconnected | EpState::Broken) {
            return Err(Error::NotConnected);
        }
        let (cap, places) =
            shared::checked_places(local, sh.pz_id, Access::LOCAL_WRITE, sh.ia.attr.max_sges)?;
        let mut rx = sh.rx();
        if matches!(sh.state(), EpState::Disconnected | EpState::Broken) {
            // Ended since the first look: the teardown's flush is done.
            return Err(Error::NotConnected);
        }
        if rx.recvs.len() >= sh.ia.cfg.max_recvs {
            return Err(Error::QueueFull);
        }
        rx.recvs.push_back(shared::Recv { cookie, segs: shared::segs_from(&places), cap });
        if rx.rnr_since.is_some() {
            // A message waits for this receive.
            if let Some(link) = sh.link.get() {
                sh.take_in(&mut rx, link);
            }
        }
        Ok(())
    }

    fn post_rdma_write(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        self.sh.post(self.req(DtoOp::RdmaWrite, local, Some(remote), cookie, flags))
    }

    fn post_rdma_read(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        self.sh.post(self.req(DtoOp::RdmaRead, local, Some(remote), cookie, flags))
    }

    fn post_rdma_write_imm(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        imm: u32,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let mut r = self.req(DtoOp::RdmaWrite, local, Some(remote), cookie, flags);
        r.imm = Some(imm);
        self.sh.post(r)
    }

    fn post_fetch_add(
        &self,
        result: Sge<'_>,
        remote: RemoteAddr<'_>,
        add: u64,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let local = [result];
        let mut r = self.req(DtoOp::FetchAdd, &local, Some(remote), cookie, flags);
        r.args = (add, 0);
        self.sh.post(r)
    }

    fn post_cmp_swap(
        &self,
        result: Sge<'_>,
        remote: RemoteAddr<'_>,
        op: CompareSwap,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let local = [result];
        let mut r = self.req(DtoOp::CmpSwap, &local, Some(remote), cookie, flags);
        r.args = (op.compare, op.swap);
        self.sh.post(r)
    }

    /// Waits (driving the connection) until everything posted is answered
    /// or `timeout` passes, then disconnects.
    fn close(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while self.sh.state() == EpState::Connected && Instant::now() < deadline {
            let idle = {
                let tx = self.sh.tx();
                tx.outstanding.is_empty() && tx.pending.is_empty()
            };
            if idle {
                break;
            }
            if !self.sh.drive_self() {
                std::thread::yield_now();
            }
        }
        match self.sh.disconnect() {
            Ok(()) | Err(Error::NotConnected) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn peer_address(&self) -> Option<String> {
        self.sh.link.get().map(|l| l.peer_name.clone())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for ShmEp {
    fn drop(&mut self) {
        if self.sh.state() == EpState::Connected {
            let _ = self.sh.disconnect();
        }
    }
}
