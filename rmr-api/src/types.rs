//! Plain data types shared by every object: access rights, DTO flags,
//! cookies, operations and their status, endpoint and IA attributes.
//! They name nothing else in the crate (the bottom of the reading order).

use std::fmt;

bitflags::bitflags! {
/// Access rights of a local memory region (LMR).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct Access: u32 {
        /// The local process may let the NIC write into it (receive, RDMA read target).
        const LOCAL_WRITE = 1;
        /// Peers may RDMA-read it.
        const REMOTE_READ = 2;
        /// Peers may RDMA-write it.
        const REMOTE_WRITE = 4;
        /// Peers may run atomics (fetch-and-add, compare-and-swap) on it.
        const REMOTE_ATOMIC = 8;
    }
}

impl Access {
    /// Every right.
    pub const ALL: Access = Access::all();
}

bitflags::bitflags! {
/// Completion flags of a DTO (uDAPL's `DAT_COMPLETION_FLAGS`).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct DtoFlags: u32 {
        /// No completion event on success (an error is still reported).
        /// A later signalled completion on the same EP implies this DTO completed.
        const SUPPRESS = 1;
        /// The matching receive completion is solicited: it wakes a waiter
        /// that asked only for solicited events.
        const SOLICITED = 2;
        /// Do not start this DTO before every earlier RDMA read of the EP completed.
        const BARRIER_FENCE = 4;
        /// A hint: the initiator is about to wait for this DTO (a fence, a
        /// full window), so complete it as soon as the transport can. The TCP
        /// backend then asks the peer to acknowledge at once instead of after
        /// its acknowledgement delay; transports that acknowledge in hardware
        /// ignore it.
        const URGENT = 8;
    }
}

bitflags::bitflags! {
/// Optional capabilities of an IA, read from [`IaAttr::caps`].
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct Caps: u32 {
        /// RDMA read is available.
        const RDMA_READ = 1;
        /// RDMA write with immediate data is available.
        const WRITE_IMM = 2;
        /// 64-bit fetch-and-add and compare-and-swap are available.
        const ATOMICS = 4;
        /// A send larger than the receive posted at the target completes
        /// with an error at the sender too, not only at the receiver
        /// (absent where the transport acknowledges a message before the
        /// receiver has matched it, e.g. libfabric's `sockets` provider).
        const OVERRUN_AT_SENDER = 8;
    }
}

/// The application's tag for a DTO, handed back in its completion
/// (the completion's `cookie`). A type of its own so that it cannot
/// be passed where an offset or an operand is expected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cookie(pub u64);

impl fmt::Display for Cookie {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl PartialEq<u64> for Cookie {
    fn eq(&self, other: &u64) -> bool {
        self.0 == *other
    }
}

impl PartialEq<Cookie> for u64 {
    fn eq(&self, other: &Cookie) -> bool {
        *self == other.0
    }
}

impl From<u64> for Cookie {
    fn from(v: u64) -> Cookie {
        Cookie(v)
    }
}

/// The operands of a compare-and-swap (`Ep::post_cmp_swap`):
/// named, so the two cannot be swapped by mistake.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CompareSwap {
    /// The value the word must hold for the swap to happen.
    pub compare: u64,
    /// The value written when it does.
    pub swap: u64,
}

/// Which data transfer operation a completion belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DtoOp {
    /// A send.
    Send,
    /// A receive (of a send).
    Recv,
    /// A receive consumed by an RDMA write with immediate data.
    RecvWriteImm,
    /// An RDMA write (also with immediate, at the initiator).
    RdmaWrite,
    /// An RDMA read.
    RdmaRead,
    /// A fetch-and-add.
    FetchAdd,
    /// A compare-and-swap.
    CmpSwap,
}

/// Completion status of a DTO.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// It worked.
    Success,
    /// The target refused the access (rights missing, region deregistered).
    RemoteAccess,
    /// Protection zone mismatch at the target.
    Protection,
    /// Unknown remote key.
    BadKey,
    /// Outside the registered region, or a misaligned atomic.
    OutOfBounds,
    /// The receive buffer was too small for the message.
    RecvTooSmall,
    /// No receive was posted in time at the target.
    ReceiverNotReady,
    /// Flushed by disconnect or break.
    Flushed,
    /// The connection broke under this DTO.
    Broken,
    /// The peer does not support the operation.
    Unsupported,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Success => "success",
            Status::RemoteAccess => "the target refused the access",
            Status::Protection => "the target region is in another protection zone",
            Status::BadKey => "the target does not know the remote key",
            Status::OutOfBounds => "outside the target region (or a misaligned atomic)",
            Status::RecvTooSmall => "the receive buffer is smaller than the message",
            Status::ReceiverNotReady => "no receive was posted at the target in time",
            Status::Flushed => "flushed: the endpoint disconnected or broke first",
            Status::Broken => "the connection broke under the operation",
            Status::Unsupported => "the peer does not support the operation",
        })
    }
}

impl std::error::Error for Status {}

impl Status {
    /// Wire/FFI code.
    pub fn code(self) -> u16 {
        self as u16
    }

    /// Inverse of [`Status::code`]; unknown codes map to `None`.
    pub fn from_code(c: u16) -> Option<Status> {
        use Status::*;
        [
            Success,
            RemoteAccess,
            Protection,
            BadKey,
            OutOfBounds,
            RecvTooSmall,
            ReceiverNotReady,
            Flushed,
            Broken,
            Unsupported,
        ]
        .get(c as usize)
        .copied()
    }

    /// True for [`Status::Success`].
    pub fn is_ok(self) -> bool {
        self == Status::Success
    }
}

/// Identifies an endpoint in events; unique within the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EpId(pub u64);

impl EpId {
    /// A fresh process-unique id.
    pub fn fresh() -> EpId {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(1);
        EpId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// Connection state of an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpState {
    /// Created, not connected yet.
    Unconnected,
    /// A connect or accept is in progress.
    Pending,
    /// Connected: DTOs may be posted.
    Connected,
    /// Closed by either side in an orderly way.
    Disconnected,
    /// The connection failed (peer died, link lost, protocol error).
    Broken,
}

/// Attributes of an interface adapter (one rail).
#[derive(Clone, Debug)]
pub struct IaAttr {
    /// Provider name (`tcp`, `ofi`, `verbs`, `multirail`).
    pub provider: String,
    /// The local address this IA is bound to, as a spec string would name it.
    pub address: String,
    /// Largest message a single DTO may carry.
    pub max_msg_size: u64,
    /// Largest gather/scatter list.
    pub max_sges: usize,
    /// Largest number of outstanding DTOs per EP (send side).
    pub max_dtos: usize,
    /// Largest private data of connection requests and replies.
    pub max_private_data: usize,
    /// Optional capabilities.
    pub caps: Caps,
    /// Link speed in bits per second when known (multirail uses it as a weight).
    pub link_speed_bps: Option<u64>,
}

/// Attributes of an endpoint.
#[derive(Clone, Debug)]
pub struct EpAttr {
    /// Largest message a single DTO may carry.
    pub max_msg_size: u64,
    /// Largest number of outstanding send-side DTOs.
    pub max_dtos: usize,
    /// Largest number of posted receives.
    pub max_recvs: usize,
    /// Largest gather/scatter list.
    pub max_sges: usize,
    /// Free-form key/value notes (e.g. a multirail EP reports each rail's
    /// thread binding here as `rail0.cpu=1`).
    pub notes: Vec<(String, String)>,
}

impl EpAttr {
    /// The value of note `name` ([`EpAttr::notes`]), if the EP gives one.
    pub fn note(&self, name: &str) -> Option<&str> {
        self.notes.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}
