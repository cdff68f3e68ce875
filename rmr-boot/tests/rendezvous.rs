//! The TCP rendezvous with ranks as threads of one process (real sockets on
//! loopback): joining, allgather, node placement, and every typed failure.

use rmr_boot::{Bootstrap, Error, Kind, RendezvousConfig};
use std::net::TcpListener;
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
    }
}

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
