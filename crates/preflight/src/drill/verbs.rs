//! The few libibverbs calls `drill --mode rdma` makes, through the library memlock-core loads at
//! run time: on nodes without rdma-core only that mode fails, with an error naming the missing
//! library.
//!
//! verbs.h wraps `ibv_reg_mr` and `ibv_get_device_list` in
//! macros that end in these same functions for a dynamically linked program (`__ibv_reg_mr`
//! calls `ibv_reg_mr` unless IBV_ACCESS_OPTIONAL_RANGE flags are set), so this is the call NCCL
//! makes for host buffers (src/misc/ibvwrap.cc `wrap_ibv_reg_mr`, through the symbols
//! src/misc/ibvsymbols.cc takes from its own dlopen of libibverbs).

use std::ffi::{c_int, c_void};
use std::io;
use std::ptr::NonNull;

use memlock_core::verbs::{Context, Library, LoadError};
use thiserror::Error;

pub use memlock_core::verbs::LIBIBVERBS;

/// `IBV_ACCESS_LOCAL_WRITE` (verbs.h `enum ibv_access_flags`): what NCCL's host buffers need at
/// least; every access flag pins the same pages.
const IBV_ACCESS_LOCAL_WRITE: c_int = 1;

#[derive(Debug, Error)]
pub enum VerbsError {
    #[error(
        "cannot load {name}: {reason} (drill --mode rdma needs rdma-core's libibverbs: the libibverbs1 package on \
        Debian and Ubuntu, libibverbs on RHEL; the other modes do not)"
    )]
    Library { name: String, reason: String },
    #[error("{name} has no symbol {symbol}: {reason}")]
    Symbol { name: String, symbol: &'static str, reason: String },
    #[error(
        "no RDMA device: ibv_get_device_list found none{detail} (is a verbs driver and ib_uverbs loaded? \
        /sys/class/infiniband and /dev/infiniband list them)"
    )]
    NoDevice { detail: String },
    #[error("no RDMA device named {wanted}; found: {found}")]
    NotFound { wanted: String, found: String },
    #[error("{call} on {device}: {source}")]
    Call { call: &'static str, device: String, source: io::Error },
}

type AllocPd = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type DeallocPd = unsafe extern "C" fn(*mut c_void) -> c_int;
type RegMr = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int) -> *mut c_void;
type DeregMr = unsafe extern "C" fn(*mut c_void) -> c_int;

impl From<LoadError> for VerbsError {
    fn from(err: LoadError) -> Self {
        match err {
            LoadError::Library { name, reason } => VerbsError::Library { name, reason },
            LoadError::Symbol { name, symbol, reason } => VerbsError::Symbol { name, symbol, reason },
        }
    }
}

/// Looks up `symbol` and casts it to `F`, the fn type of its C prototype in verbs.h.
///
/// # Safety
/// `F` must be that fn type.
unsafe fn function<F: Copy>(library: &Library, symbol: &'static str) -> Result<F, VerbsError> {
    let address = library.symbol(symbol)?;
    // SAFETY: the caller vouches that F is the symbol's fn type, a pointer-sized fn pointer.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&address) })
}

/// An open device with one protection domain; the PD is released on drop, then the context
/// closes, after every `Mr` of it (the caller keeps MRs in a field dropped before this one).
pub struct Device {
    name: String,
    dealloc_pd: DeallocPd,
    reg_mr: RegMr,
    dereg_mr: DeregMr,
    pd: NonNull<c_void>,
    // Dropped after `Drop::drop` released the PD; the library is never unloaded.
    _context: Context,
    _library: Library,
}

/// A registered memory region; deregistered (unpinned) on drop.
pub struct Mr {
    dereg: DeregMr,
    mr: NonNull<c_void>,
}

impl Device {
    /// Loads `library` (normally [`LIBIBVERBS`]) and opens `wanted`, or the first device.
    pub fn open(library: &str, wanted: Option<&str>) -> Result<Device, VerbsError> {
        let library = Library::load(library)?;
        // SAFETY (each): the fn types mirror these functions' prototypes in verbs.h.
        let (alloc_pd, dealloc_pd, reg_mr, dereg_mr) = unsafe {
            (
                function::<AllocPd>(&library, "ibv_alloc_pd")?,
                function::<DeallocPd>(&library, "ibv_dealloc_pd")?,
                function::<RegMr>(&library, "ibv_reg_mr")?,
                function::<DeregMr>(&library, "ibv_dereg_mr")?,
            )
        };
        let opened = library
            .devices(|devices| {
                let names: Vec<&str> = devices.iter().map(|device| device.name).collect();
                let chosen = devices.iter().find(|device| wanted.is_none_or(|w| w == device.name));
                match chosen {
                    Some(device) => Ok((library.open(*device), device.name.to_owned())),
                    None => Err(match wanted {
                        Some(w) if !names.is_empty() => {
                            VerbsError::NotFound { wanted: w.to_owned(), found: names.join(", ") }
                        }
                        _ => VerbsError::NoDevice { detail: String::new() },
                    }),
                }
            })
            .map_err(|err| VerbsError::NoDevice { detail: format!(" ({err})") })??;
        let (context, name) = opened;
        let context =
            context.map_err(|source| VerbsError::Call { call: "ibv_open_device", device: name.clone(), source })?;
        // SAFETY: an open context.
        let Some(pd) = NonNull::new(unsafe { alloc_pd(context.as_ptr()) }) else {
            let source = io::Error::last_os_error();
            return Err(VerbsError::Call { call: "ibv_alloc_pd", device: name, source });
        };
        Ok(Device { name, dealloc_pd, reg_mr, dereg_mr, pd, _context: context, _library: library })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ibv_reg_mr(pd, addr, len, IBV_ACCESS_LOCAL_WRITE)`; the error carries libibverbs'
    /// errno (ENOMEM past RLIMIT_MEMLOCK: ib_umem_get in drivers/infiniband/core/umem.c).
    ///
    /// # Safety
    /// `addr..addr+len` must be a mapping that outlives the returned `Mr`.
    pub unsafe fn register(&self, addr: *mut c_void, len: usize) -> io::Result<Mr> {
        // SAFETY: our PD; the caller vouches for the range.
        let mr = unsafe { (self.reg_mr)(self.pd.as_ptr(), addr, len, IBV_ACCESS_LOCAL_WRITE) };
        match NonNull::new(mr) {
            Some(mr) => Ok(Mr { dereg: self.dereg_mr, mr }),
            None => Err(io::Error::last_os_error()),
        }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: an MR ibv_reg_mr returned, deregistered once, before its device closes.
        unsafe { (self.dereg)(self.mr.as_ptr()) };
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: the PD allocated in `open`, released once, after its MRs and before the
        // context field closes.
        unsafe { (self.dealloc_pd)(self.pd.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_named_with_the_package_to_install() {
        let err = Device::open("libibverbs-not-installed.so.1", None).err().expect("no such library");
        let text = err.to_string();
        assert!(text.starts_with("cannot load libibverbs-not-installed.so.1: "), "{text}");
        assert!(text.contains("libibverbs1 package"), "{text}");
        assert!(text.contains("cannot open shared object file"), "dlerror's reason: {text}");
    }

    #[test]
    fn a_library_without_the_symbols_names_the_first_missing_one() {
        // libc is loaded in every process and has none of the verbs.
        let err = Device::open("libc.so.6", None).err().expect("libc has no verbs");
        assert!(err.to_string().starts_with("libc.so.6 has no symbol ibv_get_device_list: "), "{err}");
    }
}
