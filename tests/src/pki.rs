//! Test certificates (rcgen): a CA, a server certificate for the addresses a test dials
//! (IP SANs), a client certificate the CA signed, and one from another CA, written as PEM
//! files into a test's directory.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// The PEM files one test uses.
pub struct Pki {
    /// The CA that signed the server's and the client's certificates.
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// Another CA, and a client certificate it signed (refused where `ca` is the client CA).
    pub other_ca: PathBuf,
    pub other_client_cert: PathBuf,
    pub other_client_key: PathBuf,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(p, KeyPair::generate().expect("a key")).expect("a CA")
}

fn leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
    dir: &Path,
    stem: &str,
) -> (PathBuf, PathBuf) {
    let names: Vec<String> = names.iter().map(ToString::to_string).collect();
    let mut p = CertificateParams::new(names).expect("leaf params");
    p.distinguished_name.push(DnType::CommonName, stem);
    p.extended_key_usages = vec![usage];
    let key = KeyPair::generate().expect("a key");
    let cert = p.signed_by(&key, issuer).expect("signing");
    let (c, k) = (
        dir.join(format!("{stem}.pem")),
        dir.join(format!("{stem}.key")),
    );
    std::fs::write(&c, cert.pem()).expect("writing a certificate");
    std::fs::write(&k, key.serialize_pem()).expect("writing a key");
    (c, k)
}

impl Pki {
    /// Writes the files into `dir`; the server's certificate names `addresses` (and
    /// 127.0.0.1 and ::1).
    pub fn new(dir: &Path, addresses: &[&str]) -> Pki {
        let main = ca("director test CA");
        let other = ca("another CA");
        let mut names = vec!["127.0.0.1", "::1"];
        names.extend_from_slice(addresses);
        let (server_cert, server_key) = leaf(
            &main,
            &names,
            ExtendedKeyUsagePurpose::ServerAuth,
            dir,
            "server",
        );
        let (client_cert, client_key) = leaf(
            &main,
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
            dir,
            "client",
        );
        let (other_client_cert, other_client_key) = leaf(
            &other,
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
            dir,
            "other-client",
        );
        let (ca_path, other_ca) = (dir.join("ca.pem"), dir.join("other-ca.pem"));
        std::fs::write(&ca_path, main.pem()).expect("writing the CA");
        std::fs::write(&other_ca, other.pem()).expect("writing the other CA");
        Pki {
            ca: ca_path,
            server_cert,
            server_key,
            client_cert,
            client_key,
            other_ca,
            other_client_cert,
            other_client_key,
        }
    }
}

/// `director-ctl web hash-password` (cost 4: fast, for tests), the password on its
/// standard input.
pub fn hash_password(password: &str) -> String {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(crate::netns::ctl_binary())
        .args(["web", "hash-password", "--cost", "4"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("running director-ctl web hash-password");
    writeln!(child.stdin.take().expect("its stdin"), "{password}").expect("writing");
    let out = child.wait_with_output().expect("its output");
    assert!(out.status.success(), "web hash-password failed");
    let h = String::from_utf8(out.stdout)
        .expect("text")
        .trim()
        .to_string();
    assert!(h.starts_with("$2b$04$") && !h.contains(password), "{h}");
    h
}

impl Pki {
    /// A `--web-config` file in `dir`: TLS with the server's certificate, and `extra`
    /// (`client_ca = ...`, `[bearer_tokens]` ...).
    pub fn web_config(&self, dir: &Path, name: &str, extra: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(
            &path,
            format!(
                "tls_cert = {:?}\ntls_key = {:?}\n{extra}",
                self.server_cert.display().to_string(),
                self.server_key.display().to_string()
            ),
        )
        .expect("writing a web config");
        path
    }
}
