//! Credit-based flow control between the two ends of one connection
//! (client ↔ bridge), with no IO: the caller asks what it may send and
//! reports what it received and re-posted.
//!
//! Each end keeps a ring of pre-posted receive buffers, split (as pure
//! accounting: receives match in order) into a **data pool** — messages
//! that carry or wait for payload and may be held for a while (a bridge
//! holds a chunk until it has landed on the far side; a client holds a
//! delivered send until the user posts a receive) — and a small **control
//! pool** for header-only messages, which are handled at once.
//!
//! Credits come back piggy-backed on every message; a header-only control
//! message is sent only when it is worth it: a batch of `threshold` data
//! buffers to return, the peer nearly out of control credits, or something
//! urgent (an acknowledgement the peer waits for). The last control credit
//! is spent only by a message that returns at least one control credit, so
//! the two ends can never both sit at zero (the proptest below drives two
//! ends through random schedules and checks that nothing deadlocks or
//! overruns a ring).

/// Sizes of one end's receive ring as its peer sees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreditConfig {
    /// Data-pool buffers (at least 1).
    pub data: u16,
    /// Control-pool buffers (at least 3).
    pub ctl: u16,
    /// Return data credits in a control message once this many are owed.
    pub threshold: u16,
}

impl CreditConfig {
    /// A configuration for a ring of `data` data buffers (clamped to sane bounds).
    pub fn for_ring(data: u16) -> CreditConfig {
        let data = data.max(1);
        CreditConfig { data, ctl: 4, threshold: (data / 4).max(1) }
    }

    /// Total receive buffers the ring needs.
    pub fn total(&self) -> usize {
        usize::from(self.data) + usize::from(self.ctl)
    }
}

/// One end's credit state toward its peer, and what it owes the peer.
#[derive(Clone, Debug)]
pub struct Credits {
    peer: CreditConfig,
    mine: CreditConfig,
    data: u32,
    ctl: u32,
    owe_data: u32,
    owe_ctl: u32,
    urgent: bool,
}

/// Credits returned in one outgoing header: (data, control).
pub type Returns = (u16, u16);

impl Credits {
    /// Fresh state: every buffer of the peer's ring (`peer`) is ours to
    /// use; `mine` describes our own ring (for the control trigger).
    pub fn new(peer: CreditConfig, mine: CreditConfig) -> Credits {
        Credits {
            peer,
            mine,
            data: u32::from(peer.data),
            ctl: u32::from(peer.ctl),
            owe_data: 0,
            owe_ctl: 0,
            urgent: false,
        }
    }

    /// The peer's ring became known (the connection handshake finished):
    /// adopt its sizes, keeping what happened meanwhile — credits spent,
    /// credits the peer returned, buffers owed to it. Until then the
    /// state runs on a placeholder; nothing may be sent before this.
    pub fn set_peer(&mut self, peer: CreditConfig) {
        let spent_d = u32::from(self.peer.data).saturating_sub(self.data);
        let spent_c = u32::from(self.peer.ctl).saturating_sub(self.ctl);
        self.peer = peer;
        self.data = u32::from(peer.data).saturating_sub(spent_d);
        self.ctl = u32::from(peer.ctl).saturating_sub(spent_c);
    }

    /// Data credits available.
    pub fn data(&self) -> u32 {
        self.data
    }

    /// Control credits available.
    pub fn ctl(&self) -> u32 {
        self.ctl
    }

    /// Credits owed to the peer: (data, control).
    pub fn owed(&self) -> (u32, u32) {
        (self.owe_data, self.owe_ctl)
    }

    /// True when a data message may go now.
    pub fn can_send_data(&self) -> bool {
        self.data >= 1
    }

    fn take_returns(&mut self) -> Returns {
        let d = self.owe_data.min(u32::from(u16::MAX));
        let c = self.owe_ctl.min(u32::from(u16::MAX));
        self.owe_data -= d;
        self.owe_ctl -= c;
        self.urgent = false;
        (d as u16, c as u16)
    }

    /// Spends a data credit; returns the credits to piggy-back.
    ///
    /// # Panics
    /// When no data credit is left (check [`Credits::can_send_data`]).
    pub fn send_data(&mut self) -> Returns {
        assert!(self.data >= 1, "no data credit");
        self.data -= 1;
        self.take_returns()
    }

    /// Marks that the peer waits for something only a message brings
    /// (an acknowledgement of a signalled operation, an error).
    pub fn set_urgent(&mut self) {
        self.urgent = true;
    }

    /// True when a header-only control message should go now.
    pub fn want_ctl(&self) -> bool {
        let worth = self.urgent
            || self.owe_data >= u32::from(self.mine.threshold)
            || self.owe_ctl >= u32::from(self.mine.ctl.saturating_sub(1)).max(2);
        worth && (self.ctl >= 2 || (self.ctl == 1 && self.owe_ctl >= 1))
    }

    /// Spends a control credit; returns the credits to carry.
    ///
    /// # Panics
    /// When no control credit is left.
    pub fn send_ctl(&mut self) -> Returns {
        assert!(self.ctl >= 1, "no control credit");
        self.ctl -= 1;
        self.take_returns()
    }

    /// Takes back a message that could not be posted after all: its
    /// credit and the returns it would have carried.
    pub fn undo(&mut self, data: bool, r: Returns) {
        if data {
            self.data += 1;
        } else {
            self.ctl += 1;
        }
        self.owe_data += u32::from(r.0);
        self.owe_ctl += u32::from(r.1);
        self.urgent = true;
    }

    /// The peer returned credits (from a received header).
    pub fn on_returns(&mut self, r: Returns) {
        self.data = (self.data + u32::from(r.0)).min(u32::from(self.peer.data));
        self.ctl = (self.ctl + u32::from(r.1)).min(u32::from(self.peer.ctl));
    }

    /// We re-posted a receive buffer that a message of the given pool used.
    pub fn reposted(&mut self, data_pool: bool) {
        if data_pool {
            self.owe_data += 1;
        } else {
            self.owe_ctl += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[test]
    fn piggyback_and_threshold() {
        let cfg = CreditConfig::for_ring(8);
        let mut a = Credits::new(cfg, cfg);
        assert_eq!(a.data(), 8);
        assert!(!a.want_ctl());
        a.reposted(true);
        assert!(!a.want_ctl(), "one credit is not worth a message");
        assert_eq!(a.send_data(), (1, 0), "but it rides on data");
        for _ in 0..2 {
            a.reposted(true);
        }
        assert!(a.want_ctl(), "threshold 2 reached");
        assert_eq!(a.send_ctl(), (2, 0));
        a.on_returns((3, 1));
        assert_eq!((a.data(), a.ctl()), (8, 4));
    }

    #[test]
    fn last_control_credit_needs_a_control_return() {
        let cfg = CreditConfig::for_ring(8);
        let mut a = Credits::new(cfg, cfg);
        for _ in 0..3 {
            a.set_urgent();
            assert!(a.want_ctl());
            a.send_ctl();
        }
        a.set_urgent();
        assert!(!a.want_ctl(), "last credit, nothing of the control pool to return");
        a.reposted(false);
        assert!(a.want_ctl());
    }

    #[test]
    fn set_peer_keeps_what_happened_before() {
        let small = CreditConfig::for_ring(4);
        let big = CreditConfig::for_ring(16);
        let mut a = Credits::new(small, small);
        a.reposted(false);
        a.reposted(true);
        a.set_peer(big);
        assert_eq!((a.data(), a.ctl()), (16, 4));
        assert_eq!(a.owed(), (1, 1), "buffers owed before the handshake are still owed");
        a.send_ctl();
        a.set_peer(small);
        assert_eq!((a.data(), a.ctl()), (4, 3), "a spent credit stays spent");
    }

    /// One end of the simulated connection.
    struct End {
        cr: Credits,
        to_send: u32,
        held: u32,
        /// Buffers in use in this end's ring (must stay within the ring).
        in_ring: usize,
        delivered: u32,
    }

    #[derive(Clone, Copy)]
    struct Msg {
        data: bool,
        ret: Returns,
    }

    fn run(dcfg: u16, n: u32, m: u32, choices: Vec<u8>) -> Result<(), TestCaseError> {
        let cfg = CreditConfig::for_ring(dcfg);
        let mut e = [
            End { cr: Credits::new(cfg, cfg), to_send: n, held: 0, in_ring: 0, delivered: 0 },
            End { cr: Credits::new(cfg, cfg), to_send: m, held: 0, in_ring: 0, delivered: 0 },
        ];
        let mut wire: [VecDeque<Msg>; 2] = [VecDeque::new(), VecDeque::new()];
        let mut ctl_msgs = 0u64;
        let mut ci = choices.into_iter().cycle();
        let mut steps = 0u64;
        loop {
            steps += 1;
            prop_assert!(steps < 1_000_000, "livelock");
            // Enabled actions: (end, action)
            let mut acts: Vec<(usize, u8)> = Vec::new();
            for i in 0..2 {
                if e[i].to_send > 0 && e[i].cr.can_send_data() {
                    acts.push((i, 0));
                }
                if !wire[i].is_empty() {
                    acts.push((i, 1));
                }
                if e[i].held > 0 {
                    acts.push((i, 2));
                }
                if e[i].cr.want_ctl() {
                    acts.push((i, 3));
                }
            }
            if acts.is_empty() {
                break;
            }
            let (i, a) = acts[usize::from(ci.next().unwrap_or(0)) % acts.len()];
            let j = 1 - i;
            match a {
                0 => {
                    e[i].to_send -= 1;
                    let ret = e[i].cr.send_data();
                    wire[i].push_back(Msg { data: true, ret });
                }
                1 => {
                    // Message from i arrives at j and takes a buffer of j's ring.
                    let msg = wire[i].pop_front().expect("nonempty");
                    prop_assert!(e[j].in_ring < cfg.total(), "ring overrun");
                    e[j].in_ring += 1;
                    e[j].cr.on_returns(msg.ret);
                    if msg.data {
                        e[j].held += 1;
                    } else {
                        e[j].in_ring -= 1;
                        e[j].cr.reposted(false);
                    }
                }
                2 => {
                    e[i].held -= 1;
                    e[i].in_ring -= 1;
                    e[i].delivered += 1;
                    e[i].cr.reposted(true);
                    if e[i].delivered % 3 == 0 {
                        e[i].cr.set_urgent();
                    }
                }
                _ => {
                    ctl_msgs += 1;
                    let ret = e[i].cr.send_ctl();
                    wire[i].push_back(Msg { data: false, ret });
                }
            }
        }
        prop_assert_eq!(e[0].delivered, m, "B→A data all arrived");
        prop_assert_eq!(e[1].delivered, n, "A→B data all arrived");
        prop_assert!(ctl_msgs <= 4 * u64::from(n + m) + 16, "control storm: {}", ctl_msgs);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn never_deadlocks_or_overruns(d in 1u16..12, n in 0u32..200, m in 0u32..200,
                                       choices in proptest::collection::vec(any::<u8>(), 1..64)) {
            run(d, n, m, choices)?;
        }
    }
}
