//! A zone's key: one ECDSA P-256 key (algorithm 13) that signs everything, a combined
//! signing key (flags 257: zone key and secure entry point), as RFC 8624 recommends for
//! algorithm 13 and as Knot and BIND make by default. Its DNSKEY, key tag and DS, and its
//! files: BIND's `K<zone>.+013+<tag>.private` (what `dnssec-keygen` writes, and what
//! director-ctl writes too) and PKCS#8 PEM (what Knot keeps in its key store).

use anyhow::{bail, Context, Result};
use p256::ecdsa::{signature::Signer, Signature, SigningKey, VerifyingKey};
use p256::pkcs8::DecodePrivateKey;
use sha2::{Digest, Sha256};

use super::wire::Name;

pub const ALGORITHM: u8 = 13;
/// Zone key + secure entry point: the one key of the zone, with its DS at the parent.
pub const FLAGS_CSK: u16 = 257;
pub const PROTOCOL: u8 = 3;
/// DS digest type 2: SHA-256 (RFC 4509), the one every validator must take.
pub const DIGEST_SHA256: u8 = 2;

#[derive(Clone)]
pub struct ZoneKey {
    signing: SigningKey,
}

impl std::fmt::Debug for ZoneKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the private part.
        write!(f, "ZoneKey(tag {})", self.tag())
    }
}

impl ZoneKey {
    /// From the 32-byte private scalar (the caller draws it from the OS's randomness).
    pub fn from_secret(secret: &[u8]) -> Result<ZoneKey> {
        let signing = SigningKey::from_slice(secret)
            .map_err(|_| anyhow::anyhow!("not a P-256 private key (32 bytes, in range)"))?;
        Ok(ZoneKey { signing })
    }

    /// A key file's text: BIND's private-key format, or a PKCS#8 PEM (`-----BEGIN
    /// PRIVATE KEY-----`).
    pub fn from_file_text(text: &str) -> Result<ZoneKey> {
        if text.contains("-----BEGIN PRIVATE KEY-----") {
            let signing = SigningKey::from_pkcs8_pem(text)
                .map_err(|e| anyhow::anyhow!("a PKCS#8 PEM that is not a P-256 key: {e}"))?;
            return Ok(ZoneKey { signing });
        }
        let mut algorithm = None;
        let mut secret = None;
        for line in text.lines() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            match k.trim() {
                "Algorithm" => algorithm = v.split_whitespace().next().map(str::to_string),
                "PrivateKey" => secret = Some(base64_decode(v.trim())?),
                _ => {}
            }
        }
        match algorithm.as_deref() {
            Some("13") => {}
            Some(a) => bail!("algorithm {a}: director signs with algorithm 13 (ECDSA P-256) only"),
            None => bail!("neither a BIND private-key file (no Algorithm line) nor a PKCS#8 PEM"),
        }
        let secret = secret.context("no PrivateKey line")?;
        ZoneKey::from_secret(&secret)
    }

    /// BIND's private-key file (v1.3), which `dnssec-signzone` and director both read.
    pub fn to_bind_private(&self) -> String {
        format!(
            "Private-key-format: v1.3\nAlgorithm: 13 (ECDSAP256SHA256)\nPrivateKey: {}\n",
            base64_encode(&self.signing.to_bytes())
        )
    }

    /// The public key as DNSKEY carries it: x then y, 64 bytes (RFC 6605 §4).
    pub fn public(&self) -> [u8; 64] {
        public_of(self.signing.verifying_key())
    }

    /// DNSKEY RDATA: flags 257, protocol 3, algorithm 13, the public key.
    pub fn dnskey_rdata(&self) -> Vec<u8> {
        dnskey_rdata(&self.public())
    }

    /// The key tag (RFC 4034 appendix B) of its DNSKEY.
    pub fn tag(&self) -> u16 {
        key_tag(&self.dnskey_rdata())
    }

    /// DS RDATA (SHA-256) for the parent, `zone` the key's owner.
    pub fn ds_rdata(&self, zone: &Name) -> Vec<u8> {
        ds_rdata(zone, &self.dnskey_rdata())
    }

    /// ECDSA P-256 with SHA-256 over `data`, r then s (RFC 6605 §4); deterministic (RFC
    /// 6979): the same data always signs to the same bytes.
    pub fn sign(&self, data: &[u8]) -> [u8; 64] {
        let sig: Signature = self.signing.sign(data);
        let mut out = [0u8; 64];
        out.copy_from_slice(&sig.to_bytes());
        out
    }
}

fn public_of(v: &VerifyingKey) -> [u8; 64] {
    let point = v.to_sec1_point(false);
    let b = point.as_bytes();
    let mut out = [0u8; 64];
    // 0x04, then x and y.
    out.copy_from_slice(&b[1..65]);
    out
}

pub fn dnskey_rdata(public: &[u8; 64]) -> Vec<u8> {
    let mut r = Vec::with_capacity(68);
    r.extend_from_slice(&FLAGS_CSK.to_be_bytes());
    r.push(PROTOCOL);
    r.push(ALGORITHM);
    r.extend_from_slice(public);
    r
}

pub fn key_tag(dnskey_rdata: &[u8]) -> u16 {
    let mut ac: u32 = 0;
    for (i, &b) in dnskey_rdata.iter().enumerate() {
        ac += if i & 1 == 1 {
            u32::from(b)
        } else {
            u32::from(b) << 8
        };
    }
    ac += (ac >> 16) & 0xffff;
    (ac & 0xffff) as u16
}

pub fn ds_rdata(zone: &Name, dnskey_rdata: &[u8]) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(zone.wire());
    h.update(dnskey_rdata);
    let mut r = Vec::with_capacity(36);
    r.extend_from_slice(&key_tag(dnskey_rdata).to_be_bytes());
    r.push(ALGORITHM);
    r.push(DIGEST_SHA256);
    r.extend_from_slice(&h.finalize());
    r
}

/// Whether `sig` (r then s) is `public`'s ECDSA P-256/SHA-256 signature over `data`: what a
/// validator checks, and what an edge that holds no key checks of what it is given.
pub fn verify(public: &[u8; 64], data: &[u8], sig: &[u8]) -> bool {
    use p256::ecdsa::signature::Verifier;
    let mut sec1 = [0u8; 65];
    sec1[0] = 4;
    sec1[1..].copy_from_slice(public);
    let (Ok(v), Ok(s)) = (
        VerifyingKey::from_sec1_bytes(&sec1),
        Signature::from_slice(sig),
    ) else {
        return false;
    };
    v.verify(data, &s).is_ok()
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub fn base64_encode(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                s.push(B64[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

pub fn base64_decode(s: &str) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|c| !c.is_ascii_whitespace()) {
        if c == b'=' {
            break;
        }
        let v = B64
            .iter()
            .position(|&x| x == c)
            .with_context(|| format!("{:?} is not base64", c as char))?;
        acc = (acc << 6) | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6605 §6.1's example: the key, its DNSKEY and the DS it gives for example.net.
    const RFC6605_PRIVATE: &str = "GU6SnQ/Ou+xC5RumuIUIuJZteXT2z0O/ok1s38Et6mQ=";
    const RFC6605_DNSKEY: &str =
        "GojIhhXUN/u4v54ZQqGSnyhWJwaubCvTmeexv7bR6edbkrSqQpF64cYbcB7wNcP+e+MAnLr+Wi9xMWyQLc8NAA==";
    const RFC6605_DS: &str = "b4c8c1fe2e7477127b27115656ad6256f424625bf5c1e2770ce6d6e37df61d17";

    #[test]
    fn rfc_6605_example() {
        let k = ZoneKey::from_secret(&base64_decode(RFC6605_PRIVATE).unwrap()).unwrap();
        assert_eq!(base64_encode(&k.public()), RFC6605_DNSKEY);
        assert_eq!(k.tag(), 55648);
        let zone = Name::parse("example.net.").unwrap();
        let ds = k.ds_rdata(&zone);
        assert_eq!(&ds[..4], &[0xd9, 0x60, 13, 2]);
        let hex: String = ds[4..].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, RFC6605_DS);
    }

    #[test]
    fn signs_deterministically_and_verifies() {
        let k = ZoneKey::from_secret(&[7u8; 32]).unwrap();
        let a = k.sign(b"some rrset");
        assert_eq!(a, k.sign(b"some rrset"));
        assert_ne!(a, k.sign(b"another rrset"));
        assert!(verify(&k.public(), b"some rrset", &a));
        assert!(!verify(&k.public(), b"some rrsex", &a));
    }

    #[test]
    fn bind_file_round_trip_and_refusals() {
        let k = ZoneKey::from_secret(&[9u8; 32]).unwrap();
        let text = k.to_bind_private();
        assert_eq!(ZoneKey::from_file_text(&text).unwrap().public(), k.public());
        let rsa = text.replace("13 (ECDSAP256SHA256)", "8 (RSASHA256)");
        assert!(ZoneKey::from_file_text(&rsa)
            .unwrap_err()
            .to_string()
            .contains("algorithm 8"));
        assert!(ZoneKey::from_file_text("hello").is_err());
        assert!(!format!("{k:?}").contains("PrivateKey"));
    }

    #[test]
    fn base64() {
        for b in [&b""[..], b"f", b"fo", b"foo", b"foob", b"fooba", b"foobar"] {
            assert_eq!(base64_decode(&base64_encode(b)).unwrap(), b);
        }
        assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
    }
}
