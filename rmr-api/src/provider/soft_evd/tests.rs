//! The soft EVD's unit tests (eventfd, poll(2) and clocks: not under Miri).
use super::block::{Ready, Set};
use super::*;
use crate::provider::{Interest, WaitOn, doorbell_deferred, with_deferred_doorbell};

#[test]
fn spin_grows_to_cover_recent_waits_and_shrinks_after_long_ones() {
    let e = SoftEvd::new(4);
    let base = e.spin_with(true);
    if base.is_zero() || e.max_spin <= base {
        // RMR_EVD_SPIN_US=0 never spins; a cap at or below the base
        // (RMR_EVD_SPIN_MAX_US) never grows: whatever the waits were.
        e.note_wait(Duration::from_micros(200));
        assert_eq!(e.spin_with(true), base);
        return;
    }
    // Round trips of 200 us (two peers that both slept): within a few
    // waits the spin outlasts them, so the next ones are caught spinning.
    for _ in 0..8 {
        e.note_wait(Duration::from_micros(200));
    }
    let grown = e.spin_with(true);
    // Not while a thread waits for a CPU (an oversubscribed node).
    assert_eq!(e.spin_with(false), base);
    assert!(grown > Duration::from_micros(200), "{grown:?}");
    assert!(grown <= e.max_spin.max(base), "{grown:?}");
    // Never past the cap, however slow the waits just under it.
    for _ in 0..32 {
        e.note_wait(e.max_spin);
    }
    assert_eq!(e.spin_with(true), e.max_spin.max(base));
    // Waits longer than any spin (an idle server, a peer computing)
    // bring it back to the base: spinning would not have caught them.
    for _ in 0..64 {
        e.note_wait(Duration::from_millis(20));
    }
    assert_eq!(e.spin_with(true), base);
    // A timed-out wait counts as a long one.
    e.note_wait(Duration::from_micros(300));
    assert!(e.spin_with(true) > base);
    assert!(matches!(e.wait(Some(Duration::from_millis(1)), 1), Err(Error::Timeout)));
    for _ in 0..64 {
        assert!(matches!(e.wait(Some(Duration::ZERO), 1), Err(Error::Timeout)));
    }
    assert_eq!(e.spin_with(true), base);
}

#[test]
fn threshold_and_timeout() {
    let e = SoftEvd::new(4);
    assert!(matches!(e.wait(Some(Duration::from_millis(5)), 1), Err(Error::Timeout)));
    e.post_software(1).unwrap();
    assert!(matches!(e.wait(Some(Duration::from_millis(5)), 2), Err(Error::Timeout)));
    e.post_software(2).unwrap();
    assert!(matches!(e.wait(None, 2), Ok(Event::Software(1))));
    assert!(matches!(e.dequeue(), Some(Event::Software(2))));
    for i in 0..4 {
        e.post_software(i).unwrap();
    }
    assert!(matches!(e.post_software(9), Err(Error::QueueFull)));
}

/// A driver over a real pipe: the waiter must read it itself.
struct PipeDriver {
    rd: OwnedFd,
    evd: Weak<SoftEvd>,
    drives: AtomicUsize,
}

impl Driver for PipeDriver {
    fn drive(&self) -> bool {
        self.drives.fetch_add(1, Ordering::Relaxed);
        let mut b = [0u8; 8];
        match rustix::io::read(&self.rd, &mut b) {
            Ok(n) if n > 0 => {
                if let Some(e) = self.evd.upgrade() {
                    e.push(Event::Software(u64::from(b[0])));
                }
                true
            }
            _ => false,
        }
    }
    fn wait_on(&self) -> WaitOn<'_> {
        WaitOn {
            fd: Some((self.rd.as_fd(), Interest { read: true, write: false })),
            deadline: None,
        }
    }
    fn stable_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.rd.as_fd())
    }
}

#[test]
fn waiter_drives_a_registered_driver() {
    let evd = Arc::new(SoftEvd::new(16));
    let (rd, wr) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::NONBLOCK).unwrap();
    let d: Arc<dyn Driver> =
        Arc::new(PipeDriver { rd, evd: Arc::downgrade(&evd), drives: AtomicUsize::new(0) });
    evd.add_driver(&d);
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        rustix::io::write(&wr, &[42]).unwrap();
        wr
    });
    // Nobody but the waiter reads the pipe: the event exists only if it drove.
    match evd.wait(Some(Duration::from_secs(5)), 1).unwrap() {
        Event::Software(42) => {}
        e => panic!("{e:?}"),
    }
    let _wr = t.join().unwrap();
    assert!(matches!(evd.wait(Some(Duration::from_millis(20)), 1), Err(Error::Timeout)));
    evd.remove_driver(&*d);
    assert!(evd.drivers().is_empty());
}

#[test]
fn a_quiet_driver_is_looked_at_while_the_waiter_spins() {
    // A spin longer than the wait: data the spin never looks at times out.
    let evd = Arc::new(SoftEvd { spin: Duration::from_secs(30), ..SoftEvd::new(16) });
    let (rd_a, wr_a) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::NONBLOCK).unwrap();
    let (rd_b, wr_b) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::NONBLOCK).unwrap();
    let w = Arc::downgrade(&evd);
    let a: Arc<dyn Driver> =
        Arc::new(PipeDriver { rd: rd_a, evd: w.clone(), drives: AtomicUsize::new(0) });
    let b: Arc<dyn Driver> = Arc::new(PipeDriver { rd: rd_b, evd: w, drives: AtomicUsize::new(0) });
    evd.add_driver(&a);
    evd.add_driver(&b);
    let at = |d: &Arc<dyn Driver>| {
        evd.drivers().iter().position(|x| Arc::ptr_eq(x, d)).expect("registered")
    };
    let (ia, ib) = (at(&a), at(&b));
    // Waits answered through A make B quiet (and A not), after QUIET_WAITS.
    for k in 1..=QUIET_WAITS {
        rustix::io::write(&wr_a, &[1]).unwrap();
        let got = evd.wait(Some(Duration::from_secs(5)), 1);
        assert!(matches!(got, Ok(Event::Software(1))), "{got:?}");
        let quiet = evd.quiet();
        assert_eq!(quiet & 1 << ib != 0, k == QUIET_WAITS, "wait {k}: quiet {quiet:#b}");
        assert_eq!(quiet & 1 << ia, 0, "wait {k}: quiet {quiet:#b}");
    }
    // Input on the quiet driver still ends the wait, long before its end.
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        rustix::io::write(&wr_b, &[2]).unwrap();
        wr_b
    });
    let start = Instant::now();
    let got = evd.wait(Some(Duration::from_secs(3)), 1);
    let took = start.elapsed();
    let _wr_b = t.join().unwrap();
    assert!(matches!(got, Ok(Event::Software(2))), "{got:?}");
    // Not found by the last look at the wait's deadline (a liveness
    // bound, 30 ms against 3 s, not a speed).
    assert!(took < Duration::from_secs(2), "seen after {took:?}");
    let quiet = evd.quiet();
    assert!(quiet & 1 << ib == 0, "B moved: not quiet any more ({quiet:#b})");
}

/// A driver with frames to send: counts flushes and full drives.
#[derive(Default)]
struct Outbox {
    waiting: AtomicUsize,
    flushed: AtomicUsize,
    drives: AtomicUsize,
}

impl Driver for Outbox {
    fn drive(&self) -> bool {
        self.drives.fetch_add(1, Ordering::Relaxed);
        false
    }
    fn wait_on(&self) -> WaitOn<'_> {
        WaitOn { fd: None, deadline: None }
    }
    fn flush(&self) -> bool {
        let n = self.waiting.swap(0, Ordering::Relaxed);
        self.flushed.fetch_add(n, Ordering::Relaxed);
        n > 0
    }
}

#[test]
fn flush_writes_sends_without_driving() {
    let evd = SoftEvd::new(16);
    let ob = Arc::new(Outbox::default());
    let d: Arc<dyn Driver> = ob.clone();
    evd.add_driver(&d);
    assert!(!evd.flush_writes(), "nothing waits");
    ob.waiting.store(3, Ordering::Relaxed);
    assert!(evd.flush_writes());
    assert_eq!(ob.flushed.load(Ordering::Relaxed), 3);
    assert_eq!(ob.drives.load(Ordering::Relaxed), 0, "no reads, no timers: a flush only");
}

/// A wait that finds its event queued already drives nothing, but what the
/// drivers hold for batching (the frames the waiting thread just posted,
/// which its peer waits for) goes out before it returns; so does a
/// progress wait whose condition holds at once.
#[test]
fn a_wait_done_at_once_still_sends_what_the_drivers_hold() {
    let evd = SoftEvd::new(16);
    let ob = Arc::new(Outbox::default());
    let d: Arc<dyn Driver> = ob.clone();
    evd.add_driver(&d);
    evd.push(Event::Software(1));
    ob.waiting.store(2, Ordering::Relaxed);
    assert!(matches!(evd.wait(Some(Duration::from_secs(1)), 1), Ok(Event::Software(1))));
    assert_eq!(ob.flushed.load(Ordering::Relaxed), 2, "the held frames went");
    assert_eq!(ob.drives.load(Ordering::Relaxed), 0, "the wait drove nothing");
    ob.waiting.store(1, Ordering::Relaxed);
    assert!(evd.progress_until(Some(Duration::ZERO), Some(Duration::ZERO), &|| true));
    assert_eq!(ob.flushed.load(Ordering::Relaxed), 3);
    assert_eq!(ob.drives.load(Ordering::Relaxed), 0);
    // A wait that drives sends through its drives (no extra flush call).
    ob.waiting.store(0, Ordering::Relaxed);
    assert!(!evd.progress_until(Some(Duration::from_millis(5)), Some(Duration::ZERO), &|| false));
    assert!(ob.drives.load(Ordering::Relaxed) > 0);
}

/// The driver list a waiter keeps follows every change, on this EVD and
/// on those it drives through, and never keeps a dropped driver alive.
#[test]
fn cached_driver_list_follows_changes() {
    let ids = |e: &SoftEvd| -> Vec<*const ()> {
        e.drivers().iter().map(|d| Arc::as_ptr(d) as *const ()).collect()
    };
    let top = Arc::new(SoftEvd::new(16));
    let rail = Arc::new(SoftEvd::new(16));
    let rail_dyn: Arc<dyn Evd> = rail.clone();
    let (a, b) = (Arc::new(Outbox::default()), Arc::new(Outbox::default()));
    let (da, db): (Arc<dyn Driver>, Arc<dyn Driver>) = (a.clone(), b.clone());
    let (pa, pb) = (Arc::as_ptr(&a) as *const (), Arc::as_ptr(&b) as *const ());
    top.add_driver(&da);
    assert_eq!(ids(&top), [pa]);
    top.drive_through(&rail_dyn);
    rail.add_driver(&db);
    // A driver registered on both counts once.
    rail.add_driver(&da);
    assert_eq!(ids(&top), [pa, pb]);
    assert_eq!(ids(&top), [pa, pb], "the kept list, unchanged");
    top.remove_driver(&*da);
    assert_eq!(ids(&top), [pb, pa], "still driven through the rail");
    rail.remove_driver(&*da);
    assert_eq!(ids(&top), [pb]);
    // Dropped without being removed: the kept list holds it weakly.
    drop((db, b));
    assert!(ids(&top).is_empty());
    assert!(!top.flush_writes());
}

/// A sink sees the events queued ahead of each one it is offered and
/// takes what it may past them; what it gives back is queued as usual.
#[test]
fn sink_sees_what_is_queued_ahead_and_takes_what_it_may() {
    let evd = SoftEvd::new(16);
    let taken = Arc::new(Mutex::new(Vec::new()));
    let t = taken.clone();
    // Takes small even values, but never past a queued big one.
    assert!(evd.set_sink(Box::new(move |ev, ahead| match ev {
        Event::Software(v)
            if v < 100
                && v % 2 == 0
                && !ahead.iter().any(|e| matches!(e, Event::Software(w) if *w >= 100)) =>
        {
            t.lock().unwrap().push(v);
            None
        }
        ev => Some(ev),
    })));
    assert!(!evd.set_sink(Box::new(|ev, _| Some(ev))), "one sink per EVD");
    evd.push(Event::Software(2));
    assert_eq!(evd.len(), 0, "taken");
    evd.push(Event::Software(3));
    assert_eq!(evd.len(), 1, "given back, queued");
    evd.push(Event::Software(6));
    assert_eq!(evd.len(), 1, "taken past the queued 3 (its order does not matter)");
    evd.push(Event::Software(100));
    evd.push(Event::Software(8));
    assert_eq!(evd.len(), 3, "not taken past the queued 100");
    for want in [3, 100, 8] {
        assert!(matches!(evd.dequeue(), Some(Event::Software(v)) if v == want));
    }
    assert_eq!(*taken.lock().unwrap(), [2, 6]);
    assert!(evd.dequeue().is_none());
}

#[test]
fn deferred_doorbell_is_scoped_and_nests() {
    assert!(!doorbell_deferred());
    let r = with_deferred_doorbell(|| {
        assert!(doorbell_deferred());
        with_deferred_doorbell(|| assert!(doorbell_deferred()));
        assert!(doorbell_deferred(), "the inner scope leaves the outer one deferred");
        std::thread::spawn(|| assert!(!doorbell_deferred(), "per thread")).join().unwrap();
        7
    });
    assert_eq!(r, 7);
    assert!(!doorbell_deferred());
    let caught = std::panic::catch_unwind(|| with_deferred_doorbell(|| panic!("boom")));
    assert!(caught.is_err());
    assert!(!doorbell_deferred(), "restored after a panic too");
}

#[test]
fn push_from_another_thread_wakes_a_polling_waiter() {
    let evd = Arc::new(SoftEvd::new(16));
    let (rd, _wr) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::NONBLOCK).unwrap();
    let d: Arc<dyn Driver> =
        Arc::new(PipeDriver { rd, evd: Arc::downgrade(&evd), drives: AtomicUsize::new(0) });
    evd.add_driver(&d);
    let e2 = evd.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        e2.post_software(7).unwrap();
    });
    assert!(matches!(evd.wait(Some(Duration::from_secs(5)), 1), Ok(Event::Software(7))));
    t.join().unwrap();
}

#[test]
fn a_set_of_drivers_holds_the_same_as_bits_or_as_a_list() {
    for n in [1, 2, 7, 64, 65, 130] {
        let pick = |i: usize| i % 3 == 1 || i == n - 1;
        let s = Set::of(n, pick);
        assert_eq!(matches!(s, Set::Mask(_)), n <= 64, "{n} drivers");
        for i in 0..n {
            assert_eq!(s.has(i), pick(i), "driver {i} of {n}");
        }
        let mut t = Set::none(n);
        assert!((0..n).all(|i| !t.has(i)), "none of {n}");
        t.insert(n - 1);
        assert!(t.has(n - 1) && (0..n - 1).all(|i| !t.has(i)));
        assert!(Ready::Some(t).has(n - 1) && Ready::All.has(0));
    }
}

#[test]
fn a_zero_timeout_wait_looks_at_drivers_that_were_idle() {
    // Drivers all idle at the end of the last wait: a poll of the EVD
    // (`wait` with a zero timeout) still takes in what came to one of them,
    // with a few drivers and with enough for the EVD's `epoll` set.
    for n in [2, many::MANY + 1] {
        let evd = Arc::new(SoftEvd::new(16));
        let w = Arc::downgrade(&evd);
        let mut ends = Vec::new();
        for _ in 0..n {
            let (rd, wr) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::NONBLOCK).unwrap();
            let p = Arc::new(PipeDriver { rd, evd: w.clone(), drives: AtomicUsize::new(0) });
            let d: Arc<dyn Driver> = p.clone();
            evd.add_driver(&d);
            ends.push((p, wr));
        }
        assert_eq!(evd.many().is_some(), n > many::MANY, "{n} drivers");
        assert!(matches!(evd.wait(Some(Duration::from_millis(2)), 1), Err(Error::Timeout)));
        rustix::io::write(&ends[n - 1].1, &[7]).unwrap();
        match evd.wait(Some(Duration::ZERO), 1) {
            Ok(Event::Software(7)) => {}
            r => panic!("{n} drivers: a zero-timeout wait missed what an idle one had: {r:?}"),
        }
        // With nothing there, it returns at once, having driven at most the
        // one that moved in the last wait (the others get one look at their
        // descriptors, not a drive each).
        let drives = || ends.iter().map(|(p, _)| p.drives.load(Ordering::Relaxed)).sum::<usize>();
        let before = drives();
        assert!(matches!(evd.wait(Some(Duration::ZERO), 1), Err(Error::Timeout)));
        let driven = drives() - before;
        assert!(driven <= 1, "{n} drivers: an idle poll drove {driven} of them");
    }
}

#[test]
fn a_poll_with_no_drivers_does_not_spin() {
    // A waiter asked to spin 30 s (what a layered EVD passes on from its
    // own spin) but given no time: it returns at once, not after the spin.
    let evd = Arc::new(SoftEvd::new(16));
    let e = evd.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = e.wait_or_poke_spin(Some(Duration::ZERO), 1, 0, Duration::from_secs(30));
        let _ = tx.send(r.is_err());
    });
    let timed_out = rx.recv_timeout(Duration::from_secs(10)).expect("the poll spun");
    assert!(timed_out, "nothing was queued");
}

/// An EVD with one driver reading a pipe, the pipe's write end, and the
/// driver (the EVD holds it weakly: keep it while the EVD is used).
fn evd_on_a_pipe() -> (Arc<SoftEvd>, OwnedFd, Arc<dyn Driver>) {
    let evd = Arc::new(SoftEvd::new(16));
    let (rd, wr) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::NONBLOCK).unwrap();
    let p = Arc::new(PipeDriver { rd, evd: Arc::downgrade(&evd), drives: AtomicUsize::new(0) });
    let d: Arc<dyn Driver> = p;
    evd.add_driver(&d);
    (evd, wr, d)
}

#[test]
fn a_waiter_blocked_in_poll_is_seen_by_any_poller_and_woken_by_its_driver() {
    // A poster that skips looking up EVDs to wake while `any_poller` says
    // none is blocked must see a waiter that is: the waiter counts itself
    // before it blocks, and its driver's input still ends its wait.
    let (evd, wr, _driver) = evd_on_a_pipe();
    let e = evd.clone();
    // No spin: it blocks in poll on the pipe (a deadline far off, so that
    // a lost wake-up fails the test rather than hangs it).
    let limit = Some(Instant::now() + Duration::from_secs(10));
    let waiter = std::thread::spawn(move || e.block_until(limit, Duration::ZERO, &|| e.len() > 0));
    let start = Instant::now();
    while !SoftEvd::any_poller() {
        assert!(start.elapsed() < Duration::from_secs(10), "the waiter never blocked in poll");
        std::thread::sleep(Duration::from_millis(1));
    }
    rustix::io::write(&wr, &[9]).unwrap();
    assert!(waiter.join().unwrap(), "the wait ended without its event");
    assert!(matches!(evd.try_pop(), Some(Event::Software(9))));
}

#[test]
fn a_wait_without_a_timeout_times_only_its_idle_part() {
    // An event already queued: taken with no clock read, a wait of no time
    // (the spin it sizes is unchanged by it). (With drivers: an EVD without
    // any waits on its condition variable, timed from its start.)
    let (evd, wr, _driver) = evd_on_a_pipe();
    evd.push(Event::Software(1));
    let (ok, took) = evd.block_until_timed(None, Duration::ZERO, &|| evd.len() > 0, None);
    assert!(ok);
    assert_eq!(took, Duration::ZERO);
    assert!(matches!(evd.try_pop(), Some(Event::Software(1))));
    // A wait that idles: timed from its first idle pass (about when it
    // began), to when its driver's input came.
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        rustix::io::write(&wr, &[2]).unwrap();
    });
    let limit = Some(Instant::now() + Duration::from_secs(10));
    let (ok, took) = evd.block_until_timed(limit, Duration::ZERO, &|| evd.len() > 0, None);
    writer.join().unwrap();
    assert!(ok);
    assert!(took >= Duration::from_millis(10), "an idle wait of ~20 ms timed as {took:?}");
    assert!(matches!(evd.try_pop(), Some(Event::Software(2))));
}
