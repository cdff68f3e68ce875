//! The user's face of a bridged endpoint: [`BridgedEp`], its creation and
//! the `Ep` calls, over the [`Core`] that runs the protocol.

use super::*;

/// An endpoint to a peer on the other side of a bridge.
pub struct BridgedEp {
    core: Arc<Core>,
}

impl BridgedEp {
    pub(crate) fn create(ia: &BridgeIa, pz: &BridgePz, evds: &EpEvds) -> Result<Arc<dyn Ep>> {
        let inner_evd = ia.inner.create_evd()?;
        let inner = ia.inner.create_ep(&pz.inner, &EpEvds::single(&inner_evd))?;
        let cfg = ia.cfg.clone();
        let ring = Ring::new(&[&pz.inner], cfg.credit().total(), cfg.chunk)?;
        let nslots = 2 * cfg.credit().total() + 8;
        let hdrs = MemRegion::new(nslots * HDR);
        let hdr_lmr = pz.inner.register_all(&hdrs, Access::empty())?;
        let mine = cfg.credit();
        let core = Arc::new(Core {
            id: EpId::fresh(),
            pz_id: pz.id,
            max_sges: ia.inner.attr().max_sges.saturating_sub(1).max(1),
            inner,
            inner_evd,
            user: evds.clone(),
            ring,
            hdrs,
            hdr_lmr,
            bridge: ia.bridge.clone(),
            st: Mutex::new(St {
                conn: EpState::Unconnected,
                chunk: cfg.chunk,
                credits: Credits::new(mine, mine),
                ops: ClientOps::new(cfg.max_dtos),
                txq: VecDeque::new(),
                free_hdr: (0..nslots as u32).rev().collect(),
                hdr_inflight: VecDeque::new(),
                unsignalled: 0,
                recvs: VecDeque::new(),
                held: VecDeque::new(),
                cur: None,
                reads: BTreeMap::new(),
                echo: false,
                ended: false,
                ring_posted: false,
                peer: String::new(),
                sent: 0,
                rcvd: 0,
            }),
            harvest: Mutex::new(()),
            waiters: AtomicUsize::new(0),
            left_at: AtomicU64::new(0),
            cfg,
        });
        let weak = Arc::downgrade(&core);
        std::thread::Builder::new()
            .name("rmr-zip-ep".into())
            .spawn(move || Core::progress_thread(weak))
            .map_err(|e| Error::io("spawn bridged EP progress thread", e))?;
        for e in [&evds.request, &evds.recv, &evds.conn] {
            if let Some(b) = e.as_any().downcast_ref::<BridgeEvd>() {
                b.attach(&core);
            }
        }
        {
            let mut st = core.lock();
            // Backends that take receives before the connection exists get them now.
            let _ = core.post_ring(&mut st);
        }
        Ok(Arc::new(BridgedEp { core }))
    }

    /// Accepts a bridge's connection request onto this endpoint.
    pub(crate) fn accept_from(
        &self,
        cr: &ConnRequest,
        hello: &BridgeHello<'_>,
        user_pd: &[u8],
    ) -> Result<()> {
        let c = &self.core;
        let chunk = u64::from(hello.chunk).min(c.cfg.chunk);
        {
            let mut st = c.lock();
            if st.conn != EpState::Unconnected {
                return Err(Error::invalid("EP is not unconnected"));
            }
            st.conn = EpState::Pending;
            // Set before accepting: the bridge may send the moment it is accepted.
            st.chunk = chunk;
            st.credits.set_peer(hello.ring);
        }
        let reply = Reply { ring: c.cfg.credit(), chunk: chunk as u32, user: user_pd }.encode();
        if let Err(e) = cr.accept(&c.inner, &reply) {
            c.lock().conn = EpState::Unconnected;
            return Err(e);
        }
        let mut st = c.lock();
        st.peer = format!("{} via bridge {}", hello.from, cr.peer());
        crate::trace::line(|| format!("zep {} accepted from {}", c.inner.id().0, st.peer));
        let posted = c.post_ring(&mut st);
        st.conn = EpState::Connected;
        // What became due while connecting (credit returns) goes now.
        c.pump(&mut st);
        drop(st);
        posted?;
        c.deliver(vec![(
            TO_CONN,
            Event::Established { ep: c.id, private_data: hello.user.to_vec() },
        )]);
        Ok(())
    }
}

impl Drop for BridgedEp {
    fn drop(&mut self) {
        if self.disconnect().is_err() {
            let _ = self.core.inner.disconnect();
        }
    }
}

impl Ep for BridgedEp {
    fn id(&self) -> EpId {
        self.core.id
    }

    fn attr(&self) -> EpAttr {
        let c = &self.core;
        let st = c.lock();
        let a = c.inner.attr();
        let (od, oc) = st.credits.owed();
        let mut notes = vec![
            ("chunk".to_string(), st.chunk.to_string()),
            ("peer".to_string(), st.peer.clone()),
            (
                "credits".to_string(),
                format!("data={} ctl={} owed={od}/{oc}", st.credits.data(), st.credits.ctl()),
            ),
            (
                "state".to_string(),
                format!(
                    "ops={} txq={} held={} recvs={} sent={} rcvd={}",
                    st.ops.len(),
                    st.txq.len(),
                    st.held.len(),
                    st.recvs.len(),
                    st.sent,
                    st.rcvd
                ),
            ),
        ];
        // The real endpoint's own picture (progress, frames, acks).
        notes.extend(a.notes.into_iter().map(|(k, v)| (format!("inner {k}"), v)));
        EpAttr {
            max_msg_size: a.max_msg_size,
            max_dtos: c.cfg.max_dtos,
            max_recvs: a.max_recvs,
            max_sges: c.max_sges,
            notes,
        }
    }

    fn state(&self) -> EpState {
        self.core.lock().conn
    }

    fn connect(&self, remote: &str, service: u16, pd: &[u8], timeout: Duration) -> Result<Vec<u8>> {
        let c = &self.core;
        let (baddr, bport) = c.bridge.clone().ok_or_else(|| {
            Error::invalid("this zipper IA has no bridge to connect through (listen only)")
        })?;
        if remote.len() > 255 {
            return Err(Error::BadSpec { spec: remote.into(), why: "address too long".into() });
        }
        {
            let mut st = c.lock();
            if st.conn != EpState::Unconnected {
                return Err(Error::invalid("EP is not unconnected"));
            }
            st.conn = EpState::Pending;
        }
        let hello = ClientHello {
            ring: c.cfg.credit(),
            chunk: c.cfg.chunk as u32,
            service,
            target: remote,
            user: pd,
        }
        .encode();
        let reply = match c.inner.connect(&baddr, bport, &hello, timeout) {
            Ok(r) => r,
            Err(e) => {
                c.lock().conn = EpState::Unconnected;
                if let Error::Rejected { private_data } = &e {
                    c.deliver(vec![(
                        TO_CONN,
                        Event::Rejected { ep: c.id, private_data: private_data.clone() },
                    )]);
                }
                return Err(e);
            }
        };
        let Some(r) = Reply::decode(&reply) else {
            let _ = c.inner.disconnect();
            c.lock().conn = EpState::Unconnected;
            return Err(Error::Protocol("the bridge's reply is not a zipper reply".into()));
        };
        let user = r.user.to_vec();
        let mut st = c.lock();
        st.chunk = u64::from(r.chunk).min(c.cfg.chunk);
        // The bridge may already have sent (what the peer sent at accept
        // time): keep what its messages did to the credits.
        st.credits.set_peer(r.ring);
        st.peer = format!("{remote}:{service} via bridge {baddr}:{bport}");
        crate::trace::line(|| format!("zep {} connected to {}", c.inner.id().0, st.peer));
        let posted = c.post_ring(&mut st);
        st.conn = EpState::Connected;
        c.pump(&mut st);
        drop(st);
        posted?;
        c.deliver(vec![(TO_CONN, Event::Established { ep: c.id, private_data: user.clone() })]);
        Ok(user)
    }

    /// Closes gracefully: messages still queued for credits get up to five
    /// seconds to be handed to the connection first (the bridge forwards
    /// everything that reached it before it passes the close on).
    fn disconnect(&self) -> Result<()> {
        let c = &self.core;
        if c.lock().conn != EpState::Connected {
            return Err(Error::NotConnected);
        }
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            {
                let st = c.lock();
                if st.conn != EpState::Connected || st.txq.is_empty() {
                    break;
                }
            }
            if !c.poll() {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        c.inner.disconnect()
    }

    fn post_send(&self, local: &[Sge<'_>], cookie: Cookie, flags: DtoFlags) -> Result<()> {
        let cookie = cookie.0;
        self.core.post(OpKind::Send, local, None, cookie, flags)
    }

    fn post_recv(&self, local: &[Sge<'_>], cookie: Cookie, _flags: DtoFlags) -> Result<()> {
        let cookie = cookie.0;
        let c = &self.core;
        let total = check_local_sges(local, c.pz_id, Access::LOCAL_WRITE, c.max_sges)?;
        let segs = segs_of(local)?;
        let mut st = c.lock();
        if st.ended {
            return Err(Error::NotConnected);
        }
        st.recvs.push_back(UserRecv { cookie, segs, total });
        let mut out = Out::new();
        c.match_delivers(&mut st, &mut out);
        c.pump(&mut st);
        drop(st);
        c.deliver(out);
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
        self.core.post(OpKind::Write, local, Some((remote, remote_offset)), cookie, flags)
    }

    fn post_rdma_read(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        self.core.post(OpKind::Read, local, Some((remote, remote_offset)), cookie, flags)
    }

    fn peer_address(&self) -> Option<String> {
        let st = self.core.lock();
        (!st.peer.is_empty()).then(|| st.peer.clone())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
