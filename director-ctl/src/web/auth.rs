//! Basic auth and bearer tokens against bcrypt hashes. bcrypt is slow on purpose (tens of
//! milliseconds), so a credential once verified is remembered by its SHA-256 (a scraper
//! polling every few seconds costs one bcrypt per process life), and verifications run off
//! the listener's thread, a few at once at most: a client guessing passwords slows only
//! its own answers.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine;
use sha2::{Digest, Sha256};

/// Credentials remembered at most; past it the memory starts over.
const REMEMBERED: usize = 256;

/// bcrypt verifications under way at once at most; more are refused at once (429).
const VERIFYING: usize = 4;

/// How a request fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// No credential, an unknown one or a wrong one: 401.
    Refused,
    /// Too many verifications under way: 429, try again.
    Busy,
}

#[derive(Default)]
pub struct Auth {
    users: BTreeMap<String, String>,
    tokens: Vec<String>,
    known: Mutex<HashSet<[u8; 32]>>,
    verifying: Arc<AtomicUsize>,
}

enum Presented {
    Basic(String, String),
    Bearer(String),
}

fn presented(header: Option<&hyper::header::HeaderValue>) -> Option<Presented> {
    let v = header?.to_str().ok()?;
    let (scheme, rest) = v.split_once(' ')?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("basic") {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()?;
        let text = String::from_utf8(raw).ok()?;
        let (user, password) = text.split_once(':')?;
        Some(Presented::Basic(user.to_string(), password.to_string()))
    } else if scheme.eq_ignore_ascii_case("bearer") {
        Some(Presented::Bearer(rest.to_string()))
    } else {
        None
    }
}

fn digest(kind: u8, a: &str, b: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([kind]);
    h.update(a.as_bytes());
    h.update([0]);
    h.update(b.as_bytes());
    h.finalize().into()
}

/// Ends a verification's count when it is dropped (also when its task is cancelled).
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Auth {
    pub fn new(users: BTreeMap<String, String>, tokens: Vec<String>) -> Auth {
        Auth {
            users,
            tokens,
            ..Auth::default()
        }
    }

    /// Whether requests need a credential at all.
    pub fn required(&self) -> bool {
        !self.users.is_empty() || !self.tokens.is_empty()
    }

    /// Checks the `Authorization` header.
    pub async fn check(&self, header: Option<&hyper::header::HeaderValue>) -> Verdict {
        if !self.required() {
            return Verdict::Allowed;
        }
        let Some(p) = presented(header) else {
            return Verdict::Refused;
        };
        let (key, secret, hashes) = match p {
            Presented::Basic(user, password) => match self.users.get(&user) {
                Some(h) => (digest(b'b', &user, &password), password, vec![h.clone()]),
                None => {
                    // An unknown user costs a verification all the same, so that the time
                    // taken does not tell which users exist.
                    if let Some(h) = self.users.values().next() {
                        let _ = self.verify(password, vec![h.clone()]).await;
                    }
                    return Verdict::Refused;
                }
            },
            Presented::Bearer(_) if self.tokens.is_empty() => return Verdict::Refused,
            Presented::Bearer(token) => (digest(b't', "", &token), token, self.tokens.clone()),
        };
        if self.lock().contains(&key) {
            return Verdict::Allowed;
        }
        let v = self.verify(secret, hashes).await;
        if v == Verdict::Allowed {
            let mut known = self.lock();
            if known.len() >= REMEMBERED {
                known.clear();
            }
            known.insert(key);
        }
        v
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<[u8; 32]>> {
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// bcrypt on the blocking pool, [`VERIFYING`] at once at most.
    async fn verify(&self, secret: String, hashes: Vec<String>) -> Verdict {
        if self.verifying.fetch_add(1, Ordering::SeqCst) >= VERIFYING {
            self.verifying.fetch_sub(1, Ordering::SeqCst);
            return Verdict::Busy;
        }
        let slot = Slot(Arc::clone(&self.verifying));
        let ok = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            hashes
                .iter()
                .any(|h| bcrypt::verify(&secret, h).unwrap_or(false))
        })
        .await
        .unwrap_or(false);
        if ok {
            Verdict::Allowed
        } else {
            Verdict::Refused
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn basic(user: &str, password: &str) -> HeaderValue {
        let b = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        HeaderValue::from_str(&format!("Basic {b}")).unwrap()
    }

    #[test]
    fn passwords_and_tokens_are_checked_against_their_hashes() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let users = BTreeMap::from([("prom".to_string(), bcrypt::hash("s3cret", 4).unwrap())]);
        let a = Auth::new(users, vec![bcrypt::hash("tok-1", 4).unwrap()]);
        rt.block_on(async {
            assert_eq!(a.check(None).await, Verdict::Refused);
            assert_eq!(
                a.check(Some(&basic("prom", "s3cret"))).await,
                Verdict::Allowed
            );
            // Remembered, and still exact: another password is not.
            assert_eq!(
                a.check(Some(&basic("prom", "s3cret"))).await,
                Verdict::Allowed
            );
            assert_eq!(
                a.check(Some(&basic("prom", "s3cret!"))).await,
                Verdict::Refused
            );
            assert_eq!(
                a.check(Some(&basic("root", "s3cret"))).await,
                Verdict::Refused
            );
            let bearer = |t: &str| HeaderValue::from_str(&format!("Bearer {t}")).unwrap();
            assert_eq!(a.check(Some(&bearer("tok-1"))).await, Verdict::Allowed);
            assert_eq!(a.check(Some(&bearer("tok-2"))).await, Verdict::Refused);
            // A password is not a token.
            assert_eq!(a.check(Some(&bearer("s3cret"))).await, Verdict::Refused);
        });
        let open = Auth::default();
        assert_eq!(rt.block_on(open.check(None)), Verdict::Allowed);
    }
}
