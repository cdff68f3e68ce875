//! The provider registry: backends register by name and open from spec
//! strings such as `tcp:127.0.0.1`, `ofi:tcp:198.18.0.1` or `verbs:mlx5_0:1`.

use crate::error::{Error, Result};
use crate::ia::Ia;
use crate::settings::Setting;
use std::sync::{Arc, RwLock};

/// A backend, registered by name.
pub trait Provider: Send + Sync {
    /// The name used as the spec prefix (`tcp`, `ofi`, `verbs`, `multirail`).
    fn name(&self) -> &'static str;
    /// One line saying what it is and what it needs.
    fn describe(&self) -> &'static str;
    /// Opens an IA from the part of the spec after `name:`.
    ///
    /// # Errors
    /// [`Error::BadSpec`] for a malformed spec; [`Error::NoDevice`] when the
    /// backend cannot run on this machine (with what is missing).
    fn open(&self, rest: &str) -> Result<Arc<dyn Ia>>;

    /// Every setting an IA of the spec `name:rest` would open with, its
    /// value and where it came from (the spec's options, the environment
    /// or the default), checked as `open` checks them; nothing is opened.
    /// The default lists none.
    ///
    /// # Errors
    /// As [`Provider::open`] for a bad option or value.
    fn settings(&self, rest: &str) -> Result<Vec<Setting>> {
        let _ = rest;
        Ok(Vec::new())
    }
}

static REGISTRY: RwLock<Vec<Arc<dyn Provider>>> = RwLock::new(Vec::new());

/// Registers a provider (a later registration of the same name replaces the earlier).
pub fn register(p: Arc<dyn Provider>) {
    let mut r = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    r.retain(|q| q.name() != p.name());
    r.push(p);
}

/// Names of the registered providers.
pub fn providers() -> Vec<&'static str> {
    REGISTRY.read().unwrap_or_else(|e| e.into_inner()).iter().map(|p| p.name()).collect()
}

/// Looks up a provider by name.
pub fn provider(name: &str) -> Option<Arc<dyn Provider>> {
    REGISTRY.read().unwrap_or_else(|e| e.into_inner()).iter().find(|p| p.name() == name).cloned()
}

/// Splits `name:rest`.
///
/// # Errors
/// [`Error::BadSpec`] when there is no `:` or the name is empty.
pub fn split_spec(spec: &str) -> Result<(&str, &str)> {
    match spec.split_once(':') {
        Some((n, rest)) if !n.is_empty() => Ok((n, rest)),
        _ => Err(Error::BadSpec {
            spec: spec.into(),
            why: "expected `provider:address`, e.g. `tcp:127.0.0.1`".into(),
        }),
    }
}

/// The settings an IA of `spec` would open with ([`Provider::settings`]),
/// what `rmr-bench info` prints, as `ucx_info -c` does.
///
/// # Errors
/// [`open`]'s for an unknown provider, a bad option or a bad value.
pub fn settings_for(spec: &str) -> Result<Vec<Setting>> {
    let (name, rest) = split_spec(spec)?;
    with_provider(name, |p| p.settings(rest))
}

/// Runs `f` on the provider `name`.
fn with_provider<T>(name: &str, f: impl FnOnce(&dyn Provider) -> Result<T>) -> Result<T> {
    match provider(name) {
        Some(p) => f(&*p),
        None => Err(Error::UnknownProvider {
            name: name.into(),
            known: {
                let k = providers();
                if k.is_empty() { "none; call a backend's register()".into() } else { k.join(", ") }
            },
        }),
    }
}

/// Opens an IA from a spec string through the registry.
///
/// # Errors
/// [`Error::UnknownProvider`] (listing the registered ones), or the provider's own errors.
pub fn open(spec: &str) -> Result<Arc<dyn Ia>> {
    let (name, rest) = split_spec(spec)?;
    with_provider(name, |p| p.open(rest))
}
