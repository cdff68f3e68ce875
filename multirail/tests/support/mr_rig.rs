//! The fuzzing rig of the multirail PSP handshake: a real multirail IA over
//! two TCP rails on loopback (127.0.0.1 and 127.0.0.2) listening with a real
//! [`multirail::MrPsp`], and a raw peer that opens one rail connection with
//! a connection request whose private data comes from the fuzzer — the
//! 14-byte multirail header (magic `MRL1`, session, rail index, rail count)
//! written by hand, or raw bytes.
//!
//! Whatever the bytes, the rig requires an answer and never a hang:
//! - a request the multirail header spec (below) calls malformed is
//!   rejected (ConnReject) or closed, and nothing reaches the user;
//! - a well-formed one waits for its session's other rail: the rig sends
//!   that one too, and the user sees exactly one connection request, with
//!   rail 0's user private data; rejecting it answers both raw peers.
//!
//! Shared by the cargo-fuzz target (`fuzz/fuzz_targets/mr_psp.rs`) and the
//! corpus replay test (`tests/fuzz_regressions.rs`).
#![allow(dead_code, unreachable_pub, missing_docs)]

use backend_tcp::wire::{HDR, Header, MAGIC, MAX_PRIVATE, Op};
use rmr_api::{Evd, Event, Ia, Psp};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

pub const WAIT: Duration = Duration::from_secs(15);
/// The multirail per-rail header: "MRL1", session u64 LE, rail index, rail count.
pub const MR_HDR: usize = 14;
const RAILS: [&str; 2] = ["127.0.0.1", "127.0.0.2"];

pub fn mr_header(session: u64, idx: u8, n: u8) -> Vec<u8> {
    let mut h = b"MRL1".to_vec();
    h.extend_from_slice(&session.to_le_bytes());
    h.extend_from_slice(&[idx, n]);
    h
}

pub struct MrRig {
    _ia: Arc<dyn Ia>,
    psp: Arc<dyn Psp>,
    user: Arc<dyn Evd>,
}

/// How one input was answered.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// The rail's PSP closed the connection (not a valid handshake frame).
    Closed,
    /// Rejected with this private data.
    Rejected(Vec<u8>),
    /// A complete session reached the user (and was rejected by the rig).
    Session,
}

impl Default for MrRig {
    fn default() -> Self {
        Self::new()
    }
}

impl MrRig {
    pub fn new() -> MrRig {
        backend_tcp::register();
        multirail::register();
        let ia = rmr_api::open("multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine=inline")
            .expect("open multirail");
        let user = ia.create_evd().unwrap();
        let psp = ia.create_psp(0, &user).unwrap();
        MrRig { _ia: ia, psp, user }
    }

    fn raw(&self, rail: usize, pd: &[u8]) -> TcpStream {
        let to = SocketAddr::new(RAILS[rail].parse().unwrap(), self.psp.service());
        let mut s = TcpStream::connect(to).expect("connect to a rail PSP");
        s.set_read_timeout(Some(WAIT)).unwrap();
        let mut h = Header::new(Op::ConnReq);
        h.arg0 = MAGIC;
        h.len = pd.len() as u32;
        let mut b = h.encode().to_vec();
        b.extend_from_slice(pd);
        // The PSP may close at once (an oversized private data): that is an answer too.
        let _ = s.write_all(&b);
        s
    }

    fn answer(s: &mut TcpStream) -> Answer {
        let mut hb = [0u8; HDR];
        match s.read_exact(&mut hb) {
            Ok(()) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                panic!("HANG: no answer to a multirail connection request within {WAIT:?}")
            }
            Err(_) => return Answer::Closed,
        }
        let h = Header::decode(&hb);
        assert_eq!(h.validate(), Ok(Op::ConnReject), "a raw request was answered with {h:?}");
        let mut pd = vec![0u8; h.len as usize];
        s.read_exact(&mut pd).expect("reject private data");
        Answer::Rejected(pd)
    }

    /// Sends `pd` as the private data of a connection request on `rail`;
    /// completes a well-formed session with its other rail; returns the answer.
    pub fn feed(&self, rail: usize, pd: &[u8]) -> Answer {
        let threads = thread_count();
        let a = self.feed_inner(rail % 2, pd);
        settle_threads(threads);
        a
    }

    fn feed_inner(&self, rail: usize, pd: &[u8]) -> Answer {
        let mut s = self.raw(rail, pd);
        let well_formed = pd.len() >= MR_HDR
            && pd.len() <= MAX_PRIVATE
            && &pd[..4] == b"MRL1"
            && pd[13] == 2
            && usize::from(pd[12]) == rail;
        if !well_formed {
            let a = Self::answer(&mut s);
            assert_ne!(a, Answer::Session);
            assert!(self.user.dequeue().is_none(), "a malformed request reached the user");
            return a;
        }
        let session = u64::from_le_bytes(pd[4..12].try_into().unwrap());
        let other = 1 - rail;
        let mut o = self.raw(other, &mr_header(session, other as u8, 2));
        let ev = self
            .user
            .wait(Some(WAIT), 1)
            .unwrap_or_else(|e| panic!("HANG: session never reached the user: {e}"));
        let Event::ConnectionRequest(cr) = ev else {
            panic!("expected a connection request, got {ev:?}")
        };
        let want: &[u8] = if rail == 0 { &pd[MR_HDR..] } else { &[] };
        assert_eq!(cr.private_data(), want, "user private data is not rail 0's");
        cr.reject(b"rig").unwrap();
        assert_eq!(
            Self::answer(&mut s),
            Answer::Rejected(if rail == 0 { b"rig".to_vec() } else { vec![] })
        );
        assert_eq!(
            Self::answer(&mut o),
            Answer::Rejected(if other == 0 { b"rig".to_vec() } else { vec![] })
        );
        assert!(self.user.dequeue().is_none());
        Answer::Session
    }
}

fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0)
}

/// Waits until the handshake threads of this input's connections have
/// ended (none may outlive its connection; also keeps LeakSanitizer from
/// seeing a thread half-way through its exit).
fn settle_threads(baseline: usize) {
    let start = std::time::Instant::now();
    while thread_count() > baseline {
        assert!(
            start.elapsed() < WAIT,
            "THREAD LEAK: {} threads, {baseline} before",
            thread_count()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Fuzz input -> (rail, private data): byte 0 picks the rail (bit 0) and
/// whether to prefix a hand-written header (bit 1) from the next 10 bytes
/// (session, index, count); the rest follows as the private data. Bit 2
/// instead prefixes the magic of a rejoin request (`MRR1`) or, with bit 3,
/// of a control-rail notice (`MRC1`): a session nobody has, so each is
/// refused (`rejoin refused`) whatever follows.
pub fn build(data: &[u8]) -> (usize, Vec<u8>) {
    let Some((&mode, rest)) = data.split_first() else { return (0, Vec::new()) };
    let rail = usize::from(mode & 1);
    if mode & 4 != 0 {
        let mut pd = if mode & 8 != 0 { b"MRC1".to_vec() } else { b"MRR1".to_vec() };
        pd.extend_from_slice(rest);
        return (rail, pd);
    }
    if mode & 2 == 0 || rest.len() < 10 {
        return (rail, rest.to_vec());
    }
    let session = u64::from_le_bytes(rest[..8].try_into().unwrap());
    let mut pd = mr_header(session, rest[8], rest[9]);
    pd.extend_from_slice(&rest[10..]);
    (rail, pd)
}
