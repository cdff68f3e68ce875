//! The PMIx bootstrap: rank, size and node-local rank from the launcher's
//! PMIx server; allgather by `PMIx_Put` + `PMIx_Commit` + `PMIx_Fence`
//! (collecting data) + one `PMIx_Get` per rank.

use crate::pmix_sys as sys;
use crate::{Error, Result};
use std::ffi::{CStr, CString, c_void};
use std::os::raw::c_char;
use std::sync::Mutex;

/// An initialised PMIx client (finalised on drop).
pub(crate) struct Pmix {
    me: sys::pmix_proc_t,
    /// Serialises collectives (their keys carry a sequence number).
    seq: Mutex<u64>,
}

// SAFETY: `me` is plain data (a namespace string and a rank); the PMIx
// client library is thread-safe (it runs its own progress thread and every
// API call may come from any thread); collectives are serialised by `seq`.
unsafe impl Send for Pmix {}
// SAFETY: as above: shared access reads `me` only and calls thread-safe PMIx.
unsafe impl Sync for Pmix {}

/// What the launcher told this process.
pub(crate) struct PmixInfo {
    pub(crate) rank: u32,
    pub(crate) size: u32,
    pub(crate) local_rank: u32,
    pub(crate) hostname: Option<String>,
    pub(crate) nspace: String,
}

fn check(call: &'static str, rc: sys::pmix_status_t) -> Result<()> {
    if rc == sys::PMIX_SUCCESS as sys::pmix_status_t {
        return Ok(());
    }
    // SAFETY: PMIx_Error_string returns a static NUL-terminated string for any status.
    let msg = unsafe { CStr::from_ptr(sys::PMIx_Error_string(rc)) }.to_string_lossy().into_owned();
    Err(Error::Pmix { call, msg, status: rc })
}

/// An owned `pmix_value_t*` returned by `PMIx_Get`.
struct Value(*mut sys::pmix_value_t);

impl Drop for Value {
    fn drop(&mut self) {
        // SAFETY: PMIx_Get allocated the value with malloc and its contents with
        // PMIx's allocators: PMIX_VALUE_RELEASE is destruct + free, as done here.
        unsafe {
            sys::PMIx_Value_destruct(self.0);
            libc::free(self.0.cast());
        }
    }
}

impl Value {
    fn ty(&self) -> u16 {
        // SAFETY: a non-null value from a successful PMIx_Get.
        unsafe { (*self.0).type_ }
    }
    fn as_u32(&self) -> Option<u32> {
        // SAFETY: the union member read matches the type tag.
        unsafe {
            match u32::from(self.ty()) {
                sys::PMIX_UINT16 => Some(u32::from((*self.0).data.uint16)),
                sys::PMIX_UINT32 => Some((*self.0).data.uint32),
                _ => None,
            }
        }
    }
    fn as_string(&self) -> Option<String> {
        if u32::from(self.ty()) != sys::PMIX_STRING {
            return None;
        }
        // SAFETY: a PMIX_STRING value holds a NUL-terminated string (or null).
        unsafe {
            let p = (*self.0).data.string;
            (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
        }
    }
    fn as_bytes(&self) -> Option<Vec<u8>> {
        if u32::from(self.ty()) != sys::PMIX_BYTE_OBJECT {
            return None;
        }
        // SAFETY: a PMIX_BYTE_OBJECT value holds `size` bytes at `bytes` (null when empty).
        unsafe {
            let bo = &(*self.0).data.bo;
            if bo.bytes.is_null() || bo.size == 0 {
                return Some(Vec::new());
            }
            Some(std::slice::from_raw_parts(bo.bytes.cast::<u8>(), bo.size).to_vec())
        }
    }
}

impl Pmix {
    /// Connects to the launcher's PMIx server.
    pub(crate) fn init() -> Result<(Pmix, PmixInfo)> {
        let mut me = sys::pmix_proc_t::default();
        // SAFETY: `me` is a valid out-parameter; no info array.
        check("PMIx_Init", unsafe { sys::PMIx_Init(&mut me, std::ptr::null_mut(), 0) })?;
        let p = Pmix { me, seq: Mutex::new(0) };
        let wild = p.proc(sys::PMIX_RANK_WILDCARD);
        let mine = p.proc(me.rank);
        let size = p.get(&wild, sys::KEY_JOB_SIZE)?.as_u32();
        let local_rank = p.get(&mine, sys::KEY_LOCAL_RANK)?.as_u32();
        let hostname = p.get(&mine, sys::KEY_HOSTNAME).ok().and_then(|v| v.as_string());
        let bad = |what: &str| Error::Pmix {
            call: "PMIx_Get",
            msg: format!("{what} has an unexpected type"),
            status: 0,
        };
        let info = PmixInfo {
            rank: me.rank,
            size: size.ok_or_else(|| bad("PMIX_JOB_SIZE"))?,
            local_rank: local_rank.ok_or_else(|| bad("PMIX_LOCAL_RANK"))?,
            hostname,
            nspace: p.nspace(),
        };
        Ok((p, info))
    }

    fn nspace(&self) -> String {
        // SAFETY: PMIx NUL-terminates the namespace within its fixed array.
        unsafe { CStr::from_ptr(self.me.nspace.as_ptr()) }.to_string_lossy().into_owned()
    }

    fn proc(&self, rank: u32) -> sys::pmix_proc_t {
        let mut p = sys::pmix_proc_t { rank, ..Default::default() };
        p.nspace = self.me.nspace;
        p
    }

    fn get(&self, proc: &sys::pmix_proc_t, key: &[u8]) -> Result<Value> {
        let mut v: *mut sys::pmix_value_t = std::ptr::null_mut();
        // SAFETY: `key` is NUL-terminated; `v` is a valid out-parameter; no info array.
        let rc = unsafe {
            sys::PMIx_Get(proc, key.as_ptr().cast::<c_char>(), std::ptr::null(), 0, &mut v)
        };
        check("PMIx_Get", rc)?;
        if v.is_null() {
            return Err(Error::Pmix { call: "PMIx_Get", msg: "no value".into(), status: rc });
        }
        Ok(Value(v))
    }

    /// Every rank's `data`, by rank: put under a fresh key, commit, fence
    /// with data collection, get every rank's.
    pub(crate) fn allgather(&self, size: u32, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut seq = self.seq.lock().unwrap_or_else(|p| p.into_inner());
        *seq += 1;
        let key = CString::new(format!("rmr.ag.{}", *seq)).expect("no NUL");
        // A leading byte keeps the object non-empty (PMIx treats empty ones as absent).
        let mut payload = Vec::with_capacity(data.len() + 1);
        payload.push(1u8);
        payload.extend_from_slice(data);
        let bo =
            sys::pmix_byte_object_t { bytes: payload.as_mut_ptr().cast(), size: payload.len() };
        let mut val = sys::pmix_value_t::default();
        // SAFETY: PMIx_Value_load copies the byte object into `val`; PMIx_Put copies
        // `val`; we destruct our copy afterwards.
        unsafe {
            check(
                "PMIx_Value_load",
                sys::PMIx_Value_load(
                    &mut val,
                    (&bo as *const sys::pmix_byte_object_t).cast::<c_void>(),
                    sys::PMIX_BYTE_OBJECT as sys::pmix_data_type_t,
                ),
            )?;
            let rc = sys::PMIx_Put(sys::PMIX_GLOBAL as sys::pmix_scope_t, key.as_ptr(), &mut val);
            sys::PMIx_Value_destruct(&mut val);
            check("PMIx_Put", rc)?;
            check("PMIx_Commit", sys::PMIx_Commit())?;
        }
        let wild = self.proc(sys::PMIX_RANK_WILDCARD);
        let mut info = sys::pmix_info_t::default();
        let yes = true;
        // SAFETY: the key is NUL-terminated; PMIx_Info_load copies the bool; the info
        // and proc arrays live across the blocking fence.
        unsafe {
            check(
                "PMIx_Info_load",
                sys::PMIx_Info_load(
                    &mut info,
                    sys::KEY_COLLECT_DATA.as_ptr().cast(),
                    (&yes as *const bool).cast(),
                    sys::PMIX_BOOL as sys::pmix_data_type_t,
                ),
            )?;
            check("PMIx_Fence", sys::PMIx_Fence(&wild, 1, &info, 1))?;
        }
        let mut all = Vec::with_capacity(size as usize);
        for r in 0..size {
            let v = self.get(&self.proc(r), key.as_bytes_with_nul())?;
            let b = v.as_bytes().ok_or_else(|| Error::Pmix {
                call: "PMIx_Get",
                msg: format!("rank {r}'s {key:?} is not a byte object"),
                status: 0,
            })?;
            if b.first() != Some(&1) {
                return Err(Error::Protocol(format!("rank {r}'s allgather data is malformed")));
            }
            all.push(b[1..].to_vec());
        }
        Ok(all)
    }
}

impl Drop for Pmix {
    fn drop(&mut self) {
        // SAFETY: balanced with the successful PMIx_Init in `init`.
        unsafe {
            sys::PMIx_Finalize(std::ptr::null(), 0);
        }
    }
}
