//! The TCP backend's 56-byte header codec (`Header::decode/validate`) and
//! the RMR context a peer sends in private data (`RmrContext::from_bytes`).
#![no_main]

use backend_tcp::wire::{HDR, Header, MAGIC, MAX_PAYLOAD, MAX_PRIVATE, Op};
use libfuzzer_sys::fuzz_target;
use rmr_api::RmrContext;

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = RmrContext::from_bytes(data) {
        assert!(!c.keys().is_empty());
        assert_eq!(RmrContext::from_bytes(&c.to_bytes()).unwrap(), c);
    }
    if data.len() < HDR {
        return;
    }
    let b: &[u8; HDR] = data[..HDR].try_into().unwrap();
    let h = Header::decode(b);
    assert_eq!(&h.encode(), b, "decode/encode is not the identity");
    if let Ok(op) = h.validate() {
        assert_eq!(op as u8, h.op);
        assert!(u64::from(h.len) <= MAX_PAYLOAD);
        match op {
            Op::ConnReq | Op::ConnAccept | Op::ConnReject => {
                assert!(h.len as usize <= MAX_PRIVATE)
            }
            Op::Send | Op::Write | Op::WriteImm | Op::ReadResp => {}
            _ => assert_eq!(h.len, 0, "{op:?} may not carry a payload"),
        }
        if op == Op::ConnReq {
            assert_eq!(h.arg0, MAGIC);
        }
    }
});
