//! The interface adapter: one libfabric fabric + EQ (and a default domain)
//! for one provider on one local address.

use crate::config::OfiConfig;
use crate::ep::{EpShared, OfiEp};
use crate::evd::OfiEvd;
use crate::ffi::{Domain, Eq, Fabric, Hints, Info};
use crate::psp::{OfiPsp, PspShared};
use crate::pz::{OfiPz, PzShared};
use ofi_sys as sys;
use rmr_api::{Caps, EpEvds, Error, Evd, Ia, IaAttr, Psp, Pz, Result};
use std::any::Any;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, Weak};

/// Bytes of private data the backend itself uses in every CM exchange.
pub(crate) const CM_HDR: usize = 24;

/// What the chosen provider can do, read once from its fi_info.
#[derive(Clone, Debug)]
pub(crate) struct Features {
    /// libfabric provider name.
    pub(crate) prov: String,
    /// FI_MR_LOCAL: local buffers need a registration descriptor.
    pub(crate) mr_local: bool,
    /// FI_MR_VIRT_ADDR: remote addresses are virtual addresses (else offsets).
    pub(crate) virt_addr: bool,
    /// FI_MR_PROV_KEY: the provider picks keys (else we request random ones).
    pub(crate) prov_key: bool,
    /// Significant bytes of a requested key.
    pub(crate) key_size: usize,
    /// FI_ATOMIC offered.
    pub(crate) atomics: bool,
    /// FI_FENCE offered.
    pub(crate) fence: bool,
    /// Remote CQ data bytes.
    pub(crate) cq_data: usize,
    /// Transmit queue depth.
    pub(crate) tx_size: usize,
    /// Receive queue depth.
    pub(crate) rx_size: usize,
    /// Local segments per send/write/read.
    pub(crate) iov_limit: usize,
    /// Largest message.
    pub(crate) max_msg: u64,
    /// Message ordering granted.
    pub(crate) msg_order: u64,
    /// Private data the provider carries in CM messages.
    pub(crate) cm_data: usize,
    /// Whether signalled writes and sends ask for FI_DELIVERY_COMPLETE.
    pub(crate) delivery_complete: bool,
    /// Largest receive staged through a bounce buffer.
    pub(crate) bounce_max: u64,
    /// CQ entries per EVD CQ.
    pub(crate) cq_size: usize,
    /// Whether each CQ gets a progress thread (manual progress; see [`crate::evd`]).
    pub(crate) pump: bool,
    /// CQs wait on a poll set (`FI_WAIT_POLLFD`; see [`crate::waitset`]).
    pub(crate) poll_set: bool,
    /// Writes up to this size are corked with what follows (see
    /// [`crate::cork`]; 0 on providers other than `tcp` and without
    /// progress threads).
    pub(crate) cork_max: u64,
    /// Messages carry rmr's header (see [`crate::eager`]): the provider
    /// offers 8 bytes of remote CQ data and two segments per operation.
    pub(crate) eager: bool,
    /// Writes up to this size ride in a message, both only if `hold`: a
    /// suppressed write in the next send, a write with immediate (up to 80
    /// bytes) in its own (0: none do; see [`crate::eager`]).
    pub(crate) eager_max: u64,
    /// Suppressed small writes are held for the next send (corking's
    /// conditions: `tcp`, progress threads).
    pub(crate) hold: bool,
}

pub(crate) struct IaShared {
    pub(crate) attr: IaAttr,
    pub(crate) feat: Features,
    pub(crate) hints: Hints,
    pub(crate) ip: Option<IpAddr>,
    pub(crate) info: Info,
    pub(crate) fabric: Arc<Fabric>,
    pub(crate) eq: Arc<Eq>,
    pub(crate) default_domain: Arc<Domain>,
    pub(crate) default_taken: AtomicBool,
    /// fid_ep address -> endpoint, for EQ dispatch.
    pub(crate) eps: Mutex<HashMap<usize, Weak<EpShared>>>,
    /// fid_pep address -> service point, for EQ dispatch.
    pub(crate) peps: Mutex<HashMap<usize, Weak<PspShared>>>,
}

impl IaShared {
    pub(crate) fn ep_by_fid(&self, fid: usize) -> Option<Arc<EpShared>> {
        self.eps.lock().unwrap_or_else(|e| e.into_inner()).get(&fid).and_then(Weak::upgrade)
    }

    pub(crate) fn psp_by_fid(&self, fid: usize) -> Option<Arc<PspShared>> {
        self.peps.lock().unwrap_or_else(|e| e.into_inner()).get(&fid).and_then(Weak::upgrade)
    }
}

/// A parsed `ofi:` spec: `[provider:]address`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Spec {
    pub(crate) prov: Option<String>,
    pub(crate) ip: Option<IpAddr>,
}

/// Parses the part of a spec after `ofi:` (its options taken off):
/// `tcp:198.18.0.1`, `sockets:127.0.0.1`, `verbs:10.0.0.1`, `127.0.0.1`
/// (best provider), `tcp` or `` (any address). Layered provider names
/// (`verbs;ofi_rxm`) are RDM-only and not accepted: `;` starts the spec's
/// options, and rmr uses `FI_EP_MSG` endpoints.
pub(crate) fn parse_spec(rest: &str) -> Result<Spec> {
    let rest = rest.trim();
    let bad = |why: &str| Error::BadSpec { spec: format!("ofi:{rest}"), why: why.into() };
    if rest.is_empty() {
        return Ok(Spec { prov: None, ip: None });
    }
    if let Ok(ip) = rest.trim_matches(['[', ']']).parse::<IpAddr>() {
        return Ok(Spec { prov: None, ip: Some(ip) });
    }
    let (prov, addr) = rest.split_once(':').unwrap_or((rest, ""));
    if prov.is_empty() || !prov.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(bad("expected `ofi:[<provider>:]<local IP>`, e.g. `ofi:tcp:127.0.0.1`"));
    }
    let addr = addr.trim().trim_matches(['[', ']']);
    let ip = if addr.is_empty() {
        None
    } else {
        Some(addr.parse::<IpAddr>().map_err(|_| bad("the address is not an IP address"))?)
    };
    Ok(Spec { prov: Some(prov.to_string()), ip })
}

const ORDER_ALL: u64 = (sys::FI_ORDER_SAW
    | sys::FI_ORDER_SAS
    | sys::FI_ORDER_RAW
    | sys::FI_ORDER_WAW
    | sys::FI_ORDER_WAR
    | sys::FI_ORDER_RAR) as u64;
/// What rmr's ordering rules need: sends after writes and sends (rule 2, rule 1).
const ORDER_NEED: u64 = (sys::FI_ORDER_SAW | sys::FI_ORDER_SAS) as u64;

fn no_device(spec: &Spec, e: &Error) -> Error {
    Error::NoDevice {
        what: format!(
            "libfabric has no FI_EP_MSG interface for provider `{}` at {} ({e}); \
             see `fi_info -t FI_EP_MSG{}`",
            spec.prov.as_deref().unwrap_or("any"),
            spec.ip.map_or("any address".to_string(), |i| i.to_string()),
            spec.prov.as_ref().map_or(String::new(), |p| format!(" -p {p}")),
        ),
    }
}

/// One rail of the libfabric backend.
pub struct OfiIa {
    pub(crate) sh: Arc<IaShared>,
}

impl OfiIa {
    /// Opens an IA from the part of a spec after `ofi:`
    /// (`[<provider>:]<IP>[;option=value...]`, options from
    /// [`crate::KNOBS`]).
    ///
    /// # Errors
    /// [`Error::BadSpec`] for a malformed spec, [`Error::BadSetting`] for
    /// a bad option or `RMR_OFI_*` value, [`Error::NoDevice`] when
    /// libfabric offers no matching FI_EP_MSG provider here.
    pub fn open(rest: &str) -> Result<OfiIa> {
        let (addr, given) = rmr_api::settings::Given::split("ofi", rest, &crate::KNOBS)?;
        OfiIa::with_config(addr, OfiConfig::from_given(&given)?)
    }

    /// Opens an IA on `addr` (`[<provider>:]<IP>`, the spec after `ofi:`
    /// without options) with `cfg` as given.
    ///
    /// # Errors
    /// As [`OfiIa::open`].
    pub fn with_config(addr: &str, cfg: OfiConfig) -> Result<OfiIa> {
        cfg.check()?;
        let spec = parse_spec(addr)?;
        let src = spec.ip.filter(|i| !i.is_unspecified()).map(|i| SocketAddr::new(i, 0));
        let node = src.map(|s| s.ip().to_string());
        let mut hints = Hints {
            prov: spec.prov.clone(),
            caps: (sys::FI_MSG | sys::FI_RMA) as u64,
            mr_mode: (sys::FI_MR_LOCAL
                | sys::FI_MR_VIRT_ADDR
                | sys::FI_MR_ALLOCATED
                | sys::FI_MR_PROV_KEY) as i32,
            msg_order: ORDER_ALL,
            src,
            tx_size: cfg.tx_size,
            rx_size: cfg.rx_size,
        };
        // Ask for every ordering first; a provider without WAR/RAR ordering
        // still serves rmr (BARRIER_FENCE is then done in software).
        let mut probe = Err(Error::invalid("unreached"));
        for order in [ORDER_ALL, ORDER_ALL & !(sys::FI_ORDER_WAR as u64), ORDER_NEED] {
            hints.msg_order = order;
            probe = Info::get(&hints, node.as_deref(), None, node.is_some());
            if probe.is_ok() {
                break;
            }
        }
        let probe = probe.map_err(|e| no_device(&spec, &e))?;
        // Optional capabilities: a provider grants only what is asked for, so
        // ask for each combination, richest first.
        let (a, f) = (sys::FI_ATOMIC as u64, sys::FI_FENCE as u64);
        let mut chosen = None;
        for extra in [a | f, a, f] {
            let mut h2 = hints.clone();
            h2.caps |= extra;
            if let Ok(i) = Info::get(&h2, node.as_deref(), None, node.is_some()) {
                chosen = Some((i, h2));
                break;
            }
        }
        let (info, hints) = chosen.unwrap_or((probe, hints));
        let fabric = Fabric::open(&info)?;
        let feat = features(&info, &cfg);
        // The `sockets` provider's event read races its endpoint close
        // (see `Eq::open`): its queue is read under a gate.
        let eq = Eq::open(&fabric, feat.prov == "sockets")?;
        let default_domain = Domain::open(&fabric, &info)?;
        let ip = if node.is_some() { info.src_addr().map(|a| a.ip()).or(spec.ip) } else { spec.ip };
        let mut caps = Caps::RDMA_READ;
        if feat.cq_data >= 8 {
            caps |= Caps::WRITE_IMM;
        }
        if feat.atomics && !feat.mr_local {
            caps |= Caps::ATOMICS;
        }
        // Providers that acknowledge a delivery-complete send only after the
        // receiver matched it, and break the connection on a truncation.
        // (Not where messages carry rmr's header: its receives have room
        // for a header the message may not carry, so an oversize message
        // fails at the receiver, which breaks the connection.)
        if feat.delivery_complete
            && !feat.eager
            && matches!(feat.prov.as_str(), "tcp" | "net" | "verbs")
        {
            caps |= Caps::OVERRUN_AT_SENDER;
        }
        let attr = IaAttr {
            provider: "ofi".into(),
            address: ip.map_or_else(|| "0.0.0.0".into(), |i| i.to_string()),
            // A message's header rides beside its payload.
            max_msg_size: if feat.eager {
                feat.max_msg.saturating_sub(crate::eager::HDR_MAX as u64)
            } else {
                feat.max_msg
            },
            // A message's header takes a segment of its own.
            max_sges: if feat.eager { feat.iov_limit - 1 } else { feat.iov_limit.max(1) },
            max_dtos: feat.tx_size,
            max_private_data: feat.cm_data - CM_HDR,
            caps,
            link_speed_bps: None,
        };
        let sh = Arc::new(IaShared {
            attr,
            feat,
            hints,
            ip,
            info,
            fabric,
            eq: eq.clone(),
            default_domain,
            default_taken: AtomicBool::new(false),
            eps: Mutex::new(HashMap::new()),
            peps: Mutex::new(HashMap::new()),
        });
        crate::eq::spawn(Arc::downgrade(&sh), eq)?;
        Ok(OfiIa { sh })
    }

    /// The libfabric provider serving this IA (`tcp`, `sockets`, `verbs`...).
    pub fn fi_provider(&self) -> &str {
        &self.sh.feat.prov
    }
}

fn features(info: &Info, cfg: &OfiConfig) -> Features {
    let d = info.domain_attr();
    let mr = d.mr_mode as u64;
    let (tx, rx, ep) = (info.tx_attr(), info.rx_attr(), info.ep_attr());
    let prov = info.prov_name();
    let cm_data = match prov.as_str() {
        "tcp" | "sockets" | "net" => 256,
        _ => 56,
    };
    let pump = cfg.progress_thread.unwrap_or(matches!(prov.as_str(), "tcp" | "net" | "udp"));
    let iov_limit = tx.iov_limit.min(rx.iov_limit).min(tx.rma_iov_limit.max(1)).clamp(1, 16);
    // Messages carry a header (see `crate::eager`): named in remote CQ
    // data, in a segment of its own, in memory the provider needs no
    // registration for.
    // The `sockets` provider reports some messages without their remote
    // CQ data under load (the in-order conformance case saw it): there
    // messages carry no header.
    let eager = d.cq_data_size >= 8
        && iov_limit >= 2
        && mr & (sys::FI_MR_LOCAL as u64) == 0
        && prov != "sockets";
    Features {
        mr_local: mr & (sys::FI_MR_LOCAL as u64) != 0,
        virt_addr: mr & (sys::FI_MR_VIRT_ADDR as u64) != 0,
        prov_key: mr & (sys::FI_MR_PROV_KEY as u64) != 0,
        key_size: d.mr_key_size.clamp(1, 8),
        atomics: info.caps() & sys::FI_ATOMIC as u64 != 0,
        fence: info.caps() & sys::FI_FENCE as u64 != 0,
        cq_data: d.cq_data_size,
        tx_size: tx.size.clamp(16, 1 << 16),
        rx_size: rx.size.clamp(16, 1 << 16),
        iov_limit,
        max_msg: (ep.max_msg_size as u64).min(1 << 30),
        msg_order: tx.msg_order,
        cm_data: cfg.cm_data.unwrap_or(cm_data),
        delivery_complete: cfg.delivery_complete,
        bounce_max: cfg.bounce_max,
        cq_size: cfg.cq_size,
        pump,
        // libfabric 1.17's `tcp` looks at a CQ's poll set in each progress
        // pass; its successor (1.18's `xnet`) at a set of its own.
        poll_set: cfg.poll_set.unwrap_or(prov == "tcp" && crate::libfabric_version() < (1, 18)),
        // Only where progress threads send what a lone write left corked.
        cork_max: if prov == "tcp" && pump { cfg.cork_max } else { 0 },
        eager,
        eager_max: if eager { cfg.eager_max } else { 0 },
        // Held writes are sent by corking's triggers.
        hold: eager && prov == "tcp" && pump && cfg.cork_max > 0 && cfg.eager_max > 0,
        prov,
    }
}

pub(crate) fn ofi_evd(
    evd: &Arc<dyn Evd>,
    ia: &Arc<IaShared>,
) -> Result<Arc<crate::evd::EvdShared>> {
    let e = evd
        .as_any()
        .downcast_ref::<OfiEvd>()
        .ok_or_else(|| Error::invalid("the ofi backend needs EVDs created by an ofi IA"))?;
    if !Arc::ptr_eq(&e.sh.fabric, &ia.fabric) {
        return Err(Error::invalid("EVD of another ofi IA"));
    }
    Ok(e.sh.clone())
}

impl Ia for OfiIa {
    fn attr(&self) -> &IaAttr {
        &self.sh.attr
    }

    fn create_pz(&self) -> Result<Arc<dyn Pz>> {
        Ok(Arc::new(OfiPz { sh: PzShared::new(&self.sh)? }))
    }

    fn create_evd(&self) -> Result<Arc<dyn Evd>> {
        Ok(Arc::new(OfiEvd::new(&self.sh)?))
    }

    fn create_ep(&self, pz: &Arc<dyn Pz>, evds: &EpEvds) -> Result<Arc<dyn rmr_api::Ep>> {
        let pz = pz
            .as_any()
            .downcast_ref::<OfiPz>()
            .ok_or_else(|| Error::invalid("PZ of another provider"))?;
        if !Arc::ptr_eq(&pz.sh.ia, &self.sh) {
            return Err(Error::invalid("PZ of another IA"));
        }
        let req = ofi_evd(&evds.request, &self.sh)?;
        let rcv = ofi_evd(&evds.recv, &self.sh)?;
        ofi_evd(&evds.conn, &self.sh)?;
        Ok(Arc::new(OfiEp { sh: EpShared::new(&self.sh, &pz.sh, evds.clone(), req, rcv)? }))
    }

    fn create_psp(&self, service: u16, evd: &Arc<dyn Evd>) -> Result<Arc<dyn Psp>> {
        ofi_evd(evd, &self.sh)?;
        Ok(Arc::new(OfiPsp::listen(&self.sh, service, evd.clone())?))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        let s = |p: Option<&str>, ip: Option<&str>| Spec {
            prov: p.map(Into::into),
            ip: ip.map(|i| i.parse().unwrap()),
        };
        assert_eq!(parse_spec("tcp:127.0.0.1").unwrap(), s(Some("tcp"), Some("127.0.0.1")));
        assert_eq!(
            parse_spec("sockets:198.18.0.1").unwrap(),
            s(Some("sockets"), Some("198.18.0.1"))
        );
        assert_eq!(parse_spec("127.0.0.1").unwrap(), s(None, Some("127.0.0.1")));
        assert_eq!(parse_spec("::1").unwrap(), s(None, Some("::1")));
        assert_eq!(parse_spec("tcp:[::1]").unwrap(), s(Some("tcp"), Some("::1")));
        assert_eq!(parse_spec("verbs").unwrap(), s(Some("verbs"), None));
        assert_eq!(parse_spec("").unwrap(), s(None, None));
        assert!(matches!(parse_spec("tcp:nohost"), Err(Error::BadSpec { .. })));
        assert!(matches!(parse_spec("t cp:1.2.3.4"), Err(Error::BadSpec { .. })));
    }
}
