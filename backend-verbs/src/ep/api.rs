//! The user's face of a verbs endpoint: [`VerbsEp`], its creation and the
//! `Ep` calls, over the [`EpCore`] that owns the QP and its queues.

use super::*;

/// A reliable connected endpoint of the verbs backend (an RC QP).
pub struct VerbsEp {
    pub(crate) core: Arc<EpCore>,
}

impl VerbsEp {
    pub(crate) fn create(
        ia: Arc<IaCore>,
        pz: Arc<PzCore>,
        req: Arc<VerbsEvd>,
        recv: Arc<VerbsEvd>,
        conn_evd: Arc<VerbsEvd>,
    ) -> Result<VerbsEp> {
        let ctrl_mem = MemRegion::new(16);
        let ctrl_mr = Mr::register(
            &pz.pd,
            &ctrl_mem,
            0,
            16,
            wr::mr_access(Access::LOCAL_WRITE | Access::REMOTE_WRITE),
        )?;
        let sq_depth = ia.attr.max_dtos as u32 + 1;
        let rq_depth = ia.cfg.rq_depth.min(ia.limits.max_qp_wr.max(1) as u32);
        let period = ia.cfg.signal_period(sq_depth);
        let max_sges = ia.attr.max_sges;
        let core = Arc::new_cyclic(|me| EpCore {
            id: EpId::fresh(),
            ia,
            pz,
            req,
            recv,
            conn_evd,
            state: AtomicU8::new(state_to(EpState::Unconnected)),
            connecting: AtomicBool::new(false),
            goodbye_acked: AtomicBool::new(false),
            conn: Mutex::new(Conn {
                cm: None,
                qp_state: QpState::Reset,
                qp_num: None,
                peer: None,
                peer_ctrl: Ctrl::default(),
                pending_pd: Vec::new(),
                we_closed: false,
                end_reported: false,
                reserved: false,
            }),
            mail: Mutex::new(VecDeque::new()),
            mail_cv: Condvar::new(),
            tx: Mutex::new(Tx { t: SendTracker::new(sq_depth, period), qp: None, max_inline: 0 }),
            rx: Mutex::new(Rx { t: RecvTracker::new(rq_depth), qp: None, early: Vec::new() }),
            ctrl_mem,
            ctrl_mr,
            sq_depth,
            rq_depth,
            max_sges,
            me: me.clone(),
        });
        Ok(VerbsEp { core })
    }
}

impl Drop for VerbsEp {
    fn drop(&mut self) {
        let e = &self.core;
        if e.state() == EpState::Connected {
            let _ = e.disconnect();
        }
        let mut c = e.conn();
        let id = c.cm.take();
        e.detach(&mut c, id);
    }
}

impl Ep for VerbsEp {
    fn id(&self) -> EpId {
        self.core.id
    }

    fn attr(&self) -> EpAttr {
        let e = &self.core;
        EpAttr {
            max_msg_size: e.ia.attr.max_msg_size,
            max_dtos: e.sq_depth as usize - 1,
            max_recvs: e.rq_depth as usize,
            max_sges: e.max_sges,
            notes: vec![
                ("device".into(), e.ia.limits.name.clone()),
                ("port".into(), e.ia.port.to_string()),
                (
                    "max_inline".into(),
                    e.tx.lock().unwrap_or_else(|x| x.into_inner()).max_inline.to_string(),
                ),
            ],
        }
    }

    fn state(&self) -> EpState {
        self.core.state()
    }

    fn connect(
        &self,
        remote: &str,
        service: u16,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        self.core.connect(remote, service, private_data, timeout)
    }

    fn disconnect(&self) -> Result<()> {
        self.core.disconnect()
    }

    fn post_send(&self, local: &[Sge<'_>], cookie: Cookie, flags: DtoFlags) -> Result<()> {
        let cookie = cookie.0;
        self.core.post_sq(WrKind::Send, local, None, cookie, flags, Extra::None)
    }

    fn post_recv(&self, local: &[Sge<'_>], cookie: Cookie, _flags: DtoFlags) -> Result<()> {
        let cookie = cookie.0;
        self.core.post_recv(local, cookie)
    }

    fn post_rdma_write(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        let t = wr::remote_target(remote, remote_offset, rmr_api::sge_total(local))?;
        self.core.post_sq(WrKind::Write, local, Some(t), cookie, flags, Extra::None)
    }

    fn post_rdma_read(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        let t = wr::remote_target(remote, remote_offset, rmr_api::sge_total(local))?;
        self.core.post_sq(WrKind::Read, local, Some(t), cookie, flags, Extra::None)
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
        if !self.core.ia.attr.caps.contains(rmr_api::Caps::WRITE_IMM) {
            return Err(Error::Unsupported("rdma write with immediate (iWARP)"));
        }
        let t = wr::remote_target(remote, remote_offset, rmr_api::sge_total(local))?;
        self.core.post_sq(WrKind::WriteImm(imm), local, Some(t), cookie, flags, Extra::None)
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
        self.core.atomic(WrKind::FetchAdd(add), result, remote, remote_offset, cookie, flags)
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
        let k = WrKind::CmpSwap { compare, swap };
        self.core.atomic(k, result, remote, remote_offset, cookie, flags)
    }

    fn peer_address(&self) -> Option<String> {
        self.core.conn().peer.map(|a| a.ip().to_string())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
