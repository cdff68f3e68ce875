//! The fuzzing rig of the TCP receive path: a real `tcp` IA on loopback with
//! real registered regions, and a raw peer (a std `TcpStream` speaking the
//! wire format by hand) that connects through the real PSP handshake and
//! then feeds arbitrary bytes into the endpoint's real receive state machine.
//! Nothing is re-implemented: the bytes go through the kernel's TCP stack,
//! the IA's progress engine and `rx.rs`, exactly as a hostile peer's
//! would.
//!
//! After each input the rig checks what must hold whatever the bytes were:
//! - the endpoint ends (broken or disconnected) within [`END_WAIT`]: no hang;
//! - no byte outside a granted range changed: guard bytes around the
//!   writable LMR, the whole of a read-only region, a region of another PZ,
//!   a deregistered region, and everything around posted receive buffers
//!   and local read/atomic destinations;
//! - every DTO the rig posted completes exactly once, and nothing else does.
//!
//! Shared by the cargo-fuzz target (`fuzz/fuzz_targets/tcp_rx.rs`, through
//! `#[path]`) and the corpus replay test (`tests/fuzz_regressions.rs`).
#![allow(dead_code, unreachable_pub, missing_docs, clippy::type_complexity)]

use backend_tcp::wire::{HDR, Header, MAGIC, Op};
use backend_tcp::{TcpConfig, TcpIa};
use rmr_api::Cookie;
use rmr_api::{
    Access, DtoFlags, EpEvds, EpState, Evd, Event, Ia, Lmr, MemRegion, Psp, Pz, RmrContext, Sge,
};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// How long an endpoint may take to end once its peer stopped sending.
pub const END_WAIT: Duration = Duration::from_secs(15);
/// Size of every test region; the granted LMR range is [`LO`, [`HI`]).
pub const REGION: usize = 8192;
pub const LO: u64 = 1024;
pub const HI: u64 = 5120;
/// Posted receive buffers: `RECV_SLOT` bytes each from `LO` in the receive region.
pub const RECV_SLOT: u64 = 256;
/// Where a posted RDMA read lands in the local region, and its length.
pub const READ_AT: u64 = 1024;
pub const READ_LEN: u64 = 512;
/// Where a posted fetch-and-add's old value lands in the local region.
pub const ATOMIC_AT: u64 = 2048;

/// Region roles, in key-selector order.
pub const RW: usize = 0; // REMOTE_WRITE|READ|ATOMIC in the EP's PZ, granted [LO, HI)
pub const RO: usize = 1; // REMOTE_READ only: must never change
pub const OTHER_PZ: usize = 2; // REMOTE_WRITE but another PZ: must never change
pub const DEREG: usize = 3; // registered, then deregistered: must never change
pub const RECV: usize = 4; // local receive buffers
pub const LOCAL: usize = 5; // local read / atomic destinations
const NREGIONS: usize = 6;

struct Region {
    mem: Arc<MemRegion>,
    lmr: Arc<dyn Lmr>,
}

/// A loopback IA with regions, a PSP, and the objects one connection uses.
pub struct Rig {
    ia: Arc<dyn Ia>,
    pz: Arc<dyn Pz>,
    _pz_other: Arc<dyn Pz>,
    psp: Arc<dyn Psp>,
    psp_evd: Arc<dyn Evd>,
    regions: Vec<Region>,
    /// Each region's remote key and the address of its granted range.
    pub ctx: Vec<RmrContext>,
    seed: u8,
    /// An idle connection the rig keeps for its whole life: the IA's
    /// progress helper, which ends 100 ms after the IA's last endpoint,
    /// then lives as long as the rig, so the per-input thread check
    /// ([`settle_threads`]) does not wait 100 ms for the helper at every
    /// input. What that wait also checked (that the helper let go of the
    /// input's endpoint) the descriptor check ([`settle_fds`]) does.
    _keeper: Option<(TcpStream, Arc<dyn rmr_api::Ep>, Arc<dyn Evd>, Arc<dyn Evd>)>,
}

/// What one input did (for the replay test's messages and for statistics).
#[derive(Debug, Default)]
pub struct Outcome {
    pub ended: String,
    pub completions: usize,
    pub fed: usize,
}

fn fill_pattern(mem: &MemRegion, seed: u8) {
    let v: Vec<u8> =
        (0..mem.len()).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
    mem.write(0, &v).unwrap();
}

fn expected(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Source addresses for the raw peer, so that closed connections in
/// TIME_WAIT never run a long fuzzing session out of ports.
fn next_source() -> IpAddr {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed) % 60_000;
    IpAddr::V4(Ipv4Addr::new(127, 1, (n >> 8) as u8, (n & 0xff) as u8 | 1))
}

impl Default for Rig {
    fn default() -> Self {
        Self::new()
    }
}

impl Rig {
    pub fn new() -> Rig {
        let cfg = TcpConfig::builder()
            // A send with no receive posted breaks the connection quickly.
            .rnr_timeout(Duration::from_millis(20))
            .user_timeout(Duration::from_secs(2))
            .max_dtos(64)
            .max_recvs(64)
            .build()
            .unwrap();
        let ia: Arc<dyn Ia> =
            Arc::new(TcpIa::with_config(IpAddr::V4(Ipv4Addr::LOCALHOST), cfg).unwrap());
        let pz = ia.create_pz().unwrap();
        let pz_other = ia.create_pz().unwrap();
        let psp_evd = ia.create_evd().unwrap();
        let psp = ia.create_psp(0, &psp_evd).unwrap();
        let all = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
        let spec: [(&Arc<dyn Pz>, Access); NREGIONS] = [
            (&pz, all | Access::LOCAL_WRITE),
            (&pz, Access::REMOTE_READ),
            (&pz_other, all | Access::LOCAL_WRITE),
            (&pz, all | Access::LOCAL_WRITE),
            (&pz, Access::LOCAL_WRITE),
            (&pz, Access::LOCAL_WRITE),
        ];
        let mut regions = Vec::new();
        let mut ctx = Vec::new();
        for (p, access) in spec {
            let mem = MemRegion::new(REGION);
            let lmr = p.register(&mem, LO, HI - LO, access).unwrap();
            ctx.push(lmr.rmr_context());
            regions.push(Region { mem, lmr });
        }
        regions[DEREG].lmr.deregister().unwrap();
        let mut rig =
            Rig { ia, pz, _pz_other: pz_other, psp, psp_evd, regions, ctx, seed: 0, _keeper: None };
        rig._keeper = Some(rig.connect());
        rig
    }

    fn psp_addr(&self) -> SocketAddr {
        SocketAddr::new(self.psp.address().parse().unwrap(), self.psp.service())
    }

    /// Connects a raw peer through the real handshake and accepts it onto a
    /// fresh EP of the rig's PZ.
    fn connect(&self) -> (TcpStream, Arc<dyn rmr_api::Ep>, Arc<dyn Evd>, Arc<dyn Evd>) {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.bind(&SocketAddr::new(next_source(), 0).into()).unwrap();
        sock.connect(&self.psp_addr().into()).unwrap();
        let mut raw: TcpStream = sock.into();
        raw.set_nodelay(true).unwrap();
        let mut h = Header::new(Op::ConnReq);
        h.arg0 = MAGIC;
        h.len = 3;
        let mut b = h.encode().to_vec();
        b.extend_from_slice(b"fuz");
        raw.write_all(&b).unwrap();
        let (evd, cevd) = (self.ia.create_evd().unwrap(), self.ia.create_evd().unwrap());
        let ep = self
            .ia
            .create_ep(
                &self.pz,
                &EpEvds { request: evd.clone(), recv: evd.clone(), conn: cevd.clone() },
            )
            .unwrap();
        match self.psp_evd.wait(Some(END_WAIT), 1).expect("connection request") {
            Event::ConnectionRequest(cr) => {
                assert_eq!(cr.private_data(), b"fuz");
                cr.accept(&ep, b"ok").unwrap();
            }
            e => panic!("expected a connection request, got {e:?}"),
        }
        let mut hb = [0u8; HDR];
        raw.read_exact(&mut hb).unwrap();
        let reply = Header::decode(&hb);
        assert_eq!(reply.validate(), Ok(Op::ConnAccept));
        let mut pd = vec![0u8; reply.len as usize];
        raw.read_exact(&mut pd).unwrap();
        assert_eq!(pd, b"ok");
        match cevd.wait(Some(END_WAIT), 1).unwrap() {
            Event::Established { .. } => {}
            e => panic!("expected Established, got {e:?}"),
        }
        (raw, ep, evd, cevd)
    }

    /// Feeds `stream` (written in `chunks`, then the write side closed) to a
    /// freshly accepted endpoint that first posted `recvs` receives and, if
    /// asked, an RDMA read and a fetch-and-add towards the raw peer; checks
    /// every invariant; panics on a violation.
    pub fn feed(
        &mut self,
        stream: &[u8],
        chunks: &[usize],
        recvs: usize,
        read: bool,
        atomic: bool,
    ) -> Outcome {
        let (threads, fds) = (thread_count(), fd_count());
        self.seed = self.seed.wrapping_add(1);
        for r in &self.regions {
            fill_pattern(&r.mem, self.seed);
        }
        let (mut raw, ep, evd, cevd) = self.connect();
        let mut posted: HashMap<u64, u32> = HashMap::new();
        let recv_lmr = &*self.regions[RECV].lmr;
        for i in 0..recvs as u64 {
            ep.post_recv(
                &[Sge::new(recv_lmr, i * RECV_SLOT, RECV_SLOT)],
                Cookie(100 + i),
                DtoFlags::empty(),
            )
            .unwrap();
            posted.insert(100 + i, 0);
        }
        let local = &*self.regions[LOCAL].lmr;
        // Toward the raw peer, which never answers unless the input does.
        let far = RmrContext::new(0x5eed, 0x10_0000, 1 << 20);
        if read {
            ep.post_rdma_read(
                &[Sge::new(local, READ_AT - LO, READ_LEN)],
                far.at(0),
                Cookie(1),
                DtoFlags::empty(),
            )
            .unwrap();
            posted.insert(1, 0);
        }
        if atomic {
            ep.post_fetch_add(
                Sge::new(local, ATOMIC_AT - LO, 8),
                far.at(8),
                5,
                Cookie(2),
                DtoFlags::empty(),
            )
            .unwrap();
            posted.insert(2, 0);
        }
        // Drain what the EP sends (acks, NAKs, read responses) so it never blocks.
        let mut rd = raw.try_clone().unwrap();
        let drain = std::thread::spawn(move || {
            let mut b = vec![0u8; 64 << 10];
            let mut n = 0usize;
            while let Ok(k) = rd.read(&mut b) {
                if k == 0 {
                    break;
                }
                n += k;
            }
            n
        });
        let mut at = 0;
        let mut ci = 0;
        while at < stream.len() {
            let c = chunks.get(ci).copied().unwrap_or(usize::MAX).max(1);
            ci += 1;
            let end = stream.len().min(at.saturating_add(c));
            // The EP may close first (a protocol error): then writes fail.
            if raw.write_all(&stream[at..end]).is_err() {
                break;
            }
            at = end;
        }
        let _ = raw.shutdown(std::net::Shutdown::Write);
        let ended = loop {
            match cevd.wait(Some(END_WAIT), 1) {
                Ok(Event::Broken { reason, .. }) => break format!("broken: {reason}"),
                Ok(Event::Disconnected { .. }) => break "disconnected".to_string(),
                Ok(_) => {}
                Err(e) => panic!(
                    "HANG: the endpoint did not end within {END_WAIT:?} after its peer closed ({e}); progress: {:?}",
                    ep.attr().notes
                ),
            }
        };
        assert!(matches!(ep.state(), EpState::Broken | EpState::Disconnected));
        let _ = drain.join();
        // Every DTO completes exactly once; finish() pushes flushes before the end event.
        let mut completions = 0;
        while let Some(ev) = evd.dequeue() {
            if let Event::Dto(c) = ev {
                completions += 1;
                let n = posted
                    .get_mut(&c.cookie.0)
                    .unwrap_or_else(|| panic!("completion for a DTO never posted: {c:?}"));
                *n += 1;
                assert_eq!(*n, 1, "DTO completed twice: {c:?}");
            }
        }
        for (cookie, n) in &posted {
            assert_eq!(*n, 1, "DTO {cookie} never completed (ended: {ended})");
        }
        drop((ep, raw, evd, cevd));
        self.check_memory(recvs as u64, read, atomic);
        settle_threads(threads);
        // The progress helper lets go of an endpoint (and closes its socket)
        // only when it is done with it: an input that left one stuck shows
        // here. (The keeper keeps the helper alive, so the thread count
        // alone would not tell.)
        settle_fds(fds);
        Outcome { ended, completions, fed: at }
    }

    fn check_memory(&self, recvs: u64, read: bool, atomic: bool) {
        let want = expected(REGION, self.seed);
        let unchanged = |role: usize, ranges: &[(u64, u64)], what: &str| {
            let got = self.regions[role].mem.to_vec(0, REGION).unwrap();
            for &(a, b) in ranges {
                let (a, b) = (a as usize, b as usize);
                if got[a..b] != want[a..b] {
                    let i = (a..b).find(|&i| got[i] != want[i]).unwrap();
                    panic!("WRITE OUTSIDE A GRANTED RANGE: {what}: byte {i} changed");
                }
            }
        };
        let all = [(0, REGION as u64)];
        unchanged(RW, &[(0, LO), (HI, REGION as u64)], "guard bytes around the writable LMR");
        unchanged(RO, &all, "read-only region");
        unchanged(OTHER_PZ, &all, "region of another PZ");
        unchanged(DEREG, &all, "deregistered region");
        unchanged(
            RECV,
            &[(0, LO), (LO + recvs * RECV_SLOT, REGION as u64)],
            "around the posted receives",
        );
        let mut keep = vec![(0, LO)];
        let mut from = LO;
        if read {
            keep.push((LO + READ_LEN, ATOMIC_AT));
            from = ATOMIC_AT;
        }
        if atomic {
            if !read {
                keep.push((LO, ATOMIC_AT));
            }
            from = ATOMIC_AT + 8;
        }
        keep.push((from, REGION as u64));
        unchanged(LOCAL, &keep, "around the local read/atomic destinations");
    }
}

/// Threads of this process now.
pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0)
}

/// Open descriptors of this process now.
pub fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

/// Waits until the descriptors a connection opened are closed again:
/// none may outlive its connection (its socket, its EVDs' descriptors).
pub fn settle_fds(baseline: usize) {
    settle(fd_count, baseline, "DESCRIPTOR LEAK: descriptors open");
}

/// Waits until the threads a connection started (handshake, progress) have
/// ended: none may outlive its connection. (Also keeps LeakSanitizer from
/// seeing a thread half-way through its exit.)
pub fn settle_threads(baseline: usize) {
    settle(thread_count, baseline, "THREAD LEAK: threads");
}

/// Waits (at most [`END_WAIT`]) until `count()` is back to `baseline`.
fn settle(count: fn() -> usize, baseline: usize, what: &str) {
    let start = std::time::Instant::now();
    while count() > baseline {
        assert!(
            start.elapsed() < END_WAIT,
            "{what}: {}, {baseline} before the connection",
            count()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// A little reader over fuzz input: every byte the input lacks reads as 0.
pub struct Input<'a> {
    b: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Input { b }
    }
    pub fn is_empty(&self) -> bool {
        self.b.is_empty()
    }
    pub fn u8(&mut self) -> u8 {
        let v = self.b.first().copied().unwrap_or(0);
        self.b = self.b.get(1..).unwrap_or(&[]);
        v
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.b)
    }
}

/// Turns a fuzz input into (stream, chunk sizes, receives, read?, atomic?)
/// for [`Rig::feed`]. The first byte picks the mode:
/// - raw: the rest of the input is the byte stream itself;
/// - structured: the rest is a list of frame descriptions (op, flags,
///   status, key selector — one of the rig's real keys or a raw value —,
///   offset from the granted base, declared length, actual payload length,
///   sequence number mode, ack, arguments), which the rig serialises with
///   the real live-stream header codec. Real keys and plausible addresses let the
///   fuzzer reach the placement code, which random bytes never would.
pub fn build(rig: &Rig, data: &[u8]) -> (Vec<u8>, Vec<usize>, usize, bool, bool) {
    let mut inp = Input::new(data);
    let mode = inp.u8();
    let recvs = usize::from(mode >> 1 & 3);
    let (read, atomic) = (mode & 8 != 0, mode & 16 != 0);
    let chunks: Vec<usize> = if mode & 32 != 0 {
        (0..4).map(|_| 1 + usize::from(inp.u8())).collect()
    } else {
        Vec::new()
    };
    if mode & 1 == 1 {
        return (inp.rest().to_vec(), chunks, recvs, read, atomic);
    }
    let mut out = Vec::new();
    let mut seq = 1u64;
    // The last ack on the stream built so far.
    let mut wire_ack = 0u64;
    while !inp.is_empty() && out.len() < 1 << 20 {
        let opb = inp.u8();
        let op = if opb >= 0xf0 { opb & 0x0f } else { 1 + opb % 14 };
        let flags = inp.u8();
        let status = u16::from(inp.u8());
        let ksel = inp.u8();
        let off = inp.u32() as i32;
        let lenb = inp.u16();
        let payb = inp.u16();
        let seqm = inp.u8();
        let ack = u64::from(inp.u8());
        let a0 = inp.u16();
        let fillb = inp.u8();
        let key = match usize::from(ksel) {
            k if k < NREGIONS => rig.ctx[k].key(),
            k if k < 0xf0 => rig.ctx[k % NREGIONS].key(),
            _ => u64::from(ksel) << 56 | 0x1234,
        };
        let base = rig.ctx[usize::from(ksel) % NREGIONS].addr;
        // Declared length: small, near the region's size, or huge.
        let len = match lenb >> 14 {
            0 | 1 => u32::from(lenb & 0x1fff),
            2 => u32::from(lenb & 0x3fff) + 4000,
            _ => u32::MAX - u32::from(lenb & 0x3fff),
        };
        let pay = match payb >> 15 {
            0 => len.min(1 << 16) as usize,  // as declared
            _ => usize::from(payb & 0x7fff), // truncated or overlong
        };
        let mut h = Header {
            op,
            flags,
            status,
            len,
            seq: 0,
            ack,
            key,
            addr: base.wrapping_add(off as i64 as u64),
            arg0: match a0 >> 14 {
                0 => u64::from(a0 & 0x3fff),
                1 => u64::MAX - u64::from(a0 & 0x3fff),
                _ => u64::from(a0 & 0x3fff) << 20,
            },
            arg1: u64::from(fillb),
        };
        let is_req = Op::Send as u8 <= op && op <= Op::CmpSwap as u8 && op != Op::ReadResp as u8;
        h.seq = match seqm {
            0..=127 if is_req => {
                seq += 1;
                seq - 1
            }
            0..=127 => u64::from(seqm % 4),
            _ => u64::from(seqm),
        };
        if (1..=14).contains(&op) && flags & 0x40 != 0 {
            // A known op, its ack left out where the last one said it (the
            // reader's "same ack as before" path).
            let mut hb = [0u8; HDR];
            let n = h.encode_data(&mut wire_ack, &mut hb);
            out.extend_from_slice(&hb[..n]);
        } else if (1..=14).contains(&op) {
            // A known op: the live stream's codec (the ack always carried).
            out.extend_from_slice(&h.data_frame(&[]));
            wire_ack = h.ack;
        } else {
            // No op: the first six bytes say so.
            out.extend_from_slice(&[op, flags]);
            out.extend_from_slice(&len.to_le_bytes());
        }
        out.extend(std::iter::repeat_n(fillb, pay));
    }
    (out, chunks, recvs, read, atomic)
}
