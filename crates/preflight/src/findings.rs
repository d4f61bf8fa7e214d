//! What `check` reports: one finding per rule (PASS, WARN or FAIL with the measured value and a
//! fix), the report around them, its table and its exit status. `check`'s rules write it and
//! [`crate::job_context`] adjusts and summarises it.

use serde::Serialize;

use memlock_core::units::bytes as human;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    Pass,
    Warn,
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

/// One line of the report. `id` is stable for automation (see docs/check.md).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub id: String,
    pub status: Status,
    pub measured: String,
    /// What to do; empty when nothing needs doing.
    pub fix: String,
}

impl Finding {
    pub fn new(id: impl Into<String>, status: Status, measured: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { id: id.into(), status, measured: measured.into(), fix: fix.into() }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub pid: String,
    /// The busiest rank's memlock need (the name predates the per-rank model).
    pub(crate) need_per_process_bytes: u64,
    /// The busiest node's VmPin, every rank together.
    pub(crate) need_per_node_bytes: u64,
    /// The busiest node's host memory (GPU buffers excluded): what memory and the cgroup must hold.
    pub(crate) need_per_node_host_bytes: u64,
    /// The model's inputs as decided (GPUDirect mode, NICs, channels), for the record.
    pub model: ModelSummary,
    pub findings: Vec<Finding>,
    /// How the ranks get their memlock limit and the fix for that path, when a memlock finding
    /// is not PASS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launch: Option<Launch>,
    /// The node as read (job shape, memory, limits, versions), for the record.
    pub facts: Vec<Fact>,
}

/// The launcher's path and its fix first (crates/preflight/src/check/launch_path.rs).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Launch {
    pub path: String,
    pub(crate) evidence: String,
    pub first: String,
    pub verify: String,
    pub others: Vec<String>,
    /// Files that could not be read or parsed on the way, each naming the file.
    pub errors: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fact {
    pub name: String,
    pub value: String,
}

/// What the need was estimated for.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ModelSummary {
    pub gdr: String,
    pub(crate) gdr_why: String,
    pub nics: u64,
    pub(crate) nics_why: String,
    pub channels: u64,
    pub(crate) channels_why: String,
    /// S, the ring graph's channels, which decide each channel's tree.
    pub search_channels: u64,
    pub algorithms: String,
    /// The inputs that were not given, with the flag that takes each.
    pub assumed: Vec<String>,
}

impl Report {
    pub fn worst(&self) -> Status {
        self.findings.iter().map(|f| f.status).max().unwrap_or(Status::Pass)
    }
}

/// The checklist, verdict first: what failed or warned with its fix, the launcher's fix, the
/// facts, what passed, and the model's assumptions last.
pub(crate) fn render_text(report: &Report) -> String {
    let count = |s: Status| report.findings.iter().filter(|f| f.status == s).count();
    let verdict = report.worst().as_str();
    let mut out = format!(
        "memlock-exporter check (pid {}): {verdict}: {} failed, {} warnings, {} passed\n\n",
        report.pid,
        count(Status::Fail),
        count(Status::Warn),
        count(Status::Pass)
    );
    let width = report.findings.iter().map(|f| f.id.len()).max().unwrap_or(0);
    let line = |out: &mut String, f: &Finding| {
        out.push_str(&format!("{}  {:<width$}  {}\n", f.status.as_str(), f.id, f.measured));
        if !f.fix.is_empty() {
            out.push_str(&format!("      {:<width$}  fix: {}\n", "", f.fix));
        }
    };
    for status in [Status::Fail, Status::Warn] {
        for f in report.findings.iter().filter(|f| f.status == status) {
            line(&mut out, f);
        }
    }
    if let Some(launch) = &report.launch {
        out.push_str(&format!("\nhow the ranks get their memlock limit: {} ({})\n", launch.path, launch.evidence));
        out.push_str(&format!("  fix first: {}\n  verify: {}\n", launch.first, launch.verify));
        for other in &launch.others {
            out.push_str(&format!("  - {other}\n"));
        }
        for error in &launch.errors {
            out.push_str(&format!("  (not read: {error})\n"));
        }
    }
    if !report.facts.is_empty() {
        out.push_str("\nfacts:\n");
        let width = report.facts.iter().map(|f| f.name.len()).max().unwrap_or(0);
        for fact in &report.facts {
            out.push_str(&format!("  {:<width$}  {}\n", fact.name, fact.value));
        }
    }
    if count(Status::Pass) > 0 {
        out.push('\n');
        for f in report.findings.iter().filter(|f| f.status == Status::Pass) {
            line(&mut out, f);
        }
    }
    out.push_str(&format!(
        "\nmodel: NCCL registers an estimated {} on the busiest rank, {} per node ({} of host memory; {}, GPUDirect \
            {}, {} NIC(s), {} channel(s))\n",
        human(report.need_per_process_bytes as f64),
        human(report.need_per_node_bytes as f64),
        human(report.need_per_node_host_bytes as f64),
        report.model.algorithms,
        report.model.gdr,
        report.model.nics,
        report.model.channels,
    ));
    if !report.model.assumed.is_empty() {
        out.push_str("assumed (pass the real figures):\n");
        for a in &report.model.assumed {
            out.push_str(&format!("  - {a}\n"));
        }
    }
    out
}

/// The exit status for a report.
pub fn exit_code(report: &Report, strict: bool) -> u8 {
    match report.worst() {
        Status::Fail => 1,
        Status::Warn if strict => 1,
        _ => memlock_core::exit::OK,
    }
}
