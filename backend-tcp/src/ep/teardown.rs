//! Teardown: an orderly disconnect (the frame follows everything posted
//! before it), `close` waiting for the peer's answer, shutting the stream
//! and detaching from the EVDs, and dropping the user's handle.

use crate::ep::shared::*;
use crate::tx::Segs;
use crate::wire::{Header, Op};
use rmr_api::provider::Driver;
use rmr_api::{EpState, Error, Result};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl EpShared {
    pub(crate) fn shutdown_stream(&self) {
        if let Some(tx) = self.tx.get() {
            let _ = tx.stream().shutdown(std::net::Shutdown::Both);
        }
    }

    /// Ends a broken connection for good: what the kernel still holds to
    /// send is dropped and the peer reset (see
    /// [`rmr_api::provider::io::abort_tcp`]), so no frame posted before the
    /// break reaches a peer that still has the connection open after the
    /// link heals — those DTOs have failed (or failed over) by then.
    pub(crate) fn abort_stream(&self) {
        if let Some(tx) = self.tx.get() {
            use std::os::fd::AsFd;
            let _ = rmr_api::provider::io::abort_tcp(tx.stream().as_fd());
            let _ = tx.stream().shutdown(std::net::Shutdown::Both);
        }
    }

    /// Unregisters from the EVDs (the connection ended).
    pub(crate) fn detach(&self) {
        for evd in self.distinct_evds() {
            evd.remove_driver(self);
        }
    }

    /// Orderly close from this side.
    pub(crate) fn disconnect(&self) -> Result<()> {
        if !self.cas_state(EpState::Connected, EpState::Disconnected) {
            return Err(Error::NotConnected);
        }
        self.local_disconnect.store(true, Ordering::Release);
        let tx = self.tx()?;
        let mut st = tx.lock();
        let mut h = Header::new(Op::Disconnect);
        h.ack = self.rx_done.load(Ordering::Acquire);
        let r = tx.push(&mut st, &h, Segs::new(), true, false, false);
        drop(st);
        match r {
            Ok(p) => self.pushed(p),
            Err(_) => self.shutdown_stream(),
        }
        // A peer that never answers must not keep the EP forever.
        self.disconnect_until.set(Instant::now() + DISCONNECT_WAIT);
        self.kick();
        Ok(())
    }
}

impl TcpEp {
    /// [`Ep::close`]: an orderly disconnect, then a wait (driving the socket) for the peer to answer it.
    pub(super) fn close_within(&self, timeout: Duration) -> Result<()> {
        if self.sh.state() == EpState::Pending {
            // A background connect under way: it gives up.
            self.sh.abandoned.store(true, Ordering::Release);
            self.sh.kick();
            return Ok(());
        }
        match self.sh.disconnect() {
            Ok(()) | Err(Error::NotConnected) => {}
            Err(e) => return Err(e),
        }
        // The disconnect frame follows every frame posted before it; the
        // peer answers it once it has handled them all. Wait for that end,
        // driving the socket meanwhile.
        let deadline = Instant::now() + timeout;
        let sh = &*self.sh;
        sh.enter();
        let r = loop {
            if sh.ended.load(Ordering::Acquire) {
                break Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                break Err(Error::Timeout);
            }
            if !sh.drive() {
                // Nothing moved: block on the socket (or until the
                // backend's next timer) for at most a millisecond.
                let w = sh.wait_on();
                let until = [Some(deadline), w.deadline, Some(now + Duration::from_millis(1))];
                let left = until.into_iter().flatten().min().unwrap_or(deadline) - now;
                match w.fd {
                    Some((fd, i)) => {
                        use rustix::event::{PollFd, PollFlags, Timespec, poll};
                        let mut ev = PollFlags::empty();
                        ev.set(PollFlags::IN, i.read);
                        ev.set(PollFlags::OUT, i.write);
                        let ts = Timespec { tv_sec: 0, tv_nsec: left.subsec_nanos() as i64 };
                        let _ = poll(&mut [PollFd::new(&fd, ev)], Some(&ts));
                    }
                    None => std::thread::yield_now(),
                }
            }
        };
        sh.leave();
        r
    }
}

impl Drop for TcpEp {
    fn drop(&mut self) {
        self.sh.abandoned.store(true, Ordering::Release);
        let _ = self.sh.disconnect();
    }
}
