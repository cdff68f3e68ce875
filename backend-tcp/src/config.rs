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

fn env_ms(name: &str, default: u64) -> Duration {
    Duration::from_millis(std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default))
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            rnr_timeout: env_ms("RMR_TCP_RNR_TIMEOUT_MS", 5000),
            user_timeout: env_ms("RMR_TCP_USER_TIMEOUT_MS", 4000),
            max_dtos: 4096,
            max_recvs: 4096,
            ack_delay: Duration::from_micros(
                std::env::var("RMR_TCP_ACK_DELAY_US")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(50),
            ),
            batch: std::env::var("RMR_TCP_BATCH").map_or(true, |v| v != "0"),
            stall_timeout: env_ms("RMR_TCP_STALL_TIMEOUT_MS", 30_000),
        }
    }
}
