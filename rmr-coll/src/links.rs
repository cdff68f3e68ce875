//! Wiring: the endpoints a barrier needs, connected through the bootstrap.
//!
//! Every member listens on a PSP; the bootstrap's allgather spreads each
//! member's PSP address and service plus a few bytes of the caller's (the
//! RMR context of its slots); then each member connects to its schedule
//! partners with a higher index and accepts those with a lower one (in a
//! thread, so that nobody waits on a connect while a peer waits on it).

use crate::{Error, Result};
use rmr_api::{Ep, EpEvds, EpId, EpState, Evd, Event, Ia, Psp, Pz};
use rmr_boot::Bootstrap;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAGIC: &[u8; 4] = b"RMRC";

/// A member's connected endpoints to its partners, by member index.
pub(crate) struct Links {
    /// This process's member index.
    pub(crate) me: usize,
    /// Member index -> rank.
    pub(crate) ranks: Vec<usize>,
    /// Member index -> endpoint (partners only).
    pub(crate) eps: Vec<Option<Arc<dyn Ep>>>,
    /// Member index -> the bytes that member passed to [`Links::connect`].
    pub(crate) extra: Vec<Vec<u8>>,
    by_ep: HashMap<EpId, usize>,
    _psp: Arc<dyn Psp>,
}

fn encode(service: u16, addr: &str, extra: &[u8]) -> Vec<u8> {
    let mut b = vec![1u8];
    b.extend_from_slice(&service.to_le_bytes());
    b.extend_from_slice(&(addr.len() as u16).to_le_bytes());
    b.extend_from_slice(addr.as_bytes());
    b.extend_from_slice(extra);
    b
}

fn decode(rank: usize, b: &[u8]) -> Result<(u16, String, Vec<u8>)> {
    let bad = || Error::Setup(format!("rank {rank}'s address record is malformed"));
    if b.len() < 5 || b[0] != 1 {
        return Err(bad());
    }
    let service = u16::from_le_bytes([b[1], b[2]]);
    let n = u16::from_le_bytes([b[3], b[4]]) as usize;
    let addr = b.get(5..5 + n).ok_or_else(bad)?;
    Ok((service, String::from_utf8_lossy(addr).into_owned(), b[5 + n..].to_vec()))
}

impl Links {
    /// Collective over every rank of `boot`: `members` (ranks, in member
    /// order) connect to their `partners(n, me)`; everyone else only takes
    /// part in the exchange and gets `None`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn connect(
        boot: &Bootstrap,
        ia: &Arc<dyn Ia>,
        pz: &Arc<dyn Pz>,
        evd: &Arc<dyn Evd>,
        members: &[usize],
        partners: &dyn Fn(usize) -> Vec<usize>,
        extra: &[u8],
        timeout: Duration,
    ) -> Result<Option<Links>> {
        let me = members.iter().position(|&r| r == boot.rank());
        let psp_evd = ia.create_evd()?;
        let psp = match me {
            Some(_) => Some(ia.create_psp(0, &psp_evd)?),
            None => None,
        };
        let mine = psp.as_ref().map_or(vec![0u8], |p| encode(p.service(), &p.address(), extra));
        let all = boot.allgather(&mine)?;
        let (Some(me), Some(psp)) = (me, psp) else { return Ok(None) };
        let mut addrs = Vec::with_capacity(members.len());
        for &r in members {
            addrs.push(decode(
                r,
                all.get(r).ok_or_else(|| Error::Setup("short allgather".into()))?,
            )?);
        }
        let mine = partners(me);
        let expect: Vec<usize> = mine.iter().copied().filter(|&p| p < me).collect();
        let deadline = Instant::now() + timeout;
        let mut eps: Vec<Option<Arc<dyn Ep>>> = vec![None; members.len()];
        let accepted = std::thread::scope(|s| -> Result<Vec<(usize, Arc<dyn Ep>)>> {
            let acceptor = s.spawn(|| -> Result<Vec<(usize, Arc<dyn Ep>)>> {
                let mut got = Vec::new();
                while got.len() < expect.len() {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let cr = match psp_evd.wait(Some(left), 1) {
                        Ok(Event::ConnectionRequest(cr)) => cr,
                        Ok(_) => continue,
                        Err(rmr_api::Error::Timeout) => {
                            let missing: Vec<usize> = expect
                                .iter()
                                .filter(|p| !got.iter().any(|(q, _)| q == *p))
                                .map(|&p| members[p])
                                .collect();
                            return Err(Error::Link {
                                rank: missing.first().copied().unwrap_or(usize::MAX),
                                why: format!("ranks {missing:?} never connected"),
                            });
                        }
                        Err(e) => return Err(e.into()),
                    };
                    let pd = cr.private_data();
                    let from = (pd.len() == 8 && &pd[..4] == MAGIC)
                        .then(|| u32::from_le_bytes(pd[4..8].try_into().expect("4")) as usize)
                        .filter(|p| expect.contains(p) && !got.iter().any(|(q, _)| q == p));
                    let Some(from) = from else {
                        let _ = cr.reject(b"");
                        continue;
                    };
                    let ep = ia.create_ep(pz, &EpEvds::single(evd))?;
                    cr.accept(&ep, b"")?;
                    got.push((from, ep));
                }
                Ok(got)
            });
            let mut pd = MAGIC.to_vec();
            pd.extend_from_slice(&(me as u32).to_le_bytes());
            for &p in mine.iter().filter(|&&p| p > me) {
                let (service, addr, _) = &addrs[p];
                let ep = ia.create_ep(pz, &EpEvds::single(evd))?;
                let left = deadline.saturating_duration_since(Instant::now());
                ep.connect(addr, *service, &pd, left).map_err(|e| Error::Link {
                    rank: members[p],
                    why: format!("connect to {addr}:{service}: {e}"),
                })?;
                eps[p] = Some(ep);
            }
            acceptor.join().unwrap_or_else(|_| Err(Error::Setup("acceptor panicked".into())))
        })?;
        for (p, ep) in accepted {
            eps[p] = Some(ep);
        }
        // Accepted endpoints may still be completing their handshake: drive
        // the EVD (their connection events arrive there) until they are.
        let connected = || eps.iter().flatten().all(|e| e.state() == EpState::Connected);
        while eps.iter().flatten().any(|e| e.state() != EpState::Connected) {
            if let Some(e) = eps
                .iter()
                .flatten()
                .find(|e| matches!(e.state(), EpState::Broken | EpState::Disconnected))
            {
                return Err(Error::Link { rank: usize::MAX, why: format!("{:?}", e.state()) });
            }
            if Instant::now() >= deadline {
                return Err(Error::Setup("endpoints not connected in time".into()));
            }
            while evd.dequeue().is_some() {}
            evd.progress_until(Some(Duration::from_millis(1)), None, &connected);
        }
        let by_ep = eps
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (e.id(), members[i])))
            .collect();
        Ok(Some(Links {
            me,
            ranks: members.to_vec(),
            eps,
            extra: addrs.into_iter().map(|(_, _, x)| x).collect(),
            by_ep,
            _psp: psp,
        }))
    }

    /// The rank behind an endpoint id (`usize::MAX` if not ours).
    pub(crate) fn rank_of(&self, ep: EpId) -> usize {
        self.by_ep.get(&ep).copied().unwrap_or(usize::MAX)
    }

    /// The endpoint to member `p`.
    pub(crate) fn ep(&self, p: usize) -> Result<&Arc<dyn Ep>> {
        self.eps[p].as_ref().ok_or_else(|| Error::Setup(format!("no endpoint to member {p}")))
    }
}
