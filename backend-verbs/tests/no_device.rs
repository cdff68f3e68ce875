//! Opening the backend where it cannot run is a typed `NoDevice` error that
//! says what is missing, never a panic.

use rmr_api::Error;

fn no_device(spec: &str) -> String {
    match rmr_api::open(spec) {
        Err(Error::NoDevice { what }) => {
            assert!(!what.is_empty());
            what
        }
        Err(e) => panic!("{spec}: expected a NoDevice error, got {e:?}"),
        Ok(_) => panic!("{spec}: opened a device that does not exist"),
    }
}

#[test]
fn a_missing_device_is_a_typed_error() {
    backend_verbs::register();
    // No machine has this device: with devices it is "no device named ...",
    // without any it is what the machine lacks.
    let what = no_device("verbs:nosuchhca9:1");
    match backend_verbs::devices() {
        Ok(devs) => assert!(what.contains("nosuchhca9") && what.contains(&devs[0]), "{what}"),
        Err(Error::NoDevice { what: why }) => assert_eq!(what, why),
        Err(e) => panic!("devices(): expected NoDevice, got {e:?}"),
    }
}

#[test]
fn without_rdma_every_spec_form_says_what_is_missing() {
    backend_verbs::register();
    let missing = match backend_verbs::devices() {
        Ok(devs) => {
            println!(
                "SKIPPED: this machine has RDMA devices {devs:?}; no-device path not exercised"
            );
            return;
        }
        Err(Error::NoDevice { what }) => what,
        Err(e) => panic!("expected NoDevice, got {e:?}"),
    };
    assert!(missing.contains("RDMA"), "{missing}");
    println!("no device here: {missing}");
    for spec in ["verbs:mlx5_0:1", "verbs:mlx5_0", "verbs:198.18.0.1", "verbs:fe80::1"] {
        assert_eq!(no_device(spec), missing, "{spec}");
    }
    assert!(matches!(backend_verbs::discover(), Err(Error::NoDevice { .. })));
    let shown = rmr_api::open("verbs:mlx5_0:1").err().unwrap().to_string();
    assert!(shown.starts_with("no device: "), "{shown}");
}

#[test]
fn malformed_specs_are_bad_specs_before_any_device_lookup() {
    backend_verbs::register();
    for spec in ["verbs:", "verbs:mlx5_0:0", "verbs:mlx5_0:port"] {
        assert!(matches!(rmr_api::open(spec), Err(Error::BadSpec { .. })), "{spec}");
    }
    assert_eq!(rmr_api::provider::provider("verbs").map(|p| p.name()), Some("verbs"));
}
