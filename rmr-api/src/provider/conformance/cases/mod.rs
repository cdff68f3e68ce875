//! The conformance cases. Each takes the [`Target`] and panics on failure.

use super::*;
use crate::error::Error;
use crate::lmr::Sge;
use crate::types::{Caps, DtoFlags, DtoOp, EpState, Status};
use crate::types::{CompareSwap, Cookie};
use std::time::Instant;

const F0: DtoFlags = DtoFlags::empty();
const RW: Access = Access::ALL;

fn skip(t: &Target, why: &str) {
    println!("SKIPPED: {} on {}: {why}", std::thread::current().name().unwrap_or("case"), t.name);
}

/// Waits for a connection event of the given kind on `cevd`.
fn expect_conn_event(cevd: &Arc<dyn Evd>, within: Duration, want: fn(&Event) -> bool) -> Event {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match cevd.wait(Some(left), 1) {
            Ok(e) if want(&e) => return e,
            Ok(_) => continue,
            Err(e) => panic!("no expected connection event within {within:?}: {e}"),
        }
    }
}

/// An error completion must arrive for `cookie` and the target must be unchanged.
fn expect_remote_fault(p: &Pair, cookie: u64, target: &Buf, before: &[u8]) -> DtoCompletion {
    let c = next_dto(&p.evd_a);
    assert_eq!(c.cookie.0, cookie);
    assert!(!c.status.is_ok(), "a forbidden access succeeded: {c:?}");
    assert_eq!(target.bytes(), before, "target memory changed by a refused access");
    c
}

mod atomics;
mod connect;
mod messages;
mod protection;
mod queues;
mod rdma;
mod teardown;

pub use atomics::*;
pub use connect::*;
pub use messages::*;
pub use protection::*;
pub use queues::*;
pub use rdma::*;
pub use teardown::*;

#[allow(dead_code)]
fn _sge_is_copy(s: Sge<'_>) -> (Sge<'_>, Sge<'_>) {
    (s, s)
}
