//! `rmr-bench info`: every setting in effect, its value and where it came
//! from (default or environment), as `ucx_info -c` and `fi_info -e` print
//! theirs. A value that does not parse is reported, and the command fails.

use multirail::MrConfig;
use rmr_api::provider::settings::Setting;

fn print(what: &str, s: rmr_api::Result<Vec<Setting>>) -> bool {
    println!("# {what}");
    match s {
        Ok(list) => {
            for x in list {
                println!("{:<26} {:<18} {:<8} {}", x.name, x.value, x.source, x.doc);
            }
            true
        }
        Err(e) => {
            println!("error: {e}");
            false
        }
    }
}

/// Runs `rmr-bench info`.
pub(crate) fn run() {
    println!("{:<26} {:<18} {:<8} meaning", "setting", "value", "source");
    let ok = print("tcp backend (tcp:<IP>) and software EVDs", backend_tcp::TcpConfig::settings())
        & print(
            "multirail (multirail:<rail>,<rail>[;option=value]; spec options override these)",
            MrConfig::settings(),
        );
    if !ok {
        std::process::exit(2);
    }
}
