//! The README's first program: a server and a client in one process (two
//! threads) over the embedded TCP transport. The client RDMA-writes a
//! greeting into the server's memory, then tells it with a send; the
//! server prints what landed.
//!
//! ```text
//! cargo run -p rmr --example first
//! ```
use rmr::{Access, Cookie, DtoFlags, EpEvds, Event, MemRegion, RmrContext, Sge};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

fn main() -> rmr::Result<()> {
    let ia = rmr::open("tcp:127.0.0.1")?; // every backend enabled in Cargo.toml is there
    let listener = ia.listen(0)?; // 0: any free port
    let port = listener.service();

    // The server: a region the client may write, sent to it on accept.
    let server_ia = ia.clone();
    let server = std::thread::spawn(move || -> rmr::Result<String> {
        let (pz, evd) = (server_ia.create_pz()?, server_ia.create_evd()?);
        let inbox = MemRegion::new(4096);
        let inbox_lmr = pz.register_all(&inbox, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
        let note = MemRegion::new(8);
        let note_lmr = pz.register_all(&note, Access::LOCAL_WRITE)?;
        let ep = server_ia.create_ep(&pz, &EpEvds::single(&evd))?;
        let reply = inbox_lmr.rmr_context().to_bytes();
        listener.accept(&ep, &reply, WAIT)?;
        ep.post_recv(&[Sge::whole(&*note_lmr)], Cookie(1), DtoFlags::empty())?;
        loop {
            // The send completes after the write before it has landed.
            if let Event::Dto(c) = evd.wait(Some(WAIT), 1)? {
                c.result()?;
                break;
            }
        }
        let mut len = [0u8; 8];
        note.read(0, &mut len)?;
        let text = inbox.to_vec(0, u64::from_le_bytes(len) as usize)?;
        Ok(String::from_utf8_lossy(&text).into_owned())
    });

    // The client: connect, learn where to write, write, notify.
    let (pz, evd) = (ia.create_pz()?, ia.create_evd()?);
    let ep = ia.create_ep(&pz, &EpEvds::single(&evd))?;
    let target = RmrContext::from_bytes(&ep.connect("127.0.0.1", port, b"", WAIT)?)?;
    let hello = b"hello over rmr".to_vec();
    let note = (hello.len() as u64).to_le_bytes().to_vec();
    let msg = MemRegion::from_vec(hello); // the region owns the bytes now
    let msg_lmr = pz.register_all(&msg, Access::empty())?;
    let note = MemRegion::from_vec(note);
    let note_lmr = pz.register_all(&note, Access::empty())?;
    ep.post_rdma_write(&[Sge::whole(&*msg_lmr)], target.at(0), Cookie(2), DtoFlags::SUPPRESS)?;
    ep.post_send(&[Sge::whole(&*note_lmr)], Cookie(3), DtoFlags::empty())?;
    loop {
        if let Event::Dto(c) = evd.wait(Some(WAIT), 1)? {
            c.result()?; // the send is acknowledged: the server has both
            break;
        }
    }
    ep.close(WAIT)?; // once the server has everything; fine if it closed first
    let got = server.join().expect("server thread")?;
    println!("server received: {got}");
    assert_eq!(got, "hello over rmr");
    Ok(())
}
