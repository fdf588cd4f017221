//! The CLI's side of `[web]`: how `explain --run`, `demand --run` and `impact --run` reach a
//! listener that asks for TLS or credentials, and `director-ctl web hash-password`.

use std::io::BufRead;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Subcommand;

use crate::web::{client::secret_file, Client, Credential};

/// The environment variable a basic auth password may come from (never a flag: the
/// command line is visible to every user of the host).
pub const PASSWORD_ENV: &str = "DIRECTOR_WEB_PASSWORD";

/// How to reach `run`'s listener when its `[web]` asks for TLS or credentials.
#[derive(clap::Args, Debug, Clone, Default)]
pub(super) struct WebClientArgs {
    /// The CA certificate (PEM) the listener's TLS certificate is verified by: with it the
    /// request goes over TLS (the certificate must have the address as an IP SAN).
    #[arg(long, env = "DIRECTOR_WEB_CA", value_name = "FILE")]
    web_ca: Option<PathBuf>,
    /// A client certificate (PEM) for a listener with `[web] client_ca`; with --web-key.
    #[arg(
        long,
        env = "DIRECTOR_WEB_CERT",
        value_name = "FILE",
        requires = "web_key"
    )]
    web_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(
        long,
        env = "DIRECTOR_WEB_KEY",
        value_name = "FILE",
        requires = "web_cert"
    )]
    web_key: Option<PathBuf>,
    /// A `[web] basic_auth` user; the password comes from --web-password-file or the
    /// DIRECTOR_WEB_PASSWORD environment variable.
    #[arg(long, env = "DIRECTOR_WEB_USER", value_name = "NAME")]
    web_user: Option<String>,
    /// A file whose first line is --web-user's password.
    #[arg(long, env = "DIRECTOR_WEB_PASSWORD_FILE", value_name = "FILE")]
    web_password_file: Option<PathBuf>,
    /// A file whose first line is a bearer token (`[web] bearer_tokens`; only over TLS).
    #[arg(
        long,
        env = "DIRECTOR_WEB_TOKEN_FILE",
        value_name = "FILE",
        conflicts_with = "web_user"
    )]
    web_token_file: Option<PathBuf>,
}

impl WebClientArgs {
    pub(super) fn client(&self) -> Result<Client> {
        let credential = match (&self.web_user, &self.web_token_file) {
            (Some(user), _) => {
                let password = match &self.web_password_file {
                    Some(f) => secret_file(f).context("--web-password-file")?,
                    None => std::env::var(PASSWORD_ENV).map_err(|_| {
                        anyhow::anyhow!(
                            "--web-user {user}: give its password in --web-password-file FILE \
                             or in {PASSWORD_ENV}"
                        )
                    })?,
                };
                Credential::Basic {
                    user: user.clone(),
                    password,
                }
            }
            (None, Some(f)) => Credential::Bearer(secret_file(f).context("--web-token-file")?),
            (None, None) => {
                if self.web_password_file.is_some() {
                    bail!("--web-password-file needs --web-user");
                }
                Credential::None
            }
        };
        let identity = match (&self.web_cert, &self.web_key) {
            (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
            _ => None,
        };
        Client::new(self.web_ca.as_deref(), identity, credential)
    }
}

#[derive(Subcommand)]
pub(super) enum WebCmd {
    /// Read a password (or a bearer token) on standard input, one line, and print its
    /// bcrypt hash for `[web] basic_auth` or `bearer_tokens`. The password itself is never
    /// written to the config.
    HashPassword {
        /// bcrypt's cost: each verification takes 2^cost rounds (10: tens of
        /// milliseconds, once per credential and process).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(4..=31))]
        cost: u32,
    },
}

pub(super) fn run(cmd: WebCmd) -> Result<()> {
    match cmd {
        WebCmd::HashPassword { cost } => {
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .context("reading the password from standard input")?;
            let password = line.trim_end_matches(['\r', '\n']);
            println!("{}", crate::web::hash_password(password, cost)?);
        }
    }
    Ok(())
}
