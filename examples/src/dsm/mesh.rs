//! Every process connected to every other: one EP per peer, all on one
//! IA and PZ, found through the bootstrap's allgather. One EVD takes the
//! completions of all of them; [`Mesh::run`] posts a DTO and waits for its
//! own completion, keeping others' completions for their waiters.

use super::{DsmError, Result};
use rmr::boot::Bootstrap;
use rmr::{DtoCompletion, Ep, EpEvds, Evd, Event, Ia, Psp, Pz, RmrContext};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long one remote operation may take before the runtime gives up.
const OP_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) struct Mesh {
    pub(crate) ia: Arc<dyn Ia>,
    pub(crate) pz: Arc<dyn Pz>,
    evd: Arc<dyn Evd>,
    /// Connection events (kept so the EPs' EVD lives as long as they do).
    _cevd: Arc<dyn Evd>,
    _psp: Arc<dyn Psp>,
    /// `eps[p]`: the EP to process `p` (none to ourselves).
    eps: Vec<Option<Arc<dyn Ep>>>,
    /// Completions that arrived while another operation was waited for.
    done: Mutex<(u64, HashMap<u64, DtoCompletion>)>,
}

impl Mesh {
    /// Connects to every process of the job. `local` is this process's
    /// address as peers reach it (the IA's address).
    pub(crate) fn connect(boot: &Bootstrap, ia: Arc<dyn Ia>) -> Result<Mesh> {
        let (me, n) = (boot.rank(), boot.size());
        let pz = ia.create_pz()?;
        let evd = ia.create_evd()?;
        let cevd = ia.create_evd()?;
        let psp_evd = ia.create_evd()?;
        let psp = ia.create_psp(0, &psp_evd)?;
        let mut card = psp.service().to_le_bytes().to_vec();
        card.extend_from_slice(psp.address().as_bytes());
        let cards = boot.allgather(&card)?;
        let evds = EpEvds { request: evd.clone(), recv: evd.clone(), conn: cevd.clone() };
        let mut eps: Vec<Option<Arc<dyn Ep>>> = vec![None; n];
        // Lower ranks connect to us: accept them in a thread while we connect
        // to the higher ranks, so nobody waits in a cycle.
        let acceptor = {
            let (ia, pz, evds, psp_evd) = (ia.clone(), pz.clone(), evds.clone(), psp_evd.clone());
            std::thread::spawn(move || -> Result<Vec<(usize, Arc<dyn Ep>)>> {
                let mut got = Vec::new();
                while got.len() < me {
                    match psp_evd.wait(Some(OP_TIMEOUT), 1)? {
                        Event::ConnectionRequest(cr) => {
                            let pd = cr.private_data();
                            let Some(from) = pd
                                .get(..8)
                                .map(|b| u64::from_le_bytes(b.try_into().expect("8")) as usize)
                            else {
                                let _ = cr.reject(b"not a dsm peer");
                                continue;
                            };
                            let ep = ia.create_ep(&pz, &evds)?;
                            cr.accept(&ep, b"dsm")?;
                            got.push((from, ep));
                        }
                        _ => continue,
                    }
                }
                Ok(got)
            })
        };
        for (p, c) in cards.iter().enumerate().skip(me + 1) {
            let port = u16::from_le_bytes(
                c.get(..2)
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(|| DsmError::Protocol(format!("card of rank {p}")))?,
            );
            let addr = String::from_utf8_lossy(&c[2..]).to_string();
            let ep = ia.create_ep(&pz, &evds)?;
            ep.connect(&addr, port, &(me as u64).to_le_bytes(), OP_TIMEOUT)?;
            eps[p] = Some(ep);
        }
        let accepted = acceptor
            .join()
            .map_err(|_| DsmError::Protocol("acceptor thread panicked".into()))??;
        for (from, ep) in accepted {
            if from >= me || eps[from].is_some() {
                return Err(DsmError::Protocol(format!("unexpected connection from rank {from}")));
            }
            eps[from] = Some(ep);
        }
        Ok(Mesh { ia, pz, evd, _cevd: cevd, _psp: psp, eps, done: Mutex::new((1, HashMap::new())) })
    }

    /// The EP to process `p`.
    pub(crate) fn ep(&self, p: usize) -> Result<&Arc<dyn Ep>> {
        self.eps
            .get(p)
            .and_then(Option::as_ref)
            .ok_or_else(|| DsmError::Protocol(format!("no endpoint to rank {p}")))
    }

    /// Posts one DTO with `post(cookie)` and waits for its completion.
    pub(crate) fn run(&self, post: impl FnOnce(u64) -> rmr::Result<()>) -> Result<DtoCompletion> {
        let mut g = self.done.lock().unwrap_or_else(|e| e.into_inner());
        let cookie = g.0;
        g.0 += 1;
        post(cookie)?;
        loop {
            if let Some(c) = g.1.remove(&cookie) {
                c.result()?;
                return Ok(c);
            }
            match self.evd.wait(Some(OP_TIMEOUT), 1)? {
                Event::Dto(c) if c.cookie == cookie => {
                    c.result()?;
                    return Ok(c);
                }
                // An error of another DTO (a suppressed one reports errors
                // too) fails the operation in progress: nothing is lost silently.
                Event::Dto(c) if !c.status.is_ok() => {
                    c.result()?;
                }
                Event::Dto(c) => {
                    g.1.insert(c.cookie.0, c);
                }
                _ => {}
            }
        }
    }

    /// Exchanges one RMR context per process through the bootstrap.
    pub(crate) fn exchange(boot: &Bootstrap, mine: &RmrContext) -> Result<Vec<RmrContext>> {
        boot.allgather(&mine.to_bytes())?
            .iter()
            .map(|b| RmrContext::from_bytes(b).map_err(DsmError::from))
            .collect()
    }
}
