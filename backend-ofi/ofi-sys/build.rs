//! Finds libfabric with pkg-config, generates the bindings with bindgen and
//! compiles the C shim that exports libfabric's `static inline` calls.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=csrc/shim.c");
    println!("cargo:rerun-if-changed=csrc/shim.h");
    println!("cargo:rerun-if-changed=csrc/wrapper.h");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let lib = match pkg_config::Config::new().atleast_version("1.17").probe("libfabric") {
        Ok(lib) => lib,
        Err(e) => panic!(
            "ofi-sys: libfabric >= 1.17 not found by pkg-config ({e}).\n\
             Install the development package (Debian/Ubuntu: `apt-get install libfabric-dev`, \
             or run scripts/setup.sh), or point PKG_CONFIG_PATH at libfabric.pc."
        ),
    };

    let mut cc = cc::Build::new();
    cc.file("csrc/shim.c")
        .include("csrc")
        .warnings(true)
        .flag_if_supported("-Wno-deprecated-declarations");
    for p in &lib.include_paths {
        cc.include(p);
    }
    cc.compile("rmr_ofi_shim");

    let mut b = bindgen::Builder::default()
        .header("csrc/wrapper.h")
        .clang_arg("-Icsrc")
        .allowlist_function("fi_(getinfo|freeinfo|dupinfo|fabric|strerror|tostr|version)")
        .allowlist_function("rfi_.*")
        .allowlist_type("fi_.*|fid.*")
        .allowlist_var("FI_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(false)
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for p in &lib.include_paths {
        b = b.clang_arg(format!("-I{}", p.display()));
    }
    let bindings = b.generate().expect("ofi-sys: bindgen failed on the libfabric headers");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    bindings.write_to_file(out.join("bindings.rs")).expect("ofi-sys: write bindings.rs");
}
