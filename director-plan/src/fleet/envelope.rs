//! What a fleet's publishers sign and its edges verify before they read anything else: an
//! envelope (DSSE-like) holding the payload's exact bytes, its type, the fleet's name and
//! Ed25519 signatures over [`pae`] of all three. The store carries envelopes but is not
//! trusted: a payload is taken only when a key of the edge's trust file (given out of band,
//! never read from the store) signed it for this fleet and this type, so a manifest cannot
//! be passed off as an overlay, nor one fleet's version as another's.
//!
//! ```text
//! {"payloadType":"application/vnd.director.manifest+json","fleet":"prod",
//!  "payload":"<base64 of the manifest's bytes>",
//!  "signatures":[{"keyid":"<16 hex>","sig":"<base64 of 64 bytes>"}]}
//! ```
//!
//! A new kind of signed payload (an operator's action, an audit record) is one more
//! [`Kind`]: the envelope, the signing and the checks stay as they are.

use std::fmt;

use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ed25519_dalek::{Signature as EdSignature, Signer as _};
pub use ed25519_dalek::{SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What an envelope holds: each kind has a payload type of its own, which the signature
/// covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A version's manifest (`versions/<N>`).
    Manifest,
    /// The servers out by a quorum of observers (`overlay`).
    Overlay,
}

impl Kind {
    pub fn payload_type(self) -> &'static str {
        match self {
            Kind::Manifest => "application/vnd.director.manifest+json",
            Kind::Overlay => "application/vnd.director.overlay+json",
        }
    }

    /// How logs, metrics and `fleet status` name what was refused.
    pub fn what(self) -> &'static str {
        match self {
            Kind::Manifest => "version",
            Kind::Overlay => "overlay",
        }
    }
}

/// Why a payload was refused: the `reason` label of `director_fleet_refused_total` and what
/// `fleet status` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// No envelope (a bare manifest, an older publisher's) or one without signatures.
    Unsigned,
    /// Signed, but by no key the trust file holds.
    UnknownKey,
    /// Signed under a trusted key's id, but the signature does not verify: the bytes were
    /// changed after signing, or the signature was made up.
    BadSignature,
    /// Signed for another fleet.
    OtherFleet,
    /// Signed as another kind of payload (an overlay where a manifest belongs).
    WrongType,
    /// An envelope whose fields do not decode.
    Malformed,
    /// Properly signed, but older than what the edge holds.
    Rollback,
    /// Properly signed, but its content fails its checks (a digest, the config).
    Invalid,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Unsigned => "unsigned",
            Reason::UnknownKey => "unknown_key",
            Reason::BadSignature => "bad_signature",
            Reason::OtherFleet => "other_fleet",
            Reason::WrongType => "wrong_type",
            Reason::Malformed => "malformed",
            Reason::Rollback => "rollback",
            Reason::Invalid => "invalid",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A payload refused, why, and what exactly was wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub reason: Reason,
    pub detail: String,
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.detail, self.reason)
    }
}

impl std::error::Error for Rejection {}

fn reject(reason: Reason, detail: impl Into<String>) -> Rejection {
    Rejection {
        reason,
        detail: detail.into(),
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// [`key_id`] of the key that signed.
    pub keyid: String,
    /// Base64 of the 64-byte Ed25519 signature over [`pae`].
    pub sig: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    pub fleet: String,
    /// Base64 of the payload's exact bytes.
    pub payload: String,
    pub signatures: Vec<Signature>,
}

/// What is signed: the payload's type, the fleet's name and the payload, each behind its
/// length (DSSE's pre-authentication encoding with the fleet added), so no two different
/// (type, fleet, payload) give the same bytes.
pub fn pae(payload_type: &str, fleet: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + payload_type.len() + fleet.len() + 48);
    out.extend_from_slice(b"DSSEv1+fleet");
    for part in [payload_type.as_bytes(), fleet.as_bytes(), payload] {
        out.extend_from_slice(format!(" {} ", part.len()).as_bytes());
        out.extend_from_slice(part);
    }
    out
}

/// A key's id: the first 8 bytes of SHA-256 over its 32 bytes, in hex. Envelopes name the
/// key that signed by it; trust files need not (it is computed from the key).
pub fn key_id(key: &VerifyingKey) -> String {
    Sha256::digest(key.as_bytes())[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Wraps `payload` for `fleet`, signed by each of `keys` (none: an unsigned envelope, which
/// only an edge run with `--insecure-unsigned` takes).
pub fn seal(kind: Kind, fleet: &str, payload: &[u8], keys: &[&SigningKey]) -> Vec<u8> {
    let signed = pae(kind.payload_type(), fleet, payload);
    let env = Envelope {
        payload_type: kind.payload_type().to_string(),
        fleet: fleet.to_string(),
        payload: B64.encode(payload),
        signatures: keys
            .iter()
            .map(|k| Signature {
                keyid: key_id(&k.verifying_key()),
                sig: B64.encode(k.sign(&signed).to_bytes()),
            })
            .collect(),
    };
    // Strings only: always serialises.
    serde_json::to_vec(&env).unwrap_or_default()
}

/// A trusted public key and the name its line gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustedKey {
    pub key: VerifyingKey,
    pub id: String,
    pub name: String,
}

/// The keys an edge takes payloads from: its trust file, one key a line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trust {
    pub keys: Vec<TrustedKey>,
}

/// A trust file's line for `key`: `ed25519 <base64 of its 32 bytes> <name>`.
pub fn trust_line(key: &VerifyingKey, name: &str) -> String {
    format!("ed25519 {} {name}", B64.encode(key.as_bytes()))
}

impl Trust {
    /// Parses a trust file: `ed25519 <base64> [name]` a line; blank lines and `#` comments
    /// are skipped. Errors name the line.
    pub fn parse(text: &str) -> Result<Trust> {
        let mut keys: Vec<TrustedKey> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(alg), Some(b64)) = (words.next(), words.next()) else {
                bail!("line {n}: expected `ed25519 <base64 key> [name]`");
            };
            if alg != "ed25519" {
                bail!("line {n}: {alg:?} keys are not supported (only ed25519)");
            }
            let key = public_from_base64(b64).with_context(|| format!("line {n}"))?;
            let id = key_id(&key);
            let name = words.collect::<Vec<_>>().join(" ");
            if let Some(k) = keys.iter().find(|k| k.id == id) {
                bail!("line {n}: the same key as {:?} again", k.name);
            }
            keys.push(TrustedKey {
                name: if name.is_empty() { id.clone() } else { name },
                key,
                id,
            });
        }
        if keys.is_empty() {
            bail!("no keys (a line is `ed25519 <base64 key> [name]`)");
        }
        Ok(Trust { keys })
    }

    /// Every key's name, for a log line.
    pub fn names(&self) -> Vec<String> {
        self.keys
            .iter()
            .map(|k| format!("{} ({})", k.name, k.id))
            .collect()
    }
}

fn public_from_base64(b64: &str) -> Result<VerifyingKey> {
    let raw = B64.decode(b64).context("the key is not base64")?;
    let bytes: [u8; 32] = raw
        .as_slice()
        .try_into()
        .map_err(|_| anyhow::anyhow!("an ed25519 key has 32 bytes, this one {}", raw.len()))?;
    VerifyingKey::from_bytes(&bytes).context("not an ed25519 public key")
}

/// How an edge checks envelopes.
#[derive(Clone, Copy, Debug)]
pub enum Policy<'a> {
    /// Only payloads signed by one of these keys.
    Signed(&'a Trust),
    /// Any signature or none (`--insecure-unsigned`, for labs): the type and the fleet are
    /// still checked.
    Unsigned,
}

/// A payload that passed: its bytes and the key that signed it (none when unchecked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opened {
    pub payload: Vec<u8>,
    /// The trusted key's (id, name).
    pub signer: Option<(String, String)>,
}

/// Reads an envelope without checking it (for what only reads, never applies: `fleet
/// status`, a publisher's clean-up): the payload and the key ids that say they signed.
pub fn peek(bytes: &[u8]) -> Option<(Vec<u8>, Vec<String>)> {
    let env: Envelope = serde_json::from_slice(bytes).ok()?;
    let payload = B64.decode(&env.payload).ok()?;
    Some((
        payload,
        env.signatures.into_iter().map(|s| s.keyid).collect(),
    ))
}

/// Checks an envelope read from the store as a `kind` for `fleet` under `policy`, and
/// returns its payload; nothing of the payload is read before this says yes.
pub fn open(
    bytes: &[u8],
    kind: Kind,
    fleet: &str,
    policy: Policy<'_>,
) -> Result<Opened, Rejection> {
    let env: Envelope = serde_json::from_slice(bytes).map_err(|_| {
        reject(
            Reason::Unsigned,
            "not a signed envelope (a bare payload, or a publisher without signing)",
        )
    })?;
    if env.payload_type != kind.payload_type() {
        return Err(reject(
            Reason::WrongType,
            format!(
                "signed as {:?}, not {:?}",
                env.payload_type,
                kind.payload_type()
            ),
        ));
    }
    if env.fleet != fleet {
        return Err(reject(
            Reason::OtherFleet,
            format!("signed for fleet {:?}, not {fleet:?}", env.fleet),
        ));
    }
    let payload = B64
        .decode(&env.payload)
        .map_err(|e| reject(Reason::Malformed, format!("its payload is not base64: {e}")))?;
    let trust = match policy {
        Policy::Unsigned => {
            return Ok(Opened {
                payload,
                signer: None,
            })
        }
        Policy::Signed(t) => t,
    };
    if env.signatures.is_empty() {
        return Err(reject(Reason::Unsigned, "no signature"));
    }
    let signed = pae(&env.payload_type, &env.fleet, &payload);
    let mut failed = None;
    for s in &env.signatures {
        let Some(k) = trust.keys.iter().find(|k| k.id == s.keyid) else {
            continue;
        };
        let ok = B64
            .decode(&s.sig)
            .ok()
            .and_then(|b| <[u8; 64]>::try_from(b.as_slice()).ok())
            .map(|b| EdSignature::from_bytes(&b))
            .is_some_and(|sig| k.key.verify_strict(&signed, &sig).is_ok());
        if ok {
            return Ok(Opened {
                payload,
                signer: Some((k.id.clone(), k.name.clone())),
            });
        }
        failed = Some(k);
    }
    Err(match failed {
        Some(k) => reject(
            Reason::BadSignature,
            format!("the signature by key {} ({}) does not verify", k.name, k.id),
        ),
        None => {
            let ids: Vec<&str> = env.signatures.iter().map(|s| s.keyid.as_str()).collect();
            reject(
                Reason::UnknownKey,
                format!(
                    "signed by key {} which the trust file does not hold",
                    ids.join(", ")
                ),
            )
        }
    })
}

/// PKCS#8 (RFC 8410) of an Ed25519 private key before its 32 bytes: what `openssl genpkey
/// -algorithm ed25519` writes, and `fleet keygen` too.
const PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// A private key file's text (PEM, `-----BEGIN PRIVATE KEY-----`).
pub fn secret_to_pem(key: &SigningKey) -> String {
    let mut der = PKCS8_PREFIX.to_vec();
    der.extend_from_slice(key.as_bytes());
    format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        B64.encode(der)
    )
}

/// Reads a private key file written by [`secret_to_pem`] or openssl.
pub fn secret_from_pem(text: &str) -> Result<SigningKey> {
    let body = text
        .split("-----BEGIN PRIVATE KEY-----")
        .nth(1)
        .and_then(|r| r.split("-----END PRIVATE KEY-----").next())
        .context("not a PEM private key (-----BEGIN PRIVATE KEY-----)")?;
    let b64: String = body.split_whitespace().collect();
    let der = B64.decode(b64).context("the PEM's body is not base64")?;
    let seed: [u8; 32] = der
        .strip_prefix(&PKCS8_PREFIX[..])
        .and_then(|s| s.try_into().ok())
        .context("not an Ed25519 private key (PKCS#8, as `openssl genpkey -algorithm ed25519`)")?;
    Ok(SigningKey::from_bytes(&seed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> SigningKey {
        SigningKey::from_bytes(&[n; 32])
    }

    fn trust(keys: &[&SigningKey]) -> Trust {
        let text: Vec<String> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| trust_line(&k.verifying_key(), &format!("k{i}")))
            .collect();
        Trust::parse(&text.join("\n")).unwrap()
    }

    fn reason(r: Result<Opened, Rejection>) -> Reason {
        r.unwrap_err().reason
    }

    #[test]
    fn signed_payloads_open_for_their_kind_and_fleet_only() {
        let (a, b) = (key(1), key(2));
        let t = trust(&[&a]);
        let env = seal(Kind::Manifest, "prod", b"{\"version\":3}", &[&a]);
        let o = open(&env, Kind::Manifest, "prod", Policy::Signed(&t)).unwrap();
        assert_eq!(o.payload, b"{\"version\":3}");
        assert_eq!(o.signer, Some((key_id(&a.verifying_key()), "k0".into())));
        // Another kind, another fleet.
        assert_eq!(
            reason(open(&env, Kind::Overlay, "prod", Policy::Signed(&t))),
            Reason::WrongType
        );
        assert_eq!(
            reason(open(&env, Kind::Manifest, "lab", Policy::Signed(&t))),
            Reason::OtherFleet
        );
        // A key the trust file lacks.
        let by_b = seal(Kind::Manifest, "prod", b"{}", &[&b]);
        let r = open(&by_b, Kind::Manifest, "prod", Policy::Signed(&t)).unwrap_err();
        assert_eq!(r.reason, Reason::UnknownKey);
        assert!(r.detail.contains(&key_id(&b.verifying_key())), "{r}");
        // No signature, no envelope.
        let none = seal(Kind::Manifest, "prod", b"{}", &[]);
        assert_eq!(
            reason(open(&none, Kind::Manifest, "prod", Policy::Signed(&t))),
            Reason::Unsigned
        );
        assert_eq!(
            reason(open(
                b"{\"version\":3}",
                Kind::Manifest,
                "prod",
                Policy::Signed(&t)
            )),
            Reason::Unsigned
        );
        // One good signature among others is enough (a rotation's double signing).
        let both = seal(Kind::Manifest, "prod", b"{}", &[&b, &a]);
        assert!(open(&both, Kind::Manifest, "prod", Policy::Signed(&t)).is_ok());
        // Unchecked: any signature or none, but still the kind and the fleet.
        assert!(open(&none, Kind::Manifest, "prod", Policy::Unsigned).is_ok());
        assert_eq!(
            reason(open(&none, Kind::Manifest, "lab", Policy::Unsigned)),
            Reason::OtherFleet
        );
    }

    /// Changing any of the signed fields after signing breaks the signature, and changing
    /// the fleet or the type to this edge's makes no difference: they are signed too.
    #[test]
    fn tampered_envelopes_are_refused() {
        let a = key(1);
        let t = trust(&[&a]);
        let env = seal(Kind::Overlay, "lab", b"{\"down\":[]}", &[&a]);
        let mut e: Envelope = serde_json::from_slice(&env).unwrap();
        let redo = |e: &Envelope| serde_json::to_vec(e).unwrap();
        let good = e.clone();
        e.payload = B64.encode(b"{\"down\":[{\"service\":\"www\",\"server\":\"x\"}]}");
        assert_eq!(
            reason(open(&redo(&e), Kind::Overlay, "lab", Policy::Signed(&t))),
            Reason::BadSignature
        );
        // Signed for "lab", relabelled "prod".
        let mut e = good.clone();
        e.fleet = "prod".into();
        assert_eq!(
            reason(open(&redo(&e), Kind::Overlay, "prod", Policy::Signed(&t))),
            Reason::BadSignature
        );
        // Signed as an overlay, relabelled a manifest.
        let mut e = good.clone();
        e.payload_type = Kind::Manifest.payload_type().into();
        assert_eq!(
            reason(open(&redo(&e), Kind::Manifest, "lab", Policy::Signed(&t))),
            Reason::BadSignature
        );
        let mut e = good.clone();
        e.signatures[0].sig = "!!".into();
        assert_eq!(
            reason(open(&redo(&e), Kind::Overlay, "lab", Policy::Signed(&t))),
            Reason::BadSignature
        );
        let mut e = good;
        e.payload = "not base64".into();
        assert_eq!(
            reason(open(&redo(&e), Kind::Overlay, "lab", Policy::Signed(&t))),
            Reason::Malformed
        );
    }

    #[test]
    fn pae_separates_its_fields() {
        assert_ne!(pae("a", "bc", b"d"), pae("ab", "c", b"d"));
        assert_eq!(pae("t", "f", b"p"), b"DSSEv1+fleet 1 t 1 f 1 p");
    }

    #[test]
    fn trust_files_and_key_files() {
        let (a, b) = (key(7), key(8));
        let text = format!(
            "# the publishers\n{}\n\n{}   # the new one\n",
            trust_line(&a.verifying_key(), "p1 2025"),
            trust_line(&b.verifying_key(), "")
        );
        let t = Trust::parse(&text).unwrap();
        assert_eq!(t.keys.len(), 2);
        assert_eq!(t.keys[0].name, "p1 2025");
        assert_eq!(t.keys[1].name, t.keys[1].id);
        for (bad, says) in [
            ("", "no keys"),
            ("rsa AAAA x", "line 1: \"rsa\""),
            ("ed25519\n", "line 1: expected"),
            ("ed25519 AAAA", "32 bytes"),
            ("ed25519 ***", "base64"),
        ] {
            let e = format!("{:#}", Trust::parse(bad).unwrap_err());
            assert!(e.contains(says), "{bad:?}: {e}");
        }
        let twice = format!("{0}\n{0}", trust_line(&a.verifying_key(), "a"));
        let e = format!("{:#}", Trust::parse(&twice).unwrap_err());
        assert!(e.contains("line 2: the same key"), "{e}");

        let pem = secret_to_pem(&a);
        assert_eq!(secret_from_pem(&pem).unwrap().to_bytes(), a.to_bytes());
        // What openssl genpkey -algorithm ed25519 writes (RFC 8410's example key).
        let openssl = "-----BEGIN PRIVATE KEY-----\n\
            MC4CAQAwBQYDK2VwBCIEINTuctv5E1hK1bbY8fdp+K06/nwoy/HU++CXqI9EdVhC\n\
            -----END PRIVATE KEY-----\n";
        let k = secret_from_pem(openssl).unwrap();
        assert_eq!(
            B64.encode(k.verifying_key().as_bytes()),
            "Gb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE="
        );
        for bad in [
            "",
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----",
        ] {
            assert!(secret_from_pem(bad).is_err(), "{bad:?}");
        }
    }

    /// The figure: an edge verifies a full-scale version's envelope (the manifest of the
    /// 755,979-entry table: 179 chunks, and its sources) in well under the 50 ms the issue
    /// allows; the chunks are checked by digest as before. Measured here: 0.19 ms for an
    /// 18 KB manifest (`cargo test -p director-plan full_scale -- --nocapture`).
    #[test]
    fn verifying_a_full_scale_manifest_is_cheap() {
        use super::super::manifest::{ChunkRef, Manifest, Sources};
        let d = |i: usize| format!("{:064x}", i * 7919);
        let m = Manifest {
            version: 123_456,
            table: d(0),
            chunks: (1..=179)
                .map(|i| ChunkRef {
                    digest: d(i),
                    bytes: 190_000,
                })
                .collect(),
            entries: 755_979,
            sources: Sources {
                config: ChunkRef {
                    digest: d(999),
                    bytes: 4096,
                },
                inputs: (0..12)
                    .map(|i| (format!("inputs/file-{i}.mrt"), d(i)))
                    .collect(),
                compiler: "director 0.1.0".into(),
                live: None,
            },
            publisher: "p1".into(),
            published_ms: 1,
        };
        let a = key(3);
        let t = trust(&[&key(4), &a]);
        let env = seal(Kind::Manifest, "director", &m.to_json(), &[&a]);
        let n = 50;
        let start = std::time::Instant::now();
        for _ in 0..n {
            let o = open(&env, Kind::Manifest, "director", Policy::Signed(&t)).unwrap();
            assert_eq!(Manifest::parse(&o.payload).unwrap().chunks.len(), 179);
        }
        let each = start.elapsed() / n;
        println!(
            "a full-scale manifest ({} bytes, envelope {} bytes): opened, verified and \
             parsed in {:.3} ms",
            m.to_json().len(),
            env.len(),
            each.as_secs_f64() * 1e3
        );
        assert!(each < std::time::Duration::from_millis(50), "{each:?}");
    }
}
