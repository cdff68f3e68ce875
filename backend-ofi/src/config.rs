//! The IA's settings, [`OfiConfig`]: read from the spec's options and
//! the environment once, when the IA opens, in this one place.

use rmr_api::settings::{Given, Knob, Setting, check_within, size, switch, within};

/// Tunables of an `ofi:` IA. `Default` is the plain defaults; an `ofi:`
/// spec opens with [`OfiConfig::from_given`] (its options over the
/// `RMR_OFI_*` variables); [`OfiConfig::builder`] builds one in code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OfiConfig {
    /// Transmit queue depth asked of the provider (`tx_size`,
    /// `RMR_OFI_TX_SIZE`; 0, the default, takes the provider's).
    pub tx_size: usize,
    /// Receive queue depth asked of the provider (`rx_size`,
    /// `RMR_OFI_RX_SIZE`; 0, the default, takes the provider's).
    pub rx_size: usize,
    /// Private data bytes the provider carries in connection messages
    /// (`cm_data`, `RMR_OFI_CM_DATA`; `None`, the default, assumes 256 on
    /// tcp, sockets and net and 56 elsewhere). At least 24 (the backend's
    /// own header).
    pub cm_data: Option<usize>,
    /// Signalled writes and sends ask for `FI_DELIVERY_COMPLETE`
    /// (`delivery_complete`, `RMR_OFI_DELIVERY_COMPLETE`, default on).
    pub delivery_complete: bool,
    /// Receives up to this many bytes are staged through a bounce buffer
    /// (`bounce_max`, `RMR_OFI_BOUNCE_MAX`, default 64 KiB).
    pub bounce_max: u64,
    /// Completion queue entries per EVD CQ (`cq_size`, `RMR_OFI_CQ_SIZE`,
    /// default 16384).
    pub cq_size: usize,
    /// A progress thread per CQ for manual-progress providers
    /// (`progress_thread`, `RMR_OFI_PROGRESS_THREAD`; `None`, the default,
    /// runs one for tcp, net and udp).
    pub progress_thread: Option<bool>,
    /// On the `tcp` provider, an RDMA write of up to this many bytes (and
    /// small enough to share one TCP segment with the send after it)
    /// waits in the socket (`TCP_CORK`) for the next operation of another
    /// kind, so that a write and the send that announces it leave in one
    /// segment (`cork_max`, `RMR_OFI_CORK_MAX`, default 16 KiB; 0: never;
    /// nothing is corked without the CQs' progress threads).
    pub cork_max: u64,
    /// Completion queues wait on a poll set (`FI_WAIT_POLLFD`) rather than
    /// an epoll fd, where the provider has one: each `fi_cq_read`'s
    /// progress pass is then a `poll(2)`, which costs less than
    /// `epoll_wait` (`poll_set`, `RMR_OFI_POLL_SET`; `None`, the default,
    /// on tcp with libfabric before 1.18). A poll of every connection's
    /// socket per pass grows with the connections a CQ carries: a poll-set
    /// CQ takes about 16 endpoints, and an EVD's next ones in a PZ share a
    /// CQ with an fd.
    pub poll_set: Option<bool>,
    /// A suppressed RDMA write of up to this many bytes rides in a
    /// message, placed by the receiver before it completes the receive: on
    /// the `tcp` provider it is held for the next send (posted alone when
    /// none comes in time; needs what corking needs), and there a write
    /// with immediate of up to 80 bytes rides in its own message (`eager_max`,
    /// `RMR_OFI_EAGER_MAX`, default and most 88; 0: never).
    pub eager_max: u64,
}

impl Default for OfiConfig {
    /// The defaults, whatever the environment says (see
    /// [`OfiConfig::from_env`]).
    fn default() -> Self {
        OfiConfig {
            tx_size: 0,
            rx_size: 0,
            cm_data: None,
            delivery_complete: true,
            bounce_max: 64 << 10,
            cq_size: 16384,
            progress_thread: None,
            cork_max: 16 << 10,
            poll_set: None,
            eager_max: crate::eager::EAGER_MAX as u64,
        }
    }
}

/// The knobs [`OfiConfig::from_given`] reads, in the order of
/// [`OfiConfig::settings`].
pub const KNOBS: [Knob; 10] = [
    Knob { option: "tx_size", var: "RMR_OFI_TX_SIZE", doc: "transmit queue depth (0: provider's)" },
    Knob { option: "rx_size", var: "RMR_OFI_RX_SIZE", doc: "receive queue depth (0: provider's)" },
    Knob {
        option: "cm_data",
        var: "RMR_OFI_CM_DATA",
        doc: "private data bytes the provider carries in CM messages",
    },
    Knob {
        option: "delivery_complete",
        var: "RMR_OFI_DELIVERY_COMPLETE",
        doc: "signalled writes and sends ask for FI_DELIVERY_COMPLETE (0/1)",
    },
    Knob {
        option: "bounce_max",
        var: "RMR_OFI_BOUNCE_MAX",
        doc: "largest receive staged through a bounce buffer (bytes)",
    },
    Knob { option: "cq_size", var: "RMR_OFI_CQ_SIZE", doc: "completion queue entries per EVD CQ" },
    Knob {
        option: "progress_thread",
        var: "RMR_OFI_PROGRESS_THREAD",
        doc: "a progress thread per CQ (0/1; unset: for tcp, net and udp)",
    },
    Knob {
        option: "cork_max",
        var: "RMR_OFI_CORK_MAX",
        doc: "tcp provider: writes up to this size leave with what follows (bytes; 0: off)",
    },
    Knob {
        option: "poll_set",
        var: "RMR_OFI_POLL_SET",
        doc: "CQs wait on a poll set, not an epoll fd (0/1; unset: on tcp)",
    },
    Knob {
        option: "eager_max",
        var: "RMR_OFI_EAGER_MAX",
        doc: "tcp provider: suppressed writes up to this size ride in the next send (bytes; 0: off)",
    },
];

/// The deepest queue asked for.
const MAX_QUEUE: u64 = 1 << 20;
/// The most private data a CM message carries here.
const MAX_CM_DATA: u64 = 4096;

rmr_api::config_builder!(
    /// Builds an [`OfiConfig`] from the defaults:
    /// `OfiConfig::builder().cq_size(4096).build()?`.
    OfiConfigBuilder for OfiConfig {
        tx_size: usize,
        rx_size: usize,
        cm_data: Option<usize>,
        delivery_complete: bool,
        bounce_max: u64,
        cq_size: usize,
        progress_thread: Option<bool>,
        cork_max: u64,
        poll_set: Option<bool>,
        eager_max: u64,
    }
);

impl OfiConfig {
    /// The defaults with the `RMR_OFI_*` variables applied.
    ///
    /// # Errors
    /// As [`OfiConfig::from_given`].
    pub fn from_env() -> rmr_api::Result<OfiConfig> {
        OfiConfig::from_given(&Given::env())
    }

    /// The defaults, the `RMR_OFI_*` variables over them and the spec's
    /// options over those (what `ofi:[<provider>:]<IP>[;option=value...]`
    /// opens with). The software EVDs' `RMR_EVD_SPIN_*` are checked too.
    ///
    /// # Errors
    /// [`rmr_api::Error::BadSetting`] naming an option or variable whose
    /// value does not parse or is out of range.
    pub fn from_given(g: &Given) -> rmr_api::Result<OfiConfig> {
        let mut c = OfiConfig::default();
        let queue = within(0, MAX_QUEUE);
        if let Some(v) = g.get(&KNOBS[0], &queue)? {
            c.tx_size = v as usize;
        }
        if let Some(v) = g.get(&KNOBS[1], &queue)? {
            c.rx_size = v as usize;
        }
        if let Some(v) = g.get(&KNOBS[2], within(crate::ia::CM_HDR as u64, MAX_CM_DATA))? {
            c.cm_data = Some(v as usize);
        }
        if let Some(v) = g.get(&KNOBS[3], switch)? {
            c.delivery_complete = v;
        }
        if let Some(v) = g.get(&KNOBS[4], size)? {
            c.bounce_max = v;
        }
        if let Some(v) = g.get(&KNOBS[5], within(16, MAX_QUEUE))? {
            c.cq_size = v as usize;
        }
        if let Some(v) = g.get(&KNOBS[6], switch)? {
            c.progress_thread = Some(v);
        }
        if let Some(v) = g.get(&KNOBS[7], size)? {
            c.cork_max = v;
        }
        if let Some(v) = g.get(&KNOBS[8], switch)? {
            c.poll_set = Some(v);
        }
        if let Some(v) = g.get(&KNOBS[9], within(0, crate::eager::EAGER_MAX as u64))? {
            c.eager_max = v;
        }
        rmr_api::provider::spin_settings()?;
        c.check()?;
        Ok(c)
    }

    /// Checks the values (what a builder's `build` and the constructors
    /// taking a config as given call).
    pub(crate) fn check(&self) -> rmr_api::Result<()> {
        check_within("tx_size", self.tx_size as u64, 0, MAX_QUEUE)?;
        check_within("rx_size", self.rx_size as u64, 0, MAX_QUEUE)?;
        check_within("cq_size", self.cq_size as u64, 16, MAX_QUEUE)?;
        check_within("eager_max", self.eager_max, 0, crate::eager::EAGER_MAX as u64)?;
        match self.cm_data {
            Some(n) => check_within("cm_data", n as u64, crate::ia::CM_HDR as u64, MAX_CM_DATA),
            None => Ok(()),
        }
    }

    /// Every setting an `ofi:` IA opens with under `g`, its value and
    /// where it came from, then the software EVDs' (what `rmr-bench info`
    /// prints).
    ///
    /// # Errors
    /// As [`OfiConfig::from_given`].
    pub fn settings(g: &Given) -> rmr_api::Result<Vec<Setting>> {
        let c = OfiConfig::from_given(g)?;
        let auto = |v: Option<String>, what: &str| v.unwrap_or_else(|| what.to_string());
        let values = [
            c.tx_size.to_string(),
            c.rx_size.to_string(),
            auto(c.cm_data.map(|n| n.to_string()), "provider's"),
            u8::from(c.delivery_complete).to_string(),
            c.bounce_max.to_string(),
            c.cq_size.to_string(),
            auto(c.progress_thread.map(|p| u8::from(p).to_string()), "auto"),
            c.cork_max.to_string(),
            auto(c.poll_set.map(|p| u8::from(p).to_string()), "auto"),
            c.eager_max.to_string(),
        ];
        let mut out = g.listed(&KNOBS, values);
        out.extend(rmr_api::provider::spin_settings()?);
        Ok(out)
    }
}
