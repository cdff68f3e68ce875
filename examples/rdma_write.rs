//! RDMA write: the client writes a buffer straight into the server's
//! registered memory, then tells it with a send; the server checks every byte.
//!
//! ```text
//! cargo run --release -p rmr-examples --example rdma_write                 # both sides in one process
//! cargo run --release -p rmr-examples --example rdma_write -- server tcp:127.0.0.1 7471
//! cargo run --release -p rmr-examples --example rdma_write -- client tcp:127.0.0.1 127.0.0.1:7471
//! ```
//! The server hands its region's RMR context to the client in the
//! connection's private data: no extra round trip.

use rmr::{Access, Cookie, DtoFlags, EpEvds, MemRegion, Result, RmrContext, Sge};
use std::time::{Duration, Instant};

const LEN: usize = 64 << 20;
const ROUNDS: u64 = 8;
/// Bound on every wait: a peer that vanishes ends the run with an error.
const WAIT: Duration = Duration::from_secs(60);

fn checksum(b: &[u8]) -> u64 {
    b.iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3))
}

fn fill(round: u64) -> Vec<u8> {
    (0..LEN).map(|i| (i as u64).wrapping_mul(31).wrapping_add(round * 7) as u8).collect()
}

fn server(spec: &str, service: u16, ready: Option<std::sync::mpsc::Sender<u16>>) -> Result<()> {
    let ia = rmr::open(spec)?;
    let (pz, evd) = (ia.create_pz()?, ia.create_evd()?);
    let target = MemRegion::new(LEN);
    let lmr = pz.register_all(&target, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let note = MemRegion::new(16);
    let note_lmr = pz.register_all(&note, Access::LOCAL_WRITE)?;
    let listener = ia.listen(service)?;
    println!("server: listening on {}:{}", listener.address(), listener.service());
    if let Some(tx) = ready {
        let _ = tx.send(listener.service());
    }
    let ep = ia.create_ep(&pz, &EpEvds::single(&evd))?;
    listener.accept(&ep, &lmr.rmr_context().to_bytes(), WAIT)?;
    for round in 0..ROUNDS {
        ep.post_recv(&[Sge::whole(&*note_lmr)], Cookie(round), DtoFlags::empty())?;
        evd.wait_dto(WAIT)?;
        let want = note.load_u64(0)?;
        let mut got = vec![0u8; LEN];
        target.read(0, &mut got)?;
        let ok = checksum(&got) == want;
        println!(
            "server: round {round}: {LEN} bytes landed, checksum {}",
            if ok { "ok" } else { "BAD" }
        );
        note.store_u64(8, ok as u64)?;
        ep.post_send(&[Sge::new(&*note_lmr, 8, 8)], Cookie(round), DtoFlags::SUPPRESS)?;
        if !ok {
            return Err(rmr::Error::Protocol("checksum mismatch".into()));
        }
    }
    // Stay until the client closes: by then it has every verdict.
    evd.wait_closed(WAIT)
}

fn client(spec: &str, remote: &str, service: u16) -> Result<()> {
    let ia = rmr::open(spec)?;
    let (pz, evd) = (ia.create_pz()?, ia.create_evd()?);
    let ep = ia.create_ep(&pz, &EpEvds::single(&evd))?;
    let pd = ep.connect_with_retry(remote, service, b"", Duration::from_secs(10))?;
    let ctx = RmrContext::from_bytes(&pd)?;
    let src = MemRegion::new(LEN);
    let src_lmr = pz.register_all(&src, Access::empty())?;
    let note = MemRegion::new(16);
    let note_lmr = pz.register_all(&note, Access::LOCAL_WRITE)?;
    let mut secs = 0.0;
    for round in 0..ROUNDS {
        let data = fill(round);
        src.write(0, &data)?;
        note.store_u64(0, checksum(&data))?;
        ep.post_recv(&[Sge::new(&*note_lmr, 8, 8)], Cookie(1000 + round), DtoFlags::empty())?;
        let t = Instant::now();
        // The write needs no completion: the send after it is ordered behind it.
        ep.post_rdma_write(&[Sge::whole(&*src_lmr)], ctx.at(0), Cookie(round), DtoFlags::SUPPRESS)?;
        ep.post_send(&[Sge::new(&*note_lmr, 0, 8)], Cookie(round), DtoFlags::SUPPRESS)?;
        evd.wait_dto(WAIT)?; // the server's verdict
        secs += t.elapsed().as_secs_f64();
        if note.load_u64(8)? != 1 {
            return Err(rmr::Error::Protocol("server saw corrupted data".into()));
        }
    }
    let mb = (LEN as f64 * ROUNDS as f64) / secs / 1e6;
    println!("client: {ROUNDS} x {} MiB RDMA writes verified, {mb:.0} MB/s", LEN >> 20);
    ep.close(WAIT)?;
    Ok(())
}

fn main() -> Result<()> {
    rmr_examples::init_tracing();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("server") => {
            let spec = args.get(1).map_or("tcp:127.0.0.1", String::as_str);
            server(spec, args.get(2).map_or(7471, |p| p.parse().expect("port")), None)
        }
        Some("client") => {
            let spec = args.get(1).map_or("tcp:127.0.0.1", String::as_str);
            let to = args.get(2).map_or("127.0.0.1:7471", String::as_str);
            let (host, port) = to.rsplit_once(':').expect("HOST:PORT");
            client(spec, host, port.parse().expect("port number"))
        }
        None | Some("local") => {
            let spec = args.get(1).cloned().unwrap_or_else(|| "tcp:127.0.0.1".into());
            let (tx, rx) = std::sync::mpsc::channel();
            let s2 = spec.clone();
            let srv = std::thread::spawn(move || server(&s2, 0, Some(tx)));
            let port = rx.recv().expect("server started");
            let host = spec.split_once(':').map_or("127.0.0.1", |x| x.1).to_string();
            client(&spec, &host, port)?;
            srv.join().expect("server thread")
        }
        Some(other) => {
            eprintln!(
                "usage: rdma_write [local [SPEC] | server SPEC PORT | client SPEC HOST:PORT] (got {other})"
            );
            std::process::exit(2)
        }
    }
}
