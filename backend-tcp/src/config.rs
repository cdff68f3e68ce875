//! The IA's settings, [`TcpConfig`]: read from the spec's options and
//! the environment once, when the IA opens.

use std::time::Duration;

/// Tunables of an IA, read from the spec's options and the environment.
#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// How long the receive path waits for a posted receive before the
    /// connection is declared broken (`RMR_TCP_RNR_TIMEOUT_MS`, default 5000).
    pub rnr_timeout: Duration,
    /// TCP_USER_TIMEOUT and keepalive budget: how long unacknowledged data or
    /// a silent link may last before the EP is broken (`RMR_TCP_USER_TIMEOUT_MS`, default 4000).
    pub user_timeout: Duration,
    /// Outstanding send-side DTOs per EP (default 4096).
    pub max_dtos: usize,
    /// Posted receives per EP (default 4096).
    pub max_recvs: usize,
    /// How long an acknowledgement a peer asked for may wait for an
    /// outgoing frame to ride on (`RMR_TCP_ACK_DELAY_US`, default 50; 0
    /// acknowledges at once).
    pub ack_delay: Duration,
    /// Batch small frames into one `send` until the next frame or the next
    /// drive (`RMR_TCP_BATCH`, default on; `0` writes every frame at once).
    pub batch: bool,
    /// How long frames may wait to go to a peer that takes nothing (no
    /// byte leaves, none arrives) before the EP ends with
    /// [`rmr_api::Error::PeerStalled`] (`RMR_TCP_STALL_TIMEOUT_MS`, default
    /// 30000; 0 never). A peer that reads slowly is not cut: any byte
    /// moving restarts the clock.
    pub stall_timeout: Duration,
}

/// The variables [`TcpConfig::from_env`] reads, with what each does.
const VARS: [(&str, &str); 7] = [
    ("RMR_TCP_RNR_TIMEOUT_MS", "how long a send waits at the target for a posted receive (ms)"),
    (
        "RMR_TCP_USER_TIMEOUT_MS",
        "TCP_USER_TIMEOUT and keepalive budget: how fast a dead peer breaks the EP (ms)",
    ),
    (
        "RMR_TCP_ACK_DELAY_US",
        "how long a requested acknowledgement may wait for a frame to ride on (us)",
    ),
    ("RMR_TCP_BATCH", "batch small frames until the next frame or drive (0/1)"),
    (
        "RMR_TCP_STALL_TIMEOUT_MS",
        "how long frames may wait for a peer that takes nothing (ms; 0 never)",
    ),
    ("RMR_EVD_SPIN_US", "how long an EVD waiter spins before it sleeps (us)"),
    ("RMR_EVD_SPIN_MAX_US", "the longest that spin grows to (us)"),
];

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
        }
    }
}

impl TcpConfig {
    /// The defaults with the `RMR_TCP_*` variables applied (what a `tcp:`
    /// spec opens with). The EVD spin variables, which every EVD reads,
    /// are checked here too.
    ///
    /// # Errors
    /// [`rmr_api::Error::BadSetting`] naming a variable whose value does
    /// not parse: a typo is an error at `open`, never a silent default.
    pub fn from_env() -> rmr_api::Result<TcpConfig> {
        use rmr_api::provider::settings::{env_setting, number, switch};
        let mut c = TcpConfig::default();
        let ms = |v: &str| number(v).map(Duration::from_millis);
        if let Some(v) = env_setting("RMR_TCP_RNR_TIMEOUT_MS", ms)? {
            c.rnr_timeout = v;
        }
        if let Some(v) = env_setting("RMR_TCP_USER_TIMEOUT_MS", ms)? {
            c.user_timeout = v;
        }
        if let Some(v) =
            env_setting("RMR_TCP_ACK_DELAY_US", |v| number(v).map(Duration::from_micros))?
        {
            c.ack_delay = v;
        }
        if let Some(v) = env_setting("RMR_TCP_BATCH", switch)? {
            c.batch = v;
        }
        if let Some(v) = env_setting("RMR_TCP_STALL_TIMEOUT_MS", ms)? {
            c.stall_timeout = v;
        }
        env_setting("RMR_TCP_SOCKBUF", number)?;
        env_setting("RMR_EVD_SPIN_US", number)?;
        env_setting("RMR_EVD_SPIN_MAX_US", number)?;
        Ok(c)
    }

    /// Every setting a `tcp:` IA opens with, its value and where it came
    /// from (what `rmr-bench info` prints).
    ///
    /// # Errors
    /// As [`TcpConfig::from_env`].
    pub fn settings() -> rmr_api::Result<Vec<rmr_api::provider::settings::Setting>> {
        use rmr_api::provider::settings::{Setting, Source};
        let c = TcpConfig::from_env()?;
        let values = [
            c.rnr_timeout.as_millis().to_string(),
            c.user_timeout.as_millis().to_string(),
            c.ack_delay.as_micros().to_string(),
            u8::from(c.batch).to_string(),
            c.stall_timeout.as_millis().to_string(),
            std::env::var("RMR_EVD_SPIN_US").unwrap_or_else(|_| "50".into()),
            std::env::var("RMR_EVD_SPIN_MAX_US").unwrap_or_else(|_| "1000".into()),
        ];
        let mut out: Vec<Setting> = VARS
            .iter()
            .zip(values)
            .map(|((name, doc), value)| Setting {
                name,
                value,
                source: if std::env::var_os(name).is_some() {
                    Source::Env
                } else {
                    Source::Default
                },
                doc,
            })
            .collect();
        out.push(Setting {
            name: "RMR_TCP_SOCKBUF",
            value: std::env::var("RMR_TCP_SOCKBUF").unwrap_or_else(|_| "kernel autotuning".into()),
            source: if std::env::var_os("RMR_TCP_SOCKBUF").is_some() {
                Source::Env
            } else {
                Source::Default
            },
            doc: "socket buffer sizes (bytes)",
        });
        Ok(out)
    }
}
