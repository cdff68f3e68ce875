//! The IA's settings, [`ShmConfig`]: the spec's options over the
//! `RMR_SHM_*` variables over the defaults, read once when the IA opens.

use rmr_api::settings::{Given, Knob, Setting, check_within, millis, size, switch};
use std::time::Duration;

/// Tunables of an `shm` IA.
#[derive(Clone, Debug)]
pub struct ShmConfig {
    /// Move RDMA writes and reads with cross-memory attach (`cma`,
    /// `RMR_SHM_CMA`, default on); off, or where the kernel refuses it,
    /// they are copied through the rings.
    pub cma: bool,
    /// The smallest RDMA write or read that goes by cross-memory attach
    /// (`cma_min`, `RMR_SHM_CMA_MIN`, default 16K); smaller ones are
    /// cheaper through the ring than a system call.
    pub cma_min: usize,
    /// Bytes of each direction's ring (`ring`, `RMR_SHM_RING`, a power of
    /// two, default 1M).
    pub ring: usize,
    /// Outstanding send-side DTOs per EP (`max_dtos`, `RMR_SHM_MAX_DTOS`,
    /// default 4096).
    pub max_dtos: usize,
    /// Posted receives per EP (`max_recvs`, `RMR_SHM_MAX_RECVS`, default 4096).
    pub max_recvs: usize,
    /// How long a message waits at the target for a posted receive before
    /// it fails with `ReceiverNotReady` (`rnr_timeout_ms`,
    /// `RMR_SHM_RNR_TIMEOUT_MS`, default 5000).
    pub rnr_timeout: Duration,
    /// Move RDMA writes and reads of a peer's shared regions
    /// ([`rmr_api::MemRegion::shared`]) with a copy through a mapping of
    /// the region's file (atomic, as the region's own accessors copy), at
    /// any size (`map`, `RMR_SHM_MAP`, default on).
    /// It takes effect only where cross-memory attach is on and allowed
    /// (`cma`; the permission is the same). Off, they go as other regions' do.
    pub map: bool,
    /// How often the IA's progress helper looks whether application
    /// threads still drive the endpoints it stands back from (`watch_ms`,
    /// `RMR_SHM_WATCH_MS`, default 2, at most 60000). It takes an endpoint
    /// over within this long of its threads leaving it to compute where
    /// the quick handover does not apply (its quick looks were used up by
    /// a ping-pong phase): then the longest an RDMA read, atomic or message
    /// through the rings aimed at such a process waits. Shorter costs the
    /// helper more wake-ups while threads drive. (Frames waiting for ring
    /// space and messages waiting for a receive are looked at every 2 ms
    /// at most, whatever this says.)
    pub watch: Duration,
}

/// The knobs [`ShmConfig::from_given`] reads, in the order of [`ShmConfig::settings`].
pub const KNOBS: [Knob; 8] = [
    Knob { option: "cma", var: "RMR_SHM_CMA", doc: "RDMA by cross-memory attach (0/1)" },
    Knob {
        option: "cma_min",
        var: "RMR_SHM_CMA_MIN",
        doc: "smallest RDMA write/read by cross-memory attach (bytes)",
    },
    Knob {
        option: "ring",
        var: "RMR_SHM_RING",
        doc: "bytes of each direction's ring (power of two)",
    },
    Knob { option: "max_dtos", var: "RMR_SHM_MAX_DTOS", doc: "outstanding send-side DTOs per EP" },
    Knob { option: "max_recvs", var: "RMR_SHM_MAX_RECVS", doc: "posted receives per EP" },
    Knob {
        option: "rnr_timeout_ms",
        var: "RMR_SHM_RNR_TIMEOUT_MS",
        doc: "how long a message waits at the target for a posted receive (ms)",
    },
    Knob {
        option: "map",
        var: "RMR_SHM_MAP",
        doc: "RDMA into a peer's shared regions by a copy through a mapping (0/1)",
    },
    Knob {
        option: "watch_ms",
        var: "RMR_SHM_WATCH_MS",
        doc: "how often the progress helper looks whether threads still drive an endpoint (ms)",
    },
];

const MAX_QUEUE: u64 = 1 << 20;

impl Default for ShmConfig {
    fn default() -> Self {
        ShmConfig {
            cma: true,
            cma_min: 16 << 10,
            ring: 1 << 20,
            max_dtos: 4096,
            max_recvs: 4096,
            rnr_timeout: Duration::from_millis(5000),
            map: true,
            watch: Duration::from_millis(2),
        }
    }
}

rmr_api::config_builder!(
    /// Builds a [`ShmConfig`] from the defaults: `ShmConfig::builder().cma(false).build()?`.
    ShmConfigBuilder for ShmConfig {
        cma: bool,
        cma_min: usize,
        ring: usize,
        max_dtos: usize,
        max_recvs: usize,
        rnr_timeout: Duration,
        map: bool,
        watch: Duration,
    }
);

impl ShmConfig {
    /// The defaults with the `RMR_SHM_*` variables applied.
    ///
    /// # Errors
    /// As [`ShmConfig::from_given`].
    pub fn from_env() -> rmr_api::Result<ShmConfig> {
        ShmConfig::from_given(&Given::env())
    }

    /// The defaults, the `RMR_SHM_*` variables over them and a spec's
    /// options over those.
    ///
    /// # Errors
    /// [`rmr_api::Error::BadSetting`] naming a value that does not parse or
    /// is out of range.
    pub fn from_given(g: &Given) -> rmr_api::Result<ShmConfig> {
        let mut c = ShmConfig::default();
        let queue = rmr_api::settings::within(1, MAX_QUEUE);
        if let Some(v) = g.get(&KNOBS[0], switch)? {
            c.cma = v;
        }
        if let Some(v) = g.get(&KNOBS[1], size)? {
            c.cma_min = v as usize;
        }
        if let Some(v) = g.get(&KNOBS[2], size)? {
            c.ring = v as usize;
        }
        if let Some(v) = g.get(&KNOBS[3], &queue)? {
            c.max_dtos = v as usize;
        }
        if let Some(v) = g.get(&KNOBS[4], &queue)? {
            c.max_recvs = v as usize;
        }
        if let Some(v) = g.get(&KNOBS[5], millis)? {
            c.rnr_timeout = v;
        }
        if let Some(v) = g.get(&KNOBS[6], switch)? {
            c.map = v;
        }
        if let Some(v) = g.get(&KNOBS[7], millis)? {
            c.watch = v;
        }
        rmr_api::provider::spin_settings()?;
        c.check()?;
        Ok(c)
    }

    /// Checks the values.
    pub(crate) fn check(&self) -> rmr_api::Result<()> {
        check_within("watch_ms", self.watch.as_millis() as u64, 1, 60_000)?;
        check_within("max_dtos", self.max_dtos as u64, 1, MAX_QUEUE)?;
        check_within("max_recvs", self.max_recvs as u64, 1, MAX_QUEUE)?;
        check_within("ring", self.ring as u64, 64 << 10, 1 << 30)?;
        if !self.ring.is_power_of_two() {
            return Err(rmr_api::Error::BadSetting {
                var: "ring".into(),
                value: self.ring.to_string(),
                accepted: "a power of two".into(),
            });
        }
        Ok(())
    }

    /// Every setting an `shm:` IA opens with under `g`, its value and where
    /// it came from, then the software EVDs'.
    ///
    /// # Errors
    /// As [`ShmConfig::from_given`].
    pub fn settings(g: &Given) -> rmr_api::Result<Vec<Setting>> {
        let c = ShmConfig::from_given(g)?;
        let values = [
            u8::from(c.cma).to_string(),
            c.cma_min.to_string(),
            c.ring.to_string(),
            c.max_dtos.to_string(),
            c.max_recvs.to_string(),
            c.rnr_timeout.as_millis().to_string(),
            u8::from(c.map).to_string(),
            c.watch.as_millis().to_string(),
        ];
        let mut out = g.listed(&KNOBS, values);
        out.extend(rmr_api::provider::spin_settings()?);
        Ok(out)
    }
}
