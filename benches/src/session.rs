//! The rmr side of the benchmark: a connection with a data buffer, a ring
//! of control receives, and the loops of each test.
//!
//! Bandwidth (`bw`), as in the uDAPL multirail paper: per sample the
//! initiator posts 20 RDMA writes with SUPPRESS and one notifying send; the
//! peer's reply marks the data visible (ordering rule 2). bandwidth =
//! 20·size / elapsed. `bibw` runs that loop from both sides at once. `lat`
//! is a write+notify ping-pong; the figure is half the round trip.
//! `breakdown` splits a `bw` sample into time inside post calls and time
//! waiting for the reply.

use crate::stats::{Summary, summarize};
use rmr_api::Cookie;
use rmr_api::stages::{self, Stage};
use rmr_api::{
    Access, DtoFlags, Ep, EpEvds, Error, Evd, Event, Ia, Lmr, MemRegion, Result, RmrContext, Sge,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Writes per sample (the paper's figure).
pub(crate) const WRITES_PER_SAMPLE: u64 = 20;
const CTRL: u64 = 128;
const RING: u64 = 64;
const SEND_BIT: u64 = 1 << 40;
/// The cookie of `--validate`'s read-back.
const READ_BIT: u64 = SEND_BIT >> 1;

/// Sample `i`'s bytes under `--validate`: different for every sample and
/// every byte position, so a stale or misplaced byte shows.
fn sample_pattern(i: u64, size: u64) -> Vec<u8> {
    (0..size)
        .map(|j| (j.wrapping_mul(31) ^ i.wrapping_mul(0x9e37_79b9)).wrapping_add(i) as u8)
        .collect()
}
/// How long any single wait may last before the run is declared stuck.
pub(crate) const STUCK: Duration = Duration::from_secs(120);

/// How long a wait may see nothing before the session reports itself stuck
/// (`RMR_BENCH_STUCK_S`, default [`STUCK`]); read once, not per message.
fn stuck_after() -> Duration {
    static S: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *S.get_or_init(|| {
        std::env::var("RMR_BENCH_STUCK_S")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(STUCK, Duration::from_secs)
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Hello = 1,
    Notify = 2,
    Ack = 3,
    Ping = 4,
    Pong = 5,
    Bibw = 6,
    Done = 7,
    Bye = 8,
}

#[derive(Clone, Copy, Debug)]
struct Ctrl {
    kind: Kind,
    seq: u64,
    size: u64,
    iters: u64,
    val: f64,
    ctx: Option<RmrContext>,
}

impl Ctrl {
    fn new(kind: Kind, seq: u64) -> Ctrl {
        Ctrl { kind, seq, size: 0, iters: 0, val: 0.0, ctx: None }
    }

    /// The message and its length: only as many bytes as it carries (a
    /// notify or a pong 16, a ping 24 with a write and 16 without, a
    /// context's message 40 and the context), as an MPI header is;
    /// receives take up to [`CTRL`].
    fn encode(&self) -> ([u8; CTRL as usize], u64) {
        let mut b = [0u8; CTRL as usize];
        b[0] = self.kind as u8;
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.size.to_le_bytes());
        b[24..32].copy_from_slice(&self.iters.to_le_bytes());
        b[32..40].copy_from_slice(&self.val.to_bits().to_le_bytes());
        let mut len = if self.iters != 0 || self.val.to_bits() != 0 {
            40
        } else if self.size != 0 {
            24
        } else {
            16
        };
        if let Some(c) = self.ctx {
            b[40..40 + RmrContext::WIRE_SIZE].copy_from_slice(&c.to_bytes());
            len = 40 + RmrContext::WIRE_SIZE as u64;
        }
        (b, len)
    }

    fn decode(b: &[u8]) -> Result<Ctrl> {
        let u = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8"));
        let kind = match b[0] {
            1 => Kind::Hello,
            2 => Kind::Notify,
            3 => Kind::Ack,
            4 => Kind::Ping,
            5 => Kind::Pong,
            6 => Kind::Bibw,
            7 => Kind::Done,
            8 => Kind::Bye,
            k => return Err(Error::Protocol(format!("bench control message kind {k}"))),
        };
        // Only a message that carries a context (a key count) decodes one: the
        // others cost no error (and no allocation) per message.
        let at = &b[40..40 + RmrContext::WIRE_SIZE];
        let ctx = if at[16] == 0 { None } else { RmrContext::from_bytes(at).ok() };
        Ok(Ctrl { kind, seq: u(8), size: u(16), iters: u(24), val: f64::from_bits(u(32)), ctx })
    }
}

/// Prints this thread's round-trip stage timeline (built with the
/// `stages` feature: `cargo build --release -p rmr-bench --features
/// rmr-api/stages`), as `# stages <side>: ...` lines on stderr.
fn print_stages(side: &str) {
    for l in stages::report(500) {
        eprintln!("# stages {side}: {l}");
    }
}

/// The first bytes of a bench connection's private data.
const MAGIC: &[u8; 4] = b"RMRB";

/// One benchmark connection (either side).
pub(crate) struct Conn {
    ep: Arc<dyn Ep>,
    pz: Arc<dyn rmr_api::Pz>,
    /// `--validate`: every bandwidth sample writes its own pattern and reads
    /// the peer's buffer back to compare (osu's `-c`, fabtests' `-v`).
    pub(crate) validate: bool,
    /// The read-back buffer of `validate`, made on first use.
    check: Option<Reg>,
    evd: Arc<dyn Evd>,
    data_lmr: Arc<dyn Lmr>,
    ctl: Arc<MemRegion>,
    ctl_lmr: Arc<dyn Lmr>,
    peer: Option<RmrContext>,
    send_slot: u64,
    /// Peer asked for these and we have not yet handled them (bibw).
    peer_done: Option<f64>,
    peer_bibw: Option<Ctrl>,
    bye: bool,
}

/// A registered buffer and its LMR.
type Reg = (Arc<MemRegion>, Arc<dyn Lmr>);

fn regs(ia: &Arc<dyn Ia>, pz: &Arc<dyn rmr_api::Pz>, size: u64) -> Result<[Reg; 2]> {
    let data = mem(ia, size.max(64) as usize)?;
    let data_lmr = pz.register_all(&data, Access::ALL)?;
    let ctl = mem(ia, (2 * RING * CTRL) as usize)?;
    let ctl_lmr = pz.register_all(&ctl, Access::LOCAL_WRITE)?;
    Ok([(data, data_lmr), (ctl, ctl_lmr)])
}

/// A buffer of `len` bytes as an application of `ia`'s backend would
/// allocate it: in shared memory for `shm` (processes of one node then
/// write each other's buffers with a plain copy), else the library's own.
fn mem(ia: &Arc<dyn Ia>, len: usize) -> Result<Arc<MemRegion>> {
    Ok(if ia.attr().provider == "shm" { MemRegion::shared(len)? } else { MemRegion::new(len) })
}

impl Conn {
    fn new(
        ep: Arc<dyn Ep>,
        pz: Arc<dyn rmr_api::Pz>,
        evd: Arc<dyn Evd>,
        bufs: [Reg; 2],
    ) -> Result<Conn> {
        let [(_data, data_lmr), (ctl, ctl_lmr)] = bufs;
        let c = Conn {
            ep,
            pz,
            validate: false,
            check: None,
            evd,
            data_lmr,
            ctl,
            ctl_lmr,
            peer: None,
            send_slot: 0,
            peer_done: None,
            peer_bibw: None,
            bye: false,
        };
        Ok(c)
    }

    fn post_ring(&self) -> Result<()> {
        for s in 0..RING {
            self.ep.post_recv(
                &[Sge::new(&*self.ctl_lmr, s * CTRL, CTRL)],
                Cookie(s),
                DtoFlags::empty(),
            )?;
        }
        Ok(())
    }

    /// Connects to a bench server and exchanges buffers.
    ///
    /// # Errors
    /// Connection and registration failures.
    pub(crate) fn connect(
        ia: &Arc<dyn Ia>,
        remote: &str,
        port: u16,
        max_size: u64,
    ) -> Result<Conn> {
        let pz = ia.create_pz()?;
        let (evd, cevd) = (ia.create_evd()?, ia.create_evd()?);
        let ep =
            ia.create_ep(&pz, &EpEvds { request: evd.clone(), recv: evd.clone(), conn: cevd })?;
        let bufs = regs(ia, &pz, max_size)?;
        let mut pd = MAGIC.to_vec();
        pd.extend_from_slice(&max_size.to_le_bytes());
        let mut c = Conn::new(ep, pz, evd, bufs)?;
        let reply = c.ep.connect(remote, port, &pd, Duration::from_secs(15))?;
        c.peer = Some(RmrContext::from_bytes(&reply)?);
        c.post_ring()?;
        let mut h = Ctrl::new(Kind::Hello, 0);
        h.ctx = Some(c.data_lmr.rmr_context());
        c.send(&h)?;
        Ok(c)
    }

    /// Serves one accepted connection request until the client says bye or goes away.
    ///
    /// # Errors
    /// Anything that breaks the session.
    pub(crate) fn serve(ia: &Arc<dyn Ia>, cr: &rmr_api::ConnRequest) -> Result<()> {
        let pd = cr.private_data();
        if pd.len() < 12 || &pd[..4] != MAGIC {
            let _ = cr.reject(b"not an rmr-bench client");
            return Err(Error::Protocol("not an rmr-bench client".into()));
        }
        let max = u64::from_le_bytes(pd[4..12].try_into().expect("8")).min(1 << 30);
        let pz = ia.create_pz()?;
        let (evd, cevd) = (ia.create_evd()?, ia.create_evd()?);
        let ep =
            ia.create_ep(&pz, &EpEvds { request: evd.clone(), recv: evd.clone(), conn: cevd })?;
        let bufs = regs(ia, &pz, max)?;
        let mut c = Conn::new(ep, pz, evd, bufs)?;
        c.post_ring()?;
        cr.accept(&c.ep, &c.data_lmr.rmr_context().to_bytes())?;
        loop {
            let m = c.next()?;
            match m.kind {
                Kind::Hello => c.peer = m.ctx,
                Kind::Bye => break,
                Kind::Bibw => c.peer_bibw = Some(m),
                _ => {}
            }
            if let Some(b) = c.peer_bibw.take() {
                let (s, _) = c.bw_loop(b.size, b.iters, 0)?;
                let mut d = Ctrl::new(Kind::Done, 0);
                d.val = s.median;
                c.send(&d)?;
            }
            if c.bye {
                break;
            }
        }
        let _ = c.ep.disconnect();
        Ok(())
    }

    fn send(&mut self, m: &Ctrl) -> Result<()> {
        let slot = RING + self.send_slot % RING;
        self.send_slot += 1;
        let (b, len) = m.encode();
        self.ctl.write(slot * CTRL, &b[..len as usize])?;
        self.ep.post_send(
            &[Sge::new(&*self.ctl_lmr, slot * CTRL, len)],
            Cookie(SEND_BIT | slot),
            DtoFlags::SUPPRESS,
        )
    }

    /// Waits for the next control message, answering the peer's requests
    /// (notify → ack, ping → write back + pong) on the way.
    fn next(&mut self) -> Result<Ctrl> {
        loop {
            let stuck = stuck_after();
            stages::stamp(Stage::WaitBegun);
            let ev = self.evd.wait(Some(stuck), 1);
            stages::stamp(Stage::WaitReturned);
            if matches!(ev, Err(Error::Timeout)) {
                for (k, v) in self.ep.attr().notes {
                    eprintln!("# stuck: {k} = {v}");
                }
            }
            let c = match ev? {
                Event::Dto(c) => c,
                _ => continue,
            };
            c.result()?;
            if c.cookie.0 & SEND_BIT != 0 {
                continue;
            }
            let slot = c.cookie.0;
            // What arrived (the rest of the slot holds older bytes).
            let mut b = [0u8; CTRL as usize];
            let got = c.bytes.min(CTRL) as usize;
            self.ctl.read(slot * CTRL, &mut b[..got])?;
            self.ep.post_recv(
                &[Sge::new(&*self.ctl_lmr, slot * CTRL, CTRL)],
                Cookie(slot),
                DtoFlags::empty(),
            )?;
            let m = Ctrl::decode(&b)?;
            match m.kind {
                Kind::Notify => self.send(&Ctrl::new(Kind::Ack, m.seq))?,
                Kind::Ping => {
                    let peer =
                        self.peer.ok_or_else(|| Error::Protocol("ping before hello".into()))?;
                    if m.size > 0 {
                        self.ep.post_rdma_write(
                            &[Sge::new(&*self.data_lmr, 0, m.size)],
                            peer.at(0),
                            Cookie(1),
                            DtoFlags::SUPPRESS,
                        )?;
                    }
                    self.send(&Ctrl::new(Kind::Pong, m.seq))?;
                    stages::stamp(Stage::Posted);
                }
                Kind::Done => self.peer_done = Some(m.val),
                Kind::Bye => {
                    print_stages("server");
                    self.bye = true;
                }
                _ => {}
            }
            return Ok(m);
        }
    }

    fn wait_for(&mut self, kind: Kind, seq: u64) -> Result<()> {
        loop {
            let m = self.next()?;
            if m.kind == kind && m.seq == seq {
                return Ok(());
            }
            if m.kind == Kind::Bibw {
                self.peer_bibw = Some(m);
            }
        }
    }

    /// The bandwidth loop: `warmup + iters` samples of 20 suppressed writes
    /// and a notify. Returns the bandwidth summary (Mbit/s) and the mean
    /// (post, wait) time per sample in microseconds.
    ///
    /// # Errors
    /// Transfer failures.
    pub(crate) fn bw_loop(
        &mut self,
        size: u64,
        iters: u64,
        warmup: u64,
    ) -> Result<(Summary, (f64, f64))> {
        let (mut rates, post_t, wait_t) = self.bw_samples(size, iters, warmup)?;
        let n = iters.max(1) as f64;
        Ok((
            summarize(&mut rates),
            (post_t.as_secs_f64() / n * 1e6, wait_t.as_secs_f64() / n * 1e6),
        ))
    }

    /// [`Conn::bw_loop`]'s samples (Mbit/s, in order) and the total time
    /// the measured samples spent posting and waiting.
    ///
    /// # Errors
    /// Transfer failures.
    pub(crate) fn bw_samples(
        &mut self,
        size: u64,
        iters: u64,
        warmup: u64,
    ) -> Result<(Vec<f64>, Duration, Duration)> {
        let peer = self.peer.ok_or_else(|| Error::Protocol("no peer buffer".into()))?;
        let mut rates = Vec::with_capacity(iters as usize);
        let (mut post_t, mut wait_t) = (Duration::ZERO, Duration::ZERO);
        let lmr = self.data_lmr.clone();
        let sge = [Sge::new(&*lmr, 0, size)];
        for i in 0..warmup + iters {
            if self.validate {
                lmr.region().write(0, &sample_pattern(i, size))?;
            }
            let seq = self.send_slot + 1_000_000;
            let t0 = Instant::now();
            for _ in 0..WRITES_PER_SAMPLE {
                self.ep.post_rdma_write(&sge, peer.at(0), Cookie(0), DtoFlags::SUPPRESS)?;
            }
            self.send(&Ctrl::new(Kind::Notify, seq))?;
            let t1 = Instant::now();
            self.wait_for(Kind::Ack, seq)?;
            let t2 = Instant::now();
            if i >= warmup {
                let secs = (t2 - t0).as_secs_f64();
                rates.push((WRITES_PER_SAMPLE * size * 8) as f64 / secs / 1e6);
                post_t += t1 - t0;
                wait_t += t2 - t1;
            }
            if self.validate {
                self.check_sample(i, size, &peer)?;
            }
        }
        Ok((rates, post_t, wait_t))
    }

    /// `--validate`: reads the peer's buffer back (the writes before the
    /// acknowledged notify have landed) and compares it with sample `i`'s
    /// pattern, byte for byte.
    fn check_sample(&mut self, i: u64, size: u64, peer: &RmrContext) -> Result<()> {
        if self.check.as_ref().is_none_or(|(m, _)| (m.len() as u64) < size) {
            let m = MemRegion::new(size.max(64) as usize);
            let l = self.pz.register_all(&m, Access::LOCAL_WRITE)?;
            self.check = Some((m, l));
        }
        let (mem, lmr) = self.check.clone().expect("made above");
        mem.fill(0, size, 0)?;
        self.ep.post_rdma_read(
            &[Sge::new(&*lmr, 0, size)],
            peer.at(0),
            Cookie(READ_BIT),
            DtoFlags::empty(),
        )?;
        loop {
            match self.evd.wait(Some(stuck_after()), 1)? {
                Event::Dto(c) if c.cookie == READ_BIT => {
                    c.result()?;
                    break;
                }
                Event::Dto(c) if c.cookie.0 & SEND_BIT != 0 => c.result()?,
                Event::Dto(c) => {
                    return Err(Error::Protocol(format!(
                        "validation: unexpected completion {c:?}"
                    )));
                }
                _ => {}
            }
        }
        let (got, want) = (mem.to_vec(0, size as usize)?, sample_pattern(i, size));
        match got.iter().zip(&want).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(k) => Err(Error::Protocol(format!(
                "validation: sample {i} of {size} bytes: byte {k} is {:#04x}, {:#04x} was written",
                got[k], want[k]
            ))),
        }
    }

    /// Bi-directional bandwidth: the peer runs the same loop at the same time.
    /// Returns (own direction summary, peer's median), Mbit/s.
    ///
    /// # Errors
    /// Transfer failures.
    pub(crate) fn bibw(&mut self, size: u64, iters: u64, warmup: u64) -> Result<(Summary, f64)> {
        let mut m = Ctrl::new(Kind::Bibw, 0);
        m.size = size;
        m.iters = iters + warmup;
        self.peer_done = None;
        self.send(&m)?;
        let (mut s, _) = self.bw_loop(size, iters + warmup, 0)?;
        while self.peer_done.is_none() {
            self.next()?;
        }
        // Both directions ran the same number of samples at the same time.
        if warmup > 0 && s.n > 0 {
            s.n = iters as usize;
        }
        Ok((s, self.peer_done.unwrap_or(0.0)))
    }

    /// Write+notify ping-pong; returns the half round trip summary in microseconds.
    ///
    /// # Errors
    /// Transfer failures.
    pub(crate) fn lat(&mut self, size: u64, iters: u64, warmup: u64) -> Result<Summary> {
        let mut v = self.lat_samples(size, iters, warmup)?;
        Ok(summarize(&mut v))
    }

    /// [`Conn::lat`]'s samples (half round trips, microseconds), in order.
    ///
    /// # Errors
    /// Transfer failures.
    pub(crate) fn lat_samples(&mut self, size: u64, iters: u64, warmup: u64) -> Result<Vec<f64>> {
        let peer = self.peer.ok_or_else(|| Error::Protocol("no peer buffer".into()))?;
        let mut v = Vec::with_capacity(iters as usize);
        let lmr = self.data_lmr.clone();
        let sge = [Sge::new(&*lmr, 0, size)];
        for i in 0..warmup + iters {
            let seq = i + 1;
            let t0 = Instant::now();
            if size > 0 {
                self.ep.post_rdma_write(&sge, peer.at(0), Cookie(0), DtoFlags::SUPPRESS)?;
            }
            let mut p = Ctrl::new(Kind::Ping, seq);
            p.size = size;
            self.send(&p)?;
            stages::stamp(Stage::Posted);
            self.wait_for(Kind::Pong, seq)?;
            if i >= warmup {
                v.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
        }
        Ok(v)
    }

    /// Ends the session.
    pub(crate) fn bye(mut self) {
        if std::env::var_os("RMR_BENCH_NOTES").is_some() {
            for (k, v) in self.ep_notes() {
                eprintln!("# end: {k} = {v}");
            }
        }
        print_stages("client");
        let _ = self.send(&Ctrl::new(Kind::Bye, 0));
        std::thread::sleep(Duration::from_millis(20));
        let _ = self.ep.disconnect();
    }

    /// The EP's attributes (engine and thread binding for multirail).
    pub(crate) fn ep_notes(&self) -> Vec<(String, String)> {
        self.ep.attr().notes
    }

    /// The send buffer of each of the EP's connections (its rails' for a
    /// multirail EP): the tcp backend's `sndbuf` notes, separated by ` | `;
    /// `None` where no endpoint has one.
    pub(crate) fn sndbuf(&self) -> Option<String> {
        let eps = match self.ep.as_any().downcast_ref::<multirail::MrEp>() {
            Some(mr) => mr.rail_eps(),
            None => vec![self.ep.clone()],
        };
        let all: Vec<String> =
            eps.iter().filter_map(|e| e.attr().note("sndbuf").map(str::to_string)).collect();
        (!all.is_empty()).then(|| all.join(" | "))
    }
}
