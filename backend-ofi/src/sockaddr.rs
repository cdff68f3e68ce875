//! Socket addresses between Rust's [`SocketAddr`] and the C `sockaddr`
//! bytes libfabric takes and returns (IPv4 and IPv6).

use std::net::{IpAddr, SocketAddr};

/// Converts a socket address to the C `sockaddr` bytes libfabric takes.
pub(crate) fn sockaddr_bytes(a: SocketAddr) -> Vec<u8> {
    match a {
        SocketAddr::V4(v4) => {
            let mut s: libc::sockaddr_in =
                // SAFETY: sockaddr_in is plain old data; all-zero is a valid value.
                unsafe { std::mem::zeroed() };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
            // SAFETY: reading the bytes of a fully initialised POD struct.
            unsafe {
                std::slice::from_raw_parts(
                    (&s as *const libc::sockaddr_in).cast::<u8>(),
                    std::mem::size_of::<libc::sockaddr_in>(),
                )
            }
            .to_vec()
        }
        SocketAddr::V6(v6) => {
            let mut s: libc::sockaddr_in6 =
                // SAFETY: sockaddr_in6 is plain old data; all-zero is a valid value.
                unsafe { std::mem::zeroed() };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = v6.port().to_be();
            s.sin6_addr.s6_addr = v6.ip().octets();
            s.sin6_scope_id = v6.scope_id();
            // SAFETY: reading the bytes of a fully initialised POD struct.
            unsafe {
                std::slice::from_raw_parts(
                    (&s as *const libc::sockaddr_in6).cast::<u8>(),
                    std::mem::size_of::<libc::sockaddr_in6>(),
                )
            }
            .to_vec()
        }
    }
}

/// Parses C `sockaddr` bytes (IPv4 or IPv6).
pub(crate) fn parse_sockaddr(b: &[u8]) -> Option<SocketAddr> {
    if b.len() >= std::mem::size_of::<libc::sockaddr_in>() {
        // SAFETY: length checked; read_unaligned copes with any alignment.
        let s4: libc::sockaddr_in = unsafe { std::ptr::read_unaligned(b.as_ptr().cast()) };
        if i32::from(s4.sin_family) == libc::AF_INET {
            let ip = std::net::Ipv4Addr::from(s4.sin_addr.s_addr.to_ne_bytes());
            return Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(s4.sin_port)));
        }
    }
    if b.len() >= std::mem::size_of::<libc::sockaddr_in6>() {
        // SAFETY: length checked; read_unaligned copes with any alignment.
        let s6: libc::sockaddr_in6 = unsafe { std::ptr::read_unaligned(b.as_ptr().cast()) };
        if i32::from(s6.sin6_family) == libc::AF_INET6 {
            let ip = std::net::Ipv6Addr::from(s6.sin6_addr.s6_addr);
            return Some(SocketAddr::new(IpAddr::V6(ip), u16::from_be(s6.sin6_port)));
        }
    }
    None
}
