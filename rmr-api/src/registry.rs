//! The provider registry: backends register by name and open from spec
//! strings such as `tcp:127.0.0.1`, `ofi:tcp:198.18.0.1` or `verbs:mlx5_0:1`.

use crate::error::{Error, Result};
use crate::ia::Ia;
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

/// Opens an IA from a spec string through the registry.
///
/// # Errors
/// [`Error::UnknownProvider`] (listing the registered ones), or the provider's own errors.
pub fn open(spec: &str) -> Result<Arc<dyn Ia>> {
    let (name, rest) = split_spec(spec)?;
    match provider(name) {
        Some(p) => p.open(rest),
        None => Err(Error::UnknownProvider {
            name: name.into(),
            known: {
                let k = providers();
                if k.is_empty() { "none; call a backend's register()".into() } else { k.join(", ") }
            },
        }),
    }
}
