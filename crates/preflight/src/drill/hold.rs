//! What the drill holds: io_uring rings with their registered buffers, verbs MRs and mlocked
//! regions, each released by `Drop`.

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};

use super::event::{Refusal, Refused};
use super::{verbs, DrillError, Mode, IO_URING_MAX_BUFFER};

// ---------------------------------------------------------------------------------------------
// What the drill holds. Declaration order is drop order: rings unregister and close, and MRs
// deregister (both unpinning), before the verbs device closes and the regions they point into
// are unmapped.

#[derive(Default)]
pub(super) struct Held {
    rings: Vec<Ring>,
    mrs: Vec<verbs::Mr>,
    pub(super) device: Option<verbs::Device>,
    regions: Vec<Region>,
}

impl Held {
    pub(super) fn release(&mut self) {
        self.rings.clear();
        self.mrs.clear();
        self.device = None;
        self.regions.clear();
    }
}

/// An anonymous private mapping, unmapped (and so unlocked) on drop.
struct Region {
    addr: *mut c_void,
    len: usize,
    locked: bool,
}

impl Region {
    fn map(len: usize, page: usize) -> Result<Region, DrillError> {
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(DrillError::syscall("mmap", io::Error::last_os_error()));
        }
        let region = Region { addr, len, locked: false };
        // Populate every page now, so pinning and locking measure the limit, not page faults.
        let base = addr.cast::<u8>();
        for offset in (0..len).step_by(page) {
            // SAFETY: offset < len, inside the writable mapping created above.
            unsafe { base.add(offset).write_volatile(1) };
        }
        Ok(region)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: addr/len describe a mapping this Region created and nothing else refers to it
        // any more (rings are dropped first). Failures here cannot be acted on; munmap unlocks
        // anyway.
        unsafe {
            if self.locked {
                libc::munlock(self.addr, self.len);
            }
            libc::munmap(self.addr, self.len);
        }
    }
}

/// Mirrors `struct io_uring_params` (include/uapi/linux/io_uring.h, 120 bytes). Only the size
/// matters to us: the rings are never mapped, the fd only carries the registration.
#[repr(C)]
#[derive(Default)]
struct IoUringParams {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
    wq_fd: u32,
    resv: [u32; 3],
    sq_off: [u64; 5],
    cq_off: [u64; 5],
}

const _: () = assert!(std::mem::size_of::<IoUringParams>() == 120);

const IORING_REGISTER_BUFFERS: libc::c_uint = 0;
const IORING_UNREGISTER_BUFFERS: libc::c_uint = 1;

/// An io_uring instance holding one registration; unregistering on drop unpins synchronously
/// (closing the fd alone defers the teardown to a kernel worker, so VmPin would lag).
struct Ring {
    fd: OwnedFd,
    registered: bool,
}

impl Ring {
    /// A ring with the smallest queues. Since Linux 6.13 the kernel charges the ring's own
    /// pages (2 with one entry) to the user's locked_vm, so this call can be the one refused.
    fn new() -> io::Result<Ring> {
        let mut params = IoUringParams::default();
        // SAFETY: io_uring_setup(entries, params) with a valid, writable params struct.
        let ret =
            unsafe { libc::syscall(libc::SYS_io_uring_setup, 1 as libc::c_uint, &mut params as *mut IoUringParams) };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        let raw = i32::try_from(ret).map_err(|_| io::Error::other(format!("returned {ret}, not a descriptor")))?;
        // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
        Ok(Ring { fd: unsafe { OwnedFd::from_raw_fd(raw) }, registered: false })
    }

    fn setup_error(source: io::Error) -> DrillError {
        let hint = match source.raw_os_error() {
            Some(libc::ENOSYS) => " (kernel built without io_uring; use --mode lock)",
            Some(libc::EPERM) => {
                " (io_uring disabled: see /proc/sys/kernel/io_uring_disabled and io_uring_group; use --mode lock)"
            }
            Some(libc::EMFILE) | Some(libc::ENFILE) => " (out of file descriptors: raise --step-mib or ulimit -n)",
            _ => "",
        };
        DrillError::Syscall { call: "io_uring_setup", source, hint }
    }

    /// Registers `region` as fixed buffers (several iovecs when it is larger than io_uring's
    /// per-buffer maximum). The error carries the kernel's errno.
    fn register(&mut self, region: &Region) -> io::Result<()> {
        let base = region.addr.cast::<u8>();
        let iovecs: Vec<libc::iovec> = buffer_spans(region.len)
            .map(|(offset, len)| libc::iovec {
                // SAFETY: buffer_spans keeps offset + len within the mapping.
                iov_base: unsafe { base.add(offset) }.cast::<c_void>(),
                iov_len: len,
            })
            .collect();
        let count = libc::c_uint::try_from(iovecs.len()).map_err(io::Error::other)?;
        // SAFETY: io_uring_register on our ring fd with an iovec array valid for the call.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_io_uring_register,
                self.fd.as_raw_fd(),
                IORING_REGISTER_BUFFERS,
                iovecs.as_ptr(),
                count,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        self.registered = true;
        Ok(())
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        if self.registered {
            // SAFETY: unregister on our own ring fd; no argument array. A failure leaves the
            // close below to unpin asynchronously.
            unsafe {
                libc::syscall(
                    libc::SYS_io_uring_register,
                    self.fd.as_raw_fd(),
                    IORING_UNREGISTER_BUFFERS,
                    std::ptr::null::<c_void>(),
                    0 as libc::c_uint,
                )
            };
        }
    }
}

/// `(offset, len)` pieces of a buffer of `total` bytes, none above io_uring's per-buffer maximum.
fn buffer_spans(total: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..total).step_by(IO_URING_MAX_BUFFER).map(move |offset| (offset, IO_URING_MAX_BUFFER.min(total - offset)))
}

/// The result of one step.
pub(super) enum Grow {
    Done,
    Refused(Refused),
    /// A stop signal interrupted the call; nothing was added.
    Interrupted,
}

impl Held {
    /// Adds `len` bytes of pinned or locked memory. A refused region is dropped at once, so the
    /// hold shows only what the kernel accepted.
    pub(super) fn grow(&mut self, mode: Mode, len: usize, page: usize, stop: &AtomicI32) -> Result<Grow, DrillError> {
        let mut region = Region::map(len, page)?;
        loop {
            let (call, result) = match mode {
                Mode::Pin => match Ring::new() {
                    // Only the memlock gate makes a refusal here; EPERM means io_uring is disabled.
                    Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => ("io_uring_setup", Err(e)),
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => ("io_uring_setup", Err(e)),
                    Err(e) => return Err(Ring::setup_error(e)),
                    Ok(mut ring) => {
                        let registered = ring.register(&region);
                        if registered.is_ok() {
                            self.rings.push(ring);
                        }
                        ("io_uring_register", registered)
                    }
                },
                Mode::Rdma => {
                    let Some(device) = &self.device else {
                        return Err(DrillError::syscall("ibv_reg_mr", io::Error::other("no device open")));
                    };
                    // SAFETY: the region outlives the MR: `mrs` drop before `regions`.
                    let registered = unsafe { device.register(region.addr, region.len) };
                    let result = registered.map(|mr| self.mrs.push(mr));
                    ("ibv_reg_mr", result)
                }
                Mode::Lock => {
                    // SAFETY: mlock over the mapping this region owns.
                    let result = if unsafe { libc::mlock(region.addr, region.len) } == 0 {
                        region.locked = true;
                        Ok(())
                    } else {
                        Err(io::Error::last_os_error())
                    };
                    ("mlock", result)
                }
            };
            match result {
                Ok(()) => {
                    self.regions.push(region);
                    return Ok(Grow::Done);
                }
                // A signal during pinning: retry unless it was one asking us to stop.
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {
                    if stop.load(Ordering::Relaxed) != 0 {
                        return Ok(Grow::Interrupted);
                    }
                }
                Err(e) => {
                    if let Some(errno) = e.raw_os_error().and_then(Refusal::from_errno) {
                        return Ok(Grow::Refused(Refused { errno, call }));
                    }
                    return Err(DrillError::syscall(call, e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drill::MIB;

    #[test]
    fn steps_above_one_gib_are_registered_in_pieces() {
        const GIB: usize = 1 << 30;
        assert_eq!(buffer_spans(MIB as usize).collect::<Vec<_>>(), [(0, MIB as usize)]);
        assert_eq!(buffer_spans(GIB).collect::<Vec<_>>(), [(0, GIB)]);
        assert_eq!(buffer_spans(GIB + 4096).collect::<Vec<_>>(), [(0, GIB), (GIB, 4096)]);
        let spans: Vec<_> = buffer_spans(5 * GIB / 2).collect();
        assert_eq!(spans, [(0, GIB), (GIB, GIB), (2 * GIB, GIB / 2)]);
        assert_eq!(buffer_spans(0).count(), 0);
    }
}
