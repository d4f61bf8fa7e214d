//! rdma-core's libibverbs, loaded at run time with dlopen(3): the binary links nothing and runs
//! on nodes without rdma-core, where only what needs the verbs says so. The daemon's device caps
//! and `drill --mode rdma` both come through here, each looking up the few calls it makes.
//!
//! The symbols are rdma-core's exported ABI (libibverbs/libibverbs.map.in, IBVERBS_1.1, the
//! default version dlsym returns); the fn types mirror their C prototypes in verbs.h.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::io;
use std::ptr::NonNull;

use thiserror::Error;

/// The soname rdma-core installs (Debian libibverbs1, RHEL libibverbs).
pub const LIBIBVERBS: &str = "libibverbs.so.1";

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum LoadError {
    #[error("cannot load {name}: {reason}")]
    Library { name: String, reason: String },
    #[error("{name} has no symbol {symbol}: {reason}")]
    Symbol { name: String, symbol: &'static str, reason: String },
}

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
type FreeDeviceList = unsafe extern "C" fn(*mut *mut c_void);
type GetDeviceName = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type OpenDevice = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type CloseDevice = unsafe extern "C" fn(*mut c_void) -> c_int;

/// libibverbs, loaded; never unloaded (the providers it loads keep pointers into it).
pub struct Library {
    name: String,
    handle: NonNull<c_void>,
    get_device_list: GetDeviceList,
    free_device_list: FreeDeviceList,
    get_device_name: GetDeviceName,
    open_device: OpenDevice,
    close_device: CloseDevice,
}

// SAFETY: the handle is only passed to dlsym, which is thread-safe; the functions are plain C
// entry points that rdma-core documents as callable from any thread.
unsafe impl Send for Library {}

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

fn lookup(handle: NonNull<c_void>, library: &str, symbol: &'static str) -> Result<*mut c_void, LoadError> {
    let c_symbol = CString::new(symbol).map_err(|_| LoadError::Symbol {
        name: library.to_owned(),
        symbol,
        reason: "NUL in the name".to_owned(),
    })?;
    // SAFETY: a handle dlopen returned and a NUL-terminated symbol name.
    let address = unsafe { libc::dlsym(handle.as_ptr(), c_symbol.as_ptr()) };
    if address.is_null() {
        return Err(LoadError::Symbol { name: library.to_owned(), symbol, reason: dlerror_text() });
    }
    Ok(address)
}

/// A device of the list `Library::devices` hands out: valid only inside that call.
#[derive(Clone, Copy)]
pub struct ListedDevice<'list> {
    pointer: NonNull<c_void>,
    pub name: &'list str,
}

/// An open device context; closed on drop.
pub struct Context {
    pointer: NonNull<c_void>,
    close_device: CloseDevice,
}

impl Context {
    pub fn as_ptr(&self) -> *mut c_void {
        self.pointer.as_ptr()
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: a context ibv_open_device returned, closed once, after everything opened on
        // it (its owners drop those first).
        unsafe { (self.close_device)(self.pointer.as_ptr()) };
    }
}

impl Library {
    pub fn load(name: &str) -> Result<Library, LoadError> {
        let c_name = CString::new(name)
            .map_err(|_| LoadError::Library { name: name.to_owned(), reason: "NUL in the name".to_owned() })?;
        // SAFETY: dlopen with a NUL-terminated name; the handle is kept for the process's life.
        let handle = unsafe { libc::dlopen(c_name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        let Some(handle) = NonNull::new(handle) else {
            return Err(LoadError::Library { name: name.to_owned(), reason: dlerror_text() });
        };
        let symbol = |symbol| lookup(handle, name, symbol);
        // SAFETY (every transmute): the addresses are these rdma-core functions, whose C
        // prototypes (verbs.h) the fn types mirror.
        unsafe {
            Ok(Library {
                name: name.to_owned(),
                handle,
                get_device_list: std::mem::transmute::<*mut c_void, GetDeviceList>(symbol("ibv_get_device_list")?),
                free_device_list: std::mem::transmute::<*mut c_void, FreeDeviceList>(symbol("ibv_free_device_list")?),
                get_device_name: std::mem::transmute::<*mut c_void, GetDeviceName>(symbol("ibv_get_device_name")?),
                open_device: std::mem::transmute::<*mut c_void, OpenDevice>(symbol("ibv_open_device")?),
                close_device: std::mem::transmute::<*mut c_void, CloseDevice>(symbol("ibv_close_device")?),
            })
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The address of `symbol`, for a caller to transmute to the fn type of its C prototype.
    pub fn symbol(&self, symbol: &'static str) -> Result<*mut c_void, LoadError> {
        lookup(self.handle, &self.name, symbol)
    }

    /// Calls `visit` with the devices libibverbs lists (none when it lists none), then frees the
    /// list; `Err` is ibv_get_device_list's own error (no verbs driver or no ib_uverbs).
    pub fn devices<T>(&self, visit: impl FnOnce(&[ListedDevice<'_>]) -> T) -> io::Result<T> {
        let mut count: c_int = 0;
        // SAFETY: writes the count; returns NULL or an array of `count` device pointers,
        // NULL-terminated, freed below.
        let list = unsafe { (self.get_device_list)(&mut count) };
        if list.is_null() {
            return Err(io::Error::last_os_error());
        }
        let mut names = Vec::new();
        for index in 0..usize::try_from(count).unwrap_or(0) {
            // SAFETY: index < count, inside the array.
            let Some(device) = NonNull::new(unsafe { *list.add(index) }) else { break };
            // SAFETY: a device of the list; its name is NUL-terminated and lives with it.
            let name = unsafe { (self.get_device_name)(device.as_ptr()) };
            if name.is_null() {
                continue;
            }
            // SAFETY: non-null, NUL-terminated (above).
            names.push((device, unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()));
        }
        let listed: Vec<ListedDevice<'_>> =
            names.iter().map(|(pointer, name)| ListedDevice { pointer: *pointer, name }).collect();
        let result = visit(&listed);
        // SAFETY: the list ibv_get_device_list returned, freed once, after its last use (a
        // context opened from it may outlive it: verbs.h, ibv_free_device_list).
        unsafe { (self.free_device_list)(list) };
        Ok(result)
    }

    /// ibv_open_device; the error is its errno.
    pub fn open(&self, device: ListedDevice<'_>) -> io::Result<Context> {
        // SAFETY: a device of the live list.
        let context = unsafe { (self.open_device)(device.pointer.as_ptr()) };
        match NonNull::new(context) {
            Some(pointer) => Ok(Context { pointer, close_device: self.close_device }),
            None => Err(io::Error::last_os_error()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_carries_dlerrors_reason() {
        let Err(err) = Library::load("libibverbs-not-installed.so.1") else { panic!("no such library") };
        let text = err.to_string();
        assert!(text.starts_with("cannot load libibverbs-not-installed.so.1: "), "{text}");
        assert!(text.contains("cannot open shared object file"), "dlerror's reason: {text}");
    }

    #[test]
    fn a_library_without_the_verbs_names_the_first_missing_symbol() {
        // libc is loaded in every process and has none of the verbs.
        let Err(err) = Library::load("libc.so.6") else { panic!("libc has no verbs") };
        assert!(err.to_string().starts_with("libc.so.6 has no symbol ibv_get_device_list: "), "{err}");
    }
}
