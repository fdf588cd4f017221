//! Shell completions and man pages, generated from the clap definitions in [`super::Cli`], so
//! they can never describe options the binary does not take. The Debian package ships both
//! (`cargo xtask deb` runs the built binary to write them); `completions` is also there for
//! anyone who installs the binary by hand.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;

use super::Cli;

/// The binary's name as users type it: completions are registered for this name.
const BIN: &str = "director-ctl";

/// Writes the completion script for `shell` to `out`.
pub fn completions(shell: Shell, out: &mut dyn Write) -> Result<()> {
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, BIN, out);
    out.flush().context("writing the completion script")
}

/// Writes `director-ctl.1` and one page per visible subcommand (`director-ctl-server-add.1`,
/// ...) into `dir`, which is created if missing; returns how many pages it wrote.
pub fn man_pages(dir: &Path) -> Result<usize> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // clap_mangen walks the tree itself (hidden commands, this one included, are left
    // out); the count is read back from the directory so the caller can say what it did.
    clap_mangen::generate_to(Cli::command(), dir)
        .with_context(|| format!("writing man pages into {}", dir.display()))?;
    let pages = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(std::result::Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(BIN) && name.ends_with(".1")
        })
        .count();
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_completion_names_the_subcommands() {
        let mut out = Vec::new();
        completions(Shell::Bash, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("director-ctl"), "{text}");
        for sub in ["attach", "run", "check", "completions"] {
            assert!(text.contains(sub), "bash completion lacks {sub}");
        }
    }

    #[test]
    fn man_pages_cover_the_subcommands_but_not_the_hidden_one() {
        let dir = std::env::temp_dir().join(format!("director-man-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let n = man_pages(&dir).unwrap();
        let top = std::fs::read_to_string(dir.join("director-ctl.1")).unwrap();
        let run = dir.join("director-ctl-run.1").exists();
        let add = dir.join("director-ctl-server-add.1").exists();
        let man = dir.join("director-ctl-man.1").exists();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(n > 20, "only {n} pages");
        assert!(top.starts_with(".ie") || top.contains(".TH"), "{top}");
        assert!(top.contains("attach"), "the top page lists no subcommands");
        assert!(run && add, "run: {run}, server add: {add}");
        assert!(!man, "the hidden man command got a page");
    }
}
