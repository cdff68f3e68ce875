//! Ping-pong: half round-trip latency of send/recv for a few message sizes.
//!
//! ```text
//! cargo run --release -p rmr-examples --example pingpong                  # one process
//! cargo run --release -p rmr-examples --example pingpong -- server tcp:127.0.0.1 7472
//! cargo run --release -p rmr-examples --example pingpong -- client tcp:127.0.0.1 127.0.0.1:7472
//! ```

use rmr::{Access, Cookie, DtoFlags, Ep, EpEvds, Evd, Lmr, MemRegion, Result, Sge};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SIZES: [u64; 5] = [8, 64, 512, 4096, 65536];
const ITERS: u64 = 2000;
/// Bound on every wait: a peer that vanishes ends the run with an error.
const WAIT: Duration = Duration::from_secs(60);

/// One side of the exchange: `first` sends first, the other echoes.
fn exchange(ep: &Arc<dyn Ep>, evd: &Arc<dyn Evd>, lmr: &Arc<dyn Lmr>, first: bool) -> Result<()> {
    let rbuf = lmr.len() / 2;
    for &size in &SIZES {
        let send = [Sge::new(&**lmr, 0, size)];
        let recv = [Sge::new(&**lmr, rbuf, size)];
        let mut t0 = Instant::now();
        for i in 0..ITERS + 100 {
            if i == 100 {
                t0 = Instant::now(); // warm-up done
            }
            ep.post_recv(&recv, Cookie(i), DtoFlags::empty())?;
            if first {
                ep.post_send(&send, Cookie(i), DtoFlags::SUPPRESS)?;
                evd.wait_dto(WAIT)?;
            } else {
                evd.wait_dto(WAIT)?;
                ep.post_send(&send, Cookie(i), DtoFlags::SUPPRESS)?;
            }
        }
        if first {
            let half_rtt = t0.elapsed().as_secs_f64() / (2 * ITERS) as f64 * 1e6;
            println!("{size:>6} B  half round trip {half_rtt:8.2} us");
        }
    }
    Ok(())
}

type Side = (Arc<dyn rmr::Ia>, Arc<dyn rmr::Pz>, Arc<dyn Evd>, Arc<dyn Lmr>);

fn setup(spec: &str) -> Result<Side> {
    let ia = rmr::open(spec)?;
    let (pz, evd) = (ia.create_pz()?, ia.create_evd()?);
    let mem = MemRegion::new(2 * 65536);
    let lmr = pz.register_all(&mem, Access::LOCAL_WRITE)?;
    Ok((ia, pz, evd, lmr))
}

fn server(spec: &str, service: u16, ready: Option<std::sync::mpsc::Sender<u16>>) -> Result<()> {
    let (ia, pz, evd, lmr) = setup(spec)?;
    let listener = ia.listen(service)?;
    println!("server: listening on {}:{}", listener.address(), listener.service());
    if let Some(tx) = ready {
        let _ = tx.send(listener.service());
    }
    let ep = ia.create_ep(&pz, &EpEvds::single(&evd))?;
    listener.accept(&ep, b"", WAIT)?;
    exchange(&ep, &evd, &lmr, false)?;
    // Stay until the client closes: by then it has every echo.
    evd.wait_closed(WAIT)
}

fn client(spec: &str, host: &str, port: u16) -> Result<()> {
    let (ia, pz, evd, lmr) = setup(spec)?;
    let ep = ia.create_ep(&pz, &EpEvds::single(&evd))?;
    ep.connect_with_retry(host, port, b"", Duration::from_secs(10))?;
    // The connection event comes first on the shared EVD; wait_dto passes it over.
    println!("ping-pong over {spec}, {ITERS} iterations per size");
    exchange(&ep, &evd, &lmr, true)?;
    ep.close(WAIT)
}

fn main() -> Result<()> {
    rmr_examples::init_tracing();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let spec = args.get(1).cloned().unwrap_or_else(|| "tcp:127.0.0.1".into());
    match args.first().map(String::as_str) {
        Some("server") => {
            server(&spec, args.get(2).map_or(7472, |p| p.parse().expect("port")), None)
        }
        Some("client") => {
            let to = args.get(2).map_or("127.0.0.1:7472", String::as_str);
            let (h, p) = to.rsplit_once(':').expect("HOST:PORT");
            client(&spec, h, p.parse().expect("port number"))
        }
        None | Some("local") => {
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
                "usage: pingpong [local [SPEC] | server SPEC PORT | client SPEC HOST:PORT] (got {other})"
            );
            std::process::exit(2)
        }
    }
}
