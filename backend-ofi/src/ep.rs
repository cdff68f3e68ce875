//! The endpoint: connection set-up over the IA's EQ (`fi_connect`,
//! `fi_accept`), orderly and broken teardown, and the [`rmr_api::Ep`] trait.
//! The post and completion paths are in [`crate::dto`].
//!
//! Orderly or broken: libfabric reports both an orderly `fi_shutdown` by the
//! peer and a dead peer as FI_SHUTDOWN. To tell them apart, each side
//! registers its *control words* and passes their key in the connection's
//! private data; an orderly [`rmr_api::Ep::disconnect`] first RDMA-writes a
//! goodbye mark into the peer's first word (and waits for it to complete),
//! then shuts down. A shutdown without the mark is a broken connection.
//! The other words hold a fault record (see [`crate::fault`]) and the
//! number of the peer's riding writes placed (see [`crate::order`]).

use crate::dto::TxState;
use crate::evd::{CqDriver, EvdShared};
use crate::ffi::{Cq, EpH, Info, Mr};
use crate::ia::{CM_HDR, IaShared};
use crate::pz::PzShared;
use crate::recv::RxState;
use ofi_sys as sys;
use rmr_api::{CompareSwap, Cookie, RemoteAddr};
use rmr_api::{DtoFlags, Ep, EpAttr, EpEvds, EpId, EpState, Error, Event, MemRegion, Result, Sge};
use smallvec::SmallVec;
use std::any::Any;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock, Weak};
use std::time::{Duration, Instant};

/// The goodbye mark an orderly disconnect writes into the peer's control word.
pub(crate) const BYE: u64 = 0x5259_4d52_2045_5942;

/// rmr's own header in every CM private data exchange.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CmHdr {
    pub(crate) magic: [u8; 4],
    /// Key of the sender's control word.
    pub(crate) key: u64,
    /// Address of the sender's control word, as an RMA target address.
    pub(crate) addr: u64,
}

impl CmHdr {
    pub(crate) const CONNECT: [u8; 4] = *b"RMO3";
    pub(crate) const REJECT: [u8; 4] = *b"RMOR";

    pub(crate) fn reject() -> CmHdr {
        CmHdr { magic: Self::REJECT, key: 0, addr: 0 }
    }

    pub(crate) fn encode(&self) -> [u8; CM_HDR] {
        let mut b = [0u8; CM_HDR];
        b[0..4].copy_from_slice(&self.magic);
        b[8..16].copy_from_slice(&self.key.to_le_bytes());
        b[16..24].copy_from_slice(&self.addr.to_le_bytes());
        b
    }

    pub(crate) fn parse(b: &[u8], magic: [u8; 4]) -> Option<CmHdr> {
        if b.len() < CM_HDR || b[0..4] != magic {
            return None;
        }
        let u = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        Some(CmHdr { magic, key: u(8), addr: u(16) })
    }
}

fn state_from(v: u8) -> EpState {
    match v {
        0 => EpState::Unconnected,
        1 => EpState::Pending,
        2 => EpState::Connected,
        3 => EpState::Disconnected,
        _ => EpState::Broken,
    }
}

fn state_to(s: EpState) -> u8 {
    match s {
        EpState::Unconnected => 0,
        EpState::Pending => 1,
        EpState::Connected => 2,
        EpState::Disconnected => 3,
        EpState::Broken => 4,
    }
}

/// Connection set-up progress, shared with the EQ thread.
#[derive(Default)]
pub(crate) struct ConnState {
    /// Set when set-up ended: the peer's private data, or why it failed.
    result: Option<Result<Vec<u8>>>,
    /// The private data to report in Established (the connector's, at the passive side).
    peer_pd: Vec<u8>,
    /// The peer's control word.
    pub(crate) peer_ctl: Option<(u64, u64)>,
    /// True on the connecting side.
    active: bool,
    /// The goodbye write completed.
    pub(crate) bye_done: bool,
    /// A fault record to send the peer before the connection ends (see
    /// [`crate::fault`]), and whether its write completed.
    pub(crate) fault: Option<[u64; 3]>,
    pub(crate) fault_done: bool,
    /// Reads of the peer's placed number posted and completed (see
    /// [`crate::order`]).
    pub(crate) probes_posted: u64,
    pub(crate) probes: u64,
}

pub(crate) struct EpShared {
    /// This endpoint (what the CQs it is attached to hold).
    pub(crate) me: Weak<EpShared>,
    pub(crate) id: EpId,
    /// The index its transmit and receive completion tokens carry (see
    /// [`crate::evd::CqDriver::attach`]).
    pub(crate) tx_idx: AtomicU32,
    pub(crate) rx_idx: AtomicU32,
    /// The CQs its latest opening is bound to (transmit, receive).
    bound: Mutex<Option<[Arc<CqDriver>; 2]>>,
    /// Receive bounce buffers for reuse (see `take_bounce`).
    pub(crate) bounces: Mutex<Vec<Vec<u8>>>,
    pub(crate) ia: Arc<IaShared>,
    pub(crate) pz: Arc<PzShared>,
    /// Keeps the user's EVD handles (and so their progress threads) alive.
    #[allow(dead_code)]
    pub(crate) evds: EpEvds,
    pub(crate) req: Arc<EvdShared>,
    pub(crate) rcv: Arc<EvdShared>,
    pub(crate) conn_evd: Arc<EvdShared>,
    state: AtomicU8,
    ended: AtomicBool,
    pub(crate) fid: RwLock<Option<Arc<EpH>>>,
    fid_addr: Mutex<usize>,
    pub(crate) tx: Mutex<TxState>,
    pub(crate) rx: Mutex<RxState>,
    pub(crate) conn: Mutex<ConnState>,
    pub(crate) conn_cv: Condvar,
    /// The registration of `ctl`: declared first, so dropped first (a
    /// field's drop follows its declaration), before the memory it covers.
    pub(crate) ctl_mr: Mr,
    /// [0..8): the word peers write BYE into; [8..16): our BYE source;
    /// then the fault record peers write and our own's source (see
    /// [`crate::fault`]).
    pub(crate) ctl: Arc<MemRegion>,
    ctl_key: u64,
    peer: OnceLock<SocketAddr>,
    pub(crate) atomics_ok: AtomicBool,
    /// A message failed or a write that rode in one was refused: nothing
    /// more arriving is applied (see [`crate::eager`]).
    pub(crate) refused: AtomicBool,
    /// The peer's riding writes placed (see [`crate::order`]), and the
    /// number last acknowledged.
    pub(crate) placed: AtomicU64,
    pub(crate) acked: AtomicU64,
    /// Held by a thread reading the peer's placed number (one read at a
    /// time lands in the control word, see [`crate::order`]).
    pub(crate) probing: Mutex<()>,
}

impl EpShared {
    pub(crate) fn new(
        ia: &Arc<IaShared>,
        pz: &Arc<PzShared>,
        evds: EpEvds,
        req: Arc<EvdShared>,
        rcv: Arc<EvdShared>,
    ) -> Result<Arc<EpShared>> {
        let conn_evd = crate::ia::ofi_evd(&evds.conn, ia)?;
        let ctl = MemRegion::new(crate::fault::CTL_LEN);
        ctl.store_u64(8, BYE)?;
        // The peer writes its marks and reads the placed number.
        let access =
            crate::lmr::fi_access(rmr_api::Access::REMOTE_WRITE | rmr_api::Access::REMOTE_READ);
        let (ctl_mr, ctl_key) =
            crate::lmr::reg_raw(pz, ctl.as_ptr(), crate::fault::CTL_LEN, access)?;
        let sh = Arc::new_cyclic(|me| EpShared {
            me: me.clone(),
            id: EpId::fresh(),
            tx_idx: AtomicU32::new(0),
            rx_idx: AtomicU32::new(0),
            bound: Mutex::new(None),
            bounces: Mutex::new(Vec::new()),
            ia: ia.clone(),
            pz: pz.clone(),
            evds,
            req,
            rcv,
            conn_evd,
            state: AtomicU8::new(0),
            ended: AtomicBool::new(false),
            fid: RwLock::new(None),
            fid_addr: Mutex::new(0),
            tx: Mutex::new(TxState::default()),
            rx: Mutex::new(RxState::default()),
            conn: Mutex::new(ConnState::default()),
            conn_cv: Condvar::new(),
            ctl,
            ctl_mr,
            ctl_key,
            peer: OnceLock::new(),
            atomics_ok: AtomicBool::new(false),
            refused: AtomicBool::new(false),
            placed: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            probing: Mutex::new(()),
        });
        Ok(sh)
    }

    pub(crate) fn state(&self) -> EpState {
        state_from(self.state.load(Ordering::Acquire))
    }

    fn set_state(&self, s: EpState) {
        self.state.store(state_to(s), Ordering::Release);
    }

    fn cas_state(&self, from: EpState, to: EpState) -> bool {
        self.state
            .compare_exchange(state_to(from), state_to(to), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    pub(crate) fn lock_conn(&self) -> std::sync::MutexGuard<'_, ConnState> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The error a post on a non-connected endpoint gets.
    pub(crate) fn not_connected(&self) -> Error {
        match self.state() {
            EpState::Broken => Error::Broken("endpoint is broken".into()),
            _ => Error::NotConnected,
        }
    }

    pub(crate) fn my_hdr(&self) -> CmHdr {
        let addr = if self.ia.feat.virt_addr { self.ctl.addr() } else { 0 };
        CmHdr { magic: CmHdr::CONNECT, key: self.ctl_key, addr }
    }

    /// The CQs to bind (transmit and receive), this endpoint attached to
    /// each so that their completions find it by index.
    fn cqs(&self) -> Result<Vec<(Arc<Cq>, u64)>> {
        let txf = (sys::FI_TRANSMIT as u64) | sys::FI_SELECTIVE_COMPLETION;
        // An endpoint opened again (a connect after a failed one): the
        // slots of its last opening route nothing from now on, so a late
        // completion of that opening (a receive cancelled when it closed)
        // cannot retire a receive posted again under the same sequence.
        // (Freed first: they do not count against a CQ's room.)
        let mut bound = self.bound.lock().unwrap_or_else(|e| e.into_inner());
        for d in bound.iter().flatten() {
            d.detach(&self.me);
        }
        let rq = self.req.cq_for(&self.pz.domain)?;
        // One EVD for both: one CQ for both (its order is theirs).
        let rc = if Arc::ptr_eq(&self.req, &self.rcv) {
            rq.clone()
        } else {
            self.rcv.cq_for(&self.pz.domain)?
        };
        rq.detach(&self.me);
        rc.detach(&self.me);
        self.tx_idx.store(rq.attach(self.me.clone())?, Ordering::Relaxed);
        self.rx_idx.store(rc.attach(self.me.clone())?, Ordering::Relaxed);
        *bound = Some([rq.clone(), rc.clone()]);
        drop(bound);
        self.req.start_pump();
        self.rcv.start_pump();
        if Arc::ptr_eq(&rq, &rc) {
            Ok(vec![(rq.cq().clone(), txf | sys::FI_RECV as u64)])
        } else {
            Ok(vec![(rq.cq().clone(), txf), (rc.cq().clone(), sys::FI_RECV as u64)])
        }
    }

    /// Opens and enables the libfabric endpoint, registers it for EQ
    /// dispatch and posts the receives queued so far.
    fn open_fid(&self, info: Info) -> Result<Arc<EpH>> {
        let ep = Arc::new(EpH::open(&self.pz.domain, info, &self.ia.eq, &self.cqs()?)?);
        let addr = ep.raw() as usize;
        let me = self.me.clone();
        self.ia.eps.lock().unwrap_or_else(|e| e.into_inner()).insert(addr, me);
        *self.fid_addr.lock().unwrap_or_else(|e| e.into_inner()) = addr;
        self.atomics_ok.store(self.ia.feat.atomics && ep.atomics_valid(), Ordering::Release);
        *self.fid.write().unwrap_or_else(|e| e.into_inner()) = Some(ep.clone());
        self.post_pending_recvs()?;
        Ok(ep)
    }

    /// Closes the libfabric endpoint; queued receives go back to pending.
    fn close_fid(&self) {
        let ep = self.fid.write().unwrap_or_else(|e| e.into_inner()).take();
        // Our descriptor of its socket goes first (what it held, with it);
        // `find_cork` stores one only while this endpoint is open.
        drop(self.tx.lock().unwrap_or_else(|e| e.into_inner()).cork.take());
        let addr = std::mem::take(&mut *self.fid_addr.lock().unwrap_or_else(|e| e.into_inner()));
        self.ia.eps.lock().unwrap_or_else(|e| e.into_inner()).remove(&addr);
        if let Some(ep) = ep {
            // sockets: fi_shutdown and its CM thread both close the CM socket
            // (a double close that can hit a reused descriptor); fi_close
            // alone joins that thread first, and the peer still sees FI_SHUTDOWN.
            if self.ia.feat.prov != "sockets" {
                ep.shutdown();
            }
            drop(ep);
        }
        self.unpost_recvs();
    }

    /// Waits for set-up to end (the EQ thread fills `conn.result`).
    fn wait_setup(&self, timeout: Duration) -> Option<Result<Vec<u8>>> {
        let deadline = Instant::now() + timeout;
        let mut c = self.lock_conn();
        loop {
            if let Some(r) = c.result.take() {
                return Some(r);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            c = self.conn_cv.wait_timeout(c, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    fn finish_setup(&self, r: Result<Vec<u8>>) {
        self.lock_conn().result = Some(r);
        self.conn_cv.notify_all();
    }

    fn connect(&self, remote: &str, service: u16, pd: &[u8], timeout: Duration) -> Result<Vec<u8>> {
        if pd.len() > self.ia.attr.max_private_data {
            return Err(Error::invalid(format!(
                "private data over {} bytes",
                self.ia.attr.max_private_data
            )));
        }
        let mut cm = self.my_hdr().encode().to_vec();
        cm.extend_from_slice(pd);
        self.connect_cm(remote, service, &cm, timeout)
    }

    /// Connects with `cm` as the whole CM private data (rmr's header
    /// included): [`OfiEp::connect`] after the header is built, and
    /// [`hostile::connect_with_cm_data`]'s way to send any bytes.
    pub(crate) fn connect_cm(
        &self,
        remote: &str,
        service: u16,
        cm: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        if !self.cas_state(EpState::Unconnected, EpState::Pending) {
            return Err(Error::invalid("endpoint is not in the unconnected state"));
        }
        {
            let mut c = self.lock_conn();
            *c = ConnState { active: true, ..ConnState::default() };
        }
        let _span =
            tracing::debug_span!(target: "rmr::ofi", "connect", ep = self.id.0, remote, service)
                .entered();
        let res = (|| {
            let info = Info::get(&self.ia.hints, Some(remote), Some(&service.to_string()), false)?;
            let ep = self.open_fid(info)?;
            ep.connect(cm)?;
            match self.wait_setup(timeout) {
                Some(r) => r,
                None => Err(Error::Timeout),
            }
        })();
        match res {
            Ok(peer_pd) => {
                tracing::debug!(target: "rmr::ofi", "connected");
                Ok(peer_pd)
            }
            Err(e) => {
                tracing::debug!(target: "rmr::ofi", error = %e, "connect failed");
                self.close_fid();
                self.set_state(EpState::Unconnected);
                if let Error::Rejected { private_data } = &e {
                    self.conn_evd
                        .push(Event::Rejected { ep: self.id, private_data: private_data.clone() });
                }
                Err(e)
            }
        }
    }

    pub(crate) fn accept(&self, info: Info, hdr: CmHdr, peer_pd: Vec<u8>, pd: &[u8]) -> Result<()> {
        if !self.cas_state(EpState::Unconnected, EpState::Pending) {
            return Err(Error::invalid("EP is not unconnected"));
        }
        {
            let mut c = self.lock_conn();
            *c = ConnState { peer_pd, peer_ctl: Some((hdr.key, hdr.addr)), ..ConnState::default() };
        }
        if let Some(a) = info.dest_addr() {
            let _ = self.peer.set(a);
        }
        let _span = tracing::debug_span!(target: "rmr::ofi", "accept", ep = self.id.0, peer = ?self.peer.get())
            .entered();
        let res = (|| {
            let ep = self.open_fid(info)?;
            let mut b = self.my_hdr().encode().to_vec();
            b.extend_from_slice(pd);
            ep.accept(&b)?;
            match self.wait_setup(Duration::from_secs(15)) {
                Some(r) => r.map(|_| ()),
                None => Err(Error::Broken("connector never completed the connection".into())),
            }
        })();
        match &res {
            Ok(()) => tracing::debug!(target: "rmr::ofi", "accepted"),
            Err(e) => {
                tracing::debug!(target: "rmr::ofi", error = %e, "accept failed");
                self.close_fid();
                self.set_state(EpState::Unconnected);
            }
        }
        res
    }

    /// FI_CONNECTED from the EQ thread.
    pub(crate) fn on_connected(&self, data: Vec<u8>) {
        if self.state() != EpState::Pending {
            return;
        }
        let mut c = self.lock_conn();
        let pd = if c.active {
            match CmHdr::parse(&data, CmHdr::CONNECT) {
                Some(h) => {
                    c.peer_ctl = Some((h.key, h.addr));
                    data[CM_HDR..].to_vec()
                }
                None => {
                    drop(c);
                    self.finish_setup(Err(Error::Protocol(
                        "peer accepted without the rmr header (not an rmr peer?)".into(),
                    )));
                    return;
                }
            }
        } else {
            c.peer_pd.clone()
        };
        drop(c);
        if self.peer.get().is_none() {
            let p =
                self.fid.read().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(|e| e.peer());
            if let Some(p) = p {
                let _ = self.peer.set(p);
            }
        }
        self.find_cork();
        // The connection's socket joins the CQs' poll sets at their next
        // progress pass: sleepers there look again (see `crate::waitset`).
        self.req.wake_sleepers();
        self.rcv.wake_sleepers();
        self.set_state(EpState::Connected);
        self.conn_evd.push(Event::Established { ep: self.id, private_data: pd.clone() });
        self.finish_setup(Ok(pd));
    }

    /// Finds the connection's socket for corking small writes (the `tcp`
    /// provider; see [`crate::cork`]).
    fn find_cork(&self) {
        if self.ia.feat.cork_max == 0 {
            return;
        }
        let Some(ep) = self.fid.read().unwrap_or_else(|e| e.into_inner()).clone() else { return };
        let (Some(local), Some(peer)) = (ep.name(), ep.peer()) else { return };
        let Some(drivers) = self.bound_cqs() else { return };
        let cork = crate::cork::Cork::find(local, peer, drivers, self.ia.feat.cork_max);
        // Stored only if the endpoint it was found for is still open (a
        // `close_fid` meanwhile takes the fid before the cork).
        let open = self.fid.read().unwrap_or_else(|e| e.into_inner());
        if open.as_ref().is_some_and(|e| Arc::ptr_eq(e, &ep)) {
            self.tx.lock().unwrap_or_else(|e| e.into_inner()).cork = cork;
        }
    }

    /// The CQs the endpoint's latest opening is bound to (transmit, receive).
    pub(crate) fn bound_cqs(&self) -> Option<SmallVec<[Arc<CqDriver>; 2]>> {
        let b = self.bound.lock().unwrap_or_else(|e| e.into_inner());
        b.as_ref().map(|b| b.iter().cloned().collect())
    }

    /// The `ofi.cq_wait` note: what a waiter sleeps on at the endpoint's
    /// receive CQ (see `CqDriver::sleep_note`).
    pub(crate) fn cq_wait_note(&self) -> String {
        match self.bound_cqs() {
            Some(b) => b[1].sleep_note(),
            None => self.rcv.sleep_note(&self.pz.domain),
        }
    }

    /// The `ofi.progress` note: the passes of the progress thread of the
    /// endpoint's receive CQ (`off` where it has none, or before the
    /// endpoint is bound to its CQs).
    pub(crate) fn progress_note(&self) -> String {
        self.bound_cqs().map_or_else(|| "off".into(), |b| b[1].progress_note())
    }

    /// The `ofi.cork` note: what corking did on this connection, or
    /// `off` (another provider, `cork_max=0`, no progress threads, its
    /// socket not found, or the connection closed).
    pub(crate) fn cork_note(&self) -> String {
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        tx.cork.as_ref().map_or_else(|| "off".to_string(), |c| c.note())
    }

    /// An EQ error entry for this endpoint.
    pub(crate) fn on_cm_error(&self, err: i32, data: Vec<u8>) {
        let err = err.abs();
        match self.state() {
            EpState::Pending => {
                let e = if let Some(_h) = CmHdr::parse(&data, CmHdr::REJECT) {
                    Error::Rejected { private_data: data[CM_HDR..].to_vec() }
                } else if err == sys::FI_ECONNREFUSED as i32 {
                    Error::io(
                        "connect",
                        std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
                    )
                } else if err == sys::FI_ETIMEDOUT as i32 {
                    Error::Timeout
                } else {
                    Error::Backend { call: "fi_connect".into(), msg: crate::ffi::strerror(err) }
                };
                self.finish_setup(Err(e));
            }
            EpState::Connected => {
                self.teardown(Some(format!("connection error: {}", crate::ffi::strerror(err))))
            }
            _ => {}
        }
    }

    /// FI_SHUTDOWN from the EQ thread: orderly if the peer left its mark.
    pub(crate) fn on_shutdown(&self) {
        match self.state() {
            EpState::Pending => {
                self.finish_setup(Err(Error::Broken("connection shut down during set-up".into())))
            }
            EpState::Connected => {
                if self.ctl.load_u64(0).ok() == Some(BYE) {
                    self.teardown(None)
                } else {
                    self.teardown(Some("connection lost (peer gone)".into()))
                }
            }
            _ => {}
        }
    }

    /// Ends the connection: closes the libfabric endpoint, reports what is
    /// still in the CQs, flushes the rest, then posts Disconnected (`why ==
    /// None`) or Broken on the connection EVD.
    pub(crate) fn teardown(&self, why: Option<String>) {
        if self.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        // A refusal the peer made is reported here; one this side made is
        // told to the peer, once nothing more is posted (see
        // `crate::fault`).
        let why = match self.peer_fault() {
            Some(reason) => Some(reason),
            None => why,
        };
        self.set_state(if why.is_some() { EpState::Broken } else { EpState::Disconnected });
        self.send_fault();
        self.close_fid();
        self.req.drain_soon();
        if !Arc::ptr_eq(&self.req, &self.rcv) {
            self.rcv.drain_soon();
        }
        self.flush();
        self.conn_evd.push(match why {
            None => Event::Disconnected { ep: self.id },
            Some(reason) => Event::Broken { ep: self.id, reason },
        });
        self.finish_setup(Err(Error::Broken("endpoint ended".into())));
    }

    fn disconnect(&self) -> Result<()> {
        if !self.cas_state(EpState::Connected, EpState::Disconnected) {
            return Err(Error::NotConnected);
        }
        let peer_ctl = self.lock_conn().peer_ctl;
        if let Some((key, addr)) = peer_ctl {
            if self.post_bye(key, addr).is_ok() {
                let deadline = Instant::now() + Duration::from_secs(2);
                while !self.lock_conn().bye_done && Instant::now() < deadline {
                    if !self.req.progress(Duration::from_millis(5)) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            }
        }
        self.teardown(None);
        Ok(())
    }
}

/// An endpoint of the libfabric backend. Dropping the last handle disconnects.
pub struct OfiEp {
    pub(crate) sh: Arc<EpShared>,
}

impl Drop for OfiEp {
    fn drop(&mut self) {
        if self.sh.disconnect().is_err() && !self.sh.ended.load(Ordering::Acquire) {
            self.sh.close_fid();
        }
    }
}

impl Ep for OfiEp {
    fn id(&self) -> EpId {
        self.sh.id
    }

    fn attr(&self) -> EpAttr {
        let (a, f) = (&self.sh.ia.attr, &self.sh.ia.feat);
        EpAttr {
            max_msg_size: a.max_msg_size,
            max_dtos: f.tx_size,
            max_recvs: f.rx_size,
            max_sges: a.max_sges,
            notes: vec![
                ("ofi.provider".into(), f.prov.clone()),
                ("ofi.mr_local".into(), f.mr_local.to_string()),
                ("ofi.virt_addr".into(), f.virt_addr.to_string()),
                ("ofi.prov_key".into(), f.prov_key.to_string()),
                ("ofi.msg_order".into(), format!("{:#x}", f.msg_order)),
                ("ofi.cork".into(), self.sh.cork_note()),
                ("ofi.cq_wait".into(), self.sh.cq_wait_note()),
                ("ofi.progress".into(), self.sh.progress_note()),
            ],
        }
    }

    fn state(&self) -> EpState {
        self.sh.state()
    }

    fn connect(&self, remote: &str, service: u16, pd: &[u8], timeout: Duration) -> Result<Vec<u8>> {
        self.sh.connect(remote, service, pd, timeout)
    }

    fn disconnect(&self) -> Result<()> {
        self.sh.disconnect()
    }

    fn post_send(&self, local: &[Sge<'_>], cookie: Cookie, flags: DtoFlags) -> Result<()> {
        let cookie = cookie.0;
        self.sh.post_send(local, cookie, flags)
    }

    fn post_recv(&self, local: &[Sge<'_>], cookie: Cookie, flags: DtoFlags) -> Result<()> {
        let cookie = cookie.0;
        self.sh.post_recv(local, cookie, flags)
    }

    fn post_rdma_write(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        self.sh.post_rma(false, local, remote, remote_offset, None, cookie, flags)
    }

    fn post_rdma_read(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        self.sh.post_rma(true, local, remote, remote_offset, None, cookie, flags)
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
        if self.sh.ia.feat.cq_data < 8 {
            return Err(Error::Unsupported(
                "rdma write with immediate (provider cq_data_size < 8)",
            ));
        }
        self.sh.post_rma(false, local, remote, remote_offset, Some(imm), cookie, flags)
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
        self.sh.post_atomic(result, remote, remote_offset, add, None, cookie, flags)
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
        self.sh.post_atomic(result, remote, remote_offset, swap, Some(compare), cookie, flags)
    }

    fn peer_address(&self) -> Option<String> {
        self.sh.peer.get().map(|p| p.ip().to_string())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cm_header_round_trip_and_rejects_foreign_data() {
        let h = CmHdr { magic: CmHdr::CONNECT, key: 0xdead_beef_0000_0001, addr: 0x7f00_1234 };
        let mut b = h.encode().to_vec();
        b.extend_from_slice(b"user");
        let p = CmHdr::parse(&b, CmHdr::CONNECT).expect("parses");
        assert_eq!((p.key, p.addr), (h.key, h.addr));
        assert_eq!(&b[CM_HDR..], b"user");
        assert!(CmHdr::parse(&b, CmHdr::REJECT).is_none(), "a connect header is not a reject");
        assert!(CmHdr::parse(&b[..CM_HDR - 1], CmHdr::CONNECT).is_none(), "short data");
        assert!(CmHdr::parse(b"go away, not an rmr peer!", CmHdr::REJECT).is_none());
        assert!(CmHdr::parse(&CmHdr::reject().encode(), CmHdr::REJECT).is_some());
    }

    #[test]
    fn states_round_trip() {
        for s in [
            EpState::Unconnected,
            EpState::Pending,
            EpState::Connected,
            EpState::Disconnected,
            EpState::Broken,
        ] {
            assert_eq!(state_from(state_to(s)), s);
        }
    }
}
