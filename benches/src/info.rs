//! `rmr-bench info [SPEC...]`: every setting an IA of each spec would open
//! with, its value and where it came from (the spec's options, the
//! environment or the default), as `ucx_info -c` and `fi_info -e` print
//! theirs. Nothing is opened, so a backend's settings list on a machine
//! without its hardware. A value that does not parse is reported, and the
//! command fails.

/// The specs listed when none is given: one of each provider.
const DEFAULT_SPECS: [&str; 5] = [
    "tcp:127.0.0.1",
    "multirail:tcp:127.0.0.1,tcp:127.0.0.2",
    "ofi:tcp:127.0.0.1",
    "verbs:mlx5_0",
    "zipper:tcp:127.0.0.1@127.0.0.1:7700",
];

/// Arguments of `rmr-bench info`.
#[derive(clap::Args, Debug)]
pub(crate) struct InfoArgs {
    /// IA specs, options included (`'tcp:127.0.0.1;batch=0'`); one of
    /// each provider when none is given.
    specs: Vec<String>,
}

/// Runs `rmr-bench info`.
pub(crate) fn run(a: &InfoArgs) {
    crate::register();
    backend_verbs::register();
    zipper_bridge::register();
    let specs: Vec<&str> = if a.specs.is_empty() {
        DEFAULT_SPECS.to_vec()
    } else {
        a.specs.iter().map(String::as_str).collect()
    };
    println!("{:<26} {:<18} {:<20} {:<8} meaning", "setting", "option", "value", "source");
    let mut ok = true;
    for spec in specs {
        println!("# {spec}");
        match rmr_api::settings_for(spec) {
            Ok(list) => {
                for x in list {
                    let option = if x.option.is_empty() { "-" } else { x.option };
                    println!(
                        "{:<26} {:<18} {:<20} {:<8} {}",
                        x.name, option, x.value, x.source, x.doc
                    );
                }
            }
            Err(e) => {
                println!("error: {e}");
                ok = false;
            }
        }
    }
    if !ok {
        std::process::exit(2);
    }
}
