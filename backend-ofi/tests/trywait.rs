//! The race `fi_trywait` exists for: a completion that arrives after a
//! waiter found its CQ empty and was allowed to sleep on the CQ's wait fd,
//! but before it sleeps. The waiter must still wake and deliver it (here,
//! with no progress thread: only the waiter reads the CQ). A test hook runs
//! in exactly that window and makes the peer's send arrive there.
//!
//! Its own test binary: the hook is process-wide.

mod support;

use rmr_api::{Access, Cookie, DtoFlags, EpEvds, Event, MemRegion, Sge};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[test]
fn a_completion_landing_between_trywait_and_sleep_is_delivered() {
    // SAFETY: set before any thread or libfabric call reads them.
    unsafe {
        std::env::set_var("RMR_OFI_PROGRESS_THREAD", "0");
        std::env::set_var("RMR_EVD_SPIN_US", "0");
    }
    backend_ofi::register();
    for prov in ["tcp", "sockets"] {
        race_on(prov);
    }
}

/// Armed: the hook asks the peer to send and gives the bytes time to cross
/// loopback into the receiver's socket before letting the waiter sleep (it
/// cannot wait for the send's completion: with delivery-complete that needs
/// the receiver's progress, which is the waiter it holds up).
static ARMED: AtomicBool = AtomicBool::new(false);
static FIRED: AtomicUsize = AtomicUsize::new(0);
/// Where the hook asks the peer to send (replaced for each provider).
static GO: std::sync::Mutex<Option<mpsc::Sender<()>>> = std::sync::Mutex::new(None);

fn race_on(prov: &str) {
    let ia = rmr_api::open(&format!("ofi:{prov}:127.0.0.1")).unwrap();
    let pz = ia.create_pz().unwrap();
    let (pevd, aevd, bevd) =
        (ia.create_evd().unwrap(), ia.create_evd().unwrap(), ia.create_evd().unwrap());
    let psp = ia.create_psp(0, &pevd).unwrap();
    let a = ia.create_ep(&pz, &EpEvds::single(&aevd)).unwrap();
    let b = ia.create_ep(&pz, &EpEvds::single(&bevd)).unwrap();
    support::join(&a, &b, &psp, &pevd);
    support::established(&[&aevd, &bevd]);
    let src = MemRegion::from_bytes(b"late but here");
    let dst = MemRegion::new(64);
    let sl = pz.register_all(&src, Access::empty()).unwrap();
    let dl = pz.register_all(&dst, Access::LOCAL_WRITE).unwrap();

    // The peer (`a`) sends when the hook asks, from its own thread.
    let (go_tx, go_rx) = mpsc::channel::<()>();
    *GO.lock().unwrap() = Some(go_tx);
    backend_ofi::hooks::AFTER_TRYWAIT.get_or_init(|| {
        Box::new(|| {
            if ARMED.swap(false, Ordering::SeqCst) {
                FIRED.fetch_add(1, Ordering::SeqCst);
                GO.lock().unwrap().as_ref().unwrap().send(()).unwrap();
                // Let the bytes cross loopback and reach the receiver's socket.
                std::thread::sleep(Duration::from_millis(30));
            }
        })
    });
    let rounds = 20;
    std::thread::scope(|s| {
        let (a, aevd, sl) = (a.clone(), aevd.clone(), sl.clone());
        s.spawn(move || {
            for i in 0..rounds {
                go_rx.recv_timeout(Duration::from_secs(30)).unwrap();
                a.post_send(&[Sge::whole(&*sl)], Cookie(i), DtoFlags::empty()).unwrap();
                match aevd.wait(Some(Duration::from_secs(10)), 1).unwrap() {
                    Event::Dto(c) => c.result().unwrap(),
                    e => panic!("{e:?}"),
                }
            }
        });
        for i in 0..rounds {
            b.post_recv(&[Sge::whole(&*dl)], Cookie(100 + i), DtoFlags::empty()).unwrap();
            ARMED.store(true, Ordering::SeqCst);
            let started = Instant::now();
            // Nothing is there: the waiter reads the CQ (empty), trywait
            // succeeds, the hook makes the send arrive, then it sleeps.
            match bevd.wait(Some(Duration::from_secs(5)), 1) {
                Ok(Event::Dto(c)) => {
                    assert_eq!(c.cookie, Cookie(100 + i));
                    c.result().unwrap();
                    assert_eq!(c.bytes, 13);
                }
                other => panic!("{prov}: round {i}: the completion was lost: {other:?}"),
            }
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "{prov}: round {i}: delivered only after {:?}",
                started.elapsed()
            );
            let mut got = [0u8; 13];
            dst.read(0, &mut got).unwrap();
            assert_eq!(&got, b"late but here");
        }
    });
    assert!(FIRED.load(Ordering::SeqCst) >= rounds as usize, "the hook ran in every round");
    FIRED.store(0, Ordering::SeqCst);
    let _ = Arc::clone(&ia);
}
