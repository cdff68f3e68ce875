//! Moving bytes between sockets and registered memory the way DMA does:
//! through raw pointers, never through a Rust reference.
//!
//! A peer (or a NIC, or a transport thread) may write a registered region
//! at any moment, so no safe code may hold a `&[u8]`/`&mut [u8]` (or an
//! `IoSlice`) over its bytes. These helpers hand the kernel raw iovecs
//! built from a [`MemRegion`]'s address after a bounds check; the bytes a
//! concurrent writer changes during the call come out unspecified, as on
//! any RDMA NIC, and nothing outside the checked range is ever touched.
//! They are the only place a transport needs `unsafe` for its data path:
//! backend-tcp, built on them, keeps `#![forbid(unsafe_code)]`.

use crate::error::Result;
use crate::memory::MemRegion;
use smallvec::SmallVec;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// Receives at most `len` bytes from the socket `fd` straight into
/// `region` at `off`, with one `recv(2)` (`flags`, e.g. `MSG_DONTWAIT`).
/// Returns the bytes received (0: the stream ended).
///
/// # Errors
/// [`crate::Error::OutOfBounds`] before anything is received; the OS error of
/// `recv` otherwise, in the inner result.
pub fn recv_into(
    region: &MemRegion,
    off: u64,
    len: u64,
    fd: BorrowedFd<'_>,
    flags: i32,
) -> Result<io::Result<usize>> {
    region.check(off, len)?;
    // SAFETY: `[off, off+len)` lies inside the region (checked above), whose
    // allocation the caller's `&MemRegion` keeps alive for the call; the kernel
    // writes through the raw pointer, no Rust reference to the bytes exists.
    let n = unsafe {
        libc::recv(fd.as_raw_fd(), region.as_ptr().add(off as usize).cast(), len as usize, flags)
    };
    Ok(if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) })
}

/// Sends `head` followed by the given region ranges on the socket `fd`
/// with one `sendmsg(2)` (`flags`, e.g. `MSG_DONTWAIT | MSG_NOSIGNAL`),
/// leaving out the first `skip` bytes of that concatenation (to resume
/// after a partial send). Returns the bytes sent.
///
/// With [`MSG_ZEROCOPY`] in `flags` (on a socket [`enable_zerocopy`] was
/// called on), the kernel pins the pages and reads them until its notice
/// ([`zerocopy_done`]): the caller keeps those bytes unchanged until then,
/// else the peer may get later bytes. Memory safety is not at stake (the
/// kernel holds the pages, and only reads them); `head` is best sent
/// without it, since its buffer is the caller's to reuse at once.
///
/// # Errors
/// [`crate::Error::OutOfBounds`] when a range lies outside its region
/// (nothing is sent); the OS error of `sendmsg` otherwise, in the inner result.
pub fn send_gather<'a>(
    fd: BorrowedFd<'_>,
    head: &[u8],
    segs: impl IntoIterator<Item = (&'a MemRegion, u64, u64)>,
    mut skip: usize,
    flags: i32,
) -> Result<io::Result<usize>> {
    let mut iov: SmallVec<[libc::iovec; 8]> = SmallVec::new();
    if skip < head.len() {
        iov.push(libc::iovec {
            iov_base: head[skip..].as_ptr() as *mut libc::c_void,
            iov_len: head.len() - skip,
        });
        skip = 0;
    } else {
        skip -= head.len();
    }
    for (r, off, len) in segs {
        r.check(off, len)?;
        if skip as u64 >= len {
            skip -= len as usize;
            continue;
        }
        let (o, l) = (off + skip as u64, len - skip as u64);
        skip = 0;
        // `wrapping_add` computes the address without a reference; it is in
        // bounds (checked above) and only the kernel reads through it.
        iov.push(libc::iovec {
            iov_base: r.as_ptr().wrapping_add(o as usize).cast(),
            iov_len: l as usize,
        });
    }
    if iov.is_empty() {
        return Ok(Ok(0));
    }
    // SAFETY: an all-zero msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: every iovec points into `head` (borrowed for the call) or into a
    // region range checked above, whose allocation the caller's `&MemRegion`
    // keeps alive; the kernel only reads them.
    let n = unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, flags) };
    Ok(if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) })
}

/// Blocks until `fd` is readable or `timeout` passes; true when readable.
///
/// # Errors
/// The OS error of `poll(2)` (`EINTR` counts as "not readable yet").
pub fn poll_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    crate::evd::poll_readable(fd, timeout)
}

/// The round-trip time the kernel has measured on the TCP socket `fd`
/// (`TCP_INFO`'s smoothed `tcpi_rtt`; right after the connection opens,
/// its handshake's round trip).
///
/// # Errors
/// The OS error of `getsockopt(2)` (`fd` is not a TCP socket, say).
pub fn tcp_rtt(fd: BorrowedFd<'_>) -> io::Result<Duration> {
    // SAFETY: an all-zero tcp_info is valid (plain integers).
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is a live tcp_info of `len` bytes that the kernel
    // fills (at most `len` bytes, and it reports how many).
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Duration::from_micros(u64::from(info.tcpi_rtt)))
}

/// `MSG_ZEROCOPY` (linux/socket.h): a send whose payload the kernel
/// takes from the caller's pages without copying (see [`send_gather`]).
pub const MSG_ZEROCOPY: i32 = libc::MSG_ZEROCOPY;
/// `SO_ZEROCOPY` (the architecture's asm/socket.h).
const SO_ZEROCOPY: libc::c_int = libc::SO_ZEROCOPY;
/// `SO_EE_ORIGIN_ZEROCOPY` and `SO_EE_CODE_ZEROCOPY_COPIED`
/// (linux/errqueue.h).
const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// Lets sends on socket `fd` take [`MSG_ZEROCOPY`] (`SO_ZEROCOPY`; Linux
/// 4.14 on, TCP).
///
/// # Errors
/// The OS error of `setsockopt(2)` (a kernel without it: `ENOPROTOOPT`).
pub fn enable_zerocopy(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: `one` is a live c_int of the size passed; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ZEROCOPY,
            (&raw const one).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The kernel is done with the pages of zero-copy sends `first..=last`
/// (each `sendmsg` with [`MSG_ZEROCOPY`] that sent bytes is numbered, from
/// 0 per socket, wrapping at `u32::MAX`); `copied`: it copied the bytes
/// after all (loopback and veth do: the receiver is on this host).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZerocopyDone {
    /// The first send of the range.
    pub first: u32,
    /// The last send of the range (inclusive).
    pub last: u32,
    /// The kernel copied the bytes instead.
    pub copied: bool,
}

impl ZerocopyDone {
    /// Whether send number `id` is in the range (wrapping).
    pub fn covers(&self, id: u32) -> bool {
        id.wrapping_sub(self.first) <= self.last.wrapping_sub(self.first)
    }
}

/// Reads the zero-copy notices waiting on socket `fd`'s error queue
/// (`recvmsg(2)` with `MSG_ERRQUEUE`, without blocking) into `out`, until
/// the queue is empty. Returns how many were read. Other entries of the
/// queue (none on a TCP socket that asked for no timestamps) are passed
/// over.
///
/// # Errors
/// The OS error of `recvmsg(2)`, other than "nothing queued".
pub fn zerocopy_done(fd: BorrowedFd<'_>, out: &mut Vec<ZerocopyDone>) -> io::Result<usize> {
    let mut n = 0;
    loop {
        // Room for a few control messages, aligned for cmsghdr.
        let mut control = [0u64; 16];
        // SAFETY: an all-zero msghdr is valid (no name, no iovec).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: `msg` points only at `control`, live and of the length
        // given, which the kernel fills (at most that much).
        let r = unsafe {
            libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT)
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(n),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
        let need = std::mem::size_of::<libc::sock_extended_err>();
        // The end of what the kernel wrote (it sets the length; a cut
        // message, MSG_CTRUNC, ends at the buffer's end).
        let filled = control.as_ptr() as usize
            + (msg.msg_controllen as usize).min(std::mem::size_of_val(&control));
        // SAFETY: `msg` is the header recvmsg filled; CMSG_FIRSTHDR reads
        // its control pointer and length only.
        let mut c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        while !c.is_null() {
            // SAFETY: a non-null cmsghdr from CMSG_FIRSTHDR/CMSG_NXTHDR lies
            // within `control` (the kernel wrote it, the macros check the
            // length); it is read by value, unaligned-safe.
            let h: libc::cmsghdr = unsafe { std::ptr::read_unaligned(c) };
            let ours = (h.cmsg_level == libc::SOL_IP && h.cmsg_type == libc::IP_RECVERR)
                || (h.cmsg_level == libc::SOL_IPV6 && h.cmsg_type == libc::IPV6_RECVERR);
            // SAFETY: CMSG_LEN and CMSG_DATA are arithmetic on their arguments.
            let (len, data) = unsafe { (libc::CMSG_LEN(need as u32) as usize, libc::CMSG_DATA(c)) };
            if ours && h.cmsg_len as usize >= len && data as usize + need <= filled {
                // SAFETY: the checks above put `need` bytes of data after
                // the header, inside what the kernel wrote of `control`;
                // read by value, unaligned-safe.
                let e: libc::sock_extended_err = unsafe { std::ptr::read_unaligned(data.cast()) };
                if e.ee_errno == 0 && e.ee_origin == SO_EE_ORIGIN_ZEROCOPY {
                    out.push(ZerocopyDone {
                        first: e.ee_info,
                        last: e.ee_data,
                        copied: e.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0,
                    });
                    n += 1;
                }
            }
            // SAFETY: `c` is a header within `msg`'s control buffer.
            c = unsafe { libc::CMSG_NXTHDR(&msg, c) };
        }
    }
}

/// Aborts the TCP connection of socket `fd` at once (`connect(2)` with
/// `AF_UNSPEC`, Linux's disconnect): the kernel drops every byte it still
/// holds to send and resets the peer, and the descriptor stays open (its
/// owner closes it later). A transport whose connection broke calls it so
/// that nothing queued before the break reaches the peer once the link
/// heals: by then the transport has failed those frames over, and a late
/// copy would land on top of newer data.
///
/// # Errors
/// The OS error of `connect(2)`.
pub fn abort_tcp(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: an all-zero sockaddr is valid (plain integers; family AF_UNSPEC).
    let mut addr: libc::sockaddr = unsafe { std::mem::zeroed() };
    addr.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
    // SAFETY: `addr` is a live sockaddr of the size passed; the kernel only reads it.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            &raw const addr,
            std::mem::size_of::<libc::sockaddr>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    #[cfg_attr(miri, ignore)] // sockets
    fn a_tcp_socket_knows_its_round_trip_and_a_unix_one_is_refused() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        for sock in [&c, &s] {
            let rtt = tcp_rtt(sock.as_fd()).unwrap();
            // The handshake's sample over loopback: measured, well under a second.
            assert!(rtt > Duration::ZERO && rtt < Duration::from_secs(1), "{rtt:?}");
        }
        let (u, _) = UnixStream::pair().unwrap();
        assert!(tcp_rtt(u.as_fd()).is_err());
    }

    /// What the peer of a connection reads after the sender wrote `n`
    /// bytes it could not yet take (a full receive window: the sender's
    /// kernel still holds the rest) and then ended it with `end`.
    fn peer_reads_after(end: impl FnOnce(&std::net::TcpStream)) -> (usize, usize) {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.set_nonblocking(true).unwrap();
        let chunk = vec![7u8; 64 << 10];
        let mut sent = 0;
        // Until both kernels' buffers are full (nobody reads yet).
        loop {
            match c.write(&chunk) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        end(&c);
        let mut got = 0;
        let mut buf = vec![0u8; 64 << 10];
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        while let Ok(n @ 1..) = s.read(&mut buf) {
            got += n;
        }
        (sent, got)
    }

    #[test]
    #[cfg_attr(miri, ignore)] // sockets
    fn an_aborted_connection_delivers_nothing_more_a_shut_one_delivers_all() {
        // Shut down: the kernel still sends everything it held.
        let (sent, got) = peer_reads_after(|c| c.shutdown(std::net::Shutdown::Both).unwrap());
        assert_eq!(got, sent, "after a shutdown the peer reads every byte");
        // Aborted: what the sender's kernel held is dropped, the peer reset.
        let (sent, got) = peer_reads_after(|c| abort_tcp(c.as_fd()).unwrap());
        assert!(got < sent, "after an abort the peer read {got} of {sent} bytes");
    }

    #[test]
    #[cfg_attr(miri, ignore)] // sockets
    fn gather_skips_across_segments_and_recv_lands_in_place() {
        let a = MemRegion::from_bytes(b"abcdef");
        let b = MemRegion::from_bytes(b"XYZ");
        for (skip, want) in
            [(0, &b"hdbcdXYZ"[..]), (1, b"dbcdXYZ"), (4, b"dXYZ"), (5, b"XYZ"), (8, b"")]
        {
            let (mut rx, tx) = UnixStream::pair().unwrap();
            let n = send_gather(tx.as_fd(), b"hd", [(&*a, 1, 3), (&*b, 0, 3)], skip, 0)
                .unwrap()
                .unwrap();
            assert_eq!(n, want.len());
            drop(tx);
            let mut got = Vec::new();
            rx.read_to_end(&mut got).unwrap();
            assert_eq!(got, want, "skip {skip}");
        }
        let (_rx, tx) = UnixStream::pair().unwrap();
        assert!(send_gather(tx.as_fd(), b"", [(&*b, 2, 2)], 0, 0).is_err());

        let dst = MemRegion::new(8);
        let (rx, mut tx) = UnixStream::pair().unwrap();
        std::io::Write::write_all(&mut tx, b"1234").unwrap();
        assert_eq!(recv_into(&dst, 2, 6, rx.as_fd(), 0).unwrap().unwrap(), 4);
        assert_eq!(dst.to_vec(0, 8).unwrap(), b"\0\x001234\0\0");
        assert!(recv_into(&dst, 4, 5, rx.as_fd(), 0).is_err());
        assert!(poll_readable(rx.as_fd(), Duration::ZERO).is_ok_and(|r| !r));
    }
}
