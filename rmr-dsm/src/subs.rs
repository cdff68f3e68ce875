//! The bookkeeping of pushed pages (`Dsm::subscribe`): which remote pages
//! this process wants pushed after each barrier, and which of its home
//! pages it pushes to whom. No network here: `push.rs` moves the pages.

use rmr::MemRegion;
use rmr::node::Registered;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

/// What a subscriber keeps: the remote pages it wants pushed, each with the
/// home it was told of at subscription time (the home that pushes it).
#[derive(Debug, Default)]
pub(crate) struct Wanted {
    /// Region page -> its home.
    pub(crate) pages: BTreeMap<usize, usize>,
}

impl Wanted {
    /// Stops wanting the region pages `pages`.
    pub(crate) fn forget(&mut self, pages: &Range<usize>) {
        self.pages.retain(|p, _| !pages.contains(p));
    }
}

/// A page homed here that other processes want pushed.
#[derive(Debug)]
pub(crate) struct Given {
    /// Region page.
    pub(crate) page: usize,
    /// The processes that want it, ascending.
    pub(crate) to: Vec<usize>,
    /// The page's bytes as last pushed in full to every one of `to`
    /// (`None`: the next push is a full one).
    pub(crate) last: Option<Box<[u8]>>,
}

/// What a home keeps: the pages it pushes, the staging memory full pushes
/// are sent from, and the sends of the last push still in flight.
#[derive(Default)]
pub(crate) struct Pushing {
    /// Ascending by page: the order in which each subscriber posts its
    /// receives, so both sides agree which receive a page lands in.
    pub(crate) given: Vec<Given>,
    /// One page of staging memory per entry of `given` (registered on
    /// every IA): a full push is sent from a copy, so the home's own page
    /// may change while the send is in flight.
    pub(crate) stage: Option<(Arc<MemRegion>, Registered)>,
    /// Cookies of the last push's sends: waited for before the staging
    /// memory is written again.
    pub(crate) inflight: Vec<u64>,
}

impl Pushing {
    /// Adds `who` to the processes that want page `page`; a page whose set
    /// of subscribers changes is pushed in full next time (a newcomer has
    /// no copy of the last full push).
    pub(crate) fn add(&mut self, page: usize, who: usize) {
        let at = match self.given.binary_search_by_key(&page, |g| g.page) {
            Ok(i) => i,
            Err(i) => {
                self.given.insert(i, Given { page, to: Vec::new(), last: None });
                i
            }
        };
        let g = &mut self.given[at];
        if let Err(i) = g.to.binary_search(&who) {
            g.to.insert(i, who);
            g.last = None;
        }
    }

    /// Stops pushing page `page` to `who`.
    pub(crate) fn remove(&mut self, page: usize, who: usize) {
        if let Ok(at) = self.given.binary_search_by_key(&page, |g| g.page) {
            self.given[at].to.retain(|&w| w != who);
            if self.given[at].to.is_empty() {
                self.given.remove(at);
            }
        }
    }

    /// Stops pushing the region pages `pages`.
    pub(crate) fn forget(&mut self, pages: &Range<usize>) {
        self.given.retain(|g| !pages.contains(&g.page));
    }

    /// Whether the staging memory has a page for every entry of `given`.
    pub(crate) fn staged(&self) -> bool {
        self.stage.as_ref().map_or(0, |(r, _)| r.len()) >= self.given.len() * super::PAGE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_and_subscribers_stay_sorted_and_unique() {
        let mut p = Pushing::default();
        for (page, who) in [(9, 2), (3, 1), (9, 0), (3, 1), (5, 3)] {
            p.add(page, who);
        }
        let got: Vec<_> = p.given.iter().map(|g| (g.page, g.to.clone())).collect();
        assert_eq!(got, vec![(3, vec![1]), (5, vec![3]), (9, vec![0, 2])]);
        p.forget(&(4..9));
        assert_eq!(p.given.iter().map(|g| g.page).collect::<Vec<_>>(), vec![3, 9]);
        p.remove(9, 0);
        assert_eq!(p.given[1].to, vec![2]);
        p.remove(9, 2);
        p.remove(3, 7);
        let got: Vec<_> = p.given.iter().map(|g| (g.page, g.to.clone())).collect();
        assert_eq!(got, vec![(3, vec![1])], "a page nobody wants is no longer pushed");
    }

    #[test]
    fn a_new_subscriber_gets_the_next_push_in_full() {
        let mut p = Pushing::default();
        p.add(7, 1);
        p.given[0].last = Some(vec![1u8; 4].into_boxed_slice());
        p.add(7, 1);
        assert!(p.given[0].last.is_some(), "the same subscriber again changes nothing");
        p.add(7, 2);
        assert!(p.given[0].last.is_none(), "a newcomer has no copy of the last full push");
    }

    #[test]
    fn a_subscriber_forgets_a_range_of_pages() {
        let mut w = Wanted::default();
        w.pages.extend([(1, 0), (2, 0), (3, 1), (8, 1)]);
        w.forget(&(2..4));
        assert_eq!(w.pages.keys().copied().collect::<Vec<_>>(), vec![1, 8]);
    }
}
