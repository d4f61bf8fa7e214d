//! Man pages rendered from the command-line definition, so they cannot drift from `--help`: one
//! for the binary and one per subcommand (`memlock-exporter-check.1.gz`...). The packages run the
//! hidden `manpages` subcommand at build time and install what it writes; nothing reads them at
//! run time.

use std::io::Write;
use std::path::{Path, PathBuf};

/// `memlock-exporter manpages DIR`: hidden, a packaging step rather than an operator's command.
#[derive(Debug, clap::Args)]
pub struct ManpagesArgs {
    /// Directory to write the section 1 pages into (created if missing).
    pub dir: PathBuf,
}

/// Writes a page for `cmd` and for each of its visible subcommands into `dir`, each compressed as
/// `gzip -9n` would (Debian policy wants them so, and no timestamp keeps builds reproducible);
/// returns their paths.
pub fn write(cmd: clap::Command, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let mut written = Vec::new();
    write_pages(cmd, dir, &mut written)?;
    written.sort();
    Ok(written)
}

fn write_pages(cmd: clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
        write_pages(sub, dir, written)?;
    }
    let man = clap_mangen::Man::new(cmd);
    let mut page = Vec::new();
    man.render(&mut page)?;
    let path = dir.join(format!("{}.gz", man.get_filename()));
    let file = std::fs::File::create(&path)?;
    let mut gz = flate2::GzBuilder::new().write(file, flate2::Compression::best());
    gz.write_all(&page)?;
    gz.finish()?.sync_all()?;
    written.push(path);
    Ok(())
}

/// Runs the subcommand; the exit code follows the binary's convention.
pub fn run(cmd: clap::Command, args: &ManpagesArgs) -> u8 {
    match write(cmd, &args.dir) {
        Ok(paths) => {
            for path in paths {
                println!("{}", path.display());
            }
            memlock_core::exit::OK
        }
        Err(err) => {
            eprintln!("memlock-exporter manpages: {}: {err}", args.dir.display());
            memlock_core::exit::RUNTIME
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn read(path: &Path) -> String {
        let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(file), &mut text).unwrap();
        text
    }

    #[test]
    fn every_visible_command_gets_a_page_with_its_flags() {
        let tmp = tempfile::Builder::new().prefix("memlock-manpages-").tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let written = write(crate::cli::Cli::command(), &dir).unwrap();
        let names: Vec<String> =
            written.iter().filter_map(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned()).collect();
        assert_eq!(
            names,
            [
                "memlock-exporter-check.1.gz",
                "memlock-exporter-drill.1.gz",
                "memlock-exporter-estimate.1.gz",
                "memlock-exporter-serve.1.gz",
                "memlock-exporter.1.gz",
            ]
        );
        let main = read(&dir.join("memlock-exporter.1.gz"));
        assert!(main.contains(".TH memlock-exporter 1"), "{main}");
        assert!(main.contains("web.listen\\-address"), "the daemon's flags are on the main page");
        assert!(!main.contains("manpages"), "the packaging step stays hidden");
        assert!(read(&dir.join("memlock-exporter-check.1.gz")).contains("\\-\\-summary"), "check's own flags");
        assert!(read(&dir.join("memlock-exporter-drill.1.gz")).contains(".TH memlock-exporter-drill 1"));
    }

    #[test]
    fn an_unwritable_directory_is_a_runtime_error() {
        let args = ManpagesArgs { dir: PathBuf::from("/proc/version/manpages") };
        assert_eq!(run(crate::cli::Cli::command(), &args), memlock_core::exit::RUNTIME);
    }
}
