//! Cost of loading a web configuration: nested flow collections make libyaml's scanner quadratic,
//! so `webconfig::load` refuses text that opens too many of them before parsing. Measured in the
//! same run: the packaged example (the baseline), what yaml_serde takes to parse nested `[` of
//! growing size (the cost the check avoids), `webconfig::load` on the same hostile files and on
//! 500 KB of them, and the worst file the checks let through (the largest web configuration taken,
//! 256 KiB, at the largest nesting allowed).
//!
//! `cargo bench --bench web_config_load`. Exits with status 1 when a refusal takes more than
//! 10 ms or the worst accepted file more than 200 ms.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use memlock_http::webconfig;

/// Wall time of the fastest of `runs` runs of `load` (the machine is shared: the minimum is the
/// cost, the rest is waiting).
fn fastest(runs: usize, mut load: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            load();
            start.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a web configuration");
    path
}

fn nested(levels: usize) -> String {
    format!("basic_auth_users: {}{}\n", "[".repeat(levels), "]".repeat(levels))
}

fn main() {
    let dir = std::env::temp_dir().join(format!("memlock-bench-web-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let mut failed = false;

    // The packaged example without its TLS files (no certificates here), with three users.
    let example =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/web-config.example.yml"))
            .expect("the packaged example");
    let hash = "$2y$10$3qXwX9U3dG5xJ8l3w8t8Wuq2Z5b6Q5m6v7o8p9q0r1s2t3u4v5w6e";
    let plain = example.split("http_server_config:").nth(1).expect("an http_server_config section");
    let users: String = (1..=3).map(|i| format!("  user{i}: {hash}\n")).collect();
    let baseline_text = format!("http_server_config:{plain}basic_auth_users:\n{users}");
    let path = write(&dir, "example.yml", &baseline_text);
    let baseline = fastest(20, || {
        webconfig::load(Some(&path)).expect("the example loads");
    });
    println!("web config load (fastest of several runs)");
    println!(
        "  baseline: the packaged example, 3 users ({} bytes) {:>8.3} ms",
        baseline_text.len(),
        baseline.as_secs_f64() * 1e3
    );

    println!("  nested '[' (N levels, 2N bytes)   yaml_serde parse   webconfig::load");
    for levels in [2_000, 4_000, 8_000, 16_000, 32_000, 64_000] {
        let text = nested(levels);
        let path = write(&dir, "nested.yml", &text);
        let parse = fastest(1, || {
            let _ = yaml_serde::from_str::<yaml_serde::Value>(&text);
        });
        let load = fastest(5, || {
            assert!(webconfig::load(Some(&path)).is_err(), "refused");
        });
        println!(
            "    {levels:>7} levels {:>7} bytes          {:>10.1} ms   {:>8.3} ms",
            text.len(),
            parse.as_secs_f64() * 1e3,
            load.as_secs_f64() * 1e3
        );
        failed |= load > Duration::from_millis(10);
    }

    let text = nested(250_000);
    let path = write(&dir, "nested.yml", &text);
    let load = fastest(5, || {
        let error = webconfig::load(Some(&path)).expect_err("refused").to_string();
        assert!(error.contains("larger than"), "{error}");
    });
    println!("  500 KB of nesting: webconfig::load refuses it in    {:>10.3} ms", load.as_secs_f64() * 1e3);
    failed |= load > Duration::from_millis(10);

    // The most the checks let through: 32 levels, then tokens up to the 256 KiB bound.
    let mut worst = format!("basic_auth_users: {}", "[".repeat(32));
    while worst.len() < (256 << 10) - 100 {
        worst.push_str("a, ");
    }
    worst.push('a');
    worst.push_str(&"]".repeat(32));
    worst.push('\n');
    let path = write(&dir, "worst.yml", &worst);
    let load = fastest(3, || {
        let error = webconfig::load(Some(&path)).expect_err("a sequence is not a map of users").to_string();
        assert!(error.contains("basic_auth_users"), "{error}");
    });
    println!("  worst accepted for parsing ({} bytes, 32 levels)   {:>10.1} ms", worst.len(), load.as_secs_f64() * 1e3);
    failed |= load > Duration::from_millis(200);

    let _ = std::fs::remove_dir_all(&dir);
    if failed {
        eprintln!("a web configuration took longer than its bound to refuse or parse");
        std::process::exit(1);
    }
}
