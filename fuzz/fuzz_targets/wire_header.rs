//! The TCP backend's header codecs: the handshake's 56-byte header
//! (`Header::decode/validate`), the live stream's compact one
//! (`decode_data`/`Header::encode_data`), and the RMR context a peer sends
//! in private data (`RmrContext::from_bytes`).
#![no_main]

use backend_tcp::wire::{
    F_ACK, HDR, Header, MAGIC, MAX_PAYLOAD, MAX_PRIVATE, MIN_HDR, Op, WireError, decode_data,
};
use libfuzzer_sys::fuzz_target;
use rmr_api::RmrContext;

fn check_valid(h: &Header) {
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
}

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = RmrContext::from_bytes(data) {
        assert!(!c.keys().is_empty());
        assert_eq!(RmrContext::from_bytes(&c.to_bytes()).unwrap(), c);
    }
    // The live stream: a run of headers decoded one after the other, as the
    // reader does; each one encodes back to the bytes it came from.
    let (mut at, mut expect, mut ack) = (0usize, 1u64, 0u64);
    loop {
        let before = ack;
        match decode_data(&data[at..], expect, &mut ack) {
            Ok(None) => {
                assert_eq!(ack, before, "a short header changes nothing");
                break;
            }
            Err(WireError::BadOp(o)) => {
                assert_eq!(o, data[at]);
                break;
            }
            Err(e) => panic!("decode_data only reports a bad op, not {e}"),
            Ok(Some((h, n))) => {
                assert!((MIN_HDR..=HDR).contains(&n));
                // Encoded again after the same stream (the sender's last
                // ack is the one before this frame): the same bytes, but
                // for an ack that is no news (dropped) or one an ack or
                // disconnect frame must carry (added).
                let carried = data[at + 1] & F_ACK != 0;
                let forced = h.op == Op::Ack as u8 || h.op == Op::Disconnect as u8;
                let (mut last, mut out) = (before, [0u8; HDR]);
                let m = h.encode_data(&mut last, &mut out);
                assert_eq!(last, h.ack);
                if carried && h.ack == before && !forced {
                    assert_eq!(m + 8, n);
                } else if !carried && forced {
                    assert_eq!(m, n + 8);
                } else {
                    assert_eq!(&out[..m], &data[at..at + n], "decode/encode is not the identity");
                }
                // Whatever it dropped or added, what it wrote decodes to the
                // same header at the same point of the stream.
                let mut seen = before;
                assert_eq!(decode_data(&out[..m], expect, &mut seen), Ok(Some((h, m))));
                assert_eq!(seen, h.ack);
                check_valid(&h);
                // A request's sequence number: the count's high bits, its
                // own low 16.
                if [Op::Send, Op::Write, Op::WriteImm, Op::ReadReq, Op::FetchAdd, Op::CmpSwap]
                    .iter()
                    .any(|&o| o as u8 == h.op)
                {
                    assert_eq!(h.seq >> 16, expect >> 16);
                    expect += 1;
                }
                at += n;
            }
        }
    }
    if data.len() < HDR {
        return;
    }
    let b: &[u8; HDR] = data[..HDR].try_into().unwrap();
    let h = Header::decode(b);
    assert_eq!(&h.encode(), b, "decode/encode is not the identity");
    check_valid(&h);
});
