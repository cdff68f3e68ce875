//! Checks and mappings every backend needs the same way.

use crate::error::{Error, Result};
use crate::lmr::Sge;
use crate::types::Access;

/// Where local segment `s`'s bytes lie: its region and the offset in it,
/// read from its LMR once and checked against the region itself. For a
/// backend that moves a segment's bytes through raw pointers (a ring copy,
/// cross-memory attach, a libfabric provider): [`Lmr`](crate::Lmr) is a
/// safe trait, so its `offset` and `len`, which [`check_local_sges`] checks
/// the segment against, are an implementation's account, not a bound. The
/// pointer may be formed from what this returns, for as long as `s`'s LMR
/// is borrowed.
///
/// # Errors
/// [`Error::OutOfBounds`] where the segment does not lie inside the region.
#[inline]
pub fn seg_place<'a>(s: &Sge<'a>) -> Result<(&'a std::sync::Arc<crate::MemRegion>, u64)> {
    let region = s.lmr.region();
    match s.lmr.offset().checked_add(s.offset) {
        Some(off) if off.checked_add(s.len).is_some_and(|end| end <= region.len() as u64) => {
            Ok((region, off))
        }
        _ => Err(outside_region(s, region.len() as u64)),
    }
}

/// [`seg_place`]'s error (out of line: the post path stays short).
#[cold]
#[inline(never)]
fn outside_region(s: &Sge<'_>, limit: u64) -> Error {
    Error::OutOfBounds { offset: s.lmr.offset().saturating_add(s.offset), len: s.len, limit }
}

/// Validates a local segment list for a DTO: every LMR registered, in the
/// EP's protection zone, holding `need` rights, in bounds, at most
/// `max_sges` entries. Returns the total length.
///
/// # Errors
/// [`Error::Protection`], [`Error::OutOfBounds`], [`Error::RemoteAccess`] is never
/// returned here; [`Error::InvalidArgument`] for too many segments or a
/// deregistered LMR.
pub fn check_local_sges(
    sges: &[Sge<'_>],
    pz_id: u64,
    need: Access,
    max_sges: usize,
) -> Result<u64> {
    if sges.len() > max_sges {
        return Err(Error::invalid(format!("{} segments, at most {max_sges}", sges.len())));
    }
    let mut total = 0u64;
    for s in sges {
        if !s.lmr.is_registered() {
            return Err(Error::invalid("local LMR is deregistered"));
        }
        if s.lmr.pz_id() != pz_id {
            return Err(Error::Protection(format!(
                "local LMR of PZ {} used on an EP of PZ {pz_id}",
                s.lmr.pz_id()
            )));
        }
        if !s.lmr.access().contains(need) {
            return Err(Error::Protection(format!(
                "local LMR lacks {need:?} (has {:?})",
                s.lmr.access()
            )));
        }
        match s.offset.checked_add(s.len) {
            Some(end) if end <= s.lmr.len() => {}
            _ => {
                return Err(Error::OutOfBounds {
                    offset: s.offset,
                    len: s.len,
                    limit: s.lmr.len(),
                });
            }
        }
        total += s.len;
    }
    Ok(total)
}

/// What a backend reads straight from one of its own LMRs for a post (its
/// fields, no dynamic call each): see [`check_and_place`].
#[derive(Clone, Copy, Debug)]
pub struct LmrFacts<'a> {
    /// The registered memory.
    pub region: &'a std::sync::Arc<crate::MemRegion>,
    /// First registered byte within the region.
    pub offset: u64,
    /// Registered length.
    pub len: u64,
    /// Access rights.
    pub access: Access,
    /// The protection zone's id.
    pub pz_id: u64,
    /// Not deregistered.
    pub registered: bool,
}

/// A backend's record of one registered region, as its posts and its
/// target-side checks read it (the tcp and shm backends keep one per LMR,
/// shared with their key tables).
#[derive(Debug)]
pub struct LmrRecord {
    /// The key peers name the region by.
    pub key: u64,
    /// The registered memory.
    pub region: std::sync::Arc<crate::MemRegion>,
    /// First registered byte within the region.
    pub offset: u64,
    /// Registered length.
    pub len: u64,
    /// Access rights.
    pub access: Access,
    /// The protection zone's id.
    pub pz_id: u64,
    /// Not deregistered (cleared as the LMR goes).
    pub registered: std::sync::atomic::AtomicBool,
}

impl LmrRecord {
    /// What a post reads from the region, field by field (see
    /// [`check_and_place`]).
    #[inline]
    pub fn facts(&self) -> LmrFacts<'_> {
        LmrFacts {
            region: &self.region,
            offset: self.offset,
            len: self.len,
            access: self.access,
            pz_id: self.pz_id,
            registered: self.registered.load(std::sync::atomic::Ordering::Acquire),
        }
    }

    /// The target-side check of a remote access of `len` bytes at `addr`
    /// from protection zone `pz_id` needing `need` (see [`RemoteTarget`]).
    /// Returns the offset within the region.
    ///
    /// # Errors
    /// The status [`RemoteTarget::check`] gives.
    #[inline]
    pub fn check_remote(
        &self,
        pz_id: u64,
        need: Access,
        addr: u64,
        len: u64,
    ) -> std::result::Result<u64, crate::Status> {
        let t = RemoteTarget {
            registered: self.registered.load(std::sync::atomic::Ordering::Acquire),
            pz_id: self.pz_id,
            access: self.access,
            base: self.region.addr() + self.offset,
            len: self.len,
        };
        Ok(self.offset + t.check(pz_id, need, addr, len)?)
    }
}

/// Where a local segment's bytes lie: its region, the offset in it, its
/// length (see [`seg_place`]).
pub type Places<'a> = smallvec::SmallVec<[(&'a std::sync::Arc<crate::MemRegion>, u64, u64); 4]>;

/// [`check_local_sges`] and [`seg_place`] in one pass over `sges`: returns
/// the total length, and puts into `out`, in order, what `make` makes of
/// each segment's place (region, offset in it, length; `None`: nothing,
/// as for a zero-length segment a backend skips). `own` reads the facts of
/// an LMR of the calling backend's own type (a downcast and field reads);
/// an LMR it does not know (`None`), and every refusal, go through the two
/// general checks, which name the refusal, so the errors are theirs (`out`
/// is then filled anew: pass it empty). Each place is checked against its
/// region itself as [`seg_place`] checks it, whatever `own` said.
///
/// # Errors
/// Those of [`check_local_sges`] and [`seg_place`] (`out` may hold part
/// of the list then).
#[inline]
pub fn check_and_place<'a, A: smallvec::Array>(
    sges: &[Sge<'a>],
    (pz_id, need, max_sges): (u64, Access, usize),
    own: impl Fn(&'a dyn crate::Lmr) -> Option<LmrFacts<'a>>,
    out: &mut smallvec::SmallVec<A>,
    make: impl Fn(&'a std::sync::Arc<crate::MemRegion>, u64, u64) -> Option<A::Item>,
) -> Result<u64> {
    let mut total = 0u64;
    let mut general = sges.len() > max_sges;
    for s in sges {
        if general {
            break;
        }
        let place = own(s.lmr).and_then(|f| {
            let at = f.offset.checked_add(s.offset)?;
            let ok = f.registered
                && f.pz_id == pz_id
                && f.access.contains(need)
                && s.offset.checked_add(s.len).is_some_and(|e| e <= f.len)
                && at.checked_add(s.len).is_some_and(|e| e <= f.region.len() as u64);
            ok.then_some((f.region, at, s.len))
        });
        match place {
            Some((r, at, len)) => {
                total += len;
                if let Some(x) = make(r, at, len) {
                    out.push(x);
                }
            }
            None => general = true,
        }
    }
    if general {
        let total = check_local_sges(sges, pz_id, need, max_sges)?;
        out.clear();
        for s in sges {
            let (r, off) = seg_place(s)?;
            if let Some(x) = make(r, off, s.len) {
                out.push(x);
            }
        }
        return Ok(total);
    }
    Ok(total)
}

/// Maps a completion to a `Result`, for [`crate::DtoCompletion::result`]:
/// success, or an [`Error::Dto`] carrying the completion's own operation,
/// endpoint, status and byte count (nothing invented).
///
/// # Errors
/// [`Error::Dto`] for every status but [`crate::Status::Success`].
pub fn completion_result(c: &crate::DtoCompletion) -> Result<()> {
    c.result()
}

/// A registered region as a target checks a remote access against it.
#[derive(Clone, Copy, Debug)]
pub struct RemoteTarget {
    /// Still registered.
    pub registered: bool,
    /// Its protection zone.
    pub pz_id: u64,
    /// The rights it was registered with.
    pub access: Access,
    /// Its first byte's address (what its RMR context names).
    pub base: u64,
    /// Its length.
    pub len: u64,
}

impl RemoteTarget {
    /// The target-side check of a remote access of `len` bytes at `addr`,
    /// needing `need`, from an EP of protection zone `pz_id`, in the order
    /// every backend makes it: registered, PZ, rights, bounds. Returns the
    /// offset of `addr` from the region's first byte.
    ///
    /// # Errors
    /// [`crate::Status::RemoteAccess`] (deregistered, or a right missing),
    /// [`crate::Status::Protection`], [`crate::Status::OutOfBounds`].
    pub fn check(
        &self,
        pz_id: u64,
        need: Access,
        addr: u64,
        len: u64,
    ) -> std::result::Result<u64, crate::Status> {
        use crate::Status;
        if !self.registered {
            return Err(Status::RemoteAccess);
        }
        if self.pz_id != pz_id {
            return Err(Status::Protection);
        }
        if !self.access.contains(need) {
            return Err(Status::RemoteAccess);
        }
        let off = addr.checked_sub(self.base).ok_or(Status::OutOfBounds)?;
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(off),
            _ => Err(Status::OutOfBounds),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Lmr, MemRegion, RmrContext};
    use std::any::Any;
    use std::sync::Arc;

    /// An LMR whose facts are plain fields (`len` may claim more than the
    /// region holds); `foreign`: one `facts` does not know (another
    /// provider's).
    struct Plain {
        region: Arc<MemRegion>,
        offset: u64,
        len: u64,
        access: Access,
        pz: u64,
        registered: bool,
        foreign: bool,
    }

    impl Lmr for Plain {
        fn region(&self) -> &Arc<MemRegion> {
            &self.region
        }
        fn offset(&self) -> u64 {
            self.offset
        }
        fn len(&self) -> u64 {
            self.len
        }
        fn access(&self) -> Access {
            self.access
        }
        fn pz_id(&self) -> u64 {
            self.pz
        }
        fn rmr_context(&self) -> RmrContext {
            RmrContext::new(1, 0, self.len)
        }
        fn is_registered(&self) -> bool {
            self.registered
        }
        fn deregister(&self) -> Result<()> {
            Ok(())
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    fn facts(l: &dyn Lmr) -> Option<LmrFacts<'_>> {
        let p = l.as_any().downcast_ref::<Plain>().filter(|p| !p.foreign)?;
        Some(LmrFacts {
            region: &p.region,
            offset: p.offset,
            len: p.len,
            access: p.access,
            pz_id: p.pz,
            registered: p.registered,
        })
    }

    /// The two general checks' answer, as `check_and_place` must give it.
    fn general(sges: &[Sge<'_>], need: Access, max: usize) -> Result<(u64, Vec<(u64, u64)>)> {
        let total = check_local_sges(sges, 7, need, max)?;
        let mut v = Vec::new();
        for s in sges {
            v.push((seg_place(s)?.1, s.len));
        }
        Ok((total, v))
    }

    /// What the fast path read: LMRs whose facts were taken.
    static FACTS_TAKEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    fn fused(
        sges: &[Sge<'_>],
        need: Access,
        max: usize,
        own: bool,
    ) -> Result<(u64, Vec<(u64, u64)>)> {
        let mut out: smallvec::SmallVec<[(u64, u64); 4]> = smallvec::SmallVec::new();
        let total = check_and_place(
            sges,
            (7, need, max),
            |l| {
                let f = if own { facts(l) } else { None };
                if f.is_some() {
                    FACTS_TAKEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                f
            },
            &mut out,
            |_, off, len| Some((off, len)),
        )?;
        Ok((total, out.to_vec()))
    }

    #[test]
    fn one_pass_agrees_with_the_general_checks_and_their_errors() {
        let region = MemRegion::new(4096);
        let lmr = |offset, len, access, pz, registered| Plain {
            region: region.clone(),
            offset,
            len,
            access,
            pz,
            registered,
            foreign: false,
        };
        let good = lmr(1024, 2048, Access::LOCAL_WRITE, 7, true);
        let other_pz = lmr(0, 4096, Access::LOCAL_WRITE, 8, true);
        let read_only = lmr(0, 4096, Access::empty(), 7, true);
        let gone = lmr(0, 4096, Access::LOCAL_WRITE, 7, false);
        // Claims 2048 bytes from offset 3072 of a 4096-byte region.
        let liar = lmr(3072, 2048, Access::LOCAL_WRITE, 7, true);
        let foreign = Plain { foreign: true, ..lmr(0, 4096, Access::LOCAL_WRITE, 7, true) };
        let w = Access::LOCAL_WRITE;
        let cases: Vec<(Vec<Sge<'_>>, Access, usize)> = vec![
            (vec![Sge::new(&good, 0, 100), Sge::new(&good, 100, 0), Sge::new(&good, 500, 8)], w, 4),
            (vec![Sge::new(&good, 2000, 48)], w, 4),
            (vec![Sge::new(&good, 2000, 49)], w, 4),
            (vec![Sge::new(&good, u64::MAX, 2)], w, 4),
            (vec![Sge::new(&good, 0, 8), Sge::new(&other_pz, 0, 8)], w, 4),
            (vec![Sge::new(&read_only, 0, 8)], w, 4),
            (vec![Sge::new(&read_only, 0, 8)], Access::empty(), 4),
            (vec![Sge::new(&gone, 0, 8)], Access::empty(), 4),
            (vec![Sge::new(&liar, 1000, 100)], w, 4),
            (vec![Sge::new(&liar, 1100, 100)], w, 4),
            (vec![Sge::new(&good, 0, 8); 3], w, 2),
            // Inside the region, though the LMR claims more than it holds.
            (vec![Sge::new(&liar, 100, 900)], w, 4),
            // The fast path takes the first, then meets another provider's
            // LMR: the general checks start the list again.
            (vec![Sge::new(&good, 0, 8), Sge::new(&foreign, 16, 8)], w, 4),
            (vec![Sge::new(&foreign, 0, 8), Sge::new(&good, 8, 8)], w, 4),
        ];
        for (i, (sges, need, max)) in cases.iter().enumerate() {
            let want = format!("{:?}", general(sges, *need, *max));
            for own in [true, false] {
                let got = format!("{:?}", fused(sges, *need, *max, own));
                assert_eq!(got, want, "case {i}, own facts {own}");
            }
        }
        // The fast path took the valid list, reading each LMR's facts once
        // (places as seg_place gives them).
        let before = FACTS_TAKEN.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            fused(&cases[0].0, w, 4, true).unwrap(),
            (108, vec![(1024, 100), (1124, 0), (1524, 8)])
        );
        assert_eq!(FACTS_TAKEN.load(std::sync::atomic::Ordering::Relaxed) - before, 3);
        // A list that turns to another provider's LMR midway is placed once.
        assert_eq!(fused(&cases[12].0, w, 4, true).unwrap(), (16, vec![(1024, 8), (16, 8)]));
        // A lying LMR's segment past its region is refused, facts or not.
        assert!(matches!(fused(&cases[9].0, w, 4, true), Err(Error::OutOfBounds { .. })));
    }
}
