//! Async ping-pong on tokio (rmr's `tokio` feature): connect with
//! `rmr::aio::connect`, then an 8 B write+notify ping-pong whose
//! completions are awaited (`AsyncEvd::next`), beside the same ping-pong
//! on the blocking path (`Evd::wait`), taking turns on one endpoint in
//! ROUNDS interleaved rounds; prints both half round trips and their
//! ratio (medians of the rounds).
//!
//! ```text
//! cargo run --release -p rmr-examples --example async_pingpong [-- ROUNDS ITERS]
//! ```

use rmr::aio::{AsyncEvd, connect};
use rmr::{Access, Cookie, DtoFlags, DtoOp, Ep, EpEvds, Evd, Event, Lmr, MemRegion, Result, Sge};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

/// The echo side, blocking: every receive is answered by an 8 B write and
/// an 8 B send; ends when the client's EP goes.
fn echo(ia: Arc<dyn rmr::Ia>, pevd: Arc<dyn Evd>) -> Result<()> {
    let (pz, evd) = (ia.create_pz()?, ia.create_evd()?);
    let mem = MemRegion::new(64);
    let lmr = pz.register_all(&mem, Access::ALL)?;
    let ep = ia.create_ep(&pz, &EpEvds::single(&evd))?;
    ep.post_recv(&[Sge::new(&*lmr, 8, 8)], Cookie(1), DtoFlags::empty())?;
    let peer = match pevd.wait(Some(WAIT), 1)? {
        Event::ConnectionRequest(cr) => {
            let peer = rmr::RmrContext::from_bytes(cr.private_data())?;
            cr.accept(&ep, &lmr.rmr_context().to_bytes())?;
            peer
        }
        e => return Err(rmr::Error::Protocol(format!("unexpected {e:?}"))),
    };
    let sge = [Sge::new(&*lmr, 0, 8)];
    loop {
        match evd.wait(Some(WAIT), 1) {
            Ok(Event::Dto(c)) if c.op == DtoOp::Recv => {
                c.result()?;
                ep.post_recv(&[Sge::new(&*lmr, 8, 8)], Cookie(1), DtoFlags::empty())?;
                ep.post_rdma_write(&sge, peer.at(0), Cookie(0), DtoFlags::SUPPRESS)?;
                ep.post_send(&sge, Cookie(0), DtoFlags::SUPPRESS)?;
            }
            Ok(Event::Disconnected { .. } | Event::Broken { .. }) | Err(_) => return Ok(()),
            Ok(_) => {}
        }
    }
}

/// The client's endpoint and buffers.
struct Client {
    ep: Arc<dyn Ep>,
    evd: Arc<dyn Evd>,
    lmr: Arc<dyn Lmr>,
    peer: rmr::RmrContext,
}

impl Client {
    fn ping(&self) -> Result<()> {
        let sge = [Sge::new(&*self.lmr, 0, 8)];
        self.ep.post_rdma_write(&sge, self.peer.at(0), Cookie(0), DtoFlags::SUPPRESS)?;
        self.ep.post_send(&sge, Cookie(0), DtoFlags::SUPPRESS)
    }

    fn rearm(&self) -> Result<()> {
        self.ep.post_recv(&[Sge::new(&*self.lmr, 8, 8)], Cookie(1), DtoFlags::empty())
    }

    /// `iters` round trips on the blocking path; half round trip in us.
    fn blocking(&self, iters: u64) -> Result<f64> {
        let t0 = Instant::now();
        for _ in 0..iters {
            self.ping()?;
            loop {
                if let Event::Dto(c) = self.evd.wait(Some(WAIT), 1)?
                    && c.op == DtoOp::Recv
                {
                    break;
                }
            }
            self.rearm()?;
        }
        Ok(t0.elapsed().as_secs_f64() * 1e6 / (2 * iters) as f64)
    }

    /// The same, awaiting completions.
    async fn awaited(&self, a: &AsyncEvd, iters: u64) -> Result<f64> {
        let t0 = Instant::now();
        for _ in 0..iters {
            self.ping()?;
            loop {
                if let Event::Dto(c) = a.next_within(WAIT).await?
                    && c.op == DtoOp::Recv
                {
                    break;
                }
            }
            self.rearm()?;
        }
        Ok(t0.elapsed().as_secs_f64() * 1e6 / (2 * iters) as f64)
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    rmr_examples::init_tracing();
    let args: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (rounds, iters) =
        (args.first().copied().unwrap_or(5), args.get(1).copied().unwrap_or(2000));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| rmr::Error::io("tokio runtime", e))?;
    rt.block_on(async {
        let server_ia = rmr::open("tcp:127.0.0.1")?;
        let pevd = server_ia.create_evd()?;
        let psp = server_ia.create_psp(0, &pevd)?;
        let (addr, svc) = (psp.address(), psp.service());
        let server = std::thread::spawn(move || echo(server_ia, pevd));

        let ia = rmr::open("tcp:127.0.0.1")?;
        let (pz, evd, cevd) = (ia.create_pz()?, ia.create_evd()?, ia.create_evd()?);
        let mem = MemRegion::new(64);
        let lmr = pz.register_all(&mem, Access::ALL)?;
        let ep = ia.create_ep(&pz, &EpEvds { request: evd.clone(), recv: evd.clone(), conn: cevd.clone() })?;
        let conn = AsyncEvd::new(cevd)?;
        let reply =
            connect(&*ep, &conn, &addr, svc, &lmr.rmr_context().to_bytes(), WAIT).await?;
        let c = Client { ep, evd: evd.clone(), lmr, peer: rmr::RmrContext::from_bytes(&reply)? };
        c.rearm()?;
        let a = AsyncEvd::new(evd)?;
        // Warm-up on both paths.
        c.blocking(iters / 10)?;
        c.awaited(&a, iters / 10).await?;
        let (mut b, mut w) = (Vec::new(), Vec::new());
        for r in 0..rounds {
            if r % 2 == 0 {
                b.push(c.blocking(iters)?);
                w.push(c.awaited(&a, iters).await?);
            } else {
                w.push(c.awaited(&a, iters).await?);
                b.push(c.blocking(iters)?);
            }
        }
        let (mb, mw) = (median(&mut b), median(&mut w));
        println!(
            "8 B write+notify half round trip, median of {rounds} interleaved rounds of {iters}: blocking {mb:.2} us, async (tokio, one thread) {mw:.2} us: {:.2}x",
            mw / mb
        );
        drop(c);
        drop(psp);
        let _ = server.join();
        Ok(())
    })
}
