//! Lines of a tracefs `trace_pipe` that carry the `failures` collector's kprobe events
//! (the failures collector).
//!
//! The kernel prints each event as (kernel/trace/trace_output.c, `trace_print_context`):
//! `"%16s-%-7d "` (the comm from the saved-cmdlines cache, at most TASK_COMM_LEN - 1 = 15 bytes,
//! so always exactly 16 bytes wide, then the pid), `"(%7d) "` or `"(-------) "` when the
//! `record-tgid` option is on, `"[%03d] "` (the CPU), the latency flags when `irq-info` is on
//! (`trace_print_lat_fmt`: 4 or 5 characters), the time (`trace_print_time`: `" %5lu.%06lu"`,
//! or `" %12llu"` with a counter clock), `": "`, then the event (kernel/trace/trace_kprobe.c,
//! `print_kprobe_event`: `"NAME: (SYM+OFF/SIZE)"`; `print_kretprobe_event`:
//! `"NAME: (CALLER+OFF/SIZE <- FUNC)"`) and its arguments (`print_probe_args`: `" NAME=VALUE"`,
//! strings as `"\"%s\""`, unescaped). A synthetic event (kernel/trace/trace_events_synth.c,
//! `print_synth_event`) has no probe site: `"NAME: "`, then its fields `"NAME=VALUE"` joined by
//! one space. Between events, `print_trace_line` (kernel/trace/trace.c)
//! writes `"CPU:%d [LOST %lu EVENTS]"` or `"CPU:%d [LOST EVENTS]"` when the ring buffer
//! overwrote events that were not read.
//!
//! A comm is any 15 bytes but NUL: spaces, `-`, `:`, brackets, quotes, newlines. The header's
//! comm is therefore taken by position (16 bytes, right-aligned), never by searching for a
//! separator, and a string argument (the probe's `$comm`) must be the last one, whose value runs
//! to the line's final quote. A comm with a newline splits its event over two lines that are
//! both rejected (the first has no complete header or an unterminated string, the second is
//! shorter than 16 bytes before its `-`): such an event is counted as unparsed, never misread.

/// The header's comm field: `%16s` of a comm of at most 15 bytes.
const COMM_WIDTH: usize = 16;

/// At most this many bytes of a line are looked at: an event of the collector's probes is
/// under 200; anything longer is not one of them.
pub const MAX_LINE_BYTES: usize = 1024;

/// One line of trace_pipe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line<'a> {
    Event(Event<'a>),
    /// Events of `cpu` were overwritten before they were read; `None`: how many is unknown.
    Lost {
        cpu: u32,
        events: Option<u64>,
    },
}

/// The header and body of one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event<'a> {
    /// The comm the trace's saved-cmdlines cache had for the pid (`<...>` when it had none),
    /// without the padding.
    pub comm: &'a [u8],
    /// The task's id (a thread's, not its process's).
    pub pid: u32,
    /// With `record-tgid`: the process's id, `None` when unknown or not recorded.
    pub tgid: Option<u32>,
    pub cpu: u32,
    /// The timestamp as printed (microseconds for the default clocks, ticks for counters).
    pub timestamp: u64,
    /// The event's name (without its group: trace_pipe does not print it).
    pub name: &'a str,
    /// Where the probe hit: the probed symbol (`ib_umem_get+0x0/0x520 [ib_core]`) of an entry
    /// probe; for a return probe, the function returned from (`ib_umem_get`); empty for a
    /// synthetic event, which has no probe site.
    pub function: &'a str,
    /// A return probe's caller (`ib_uverbs_reg_mr+0x12a/0x2d0 [ib_uverbs]`); `None` for an
    /// entry probe.
    pub caller: Option<&'a str>,
    /// The arguments in order.
    pub args: Vec<(&'a str, Value<'a>)>,
}

/// A probe argument as printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value<'a> {
    /// A number, signed or not (`u64`, `s32`, ... types; `x` types are `0x`-prefixed hex).
    Number(i128),
    /// A `string` argument, between its quotes, as the kernel copied it.
    Str(&'a [u8]),
    /// The kernel could not read the argument (`(fault)`).
    Fault,
}

impl<'a> Event<'a> {
    /// A named numeric argument.
    pub fn number(&self, name: &str) -> Option<i128> {
        self.args.iter().find_map(|(n, v)| match v {
            Value::Number(x) if *n == name => Some(*x),
            _ => None,
        })
    }

    /// A named string argument.
    pub fn string(&self, name: &str) -> Option<&'a [u8]> {
        self.args.iter().find_map(|(n, v)| match v {
            Value::Str(s) if *n == name => Some(*s),
            _ => None,
        })
    }

    /// The bare name of the probed function: the symbol without offset and module.
    #[cfg(test)]
    pub(crate) fn function_name(&self) -> &'a str {
        let symbol = self.function.split(' ').next().unwrap_or(self.function);
        symbol.split('+').next().unwrap_or(symbol)
    }
}

/// Why a line is not an event or a lost-events marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unparsed(pub &'static str);

impl std::fmt::Display for Unparsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// Parses one line, which must end in its newline: the kernel hands a line that does not fit
/// a read over in the next one, so a line without it was cut short (and a cut number would
/// read as a smaller one).
pub fn parse_line(line: &[u8]) -> Result<Line<'_>, Unparsed> {
    let Some(line) = line.strip_suffix(b"\n") else {
        return Err(Unparsed("no newline: a line cut short"));
    };
    if line.len() > MAX_LINE_BYTES {
        return Err(Unparsed("longer than any event of the collector's probes"));
    }
    if line.contains(&b'\n') {
        return Err(Unparsed("more than one line"));
    }
    if let Some(rest) = line.strip_prefix(b"CPU:") {
        return parse_lost(rest);
    }
    parse_event(line).map(Line::Event)
}

fn parse_lost(rest: &[u8]) -> Result<Line<'_>, Unparsed> {
    let bad = Unparsed("a CPU: line that is not a lost-events marker");
    let text = std::str::from_utf8(rest).map_err(|_| bad.clone())?;
    let (cpu, rest) = text.split_once(' ').ok_or(bad.clone())?;
    let cpu = digits(cpu).ok_or(bad.clone())?;
    let cpu = u32::try_from(cpu).map_err(|_| bad.clone())?;
    if rest == "[LOST EVENTS]" {
        return Ok(Line::Lost { cpu, events: None });
    }
    let count = rest.strip_prefix("[LOST ").and_then(|r| r.strip_suffix(" EVENTS]")).ok_or(bad.clone())?;
    Ok(Line::Lost { cpu, events: Some(digits(count).ok_or(bad)?) })
}

fn digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn parse_event(line: &[u8]) -> Result<Event<'_>, Unparsed> {
    if line.len() <= COMM_WIDTH || line[COMM_WIDTH] != b'-' {
        return Err(Unparsed("no comm-pid header (the 16-byte comm and '-')"));
    }
    let comm = trim_leading_spaces(&line[..COMM_WIDTH]);
    // Past the comm, everything the kernel printed is ASCII but the string arguments.
    let rest = &line[COMM_WIDTH + 1..];
    let (head, strings) = split_at_first_quote(rest);
    let head = std::str::from_utf8(head).map_err(|_| Unparsed("bytes that are not text outside a string"))?;

    let (pid, mut text) = leading_number(head).ok_or(Unparsed("no pid after the comm"))?;
    let pid = u32::try_from(pid).map_err(|_| Unparsed("pid out of range"))?;
    text = text.trim_start_matches(' ');
    let mut tgid = None;
    if let Some(inner) = text.strip_prefix('(') {
        let (value, after) = inner.split_once(") ").ok_or(Unparsed("unterminated tgid"))?;
        let value = value.trim_start_matches(' ');
        if !value.bytes().all(|b| b == b'-') {
            tgid = Some(u32::try_from(digits(value).ok_or(Unparsed("tgid not a number"))?).unwrap_or(0))
                .filter(|&t| t != 0);
        }
        text = after;
    }
    let inner = text.strip_prefix('[').ok_or(Unparsed("no [cpu]"))?;
    let (cpu, after) = inner.split_once("] ").ok_or(Unparsed("unterminated [cpu]"))?;
    let cpu = u32::try_from(digits(cpu).ok_or(Unparsed("cpu not a number"))?).map_err(|_| Unparsed("cpu range"))?;
    text = after;
    // The latency flags, when printed, are one token of 4 or 5 characters none of which is a
    // digit in the first place (irqs-off is one of ".dDbX").
    if text.as_bytes().first().is_some_and(|b| !b.is_ascii_digit() && *b != b' ') {
        let (flags, after) = text.split_once(' ').ok_or(Unparsed("nothing after the flags"))?;
        if !(4..=5).contains(&flags.len()) {
            return Err(Unparsed("latency flags of an unknown width"));
        }
        text = after;
    }
    let (stamp, after) = text.trim_start_matches(' ').split_once(": ").ok_or(Unparsed("no timestamp"))?;
    let timestamp = match stamp.split_once('.') {
        Some((secs, micros)) if micros.len() == 6 => digits(secs)
            .zip(digits(micros))
            .and_then(|(s, u)| s.checked_mul(1_000_000)?.checked_add(u))
            .ok_or(Unparsed("timestamp not a number"))?,
        Some(_) => return Err(Unparsed("timestamp not seconds.microseconds")),
        None => digits(stamp).ok_or(Unparsed("timestamp not a number"))?,
    };
    text = after;
    let (name, after) = text.split_once(": ").ok_or(Unparsed("no event name"))?;
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(Unparsed("event name not an identifier"));
    }
    let (function, caller, args) = match after.strip_prefix('(') {
        Some(after) => {
            let (site, args_text) = after.split_once(')').ok_or(Unparsed("unterminated probe site"))?;
            let (function, caller) = match site.split_once(" <- ") {
                Some((caller, function)) => (function, Some(caller)),
                None => (site, None),
            };
            if function.is_empty() || caller.is_some_and(str::is_empty) {
                return Err(Unparsed("empty probe site"));
            }
            (function, caller, parse_args(args_text, strings)?)
        }
        // A synthetic event (kernel/trace/trace_events_synth.c, `print_synth_event`): no probe
        // site, its fields `NAME=VALUE` separated by one space right after the name's ": ".
        None if after.is_empty() && strings.is_empty() => ("", None, Vec::new()),
        None if after.is_empty() => return Err(Unparsed("a quote right after the event name")),
        None => ("", None, parse_args_from(after, strings, false)?),
    };
    Ok(Event { comm, pid, tgid, cpu, timestamp, name, function, caller, args })
}

fn trim_leading_spaces(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|&b| b != b' ').unwrap_or(bytes.len());
    &bytes[start..]
}

/// Splits before the first `"`: what the kernel formatted itself, and the string arguments.
fn split_at_first_quote(bytes: &[u8]) -> (&[u8], &[u8]) {
    match bytes.iter().position(|&b| b == b'"') {
        Some(at) => bytes.split_at(at),
        None => (bytes, &[]),
    }
}

fn leading_number(text: &str) -> Option<(u64, &str)> {
    let end = text.bytes().position(|b| !b.is_ascii_digit()).unwrap_or(text.len());
    Some((digits(&text[..end])?, &text[end..]))
}

/// `" NAME=VALUE"` repeated; `strings` is the line from the first quote on, which may only
/// be the value of the last argument.
fn parse_args<'a>(text: &'a str, strings: &'a [u8]) -> Result<Vec<(&'a str, Value<'a>)>, Unparsed> {
    parse_args_from(text, strings, true)
}

/// [`parse_args`], the first argument preceded by a space when `leading_space`.
fn parse_args_from<'a>(
    text: &'a str,
    strings: &'a [u8],
    leading_space: bool,
) -> Result<Vec<(&'a str, Value<'a>)>, Unparsed> {
    let mut args = Vec::new();
    let mut rest = text;
    let mut first = !leading_space;
    while !rest.is_empty() {
        if !std::mem::take(&mut first) {
            rest = rest.strip_prefix(' ').ok_or(Unparsed("arguments not separated by a space"))?;
        }
        let (name, after) = rest.split_once('=').ok_or(Unparsed("an argument without '='"))?;
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(Unparsed("argument name not an identifier"));
        }
        if after.is_empty() {
            if strings.is_empty() {
                return Err(Unparsed("an argument without a value"));
            }
            // The string, to the line's last quote (a comm can hold quotes itself).
            let inner = &strings[1..];
            let Some(end) = inner.iter().rposition(|&b| b == b'"') else {
                return Err(Unparsed("unterminated string argument (a truncated line?)"));
            };
            if end + 1 != inner.len() {
                return Err(Unparsed("text after the string argument"));
            }
            args.push((name, Value::Str(&inner[..end])));
            return Ok(args);
        }
        let (value, next) = after.split_at(after.find(' ').unwrap_or(after.len()));
        args.push((name, number(value)?));
        rest = next;
    }
    if !strings.is_empty() {
        return Err(Unparsed("a quote outside a string argument"));
    }
    Ok(args)
}

fn number(value: &str) -> Result<Value<'_>, Unparsed> {
    if value == "(fault)" {
        return Ok(Value::Fault);
    }
    let bad = Unparsed("argument value not a number");
    let (negative, magnitude) = match value.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, value),
    };
    let parsed = match magnitude.strip_prefix("0x") {
        Some(hex) if !hex.is_empty() && hex.len() <= 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u64::from_str_radix(hex, 16).map_err(|_| bad.clone())?
        }
        Some(_) => return Err(bad),
        None => digits(magnitude).ok_or(bad.clone())?,
    };
    let parsed = i128::from(parsed);
    Ok(Value::Number(if negative { -parsed } else { parsed }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As a 6.1 kernel prints them (ib_core module, irq-info on, the collector's probes).
    const ENTRY: &str = "       ib_reg_mr-612     [001] ..... 12345.678901: ib_umem_get_entry: \
        (ib_umem_get+0x0/0x520 [ib_core]) size=1048576\n";
    const RETURN: &str = "       ib_reg_mr-612     [001] ..... 12345.679012: ib_umem_get_return: \
        (ib_uverbs_reg_mr+0x12a/0x2d0 [ib_uverbs] <- ib_umem_get) ret=-12 comm=\"ib_reg_mr\"\n";

    /// The synthetic event of the kernel's pairing, as the 6.1 guest printed it, then its return.
    const SYNTHETIC: &str = "           <...>-144     [001] ...2.    17.052414: memlock_exporter_9_0_do_mlock_fail: \
        size=1048576 ret=-12\n";

    fn event(line: &[u8]) -> Event<'_> {
        match parse_line(line) {
            Ok(Line::Event(e)) => e,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(line)),
        }
    }

    #[test]
    fn an_entry_event() {
        let e = event(ENTRY.as_bytes());
        assert_eq!(e.comm, b"ib_reg_mr");
        assert_eq!((e.pid, e.tgid, e.cpu, e.timestamp), (612, None, 1, 12_345_678_901));
        assert_eq!(e.name, "ib_umem_get_entry");
        assert_eq!(e.function, "ib_umem_get+0x0/0x520 [ib_core]");
        assert_eq!(e.function_name(), "ib_umem_get");
        assert_eq!(e.caller, None);
        assert_eq!(e.number("size"), Some(1_048_576));
        assert_eq!(e.number("ret"), None);
    }

    #[test]
    fn a_return_event() {
        let e = event(RETURN.as_bytes());
        assert_eq!(e.name, "ib_umem_get_return");
        assert_eq!(e.function_name(), "ib_umem_get");
        assert_eq!(e.caller, Some("ib_uverbs_reg_mr+0x12a/0x2d0 [ib_uverbs]"));
        assert_eq!(e.number("ret"), Some(-12));
        assert_eq!(e.string("comm"), Some(&b"ib_reg_mr"[..]));
    }

    #[test]
    fn a_synthetic_event() {
        let e = event(SYNTHETIC.as_bytes());
        assert_eq!((e.comm, e.pid, e.cpu, e.timestamp), (&b"<...>"[..], 144, 1, 17_052_414));
        assert_eq!(e.name, "memlock_exporter_9_0_do_mlock_fail");
        assert_eq!((e.function, e.caller), ("", None));
        assert_eq!((e.number("size"), e.number("ret")), (Some(1_048_576), Some(-12)));
        // No fields at all.
        let e = event(b"               x-1       [000] ..... 1.000000: s: \n");
        assert_eq!((e.name, e.args.len()), ("s", 0));
        for bad in [
            "               x-1       [000] ..... 1.000000: s:  size=1\n",
            "               x-1       [000] ..... 1.000000: s: size=1  ret=2\n",
            "               x-1       [000] ..... 1.000000: s: size=1 \n",
            "               x-1       [000] ..... 1.000000: s: \"x\"\n",
            "               x-1       [000] ..... 1.000000: s:size=1\n",
        ] {
            assert!(parse_line(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn hostile_comms_are_taken_by_position() {
        // 15 bytes at most: '-' and a fake pid, brackets and a fake cpu, colons, quotes, spaces.
        for comm in ["a-1 [000] x: y:", "[001] .... 1.0:", " lead-9 sp ce  ", "q\"uo\"te\" r=-1 \"", "-", "<...>"] {
            let line = format!(
                "{comm:>16}-4242    [007] d..1. 99.000001: do_mlock_return: (__x64_sys_mlock+0x1c/0x30 <- do_mlock) \
                 ret=-12 comm=\"{comm}\"\n"
            );
            let e = event(line.as_bytes());
            assert_eq!(e.comm, comm.trim_start_matches(' ').as_bytes(), "{line}");
            assert_eq!((e.pid, e.cpu, e.timestamp), (4242, 7, 99_000_001), "{line}");
            assert_eq!(e.function_name(), "do_mlock", "{line}");
            assert_eq!(e.number("ret"), Some(-12), "{line}");
            assert_eq!(e.string("comm"), Some(comm.as_bytes()), "{line}");
        }
        // A comm that is not UTF-8 is kept as bytes.
        let mut line =
            b"            \xff\xfe\x80x-7       [000] ..... 1.000000: e: (f+0x0/0x10) ret=-1 comm=\"".to_vec();
        line.extend_from_slice(b"\xff\xfe\x80x\"\n");
        let e = event(&line);
        assert_eq!(e.comm, b"\xff\xfe\x80x");
        assert_eq!(e.string("comm"), Some(&b"\xff\xfe\x80x"[..]));
    }

    #[test]
    fn a_comm_with_a_newline_is_rejected_in_both_halves() {
        let comm = "ab\ncdefghijklmn";
        let text =
            format!("{comm:>16}-4242    [007] ..... 1.000001: e_return: (c+0x1/0x2 <- f) ret=-12 comm=\"{comm}\"\n");
        for piece in text.split_inclusive('\n') {
            assert!(parse_line(piece.as_bytes()).is_err(), "{piece:?}");
        }
    }

    #[test]
    fn tgid_and_no_irq_info_and_counter_clocks() {
        let line =
            "          python-100     (     99) [002] 5.123456: ib_umem_get_entry: (ib_umem_get+0x0/0x10) size=1\n";
        let e = event(line.as_bytes());
        assert_eq!((e.pid, e.tgid, e.cpu, e.timestamp), (100, Some(99), 2, 5_123_456));
        let line = "          python-100     (-------) [002] ....  123456789012: n: (f+0x0/0x10) x=0x1f\n";
        let e = event(line.as_bytes());
        assert_eq!((e.tgid, e.timestamp, e.number("x")), (None, 123_456_789_012, Some(31)));
    }

    #[test]
    fn lost_events_markers() {
        assert_eq!(parse_line(b"CPU:3 [LOST 1024 EVENTS]\n"), Ok(Line::Lost { cpu: 3, events: Some(1024) }));
        assert_eq!(parse_line(b"CPU:0 [LOST EVENTS]\n"), Ok(Line::Lost { cpu: 0, events: None }));
        for bad in ["CPU:x [LOST 1 EVENTS]\n", "CPU:1 [LOST -1 EVENTS]\n", "CPU:1 [LOST 1 EVENT\n", "CPU:1\n"] {
            assert!(parse_line(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_truncation_is_rejected() {
        for line in [ENTRY, RETURN, SYNTHETIC, "CPU:3 [LOST 1024 EVENTS]\n"] {
            assert!(parse_line(line.as_bytes()).is_ok());
            for end in 0..line.len() {
                assert!(parse_line(&line.as_bytes()[..end]).is_err(), "{:?}", &line[..end]);
            }
        }
        // Cut inside the string and terminated: the kernel never prints that, and it is refused.
        let cut = format!("{}\n", &RETURN[..RETURN.len() - 3]);
        assert_eq!(parse_line(cut.as_bytes()), Err(Unparsed("unterminated string argument (a truncated line?)")));
    }

    #[test]
    fn other_lines_are_rejected() {
        for bad in [
            "\n",
            "# tracer: nop\n",
            "short-1 [000] .... 1.0: e: (f)\n",
            "               x-1       [000] ..... 1.000000: e: (f+0x0/0x10) size=12 extra\n",
            "               x-1       [000] ..... 1.000000: e: (f+0x0/0x10) size=1e3\n",
            "               x-1       [000] ..... 1.000000: e: (f+0x0/0x10) size=\n",
            "               x-1       [000] ..... 1.000000: e: (f+0x0/0x10) s\"=1\n",
            "               x-1       [000] ..... 1.000000: e: (f+0x0/0x10) a=\"x\" b=1\n",
            "               x-1       [000] ..... 1.00000: e: (f+0x0/0x10)\n",
            "               x-1       [000] ..... 1.000000: e v: (f+0x0/0x10)\n",
            "               x-99999999999 [000] ..... 1.000000: e: (f+0x0/0x10)\n",
            "               x-1       [000] ..... 1.000000: e: ( <- f)\n",
            "               x-1       [000] .. 1.000000: e: (f)\n",
        ] {
            assert!(parse_line(bad.as_bytes()).is_err(), "{bad:?}");
        }
        let mut long = vec![b'a'; MAX_LINE_BYTES + 1];
        long.push(b'\n');
        assert!(parse_line(&long).is_err());
    }

    #[test]
    fn values() {
        let line =
            "               x-1       [000] ..... 1.000000: e: (f+0x0/0x10) a=0xffffffffffffffff b=-4095 c=(fault)\n";
        let e = event(line.as_bytes());
        assert_eq!(e.number("a"), Some(i128::from(u64::MAX)));
        assert_eq!(e.number("b"), Some(-4095));
        assert_eq!(e.args[2], ("c", Value::Fault));
    }
}
