//! Test support, not API (hidden from the docs): an honest endpoint and a
//! peer that breaks the protocol on purpose, in one process. The hostile
//! tests and the `shm_ring` fuzz target feed the honest side raw ring
//! bytes and a lying region table through it, and check that it answers
//! with typed errors and never writes outside what it granted.

use crate::domain::IaShared;
use crate::ep::ShmEp;
use crate::ia::ShmIa;
use crate::wire::{HDR, Hdr, Op};
use rmr_api::{Access, Cookie, DtoFlags, Ep, EpEvds, EpState, Evd, Event, Ia, Lmr, MemRegion, Sge};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of each test region.
pub const LEN: u64 = 4096;

/// An honest endpoint connected to one this rig controls.
pub struct Rig {
    /// The honest side's EVD.
    pub evd: Arc<dyn Evd>,
    /// The honest endpoint.
    pub honest: Arc<dyn Ep>,
    /// The peer the rig speaks through.
    pub evil: Arc<dyn Ep>,
    /// A region the honest side granted every right to.
    pub open: Arc<MemRegion>,
    /// A region it granted only remote reads.
    pub read_only: Arc<MemRegion>,
    /// Memory it never registered.
    pub canary: Arc<MemRegion>,
    /// Its registrations (kept alive).
    pub lmrs: Vec<Arc<dyn Lmr>>,
    /// The honest side's protection zone.
    pub pz: Arc<dyn rmr_api::Pz>,
    /// The peer's region in shared memory (`lmrs[4]` registers it), which
    /// the honest side writes by a copy through a mapping.
    pub evil_shared: Arc<MemRegion>,
    evil_ia: Arc<IaShared>,
    honest_ia: Arc<IaShared>,
}

/// What feeding the honest side came to.
#[derive(Debug)]
pub struct Outcome {
    /// The honest endpoint's state afterwards.
    pub state: EpState,
    /// Events it produced.
    pub events: Vec<Event>,
}

impl Rig {
    /// A connected pair on an IA of its own (`shm:<name>;ring=64K;rnr_timeout_ms=1`).
    pub fn new(name: &str) -> Rig {
        let spec = format!("{name};ring=64K;rnr_timeout_ms=1");
        let cfg = crate::ShmConfig::from_given(
            &rmr_api::settings::Given::split("shm", &spec, &crate::KNOBS).expect("spec").1,
        )
        .expect("config");
        let honest_obj = ShmIa::with_config(name, cfg.clone()).expect("ia");
        let honest_ia = honest_obj.sh.clone();
        let ia: Arc<dyn Ia> = Arc::new(honest_obj);
        let evil_ia_obj = ShmIa::with_config(name, cfg).expect("ia");
        let evil_ia = evil_ia_obj.sh.clone();
        let evil_ia_dyn: Arc<dyn Ia> = Arc::new(evil_ia_obj);
        let (pz, evd, pevd) =
            (ia.create_pz().unwrap(), ia.create_evd().unwrap(), ia.create_evd().unwrap());
        let (epz, eevd) = (evil_ia_dyn.create_pz().unwrap(), evil_ia_dyn.create_evd().unwrap());
        let psp = ia.create_psp(0, &pevd).unwrap();
        let honest = ia.create_ep(&pz, &EpEvds::single(&evd)).unwrap();
        let evil = evil_ia_dyn.create_ep(&epz, &EpEvds::single(&eevd)).unwrap();
        let (svc, h2) = (psp.service(), honest.clone());
        let acceptor =
            std::thread::spawn(move || match pevd.wait(Some(Duration::from_secs(10)), 1) {
                Ok(Event::ConnectionRequest(cr)) => cr.accept(&h2, b"").unwrap(),
                e => panic!("{e:?}"),
            });
        evil.connect(name, svc, b"", Duration::from_secs(10)).expect("connect");
        acceptor.join().unwrap();
        let open = MemRegion::new(LEN as usize);
        let read_only = MemRegion::new(LEN as usize);
        read_only.fill(0, LEN, 0x77).unwrap();
        let canary = MemRegion::new(LEN as usize);
        canary.fill(0, LEN, 0x5a).unwrap();
        let inbox = MemRegion::new(LEN as usize);
        let mut lmrs = vec![
            pz.register_all(&open, Access::ALL).unwrap(),
            pz.register_all(&read_only, Access::REMOTE_READ).unwrap(),
            pz.register_all(&inbox, Access::LOCAL_WRITE).unwrap(),
        ];
        for i in 0..4 {
            honest
                .post_recv(&[Sge::new(&*lmrs[2], i * 1024, 1024)], Cookie(i), DtoFlags::empty())
                .unwrap();
        }
        let _ = evd.wait(Some(Duration::from_millis(1)), 1);
        lmrs.push(epz.register_all(&MemRegion::new(64), Access::ALL).unwrap());
        let evil_shared = MemRegion::shared(LEN as usize).expect("a shared region");
        lmrs.push(epz.register_all(&evil_shared, Access::ALL).unwrap());
        drop(psp);
        Rig {
            evd,
            honest,
            evil,
            open,
            read_only,
            canary,
            lmrs,
            pz,
            evil_shared,
            evil_ia,
            honest_ia,
        }
    }

    /// The remote key of the open (0) or read-only (1) region.
    pub fn key(&self, which: usize) -> u64 {
        self.lmrs[which].rmr_context().key()
    }

    /// The address of the open (0) or read-only (1) region.
    pub fn addr(&self, which: usize) -> u64 {
        self.lmrs[which].rmr_context().addr
    }

    /// Writes `bytes` raw into the ring towards the honest side and moves
    /// the ring's head by `advance` (an honest producer moves it by the
    /// frames' length), then rings its doorbell.
    pub fn inject(&self, bytes: &[u8], advance: u64) {
        let ep = self.evil.as_any().downcast_ref::<ShmEp>().expect("an shm EP");
        let link = ep.sh.link.get().expect("connected");
        link.out.raw_produce(bytes, advance);
        link.out.want_data().store(1, std::sync::atomic::Ordering::SeqCst);
        link.wake_consumer();
    }

    /// A well-formed frame header's bytes.
    pub fn frame(h: &Hdr) -> Vec<u8> {
        h.to_words().iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// Makes the peer's published table say its region spans
    /// `[addr, addr+len)`.
    ///
    /// # Safety
    /// The honest side then writes wherever the lie says by cross-memory
    /// attach — in this very process: only with an address no Rust object
    /// lives at (unmapped memory), as the hostile tests do.
    pub unsafe fn lie_in_table(&self, addr: u64, len: u64) {
        let key = self.lmrs[3].rmr_context().key();
        self.evil_ia.table.overwrite(key, addr, len);
    }

    /// Makes the peer's published table say its shared region lies at
    /// offset `off` of its file, and that the file's inode is `ino_delta`
    /// more than it is. Safe: the honest side checks the inode of the
    /// file it fetches and the offset against the file's length, and the
    /// file is the peer's own memory.
    pub fn lie_about_file(&self, off: u64, ino_delta: u64) {
        let key = self.lmrs[4].rmr_context().key();
        self.evil_ia.table.overwrite_file(key, off, ino_delta);
    }

    /// Makes the peer's table say its shared region is the honest side's
    /// own region table (a descriptor this process holds, read-only).
    /// Safe: the honest side refuses to map one of its own tables or
    /// rings, and a file not open for writing.
    pub fn lie_file_is_the_honest_table(&self) {
        use std::os::fd::AsRawFd;
        let t = self.honest_ia.table.fd();
        let ino = rustix::fs::fstat(t).expect("fstat").st_ino;
        let key = self.lmrs[4].rmr_context().key();
        self.evil_ia.table.overwrite_fd(key, t.as_raw_fd(), ino);
    }

    /// A digest of the honest side's region table (every word).
    pub fn honest_table_digest(&self) -> u64 {
        self.honest_ia.table.digest()
    }

    /// The key of the peer's own (lied about) region.
    pub fn evil_key(&self) -> u64 {
        self.lmrs[3].rmr_context().key()
    }

    /// Drives the honest side for up to `within` (until it ends or goes
    /// quiet) and collects its events.
    pub fn settle(&self, within: Duration) -> Outcome {
        let end = Instant::now() + within;
        let mut events = Vec::new();
        while Instant::now() < end {
            match self.evd.wait(Some(Duration::from_millis(2)), 1) {
                Ok(e) => events.push(e),
                Err(_) if !events.is_empty() || self.honest.state() != EpState::Connected => break,
                Err(_) => {}
            }
        }
        Outcome { state: self.honest.state(), events }
    }

    /// Asserts the honest side's invariants: memory it never registered
    /// and memory it granted only reads of are untouched.
    pub fn check(&self) {
        assert!(
            self.canary.to_vec(0, LEN as usize).unwrap().iter().all(|&b| b == 0x5a),
            "unregistered memory written"
        );
        assert!(
            self.read_only.to_vec(0, LEN as usize).unwrap().iter().all(|&b| b == 0x77),
            "a read-only region written"
        );
    }

    /// The fuzz target's step: `data` as raw ring bytes (headers aimed at the
    /// honest side's regions: a key field ending in binary 01 becomes the
    /// open region's key, 10 the read-only one's, with its address folded
    /// near that region), the head moved by `data`'s padded length or, when
    /// the first byte's top bit is set, by the next 8 bytes' value.
    pub fn feed(&self, data: &[u8]) -> Outcome {
        let (advance, body) = match data.first() {
            Some(b) if b & 0x80 != 0 && data.len() >= 9 => {
                (u64::from_le_bytes(data[1..9].try_into().unwrap()), &data[9..])
            }
            Some(_) => (
                data.len().saturating_sub(1).div_ceil(HDR) as u64 * HDR as u64,
                &data[1.min(data.len())..],
            ),
            None => (0, data),
        };
        let mut bytes = body.to_vec();
        bytes.resize(bytes.len().div_ceil(HDR) * HDR, 0);
        for f in bytes.chunks_mut(HDR) {
            let w: [u64; 8] = std::array::from_fn(|i| {
                u64::from_le_bytes(f[8 * i..8 * i + 8].try_into().unwrap())
            });
            let mut h = Hdr::from_words(w);
            let which = match h.key & 3 {
                1 => Some(0),
                2 => Some(1),
                _ => None,
            };
            if let (Some(which), Some(Op::Write | Op::ReadReq | Op::FetchAdd | Op::CmpSwap)) =
                (which, Op::from_u8(h.op))
            {
                h.key = self.key(which);
                h.addr = self.addr(which).wrapping_add(h.addr % (2 * LEN)).wrapping_sub(LEN / 2);
                for (i, w) in h.to_words().iter().enumerate() {
                    f[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
                }
            }
        }
        self.inject(&bytes, advance);
        let out = self.settle(Duration::from_millis(5));
        self.check();
        out
    }
}

impl Drop for Rig {
    /// Ends both endpoints and waits (up to 2 s) until the IAs' helpers
    /// have let them go: the rig's own handles are then the last, and the
    /// IAs (and their threads) end with it, on this thread. A fuzzing
    /// process so holds nothing of a finished input (its leak check runs
    /// at exit).
    fn drop(&mut self) {
        let _ = self.honest.disconnect();
        let _ = self.evil.disconnect();
        let end = Instant::now() + Duration::from_secs(2);
        for ep in [&self.honest, &self.evil] {
            let sh = &ep.as_any().downcast_ref::<ShmEp>().expect("an shm EP").sh;
            while Arc::strong_count(sh) > 1 && Instant::now() < end {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}

/// Counts a cross-memory access of `ep`'s into its peer's memory as in
/// flight, as a post does from its table lookup to the end of its system
/// call, until the returned guard is dropped: a peer's deregistration must
/// wait for it, also once the peer let its endpoint go.
pub fn pretend_in_flight(ep: &Arc<dyn Ep>) -> impl Drop + use<> {
    struct Busy(Arc<dyn Ep>);
    impl Drop for Busy {
        fn drop(&mut self) {
            counter(&self.0).fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    fn counter(ep: &Arc<dyn Ep>) -> &std::sync::atomic::AtomicU64 {
        let ep = ep.as_any().downcast_ref::<ShmEp>().expect("an shm EP");
        ep.sh.link.get().expect("connected").out.cma_busy()
    }
    counter(ep).fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    Busy(ep.clone())
}
