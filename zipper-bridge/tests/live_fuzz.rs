//! A live bridge fed hostile bytes on both sides. A real bridge runs
//! between `127.0.61.1` (side A) and `.2` (side B). An honest client (A,
//! `.4`) reaches an honest target (B, `.3`) through it, and two proxies sit
//! in the streams the bridge reads:
//! - proxy A (`.6`) between the client and the bridge;
//! - proxy B (`.5`) between the bridge and the target; the client names
//!   it as its target.
//!
//! The proxies parse the tcp backend's frames and, at a rate drawn per
//! session, mutate what flows into the bridge:
//! - bits of a payload: the bridge's control messages in sends, the chunks
//!   written into its rings, the hellos in connection requests;
//! - whole payloads overwritten;
//! - header fields (sequence, acknowledgement, key, address, arguments,
//!   flags);
//! - frames dropped or sent twice;
//! - a stream cut.
//!
//! Each session connects, then writes, sends and reads back checked
//! patterns until something fails. What must hold for every input:
//! - no thread panics;
//! - memory the target or the client did not grant (canary pages around
//!   the granted ones) is never written;
//! - every session ends within bounded waits, by a typed error or the
//!   harness's timeout;
//! - an honest session through the same bridge works after every 8
//!   sessions and at the end;
//! - no bridged connection outlives its endpoints.
//!
//! `RMR_TEST_BRIDGE_FUZZ_SECS` (default 15) sets the length, and
//! `RMR_TEST_BRIDGE_FUZZ_SEED` the seed (printed, to replay a run);
//! `scripts/fuzz-bridge.sh` runs the long campaign.

use backend_tcp::wire::{HDR, Header, StreamState, data_hdr_len};
use rmr_api::{Access, Cookie, DtoFlags, EpEvds, Evd, Event, Ia, MemRegion, RmrContext, Sge};
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zipper_bridge::{Bridge, BridgeConfig, BridgeIa, ClientConfig};

const NET: &str = "127.0.61";
const BRIDGE_PORT: u16 = 7795;
const TARGET_PORT: u16 = 7796;
const PROXY_A_PORT: u16 = 7797;
const PROXY_B_PORT: u16 = 7798;
const PAGE: u64 = 64 << 10;
/// How long a hostile session's step may take before the harness ends it
/// (an honest session's: ten times as long, on a busy 2-CPU machine).
const OP_WAIT: Duration = Duration::from_secs(1);

fn ip(h: u8) -> IpAddr {
    format!("{NET}.{h}").parse().unwrap()
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// What the proxies do to the current session's frames.
struct Plan {
    /// One frame in `rate` is mutated; 0: none (an honest session).
    rate: AtomicU32,
    rng: Mutex<Rng>,
    mutations: AtomicU64,
    /// The kinds of mutation made, by index (see [`mutate`]).
    kinds: [AtomicU64; 7],
}

/// Mutates one frame; returns what to send (nothing: dropped; twice:
/// duplicated) or `None` to cut the stream.
fn mutate(plan: &Plan, h: &mut Header, payload: &mut [u8]) -> Option<usize> {
    let rate = plan.rate.load(Ordering::Relaxed);
    let mut r = plan.rng.lock().unwrap();
    if rate == 0 || r.below(u64::from(rate)) != 0 {
        return Some(1);
    }
    plan.mutations.fetch_add(1, Ordering::Relaxed);
    let kind = r.below(7) as usize;
    plan.kinds[kind].fetch_add(1, Ordering::Relaxed);
    match kind {
        0 | 1 if !payload.is_empty() => {
            for _ in 0..=r.below(4) {
                let i = r.below(payload.len() as u64) as usize;
                payload[i] ^= 1 << r.below(8);
            }
        }
        2 if !payload.is_empty() => {
            let (a, n) = (r.below(payload.len() as u64) as usize, 1 + r.below(64) as usize);
            for b in payload.iter_mut().skip(a).take(n) {
                *b = r.next() as u8;
            }
        }
        0..=3 => {
            let bit = 1u64 << r.below(64);
            match r.below(6) {
                // A request carries the low 16 bits of its sequence.
                0 => h.seq ^= 1 << r.below(16),
                1 => h.ack ^= bit,
                2 => h.key ^= bit,
                3 => h.addr ^= bit,
                4 => h.arg0 ^= bit,
                _ => h.flags ^= 1 << r.below(8),
            }
        }
        4 => return Some(0),
        5 => return Some(2),
        _ => return None,
    }
    Some(1)
}

/// Copies frames from `from` to `to`, mutating them when `hostile`: the
/// handshake's 56-byte header first, then live-stream frames (read with
/// the stream's state, written again with the proxy's own).
fn pump(mut from: TcpStream, mut to: TcpStream, plan: Arc<Plan>, hostile: bool) {
    let mut hdr = [0u8; HDR];
    let mut rx: Option<StreamState> = None;
    let mut tx_ack = 0u64;
    loop {
        let mut h = match rx.as_mut() {
            None => {
                if from.read_exact(&mut hdr).is_err() {
                    break;
                }
                Header::decode(&hdr)
            }
            Some(st) => {
                if from.read_exact(&mut hdr[..2]).is_err() {
                    break;
                }
                let Some(n) = data_hdr_len(hdr[0], hdr[1]) else { break };
                if from.read_exact(&mut hdr[2..n]).is_err() {
                    break;
                }
                match st.decode(&hdr[..n]) {
                    Ok(Some((h, _))) => h,
                    _ => break,
                }
            }
        };
        let mut payload = vec![0u8; h.len as usize];
        if from.read_exact(&mut payload).is_err() {
            break;
        }
        let copies = if hostile { mutate(&plan, &mut h, &mut payload) } else { Some(1) };
        let Some(copies) = copies else { break };
        if copies == 0 && rx.is_some() {
            // Dropped: not encoded either, so the frames after it carry
            // the acks the receiver has not seen.
            continue;
        }
        let frame = if rx.is_none() {
            rx = Some(StreamState::default());
            [h.encode().as_slice(), &payload].concat()
        } else {
            let n = h.encode_data(&mut tx_ack, &mut hdr);
            [&hdr[..n], &payload].concat()
        };
        if (0..copies).any(|_| to.write_all(&frame).is_err()) {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// A proxy on `listen` to `upstream`, dialing from `src`; it mutates what
/// the upstream sends when `into_client`, else what the client sends.
fn proxy(
    listen: SocketAddr,
    src: IpAddr,
    upstream: SocketAddr,
    plan: Arc<Plan>,
    into_client: bool,
) {
    let l = TcpListener::bind(listen).unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            let s =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            s.bind(&SocketAddr::new(src, 0).into()).unwrap();
            if s.connect(&upstream.into()).is_err() {
                continue;
            }
            let (u, c) = (TcpStream::from(s), c);
            let _ = (u.set_nodelay(true), c.set_nodelay(true));
            let (u2, c2) = (u.try_clone().unwrap(), c.try_clone().unwrap());
            let (p1, p2) = (plan.clone(), plan.clone());
            std::thread::spawn(move || pump(c, u, p1, !into_client));
            std::thread::spawn(move || pump(u2, c2, p2, into_client));
        }
    });
}

/// How a session ended.
#[derive(Debug, Default)]
struct Tally {
    sessions: u64,
    completed: u64,
    typed_errors: u64,
    timeouts: u64,
    honest: u64,
}

/// The target's side: memory with canaries around the granted page.
struct Target {
    ia: Arc<dyn Ia>,
    pz: Arc<dyn rmr_api::Pz>,
    psp_evd: Arc<dyn Evd>,
    _psp: Arc<dyn rmr_api::Psp>,
    mem: Arc<MemRegion>,
    ctx: RmrContext,
    _lmr: Arc<dyn rmr_api::Lmr>,
}

const CANARY: u8 = 0xc3;

fn canaries_intact(mem: &MemRegion) -> bool {
    [0, 2 * PAGE]
        .iter()
        .all(|&o| mem.to_vec(o, PAGE as usize).unwrap().iter().all(|&b| b == CANARY))
}

/// One session: connect through both proxies, then write, send and read
/// back patterns; `Ok(true)` when every step completed.
fn session(
    ia_a: &Arc<dyn Ia>,
    t: &Target,
    n: u64,
    rng: &mut Rng,
    cmem: &Arc<MemRegion>,
    honest: bool,
) -> Result<bool, String> {
    let op_wait = if honest { OP_WAIT * 10 } else { OP_WAIT };
    let pz = ia_a.create_pz().map_err(|e| e.to_string())?;
    let evd = ia_a.create_evd().map_err(|e| e.to_string())?;
    let ep = ia_a.create_ep(&pz, &EpEvds::single(&evd)).map_err(|e| e.to_string())?;
    let tevd = t.ia.create_evd().unwrap();
    let tep = t.ia.create_ep(&t.pz, &EpEvds::single(&tevd)).unwrap();
    // The session's own request is accepted; a late one of an earlier
    // session (or one whose data a proxy changed) is refused.
    let pd = format!("fuzz session {n}").into_bytes();
    let inbox = MemRegion::new(16 * 64);
    let il = t.pz.register_all(&inbox, Access::LOCAL_WRITE).unwrap();
    for i in 0..16 {
        let _ = tep.post_recv(&[Sge::new(&*il, 64 * i, 64)], Cookie(i), DtoFlags::empty());
    }
    let done = Arc::new(AtomicBool::new(false));
    let server = {
        let (pevd, tep, ctx, done) = (t.psp_evd.clone(), tep.clone(), t.ctx, done.clone());
        let pd = pd.clone();
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Ok(Event::ConnectionRequest(cr)) =
                    pevd.wait(Some(Duration::from_millis(50)), 1)
                {
                    if cr.private_data() == pd.as_slice() {
                        let _ = cr.accept(&tep, &ctx.to_bytes());
                    } else {
                        let _ = cr.reject(b"");
                    }
                }
            }
        })
    };
    let result = (|| {
        let reply = ep
            .connect(&ip(5).to_string(), PROXY_B_PORT, &pd, op_wait * 2)
            .map_err(|e| format!("connect: {e}"))?;
        let ctx = RmrContext::from_bytes(&reply).map_err(|e| format!("reply: {e}"))?;
        let src = MemRegion::new(4096);
        let sl = pz.register_all(&src, Access::empty()).map_err(|e| e.to_string())?;
        // The client's read buffer: granted page 1 of three.
        let cl = pz.register(cmem, PAGE, PAGE, Access::LOCAL_WRITE).map_err(|e| e.to_string())?;
        let wait = |cookie: u64| -> Result<(), String> {
            let deadline = Instant::now() + op_wait;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match evd.wait(Some(left), 1) {
                    Ok(Event::Dto(c)) if c.cookie.0 == cookie => {
                        return c.result().map(|_| ()).map_err(|e| format!("dto: {e}"));
                    }
                    Ok(Event::Broken { reason, .. }) => return Err(format!("broken: {reason}")),
                    Ok(Event::Disconnected { .. }) => return Err("disconnected".into()),
                    Ok(_) => {}
                    Err(rmr_api::Error::Timeout) => return Err("TIMEOUT".into()),
                    Err(e) => return Err(format!("wait: {e}")),
                }
            }
        };
        for i in 0..6u64 {
            let fill = rng.next() as u8;
            src.fill(0, 4096, fill).unwrap();
            let off = rng.below((PAGE - 4096) / 8) * 8;
            ep.post_rdma_write(
                &[Sge::new(&*sl, 0, 4096)],
                ctx.at(off),
                Cookie(3 * i),
                DtoFlags::empty(),
            )
            .map_err(|e| format!("post write: {e}"))?;
            wait(3 * i)?;
            ep.post_send(&[Sge::new(&*sl, 0, 64)], Cookie(3 * i + 1), DtoFlags::empty())
                .map_err(|e| format!("post send: {e}"))?;
            wait(3 * i + 1)?;
            ep.post_rdma_read(
                &[Sge::new(&*cl, 0, 4096)],
                ctx.at(off),
                Cookie(3 * i + 2),
                DtoFlags::empty(),
            )
            .map_err(|e| format!("post read: {e}"))?;
            wait(3 * i + 2)?;
        }
        Ok(())
    })();
    let _ = ep.disconnect();
    let _ = tep.disconnect();
    done.store(true, Ordering::Relaxed);
    server.join().unwrap();
    result.map(|()| true)
}

#[test]
fn a_live_bridge_fed_hostile_bytes_stays_sound() {
    let secs: u64 =
        std::env::var("RMR_TEST_BRIDGE_FUZZ_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(15);
    let seed: u64 = std::env::var("RMR_TEST_BRIDGE_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
                as u64
                | 1
        });
    println!("seed {seed} (RMR_TEST_BRIDGE_FUZZ_SEED replays the sessions' choices)");
    let panics = Arc::new(AtomicU64::new(0));
    let p2 = panics.clone();
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        p2.fetch_add(1, Ordering::SeqCst);
        default_hook(info);
    }));

    zipper_bridge::register();
    let bridge = Bridge::start(BridgeConfig {
        a: format!("tcp:{}", ip(1)),
        b: format!("tcp:{}", ip(2)),
        port: BRIDGE_PORT,
        allow: vec![format!("{NET}.0/24").parse().unwrap()],
        drain: Duration::from_millis(100),
        ..BridgeConfig::default()
    })
    .expect("bridge");
    let plan = Arc::new(Plan {
        rate: AtomicU32::new(0),
        rng: Mutex::new(Rng(seed ^ 0x9e37_79b9)),
        mutations: AtomicU64::new(0),
        kinds: Default::default(),
    });
    let sa = |h: u8, p: u16| SocketAddr::new(ip(h), p);
    proxy(sa(6, PROXY_A_PORT), ip(6), sa(1, BRIDGE_PORT), plan.clone(), false);
    proxy(sa(5, PROXY_B_PORT), ip(5), sa(3, TARGET_PORT), plan.clone(), true);

    let c = ClientConfig::default();
    let ia_b: Arc<dyn Ia> =
        BridgeIa::new(rmr_api::open(&format!("tcp:{}", ip(3))).unwrap(), None, c.clone());
    let pz = ia_b.create_pz().unwrap();
    let psp_evd = ia_b.create_evd().unwrap();
    let psp = ia_b.create_psp(TARGET_PORT, &psp_evd).unwrap();
    let mem = MemRegion::new(3 * PAGE as usize);
    mem.fill(0, 3 * PAGE, CANARY).unwrap();
    let lmr = pz.register(&mem, PAGE, PAGE, Access::ALL).unwrap();
    let t = Target { ctx: lmr.rmr_context(), ia: ia_b, pz, psp_evd, _psp: psp, mem, _lmr: lmr };
    let ia_a: Arc<dyn Ia> = BridgeIa::new(
        rmr_api::open(&format!("tcp:{}", ip(4))).unwrap(),
        Some((ip(6).to_string(), PROXY_A_PORT)),
        c,
    );
    let cmem = MemRegion::new(3 * PAGE as usize);
    cmem.fill(0, 3 * PAGE, CANARY).unwrap();

    // A watchdog: a session that never returns (a wait that is not bounded
    // after all) ends the run with a message instead of hanging it.
    let beat = Arc::new(AtomicU64::new(0));
    let b2 = beat.clone();
    std::thread::spawn(move || {
        let mut last = (0, Instant::now());
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let now = b2.load(Ordering::SeqCst);
            if now != last.0 {
                last = (now, Instant::now());
            } else if last.1.elapsed() > Duration::from_secs(120) {
                eprintln!(
                    "live fuzz: session {now} ran over 120 s (seed {seed}): a wait is unbounded"
                );
                std::process::abort();
            }
        }
    });
    let mut rng = Rng(seed);
    let mut tally = Tally::default();
    let mut findings = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        let honest = tally.sessions % 8 == 7;
        let rate = if honest { 0 } else { [2, 4, 8, 16, 64][rng.below(5) as usize] };
        plan.rate.store(rate, Ordering::SeqCst);
        let t0 = Instant::now();
        let r = session(&ia_a, &t, tally.sessions, &mut rng, &cmem, honest);
        tally.sessions += 1;
        beat.store(tally.sessions, Ordering::SeqCst);
        match &r {
            Ok(_) => tally.completed += 1,
            Err(e) if e.contains("TIMEOUT") => tally.timeouts += 1,
            Err(_) => tally.typed_errors += 1,
        }
        if honest {
            tally.honest += 1;
            if r.is_err() {
                findings.push(format!("honest session {} failed: {r:?}", tally.sessions));
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "a session took {:?}", t0.elapsed());
        assert!(
            canaries_intact(&t.mem),
            "session {}: the target's ungranted memory was written",
            tally.sessions
        );
        assert!(
            canaries_intact(&cmem),
            "session {}: the client's ungranted memory was written",
            tally.sessions
        );
        assert_eq!(
            panics.load(Ordering::SeqCst),
            0,
            "a thread panicked (session {}, seed {seed})",
            tally.sessions
        );
    }
    // A last honest session, then no connection may outlive its endpoints.
    plan.rate.store(0, Ordering::SeqCst);
    let last = session(&ia_a, &t, u64::MAX, &mut rng, &cmem, true);
    let deadline = Instant::now() + Duration::from_secs(30);
    while bridge.connections() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let kinds: Vec<u64> = plan.kinds.iter().map(|k| k.load(Ordering::Relaxed)).collect();
    println!(
        "{secs} s, seed {seed}: {tally:?}, {} mutations (payload bits {}+{}, payload bytes {}, header fields {}, dropped {}, doubled {}, cut {}), bridge connections left {}",
        plan.mutations.load(Ordering::Relaxed),
        kinds[0],
        kinds[1],
        kinds[2],
        kinds[3],
        kinds[4],
        kinds[5],
        kinds[6],
        bridge.connections()
    );
    assert!(findings.is_empty(), "{findings:?}");
    assert!(last.is_ok(), "the last honest session: {last:?}");
    assert_eq!(
        bridge.connections(),
        0,
        "bridged connections outlived their endpoints: {:?}",
        bridge.details()
    );
    assert!(tally.sessions > tally.honest, "no hostile session ran");
    assert_eq!(panics.load(Ordering::SeqCst), 0);
    bridge.stop();
}
