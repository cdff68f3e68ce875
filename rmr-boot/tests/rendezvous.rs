//! The TCP rendezvous with ranks as threads of one process (real sockets on
//! loopback): joining, allgather, node placement, and every typed failure.

use rmr_boot::{Bootstrap, Error, Kind, RendezvousConfig};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn cfg(rank: u32, size: u32, port: u16, node: &str, timeout_ms: u64) -> RendezvousConfig {
    RendezvousConfig {
        rank,
        size,
        root: format!("127.0.0.1:{port}"),
        timeout: Duration::from_millis(timeout_ms),
        node: node.into(),
        secret: SECRET.to_vec(),
    }
}

/// The test jobs' secret.
const SECRET: &[u8] = b"this job's secret, 32 bytes long";

#[test]
fn ranks_join_and_allgather() {
    let port = free_port();
    let n = 5u32;
    let hs: Vec<_> = (0..n)
        .map(|r| {
            std::thread::spawn(move || {
                // Ranks 0,2,4 on node "x", 1,3 on "y"; the root starts last.
                if r == 0 {
                    std::thread::sleep(Duration::from_millis(100));
                }
                let node = if r % 2 == 0 { "x" } else { "y" };
                let b = Bootstrap::rendezvous(&cfg(r, n, port, node, 10_000)).unwrap();
                assert_eq!(b.kind(), Kind::Rendezvous);
                let mut outs = Vec::new();
                for round in 0..3u8 {
                    let all = b.allgather(&[r as u8, round]).unwrap();
                    outs.push(all);
                }
                b.barrier().unwrap();
                (
                    b.rank(),
                    b.local_rank(),
                    b.local_size(),
                    b.nodes().masters(),
                    b.job_id().to_string(),
                    outs,
                )
            })
        })
        .collect();
    let res: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let job = &res[0].4;
    for (rank, lrank, lsize, masters, j, outs) in &res {
        assert_eq!(j, job, "one job id for all");
        assert_eq!(*lrank, rank / 2);
        assert_eq!(*lsize, if rank % 2 == 0 { 3 } else { 2 });
        assert_eq!(masters, &[0, 1]);
        for (round, all) in outs.iter().enumerate() {
            let want: Vec<Vec<u8>> = (0..n as u8).map(|q| vec![q, round as u8]).collect();
            assert_eq!(all, &want);
        }
    }
}

#[test]
fn a_missing_rank_is_a_typed_error_everywhere() {
    let port = free_port();
    let t0 = Instant::now();
    // Rank 2 of 3 never comes.
    let h1 = std::thread::spawn(move || Bootstrap::rendezvous(&cfg(1, 3, port, "n", 800)));
    let root = Bootstrap::rendezvous(&cfg(0, 3, port, "n", 800));
    match root {
        Err(Error::RanksMissing { missing, size: 3, .. }) => assert_eq!(missing, [2]),
        r => panic!("root: {:?}", r.map(|b| b.rank())),
    }
    match h1.join().unwrap() {
        Err(Error::Aborted(why)) => assert!(why.contains("[2]"), "{why}"),
        r => panic!("rank 1: {:?}", r.map(|b| b.rank())),
    }
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn no_root_is_root_unreachable() {
    let port = free_port();
    match Bootstrap::rendezvous(&cfg(1, 2, port, "n", 300)) {
        Err(e @ Error::RootUnreachable { .. }) => assert!(e.to_string().contains("unreachable")),
        r => panic!("{:?}", r.map(|b| b.rank())),
    }
}

#[test]
fn inconsistent_jobs_are_aborted() {
    let port = free_port();
    // Rank 1 thinks the job has 4 ranks.
    let h = std::thread::spawn(move || Bootstrap::rendezvous(&cfg(1, 4, port, "n", 3000)));
    let root = Bootstrap::rendezvous(&cfg(0, 3, port, "n", 3000));
    assert!(matches!(root, Err(Error::Aborted(ref w)) if w.contains("4 ranks")), "{root:?}");
    assert!(matches!(h.join().unwrap(), Err(Error::Aborted(_))));
    // A rank number out of range is refused before any network.
    assert!(matches!(
        Bootstrap::rendezvous(&cfg(3, 3, port, "n", 100)),
        Err(Error::BadEnv { var: "RMR_RANK", .. })
    ));
}

#[test]
fn a_rank_that_dies_fails_the_collective() {
    let port = free_port();
    let h = std::thread::spawn(move || {
        let b = Bootstrap::rendezvous(&cfg(1, 2, port, "n", 3000)).unwrap();
        drop(b); // dies before the allgather
    });
    let root = Bootstrap::rendezvous(&cfg(0, 2, port, "n", 3000)).unwrap();
    h.join().unwrap();
    assert!(matches!(root.allgather(b"x"), Err(Error::PeerLost { rank: 1, .. })));
}

#[test]
fn single_and_size_one() {
    let b = Bootstrap::single();
    assert_eq!((b.rank(), b.size(), b.local_rank(), b.local_size()), (0, 1, 0, 1));
    assert_eq!(b.allgather(b"me").unwrap(), vec![b"me".to_vec()]);
    let b = Bootstrap::rendezvous(&cfg(0, 1, 1, "n", 100)).unwrap();
    assert_eq!(b.allgather(b"").unwrap().len(), 1);
}

/// Reads one length-prefixed frame (the rendezvous wire format), or None
/// when the connection closes first.
fn read_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
    s.read_exact(&mut body).ok()?;
    Some(body)
}

#[test]
fn a_tcp_rendezvous_needs_the_secret_at_every_rank() {
    let port = free_port();
    for secret in [Vec::new(), b"too short".to_vec()] {
        let c = RendezvousConfig { secret, ..cfg(1, 2, port, "n", 300) };
        match Bootstrap::rendezvous(&c) {
            Err(e @ Error::BadEnv { var: "RMR_JOB_SECRET", .. }) => {
                assert!(e.to_string().contains("secret"), "{e}");
            }
            r => panic!("{:?}", r.map(|b| b.rank())),
        }
    }
    // A job of one process needs none.
    let c = RendezvousConfig { secret: Vec::new(), ..cfg(0, 1, port, "n", 300) };
    assert!(Bootstrap::rendezvous(&c).is_ok());
    let s = rmr_boot::fresh_secret();
    assert!(s.len() >= rmr_boot::MIN_SECRET && s != rmr_boot::fresh_secret());
}

/// A process with another secret, first at the root and claiming rank 1,
/// is dropped without a word; the real rank 1 then joins and the job's
/// exchange reaches only the job. The impostor learns nothing.
#[test]
fn a_joiner_without_the_secret_gets_nothing() {
    let port = free_port();
    let root = std::thread::spawn(move || {
        let b = Bootstrap::rendezvous(&cfg(0, 2, port, "n", 10_000)).unwrap();
        b.allgather(b"root's keys").unwrap()
    });
    std::thread::sleep(Duration::from_millis(100));
    let wrong = RendezvousConfig {
        secret: b"another job's secret, 32 bytes!".to_vec(),
        ..cfg(1, 2, port, "n", 2000)
    };
    let imp = Bootstrap::rendezvous(&wrong);
    assert!(imp.is_err(), "an impostor was admitted");
    println!("impostor: {}", imp.err().unwrap());
    let real = Bootstrap::rendezvous(&cfg(1, 2, port, "n", 10_000)).unwrap();
    let all = real.allgather(b"rank 1's keys").unwrap();
    assert_eq!(all, vec![b"root's keys".to_vec(), b"rank 1's keys".to_vec()]);
    assert_eq!(root.join().unwrap(), all);
}

/// A fake root (another process listening at RMR_ROOT first) cannot prove
/// the secret: the rank leaves it before sending anything of its own.
#[test]
fn a_root_without_the_secret_is_left() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        // Challenge (kind 6, a nonce), then read the hello, then a welcome
        // whose proof is made up.
        let mut f = 33u32.to_le_bytes().to_vec();
        f.push(6);
        f.extend_from_slice(&[5u8; 32]);
        s.write_all(&f).unwrap();
        let hello = read_frame(&mut s).expect("a hello");
        let mut w = Vec::new();
        w.push(2u8);
        w.extend_from_slice(&7u64.to_le_bytes());
        w.extend_from_slice(&2u32.to_le_bytes());
        for _ in 0..2 {
            w.extend_from_slice(&1u16.to_le_bytes());
            w.push(b'n');
        }
        w.extend_from_slice(&[0u8; 32]);
        let mut f = (w.len() as u32).to_le_bytes().to_vec();
        f.extend_from_slice(&w);
        let _ = s.write_all(&f);
        // Whatever the rank sends next would be its data: it must send none.
        let after = read_frame(&mut s);
        (hello, after)
    });
    match Bootstrap::rendezvous(&cfg(1, 2, port, "n", 3000)) {
        Err(e @ Error::Unauthenticated { .. }) => assert!(e.to_string().contains("secret"), "{e}"),
        r => panic!("{:?}", r.map(|b| b.rank())),
    }
    let (hello, after) = fake.join().unwrap();
    assert!(!hello.windows(SECRET.len()).any(|w| w == SECRET), "the secret travelled");
    assert!(after.is_none(), "the rank sent the fake root more than its hello");
}

/// A hello recorded from a genuine rank (here by a fake root that posed
/// the challenge) answers no other challenge: replayed at the real root
/// it is dropped, and the real rank still joins.
#[test]
fn a_replayed_hello_is_refused() {
    // Record a genuine hello.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let rec_port = l.local_addr().unwrap().port();
    let rec = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut f = 33u32.to_le_bytes().to_vec();
        f.push(6);
        f.extend_from_slice(&[5u8; 32]);
        s.write_all(&f).unwrap();
        read_frame(&mut s).expect("a hello")
    });
    let _ = Bootstrap::rendezvous(&cfg(1, 2, rec_port, "n", 1000));
    let hello = rec.join().unwrap();
    // Replay it at a real root.
    let port = free_port();
    let root = std::thread::spawn(move || Bootstrap::rendezvous(&cfg(0, 2, port, "n", 10_000)));
    std::thread::sleep(Duration::from_millis(100));
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let challenge = read_frame(&mut s).expect("a challenge");
    assert_eq!(challenge[0], 6);
    let mut f = (hello.len() as u32).to_le_bytes().to_vec();
    f.extend_from_slice(&hello);
    s.write_all(&f).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert!(read_frame(&mut s).is_none(), "a replayed hello was welcomed");
    let real = Bootstrap::rendezvous(&cfg(1, 2, port, "n", 10_000)).unwrap();
    assert_eq!(real.rank(), 1);
    assert_eq!(root.join().unwrap().unwrap().size(), 2);
}

/// Strangers that connect to the root and stay silent hold up nobody:
/// with ten of them (5 s of hello budget each, 50 s one after the other)
/// a job with a 10 s limit still forms.
#[test]
fn silent_strangers_do_not_hold_up_the_job() {
    let port = free_port();
    let root = std::thread::spawn(move || Bootstrap::rendezvous(&cfg(0, 2, port, "n", 10_000)));
    std::thread::sleep(Duration::from_millis(100));
    let silent: Vec<TcpStream> =
        (0..10).map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap()).collect();
    let real = Bootstrap::rendezvous(&cfg(1, 2, port, "n", 10_000)).expect("the real rank joins");
    assert_eq!(real.size(), 2);
    assert_eq!(root.join().unwrap().expect("the root").size(), 2);
    drop(silent);
}
