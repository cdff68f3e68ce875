//! What a peer needs to reach a registered region: [`RmrContext`] (keys,
//! address, length; serialised for exchange) and [`RemoteAddr`], a place
//! in it that a one-sided operation targets.

use crate::error::{Error, Result};
use std::fmt;

/// Maximum number of rail keys one [`RmrContext`] can carry.
pub const MAX_RAIL_KEYS: usize = 8;

/// What a peer needs to target a registered region: its remote key(s),
/// base address and length (uDAPL's RMR context plus the region's extent).
///
/// A multirail region carries one key per rail (same memory registered on
/// every rail); a plain region carries one. It is `Copy` and serialises to
/// a fixed-size byte string ([`RmrContext::to_bytes`]) for exchange in a
/// message.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RmrContext {
    /// Base address in the target's addressing scheme (a virtual address).
    pub addr: u64,
    /// Length of the region in bytes.
    pub len: u64,
    nkeys: u8,
    keys: [u64; MAX_RAIL_KEYS],
}

impl RmrContext {
    /// Size of [`RmrContext::to_bytes`]'s output.
    pub const WIRE_SIZE: usize = 8 + 8 + 1 + 8 * MAX_RAIL_KEYS;

    /// A context with a single key.
    pub fn new(key: u64, addr: u64, len: u64) -> Self {
        let mut keys = [0; MAX_RAIL_KEYS];
        keys[0] = key;
        RmrContext { addr, len, nkeys: 1, keys }
    }

    /// A context carrying one key per rail.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `keys` is empty or longer than [`MAX_RAIL_KEYS`].
    pub fn with_keys(keys: &[u64], addr: u64, len: u64) -> Result<Self> {
        if keys.is_empty() || keys.len() > MAX_RAIL_KEYS {
            return Err(Error::invalid(format!("{} rail keys (1..={MAX_RAIL_KEYS})", keys.len())));
        }
        let mut k = [0; MAX_RAIL_KEYS];
        k[..keys.len()].copy_from_slice(keys);
        Ok(RmrContext { addr, len, nkeys: keys.len() as u8, keys: k })
    }

    /// The byte at `offset` of this region, as the target of a one-sided
    /// operation (`Ep::post_rdma_write` and the others).
    pub fn at(&self, offset: u64) -> RemoteAddr<'_> {
        RemoteAddr { ctx: self, offset }
    }

    /// The first (or only) key.
    pub fn key(&self) -> u64 {
        self.keys[0]
    }

    /// All keys, one per rail.
    pub fn keys(&self) -> &[u64] {
        &self.keys[..self.nkeys as usize]
    }

    /// The single-key context of rail `i` (for a multirail layer).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the context has no key `i`.
    pub fn rail(&self, i: usize) -> Result<RmrContext> {
        match self.keys().get(i) {
            Some(&k) => Ok(RmrContext::new(k, self.addr, self.len)),
            None => Err(Error::invalid(format!("rmr context has no rail {i}"))),
        }
    }

    /// Fixed-size little-endian encoding.
    pub fn to_bytes(&self) -> [u8; Self::WIRE_SIZE] {
        let mut b = [0u8; Self::WIRE_SIZE];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16] = self.nkeys;
        for (i, k) in self.keys.iter().enumerate() {
            b[17 + 8 * i..25 + 8 * i].copy_from_slice(&k.to_le_bytes());
        }
        b
    }

    /// Decodes [`RmrContext::to_bytes`]'s output.
    ///
    /// # Errors
    /// [`Error::Protocol`] on a short buffer or a bad key count.
    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        if b.len() < Self::WIRE_SIZE {
            return Err(Error::Protocol(format!("rmr context needs {} bytes", Self::WIRE_SIZE)));
        }
        let u = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let nkeys = b[16];
        if nkeys == 0 || nkeys as usize > MAX_RAIL_KEYS {
            return Err(Error::Protocol(format!("rmr context with {nkeys} keys")));
        }
        let mut keys = [0; MAX_RAIL_KEYS];
        for (i, k) in keys.iter_mut().enumerate() {
            *k = u(17 + 8 * i);
        }
        Ok(RmrContext { addr: u(0), len: u(8), nkeys, keys })
    }
}

impl fmt::Debug for RmrContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keys are capabilities: show only that they exist.
        f.debug_struct("RmrContext")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .field("keys", &self.nkeys)
            .finish()
    }
}

/// Where a one-sided operation lands at the peer: a region's
/// [`RmrContext`] and a byte offset into it, made with [`RmrContext::at`].
///
/// ```
/// # let ctx = rmr_api::RmrContext::new(1, 0x1000, 4096);
/// let dst = ctx.at(512); // byte 512 of the peer's region
/// assert_eq!(dst.offset, 512);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct RemoteAddr<'a> {
    /// The peer's region.
    pub ctx: &'a RmrContext,
    /// Byte offset from the start of that region.
    pub offset: u64,
}
