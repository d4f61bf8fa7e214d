//! The few libibverbs calls `drill --mode rdma` makes, loaded at run time with dlopen(3): the
//! binary links nothing new and runs on nodes without rdma-core, where only that mode fails,
//! with an error naming the missing library.
//!
//! The symbols are rdma-core's exported ABI (libibverbs/libibverbs.map.in, IBVERBS_1.1, the
//! default version dlsym returns). verbs.h wraps `ibv_reg_mr` and `ibv_get_device_list` in
//! macros that end in these same functions for a dynamically linked program (`__ibv_reg_mr`
//! calls `ibv_reg_mr` unless IBV_ACCESS_OPTIONAL_RANGE flags are set), so this is the call NCCL
//! makes for host buffers (src/misc/ibvwrap.cc `wrap_ibv_reg_mr`, through the symbols
//! src/misc/ibvsymbols.cc takes from its own dlopen of libibverbs).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::io;
use std::ptr::NonNull;

use thiserror::Error;

/// The soname rdma-core installs (Debian libibverbs1, RHEL libibverbs).
pub const LIBIBVERBS: &str = "libibverbs.so.1";

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

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
type FreeDeviceList = unsafe extern "C" fn(*mut *mut c_void);
type GetDeviceName = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type OpenDevice = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type CloseDevice = unsafe extern "C" fn(*mut c_void) -> c_int;
type AllocPd = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type DeallocPd = unsafe extern "C" fn(*mut c_void) -> c_int;
type RegMr = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int) -> *mut c_void;
type DeregMr = unsafe extern "C" fn(*mut c_void) -> c_int;

/// libibverbs, loaded; never unloaded (providers it loads keep pointers into it).
struct Library {
    get_device_list: GetDeviceList,
    free_device_list: FreeDeviceList,
    get_device_name: GetDeviceName,
    open_device: OpenDevice,
    close_device: CloseDevice,
    alloc_pd: AllocPd,
    dealloc_pd: DeallocPd,
    reg_mr: RegMr,
    dereg_mr: DeregMr,
}

fn dlerror_text() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call.
    let text = unsafe { libc::dlerror() };
    if text.is_null() {
        "unknown dlerror".to_owned()
    } else {
        // SAFETY: non-null, NUL-terminated (above).
        unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
    }
}

impl Library {
    fn load(name: &str) -> Result<Library, VerbsError> {
        let c_name = CString::new(name)
            .map_err(|_| VerbsError::Library { name: name.to_owned(), reason: "NUL in the name".to_owned() })?;
        // SAFETY: dlopen with a NUL-terminated name; the handle is kept for the process's life.
        let handle = unsafe { libc::dlopen(c_name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(VerbsError::Library { name: name.to_owned(), reason: dlerror_text() });
        }
        let symbol = |symbol: &'static str| -> Result<*mut c_void, VerbsError> {
            let c_symbol = CString::new(symbol).map_err(|_| VerbsError::Symbol {
                name: name.to_owned(),
                symbol,
                reason: "NUL in the name".to_owned(),
            })?;
            // SAFETY: a handle dlopen returned and a NUL-terminated symbol name.
            let address = unsafe { libc::dlsym(handle, c_symbol.as_ptr()) };
            if address.is_null() {
                return Err(VerbsError::Symbol { name: name.to_owned(), symbol, reason: dlerror_text() });
            }
            Ok(address)
        };
        // SAFETY (every transmute): the addresses are these rdma-core functions, whose C
        // prototypes (verbs.h) the fn types above mirror.
        unsafe {
            Ok(Library {
                get_device_list: std::mem::transmute::<*mut c_void, GetDeviceList>(symbol("ibv_get_device_list")?),
                free_device_list: std::mem::transmute::<*mut c_void, FreeDeviceList>(symbol("ibv_free_device_list")?),
                get_device_name: std::mem::transmute::<*mut c_void, GetDeviceName>(symbol("ibv_get_device_name")?),
                open_device: std::mem::transmute::<*mut c_void, OpenDevice>(symbol("ibv_open_device")?),
                close_device: std::mem::transmute::<*mut c_void, CloseDevice>(symbol("ibv_close_device")?),
                alloc_pd: std::mem::transmute::<*mut c_void, AllocPd>(symbol("ibv_alloc_pd")?),
                dealloc_pd: std::mem::transmute::<*mut c_void, DeallocPd>(symbol("ibv_dealloc_pd")?),
                reg_mr: std::mem::transmute::<*mut c_void, RegMr>(symbol("ibv_reg_mr")?),
                dereg_mr: std::mem::transmute::<*mut c_void, DeregMr>(symbol("ibv_dereg_mr")?),
            })
        }
    }
}

/// An open device with one protection domain; closed on drop, after every `Mr` of it (the
/// caller keeps MRs in a field dropped before this one).
pub struct Device {
    lib: Library,
    name: String,
    context: NonNull<c_void>,
    pd: NonNull<c_void>,
}

/// A registered memory region; deregistered (unpinned) on drop.
pub struct Mr {
    dereg: DeregMr,
    mr: NonNull<c_void>,
}

impl Device {
    /// Loads `library` (normally [`LIBIBVERBS`]) and opens `wanted`, or the first device.
    pub fn open(library: &str, wanted: Option<&str>) -> Result<Device, VerbsError> {
        let lib = Library::load(library)?;
        let mut count: c_int = 0;
        // SAFETY: ibv_get_device_list writes the count and returns NULL or an array of `count`
        // device pointers, NULL-terminated, freed below.
        let list = unsafe { (lib.get_device_list)(&mut count) };
        if list.is_null() {
            let err = io::Error::last_os_error();
            return Err(VerbsError::NoDevice { detail: format!(" ({err})") });
        }
        let mut names = Vec::new();
        let mut chosen = None;
        for index in 0..usize::try_from(count).unwrap_or(0) {
            // SAFETY: index < count, inside the array.
            let device = unsafe { *list.add(index) };
            if device.is_null() {
                break;
            }
            // SAFETY: a device of the list; the name is NUL-terminated and lives with it.
            let name = unsafe { CStr::from_ptr((lib.get_device_name)(device)) }.to_string_lossy().into_owned();
            if chosen.is_none() && wanted.is_none_or(|w| w == name) {
                chosen = Some((device, name.clone()));
            }
            names.push(name);
        }
        let opened = chosen.map(|(device, name)| {
            // SAFETY: a device of the list, opened before the list is freed (which it may
            // outlive: verbs.h, ibv_free_device_list).
            (unsafe { (lib.open_device)(device) }, io::Error::last_os_error(), name)
        });
        // SAFETY: the list ibv_get_device_list returned, freed once.
        unsafe { (lib.free_device_list)(list) };
        let Some((context, open_error, name)) = opened else {
            return Err(match wanted {
                Some(w) if !names.is_empty() => VerbsError::NotFound { wanted: w.to_owned(), found: names.join(", ") },
                _ => VerbsError::NoDevice { detail: String::new() },
            });
        };
        let Some(context) = NonNull::new(context) else {
            return Err(VerbsError::Call { call: "ibv_open_device", device: name, source: open_error });
        };
        // SAFETY: an open context.
        let pd = unsafe { (lib.alloc_pd)(context.as_ptr()) };
        let Some(pd) = NonNull::new(pd) else {
            let source = io::Error::last_os_error();
            // SAFETY: the context opened above, closed once.
            unsafe { (lib.close_device)(context.as_ptr()) };
            return Err(VerbsError::Call { call: "ibv_alloc_pd", device: name, source });
        };
        Ok(Device { lib, name, context, pd })
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
        let mr = unsafe { (self.lib.reg_mr)(self.pd.as_ptr(), addr, len, IBV_ACCESS_LOCAL_WRITE) };
        match NonNull::new(mr) {
            Some(mr) => Ok(Mr { dereg: self.lib.dereg_mr, mr }),
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
        // SAFETY: the PD and context opened in `open`, released once, after their MRs.
        unsafe {
            (self.lib.dealloc_pd)(self.pd.as_ptr());
            (self.lib.close_device)(self.context.as_ptr());
        }
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
