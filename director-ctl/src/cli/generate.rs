//! Shell completions and man pages, generated from the clap definitions (the caller passes
//! `Cli::command()`), so they can never describe options the binary does not take. The Debian package ships both
//! (`cargo xtask deb` runs the built binary to write them); `completions` is also there for
//! anyone who installs the binary by hand.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use clap::Command;
use clap_complete::Shell;

/// The binary's name as users type it: completions are registered for this name.
const BIN: &str = "director-ctl";

/// Writes `cmd`'s completion script for `shell` to `out`.
pub fn completions(mut cmd: Command, shell: Shell, out: &mut dyn Write) -> Result<()> {
    clap_complete::generate(shell, &mut cmd, BIN, out);
    out.flush().context("writing the completion script")
}

/// Writes `cmd`'s page (`director-ctl.1`) and one page per visible subcommand
/// (`director-ctl-server-add.1`, ...) into `dir`, which is created if missing; returns how
/// many pages are there.
pub fn man_pages(cmd: Command, dir: &Path) -> Result<usize> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // clap_mangen walks the tree itself (hidden commands, this one included, are left
    // out); the count is read back from the directory so the caller can say what it did.
    clap_mangen::generate_to(cmd, dir)
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

    /// A small command of the same shape: nested subcommands and a hidden one.
    fn cli() -> Command {
        Command::new(BIN)
            .version("1.2.3")
            .subcommand(
                Command::new("attach")
                    .about("Attach")
                    .arg(clap::arg!(--iface <IF>)),
            )
            .subcommand(Command::new("server").subcommand(Command::new("add")))
            .subcommand(Command::new("man").hide(true))
    }

    #[test]
    fn completions_name_the_binary_and_its_subcommands() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut out = Vec::new();
            completions(cli(), shell, &mut out).unwrap();
            let text = String::from_utf8(out).unwrap();
            assert!(text.contains("director-ctl"), "{shell}: {text}");
            // fish spells the option `-l iface`, bash and zsh `--iface`.
            assert!(
                text.contains("attach") && text.contains("iface"),
                "{shell}: {text}"
            );
        }
    }

    #[test]
    fn man_pages_cover_the_subcommands_but_not_the_hidden_one() {
        let dir = std::env::temp_dir().join(format!("director-man-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let n = man_pages(cli(), &dir).unwrap();
        let top = std::fs::read_to_string(dir.join("director-ctl.1")).unwrap();
        let add = std::fs::read_to_string(dir.join("director-ctl-server-add.1"));
        let man = dir.join("director-ctl-man.1").exists();
        let _ = std::fs::remove_dir_all(&dir);
        // director-ctl, -attach, -server, -server-add.
        assert_eq!(n, 4);
        assert!(top.contains(".TH director-ctl 1"), "{top}");
        assert!(top.contains("attach") && top.contains("1.2.3"), "{top}");
        assert!(add.is_ok_and(|t| t.contains("director\\-ctl\\-server\\-add")));
        assert!(!man, "the hidden command got a page");
    }
}
