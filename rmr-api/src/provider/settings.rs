//! A backend's settings from the environment, checked: a variable set to
//! a value that does not parse is an [`Error::BadSetting`] naming it, the
//! value and what is accepted — never a silent default — and every
//! setting in effect can be listed with where it came from ([`Setting`],
//! what `rmr-bench info` prints).

use crate::error::{Error, Result};

/// Where a setting's value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Nothing set it.
    Default,
    /// The IA's spec string.
    Spec,
    /// An environment variable.
    Env,
}

impl Source {
    /// [`Source::Env`] when `var` is set, else [`Source::Default`].
    pub fn of_env(var: &str) -> Source {
        if std::env::var_os(var).is_some() { Source::Env } else { Source::Default }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            Source::Default => "default",
            Source::Spec => "spec",
            Source::Env => "env",
        })
    }
}

/// One setting in effect.
#[derive(Clone, Debug)]
pub struct Setting {
    /// The environment variable (or spec option) that sets it.
    pub name: &'static str,
    /// Its value, as it would be written.
    pub value: String,
    /// Where the value came from.
    pub source: Source,
    /// What it does.
    pub doc: &'static str,
}

/// Reads `var` from the environment: `None` when unset (or empty),
/// `Some` with `parse`'s value, or an [`Error::BadSetting`] naming the
/// variable, the value and `parse`'s explanation of what is accepted.
///
/// # Errors
/// [`Error::BadSetting`] for a value `parse` refuses.
pub fn env_setting<T>(
    var: &'static str,
    parse: impl Fn(&str) -> std::result::Result<T, String>,
) -> Result<Option<T>> {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => parse(v.trim())
            .map(Some)
            .map_err(|accepted| Error::BadSetting { var: var.into(), value: v, accepted }),
        Ok(_) | Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(Error::BadSetting {
            var: var.into(),
            value: v.to_string_lossy().into_owned(),
            accepted: "expected a UTF-8 value".into(),
        }),
    }
}

/// A whole number (`parse` for [`env_setting`]).
///
/// # Errors
/// The explanation [`env_setting`] puts in its error.
pub fn number(v: &str) -> std::result::Result<u64, String> {
    v.parse().map_err(|_| "expected a whole number".to_string())
}

/// `0`/`1` (also `false`/`true`, `off`/`on`; `parse` for [`env_setting`]).
///
/// # Errors
/// The explanation [`env_setting`] puts in its error.
pub fn switch(v: &str) -> std::result::Result<bool, String> {
    match v {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" => Ok(false),
        _ => Err("expected 0 or 1 (also off/on, false/true)".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_or_name_what_is_accepted() {
        assert_eq!(number("42"), Ok(42));
        assert!(number("12Q").is_err());
        assert_eq!(switch("off"), Ok(false));
        assert!(switch("maybe").unwrap_err().contains("0 or 1"));
        // An unset variable is no setting.
        assert!(matches!(env_setting("RMR_SETTINGS_TEST_UNSET_VARIABLE", number), Ok(None)));
    }
}
