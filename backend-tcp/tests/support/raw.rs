//! A raw peer: a std `TcpStream` speaking the TCP backend's wire format by
//! hand, and a target process side (IA, PZs, regions, a PSP, and a good
//! peer on the same IA that must keep working whatever the raw peer does).

use backend_tcp::wire::{HDR, Header, MAGIC, Op, StreamState, data_hdr_len};
use rmr_api::Cookie;
use rmr_api::provider::conformance::{Buf, checksum, pattern};
use rmr_api::{Access, DtoFlags, Ep, EpEvds, Evd, Event, Ia, Psp, Pz, RmrContext, Status};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const WAIT: Duration = Duration::from_secs(20);

pub struct RawPeer {
    pub s: TcpStream,
    next_seq: u64,
    /// The target's stream past its handshake reply (`None` before it).
    rx: Option<StreamState>,
}

impl RawPeer {
    /// Connects and sends a connection request; the reply is read by [`RawPeer::accepted`].
    pub fn connect(to: SocketAddr, pd: &[u8]) -> RawPeer {
        let mut s = TcpStream::connect(to).expect("raw connect");
        s.set_nodelay(true).unwrap();
        let mut h = Header::new(Op::ConnReq);
        h.arg0 = MAGIC;
        h.len = pd.len() as u32;
        let mut b = h.encode().to_vec();
        b.extend_from_slice(pd);
        s.write_all(&b).unwrap();
        RawPeer { s, next_seq: 1, rx: None }
    }

    /// Reads the ConnAccept.
    pub fn accepted(&mut self) {
        let (h, _) = self.read_frame().expect("accept reply");
        assert_eq!(h.validate(), Ok(Op::ConnAccept));
    }

    /// A request header with the next sequence number.
    pub fn request(&mut self, op: Op) -> Header {
        let mut h = Header::new(op);
        h.seq = self.next_seq;
        self.next_seq += 1;
        h
    }

    /// Sends a live-stream frame (its ack always carried).
    pub fn send(&mut self, h: &Header, payload: &[u8]) -> std::io::Result<()> {
        self.s.write_all(&h.data_frame(payload))
    }

    /// Reads one frame (header and payload): the handshake reply first,
    /// then live-stream frames; `None` at EOF or error.
    pub fn read_frame(&mut self) -> Option<(Header, Vec<u8>)> {
        self.s.set_read_timeout(Some(WAIT)).unwrap();
        let mut hb = [0u8; HDR];
        let h = match self.rx.as_mut() {
            None => {
                self.s.read_exact(&mut hb).ok()?;
                self.rx = Some(StreamState::default());
                Header::decode(&hb)
            }
            Some(st) => {
                self.s.read_exact(&mut hb[..2]).ok()?;
                let n = data_hdr_len(hb[0], hb[1]).expect("the target sends known ops");
                self.s.read_exact(&mut hb[2..n]).ok()?;
                st.decode(&hb[..n]).expect("a header").expect("a whole header").0
            }
        };
        let mut p = vec![0u8; h.len as usize];
        self.s.read_exact(&mut p).ok()?;
        Some((h, p))
    }

    /// Skips acks until the response (NAK, read or atomic response) to `seq`.
    pub fn response(&mut self, seq: u64) -> (Header, Vec<u8>) {
        loop {
            let (h, p) = self.read_frame().expect("a response");
            if h.op == Op::Ack as u8 {
                continue;
            }
            assert_eq!(h.seq, seq, "response to another request: {h:?}");
            return (h, p);
        }
    }

    /// Expects a NAK of `seq` with `status`.
    pub fn expect_nak(&mut self, seq: u64, status: Status) {
        let (h, _) = self.response(seq);
        assert_eq!(h.op, Op::Nak as u8, "expected a NAK, got {h:?}");
        assert_eq!(Status::from_code(h.status), Some(status), "{h:?}");
    }

    /// Sends a signalled write and waits for its acknowledgement.
    pub fn write_acked(&mut self, ctx: &RmrContext, off: u64, data: &[u8]) {
        let mut h = self.request(Op::Write);
        h.key = ctx.key();
        h.addr = ctx.addr + off;
        h.len = data.len() as u32;
        h.flags = backend_tcp::wire::F_ACK_REQ;
        self.send(&h, data).unwrap();
        loop {
            let (a, _) = self.read_frame().expect("ack");
            assert_ne!(a.op, Op::Nak as u8, "write refused: {a:?}");
            if a.ack >= h.seq {
                return;
            }
        }
    }
}

/// The attacked process: one IA, its regions, and a good peer on it.
pub struct Target {
    pub ia: Arc<dyn Ia>,
    pub pz: Arc<dyn Pz>,
    pub pz_other: Arc<dyn Pz>,
    pub psp: Arc<dyn Psp>,
    pub psp_evd: Arc<dyn Evd>,
    /// REMOTE_WRITE | REMOTE_READ in `pz`.
    pub rw: Buf,
    /// REMOTE_WRITE only.
    pub wo: Buf,
    /// REMOTE_WRITE | REMOTE_READ, but in `pz_other`.
    pub other: Buf,
    good: Good,
}

struct Good {
    _ia: Arc<dyn Ia>,
    ep: Arc<dyn Ep>,
    _server_ep: Arc<dyn Ep>,
    evd: Arc<dyn Evd>,
    src: Buf,
    back: Buf,
    target: Buf,
    round: u64,
}

pub const LEN: usize = 64 << 10;
pub const FILL: u8 = 0x5a;

impl Target {
    pub fn new() -> Target {
        backend_tcp::register();
        let ia = rmr_api::open("tcp:127.0.0.1").unwrap();
        let pz = ia.create_pz().unwrap();
        let pz_other = ia.create_pz().unwrap();
        let psp_evd = ia.create_evd().unwrap();
        let psp = ia.create_psp(0, &psp_evd).unwrap();
        let rw = Buf::new(
            &pz,
            LEN,
            Access::REMOTE_WRITE | Access::REMOTE_READ | Access::LOCAL_WRITE,
            FILL,
        );
        let wo = Buf::new(&pz, LEN, Access::REMOTE_WRITE | Access::LOCAL_WRITE, FILL);
        let other = Buf::new(
            &pz_other,
            LEN,
            Access::REMOTE_WRITE | Access::REMOTE_READ | Access::LOCAL_WRITE,
            FILL,
        );
        // The good peer: another IA (another process, in effect) connected to this one.
        let gia = rmr_api::open("tcp:127.0.0.1").unwrap();
        let gpz = gia.create_pz().unwrap();
        let gevd = gia.create_evd().unwrap();
        let ep = gia.create_ep(&gpz, &EpEvds::single(&gevd)).unwrap();
        let (addr, svc) = (psp.address(), psp.service());
        let ep2 = ep.clone();
        let h = std::thread::spawn(move || ep2.connect(&addr, svc, b"good", WAIT));
        let sevd = ia.create_evd().unwrap();
        let server_ep = match psp_evd.wait(Some(WAIT), 1).unwrap() {
            Event::ConnectionRequest(cr) => {
                let e = ia.create_ep(&pz, &EpEvds::single(&sevd)).unwrap();
                cr.accept(&e, b"").unwrap();
                e
            }
            e => panic!("{e:?}"),
        };
        h.join().unwrap().expect("good connect");
        let good = Good {
            _ia: gia,
            ep,
            _server_ep: server_ep,
            evd: gevd,
            src: Buf::new(&gpz, 4096, Access::LOCAL_WRITE, 0),
            back: Buf::new(&gpz, 4096, Access::LOCAL_WRITE, 0),
            target: Buf::new(
                &pz,
                4096,
                Access::REMOTE_WRITE | Access::REMOTE_READ | Access::LOCAL_WRITE,
                0,
            ),
            round: 0,
        };
        Target { ia, pz, pz_other, psp, psp_evd, rw, wo, other, good }
    }

    pub fn psp_addr(&self) -> SocketAddr {
        SocketAddr::new(self.psp.address().parse().unwrap(), self.psp.service())
    }

    /// A raw peer connected and accepted onto a fresh EP of `pz`; returns it
    /// with the EP and the EP's DTO and connection EVDs.
    pub fn accept_raw(&self) -> (RawPeer, Arc<dyn Ep>, Arc<dyn Evd>, Arc<dyn Evd>) {
        let mut raw = RawPeer::connect(self.psp_addr(), b"raw");
        let (evd, cevd) = (self.ia.create_evd().unwrap(), self.ia.create_evd().unwrap());
        let ep = self
            .ia
            .create_ep(
                &self.pz,
                &EpEvds { request: evd.clone(), recv: evd.clone(), conn: cevd.clone() },
            )
            .unwrap();
        loop {
            match self.psp_evd.wait(Some(WAIT), 1).unwrap() {
                Event::ConnectionRequest(cr) if cr.private_data() == b"raw" => {
                    cr.accept(&ep, b"").unwrap();
                    break;
                }
                Event::ConnectionRequest(cr) => {
                    let _ = cr.reject(b"");
                }
                e => panic!("{e:?}"),
            }
        }
        raw.accepted();
        (raw, ep, evd, cevd)
    }

    /// The good peer RDMA-writes a fresh pattern into its region here, reads
    /// it back, and checks both copies.
    pub fn good_works(&mut self) {
        let g = &mut self.good;
        g.round += 1;
        let p = pattern(g.round, 4096);
        g.src.mem.write(0, &p).unwrap();
        let ctx = g.target.ctx();
        g.ep.post_rdma_write(&[g.src.sge()], ctx.at(0), Cookie(g.round * 2), DtoFlags::SUPPRESS)
            .unwrap();
        g.ep.post_rdma_read(&[g.back.sge()], ctx.at(0), Cookie(g.round * 2 + 1), DtoFlags::empty())
            .unwrap();
        loop {
            match g.evd.wait(Some(WAIT), 1) {
                Ok(Event::Dto(c)) => {
                    assert_eq!(c.cookie.0, g.round * 2 + 1);
                    assert!(c.status.is_ok(), "good peer's read failed: {c:?}");
                    break;
                }
                Ok(Event::Established { .. }) => {}
                other => panic!("good peer got no completion: {other:?}"),
            }
        }
        assert_eq!(checksum(&g.back.bytes()), checksum(&p), "good peer's data corrupted");
        assert_eq!(g.target.bytes(), p);
    }

    /// The attack regions still hold nothing but their fill.
    pub fn untouched(&self) {
        for (name, b) in [("rw", &self.rw), ("write-only", &self.wo), ("other-PZ", &self.other)] {
            let v = b.bytes();
            if let Some(i) = v.iter().position(|&x| x != FILL) {
                panic!("{name} region changed at byte {i}");
            }
        }
    }
}

/// Waits for the EP's end event and returns the broken reason (panics on an orderly end).
pub fn expect_broken(cevd: &Arc<dyn Evd>) -> String {
    let start = Instant::now();
    loop {
        match cevd.wait(Some(WAIT), 1) {
            Ok(Event::Broken { reason, .. }) => return reason,
            Ok(Event::Disconnected { .. }) => {
                panic!("expected a broken connection, got an orderly end")
            }
            Ok(_) => {}
            Err(e) => panic!("no end event after {:?}: {e}", start.elapsed()),
        }
    }
}

/// Resident set size of this process in bytes.
pub fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    kb * 1024
}

/// A value from an EP's "progress" note (`txq=...`).
pub fn note(ep: &Arc<dyn Ep>, key: &str) -> u64 {
    let notes = ep.attr().notes;
    let p = &notes.iter().find(|(k, _)| k == "progress").expect("progress note").1;
    let pat = format!("{key}=");
    p.split_whitespace()
        .find_map(|w| w.strip_prefix(&pat))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {p}"))
}
