//! The backend conformance suite: the same assertions for every transport,
//! so "passes the suite" means one thing.
//!
//! A backend's `tests/conformance.rs` names a [`Target`] (provider specs for
//! two IAs that can reach each other) and expands [`conformance_suite!`](crate::provider::conformance_suite)
//! inside a module named `conformance`, which generates one `#[test]` per case
//! (`conformance::rdma_read`, `conformance::bad_key`, ...):
//!
//! ```text
//! fn target() -> rmr_api::provider::conformance::Target {
//!     rmr_api::provider::conformance::Target::new("tcp", backend_tcp::register, "tcp:127.0.0.1", "tcp:127.0.0.1")
//! }
//! mod conformance {
//!     rmr_api::provider::conformance_suite!(super::target);
//! }
//! ```
//!
//! A target whose hardware is absent here ([`Target::unavailable`]) prints
//! `SKIPPED: <why>` in every case instead of failing.
//!
//! Heavy cases scale with [`Target::scale`] (a slow provider gives less
//! than one) but never drop below a meaningful size. A case a provider
//! cannot do, as its [`crate::Caps`] say, prints `SKIPPED: <why>` and returns.
#![allow(missing_docs)]

pub mod cases;
pub mod helper;
mod signals;

use crate::ep::{Ep, Psp};
use crate::evd::Evd;
use crate::event::{DtoCompletion, Event};
use crate::ia::{EpEvds, Ia};
use crate::lmr::{Lmr, Pz};
use crate::memory::MemRegion;
use crate::remote::RmrContext;
use crate::types::Access;
use crate::types::Cookie;
use std::sync::Arc;
use std::time::Duration;

/// Generous bound on any single wait in the suite (a hang fails, it never blocks CI).
pub const WAIT: Duration = Duration::from_secs(20);

/// What the suite runs against.
#[derive(Clone)]
pub struct Target {
    /// Short name, printed in messages.
    pub name: &'static str,
    /// Registers the provider(s) the specs need.
    pub register: fn(),
    /// Spec of the active (connecting) side's IA.
    pub spec_a: String,
    /// Spec of the passive (listening) side's IA.
    pub spec_b: String,
    /// Work multiplier for the heavy cases (1.0 = full size).
    pub scale: f64,
    /// When set, every case prints `SKIPPED: <why>` and passes (a backend
    /// whose hardware is absent here, e.g. verbs without an RDMA device).
    skip: Option<String>,
}

impl Target {
    /// A target at full scale.
    pub fn new(name: &'static str, register: fn(), spec_a: &str, spec_b: &str) -> Target {
        Target {
            name,
            register,
            spec_a: spec_a.into(),
            spec_b: spec_b.into(),
            scale: 1.0,
            skip: None,
        }
    }

    /// A target that cannot run here: every case prints `SKIPPED: <why>`
    /// and returns (say what is missing, e.g. "no RDMA device (...)").
    pub fn unavailable(name: &'static str, register: fn(), why: impl Into<String>) -> Target {
        let mut t = Target::new(name, register, "", "");
        t.skip = Some(why.into());
        t
    }

    /// Why the suite is skipped on this target, if it is.
    pub fn skip_reason(&self) -> Option<&str> {
        self.skip.as_deref()
    }

    /// Prints `SKIPPED: <why>` and returns true when the target is unavailable.
    pub fn skipped(&self) -> bool {
        match &self.skip {
            Some(why) => {
                println!("SKIPPED: {why}");
                true
            }
            None => false,
        }
    }

    /// The same target, and every buffer the suite registers from now on in
    /// this process allocated with [`MemRegion::shared`] rather than
    /// [`MemRegion::new`] (a backend with a path of its own for shared
    /// memory runs the whole suite on it; a test binary holds one target).
    pub fn shared_regions(self) -> Target {
        SHARED_BUFS.store(true, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// The same target with a work multiplier.
    pub fn scaled(mut self, scale: f64) -> Target {
        self.scale = scale;
        self
    }

    /// `n` scaled, but at least `min`.
    pub fn n(&self, n: usize, min: usize) -> usize {
        ((n as f64 * self.scale) as usize).max(min)
    }

    /// Opens both IAs.
    pub fn open(&self) -> (Arc<dyn Ia>, Arc<dyn Ia>) {
        (self.register)();
        let a = crate::open(&self.spec_a).unwrap_or_else(|e| panic!("open {}: {e}", self.spec_a));
        let b = crate::open(&self.spec_b).unwrap_or_else(|e| panic!("open {}: {e}", self.spec_b));
        (a, b)
    }
}

/// A connected pair of endpoints with their objects.
pub struct Pair {
    pub ia_a: Arc<dyn Ia>,
    pub ia_b: Arc<dyn Ia>,
    pub pz_a: Arc<dyn Pz>,
    pub pz_b: Arc<dyn Pz>,
    /// DTO completions of side a (requests and receives).
    pub evd_a: Arc<dyn Evd>,
    /// DTO completions of side b.
    pub evd_b: Arc<dyn Evd>,
    /// Connection events of side a.
    pub cevd_a: Arc<dyn Evd>,
    /// Connection events of side b.
    pub cevd_b: Arc<dyn Evd>,
    pub a: Arc<dyn Ep>,
    pub b: Arc<dyn Ep>,
    pub psp: Arc<dyn Psp>,
    pub psp_evd: Arc<dyn Evd>,
}

/// Accepts one request arriving on `psp_evd` onto a new EP of `ia`.
pub fn accept_one(
    ia: &Arc<dyn Ia>,
    pz: &Arc<dyn Pz>,
    psp_evd: &Arc<dyn Evd>,
    evds: &EpEvds,
    reply: &[u8],
) -> (Arc<dyn Ep>, Vec<u8>) {
    match psp_evd.wait(Some(WAIT), 1).expect("connection request") {
        Event::ConnectionRequest(cr) => {
            let ep = ia.create_ep(pz, evds).expect("create passive ep");
            let pd = cr.private_data().to_vec();
            cr.accept(&ep, reply).expect("accept");
            (ep, pd)
        }
        e => panic!("expected a connection request, got {e:?}"),
    }
}

/// Connects a new EP of `ia_a` to a new EP of `ia_b` through `psp`.
#[allow(clippy::too_many_arguments)]
pub fn connect_through(
    ia_a: &Arc<dyn Ia>,
    pz_a: &Arc<dyn Pz>,
    evds_a: &EpEvds,
    ia_b: &Arc<dyn Ia>,
    pz_b: &Arc<dyn Pz>,
    evds_b: &EpEvds,
    psp: &Arc<dyn Psp>,
    psp_evd: &Arc<dyn Evd>,
) -> (Arc<dyn Ep>, Arc<dyn Ep>) {
    let a = ia_a.create_ep(pz_a, evds_a).expect("create active ep");
    let (addr, service) = (psp.address(), psp.service());
    let b = std::thread::scope(|s| {
        let a2 = a.clone();
        let h = s.spawn(move || a2.connect(&addr, service, b"from-a", WAIT));
        let (b, pd) = accept_one(ia_b, pz_b, psp_evd, evds_b, b"from-b");
        assert_eq!(pd, b"from-a");
        let reply = h.join().unwrap().expect("connect");
        assert_eq!(reply, b"from-b");
        b
    });
    expect_established(&evds_a.conn);
    expect_established(&evds_b.conn);
    (a, b)
}

impl Pair {
    /// Opens the target's IAs and connects one pair.
    pub fn new(t: &Target) -> Pair {
        let (ia_a, ia_b) = t.open();
        let pz_a = ia_a.create_pz().expect("pz");
        let pz_b = ia_b.create_pz().expect("pz");
        let (evd_a, evd_b) = (ia_a.create_evd().unwrap(), ia_b.create_evd().unwrap());
        let (cevd_a, cevd_b) = (ia_a.create_evd().unwrap(), ia_b.create_evd().unwrap());
        let psp_evd = ia_b.create_evd().unwrap();
        let psp = ia_b.create_psp(0, &psp_evd).expect("psp");
        let (a, b) = connect_through(
            &ia_a,
            &pz_a,
            &evds(&evd_a, &cevd_a),
            &ia_b,
            &pz_b,
            &evds(&evd_b, &cevd_b),
            &psp,
            &psp_evd,
        );
        Pair { ia_a, ia_b, pz_a, pz_b, evd_a, evd_b, cevd_a, cevd_b, a, b, psp, psp_evd }
    }

    /// Connects another pair through the same PSP: side a in `pz_a` reporting
    /// to `evd_a`/`cevd_a`, side b in `self.pz_b` on `self.evd_b`/`self.cevd_b`.
    pub fn connect_more(
        &self,
        pz_a: &Arc<dyn Pz>,
        evd_a: &Arc<dyn Evd>,
        cevd_a: &Arc<dyn Evd>,
    ) -> (Arc<dyn Ep>, Arc<dyn Ep>) {
        connect_through(
            &self.ia_a,
            pz_a,
            &evds(evd_a, cevd_a),
            &self.ia_b,
            &self.pz_b,
            &evds(&self.evd_b, &self.cevd_b),
            &self.psp,
            &self.psp_evd,
        )
    }
}

/// EP EVDs: one for DTOs, one for connection events.
pub fn evds(dto: &Arc<dyn Evd>, conn: &Arc<dyn Evd>) -> EpEvds {
    EpEvds { request: dto.clone(), recv: dto.clone(), conn: conn.clone() }
}

/// Waits for an Established event (skipping nothing else).
pub fn expect_established(cevd: &Arc<dyn Evd>) {
    match cevd.wait(Some(WAIT), 1).expect("established event") {
        Event::Established { .. } => {}
        e => panic!("expected Established, got {e:?}"),
    }
}

/// Waits for the next DTO completion; any other event fails the test.
pub fn next_dto(evd: &Arc<dyn Evd>) -> DtoCompletion {
    match evd.wait(Some(WAIT), 1) {
        Ok(Event::Dto(c)) => c,
        Ok(e) => panic!("expected a DTO completion, got {e:?}"),
        Err(e) => panic!("no DTO completion within {WAIT:?}: {e}"),
    }
}

/// Waits for the completion with `cookie`, requiring success.
pub fn expect_ok(evd: &Arc<dyn Evd>, cookie: u64) -> DtoCompletion {
    let c = next_dto(evd);
    assert_eq!(c.cookie.0, cookie, "completion order: got {c:?}");
    assert!(c.status.is_ok(), "DTO {cookie} failed: {c:?}");
    c
}

/// Set by [`Target::shared_regions`]: [`Buf::new`] allocates shared regions.
static SHARED_BUFS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A registered buffer.
pub struct Buf {
    pub mem: Arc<MemRegion>,
    pub lmr: Arc<dyn Lmr>,
}

impl Buf {
    /// `len` bytes registered in `pz` with `access`, filled with `fill`
    /// (in shared memory after [`Target::shared_regions`]).
    pub fn new(pz: &Arc<dyn Pz>, len: usize, access: Access, fill: u8) -> Buf {
        let mem = if SHARED_BUFS.load(std::sync::atomic::Ordering::Relaxed) {
            MemRegion::shared(len).expect("a shared region")
        } else {
            MemRegion::new(len)
        };
        mem.fill(0, len as u64, fill).unwrap();
        let lmr = pz.register_all(&mem, access).expect("register");
        Buf { mem, lmr }
    }
    /// The RMR context.
    pub fn ctx(&self) -> RmrContext {
        self.lmr.rmr_context()
    }
    /// The whole buffer as one segment.
    pub fn sge(&self) -> crate::Sge<'_> {
        crate::Sge::whole(&*self.lmr)
    }
    /// A part of the buffer.
    pub fn part(&self, off: u64, len: u64) -> crate::Sge<'_> {
        crate::Sge::new(&*self.lmr, off, len)
    }
    /// A copy of the contents.
    pub fn bytes(&self) -> Vec<u8> {
        self.mem.to_vec(0, self.mem.len()).unwrap()
    }
}

/// The latency test's small-message round trip, `rounds` times: side a
/// posts a receive, a suppressed 8-byte RDMA write into b's buffer and a
/// suppressed 8-byte send, all carrying the round's number, then waits for
/// b's send; side b (a scoped thread) answers each the same way. Asserts
/// every ping and pong and that b's write landed before a's receive of b's
/// send completed (uDAPL's second ordering rule). Returns, per round trip,
/// how long a's three posts took (receive, write, send). The workload of
/// the `rtcost` example (instructions per round trip, under callgrind) and
/// of the multirail silent-DTO test.
#[inline(never)] // scripts/rt-instructions.sh counts from its entry (and the peer's)
pub fn write_send_ping_pong(p: &Pair, rounds: u64) -> Vec<[Duration; 3]> {
    use crate::{DtoFlags, DtoOp};
    use std::time::Instant;
    const RW: Access = Access::ALL;
    let (ra, rb) = (Buf::new(&p.pz_a, 8, RW, 0), Buf::new(&p.pz_b, 8, RW, 0));
    let (sa, sb) = (Buf::new(&p.pz_a, 8, RW, 0), Buf::new(&p.pz_b, 8, RW, 0));
    let (wa, wb) = (Buf::new(&p.pz_a, 64, RW, 0), Buf::new(&p.pz_b, 64, RW, 0));
    let (ctx_a, ctx_b) = (wa.ctx(), wb.ctx());
    let mut took = Vec::with_capacity(rounds as usize);
    std::thread::scope(|s| {
        p.b.post_recv(&[rb.sge()], Cookie(0), DtoFlags::empty()).expect("post_recv");
        s.spawn(|| write_send_ping_pong_peer(p, rounds, &rb, &sb, &wb, &ctx_a));
        for i in 0..rounds {
            let t0 = Instant::now();
            p.a.post_recv(&[ra.sge()], Cookie(0), DtoFlags::empty()).expect("post_recv");
            let t1 = Instant::now();
            wa.mem.store_u64(0, i).unwrap();
            sa.mem.store_u64(0, i).unwrap();
            let t2 = Instant::now();
            p.a.post_rdma_write(&[wa.part(0, 8)], ctx_b.at(0), Cookie(0), DtoFlags::SUPPRESS)
                .expect("post_rdma_write");
            let t3 = Instant::now();
            p.a.post_send(&[sa.sge()], Cookie(0), DtoFlags::SUPPRESS).expect("post_send");
            let t4 = Instant::now();
            let c = next_dto(&p.evd_a);
            assert!(c.status.is_ok() && c.op == DtoOp::Recv, "{c:?}");
            assert_eq!(ra.mem.load_u64(0).unwrap(), i, "pong {i}");
            assert_eq!(wa.mem.load_u64(0).unwrap(), i, "write before pong {i}");
            took.push([t1 - t0, t3 - t2, t4 - t3]);
        }
    });
    took
}

/// A process that computes between its waits still answers: side b waits
/// for a message (driving its endpoint), then computes without a call into
/// the library, as a solver between two barriers does; side a reads b's
/// memory with an RDMA read posted once b computes. Asserts that the read
/// completed, with b's bytes, while b was still computing: b's progress
/// helper took the endpoint over after b left its wait. a sends its
/// message `delay` after b posted its receive (b then waits that long: a
/// long wait, whose end tells the helper; zero: a short one). b computes
/// until the read is done or longer than a waits for it, so the assertion
/// is about order, not time, and then 2 ms more, as a process that
/// computes does; a backend test makes it strict by opening
/// the IAs with a helper watch longer than [`WAIT`] (then only the
/// handover at the end of b's wait can answer in time).
pub fn read_while_target_computes(p: &Pair, delay: Duration) {
    use crate::{DtoFlags, DtoOp};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;
    /// Side b's time away after the read, well past the backends' quick
    /// period (200 us).
    const AWAY: Duration = Duration::from_millis(2);
    const LEN: usize = 8 << 10;
    let data = Buf::new(&p.pz_b, LEN, Access::ALL, 0);
    data.mem.write(0, &pattern(7, LEN)).unwrap();
    let into = Buf::new(&p.pz_a, LEN, Access::ALL, 0);
    let (note_a, note_b) =
        (Buf::new(&p.pz_a, 8, Access::ALL, 0), Buf::new(&p.pz_b, 8, Access::ALL, 0));
    let ctx = data.ctx();
    let (posted, computing, read_done) =
        (AtomicBool::new(false), AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|s| {
        let b = s.spawn(|| {
            p.b.post_recv(&[note_b.sge()], Cookie(1), DtoFlags::empty()).expect("post_recv");
            posted.store(true, Ordering::SeqCst);
            let c = next_dto(&p.evd_b);
            assert!(c.status.is_ok() && c.op == DtoOp::Recv, "{c:?}");
            // Compute: no call into the library until the read is done.
            computing.store(true, Ordering::SeqCst);
            let until = Instant::now() + WAIT + WAIT / 4;
            let mut x = 1u64;
            let mut compute = || {
                for _ in 0..1000 {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            };
            while !read_done.load(Ordering::SeqCst) && Instant::now() < until {
                compute();
            }
            // Away a while longer before the next round's wait: a thread
            // back within the helper's quick period after a takeover counts
            // as one that polls in waits, and two such returns in a row end
            // the quick looks (see `Handover::returned`), which would leave
            // a later round's read to the watch alone.
            let back = Instant::now() + AWAY;
            while Instant::now() < back {
                compute();
            }
        });
        let until = Instant::now() + WAIT;
        let alive = |what: &str| {
            assert!(!b.is_finished() && Instant::now() < until, "side b never {what}");
            std::thread::yield_now();
        };
        while !posted.load(Ordering::SeqCst) {
            alive("posted its receive");
        }
        std::thread::sleep(delay);
        // The send's completion is waited for: this thread drives its
        // endpoint, so the message leaves now (a batching backend holds a
        // small frame until then).
        p.a.post_send(&[note_a.sge()], Cookie(2), DtoFlags::empty()).expect("post_send");
        let c = next_dto(&p.evd_a);
        assert!(c.status.is_ok() && c.op == DtoOp::Send, "{c:?}");
        while !computing.load(Ordering::SeqCst) {
            alive("began to compute");
        }
        p.a.post_rdma_read(&[into.sge()], ctx.at(0), Cookie(3), DtoFlags::empty())
            .expect("post_rdma_read");
        let c = match p.evd_a.wait(Some(WAIT), 1) {
            Ok(Event::Dto(c)) => c,
            other => panic!(
                "the read was not answered within {WAIT:?} while the target computed: its progress helper never took the endpoint over (the round whose message came {delay:?} after the receive; {other:?})"
            ),
        };
        read_done.store(true, Ordering::SeqCst);
        assert!(c.status.is_ok() && c.op == DtoOp::RdmaRead, "{c:?}");
        b.join().expect("side b");
    });
    assert_eq!(into.bytes(), pattern(7, LEN), "the read returned the target's bytes");
}

/// [`read_while_target_computes`] over one pair of `t`, after short and
/// long waits, twice each: after the first, the target's progress helper
/// had taken the endpoint over and given it back to the waiting thread. A
/// long wait's end tells the helper; after a short one, its quick look
/// finds the endpoint left. A backend's `tests/handover.rs` calls it with
/// a helper watch longer than [`WAIT`].
pub fn read_while_target_computes_rounds(t: &Target) {
    let p = Pair::new(t);
    for delay in [0, 3, 0, 3] {
        read_while_target_computes(&p, Duration::from_millis(delay));
    }
}

/// Side b of [`write_send_ping_pong`]: answers each ping (its receive
/// buffer `rb`) with a suppressed write from `wb` into a's buffer `ctx_a`
/// and a suppressed send from `sb`, both carrying the round's number.
#[inline(never)] // a thread of its own, counted by scripts/rt-instructions.sh
fn write_send_ping_pong_peer(
    p: &Pair,
    rounds: u64,
    rb: &Buf,
    sb: &Buf,
    wb: &Buf,
    ctx_a: &RmrContext,
) {
    use crate::{DtoFlags, DtoOp};
    for i in 0..rounds {
        let c = next_dto(&p.evd_b);
        assert!(c.status.is_ok() && c.op == DtoOp::Recv, "{c:?}");
        assert_eq!(rb.mem.load_u64(0).unwrap(), i, "ping {i}");
        if i + 1 < rounds {
            p.b.post_recv(&[rb.sge()], Cookie(0), DtoFlags::empty()).expect("post_recv");
        }
        wb.mem.store_u64(0, i).unwrap();
        sb.mem.store_u64(0, i).unwrap();
        p.b.post_rdma_write(&[wb.part(0, 8)], ctx_a.at(0), Cookie(0), DtoFlags::SUPPRESS)
            .expect("post_rdma_write");
        p.b.post_send(&[sb.sge()], Cookie(0), DtoFlags::SUPPRESS).expect("post_send");
    }
}

/// The value of `ep`'s attribute note `name` ([`crate::EpAttr::notes`]);
/// panics, listing the notes, when there is none.
pub fn ep_note(ep: &dyn Ep, name: &str) -> String {
    let attr = ep.attr();
    match attr.note(name) {
        Some(v) => v.to_string(),
        None => panic!("no {name} note: {:?}", attr.notes),
    }
}

/// [`ep_note`] read as a count.
pub fn ep_count(ep: &dyn Ep, name: &str) -> u64 {
    let v = ep_note(ep, name);
    v.parse().unwrap_or_else(|_| panic!("note {name} = {v:?} is not a count"))
}

/// Deterministic test pattern: byte `i` of message `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// FNV-1a checksum.
pub fn checksum(b: &[u8]) -> u64 {
    b.iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3))
}

/// The files kept in fuzz target `target`'s regression folder
/// (`<crate_dir>/fuzz-regressions/<target>`; pass
/// `env!("CARGO_MANIFEST_DIR")`), sorted by name, with their bytes: what
/// every crate's `tests/fuzz_regressions.rs` replays. Panics (with the
/// folder's name) when it cannot be read.
pub fn regression_inputs(crate_dir: &str, target: &str) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let dir = std::path::Path::new(crate_dir).join("fuzz-regressions").join(target);
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap_or_else(|e| panic!("{}: {e}", dir.display())).path())
        .filter(|p| p.is_file())
        .map(|p| {
            let b = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, b)
        })
        .collect();
    v.sort();
    v
}

/// Generates one `#[test]` per conformance case for `$target` (a path to a
/// `fn() -> Target`). Expand it inside a module named `conformance` so the
/// test names read `conformance::<case>`.
#[macro_export]
#[doc(hidden)]
macro_rules! conformance_suite {
    ($target:path) => {
        $crate::conformance_suite!(@cases $target;
            ia_attr_and_caps_tell_the_truth,
            connect_accept_private_data_both_ways,
            connect_reject_private_data,
            connect_refused_is_an_error,
            connect_timeout_is_respected,
            connect_start_ends_in_an_event,
            signals_interrupt_neither_connect_nor_wait,
            send_recv_basic,
            send_recv_in_order_under_load,
            zero_length_send,
            solicited_flag_reaches_receiver,
            recv_too_small_errors_nothing_overwritten,
            rdma_write_then_send_ordering,
            rdma_write_large_checksummed,
            progress_until_sees_a_written_flag,
            target_reads_while_peer_writes,
            rdma_read,
            rdma_write_gather,
            rdma_read_scatter,
            send_gather_recv_scatter,
            rmr_context_exchanged_by_send,
            suppress_no_event_but_implied,
            suppressed_error_still_reported,
            barrier_fence_orders_read_before_write,
            write_with_immediate,
            fetch_add_racing_initiators,
            cmp_swap_racing_initiators,
            atomic_misaligned_is_rejected,
            bad_key,
            out_of_bounds_remote,
            out_of_bounds_local_rejected_at_post,
            lmr_claiming_more_than_its_region,
            missing_remote_write_right,
            read_of_write_only_region,
            lmr_of_another_pz,
            deregistered_lmr,
            local_lmr_of_another_pz_rejected,
            disconnect_events_both_sides,
            close_delivers_what_was_posted,
            recvs_flushed_on_disconnect,
            post_after_disconnect_is_error,
            evd_wait_timeout,
            evd_wait_threshold,
            evd_software_events,
            event_loop_arm_and_poll_loses_nothing,
            many_eps_share_one_evd,
            threads_posting_on_one_ep,
            window_backpressure_is_a_value
        );
        #[test]
        fn peer_killed_broken_event() {
            let name = match module_path!().split_once("::") {
                Some((_, m)) => format!("{m}::peer_killed_broken_event"),
                None => "peer_killed_broken_event".to_string(),
            };
            let t = $target();
            if !t.skipped() {
                $crate::provider::conformance::cases::peer_killed_broken_event(&t, &name)
            }
        }
    };
    (@cases $target:path; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                let t = $target();
                if !t.skipped() {
                    $crate::provider::conformance::cases::$case(&t)
                }
            }
        )*
    };
}

/// Runs `f` with a process-wide `tracing` subscriber at `rmr=debug`
/// (what the binaries install with `RUST_LOG=rmr=debug`) and returns what
/// it wrote: a backend's tracing test runs a case under it and looks for
/// its spans and events. Once per process: the subscriber is global.
pub fn capture_tracing(f: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Captured {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let cap = Captured::default();
    let w = cap.clone();
    let sub = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("rmr=debug"))
        .with_ansi(false)
        .with_writer(move || w.clone())
        .finish();
    tracing::subscriber::set_global_default(sub).expect("the first subscriber of the process");
    f();
    let text = cap.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    String::from_utf8_lossy(&text).into_owned()
}
