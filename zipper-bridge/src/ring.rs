//! Pre-registered bounce buffers: one region of `n` equal slots (a header
//! plus a chunk each), registered in one or two protection zones so that a
//! slot filled from one side can be sent or written out on the other.

use crate::wire::HDR;
use rmr_api::Cookie;
use rmr_api::{Access, DtoFlags, Ep, Lmr, MemRegion, Pz, Result, Sge};
use std::sync::Arc;

/// A ring of receive slots.
pub(crate) struct Ring {
    pub(crate) region: Arc<MemRegion>,
    /// One registration per protection zone given to [`Ring::new`].
    pub(crate) lmrs: Vec<Arc<dyn Lmr>>,
    /// Bytes per slot (header + chunk).
    pub(crate) slot: u64,
    pub(crate) n: usize,
}

impl Ring {
    /// `n` slots of `HDR + chunk` bytes, registered in every zone of `pzs`.
    pub(crate) fn new(pzs: &[&Arc<dyn Pz>], n: usize, chunk: u64) -> Result<Ring> {
        let slot = (HDR as u64 + chunk).next_multiple_of(64);
        let region = MemRegion::new((slot * n as u64) as usize);
        let lmrs = pzs
            .iter()
            .map(|pz| pz.register_all(&region, Access::LOCAL_WRITE))
            .collect::<Result<Vec<_>>>()?;
        Ok(Ring { region, lmrs, slot, n })
    }

    /// Offset of slot `i`'s header.
    pub(crate) fn at(&self, i: usize) -> u64 {
        i as u64 * self.slot
    }

    /// Posts slot `i` as a receive on `ep` (registration `pz`) with `cookie`.
    pub(crate) fn post(&self, ep: &dyn Ep, pz: usize, i: usize, cookie: u64) -> Result<()> {
        ep.post_recv(
            &[Sge::new(&*self.lmrs[pz], self.at(i), self.slot)],
            Cookie(cookie),
            DtoFlags::empty(),
        )
    }

    /// Reads slot `i`'s header bytes.
    pub(crate) fn header(&self, i: usize) -> Option<crate::wire::Header> {
        let mut b = [0u8; HDR];
        self.region.read(self.at(i), &mut b).ok()?;
        crate::wire::Header::decode(&b)
    }

    /// Overwrites slot `i`'s header.
    pub(crate) fn set_header(&self, i: usize, h: &crate::wire::Header) {
        let _ = self.region.write(self.at(i), &h.encode());
    }
}
