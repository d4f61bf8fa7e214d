//! The drill's report: one event per line, as logfmt-style text or one JSON object.

use std::time::Duration;

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::{Mode, MIB};
use memlock_kernel::pid_limits::{Limit, MemlockLimits};

/// A refusal the drill is looking for: the kernel said no to more pinned or locked memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Over the soft RLIMIT_MEMLOCK (or out of memory).
    Enomem,
    /// Soft limit 0 without CAP_IPC_LOCK.
    Eperm,
    /// mlock: some pages could not be locked.
    Eagain,
}

impl Refusal {
    pub(crate) fn from_errno(errno: i32) -> Option<Self> {
        match errno {
            libc::ENOMEM => Some(Refusal::Enomem),
            libc::EPERM => Some(Refusal::Eperm),
            libc::EAGAIN => Some(Refusal::Eagain),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Refusal::Enomem => "ENOMEM",
            Refusal::Eperm => "EPERM",
            Refusal::Eagain => "EAGAIN",
        }
    }

    pub fn errno(self) -> i32 {
        match self {
            Refusal::Enomem => libc::ENOMEM,
            Refusal::Eperm => libc::EPERM,
            Refusal::Eagain => libc::EAGAIN,
        }
    }
}

/// Which call refused, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub errno: Refusal,
    /// `io_uring_register`, `io_uring_setup` (its ring pages count against the limit too),
    /// `ibv_reg_mr` or `mlock`.
    pub call: &'static str,
}

/// VmPin and VmLck as read back from `/proc/self/status`; `None` when unreadable or absent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub vm_pin: Option<u64>,
    pub(crate) vm_lck: Option<u64>,
}

/// How the ramp ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    MaxReached,
    Refused(Refusal),
    /// SIGINT or SIGTERM arrived before the ramp ended.
    Interrupted,
}

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Outcome::MaxReached => "max_reached",
            Outcome::Refused(_) => "refused",
            Outcome::Interrupted => "interrupted",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Start {
        mode: Mode,
        step_bytes: u64,
        max_bytes: u64,
        interval: Duration,
        hold: Duration,
        /// RLIMIT_MEMLOCK; `None` when getrlimit failed.
        memlock: Option<MemlockLimits>,
        cap_ipc_lock: Option<bool>,
        mem_available: u64,
        pid: u32,
        uid: u32,
    },
    Step {
        step: u64,
        requested: u64,
        counters: Counters,
        refused: Option<Refused>,
        reached: u64,
    },
    /// `--locked-mib` is locked and held.
    Locked {
        bytes: u64,
        counters: Counters,
    },
    Hold {
        reached: u64,
        hold: Duration,
    },
    Released {
        outcome: Outcome,
        reached: u64,
        counters: Counters,
        signal: Option<i32>,
    },
}

/// `1MiB`, `1536KiB`, `10B`: exact, and short for the sizes a drill uses.
fn size(bytes: u64) -> String {
    if bytes != 0 && bytes % MIB == 0 {
        format!("{}MiB", bytes / MIB)
    } else if bytes != 0 && bytes % 1024 == 0 {
        format!("{}KiB", bytes / 1024)
    } else {
        format!("{bytes}B")
    }
}

/// /proc/self/status units, so the line can be compared with the file by eye.
fn kb(bytes: Option<u64>) -> String {
    match bytes {
        Some(b) => format!("{}kB", b / 1024),
        None => "?".to_owned(),
    }
}

fn limit_text(limit: Option<Limit>) -> String {
    match limit {
        Some(Limit::Bytes(bytes)) => bytes.to_string(),
        Some(Limit::Unlimited) => "unlimited".to_owned(),
        None => "?".to_owned(),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

impl Event {
    /// One logfmt-style line (no newline): `time event=... key=value ...`.
    pub fn text(&self, time: &str) -> String {
        match self {
            Event::Start {
                mode,
                step_bytes,
                max_bytes,
                interval,
                hold,
                memlock,
                cap_ipc_lock,
                mem_available,
                pid,
                uid,
            } => format!(
                "{time} event=start mode={} step={} max={} interval={}ms hold={}s memlock_soft={} memlock_hard={} \
                    cap_ipc_lock={} mem_available={} pid={pid} uid={uid}",
                mode.as_str(),
                size(*step_bytes),
                size(*max_bytes),
                interval.as_millis(),
                hold.as_secs(),
                limit_text(memlock.map(|l| l.soft)),
                limit_text(memlock.map(|l| l.hard)),
                cap_ipc_lock.map_or("unknown", |c| if c { "yes" } else { "no" }),
                kb(Some(*mem_available)),
            ),
            Event::Step { step, requested, counters, refused, reached } => {
                let mut line = format!(
                    "{time} event=step step={step} requested={} vmpin={} vmlck={} result=",
                    size(*requested),
                    kb(counters.vm_pin),
                    kb(counters.vm_lck)
                );
                match refused {
                    None => line.push_str("ok"),
                    Some(Refused { errno, call }) => line.push_str(&format!(
                        "{} errno={} call={call} reached={}",
                        errno.name(),
                        errno.errno(),
                        size(*reached)
                    )),
                }
                line
            }
            Event::Locked { bytes, counters } => format!(
                "{time} event=locked bytes={} vmpin={} vmlck={}",
                size(*bytes),
                kb(counters.vm_pin),
                kb(counters.vm_lck)
            ),
            Event::Hold { reached, hold } => format!(
                "{time} event=hold reached={} \
                seconds={}",
                size(*reached),
                hold.as_secs()
            ),
            Event::Released { outcome, reached, counters, signal } => {
                let mut line = format!("{time} event=released outcome={}", outcome.name());
                if let Outcome::Refused(r) = outcome {
                    line.push_str(&format!(" errno={}", r.name()));
                }
                line.push_str(&format!(
                    " reached={} vmpin={} \
                    vmlck={}",
                    size(*reached),
                    kb(counters.vm_pin),
                    kb(counters.vm_lck)
                ));
                if let Some(s) = signal {
                    line.push_str(&format!(" signal={}", signal_name(*s)));
                }
                line
            }
        }
    }

    /// One JSON object (no newline), fields in the order scripts and docs/check.md know. Sizes
    /// are bytes; `null` means unknown, or unlimited for the rlimits. Fails only if serde_json
    /// does, which it does not on these plain fields.
    pub fn json(&self, time: &str) -> Result<String, serde_json::Error> {
        let line = Line { time, body: self };
        serde_json::to_string(&line)
    }
}

/// An event as one JSON object: `time` first, then the event's own fields.
struct Line<'a> {
    time: &'a str,
    body: &'a Event,
}

impl Serialize for Line<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("time", self.time)?;
        match *self.body {
            Event::Start {
                mode,
                step_bytes,
                max_bytes,
                interval,
                hold,
                memlock,
                cap_ipc_lock,
                mem_available,
                pid,
                uid,
            } => {
                map.serialize_entry("event", "start")?;
                map.serialize_entry("mode", mode.as_str())?;
                map.serialize_entry("step_bytes", &step_bytes)?;
                map.serialize_entry("max_bytes", &max_bytes)?;
                map.serialize_entry("interval_ms", &interval.as_millis())?;
                map.serialize_entry("hold_seconds", &hold.as_secs())?;
                map.serialize_entry("memlock_soft_bytes", &memlock.and_then(|l| l.soft.bytes()))?;
                map.serialize_entry("memlock_hard_bytes", &memlock.and_then(|l| l.hard.bytes()))?;
                map.serialize_entry("cap_ipc_lock", &cap_ipc_lock)?;
                map.serialize_entry("mem_available_bytes", &mem_available)?;
                map.serialize_entry("pid", &pid)?;
                map.serialize_entry("uid", &uid)?;
            }
            Event::Step { step, requested, counters, refused, reached } => {
                map.serialize_entry("event", "step")?;
                map.serialize_entry("step", &step)?;
                map.serialize_entry("requested_bytes", &requested)?;
                map.serialize_entry("vmpin_bytes", &counters.vm_pin)?;
                map.serialize_entry("vmlck_bytes", &counters.vm_lck)?;
                match refused {
                    None => map.serialize_entry("result", "ok")?,
                    Some(Refused { errno, call }) => {
                        map.serialize_entry("result", errno.name())?;
                        map.serialize_entry("errno", &errno.errno())?;
                        map.serialize_entry("call", call)?;
                        map.serialize_entry("reached_bytes", &reached)?;
                    }
                }
            }
            Event::Locked { bytes, counters } => {
                map.serialize_entry("event", "locked")?;
                map.serialize_entry("locked_bytes", &bytes)?;
                map.serialize_entry("vmpin_bytes", &counters.vm_pin)?;
                map.serialize_entry("vmlck_bytes", &counters.vm_lck)?;
            }
            Event::Hold { reached, hold } => {
                map.serialize_entry("event", "hold")?;
                map.serialize_entry("reached_bytes", &reached)?;
                map.serialize_entry("hold_seconds", &hold.as_secs())?;
            }
            Event::Released { outcome, reached, counters, signal } => {
                map.serialize_entry("event", "released")?;
                map.serialize_entry("outcome", outcome.name())?;
                let errno = match outcome {
                    Outcome::Refused(r) => Some(r.name()),
                    _ => None,
                };
                map.serialize_entry("errno", &errno)?;
                map.serialize_entry("reached_bytes", &reached)?;
                map.serialize_entry("vmpin_bytes", &counters.vm_pin)?;
                map.serialize_entry("vmlck_bytes", &counters.vm_lck)?;
                map.serialize_entry("signal", &signal.map(signal_name))?;
            }
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "2026-11-30T08:19:19.123Z";

    fn counters(pin_kb: u64, lck_kb: u64) -> Counters {
        Counters { vm_pin: Some(pin_kb * 1024), vm_lck: Some(lck_kb * 1024) }
    }

    #[test]
    fn step_lines() {
        let ok =
            Event::Step { step: 3, requested: 3 * MIB, counters: counters(3072, 0), refused: None, reached: 3 * MIB };
        assert_eq!(
            ok.text(T),
            "2026-11-30T08:19:19.123Z event=step step=3 requested=3MiB vmpin=3072kB vmlck=0kB result=ok"
        );
        assert_eq!(
            ok.json(T).unwrap(),
            concat!(
                r#"{"time":"2026-11-30T08:19:19.123Z","event":"step","step":3,"requested_bytes":3145728,"#,
                r#""vmpin_bytes":3145728,"vmlck_bytes":0,"result":"ok"}"#,
            )
        );
        let refused = Event::Step {
            step: 5,
            requested: 5 * MIB,
            counters: counters(4096, 0),
            refused: Some(Refused { errno: Refusal::Enomem, call: "io_uring_register" }),
            reached: 4 * MIB,
        };
        assert_eq!(
            refused.text(T),
            "2026-11-30T08:19:19.123Z event=step step=5 requested=5MiB vmpin=4096kB vmlck=0kB result=ENOMEM errno=12 \
                call=io_uring_register reached=4MiB"
        );
        assert_eq!(
            refused.json(T).unwrap(),
            concat!(
                r#"{"time":"2026-11-30T08:19:19.123Z","event":"step","step":5,"requested_bytes":5242880,"#,
                r#""vmpin_bytes":4194304,"vmlck_bytes":0,"result":"ENOMEM","errno":12,"#,
                r#""call":"io_uring_register","reached_bytes":4194304}"#,
            )
        );
        let unknown = Event::Step {
            step: 1,
            requested: MIB,
            counters: Counters::default(),
            refused: Some(Refused { errno: Refusal::Eagain, call: "mlock" }),
            reached: 0,
        };
        assert_eq!(
            unknown.text(T),
            format!(
                "{T} event=step step=1 requested=1MiB vmpin=? vmlck=? result=EAGAIN errno=11 call=mlock reached=0B"
            )
        );
        assert!(unknown.json(T).unwrap().contains(
            r#""vmpin_bytes":null,"vmlck_bytes":null,"result":"EAGAIN","errno":11,"call":"mlock","reached_bytes":0}"#
        ));
    }

    #[test]
    fn start_hold_and_released_lines() {
        let start = Event::Start {
            mode: Mode::Pin,
            step_bytes: MIB,
            max_bytes: 16 * MIB,
            interval: Duration::from_millis(100),
            hold: Duration::from_secs(2),
            memlock: Some(MemlockLimits { soft: Limit::Bytes(4 << 20), hard: Limit::Unlimited }),
            cap_ipc_lock: Some(false),
            mem_available: 23604268 * 1024,
            pid: 42,
            uid: 65534,
        };
        assert_eq!(
            start.text(T),
            format!(
                "{T} event=start mode=pin step=1MiB max=16MiB interval=100ms hold=2s memlock_soft=4194304 \
                memlock_hard=unlimited cap_ipc_lock=no mem_available=23604268kB pid=42 uid=65534"
            )
        );
        assert_eq!(
            start.json(T).unwrap(),
            format!(
                concat!(
                    r#"{{"time":"{T}","event":"start","mode":"pin","step_bytes":1048576,"max_bytes":16777216,"#,
                    r#""interval_ms":100,"hold_seconds":2,"memlock_soft_bytes":4194304,"#,
                    r#""memlock_hard_bytes":null,"cap_ipc_lock":false,"mem_available_bytes":24170770432,"#,
                    r#""pid":42,"uid":65534}}"#,
                ),
                T = T
            )
        );
        let hold = Event::Hold { reached: 4 * MIB, hold: Duration::from_secs(2) };
        assert_eq!(hold.text(T), format!("{T} event=hold reached=4MiB seconds=2"));
        assert_eq!(
            hold.json(T).unwrap(),
            format!(r#"{{"time":"{T}","event":"hold","reached_bytes":4194304,"hold_seconds":2}}"#)
        );

        let refused = Event::Released {
            outcome: Outcome::Refused(Refusal::Enomem),
            reached: 4 * MIB,
            counters: counters(0, 0),
            signal: None,
        };
        assert_eq!(
            refused.text(T),
            format!("{T} event=released outcome=refused errno=ENOMEM reached=4MiB vmpin=0kB vmlck=0kB")
        );
        assert_eq!(
            refused.json(T).unwrap(),
            format!(
                concat!(
                    r#"{{"time":"{T}","event":"released","outcome":"refused","errno":"ENOMEM","#,
                    r#""reached_bytes":4194304,"vmpin_bytes":0,"vmlck_bytes":0,"signal":null}}"#,
                ),
                T = T
            )
        );
        let interrupted = Event::Released {
            outcome: Outcome::Interrupted,
            reached: 2 * MIB,
            counters: counters(0, 0),
            signal: Some(libc::SIGTERM),
        };
        assert_eq!(
            interrupted.text(T),
            format!("{T} event=released outcome=interrupted reached=2MiB vmpin=0kB vmlck=0kB signal=SIGTERM")
        );
        assert!(interrupted
            .json(T)
            .unwrap()
            .ends_with(r#""errno":null,"reached_bytes":2097152,"vmpin_bytes":0,"vmlck_bytes":0,"signal":"SIGTERM"}"#));
        let done = Event::Released {
            outcome: Outcome::MaxReached,
            reached: 32 * MIB,
            counters: counters(0, 0),
            signal: Some(libc::SIGINT),
        };
        assert_eq!(
            done.text(T),
            format!("{T} event=released outcome=max_reached reached=32MiB vmpin=0kB vmlck=0kB signal=SIGINT")
        );
    }

    /// getrlimit failing is unknown, not unlimited: `?` in the text, `null` in the JSON as for
    /// the counters.
    #[test]
    fn limits_that_could_not_be_read_are_unknown() {
        let start = Event::Start {
            mode: Mode::Lock,
            step_bytes: MIB,
            max_bytes: 2 * MIB,
            interval: Duration::from_millis(100),
            hold: Duration::from_secs(0),
            memlock: None,
            cap_ipc_lock: None,
            mem_available: 1 << 30,
            pid: 1,
            uid: 0,
        };
        assert!(start.text(T).contains(" memlock_soft=? memlock_hard=? cap_ipc_lock=unknown "), "{}", start.text(T));
        assert!(start
            .json(T)
            .unwrap()
            .contains(r#""memlock_soft_bytes":null,"memlock_hard_bytes":null,"cap_ipc_lock":null,"#));
    }

    #[test]
    fn sizes_are_exact() {
        assert_eq!(size(0), "0B");
        assert_eq!(size(MIB), "1MiB");
        assert_eq!(size(1536 * 1024), "1536KiB");
        assert_eq!(size(4097), "4097B");
        assert_eq!(kb(Some(4096 * 1024)), "4096kB");
        assert_eq!(kb(None), "?");
    }

    #[test]
    fn only_the_limit_errnos_are_refusals() {
        assert_eq!(Refusal::from_errno(libc::ENOMEM), Some(Refusal::Enomem));
        assert_eq!(Refusal::from_errno(libc::EPERM), Some(Refusal::Eperm));
        assert_eq!(Refusal::from_errno(libc::EAGAIN), Some(Refusal::Eagain));
        assert_eq!(Refusal::from_errno(libc::EFAULT), None);
        assert_eq!(Refusal::from_errno(libc::EINVAL), None);
        for r in [Refusal::Enomem, Refusal::Eperm, Refusal::Eagain] {
            assert_eq!(Refusal::from_errno(r.errno()), Some(r));
        }
    }
}
