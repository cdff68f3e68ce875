//! The IA's settings, [`TcpConfig`]: read from the spec's options and
//! the environment once, when the IA opens, in this one place.

use rmr_api::settings::{Given, Knob, Setting, check_within, micros, millis, size, switch};
use std::time::Duration;

/// Tunables of an IA. `Default` is the plain defaults; a `tcp:` spec
/// opens with [`TcpConfig::from_given`] (its options over the `RMR_TCP_*`
/// variables); [`TcpConfig::builder`] builds one in code.
#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// How long the receive path waits for a posted receive before the
    /// connection is declared broken (`rnr_timeout_ms`,
    /// `RMR_TCP_RNR_TIMEOUT_MS`, default 5000).
    pub rnr_timeout: Duration,
    /// TCP_USER_TIMEOUT and keepalive budget: how long unacknowledged data or
    /// a silent link may last before the EP is broken (`user_timeout_ms`,
    /// `RMR_TCP_USER_TIMEOUT_MS`, default 4000).
    pub user_timeout: Duration,
    /// Outstanding send-side DTOs per EP (`max_dtos`, `RMR_TCP_MAX_DTOS`,
    /// default 4096).
    pub max_dtos: usize,
    /// Posted receives per EP (`max_recvs`, `RMR_TCP_MAX_RECVS`, default 4096).
    pub max_recvs: usize,
    /// How long an acknowledgement a peer asked for may wait for an
    /// outgoing frame to ride on (`ack_delay_us`, `RMR_TCP_ACK_DELAY_US`,
    /// default 50; 0 acknowledges at once).
    pub ack_delay: Duration,
    /// Batch small frames into one `send` until the next frame or the next
    /// drive (`batch`, `RMR_TCP_BATCH`, default on; `0` writes every frame
    /// at once).
    pub batch: bool,
    /// How long frames may wait to go to a peer that takes nothing (no
    /// byte leaves, none arrives) before the EP ends with
    /// [`rmr_api::Error::PeerStalled`] (`stall_timeout_ms`,
    /// `RMR_TCP_STALL_TIMEOUT_MS`, default 30000; 0 never). A peer that
    /// reads slowly is not cut: any byte moving restarts the clock.
    pub stall_timeout: Duration,
    /// Socket send and receive buffer sizes in bytes (`sockbuf`,
    /// `RMR_TCP_SOCKBUF`; `None`, the default, leaves the kernel's
    /// autotuning).
    pub sockbuf: Option<usize>,
    /// The send buffer of a connection to a near peer (`near_sndbuf`,
    /// `RMR_TCP_NEAR_SNDBUF`, default 512 KiB, or 512 KiB / N for one of
    /// N rails, at least 128 KiB; 0: never), when `sockbuf` is unset.
    /// The kernel's autotuning grows a send buffer to 4 MiB, and on a
    /// transfer bound by the CPUs (both ends on one host) the sender then
    /// runs megabytes ahead of the receiver, whose copy out of the socket
    /// reads bytes that left the caches; with this buffer it keeps up (one
    /// rail over veth: 1 MiB writes ~1.2x, 4 MiB ~1.8x; BENCHMARKS.md).
    /// Which peers are near: [`TcpConfig::near`]. The buffer is locked at
    /// this size (the kernel doubles it, capped by `net.core.wmem_max`;
    /// the EP's `sndbuf` note shows what the socket got), which bounds a
    /// connection to about twice the size per round trip: 512 KiB carries
    /// ~80 Gbit/s at 100 us. An IA opened as one of N rails
    /// ([`rmr_api::provider::with_rail_share`], as multirail opens its
    /// rails) defaults to its share, the rails sharing the host's caches.
    pub near_sndbuf: usize,
    /// Which peers get [`TcpConfig::near_sndbuf`] (`near`, `RMR_TCP_NEAR`):
    /// [`Near::Host`] (the default) those on this host, [`Near::Rtt`] also
    /// those whose round trip at connect was at most [`NEAR_RTT`] (hosts
    /// that share CPUs, as the lab's namespaces do; on a fast fabric it
    /// caps a connection, see above), [`Near::Off`] none.
    pub near: Near,
    /// How often the IA's progress helper looks whether application
    /// threads still drive the endpoints it stands back from (`watch_ms`,
    /// `RMR_TCP_WATCH_MS`, default 2, at most 60000). It takes an endpoint
    /// over within this long of its threads leaving it to compute where
    /// the quick handover does not apply (its quick looks were used up by
    /// a ping-pong phase): then the longest an RDMA read or atomic aimed
    /// at such a process waits for its answer. Shorter costs the helper
    /// more wake-ups while threads drive.
    pub watch: Duration,
    /// Send the payload of an RDMA write, write with immediate or send of
    /// at least this many bytes with `MSG_ZEROCOPY` (`zerocopy`,
    /// `RMR_TCP_ZEROCOPY`: a size such as `64K`, or `off`, the default):
    /// the kernel takes the bytes from the registered memory itself rather
    /// than copying them into the socket, and the DTO completes once the
    /// kernel says it is done with them (its notices on the socket's error
    /// queue) as well as once the peer has them. Loopback and veth copy
    /// anyway (the receiver is on this host): measured there it costs more
    /// than it saves (BENCHMARKS.md), so it is off by default, kept for
    /// NICs, where the kernel's guidance is that it pays from about 10 KB.
    /// A kernel that refuses it leaves the EP copying (its `zerocopy`
    /// note says why).
    pub zerocopy: Option<u64>,
}

/// Which peers count as near (see [`TcpConfig::near`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Near {
    /// Peers on this host: a loopback address, or one this host owns.
    Host,
    /// Those, and peers whose round trip at connect was at most
    /// [`NEAR_RTT`].
    Rtt,
    /// No peer: every send buffer autotuned.
    Off,
}

impl Near {
    /// Parses `host`, `rtt` or `off`.
    ///
    /// # Errors
    /// A message listing the values.
    pub fn parse(s: &str) -> std::result::Result<Near, String> {
        match s {
            "host" => Ok(Near::Host),
            "rtt" => Ok(Near::Rtt),
            "off" | "0" => Ok(Near::Off),
            _ => Err("host, rtt or off".into()),
        }
    }
}

impl std::fmt::Display for Near {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Near::Host => "host",
            Near::Rtt => "rtt",
            Near::Off => "off",
        })
    }
}

/// The default [`TcpConfig::near_sndbuf`] of an IA opened alone.
pub const NEAR_SNDBUF: usize = 512 << 10;

/// The smallest default near send buffer of one of several rails.
pub const NEAR_SNDBUF_MIN: usize = 128 << 10;

/// With [`Near::Rtt`], the round trip at connect under which a peer is
/// near (see [`TcpConfig::near`]). Generous: a handshake's round trip
/// includes the scheduling of both ends (20-72 us between the lab's
/// namespaces on a 2-CPU VM), and `rtt` is for hosts the user knows
/// share CPUs.
pub const NEAR_RTT: Duration = Duration::from_micros(200);

/// The knobs [`TcpConfig::from_given`] reads, in the order of
/// [`TcpConfig::settings`].
pub const KNOBS: [Knob; 12] = [
    Knob {
        option: "rnr_timeout_ms",
        var: "RMR_TCP_RNR_TIMEOUT_MS",
        doc: "how long a send waits at the target for a posted receive (ms)",
    },
    Knob {
        option: "user_timeout_ms",
        var: "RMR_TCP_USER_TIMEOUT_MS",
        doc: "TCP_USER_TIMEOUT and keepalive budget: how fast a dead peer breaks the EP (ms)",
    },
    Knob { option: "max_dtos", var: "RMR_TCP_MAX_DTOS", doc: "outstanding send-side DTOs per EP" },
    Knob { option: "max_recvs", var: "RMR_TCP_MAX_RECVS", doc: "posted receives per EP" },
    Knob {
        option: "ack_delay_us",
        var: "RMR_TCP_ACK_DELAY_US",
        doc: "how long a requested acknowledgement may wait for a frame to ride on (us)",
    },
    Knob {
        option: "batch",
        var: "RMR_TCP_BATCH",
        doc: "batch small frames until the next frame or drive (0/1)",
    },
    Knob {
        option: "stall_timeout_ms",
        var: "RMR_TCP_STALL_TIMEOUT_MS",
        doc: "how long frames may wait for a peer that takes nothing (ms; 0 never)",
    },
    Knob {
        option: "sockbuf",
        var: "RMR_TCP_SOCKBUF",
        doc: "socket buffer sizes (bytes, e.g. 4M; unset: kernel autotuning)",
    },
    Knob {
        option: "near_sndbuf",
        var: "RMR_TCP_NEAR_SNDBUF",
        doc: "send buffer of a connection to a near peer (bytes; 0: autotuning; default 512K / rails)",
    },
    Knob {
        option: "near",
        var: "RMR_TCP_NEAR",
        doc: "near peers: host (this host's), rtt (also round trip <= 200 us at connect) or off",
    },
    Knob {
        option: "watch_ms",
        var: "RMR_TCP_WATCH_MS",
        doc: "how often the progress helper looks whether threads still drive an endpoint (ms)",
    },
    Knob {
        option: "zerocopy",
        var: "RMR_TCP_ZEROCOPY",
        doc: "send DTO payloads of at least this size with MSG_ZEROCOPY (bytes, e.g. 64K; off)",
    },
];

/// The most DTOs or receives an EP may be given.
const MAX_QUEUE: u64 = 1 << 20;

impl Default for TcpConfig {
    /// The defaults, whatever the environment says (see
    /// [`TcpConfig::from_env`]).
    fn default() -> Self {
        TcpConfig {
            rnr_timeout: Duration::from_millis(5000),
            user_timeout: Duration::from_millis(4000),
            max_dtos: 4096,
            max_recvs: 4096,
            ack_delay: Duration::from_micros(50),
            batch: true,
            stall_timeout: Duration::from_millis(30_000),
            sockbuf: None,
            near_sndbuf: NEAR_SNDBUF,
            near: Near::Host,
            watch: Duration::from_millis(2),
            zerocopy: None,
        }
    }
}

rmr_api::config_builder!(
    /// Builds a [`TcpConfig`] from the defaults:
    /// `TcpConfig::builder().batch(false).build()?`.
    TcpConfigBuilder for TcpConfig {
        rnr_timeout: Duration,
        user_timeout: Duration,
        max_dtos: usize,
        max_recvs: usize,
        ack_delay: Duration,
        batch: bool,
        stall_timeout: Duration,
        sockbuf: Option<usize>,
        near_sndbuf: usize,
        near: Near,
        watch: Duration,
        zerocopy: Option<u64>,
    }
);

impl TcpConfig {
    /// The defaults with the `RMR_TCP_*` variables applied.
    ///
    /// # Errors
    /// As [`TcpConfig::from_given`].
    pub fn from_env() -> rmr_api::Result<TcpConfig> {
        TcpConfig::from_given(&Given::env())
    }

    /// The defaults, the `RMR_TCP_*` variables over them and the spec's
    /// options over those (what a `tcp:<IP>[;option=value...]` spec opens
    /// with). The software EVDs' `RMR_EVD_SPIN_*` are checked here too.
    ///
    /// # Errors
    /// [`rmr_api::Error::BadSetting`] naming an option or variable whose
    /// value does not parse or is out of range: a typo is an error at
    /// `open`, never a silent default.
    pub fn from_given(g: &Given) -> rmr_api::Result<TcpConfig> {
        let mut c = TcpConfig::default();
        let share = rmr_api::provider::rail_share();
        c.near_sndbuf = (NEAR_SNDBUF / share).max(NEAR_SNDBUF_MIN);
        let queue = rmr_api::settings::within(1, MAX_QUEUE);
        if let Some(v) = g.get(&KNOBS[0], millis)? {
            c.rnr_timeout = v;
        }
        if let Some(v) = g.get(&KNOBS[1], millis)? {
            c.user_timeout = v;
        }
        if let Some(v) = g.get(&KNOBS[2], &queue)? {
            c.max_dtos = v as usize;
        }
        if let Some(v) = g.get(&KNOBS[3], &queue)? {
            c.max_recvs = v as usize;
        }
        if let Some(v) = g.get(&KNOBS[4], micros)? {
            c.ack_delay = v;
        }
        if let Some(v) = g.get(&KNOBS[5], switch)? {
            c.batch = v;
        }
        if let Some(v) = g.get(&KNOBS[6], millis)? {
            c.stall_timeout = v;
        }
        if let Some(v) = g.get(&KNOBS[7], size)? {
            c.sockbuf = Some(v as usize);
        }
        if let Some(v) = g.get(&KNOBS[8], size)? {
            c.near_sndbuf = v as usize;
        }
        if let Some(v) = g.get(&KNOBS[9], Near::parse)? {
            c.near = v;
        }
        if let Some(v) = g.get(&KNOBS[10], millis)? {
            c.watch = v;
        }
        if let Some(v) = g.get(&KNOBS[11], zerocopy_of)? {
            c.zerocopy = v;
        }
        rmr_api::provider::spin_settings()?;
        c.check()?;
        Ok(c)
    }

    /// Checks the values (what a builder's `build` and the constructors
    /// taking a config as given call).
    pub(crate) fn check(&self) -> rmr_api::Result<()> {
        if self.near_sndbuf != 0 {
            check_within("near_sndbuf", self.near_sndbuf as u64, 16 << 10, 1 << 30)?;
        }
        check_within("watch_ms", self.watch.as_millis() as u64, 1, 60_000)?;
        if let Some(z) = self.zerocopy {
            check_within("zerocopy", z, 1, 1 << 40)?;
        }
        check_within("max_dtos", self.max_dtos as u64, 1, MAX_QUEUE)?;
        check_within("max_recvs", self.max_recvs as u64, 1, MAX_QUEUE)
    }

    /// Every setting a `tcp:` IA opens with under `g`, its value and where
    /// it came from, then the software EVDs' (what `rmr-bench info`
    /// prints).
    ///
    /// # Errors
    /// As [`TcpConfig::from_given`].
    pub fn settings(g: &Given) -> rmr_api::Result<Vec<Setting>> {
        let c = TcpConfig::from_given(g)?;
        let values = [
            c.rnr_timeout.as_millis().to_string(),
            c.user_timeout.as_millis().to_string(),
            c.max_dtos.to_string(),
            c.max_recvs.to_string(),
            c.ack_delay.as_micros().to_string(),
            u8::from(c.batch).to_string(),
            c.stall_timeout.as_millis().to_string(),
            c.sockbuf.map_or("kernel autotuning".into(), |b| b.to_string()),
            c.near_sndbuf.to_string(),
            c.near.to_string(),
            c.watch.as_millis().to_string(),
            c.zerocopy.map_or("off".into(), |z| z.to_string()),
        ];
        let mut out = g.listed(&KNOBS, values);
        out.extend(rmr_api::provider::spin_settings()?);
        Ok(out)
    }
}

/// `off` (or `0`), or a size (see [`TcpConfig::zerocopy`]).
fn zerocopy_of(v: &str) -> std::result::Result<Option<u64>, String> {
    match v {
        "off" | "0" => Ok(None),
        _ => size(v).map(Some).map_err(|e| format!("{e}, or off")),
    }
}
