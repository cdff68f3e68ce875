//! A backend's settings, checked, from one place: each tunable is a
//! [`Knob`] — a spec option (`tcp:127.0.0.1;batch=0`) over an environment
//! variable (`RMR_TCP_BATCH=0`) over the default — read through [`Given`].
//! A value that does not parse, or is out of range, is an
//! [`Error::BadSetting`] naming the option or variable, the value and what
//! is accepted — never a silent default — and every setting in effect can
//! be listed with where it came from ([`Setting`], what `rmr-bench info`
//! prints). [`config_builder!`](crate::config_builder) gives each config
//! struct its builder.
//!
//! Options follow the first `;` of a spec and belong to the provider
//! named first: in `multirail:tcp:10.0.0.1,tcp:10.0.1.1;engine=inline`
//! they are multirail's, and the rails take their settings from the
//! environment.

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
    /// [`Source::Env`] when `var` is set (to something), else
    /// [`Source::Default`].
    pub fn of_env(var: &str) -> Source {
        // As `env_setting` reads it: an empty value is no setting.
        let set = std::env::var_os(var).is_some_and(|v| !v.to_string_lossy().trim().is_empty());
        if set { Source::Env } else { Source::Default }
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
    /// The environment variable that sets its default.
    pub name: &'static str,
    /// The spec option that sets it (over the variable).
    pub option: &'static str,
    /// Its value, as it would be written.
    pub value: String,
    /// Where the value came from.
    pub source: Source,
    /// What it does.
    pub doc: &'static str,
}

/// One tunable: the spec option that sets it, the environment variable
/// that sets it when the spec does not, and what it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Knob {
    /// The spec option (`batch` in `tcp:127.0.0.1;batch=0`).
    pub option: &'static str,
    /// The environment variable (`RMR_TCP_BATCH`).
    pub var: &'static str,
    /// What it does, with its unit.
    pub doc: &'static str,
}

/// The values given for a provider's knobs: the `option=value` pairs of
/// its spec, over the environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Given {
    options: Vec<(String, String)>,
}

impl Given {
    /// No spec options: the environment and the defaults.
    pub fn env() -> Given {
        Given::default()
    }

    /// Splits `rest` (a spec after `<provider>:`) at its first `;` into
    /// the address part and the options after it, each `option=value` and
    /// one of `knobs`.
    ///
    /// # Errors
    /// [`Error::BadSpec`] for an option that is not `key=value` or that
    /// `knobs` does not name (the message lists them).
    pub fn split<'a>(provider: &str, rest: &'a str, knobs: &[Knob]) -> Result<(&'a str, Given)> {
        Given::split_after(provider, rest, 0, knobs)
    }

    /// [`Given::split`], with the options starting at the first `;` at or
    /// after byte `from` of `rest`: for a provider whose address part may
    /// hold another spec with options of its own (zipper's rail, before
    /// its `@`).
    ///
    /// # Errors
    /// As [`Given::split`].
    pub fn split_after<'a>(
        provider: &str,
        rest: &'a str,
        from: usize,
        knobs: &[Knob],
    ) -> Result<(&'a str, Given)> {
        let cut = rest.get(from..).and_then(|t| t.find(';')).map(|i| from + i);
        let (head, opts) = match cut {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let bad = |why: String| Error::BadSpec { spec: format!("{provider}:{rest}"), why };
        let mut options = Vec::new();
        for opt in opts.split(';').map(str::trim).filter(|o| !o.is_empty()) {
            let (k, v) = opt
                .split_once('=')
                .ok_or_else(|| bad(format!("option `{opt}` is not key=value")))?;
            let k = k.trim();
            if !knobs.iter().any(|n| n.option == k) {
                let known: Vec<&str> = knobs.iter().map(|n| n.option).collect();
                return Err(bad(format!(
                    "unknown {provider} option `{k}` (options: {})",
                    known.join(", ")
                )));
            }
            options.push((k.to_string(), v.trim().to_string()));
        }
        Ok((head.trim(), Given { options }))
    }

    /// The spec's value for `knob`, if the spec gave one (the last wins).
    fn option(&self, knob: &Knob) -> Option<&str> {
        self.options.iter().rev().find(|(k, _)| k == knob.option).map(|(_, v)| v.as_str())
    }

    /// `knob`'s value: the spec option's when given, else the variable's,
    /// parsed by `parse`; `None` when neither is set.
    ///
    /// # Errors
    /// [`Error::BadSetting`] naming the option or the variable, the value
    /// and `parse`'s explanation of what is accepted.
    pub fn get<T>(
        &self,
        knob: &Knob,
        parse: impl Fn(&str) -> std::result::Result<T, String>,
    ) -> Result<Option<T>> {
        match self.option(knob) {
            Some(v) => parse(v).map(Some).map_err(|accepted| Error::BadSetting {
                var: format!("spec option `{}`", knob.option),
                value: v.into(),
                accepted,
            }),
            None => env_setting(knob.var, parse),
        }
    }

    /// Where `knob`'s value comes from.
    pub fn source(&self, knob: &Knob) -> Source {
        if self.option(knob).is_some() { Source::Spec } else { Source::of_env(knob.var) }
    }

    /// The settings in effect: each of `knobs` with its value (in the
    /// same order) and source.
    pub fn listed(&self, knobs: &[Knob], values: impl IntoIterator<Item = String>) -> Vec<Setting> {
        knobs
            .iter()
            .zip(values)
            .map(|(k, value)| Setting {
                name: k.var,
                option: k.option,
                value,
                source: self.source(k),
                doc: k.doc,
            })
            .collect()
    }
}

/// Gives a config struct (`Default + Clone`, with a
/// `fn check(&self) -> rmr_api::Result<()>`) a builder: `Config::builder()`
/// starts from the defaults, one setter per named field, and `build()`
/// returns the config once `check` accepts it.
///
/// ```
/// # use rmr_api::config_builder;
/// #[derive(Clone, Debug, Default)]
/// pub struct Demo { pub depth: u32 }
/// impl Demo {
///     fn check(&self) -> rmr_api::Result<()> {
///         rmr_api::settings::check_within("depth", self.depth.into(), 1, 64)
///     }
/// }
/// config_builder!(
///     /// Builds a [`Demo`].
///     DemoBuilder for Demo { depth: u32 }
/// );
/// assert_eq!(Demo::builder().depth(8).build().unwrap().depth, 8);
/// assert!(Demo::builder().depth(0).build().is_err());
/// ```
#[macro_export]
macro_rules! config_builder {
    ($(#[$doc:meta])* $builder:ident for $cfg:ident { $($field:ident: $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default)]
        pub struct $builder($cfg);

        impl $cfg {
            /// A builder starting from the defaults (not the environment).
            pub fn builder() -> $builder {
                $builder($cfg::default())
            }
        }

        impl From<$cfg> for $builder {
            fn from(c: $cfg) -> $builder {
                $builder(c)
            }
        }

        impl $builder {
            $(
                #[doc = concat!("Sets [`", stringify!($cfg), "::", stringify!($field), "`].")]
                #[must_use]
                pub fn $field(mut self, v: $ty) -> Self {
                    self.0.$field = v;
                    self
                }
            )*

            /// The config, once its values are checked.
            ///
            /// # Errors
            /// [`Error::BadSetting`]($crate::Error::BadSetting) naming a
            /// value out of its range.
            pub fn build(self) -> $crate::Result<$cfg> {
                self.0.check()?;
                Ok(self.0)
            }
        }
    };
}

/// An [`Error::BadSetting`] unless `lo <= value <= hi` (what a config's
/// `check` says of a field; `name` names it).
///
/// # Errors
/// [`Error::BadSetting`].
pub fn check_within(name: &str, value: u64, lo: u64, hi: u64) -> Result<()> {
    within(lo, hi)(&value.to_string()).map(|_| ()).map_err(|accepted| Error::BadSetting {
        var: name.into(),
        value: value.to_string(),
        accepted,
    })
}

/// A whole number from `lo` to `hi` (a `parse` for [`Given::get`]).
pub fn within(lo: u64, hi: u64) -> impl Fn(&str) -> std::result::Result<u64, String> {
    move |v| {
        number(v).and_then(|n| {
            if (lo..=hi).contains(&n) {
                Ok(n)
            } else {
                Err(format!("expected a whole number from {lo} to {hi}"))
            }
        })
    }
}

/// A byte count with an optional `K`, `M` or `G` suffix (powers of two;
/// a `parse` for [`Given::get`]).
///
/// # Errors
/// The explanation [`Given::get`] puts in its error.
pub fn size(s: &str) -> std::result::Result<u64, String> {
    let s = s.trim();
    let (num, shift) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("bad size `{s}` (e.g. 8, 4K, 1M)"))
}

/// Milliseconds as a [`Duration`](std::time::Duration) (a `parse` for
/// [`Given::get`]).
///
/// # Errors
/// The explanation [`Given::get`] puts in its error.
pub fn millis(v: &str) -> std::result::Result<std::time::Duration, String> {
    number(v).map(std::time::Duration::from_millis)
}

/// Microseconds as a [`Duration`](std::time::Duration) (a `parse` for
/// [`Given::get`]).
///
/// # Errors
/// The explanation [`Given::get`] puts in its error.
pub fn micros(v: &str) -> std::result::Result<std::time::Duration, String> {
    number(v).map(std::time::Duration::from_micros)
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
        assert!(matches!(env_setting("RMR_TEST_UNSET_VARIABLE", number), Ok(None)));
        assert_eq!(size("4K"), Ok(4096));
        assert!(size("12Q").is_err());
        assert!(size("99999999999G").is_err(), "an overflow is refused");
        assert_eq!(within(1, 8)("8"), Ok(8));
        assert!(within(1, 8)("9").unwrap_err().contains("1 to 8"));
    }

    const KNOBS: [Knob; 2] = [
        Knob { option: "depth", var: "RMR_TEST_UNSET_DEPTH", doc: "a depth" },
        Knob { option: "mode", var: "RMR_TEST_UNSET_MODE", doc: "a mode" },
    ];

    #[test]
    fn spec_options_come_after_the_first_semicolon_and_name_their_source() {
        let (head, g) = Given::split("demo", "10.0.0.1;depth=8; mode = fast", &KNOBS).unwrap();
        assert_eq!(head, "10.0.0.1");
        assert_eq!(g.get(&KNOBS[0], number).unwrap(), Some(8));
        assert_eq!(
            g.get(&KNOBS[1], |v| Ok::<_, String>(v.to_string())).unwrap(),
            Some("fast".into())
        );
        assert_eq!(g.source(&KNOBS[0]), Source::Spec);
        let listed = g.listed(&KNOBS, ["8".to_string(), "fast".to_string()]);
        assert_eq!((listed[1].option, listed[1].source), ("mode", Source::Spec));
        // Nothing given: the variable (unset here), so no value and the default.
        let (_, none) = Given::split("demo", "10.0.0.1", &KNOBS).unwrap();
        assert_eq!(none, Given::env());
        assert_eq!(none.get(&KNOBS[0], number).unwrap(), None);
        assert_eq!(none.source(&KNOBS[0]), Source::Default);
    }

    #[test]
    fn options_may_start_after_an_inner_specs_own() {
        let rest = "multirail:tcp:a,tcp:b;engine=inline@10.0.0.2:7700;depth=4";
        let (head, g) = Given::split_after("demo", rest, rest.rfind('@').unwrap(), &KNOBS).unwrap();
        assert_eq!(head, "multirail:tcp:a,tcp:b;engine=inline@10.0.0.2:7700");
        assert_eq!(g.get(&KNOBS[0], number).unwrap(), Some(4));
    }

    #[test]
    fn bad_options_are_typed_errors_naming_them() {
        let e = Given::split("demo", "x;colour=red", &KNOBS).unwrap_err();
        assert!(
            matches!(&e, Error::BadSpec { why, .. } if why.contains("colour") && why.contains("depth, mode")),
            "{e}"
        );
        assert!(matches!(Given::split("demo", "x;depth", &KNOBS), Err(Error::BadSpec { .. })));
        let (_, g) = Given::split("demo", "x;depth=12Q", &KNOBS).unwrap();
        let e = g.get(&KNOBS[0], within(1, 64)).unwrap_err();
        assert!(
            matches!(&e, Error::BadSetting { var, value, .. } if var.contains("depth") && value == "12Q"),
            "{e}"
        );
        assert!(matches!(check_within("depth", 0, 1, 64), Err(Error::BadSetting { .. })));
    }
}
