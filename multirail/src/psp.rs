//! The multirail PSP: one rail PSP per rail on the same service id; a
//! connector opens one rail connection per rail, each tagged with a session
//! id, and the user sees a single connection request once every rail's
//! request has arrived. Accepting or rejecting it answers all of them. A
//! rejoin request (a lost rail of an accepted endpoint connected again)
//! goes to its endpoint, never to the user (see the `rejoin` module).

use crate::ep::MrEp;
use crate::ep::rejoin::Rejoins;
use crate::evd::MrEvd;
use crate::header::{parse_header, parse_rejoin};
use crate::objects::MrIa;
use rmr_api::{ConnRequest, ConnRequestOps, Ep, Error, Evd, Event, Psp, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A listening multirail service point.
pub struct MrPsp {
    rails: Vec<Arc<dyn Psp>>,
    closed: Arc<AtomicBool>,
}

struct Pending {
    reqs: Vec<Option<ConnRequest>>,
    pd: Vec<u8>,
    since: Instant,
}

impl MrPsp {
    pub(crate) fn listen(ia: &MrIa, service: u16, user: Arc<dyn Evd>) -> Result<MrPsp> {
        let n = ia.rails.len();
        // Every rail listens on the same service id. With service 0 the first
        // rail picks a free one, which may be taken on another rail: try again.
        let mut attempt = 0;
        let (rails, evds) = loop {
            attempt += 1;
            match Self::listen_all(ia, service) {
                Ok(x) => break x,
                Err(e) if service == 0 && attempt < 20 => drop(e),
                Err(e) => return Err(e),
            }
        };
        let closed = Arc::new(AtomicBool::new(false));
        let pending: Arc<Mutex<HashMap<u64, Pending>>> = Arc::default();
        for (i, evd) in evds.into_iter().enumerate() {
            let (c, pending, user) = (closed.clone(), pending.clone(), user.clone());
            let hub = Rejoins::of(ia);
            std::thread::Builder::new()
                .name(format!("rmr-mr-psp{i}"))
                .spawn(move || {
                    while !c.load(Ordering::Acquire) {
                        if let Ok(Event::ConnectionRequest(cr)) =
                            evd.wait(Some(Duration::from_millis(100)), 1)
                        {
                            on_request(cr, i, n, &pending, &user, &hub);
                        }
                        // Also under a steady stream of requests, which never lets
                        // the wait time out: stale sessions must not hold their slots.
                        expire(&pending);
                    }
                })
                .map_err(|e| Error::io("spawn multirail psp", e))?;
        }
        Ok(MrPsp { rails, closed })
    }
}

fn lock(p: &Mutex<HashMap<u64, Pending>>) -> std::sync::MutexGuard<'_, HashMap<u64, Pending>> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

/// Rejects sessions whose rails did not all arrive in time.
fn expire(pending: &Mutex<HashMap<u64, Pending>>) {
    lock(pending).retain(|_, p| {
        let keep = p.since.elapsed() < Duration::from_secs(30);
        if !keep {
            for r in p.reqs.iter().flatten() {
                let _ = r.reject(b"incomplete multirail session");
            }
        }
        keep
    });
}

fn on_request(
    cr: ConnRequest,
    rail: usize,
    n: usize,
    pending: &Mutex<HashMap<u64, Pending>>,
    user: &Arc<dyn Evd>,
    hub: &Rejoins,
) {
    if let Some((r, mac)) = parse_rejoin(cr.private_data()) {
        hub.request(cr, rail, &r, &mac);
        return;
    }
    let Some((session, idx, cnt, upd)) = parse_header(cr.private_data()) else {
        let _ = cr.reject(b"not a multirail connection");
        return;
    };
    if cnt != n || idx >= n {
        let _ = cr.reject(b"rail count mismatch");
        return;
    }
    // Rail i's connection arrives on rail i's PSP; one that names another
    // rail would join this EP's rail `idx` over the wrong link.
    if idx != rail {
        let _ = cr.reject(b"rail index does not match the rail");
        return;
    }
    let upd = upd.to_vec();
    let mut map = lock(pending);
    let p = map.entry(session).or_insert_with(|| Pending {
        reqs: vec![None; n],
        pd: Vec::new(),
        since: Instant::now(),
    });
    if idx == 0 {
        p.pd = upd;
    }
    p.reqs[idx] = Some(cr);
    if p.reqs.iter().all(Option::is_some) {
        let p = map.remove(&session).expect("present");
        drop(map);
        let req = MrConnReq {
            rails: p.reqs.into_iter().map(|r| r.expect("complete")).collect(),
            pd: p.pd,
            session,
        };
        if let Some(m) = user.as_any().downcast_ref::<MrEvd>() {
            m.q.push(Event::ConnectionRequest(ConnRequest(Arc::new(req))));
        }
    }
}

type Listening = (Vec<Arc<dyn Psp>>, Vec<Arc<dyn Evd>>);

impl MrPsp {
    fn listen_all(ia: &MrIa, service: u16) -> Result<Listening> {
        let mut rails: Vec<Arc<dyn Psp>> = Vec::with_capacity(ia.rails.len());
        let mut evds = Vec::with_capacity(ia.rails.len());
        let mut svc = service;
        for r in &ia.rails {
            // Each rail gets an EVD of its own backend (rails may differ).
            let evd = r.create_evd()?;
            let p = r.create_psp(svc, &evd)?;
            svc = p.service();
            rails.push(p);
            evds.push(evd);
        }
        Ok((rails, evds))
    }
}

struct MrConnReq {
    rails: Vec<ConnRequest>,
    pd: Vec<u8>,
    /// The connector's session id (what its rejoins name).
    session: u64,
}

impl ConnRequestOps for MrConnReq {
    fn accept(&self, ep: &Arc<dyn Ep>, pd: &[u8]) -> Result<()> {
        let mep = ep
            .as_any()
            .downcast_ref::<MrEp>()
            .ok_or_else(|| Error::invalid("EP is not a multirail EP"))?;
        mep.accept_rails(&self.rails, &self.pd, pd, self.session)
    }

    fn reject(&self, pd: &[u8]) -> Result<()> {
        for (i, r) in self.rails.iter().enumerate() {
            r.reject(if i == 0 { pd } else { &[] })?;
        }
        Ok(())
    }

    fn private_data(&self) -> &[u8] {
        &self.pd
    }

    fn peer(&self) -> String {
        self.rails.iter().map(|r| r.peer()).collect::<Vec<_>>().join(",")
    }
}

impl Psp for MrPsp {
    fn service(&self) -> u16 {
        self.rails[0].service()
    }

    fn address(&self) -> String {
        self.rails.iter().map(|p| p.address()).collect::<Vec<_>>().join(",")
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        for r in &self.rails {
            r.close();
        }
    }
}

impl Drop for MrPsp {
    fn drop(&mut self) {
        self.close();
    }
}
