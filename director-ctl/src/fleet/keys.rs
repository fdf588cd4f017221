//! The fleet's signing keys on disk: a publisher's private key (`--sign-key`, PKCS#8 PEM
//! as `fleet keygen` or `openssl genpkey -algorithm ed25519` write it, readable by its
//! owner alone), an edge's trust file (`--trust`: `ed25519 <base64> <name>` a line), and
//! `fleet keygen` / `fleet pubkey`. Both files are read again when they change, so a key is
//! added, switched or removed without a restart (docs/fleet.md, "Rotating a key"); a file
//! that no longer reads is refused and the keys held stay in use.

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use director_plan::fleet::envelope::{
    self, key_id, secret_from_pem, secret_to_pem, trust_line, Kind, Policy, SigningKey, Trust,
    TrustedKey,
};

use crate::controller::run::{stamps, Stamp};

/// A publisher's private key and where it came from.
pub struct SignKey {
    path: PathBuf,
    stamp: Vec<Stamp>,
    pub key: SigningKey,
    /// [`key_id`] of its public half.
    pub id: String,
}

/// Reads a private key file, refusing one that others may read (as ssh does).
fn read_secret(path: &Path) -> Result<SigningKey> {
    let what = || format!("--sign-key {}", path.display());
    let meta = std::fs::metadata(path).with_context(what)?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        bail!(
            "{}: readable by others (mode {mode:04o}): chmod 600 {}",
            what(),
            path.display()
        );
    }
    let text = std::fs::read_to_string(path).with_context(what)?;
    secret_from_pem(&text).with_context(what)
}

impl SignKey {
    pub fn load(path: &Path) -> Result<SignKey> {
        let key = read_secret(path)?;
        Ok(SignKey {
            path: path.to_path_buf(),
            stamp: stamps(&[path.to_path_buf()]),
            id: key_id(&key.verifying_key()),
            key,
        })
    }

    /// The key file read again if it changed: `Ok(true)` when the key is another now.
    pub fn reload(&mut self) -> Result<bool> {
        let now = stamps(std::slice::from_ref(&self.path));
        if now == self.stamp {
            return Ok(false);
        }
        self.stamp = now;
        let key = read_secret(&self.path)?;
        let changed = key.to_bytes() != self.key.to_bytes();
        self.id = key_id(&key.verifying_key());
        self.key = key;
        Ok(changed)
    }
}

/// An edge's trust file, or none (`--insecure-unsigned`).
pub struct TrustFile {
    path: Option<PathBuf>,
    stamp: Vec<Stamp>,
    trust: Trust,
}

fn read_trust(path: &Path) -> Result<Trust> {
    let what = || format!("--trust {}", path.display());
    let text = std::fs::read_to_string(path).with_context(what)?;
    Trust::parse(&text).with_context(what)
}

impl TrustFile {
    /// `None`: envelopes are taken unsigned (`--insecure-unsigned`).
    pub fn load(path: Option<&Path>) -> Result<TrustFile> {
        Ok(match path {
            Some(p) => TrustFile {
                path: Some(p.to_path_buf()),
                stamp: stamps(&[p.to_path_buf()]),
                trust: read_trust(p)?,
            },
            None => TrustFile {
                path: None,
                stamp: Vec::new(),
                trust: Trust::default(),
            },
        })
    }

    pub fn policy(&self) -> Policy<'_> {
        match self.path {
            Some(_) => Policy::Signed(&self.trust),
            None => Policy::Unsigned,
        }
    }

    /// The keys trusted, for a log line.
    pub fn names(&self) -> Vec<String> {
        self.trust.names()
    }

    /// The trust file read again if it changed: `Ok(true)` when its keys are others now;
    /// an error keeps the keys held.
    pub fn reload(&mut self) -> Result<bool> {
        let Some(path) = self.path.clone() else {
            return Ok(false);
        };
        let now = stamps(std::slice::from_ref(&path));
        if now == self.stamp {
            return Ok(false);
        }
        self.stamp = now;
        let trust = read_trust(&path)?;
        let changed = trust != self.trust;
        self.trust = trust;
        Ok(changed)
    }
}

/// `fleet keygen --out FILE`: a new private key in `out` (mode 0600; an existing file is
/// never overwritten) and its trust file line in `out.pub`; returns the line.
pub fn keygen(out: &Path, name: &str) -> Result<String> {
    let mut seed = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut seed))
        .context("reading /dev/urandom")?;
    let key = SigningKey::from_bytes(&seed);
    let line = trust_line(&key.verifying_key(), name);
    let pub_path = public_path(out);
    for p in [out, pub_path.as_path()] {
        if p.exists() {
            bail!("{} exists: not overwritten", p.display());
        }
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .with_context(|| format!("creating {}", out.display()))?;
    f.write_all(secret_to_pem(&key).as_bytes())
        .with_context(|| format!("writing {}", out.display()))?;
    std::fs::write(&pub_path, format!("{line}\n"))
        .with_context(|| format!("writing {}", pub_path.display()))?;
    Ok(line)
}

/// Where `keygen` writes the public line: `FILE.pub`.
pub fn public_path(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".pub");
    PathBuf::from(s)
}

/// `fleet pubkey --key FILE`: the trust file line of a private key (one made by openssl,
/// or whose `.pub` was lost).
pub fn pubkey(path: &Path, name: &str) -> Result<String> {
    Ok(trust_line(&read_secret(path)?.verifying_key(), name))
}

/// The name a new key's line gets by default: the file's stem (`p1.key` → `p1`).
pub fn default_name(out: &Path) -> String {
    out.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "director".into())
}

/// How a publisher writes what edges take: sealed in an envelope for its fleet, signed by
/// its key (none: `--insecure-unsigned`, for labs).
pub struct Sealer {
    key: Option<SignKey>,
    /// Its own public key as a trust set: what it wrote itself is recognised by this.
    own: Trust,
}

impl Sealer {
    pub fn new(key: Option<SignKey>) -> Sealer {
        let own = Trust {
            keys: key
                .iter()
                .map(|k| TrustedKey {
                    key: k.key.verifying_key(),
                    id: k.id.clone(),
                    name: "this publisher".into(),
                })
                .collect(),
        };
        Sealer { key, own }
    }

    /// `payload` as a `kind` of `fleet`, signed.
    pub fn seal(&self, kind: Kind, fleet: &str, payload: &[u8]) -> Vec<u8> {
        let keys: Vec<&SigningKey> = self.key.iter().map(|k| &k.key).collect();
        envelope::seal(kind, fleet, payload, &keys)
    }

    /// The payload of an envelope this publisher's key signed (unsigned: any envelope for
    /// the fleet and kind); `None` for anything else, which it writes again under its key.
    pub fn mine(&self, bytes: &[u8], kind: Kind, fleet: &str) -> Option<Vec<u8>> {
        let policy = match self.key {
            Some(_) => Policy::Signed(&self.own),
            None => Policy::Unsigned,
        };
        envelope::open(bytes, kind, fleet, policy)
            .ok()
            .map(|o| o.payload)
    }

    /// The key's id, or "unsigned".
    pub fn id(&self) -> &str {
        self.key.as_ref().map_or("unsigned", |k| k.id.as_str())
    }

    /// The key file read again if it changed: `Ok(true)` when it is another key now (what
    /// is current is then signed again under it).
    pub fn reload(&mut self) -> Result<bool> {
        let Some(k) = self.key.as_mut() else {
            return Ok(false);
        };
        if !k.reload()? {
            return Ok(false);
        }
        let key = self.key.take();
        *self = Sealer::new(key);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keygen_writes_a_private_key_only_its_owner_reads() {
        let dir = std::env::temp_dir().join(format!("director-keys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("p1.key");
        let line = keygen(&out, "p1").unwrap();
        assert!(
            line.starts_with("ed25519 ") && line.ends_with(" p1"),
            "{line}"
        );
        let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(
            std::fs::read_to_string(public_path(&out)).unwrap(),
            format!("{line}\n")
        );
        assert_eq!(pubkey(&out, "p1").unwrap(), line);
        let k = SignKey::load(&out).unwrap();
        let t = TrustFile::load(Some(&public_path(&out))).unwrap();
        assert_eq!(t.names(), [format!("p1 ({})", k.id)]);
        // Never overwritten; a key others can read is refused.
        let e = keygen(&out, "p1").unwrap_err().to_string();
        assert!(e.contains("exists"), "{e}");
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = format!("{:#}", SignKey::load(&out).err().unwrap());
        assert!(e.contains("chmod 600"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
