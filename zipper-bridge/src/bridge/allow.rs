//! Who a bridge admits: the members of its job, as address blocks
//! ([`AllowNet`]). A client's hello is checked against them, the client's
//! own address and the target it names, before the bridge opens anything.

use std::net::IpAddr;
use std::str::FromStr;

/// An address block (`198.18.0.0/15`, `fd00::/8`) or one address
/// (`198.18.0.1`, a /32 or /128).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllowNet {
    net: IpAddr,
    bits: u8,
}

impl AllowNet {
    /// The block of one address.
    pub fn host(ip: IpAddr) -> AllowNet {
        AllowNet { net: ip, bits: if ip.is_ipv4() { 32 } else { 128 } }
    }

    /// Whether `ip` lies in the block.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.bits)).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.bits)).unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for AllowNet {
    type Err = String;

    fn from_str(s: &str) -> Result<AllowNet, String> {
        let (ip, bits) = match s.trim().split_once('/') {
            Some((ip, bits)) => (ip, Some(bits)),
            None => (s.trim(), None),
        };
        let ip: IpAddr = ip.parse().map_err(|_| format!("{s:?} is not an address or a block"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => max,
            Some(b) => b
                .parse::<u8>()
                .ok()
                .filter(|b| *b <= max)
                .ok_or_else(|| format!("{s:?}: the prefix length must be 0..={max}"))?,
        };
        Ok(AllowNet { net: ip, bits })
    }
}

/// Whether the address in `addr` (an IP, or `IP:port`) is in one of `allow`.
pub(crate) fn admitted(allow: &[AllowNet], addr: &str) -> bool {
    let ip = addr
        .parse::<IpAddr>()
        .ok()
        .or_else(|| addr.parse::<std::net::SocketAddr>().ok().map(|s| s.ip()));
    ip.is_some_and(|ip| allow.iter().any(|n| n.contains(ip)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_hosts() {
        let n: AllowNet = "198.18.0.0/15".parse().unwrap();
        assert!(n.contains("198.19.255.1".parse().unwrap()));
        assert!(!n.contains("198.20.0.1".parse().unwrap()));
        assert!(!n.contains("::1".parse().unwrap()));
        let h: AllowNet = "10.0.0.7".parse().unwrap();
        assert!(
            h.contains("10.0.0.7".parse().unwrap()) && !h.contains("10.0.0.8".parse().unwrap())
        );
        let all: AllowNet = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
        let v6: AllowNet = "fd00::/8".parse().unwrap();
        assert!(
            v6.contains("fd12::1".parse().unwrap()) && !v6.contains("fe80::1".parse().unwrap())
        );
        for bad in ["", "x", "1.2.3.4/33", "1.2.3.4/", "::/129", "1.2.3/8"] {
            assert!(bad.parse::<AllowNet>().is_err(), "{bad}");
        }
        let allow = [n];
        assert!(admitted(&allow, "198.18.0.5:7000") && admitted(&allow, "198.18.0.5"));
        assert!(!admitted(&allow, "10.0.0.1:7000") && !admitted(&allow, "not an address"));
    }
}
