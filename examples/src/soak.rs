//! The soak: many endpoints, many outstanding DTOs, every byte checked, for
//! a bounded time, over `tcp` and over `multirail` (two loopback rails).
//!
//! Each client EP keeps `window` rounds in flight, one per slot. A round
//! RDMA-writes a fresh pattern of random length (1 B .. `max_len`) into its
//! slot of the server's region, then sends a notify carrying the pattern's
//! checksum; the server, on the receive, checksums the slot (uDAPL's rule:
//! a write posted before a send is visible when its receive completes) and
//! replies ok or bad. Every fourth round the client also RDMA-reads the
//! slot back and checks it. A round that never completes is "lost". The
//! process's RSS is sampled throughout: after the warm-up it must stay flat.

use rmr::Cookie;
use rmr::{Access, DtoFlags, EpEvds, Error, Event, Ia, MemRegion, Result, RmrContext, Sge};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Clone, Debug)]
pub struct SoakConfig {
    /// How long to keep starting rounds.
    pub secs: f64,
    /// Client/server EP pairs per transport.
    pub eps: usize,
    /// Rounds in flight per EP.
    pub window: usize,
    /// Largest write, bytes.
    pub max_len: usize,
    /// Transports: `tcp`, `multirail`.
    pub transports: Vec<String>,
}

impl Default for SoakConfig {
    fn default() -> Self {
        SoakConfig {
            secs: 60.0,
            eps: 8,
            window: 16,
            max_len: 256 << 10,
            transports: vec!["tcp".into(), "multirail".into()],
        }
    }
}

/// What a transport's soak did.
#[derive(Clone, Debug, Default)]
pub struct SoakReport {
    /// `tcp` or `multirail`.
    pub transport: String,
    /// Rounds started and rounds whose reply (and read-back) arrived.
    pub rounds_started: u64,
    /// Rounds finished (verified by the server, and by the client's read-back where one was made).
    pub rounds_done: u64,
    /// DTOs posted (writes, sends, receives, reads) on the client side.
    pub dtos: u64,
    /// Bytes whose checksum was verified (server side after writes, client side after reads).
    pub bytes_verified: u64,
    /// Checksum mismatches found by the server after a write + notify (must be 0).
    pub mismatches: u64,
    /// Checksum mismatches found by the client after a read-back (must be 0).
    pub read_mismatches: u64,
    /// Completions with an error status (must be 0).
    pub errors: u64,
}

/// The whole run: one report per transport and the RSS figures.
#[derive(Clone, Debug, Default)]
pub struct SoakResult {
    /// Per transport.
    pub reports: Vec<SoakReport>,
    /// RSS after the warm-up, at the end, and the largest seen (bytes).
    pub rss_start: u64,
    /// RSS at the last sample before the end of the run (buffers still registered).
    pub rss_end: u64,
    /// RSS once everything was torn down.
    pub rss_after: u64,
    /// Largest RSS sampled.
    pub rss_max: u64,
    /// Wall time.
    pub secs: f64,
}

/// Resident set size of this process (bytes), from /proc.
pub fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

/// Word-at-a-time checksum.
pub fn checksum(b: &[u8]) -> u64 {
    let mut h = 0x9e37_79b9_7f4a_7c15u64 ^ b.len() as u64;
    let mut it = b.chunks_exact(8);
    for w in &mut it {
        h = (h ^ u64::from_le_bytes(w.try_into().expect("8"))).wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 29;
    }
    for &x in it.remainder() {
        h = (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3);
    }
    h
}

fn pattern_into(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut it = buf.chunks_exact_mut(8);
    for w in &mut it {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes());
    }
    for b in it.into_remainder() {
        x ^= x << 13;
        *b = x as u8;
    }
}

fn specs(t: &str) -> Result<(String, String)> {
    match t {
        "tcp" => Ok(("tcp:127.0.0.1".into(), "tcp:127.0.0.1".into())),
        "multirail" => {
            let s = std::env::var("RMR_TEST_SOAK_MR_SPEC").unwrap_or_else(|_| {
                "multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine=pinned;policy=even;threshold=16K"
                    .into()
            });
            Ok((s.clone(), s))
        }
        other => Err(Error::invalid(format!("unknown soak transport {other}"))),
    }
}

/// Message layout (32 bytes): kind, slot, len, seed/ok, checksum.
const MSG: u64 = 32;
const NOTIFY: u64 = 1;
const REPLY: u64 = 2;

fn put_msg(m: &MemRegion, off: u64, v: [u64; 4]) -> Result<()> {
    let mut b = [0u8; MSG as usize];
    for (i, x) in v.iter().enumerate() {
        b[8 * i..8 * i + 8].copy_from_slice(&x.to_le_bytes());
    }
    m.write(off, &b)
}

fn get_msg(m: &MemRegion, off: u64) -> Result<[u64; 4]> {
    let mut b = [0u8; MSG as usize];
    m.read(off, &mut b)?;
    Ok(std::array::from_fn(|i| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8"))))
}

fn cookie(ep: usize, x: usize) -> u64 {
    ((ep as u64) << 32) | x as u64
}

fn split(c: u64) -> (usize, usize) {
    ((c >> 32) as usize, (c & 0xffff_ffff) as usize)
}

/// Server side: accepts `eps` EPs, verifies every notify's slot, replies.
fn server(
    ia: Arc<dyn Ia>,
    cfg: SoakConfig,
    ready: std::sync::mpsc::Sender<(String, u16)>,
    stop: Arc<AtomicBool>,
) -> Result<(u64, u64)> {
    let (pz, evd, pevd) = (ia.create_pz()?, ia.create_evd()?, ia.create_evd()?);
    let psp = ia.create_psp(0, &pevd)?;
    let slots = cfg.eps * cfg.window;
    let target = MemRegion::new(slots * cfg.max_len);
    let tl =
        pz.register_all(&target, Access::REMOTE_WRITE | Access::REMOTE_READ | Access::LOCAL_WRITE)?;
    // Per EP: `window` receive buffers, then `window` reply buffers.
    let msgs = MemRegion::new(slots * 2 * MSG as usize);
    let ml = pz.register_all(&msgs, Access::LOCAL_WRITE)?;
    let _ = ready.send((psp.address(), psp.service()));
    let mut eps = Vec::new();
    while eps.len() < cfg.eps {
        if let Event::ConnectionRequest(cr) = pevd.wait(Some(Duration::from_secs(30)), 1)? {
            let ep = ia.create_ep(&pz, &EpEvds::single(&evd))?;
            cr.accept(&ep, &tl.rmr_context().to_bytes())?;
            eps.push(ep);
        }
    }
    let recv_off = |e: usize, s: usize| ((e * cfg.window + s) * 2) as u64 * MSG;
    for (e, ep) in eps.iter().enumerate() {
        for s in 0..cfg.window {
            ep.post_recv(
                &[Sge::new(&*ml, recv_off(e, s), MSG)],
                Cookie(cookie(e, s)),
                DtoFlags::empty(),
            )?;
        }
    }
    let (mut verified, mut bad) = (0u64, 0u64);
    while !stop.load(Ordering::Acquire) {
        let ev = match evd.wait(Some(Duration::from_millis(50)), 1) {
            Ok(ev) => ev,
            Err(Error::Timeout) => continue,
            Err(e) => return Err(e),
        };
        let Event::Dto(c) = ev else { continue };
        if c.status == rmr::Status::Flushed {
            // The client finished and disconnected; a round it still
            // waited for would show up there as lost.
            continue;
        }
        c.result()?;
        let (e, r) = split(c.cookie.0);
        let [kind, slot, len, sum] = get_msg(&msgs, recv_off(e, r))?;
        if kind != NOTIFY {
            return Err(Error::Protocol(format!("soak server: message kind {kind}")));
        }
        let at = (e * cfg.window + slot as usize) * cfg.max_len;
        let got = target.to_vec(at as u64, len as usize)?;
        let ok = checksum(&got) == sum;

        verified += len;
        bad += u64::from(!ok);
        eps[e].post_recv(&[Sge::new(&*ml, recv_off(e, r), MSG)], c.cookie, DtoFlags::empty())?;
        // The reply buffer of this slot: the client starts the slot's next
        // round (and so its next reply) only after this reply arrived.
        let rep = recv_off(e, slot as usize) + MSG;
        put_msg(&msgs, rep, [REPLY, slot, len, u64::from(ok)])?;
        eps[e].post_send(&[Sge::new(&*ml, rep, MSG)], Cookie(0), DtoFlags::SUPPRESS)?;
    }
    Ok((verified, bad))
}

/// Client side of one transport. Returns its report.
fn client(
    ia: Arc<dyn Ia>,
    cfg: &SoakConfig,
    addr: &str,
    service: u16,
    rss_probe: &mut dyn FnMut(),
) -> Result<SoakReport> {
    let (pz, evd) = (ia.create_pz()?, ia.create_evd()?);
    let slots = cfg.eps * cfg.window;
    let src = MemRegion::new(slots * cfg.max_len);
    let sl = pz.register_all(&src, Access::LOCAL_WRITE)?;
    let back = MemRegion::new(slots * cfg.max_len);
    let bl = pz.register_all(&back, Access::LOCAL_WRITE)?;
    let msgs = MemRegion::new(slots * 2 * MSG as usize);
    let ml = pz.register_all(&msgs, Access::LOCAL_WRITE)?;
    let mut eps = Vec::new();
    let mut ctx = None;
    for _ in 0..cfg.eps {
        let ep = ia.create_ep(&pz, &EpEvds::single(&evd))?;
        ctx = Some(RmrContext::from_bytes(&ep.connect(
            addr,
            service,
            b"soak",
            Duration::from_secs(20),
        )?)?);
        eps.push(ep);
    }
    let ctx = ctx.expect("at least one EP");
    let mut rep = SoakReport::default();
    let slot_at = |e: usize, s: usize| ((e * cfg.window + s) * cfg.max_len) as u64;
    let msg_at = |e: usize, s: usize| ((e * cfg.window + s) * 2) as u64 * MSG;
    // Per slot: round number, length, checksum, and whether a read-back is out.
    let mut state = vec![(0u64, 0u64, 0u64); slots];
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next_len = move |max: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // Mostly small messages, some large: every size class of the transports.
        let cap = match rng % 8 {
            0..=3 => 4096,
            4..=6 => 64 << 10,
            _ => max,
        }
        .min(max);
        1 + (rng >> 8) as usize % cap
    };
    let start_round = |e: usize,
                       s: usize,
                       st: &mut (u64, u64, u64),
                       rep: &mut SoakReport,
                       len: usize|
     -> Result<()> {
        st.0 += 1;
        let seed = ((e as u64) << 48) ^ ((s as u64) << 32) ^ st.0;
        let mut buf = vec![0u8; len];
        pattern_into(&mut buf, seed);
        src.write(slot_at(e, s), &buf)?;
        st.1 = len as u64;
        st.2 = checksum(&buf);
        let m = msg_at(e, s);
        eps[e].post_rdma_write(
            &[Sge::new(&*sl, slot_at(e, s), len as u64)],
            ctx.at(slot_at(e, s)),
            Cookie(0),
            DtoFlags::SUPPRESS,
        )?;
        put_msg(&msgs, m, [NOTIFY, s as u64, len as u64, st.2])?;
        eps[e].post_send(&[Sge::new(&*ml, m, MSG)], Cookie(0), DtoFlags::SUPPRESS)?;
        rep.rounds_started += 1;
        rep.dtos += 2;
        Ok(())
    };
    // Replies land in receive buffers in arrival order, whatever their slot:
    // a pool of `window` per EP (notify buffer + MSG), reposted once read.
    for (e, ep) in eps.iter().enumerate() {
        for r in 0..cfg.window {
            ep.post_recv(
                &[Sge::new(&*ml, msg_at(e, r) + MSG, MSG)],
                Cookie(cookie(e, r)),
                DtoFlags::empty(),
            )?;
            rep.dtos += 1;
        }
    }
    for e in 0..cfg.eps {
        for s in 0..cfg.window {
            let len = next_len(cfg.max_len);
            start_round(e, s, &mut state[e * cfg.window + s], &mut rep, len)?;
        }
    }
    let t0 = Instant::now();
    let mut last_probe = Instant::now();
    let mut outstanding = slots;
    let mut last_progress = Instant::now();
    while outstanding > 0 {
        if last_probe.elapsed() >= Duration::from_millis(500) {
            rss_probe();
            last_probe = Instant::now();
        }
        let ev = match evd.wait(Some(Duration::from_millis(100)), 1) {
            Ok(ev) => ev,
            Err(Error::Timeout) => {
                if last_progress.elapsed() > Duration::from_secs(60) {
                    return Err(Error::Broken(format!(
                        "soak: {outstanding} rounds lost (no progress for 60 s): {:?}",
                        eps[0].attr().notes
                    )));
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        let Event::Dto(c) = ev else { continue };
        last_progress = Instant::now();
        if !c.status.is_ok() {
            rep.errors += 1;
            return Err(Error::Broken(format!("soak: DTO failed: {c:?}")));
        }
        let (e, x) = split(c.cookie.0);
        let running = t0.elapsed().as_secs_f64() < cfg.secs;
        let (s, i) = match c.op {
            rmr::DtoOp::Recv => {
                let [kind, slot, len, ok] = get_msg(&msgs, msg_at(e, x) + MSG)?;
                eps[e].post_recv(
                    &[Sge::new(&*ml, msg_at(e, x) + MSG, MSG)],
                    c.cookie,
                    DtoFlags::empty(),
                )?;
                rep.dtos += 1;
                let s = slot as usize;
                let i = e * cfg.window + s;
                if kind != REPLY || s >= cfg.window || len != state[i].1 {
                    return Err(Error::Protocol(format!(
                        "soak client: bad reply {kind} {slot} {len}"
                    )));
                }
                rep.bytes_verified += len;
                if ok != 1 {
                    rep.mismatches += 1;
                }
                if state[i].0.is_multiple_of(4) {
                    // Read the slot back (the server no longer touches it).
                    eps[e].post_rdma_read(
                        &[Sge::new(&*bl, slot_at(e, s), len)],
                        ctx.at(slot_at(e, s)),
                        Cookie(cookie(e, s)),
                        DtoFlags::empty(),
                    )?;
                    rep.dtos += 1;
                    continue;
                }
                (s, i)
            }
            rmr::DtoOp::RdmaRead => {
                let i = e * cfg.window + x;
                let got = back.to_vec(slot_at(e, x), state[i].1 as usize)?;
                rep.bytes_verified += state[i].1;
                if checksum(&got) != state[i].2 {
                    rep.read_mismatches += 1;
                }
                (x, i)
            }
            _ => continue,
        };
        rep.rounds_done += 1;
        if running {
            let len = next_len(cfg.max_len);
            start_round(e, s, &mut state[i], &mut rep, len)?;
        } else {
            outstanding -= 1;
        }
    }
    for ep in &eps {
        let _ = ep.disconnect();
    }
    Ok(rep)
}

/// Runs the soak on every configured transport at once (one client and one
/// server thread each), sampling RSS. Errors end the run.
///
/// # Errors
/// A failed DTO, a lost round (no progress for 60 s), or setup failures.
pub fn run(cfg: &SoakConfig) -> Result<SoakResult> {
    let t0 = Instant::now();
    let rss_max = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let rss_start = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let rss_last = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let warm = (cfg.secs * 0.2).clamp(1.0, 10.0);
    let mut handles = Vec::new();
    for t in &cfg.transports {
        let (sa, sb) = specs(t)?;
        let (ia_a, ia_b) = (rmr::open(&sa)?, rmr::open(&sb)?);
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let (c2, s2) = (cfg.clone(), stop.clone());
        let srv = std::thread::Builder::new()
            .name(format!("soak-srv-{t}"))
            .spawn(move || server(ia_b, c2, tx, s2))
            .map_err(|e| Error::io("spawn", e))?;
        let (addr, service) =
            rx.recv().map_err(|_| Error::Broken("soak server did not start".into()))?;
        let (c3, t3, mx, st) = (cfg.clone(), t.clone(), rss_max.clone(), rss_start.clone());
        let last = rss_last.clone();
        let cli = std::thread::Builder::new()
            .name(format!("soak-cli-{t}"))
            .spawn(move || {
                let mut probe = || {
                    let r = rss();
                    mx.fetch_max(r, Ordering::Relaxed);
                    last.store(r, Ordering::Relaxed);
                    if t0.elapsed().as_secs_f64() >= warm {
                        let _ = st.compare_exchange(0, r, Ordering::Relaxed, Ordering::Relaxed);
                    }
                };
                let r = client(ia_a, &c3, &addr, service, &mut probe);
                stop.store(true, Ordering::Release);
                r.map(|mut rep| {
                    rep.transport = t3;
                    rep
                })
            })
            .map_err(|e| Error::io("spawn", e))?;
        handles.push((srv, cli));
    }
    let mut out = SoakResult::default();
    for (srv, cli) in handles {
        let rep = cli.join().map_err(|_| Error::Broken("soak client panicked".into()))??;
        let (verified, bad) =
            srv.join().map_err(|_| Error::Broken("soak server panicked".into()))??;
        // The server counted what it replied: the client must have seen the same.
        if bad != rep.mismatches {
            return Err(Error::Protocol(format!(
                "soak: server saw {bad} mismatches, client was told of {}",
                rep.mismatches
            )));
        }
        let _ = verified;
        out.reports.push(rep);
    }
    out.rss_after = rss();
    out.rss_end = match rss_last.load(Ordering::Relaxed) {
        0 => out.rss_after,
        v => v,
    };
    out.rss_max = rss_max.load(Ordering::Relaxed).max(out.rss_end);
    out.rss_start = match rss_start.load(Ordering::Relaxed) {
        0 => out.rss_end,
        v => v,
    };
    out.secs = t0.elapsed().as_secs_f64();
    Ok(out)
}
