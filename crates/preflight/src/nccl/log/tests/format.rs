//! The reader against the log formats of real NCCL releases. Each
//! tests/fixtures/nccl-formats/<release>.txt holds the format strings scripts/nccl_wheels.py
//! (`formats`) took from that release's own libnccl.so, out of its PyPI wheel pinned by sha256:
//! not lines written by hand. Every format the reader depends on is filled in as printf would,
//! put behind the same release's debug prefix and read back, so a release whose formats change
//! fails here as soon as its fixture is added.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use super::*;

struct Release {
    name: String,
    /// `2.32.3`, from the file's name (`cu12-2.32.3`).
    number: String,
    formats: Vec<String>,
}

fn releases() -> Vec<Release> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/nccl-formats");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut paths: Vec<_> =
        entries.map(|e| e.unwrap().path()).filter(|p| p.extension() == Some("txt".as_ref())).collect();
    paths.sort();
    assert!(!paths.is_empty(), "no fixture in {}", dir.display());
    paths
        .iter()
        .map(|path| {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let number = name.split_once('-').map_or(name.as_str(), |(_, n)| n).to_owned();
            let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let formats = text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).map(unescape).collect();
            Release { name, number, formats }
        })
        .collect()
}

/// The fixture escapes `\n`, `\t` and `\\` to keep one format a line.
fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// (major, minor) of `2.32.3`.
fn minor(number: &str) -> (u32, u32) {
    let mut p = number.split('.').map(|p| p.parse().unwrap_or(0));
    (p.next().unwrap_or(0), p.next().unwrap_or(0))
}

#[derive(Debug, Clone)]
enum Arg {
    Int(i64),
    Str(String),
}

fn s(text: &str) -> Arg {
    Arg::Str(text.to_owned())
}

/// One printf conversion: `%[flags][width][.precision][length]kind`.
#[derive(Debug, Clone)]
struct Conv {
    /// Byte offsets of the `%` and past the kind.
    start: usize,
    end: usize,
    flags: String,
    width: usize,
    precision: Option<usize>,
    kind: char,
}

/// The conversions of a format in order (`%%` is none).
fn conversions(fmt: &str) -> Vec<Conv> {
    let b = fmt.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        if b.get(i) == Some(&b'%') {
            i += 1;
            continue;
        }
        let digits = |i: &mut usize| {
            let from = *i;
            while b.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            fmt[from..*i].parse::<usize>().ok()
        };
        let from = i;
        while b.get(i).is_some_and(|c| b"-+ #0".contains(c)) {
            i += 1;
        }
        let flags = fmt[from..i].to_owned();
        let width = digits(&mut i).unwrap_or(0);
        let precision = if b.get(i) == Some(&b'.') {
            i += 1;
            Some(digits(&mut i).unwrap_or(0))
        } else {
            None
        };
        // Length modifiers change the C type, not the text of a value that fits it.
        while b.get(i).is_some_and(|c| b"hlLqjzt".contains(c)) {
            i += 1;
        }
        let kind = *b.get(i).unwrap_or_else(|| panic!("{fmt:?}: a conversion cut short"));
        i += 1;
        out.push(Conv { start, end: i, flags, width, precision, kind: kind as char });
    }
    out
}

/// printf, for the conversions NCCL's formats use: d i u x X o p s c (and g of a whole number),
/// flags, width, precision.
fn printf(fmt: &str, args: &[Arg]) -> String {
    let convs = conversions(fmt);
    assert_eq!(convs.len(), args.len(), "{fmt:?}: {} conversions, {} values", convs.len(), args.len());
    let mut out = String::new();
    let mut at = 0;
    for (c, arg) in convs.iter().zip(args) {
        out.push_str(&fmt[at..c.start].replace("%%", "%"));
        at = c.end;
        let (sign, mut body) = match (c.kind, arg) {
            ('d' | 'i', Arg::Int(n)) => {
                let sign = if *n < 0 {
                    "-"
                } else if c.flags.contains('+') {
                    "+"
                } else {
                    ""
                };
                (sign, n.unsigned_abs().to_string())
            }
            ('u', Arg::Int(n)) => ("", (*n as u64).to_string()),
            ('x', Arg::Int(n)) => (if c.flags.contains('#') { "0x" } else { "" }, format!("{:x}", *n as u64)),
            ('X', Arg::Int(n)) => (if c.flags.contains('#') { "0X" } else { "" }, format!("{:X}", *n as u64)),
            ('o', Arg::Int(n)) => ("", format!("{:o}", *n as u64)),
            ('p', Arg::Int(n)) => ("0x", format!("{:x}", *n as u64)),
            ('c', Arg::Int(n)) => ("", char::from(*n as u8).to_string()),
            // A whole number, as %g prints one (no point, no exponent below 1e6).
            ('g', Arg::Int(n)) if n.unsigned_abs() < 1_000_000 => {
                (if *n < 0 { "-" } else { "" }, n.unsigned_abs().to_string())
            }
            ('s', Arg::Str(t)) => ("", t.chars().take(c.precision.unwrap_or(usize::MAX)).collect()),
            _ => panic!("{fmt:?}: %{} given {arg:?}", c.kind),
        };
        if let (Some(p), true) = (c.precision, "diuxXo".contains(c.kind)) {
            body = format!("{body:0>p$}");
        }
        let len = sign.len() + body.chars().count();
        let pad = c.width.saturating_sub(len);
        if c.flags.contains('-') {
            let _ = write!(out, "{sign}{body}{:pad$}", "");
        } else if c.flags.contains('0') && c.precision.is_none() && c.kind != 's' {
            let _ = write!(out, "{sign}{:0>pad$}{body}", "");
        } else {
            let _ = write!(out, "{:pad$}{sign}{body}", "");
        }
    }
    out.push_str(&fmt[at..].replace("%%", "%"));
    out
}

#[test]
fn printf_fills_conversions_as_c_does() {
    let f = |fmt: &str, args: &[Arg]| printf(fmt, args);
    assert_eq!(f("Channel %02d/%d :", &[Arg::Int(7), Arg::Int(1)]), "Channel 07/1 :");
    assert_eq!(f("%02d|%5d|%-4d|%+d|%03d", &[5, 42, 7, 3, -4].map(Arg::Int)), "05|   42|7   |+3|-04");
    assert_eq!(
        f("%lx %llx %#x %zu %ld %lld", &[255, 255, 255, 9, -2, 1 << 40].map(Arg::Int)),
        "ff ff 0xff 9 -2 1099511627776"
    );
    assert_eq!(f("%p %.3s%% %5s", &[Arg::Int(0x55d0), s("abcdef"), s("ab")]), "0x55d0 abc%    ab");
    assert_eq!(f("%g", &[Arg::Int(2)]), "2");
}

/// ncclDebugLog's prefix (src/debug.cc), from the release's own formats: `%s:%d:%d [%d] NCCL INFO `
/// in 2.21 and 2.23; in 2.32 `[%d] NCCL INFO %s\n` after a `%s:%d:%d ` snprintf of its own, a
/// format no FORMAT_PATTERNS keeps, so it is put back here.
fn prefixed(prefix_fmt: &str, warn: bool, msg: &str) -> String {
    let fmt = match prefix_fmt.trim_start_matches('\n').starts_with("%s:%d:%d ") {
        true => prefix_fmt.to_owned(),
        false => format!("%s:%d:%d {prefix_fmt}"),
    };
    let mut args = vec![s(HOST), Arg::Int(PID.into()), Arg::Int(TID.into()), Arg::Int(DEV.into())];
    if warn {
        args.extend([s("misc/ibvwrap.cc"), Arg::Int(203)]);
        if fmt.contains("(%s)") {
            args.push(s("wrap_ibv_call"));
        }
    }
    let message_by_conversion = conversions(&fmt).len() > args.len();
    if message_by_conversion {
        args.push(s(msg));
    }
    let mut line = printf(&fmt, &args);
    if !message_by_conversion {
        line.push_str(msg);
    }
    line.trim_matches('\n').to_owned()
}

const HOST: &str = "gpu-node-07";
const PID: u32 = 21337;
const TID: u32 = 21901;
const DEV: i32 = 3;
/// The process's own rank in the connection lines, the NIC and a PXN proxy's rank.
const ME: u32 = 3;
const NIC: u32 = 4;
const PROXY: u32 = 2;

/// A `Channel ... via NET/...` format, by its conversions: channel, connIndex (2.12 on),
/// rank[dev] twice, the plugin, the NIC, the proxy (PXN), then the `%s` suffixes.
struct NetForm {
    direction: Direction,
    conn_index: bool,
    proxy: bool,
    suffixes: usize,
}

fn net_form(fmt: &str) -> Result<NetForm, String> {
    let direction = match (fmt.contains(" [send] via NET/"), fmt.contains(" [receive] via NET/")) {
        (true, false) => Direction::Send,
        (false, true) => Direction::Recv,
        _ => return Err("neither [send] nor [receive]".into()),
    };
    let conn_index = fmt.starts_with("Channel %02d/");
    let proxy = fmt.contains("/%d(%d)");
    let kinds: String = conversions(fmt).iter().map(|c| c.kind).collect();
    let fixed = format!("d{}ddddsd{}", if conn_index { "d" } else { "" }, if proxy { "d" } else { "" });
    let Some(rest) = kinds.strip_prefix(fixed.as_str()) else {
        return Err(format!("conversions {kinds}, the test knows {fixed} then %s suffixes"));
    };
    if rest.chars().any(|k| k != 's') {
        return Err(format!("conversions {kinds}: a suffix not a %s"));
    }
    Ok(NetForm { direction, conn_index, proxy, suffixes: rest.len() })
}

/// The suffixes' values by their number: `/GDRDMA` and `/Shared`, `(PCI)` between them from
/// 2.27; 2.32's receive adds `/flush=` and the mode whenever it has GPUDirect (its recvSetup's
/// arguments, read off that release's libnccl.so). Another number fails the test.
fn suffixes(n: usize, gdr: bool, pci: bool, shared: bool) -> Option<Vec<&'static str>> {
    let g = if gdr { "/GDRDMA" } else { "" };
    let p = if gdr && pci { "(PCI)" } else { "" };
    let sh = if shared { "/Shared" } else { "" };
    Some(match n {
        2 => vec![g, sh],
        3 => vec![g, p, sh],
        5 => vec![g, p, sh, if gdr { "/flush=" } else { "" }, if gdr { "C2c" } else { "" }],
        _ => return None,
    })
}

/// Fills a comm line's conversions by the word before each.
fn comm_args(fmt: &str) -> Result<Vec<Arg>, String> {
    conversions(fmt)
        .iter()
        .map(|c| {
            let word = fmt[..c.start].split_ascii_whitespace().last().unwrap_or("");
            Ok(match (word, c.kind) {
                // The function's name, first (2.21 on), after `[Rank %d]` in 2.32's START.
                (w, 's') if w.is_empty() || w.ends_with(']') => s("ncclCommInitRank"),
                ("comm", 'p') => Arg::Int(COMM),
                ("parent", 'p') => Arg::Int(0x55d0c1c09000),
                ("[Rank" | "rank", _) => Arg::Int(ME.into()),
                ("nranks", _) => Arg::Int(16),
                ("cudaDev", _) => Arg::Int(DEV.into()),
                ("nvmlDev", _) => Arg::Int(5),
                ("busId", _) => Arg::Int(0x1b000),
                ("childCount" | "color" | "key", _) => Arg::Int(1),
                ("0x" | "commId", _) if fmt[..c.start].ends_with("commId 0x") => Arg::Int(COMM_ID),
                _ => return Err(format!("`{word} %{}` unknown to the test", c.kind)),
            })
        })
        .collect()
}

const COMM: i64 = 0x55d0c1c0a2b0;
const COMM_ID: i64 = 0x1f2e3d4c5b6a7988;

/// Lines filled in from one release's formats, with what the reader must make of each.
#[derive(Default)]
struct Filled {
    lines: Vec<String>,
    problems: Vec<String>,
    sends: u64,
    recvs: u64,
    send_gdr: u64,
    recv_gdr: u64,
    proxied: u64,
    failures: Vec<(String, Option<String>, Option<i32>)>,
    version: Option<String>,
    comm_keys: Vec<String>,
    env: BTreeMap<String, String>,
    nics: Vec<String>,
    /// P2P and SHM sends, CollNet sends and receives, NVLS set-ups.
    p2p: u64,
    shm: u64,
    collnet: (u64, u64),
    nvls: u64,
}

impl Filled {
    fn expect(&mut self, release: &str, line: String, want: Option<&Event>) {
        let got = parse(line.as_bytes());
        let prefix = got.as_ref().and_then(|l| l.prefix.clone());
        let want_prefix = Prefix { host: HOST.into(), pid: PID, tid: TID, cuda_dev: Some(DEV) };
        if prefix.as_ref() != Some(&want_prefix) {
            self.problems.push(format!("{release}: {line:?}: prefix {prefix:?}"));
        }
        let event = got.and_then(|l| l.event);
        if event.as_ref() != want {
            self.problems.push(format!("{release}: {line:?}: got {event:?}, want {want:?}"));
        }
        self.lines.push(line);
    }
}

fn fill(r: &Release) -> Filled {
    let mut f = Filled::default();
    let name = r.name.as_str();
    let find = |pred: &dyn Fn(&str) -> bool| r.formats.iter().filter(|x| pred(x)).cloned().collect::<Vec<_>>();
    let info = find(&|x| x.contains("NCCL INFO"));
    let warns = find(&|x| x.contains("NCCL WARN"));
    let Some(info) = info.first() else {
        f.problems.push(format!("{name}: no `NCCL INFO` prefix format"));
        return f;
    };
    if warns.is_empty() {
        f.problems.push(format!("{name}: no `NCCL WARN` prefix format"));
    }
    let info_line = |msg: &str| prefixed(info, false, msg);

    // The version line: printed through "%s", so the fixture holds the string itself.
    match find(&|x| x.starts_with("NCCL version ")).first() {
        None => f.problems.push(format!("{name}: no `NCCL version` line")),
        Some(v) => {
            let number = v["NCCL version ".len()..].to_owned();
            if !number.starts_with(&format!("{}+", r.number)) {
                f.problems.push(format!("{name}: its library says {v:?}"));
            }
            f.expect(name, info_line(v), Some(&Event::Version(number.clone())));
            f.version = Some(number);
        }
    }

    // Network connections.
    let nets = find(&|x| x.starts_with("Channel ") && x.contains(" via NET/"));
    let mut channel = 0;
    for fmt in &nets {
        let form = match net_form(fmt) {
            Ok(form) => form,
            Err(why) => {
                f.problems.push(format!("{name}: {fmt:?}: {why}"));
                continue;
            }
        };
        for (gdr, pci, shared) in
            [(true, true, true), (true, false, false), (false, false, true), (false, false, false)]
        {
            let Some(tail) = suffixes(form.suffixes, gdr, pci, shared) else {
                f.problems.push(format!("{name}: {fmt:?}: {} suffixes unknown to the test", form.suffixes));
                break;
            };
            channel += 1;
            let peer = 11 + channel;
            let (from, to) = match form.direction {
                Direction::Send => (ME, peer),
                Direction::Recv => (peer, ME),
            };
            let mut args = vec![Arg::Int(channel.into())];
            if form.conn_index {
                args.push(Arg::Int(1));
            }
            args.extend([from, DEV as u32, to, 6].map(|n| Arg::Int(n.into())));
            args.extend([s("IB"), Arg::Int(NIC.into())]);
            if form.proxy {
                args.push(Arg::Int(PROXY.into()));
            }
            args.extend(tail.into_iter().map(s));
            let want = NetConn {
                channel,
                conn_index: u32::from(form.conn_index),
                from,
                to,
                direction: form.direction,
                net: "IB".into(),
                dev: NIC,
                proxy: form.proxy.then_some(PROXY),
                gdr,
                shared,
            };
            f.expect(name, info_line(&printf(fmt, &args)), Some(&Event::Net(want)));
            let g = u64::from(gdr);
            match form.direction {
                Direction::Send => (f.sends, f.send_gdr) = (f.sends + 1, f.send_gdr + g),
                Direction::Recv => (f.recvs, f.recv_gdr) = (f.recvs + 1, f.recv_gdr + g),
            }
            f.proxied += u64::from(form.proxy);
        }
    }
    let has = |direction: Direction, proxy: bool| {
        nets.iter().any(|x| net_form(x).is_ok_and(|n| n.direction == direction && n.proxy == proxy))
    };
    let mut required = vec![("[send] via NET/%s/%d", has(Direction::Send, false))];
    required.push(("[receive] via NET/%s/%d", has(Direction::Recv, false)));
    // PXN, a send set up by another rank's proxy, came with 2.12.
    if minor(&r.number) >= (2, 12) {
        required.push(("[send] via NET/%s/%d(%d)", has(Direction::Send, true)));
    }
    for (what, found) in required {
        if !found {
            f.problems.push(format!("{name}: no network connection format `{what}` the test can fill"));
        }
    }

    // Failed calls, behind every WARN prefix the release has.
    let calls = find(&|x| x.starts_with("Call to ibv_") && x.contains(" failed"));
    for fmt in &calls {
        let call = fmt["Call to ".len()..].split_once(" failed").map_or("", |(c, _)| c).to_owned();
        let kinds: String = conversions(fmt).iter().map(|c| c.kind).collect();
        let (args, want) = if fmt.ends_with(" failed with error %s") {
            (vec![s("Cannot allocate memory")], (Some("Cannot allocate memory".to_owned()), Some(12)))
        } else if fmt.ends_with(" failed with error %s errno %d") {
            (vec![s("Cannot allocate memory"), Arg::Int(12)], (Some("Cannot allocate memory".to_owned()), Some(12)))
        } else if fmt.ends_with(" failed with %d %s, %s") {
            let args = vec![Arg::Int(22), s("Invalid argument"), s("QP state INIT to RTR")];
            (args, (Some("Invalid argument".to_owned()), Some(22)))
        } else if kinds.is_empty() || fmt.contains("retrying") {
            // Not a failure the reader takes: INFO while NCCL retries.
            continue;
        } else {
            f.problems.push(format!("{name}: {fmt:?}: a failure form unknown to the test"));
            continue;
        };
        for w in &warns {
            let line = prefixed(w, true, &printf(fmt, &args));
            let failure = Failure { call: call.clone(), error: want.0.clone(), errno: want.1 };
            f.expect(name, line, Some(&Event::Failure(failure)));
            f.failures.push((call.clone(), want.0.clone(), want.1));
        }
    }
    let mut required = vec!["ibv_reg_mr", "ibv_create_cq"];
    // ibvwrap.cc has wrapped ibv_reg_mr_iova2 since 2.12.
    if minor(&r.number) >= (2, 12) {
        required.push("ibv_reg_mr_iova2");
    }
    for call in required {
        let fmt = format!("Call to {call} failed with error %s");
        if !calls.contains(&fmt) {
            f.problems.push(format!("{name}: no failure format `{fmt}`"));
        }
    }

    // Communicators: START and COMPLETE.
    let comms = find(&|x| x.ends_with(" - Init COMPLETE") || x.ends_with(" - Init START"));
    for fmt in &comms {
        let args = match comm_args(fmt) {
            Ok(args) => args,
            Err(why) => {
                f.problems.push(format!("{name}: {fmt:?}: {why}"));
                continue;
            }
        };
        let comm_id = fmt.contains("commId 0x%").then(|| format!("0x{COMM_ID:x}"));
        let complete = fmt.ends_with("COMPLETE");
        if complete {
            let key = comm_id.clone().unwrap_or_else(|| format!("{HOST}:{PID}:0x{COMM:x}"));
            if !f.comm_keys.contains(&key) {
                f.comm_keys.push(key);
            }
        }
        let want = Comm {
            comm: format!("0x{COMM:x}"),
            rank: Some(ME),
            nranks: Some(16),
            cuda_dev: Some(DEV),
            comm_id,
            complete,
            start: fmt.ends_with(" - Init START"),
        };
        f.expect(name, info_line(&printf(fmt, &args)), Some(&Event::Comm(want)));
    }
    if !comms.iter().any(|x| x.ends_with(" - Init COMPLETE")) {
        f.problems.push(format!("{name}: no `- Init COMPLETE` format"));
    }

    // The NICs in use (net_ib.cc): the list, relaxed ordering, the OOB interface and address.
    let nic_formats = find(&|x| x.starts_with("NET/IB : Using"));
    for fmt in &nic_formats {
        let list = [" [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE", "[RO]", "eth0", "10.0.0.1<0>"];
        if conversions(fmt).len() != list.len() {
            f.problems.push(format!("{name}: {fmt:?}: conversions unknown to the test"));
            continue;
        }
        // Each device as listed, its port kept: the link layer and the address are cut off.
        let devices = vec!["mlx5_0:1".to_owned(), "mlx5_1:1".to_owned()];
        let want = Event::Nics { transport: "IB".into(), devices: devices.clone() };
        f.expect(name, info_line(&printf(fmt, &list.map(s))), Some(&want));
        f.nics = devices;
    }
    if nic_formats.is_empty() {
        f.problems.push(format!("{name}: no `NET/IB : Using` format"));
    }

    // Variables NCCL says it read: param.cc ncclLoadParam's `%s set by environment to %lld.`, the
    // string readers' `NAME set by environment to %s` (and `%s.`, `%d.`, `%g`), `%s set by
    // environment to %s|%d`, 2.32's `NET/IB: NAME set by environment to %s`, and `NAME set to %s`
    // (net_ib.cc NCCL_IB_HCA, socket.cc NCCL_SOCKET_IFNAME). The log keeps the first of each name.
    let env_formats =
        find(&|x| x.contains(" set by environment to %") || (x.contains(" set to %s") && x.ends_with("%s")));
    for fmt in &env_formats {
        let convs = conversions(fmt);
        let marker = if fmt.contains(" set by environment to ") { " set by environment to " } else { " set to " };
        let Some((head, tail)) = fmt.split_once(marker) else { continue };
        let literal = head.rsplit(' ').next().unwrap_or(head);
        let kinds: String = convs.iter().map(|c| c.kind).collect();
        let (mut args, name) = match literal {
            "%s" => (vec![], String::new()),
            n if n.starts_with("NCCL_") => (vec![], n.to_owned()),
            _ => {
                f.problems.push(format!("{name}: {fmt:?}: a variable's name the test cannot tell"));
                continue;
            }
        };
        let value_kind = kinds.chars().last().unwrap_or(' ');
        let name = match (name.is_empty(), value_kind) {
            (false, _) => name,
            (true, 's') => "NCCL_P2P_LEVEL".to_owned(),
            (true, _) if kinds.len() == 2 => "NCCL_IB_TIMEOUT".to_owned(),
            _ => {
                f.problems.push(format!("{name}: {fmt:?}: conversions {kinds} unknown to the test"));
                continue;
            }
        };
        if literal == "%s" {
            args.push(s(&name));
        }
        // A `%s.` value is a number NCCL reads (NCCL_COLLNET_ENABLE): its full stop goes, as a
        // number's does.
        let (arg, value) = match value_kind {
            's' if tail.ends_with("%s.") => (s("1"), "1"),
            's' => (s("mlx5_0:1,mlx5_1:1"), "mlx5_0:1,mlx5_1:1"),
            'd' | 'i' | 'g' => (Arg::Int(22), "22"),
            _ => {
                f.problems.push(format!("{name}: {fmt:?}: conversions {kinds} unknown to the test"));
                continue;
            }
        };
        args.push(arg);
        if args.len() != convs.len() {
            f.problems.push(format!("{name}: {fmt:?}: conversions {kinds} unknown to the test"));
            continue;
        }
        let want = Event::Env { name: name.clone(), value: value.into() };
        f.expect(&r.name, info_line(&printf(fmt, &args)), Some(&want));
        f.env.entry(name).or_insert_with(|| value.to_owned());
    }
    for (what, fmt) in [
        ("ncclLoadParam's", "%s set by environment to %lld."),
        ("net_ib.cc's", "NCCL_IB_HCA set to %s"),
        ("socket.cc's", "NCCL_SOCKET_IFNAME set by environment to %s"),
    ] {
        if !env_formats.iter().any(|x| x == fmt) {
            f.problems.push(format!("{name}: no {what} `{fmt}`"));
        }
    }

    // The other transports' connections, each counted apart from the network's.
    for fmt in find(&|x| x.starts_with("Channel ") && (x.contains(" via P2P/") || x.contains(" via SHM/"))) {
        let transport = if fmt.contains(" via P2P/") { Transport::P2p } else { Transport::Shm };
        let conn_index = fmt.starts_with("Channel %02d/");
        channel += 1;
        // A peer inside the communicator (16 ranks) and not the process itself.
        let peer = 4 + channel % 10;
        let mut args = vec![Arg::Int(channel.into())];
        if conn_index {
            args.push(Arg::Int(1));
        }
        args.extend([ME, DEV as u32, peer, 6].map(|n| Arg::Int(n.into())));
        // After the ends: P2P's kind (`CUMEM`, `IPC`) and `/read`, SHM's `direct`s, the
        // indirect path's intermediate rank[dev].
        let mut words = ["CUMEM", "/read", ""].into_iter();
        for c in &conversions(&fmt)[args.len()..] {
            args.push(match c.kind {
                's' if transport == Transport::Shm => s("direct"),
                's' => s(words.next().unwrap_or("")),
                _ => Arg::Int(2),
            });
        }
        let want = LocalConn {
            transport,
            channel,
            conn_index: u32::from(conn_index),
            me: ME,
            peer: Some(peer),
            direction: Direction::Send,
        };
        f.expect(name, info_line(&printf(&fmt, &args)), Some(&Event::Local(want)));
        match transport {
            Transport::P2p => f.p2p += 1,
            _ => f.shm += 1,
        }
    }
    for fmt in find(&|x| x.starts_with("CollNet %") && x.contains(" via COLLNET/")) {
        let direction = if fmt.contains(" [send] ") { Direction::Send } else { Direction::Recv };
        channel += 1;
        let mut args =
            vec![Arg::Int(channel.into()), Arg::Int(1), Arg::Int(ME.into()), s("SHARP"), Arg::Int(NIC.into())];
        let rest = conversions(&fmt).len().saturating_sub(args.len());
        args.extend((0..rest).map(|i| s(if i == 0 { "/GDRDMA" } else { "" })));
        let want = LocalConn { transport: Transport::CollNet, channel, conn_index: 1, me: ME, peer: None, direction };
        f.expect(name, info_line(&printf(&fmt, &args)), Some(&Event::Local(want)));
        match direction {
            Direction::Send => f.collnet.0 += 1,
            Direction::Recv => f.collnet.1 += 1,
        }
    }
    for fmt in find(&|x| x.starts_with("NVLS comm %p headRank")) {
        let mut args = vec![Arg::Int(COMM)];
        args.extend(conversions(&fmt)[1..].iter().map(|_| Arg::Int(4)));
        f.expect(name, info_line(&printf(&fmt, &args)), Some(&Event::Nvls { comm: format!("0x{COMM:x}") }));
        f.nvls = 1;
    }
    let has = |needle: &str| r.formats.iter().any(|x| x.contains(needle));
    let mut required = vec![" via P2P/", " via SHM/", " via COLLNET/"];
    // The NVLS set-up line came with 2.23's nvls.cc.
    if minor(&r.number) >= (2, 23) {
        required.push("NVLS comm %p headRank");
    }
    for what in required {
        if !has(what) {
            f.problems.push(format!("{name}: no `{what}` format"));
        }
    }
    f
}

/// Every fixture's formats, filled in, parse to the values filled in, one line at a time and as
/// a whole log.
#[test]
fn every_release_fixtures_formats_read_back_as_filled_in() {
    let mut problems = Vec::new();
    for r in releases() {
        let mut f = fill(&r);
        let log = read(f.lines.join("\n").as_bytes()).unwrap();
        let name = &r.name;
        let mut check = |what: &str, ok: bool, detail: String| {
            if !ok {
                f.problems.push(format!("{name}: the log's {what}: {detail}"));
            }
        };
        check("lines", log.nccl_lines == f.lines.len() as u64, format!("{} of {}", log.nccl_lines, f.lines.len()));
        check("version", log.nccl_version == f.version, format!("{:?}", log.nccl_version));
        check("ranks", log.ranks.len() == 1, format!("{:?}", log.ranks));
        if let Some(rank) = log.ranks.first() {
            let c = &rank.connections;
            let got = (c.net_send, c.net_recv, c.net_send_gdr, c.net_recv_gdr, rank.net_send_proxied);
            let want = (f.sends, f.recvs, f.send_gdr, f.recv_gdr, f.proxied);
            check(
                "connections (send, recv, send_gdr, recv_gdr, proxied)",
                got == want,
                format!("{got:?}, want {want:?}"),
            );
            check("rank", rank.rank == Some(ME), format!("{:?}", rank.rank));
            check("nics", rank.nics == vec![NIC], format!("{:?}", rank.nics));
            check("gdr", rank.gdr == Some(false), format!("{:?}", rank.gdr));
            let got = (c.p2p, c.shm, c.collnet_send, c.collnet_recv, c.nvls);
            let want = (f.p2p, f.shm, f.collnet.0, f.collnet.1, f.nvls);
            check(
                "other transports (p2p, shm, collnet send, recv, nvls)",
                got == want,
                format!("{got:?}, want {want:?}"),
            );
            check("unattributed", rank.unattributed == 0, format!("{}", rank.unattributed));
        }
        let got: Vec<_> = log.failures.iter().map(|x| (x.call.clone(), x.error.clone(), x.errno)).collect();
        check("failures", got == f.failures, format!("{got:?}, want {:?}", f.failures));
        check("communicators", log.communicators == f.comm_keys.len() as u64, format!("{}", log.communicators));
        check("nics", log.nics == f.nics, format!("{:?}", log.nics));
        check("env", log.env == f.env, format!("{:?}, want {:?}", log.env, f.env));
        problems.append(&mut f.problems);
    }
    assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
}
