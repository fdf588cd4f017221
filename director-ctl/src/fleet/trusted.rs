//! What an edge takes from the store, and only once its trust file says so: a version's
//! envelope opened (signed by a trusted key, for this fleet, as a manifest) before any of
//! its chunks is read, never older than the version held; an overlay likewise, never older
//! than the overlay held (its serial). What fails is [`Refused`], with its reason: the
//! edge says so (log, `director_fleet_refused_total`, its report in `fleet status`), does
//! not ask for it again, and answers on from what it holds.

use anyhow::Result;
use director_plan::fleet::envelope::{self, Kind, Reason, Rejection};
use director_plan::fleet::manifest::Manifest;

use super::keys::TrustFile;
use super::votes::Overlay;

/// Marks an error as a refusal of `what` (`version`, `overlay`, `copy`) numbered `version`
/// (a version, an overlay's serial) for `reason`; the error it is the context of says
/// what exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub what: &'static str,
    pub version: Option<u64>,
    pub reason: Reason,
}

impl Refused {
    /// A version whose content fails its checks (a digest, its format, its config, the
    /// kernel refusing it).
    pub fn invalid(v: u64) -> Refused {
        Refused {
            what: "version",
            version: Some(v),
            reason: Reason::Invalid,
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.what, self.version) {
            ("overlay", Some(s)) => write!(f, "refusing the overlay of serial {s}"),
            ("overlay", None) => write!(f, "refusing the overlay"),
            ("copy", Some(v)) => write!(f, "refusing its copy of version {v}"),
            (what, Some(v)) => write!(f, "refusing {what} {v}"),
            (what, None) => write!(f, "refusing {what}"),
        }
    }
}

/// The refusal as an error: "refusing version 4: not a signed envelope (unsigned)".
pub fn refused(
    what: &'static str,
    version: Option<u64>,
    reason: Reason,
    detail: String,
) -> anyhow::Error {
    anyhow::Error::new(Rejection { reason, detail }).context(Refused {
        what,
        version,
        reason,
    })
}

/// Opens version `v`'s envelope (`bytes`, from `versions/<v>`) and reads its manifest:
/// signed for this fleet by a trusted key, numbered `v`, and not below `held`.
pub fn version(
    trust: &TrustFile,
    fleet: &str,
    what: &'static str,
    v: u64,
    held: Option<u64>,
    bytes: &[u8],
) -> Result<Manifest> {
    let opened = envelope::open(bytes, Kind::Manifest, fleet, trust.policy())
        .map_err(|r| refused(what, Some(v), r.reason, r.detail))?;
    let m = Manifest::parse(&opened.payload)
        .map_err(|e| refused(what, Some(v), Reason::Invalid, format!("{e:#}")))?;
    if m.version != v {
        // A signed manifest of another version put under this number.
        return Err(refused(
            what,
            Some(v),
            Reason::Rollback,
            format!("its manifest says version {}", m.version),
        ));
    }
    older(what, v, held)?;
    Ok(m)
}

/// Refuses version `v` when it is below the version held (`current` put back).
pub fn older(what: &'static str, v: u64, held: Option<u64>) -> Result<()> {
    match held {
        Some(h) if v < h => Err(refused(
            what,
            Some(v),
            Reason::Rollback,
            format!("older than version {h}, which this edge holds"),
        )),
        _ => Ok(()),
    }
}

/// Opens the overlay's envelope: signed for this fleet by a trusted key, and newer than
/// `held` (a higher serial; the same serial only with the same servers). `Ok(None)`: the
/// overlay held, again.
pub fn overlay(
    trust: &TrustFile,
    fleet: &str,
    held: &Overlay,
    bytes: &[u8],
) -> Result<Option<Overlay>> {
    // The serial as the bytes say, for the message only: nothing unsigned is used.
    let said = Overlay::unchecked(bytes).map(|o| o.serial);
    let opened = envelope::open(bytes, Kind::Overlay, fleet, trust.policy())
        .map_err(|r| refused("overlay", said, r.reason, r.detail))?;
    let ov = Overlay::parse(&opened.payload)
        .map_err(|e| refused("overlay", said, Reason::Invalid, format!("{e:#}")))?;
    if ov == *held {
        return Ok(None);
    }
    if ov.serial <= held.serial {
        return Err(refused(
            "overlay",
            Some(ov.serial),
            Reason::Rollback,
            format!(
                "not newer than the overlay of serial {}, which this edge holds",
                held.serial
            ),
        ));
    }
    Ok(Some(ov))
}

/// The refusal an error carries, if it is one.
pub fn refusal(e: &anyhow::Error) -> Option<Refused> {
    e.downcast_ref::<Refused>().copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ServiceServer;
    use director_plan::fleet::envelope::{seal, trust_line, SigningKey};

    fn trust_file(keys: &[&SigningKey]) -> (TrustFile, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!(
            "director-trusted-{}-{}",
            std::process::id(),
            keys.len()
        ));
        let text: Vec<String> = keys
            .iter()
            .map(|k| trust_line(&k.verifying_key(), "k"))
            .collect();
        std::fs::write(&path, text.join("\n")).unwrap();
        (TrustFile::load(Some(&path)).unwrap(), path)
    }

    fn reason(r: Result<impl std::fmt::Debug>) -> Reason {
        refusal(&r.unwrap_err()).expect("a refusal").reason
    }

    fn manifest(v: u64) -> Vec<u8> {
        Manifest {
            version: v,
            table: String::new(),
            chunks: Vec::new(),
            entries: 0,
            sources: Default::default(),
            publisher: "p1".into(),
            published_ms: 1,
        }
        .to_json()
    }

    #[test]
    fn versions_are_signed_numbered_and_never_older() {
        let k = SigningKey::from_bytes(&[5; 32]);
        let (t, path) = trust_file(&[&k]);
        let env = |v: u64| seal(Kind::Manifest, "f", &manifest(v), &[&k]);
        assert_eq!(
            version(&t, "f", "version", 4, Some(3), &env(4))
                .unwrap()
                .version,
            4
        );
        assert_eq!(
            version(&t, "f", "version", 4, Some(4), &env(4))
                .unwrap()
                .version,
            4
        );
        assert_eq!(
            reason(version(&t, "f", "version", 3, Some(4), &env(3))),
            Reason::Rollback
        );
        // A signed version 3 put under number 5.
        let e = version(&t, "f", "version", 5, Some(4), &env(3)).unwrap_err();
        assert_eq!(refusal(&e).unwrap().reason, Reason::Rollback);
        assert_eq!(
            format!("{e:#}"),
            "refusing version 5: its manifest says version 3 (rollback)"
        );
        assert_eq!(
            reason(version(&t, "f", "version", 4, None, &manifest(4))),
            Reason::Unsigned
        );
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn overlays_only_move_forward() {
        let k = SigningKey::from_bytes(&[6; 32]);
        let (t, path) = trust_file(&[&k]);
        let ov = |serial: u64, down: &[&str]| Overlay {
            serial,
            down: down
                .iter()
                .map(|s| ServiceServer {
                    service: "www".into(),
                    server: s.to_string(),
                })
                .collect(),
        };
        let env = |o: &Overlay| seal(Kind::Overlay, "f", &serde_json::to_vec(o).unwrap(), &[&k]);
        let held = ov(10, &["x"]);
        assert_eq!(overlay(&t, "f", &held, &env(&held)).unwrap(), None);
        assert_eq!(
            overlay(&t, "f", &held, &env(&ov(11, &[]))).unwrap(),
            Some(ov(11, &[]))
        );
        assert_eq!(
            reason(overlay(&t, "f", &held, &env(&ov(9, &[])))),
            Reason::Rollback
        );
        assert_eq!(
            reason(overlay(&t, "f", &held, &env(&ov(10, &[])))),
            Reason::Rollback
        );
        let bare = serde_json::to_vec(&ov(12, &[])).unwrap();
        let e = overlay(&t, "f", &held, &bare).unwrap_err();
        assert_eq!(refusal(&e).unwrap().reason, Reason::Unsigned);
        assert!(
            format!("{e:#}").starts_with("refusing the overlay of serial 12: "),
            "{e:#}"
        );
        let _ = std::fs::remove_file(path);
    }
}
