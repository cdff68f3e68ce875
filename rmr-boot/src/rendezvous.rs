//! The launcher-less bootstrap: a TCP rendezvous at the root's address.
//!
//! Rank 0 listens at the root address; every other rank connects (retrying
//! until the root is up), says who it is, and keeps the connection for the
//! job's collectives, which the root gathers and fans out (a star: fine for
//! the few exchanges of a start-up). A rank that never shows up, a second
//! rank with the same number, or a rank that disagrees about the size make
//! the root abort the job with a typed error at every rank.
//!
//! Only the job gets in: every process holds the job's secret
//! (`RMR_JOB_SECRET`, which the launcher or the script that starts the
//! job makes and gives to every rank), and each side proves it with an
//! HMAC-SHA256 over the other side's fresh nonce, so the secret never
//! travels and a recorded exchange answers no later challenge. The root
//! drops a joiner whose proof is wrong without a word (it learns nothing
//! of the job); each joiner's handshake runs on its own short-lived
//! thread, so a silent stranger holds up nobody. A rank leaves a root
//! that cannot prove the secret before it sends it any of the job's data
//! (the rank's hello, its claim and proof, goes first: give jobs random
//! secrets, [`fresh_secret`], not guessable ones). What follows the
//! handshake is not authenticated: a peer that can rewrite the stream
//! between two ranks is outside what this guards.

use crate::wire::{MAX_FRAME, Msg};
use crate::{Error, Result};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where and how to meet (what `RMR_RANK`, `RMR_SIZE`, `RMR_ROOT` and
/// `RMR_BOOT_TIMEOUT_S` say).
#[derive(Clone)]
pub struct RendezvousConfig {
    /// This process's rank, `0..size`; rank 0 is the root and listens.
    pub rank: u32,
    /// Number of processes.
    pub size: u32,
    /// The root's `host:port`.
    pub root: String,
    /// How long the root waits for every rank, and a rank for the root;
    /// also the limit of each later collective.
    pub timeout: Duration,
    /// This process's node name (processes with the same name share memory).
    pub node: String,
    /// The job's secret (`RMR_JOB_SECRET`): the same at every rank, at
    /// least [`MIN_SECRET`] bytes; proven, never sent. Not needed for a
    /// job of one process.
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for RendezvousConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RendezvousConfig")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("root", &self.root)
            .field("timeout", &self.timeout)
            .field("node", &self.node)
            .field("secret", &format_args!("({} bytes, not shown)", self.secret.len()))
            .finish()
    }
}

/// The shortest job secret accepted.
pub const MIN_SECRET: usize = 16;

/// A fresh job secret for a launcher to give every rank of a job it
/// starts (`RMR_JOB_SECRET`): 32 hex digits from the OS's random source.
/// Give jobs such random secrets, not passphrases: a process posing as
/// the root sees one proof, which a guessable secret would not survive.
///
/// # Panics
/// When the OS has no random source (a secret it could guess is worse
/// than none).
pub fn fresh_secret() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS's random source for a job secret");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

type HmacSha256 = Hmac<Sha256>;

fn nonce() -> [u8; 32] {
    let mut b = [0u8; 32];
    if getrandom::fill(&mut b).is_err() {
        // No OS randomness: still unique per call, though guessable.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        b[..16].copy_from_slice(&t.to_le_bytes());
        b[16..20].copy_from_slice(&std::process::id().to_le_bytes());
    }
    b
}

fn keyed(secret: &[u8], label: &[u8]) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
    m.update(label);
    m
}

/// A rank's proof: bound to the root's challenge and to what it claims.
fn hello_proof(
    secret: &[u8],
    challenge: &[u8; 32],
    (rank, size, node): (u32, u32, &str),
    nonce: &[u8; 32],
) -> HmacSha256 {
    let mut m = keyed(secret, b"rmr-boot hello v2");
    m.update(challenge);
    m.update(&rank.to_le_bytes());
    m.update(&size.to_le_bytes());
    m.update(&(node.len() as u64).to_le_bytes());
    m.update(node.as_bytes());
    m.update(nonce);
    m
}

/// The root's proof to one rank: bound to that rank's nonce and to the
/// welcome's contents.
fn welcome_proof(secret: &[u8], nonce: &[u8; 32], job: u64, nodes: &[String]) -> HmacSha256 {
    let mut m = keyed(secret, b"rmr-boot welcome v2");
    m.update(nonce);
    m.update(&job.to_le_bytes());
    for n in nodes {
        m.update(&(n.len() as u64).to_le_bytes());
        m.update(n.as_bytes());
    }
    m
}

/// A joined rendezvous: the root holds one stream per rank, a rank one to the root.
pub(crate) struct Rendezvous {
    rank: u32,
    timeout: Duration,
    /// Root: index r-1 is rank r's stream. Rank: one stream to the root.
    links: Mutex<Links>,
}

struct Links {
    streams: Vec<TcpStream>,
    seq: u64,
}

/// What joining learned.
pub(crate) struct Joined {
    pub(crate) rv: Rendezvous,
    pub(crate) job: u64,
    pub(crate) nodes: Vec<String>,
}

fn resolve(root: &str) -> Result<SocketAddr> {
    let bad = |why: String| Error::BadEnv { var: "RMR_ROOT", value: root.into(), why };
    root.to_socket_addrs()
        .map_err(|e| bad(format!("not a host:port ({e})")))?
        .next()
        .ok_or_else(|| bad("resolves to no address".into()))
}

/// A job id unlikely to collide with another job's on the same machine.
fn fresh_job_id() -> u64 {
    let mut b = [0u8; 8];
    if getrandom::fill(&mut b).is_ok() {
        return u64::from_le_bytes(b);
    }
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    (t.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32)
}

fn left(deadline: Instant) -> Option<Duration> {
    let l = deadline.saturating_duration_since(Instant::now());
    (!l.is_zero()).then_some(l)
}

fn send(s: &mut TcpStream, m: &Msg) -> std::io::Result<()> {
    s.write_all(&m.encode())
}

/// Reads one frame before `deadline`. `peer` names the other side in errors.
fn recv(s: &mut TcpStream, deadline: Instant, peer: u32, what: &'static str) -> Result<Msg> {
    recv_frame(s, deadline, peer, what, MAX_FRAME)
}

/// A hello from an unknown peer: at most `max` bytes.
fn recv_limited(s: &mut TcpStream, deadline: Instant, max: usize) -> Result<Msg> {
    recv_frame(s, deadline, u32::MAX, "hello", max)
}

fn recv_frame(
    s: &mut TcpStream,
    deadline: Instant,
    peer: u32,
    what: &'static str,
    max: usize,
) -> Result<Msg> {
    let start = Instant::now();
    let mut read = |buf: &mut [u8]| -> Result<()> {
        let mut got = 0;
        while got < buf.len() {
            let Some(l) = left(deadline) else {
                return Err(Error::Timeout { what, after: start.elapsed() });
            };
            s.set_read_timeout(Some(l)).map_err(|e| Error::io("set_read_timeout", e))?;
            match s.read(&mut buf[got..]) {
                Ok(0) => {
                    return Err(Error::PeerLost { rank: peer, why: "connection closed".into() });
                }
                Ok(n) => got += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::PeerLost { rank: peer, why: e.to_string() }),
            }
        }
        Ok(())
    };
    let mut len = [0u8; 4];
    read(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len == 0 || len > max {
        return Err(Error::Protocol(format!("frame of {len} bytes")));
    }
    let mut body = vec![0u8; len];
    read(&mut body)?;
    Msg::decode(&body)
}

/// An authenticated hello: rank, size, node, the rank's nonce, its stream.
type Hello = (u32, u32, String, [u8; 32], TcpStream);

/// Handshakes the root runs at once (each on a short-lived thread).
const MAX_HANDSHAKES: usize = 256;

/// The root's side of one connection's handshake: a challenge, then a
/// hello that must prove the secret before `by`. `None` for anyone else
/// (dropped, told nothing).
fn handshake(mut s: TcpStream, secret: &[u8], by: Instant) -> Option<Hello> {
    s.set_nonblocking(false).ok()?;
    let _ = s.set_nodelay(true);
    let challenge = nonce();
    send(&mut s, &Msg::Challenge { nonce: challenge }).ok()?;
    match recv_limited(&mut s, by, HELLO_MAX) {
        Ok(Msg::Hello { rank, size, node, nonce, proof }) => {
            let claim = (rank, size, node.as_str());
            hello_proof(secret, &challenge, claim, &nonce).verify_slice(&proof).ok()?;
            Some((rank, size, node, nonce, s))
        }
        _ => None,
    }
}

/// The largest hello accepted (before its proof is checked, a stranger
/// must not make the root allocate much).
const HELLO_MAX: usize = 4096;

impl Rendezvous {
    /// Joins: the root gathers every rank, the others connect to it.
    pub(crate) fn join(cfg: &RendezvousConfig) -> Result<Joined> {
        if cfg.size == 0 || cfg.rank >= cfg.size {
            return Err(Error::BadEnv {
                var: "RMR_RANK",
                value: cfg.rank.to_string(),
                why: format!("must be below RMR_SIZE={}", cfg.size),
            });
        }
        let deadline = Instant::now() + cfg.timeout;
        if cfg.size == 1 {
            let rv = Rendezvous {
                rank: 0,
                timeout: cfg.timeout,
                links: Mutex::new(Links { streams: Vec::new(), seq: 0 }),
            };
            return Ok(Joined { rv, job: fresh_job_id(), nodes: vec![cfg.node.clone()] });
        }
        if cfg.secret.len() < MIN_SECRET {
            return Err(Error::BadEnv {
                var: "RMR_JOB_SECRET",
                value: if cfg.secret.is_empty() { String::new() } else { "(hidden)".into() },
                why: format!(
                    "{}: a TCP rendezvous admits only processes that hold the job's secret, at least {MIN_SECRET} bytes, the same at every rank (e.g. RMR_JOB_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')); a PMIx launcher needs none",
                    if cfg.secret.is_empty() { "unset" } else { "too short" }
                ),
            });
        }
        let addr = resolve(&cfg.root)?;
        if cfg.rank == 0 {
            Self::root(cfg, addr, deadline)
        } else {
            Self::rank(cfg, addr, deadline)
        }
    }

    fn root(cfg: &RendezvousConfig, addr: SocketAddr, deadline: Instant) -> Result<Joined> {
        let l = TcpListener::bind(addr).map_err(|e| Error::io(format!("listen at {addr}"), e))?;
        l.set_nonblocking(true).map_err(|e| Error::io("set_nonblocking", e))?;
        let n = cfg.size as usize;
        let mut streams: Vec<Option<TcpStream>> = (1..n).map(|_| None).collect();
        let mut nodes = vec![String::new(); n];
        let mut nonces = vec![[0u8; 32]; n];
        nodes[0] = cfg.node.clone();
        let mut have = 1;
        let abort = |streams: &mut Vec<Option<TcpStream>>, why: &str| {
            for s in streams.iter_mut().flatten() {
                let _ = send(s, &Msg::Abort(why.into()));
            }
        };
        // Each connection's handshake runs on a thread of its own (at most
        // MAX_HANDSHAKES at once), so a stranger that connects and stays
        // silent holds up nobody; authenticated hellos come back here.
        let (tx, rx) = std::sync::mpsc::channel::<Hello>();
        let busy = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        while have < n {
            let (rank, size, node, their, mut s) = match rx.try_recv() {
                Ok(h) => h,
                Err(_) => {
                    match l.accept() {
                        Ok((s, _)) => {
                            use std::sync::atomic::Ordering::AcqRel;
                            if busy.fetch_add(1, AcqRel) >= MAX_HANDSHAKES {
                                busy.fetch_sub(1, AcqRel);
                                continue; // dropped: too many at once
                            }
                            let (tx, b2, secret) = (tx.clone(), busy.clone(), cfg.secret.clone());
                            let hello_by = deadline.min(Instant::now() + Duration::from_secs(5));
                            let spawned = std::thread::Builder::new()
                                .name("rmr-boot-hello".into())
                                .stack_size(64 << 10)
                                .spawn(move || {
                                    if let Some(h) = handshake(s, &secret, hello_by) {
                                        let _ = tx.send(h);
                                    }
                                    b2.fetch_sub(1, AcqRel);
                                });
                            if spawned.is_err() {
                                busy.fetch_sub(1, AcqRel);
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            if Instant::now() >= deadline {
                                let missing: Vec<u32> = streams
                                    .iter()
                                    .enumerate()
                                    .filter(|(_, s)| s.is_none())
                                    .map(|(i, _)| i as u32 + 1)
                                    .collect();
                                let err = Error::RanksMissing {
                                    missing,
                                    size: cfg.size,
                                    waited: cfg.timeout,
                                };
                                abort(&mut streams, &err.to_string());
                                return Err(err);
                            }
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => return Err(Error::io("accept", e)),
                    }
                    continue;
                }
            };
            let why = if size != cfg.size {
                Some(format!("rank {rank} says the job has {size} ranks, the root {}", cfg.size))
            } else if rank == 0 || rank >= cfg.size {
                Some(format!("a process claims rank {rank} of {}", cfg.size))
            } else if streams[rank as usize - 1].is_some() {
                Some(format!("two processes claim rank {rank}"))
            } else {
                None
            };
            if let Some(why) = why {
                let _ = send(&mut s, &Msg::Abort(why.clone()));
                abort(&mut streams, &why);
                return Err(Error::Aborted(why));
            }
            nodes[rank as usize] = node;
            nonces[rank as usize] = their;
            streams[rank as usize - 1] = Some(s);
            have += 1;
        }
        let mut streams: Vec<TcpStream> = streams.into_iter().map(|s| s.expect("all")).collect();
        let job = fresh_job_id();
        for (i, s) in streams.iter_mut().enumerate() {
            let proof = welcome_proof(&cfg.secret, &nonces[i + 1], job, &nodes).finalize();
            let welcome =
                Msg::Welcome { job, nodes: nodes.clone(), proof: proof.into_bytes().into() };
            send(s, &welcome)
                .map_err(|e| Error::PeerLost { rank: i as u32 + 1, why: e.to_string() })?;
        }
        let rv = Rendezvous {
            rank: 0,
            timeout: cfg.timeout,
            links: Mutex::new(Links { streams, seq: 0 }),
        };
        Ok(Joined { rv, job, nodes })
    }

    fn rank(cfg: &RendezvousConfig, addr: SocketAddr, deadline: Instant) -> Result<Joined> {
        let start = Instant::now();
        let mut s = loop {
            let step = left(deadline).unwrap_or(Duration::ZERO).min(Duration::from_secs(1));
            let r = if step.is_zero() {
                Err(std::io::Error::from(ErrorKind::TimedOut))
            } else {
                TcpStream::connect_timeout(&addr, step)
            };
            match r {
                Ok(s) => break s,
                Err(e) => {
                    if Instant::now() >= deadline {
                        return Err(Error::RootUnreachable {
                            root: cfg.root.clone(),
                            waited: start.elapsed(),
                            source: e,
                        });
                    }
                    tracing::trace!(target: "rmr::boot", root = %addr, error = %e, "root not reachable yet; retrying");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        };
        let _ = s.set_nodelay(true);
        // The root may wait up to its own timeout for the last rank: give it a little more.
        let by = deadline + Duration::from_secs(2);
        let challenge = match recv(&mut s, by, 0, "rendezvous challenge")? {
            Msg::Challenge { nonce } => nonce,
            m => return Err(Error::Protocol(format!("expected a challenge, got {m:?}"))),
        };
        let mine = nonce();
        let claim = (cfg.rank, cfg.size, cfg.node.as_str());
        let proof = hello_proof(&cfg.secret, &challenge, claim, &mine).finalize();
        let hello = Msg::Hello {
            rank: cfg.rank,
            size: cfg.size,
            node: cfg.node.clone(),
            nonce: mine,
            proof: proof.into_bytes().into(),
        };
        send(&mut s, &hello).map_err(|e| Error::PeerLost { rank: 0, why: e.to_string() })?;
        let welcome = recv(&mut s, by, 0, "rendezvous welcome").map_err(|e| match e {
            Error::PeerLost { rank, why } => Error::PeerLost {
                rank,
                why: format!(
                    "{why} before the welcome (a root that does not admit this rank's RMR_JOB_SECRET closes it so)"
                ),
            },
            e => e,
        })?;
        let (job, nodes) = match welcome {
            Msg::Welcome { job, nodes, proof } if nodes.len() == cfg.size as usize => {
                if welcome_proof(&cfg.secret, &mine, job, &nodes).verify_slice(&proof).is_err() {
                    return Err(Error::Unauthenticated {
                        root: cfg.root.clone(),
                        why: "its welcome does not prove this job's secret (another process listens at RMR_ROOT, or the secrets differ)".into(),
                    });
                }
                (job, nodes)
            }
            Msg::Abort(why) => return Err(Error::Aborted(why)),
            m => return Err(Error::Protocol(format!("expected a welcome, got {m:?}"))),
        };
        let rv = Rendezvous {
            rank: cfg.rank,
            timeout: cfg.timeout,
            links: Mutex::new(Links { streams: vec![s], seq: 0 }),
        };
        Ok(Joined { rv, job, nodes })
    }

    /// Every rank's `data`, by rank.
    pub(crate) fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut g = self.links.lock().unwrap_or_else(|p| p.into_inner());
        g.seq += 1;
        let seq = g.seq;
        let deadline = Instant::now() + self.timeout;
        if g.streams.is_empty() {
            return Ok(vec![data.to_vec()]);
        }
        if self.rank != 0 {
            let s = &mut g.streams[0];
            send(s, &Msg::Gather { seq, data: data.to_vec() })
                .map_err(|e| Error::PeerLost { rank: 0, why: e.to_string() })?;
            return match recv(s, deadline, 0, "allgather")? {
                Msg::Gathered { seq: got, all } if got == seq => Ok(all),
                Msg::Abort(why) => Err(Error::Aborted(why)),
                m => Err(Error::Protocol(format!("expected gathered #{seq}, got {m:?}"))),
            };
        }
        let mut all = vec![data.to_vec()];
        let mut failure = None;
        for (i, s) in g.streams.iter_mut().enumerate() {
            let rank = i as u32 + 1;
            match recv(s, deadline, rank, "allgather") {
                Ok(Msg::Gather { seq: got, data }) if got == seq => all.push(data),
                Ok(m) => {
                    failure =
                        Some(Error::Protocol(format!("rank {rank} sent {m:?} in allgather #{seq}")))
                }
                Err(e) => failure = Some(e),
            }
            if failure.is_some() {
                break;
            }
        }
        if let Some(e) = failure {
            let why = e.to_string();
            for s in g.streams.iter_mut() {
                let _ = send(s, &Msg::Abort(why.clone()));
            }
            return Err(e);
        }
        let out = Msg::Gathered { seq, all: all.clone() }.encode();
        for (i, s) in g.streams.iter_mut().enumerate() {
            s.write_all(&out)
                .map_err(|e| Error::PeerLost { rank: i as u32 + 1, why: e.to_string() })?;
        }
        Ok(all)
    }
}
