//! With the `pmix` feature: finds libpmix with pkg-config and generates the
//! client bindings with bindgen. Without it: nothing.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "pmix")]
    pmix::generate();
}

#[cfg(feature = "pmix")]
mod pmix {
    use std::path::PathBuf;

    pub(crate) fn generate() {
        println!("cargo:rerun-if-changed=csrc/wrapper.h");
        println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
        let lib = match pkg_config::Config::new().atleast_version("4").probe("pmix") {
            Ok(lib) => lib,
            Err(e) => panic!(
                "rmr-boot: the `pmix` feature needs libpmix >= 4, not found by pkg-config ({e}).\n\
                 Install it (Debian/Ubuntu: `apt-get install libpmix-dev`, or run scripts/setup.sh), \
                 or build without the `pmix` feature (the TCP rendezvous needs nothing)."
            ),
        };
        let mut b = bindgen::Builder::default()
            .header("csrc/wrapper.h")
            .allowlist_function(
                "PMIx_(Init|Finalize|Initialized|Put|Commit|Fence|Get|Error_string|Value_load|Value_destruct|Info_load|Info_destruct|Abort)",
            )
            .allowlist_type("pmix_(proc|value|info|byte_object|status|data_type|rank|scope|nspace)_t")
            .allowlist_var("PMIX_(SUCCESS|GLOBAL|BYTE_OBJECT|STRING|BOOL|UINT16|UINT32|INT|ERR_NOT_FOUND|MAX_NSLEN|MAX_KEYLEN)")
            .derive_default(true)
            .derive_debug(false)
            .layout_tests(false)
            .generate_comments(false)
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
        for p in &lib.include_paths {
            b = b.clang_arg(format!("-I{}", p.display()));
        }
        let bindings = b.generate().expect("rmr-boot: bindgen failed on <pmix.h>");
        let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
        bindings.write_to_file(out.join("pmix_bindings.rs")).expect("write pmix_bindings.rs");
    }
}
